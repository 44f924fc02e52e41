"""Models of a TrainingJob's training-aware lifecycle: spec.progress, spec.checkpoint and
status.progress (issue 24). `trainop.api.trainingjob` embeds them; `trainop.progress` (the
pure rules) and `trainop.handlers.progress` (the report endpoint) fill them in; the trainer
side is `trainop.launcher.progress`. See docs/progress.md."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from trainop.api.base import ApiModel

# The audience of the projected ServiceAccount token a pod sends with its reports: a token
# for the apiserver (or any other audience) is refused by the report endpoint
# (https://kubernetes.io/docs/reference/access-authn-authz/service-accounts-admin/#bound-service-account-token-volume).
PROGRESS_AUDIENCE = "trainop.dev/progress"

# The endpoint's paths, on --progress-port: trainop's own reports, and the `trainerStatus`
# body of Kubeflow Trainer's status protocol (KEP-2779) that transformers' KubeflowCallback
# POSTs to $KUBEFLOW_TRAINER_SERVER_URL (trainop.trainerstatus; docs/progress.md).
PROGRESS_PATH = "/v1/progress"
TRAINER_STATUS_PATH = "/v1/trainer-status"


class ProgressSpec(ApiModel):
    total_steps: int | None = Field(
        default=None,
        ge=1,
        description="Steps the training runs in all; with it status.progress shows the "
        "fraction done and an ETA. Empty: step and rate only.",
    )
    warmup_steps: int = Field(
        default=20,
        ge=0,
        description="Steps after a (re)start whose step time is not judged (compilation, "
        "caches, NCCL set-up).",
    )
    startup_deadline_seconds: int | None = Field(
        default=None,
        ge=0,
        le=86400,
        description="How long a running gang may go without its first progress report "
        "before condition Progressing turns False (reason NoReport, with a Warning Event): "
        "a gang whose pods run but whose trainer never reports has likely never met. "
        "Empty: 600 when the job expects reports (spec.checkpoint or spec.progress."
        "totalSteps set) and the operator wires progress reports, else not judged; 0: off.",
    )
    degraded_factor: float = Field(
        default=1.5,
        ge=1.05,
        le=100,
        description="The job is Degraded when its step time after warm-up is this many times "
        "the expected one (its earlier placements', scaled by the placements' allreduce "
        "estimates).",
    )


class CheckpointSpec(ApiModel):
    grace_period_seconds: int = Field(
        default=120,
        ge=0,
        le=3600,
        description="How long trainop waits, before it preempts or drains the gang, for a "
        "checkpoint newer than its request to be reported (0: no wait). A trainer that "
        "reports none by then is evicted anyway, and the Preempted condition says so.",
    )
    signal: Literal["SIGUSR1", "SIGUSR2", "SIGTERM", "SIGINT", "None"] = Field(
        default="SIGUSR1",
        description="The signal trainop-launch sends the trainer it runs when a checkpoint "
        "is asked for (it polls the report endpoint). None: no signal; the trainer reads "
        "Reporter.checkpoint_requested() (e.g. under torchrun, which does not pass SIGUSR1 on).",
    )
    ranks: Literal["RankZero", "All"] = Field(
        default="RankZero",
        description="Who is signalled: rank 0's trainer only (it writes the checkpoint) or "
        "every rank (each writes its own shard).",
    )
    volume: str = Field(
        default="",
        max_length=63,
        description="Where checkpoints live: the name of a volume of the pod template, "
        "mounted by the trainer's containers (the same mountPath in each). Required: a "
        "reported checkpoint path outside it is refused, and TRAINOP_RESUME_FROM only ever "
        "points inside it (docs/progress.md).",
    )
    path: str = Field(
        default="",
        max_length=255,
        description="A directory under the volume's mount, relative (e.g. runs/bert; no "
        "leading /, no . or .. parts); empty: the whole mount. Reported checkpoint paths must "
        "lie under <mountPath>/<path>.",
    )


class CheckpointRef(ApiModel):
    path: str = Field(description="Where the trainer wrote the checkpoint.")
    step: int = Field(ge=0, description="The step it holds.")
    time: str | None = Field(default=None, description="When it was reported (RFC 3339).")


class RankReport(ApiModel):
    rank: int = Field(ge=0, description="The reporting rank.")
    node: str = Field(default="", description="The node its pod runs on.")
    step_seconds: float = Field(ge=0, description="Its last reported step time.")


class TrainerMetric(ApiModel):
    name: str = Field(description="The metric's name as the trainer reported it, e.g. loss.")
    value: str = Field(description='Its latest value, as reported (a string, e.g. "0.2347").')


class ProgressStatus(ApiModel):
    step: int = Field(default=0, ge=0, description="Last step reported by rank 0.")
    total_steps: int | None = Field(default=None, description="spec.progress.totalSteps.")
    summary: str = Field(
        default="", description='What `kubectl get tj` shows, e.g. "1200/5000 (24%)".'
    )
    step_seconds: float | None = Field(default=None, description="Seconds per step, last report.")
    samples_per_second: float | None = Field(default=None, description="Throughput reported.")
    tokens_per_second: float | None = Field(default=None, description="Throughput reported.")
    steps_per_second: float | None = Field(
        default=None, description="Rate from the last two reports (steps per second)."
    )
    eta: str | None = Field(default=None, description="Expected end (RFC 3339) at that rate.")
    percentage: int | None = Field(
        default=None,
        ge=0,
        le=100,
        description="Percent done as the trainer reported it (Kubeflow trainerStatus "
        "progressPercentage); empty with trainop's own reports, whose summary is step/total.",
    )
    metrics: list[TrainerMetric] = Field(
        default_factory=list,
        description="The trainer's latest metrics (loss, learning_rate, ...) from its newest "
        "Kubeflow trainerStatus report.",
    )
    source: Literal["trainop", "kubeflow"] | None = Field(
        default=None,
        description="Which protocol moves the progress: trainop (its Reporter; it wins once it "
        "has reported) or kubeflow (a trainerStatus body, e.g. transformers' KubeflowCallback).",
    )
    phase: str = Field(default="", description="Free-form phase the trainer reported.")
    last_checkpoint: CheckpointRef | None = Field(
        default=None,
        description="The newest checkpoint reported; TRAINOP_RESUME_FROM on re-admission.",
    )
    last_report_time: str | None = Field(default=None, description="Time of the last report.")
    ranks: list[RankReport] = Field(
        default_factory=list, description="Slowest ranks' step times (straggler hunting)."
    )
    baseline_step_seconds: float | None = Field(
        default=None,
        description="Best step time after warm-up on the job's previous placement (the "
        "Degraded rule's reference).",
    )
    baseline_allreduce_seconds: float | None = Field(
        default=None, description="That placement's estimated allreduce time."
    )
    placement_key: str | None = Field(
        default=None, description="The nodes (rank order) the step times below were taken on."
    )
    placement_start_step: int | None = Field(
        default=None, description="The step at which the current placement began reporting."
    )
    placement_allreduce_seconds: float | None = Field(
        default=None, description="The current placement's estimated allreduce time."
    )
    best_step_seconds: float | None = Field(
        default=None, description="Best step time after warm-up on the current placement."
    )
    replaced_at: str | None = Field(
        default=None,
        description="When a Degraded gang was last restarted elsewhere (replaceDegraded).",
    )


class CheckpointRequest(ApiModel):
    requested_at: str = Field(description="When trainop asked for a checkpoint (RFC 3339).")
    deadline: str = Field(description="When it evicts the gang anyway (RFC 3339).")
    step: int = Field(default=0, description="The step reported when it asked.")
    reason: str = Field(default="", description="Preempted or NodeDrain.")

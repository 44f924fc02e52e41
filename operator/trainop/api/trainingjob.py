"""Pydantic models of the TrainingJob resource (spec and status); the CRD is generated from them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from trainop.api.base import ApiModel
from trainop.api.progress import CheckpointRequest, CheckpointSpec, ProgressSpec, ProgressStatus

FrameworkName = Literal["pytorch", "tensorflow", "jax", "mpi", "paddle", "mxnet"]
Role = Literal["Worker", "Chief", "PS", "Evaluator", "Launcher", "Server", "Scheduler"]
ROLES: tuple[str, ...] = ("Worker", "Chief", "PS", "Evaluator", "Launcher", "Server", "Scheduler")
Phase = Literal[
    "Created",
    "Queued",
    "Admitted",
    "Running",
    "Restarting",
    "Succeeded",
    "Failed",
    "Suspended",
    "Invalid",
]
PHASES: tuple[str, ...] = Phase.__args__  # type: ignore[attr-defined]
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

# Conditions: one per phase, plus Preempted (set by the queue on eviction).


# A DNS-1123 subdomain: what a PriorityClass or TrainingQueue name must be.
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def _cel(rule: str, message: str, field_path: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"rule": rule, "message": message}
    if field_path:
        out["fieldPath"] = field_path
    return out


class Framework(ApiModel):
    name: FrameworkName = Field(
        description="Training framework: pytorch | tensorflow | jax | mpi | paddle | mxnet. "
        "It decides the roles allowed in replicaSpecs, the env each pod gets and the NGC image."
    )
    version: str | None = Field(
        default=None,
        pattern=r"^\d+(\.\d+){0,2}$",
        description='Framework version wanted, matched by prefix ("2.4" matches 2.4.0a0). '
        "Optional: the newest release that fits spec.cuda and the fleet is used.",
    )


class ReplicaSpec(ApiModel):
    replicas: int = Field(default=1, ge=1, le=4096, description="Number of pods of this role.")
    gpus: int = Field(
        default=0,
        ge=0,
        le=64,
        description="GPUs (nvidia.com/gpu) per pod of this role. Pods with GPUs are ranked and "
        "placed as one gang; 0 means a CPU-only role (parameter server, MPI launcher).",
    )
    template: dict[str, Any] = Field(
        default_factory=dict,
        description="A PodTemplateSpec merged into every generated pod of this role: the "
        "generated env, labels, resources and affinity are added to yours, yours win on "
        "conflicts except pod name, labels trainop owns and the placement pin.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class Placement(ApiModel):
    topology: Literal["none", "node", "clique", "rack", "block"] = Field(
        default="rack",
        description="Network domain the gang should fit in: node | clique | rack | block | "
        "none. clique is one multi-node NVLink domain (label nvidia.com/gpu.clique, e.g. a "
        "GB200 NVL72 rack). The smallest domain that holds the whole gang is always preferred "
        "(one node, one NVLink clique, one rack, one block).",
    )
    mode: Literal["Required", "Preferred"] = Field(
        default="Preferred",
        description="Required: wait rather than span two domains of `topology`. Preferred: "
        "span more domains when one does not fit.",
    )
    gpu_products: list[str] = Field(
        default_factory=list,
        description="Allowed nvidia.com/gpu.product label values (e.g. NVIDIA-H100-80GB-HBM3); "
        "empty allows any product that can run the image.",
    )
    replace_degraded: bool = Field(
        default=False,
        description="true: a gang that turns Degraded (see spec.progress.degradedFactor) is "
        "restarted on other nodes, at most once per job per hour.",
    )
    migratable: bool = Field(
        default=True,
        description="false: never move this running gang to a better placement by checkpoint "
        "and restart (where the operator's migration is on and the job has spec.checkpoint).",
    )


class Network(ApiModel):
    fabric: Literal["Auto", "InfiniBand", "RoCE", "TCP"] = Field(
        default="Auto",
        description="Fabric NCCL uses between pods: Auto takes it from the node's "
        "FabricProfile; TCP forces sockets; InfiniBand/RoCE require RDMA nodes.",
    )


class RunPolicy(ApiModel):
    restart_policy: Literal["Never", "OnFailure", "ExitCode"] = Field(
        default="OnFailure",
        description="What a failed pod does to the job. Never: the job fails. OnFailure: "
        "the whole gang restarts (counted against backoffLimit). ExitCode: exit codes "
        "1-127 are permanent (job fails), 128-255 (signals, e.g. 137 OOM-kill) restart the gang.",
    )
    backoff_limit: int = Field(
        default=3, ge=0, le=1000, description="Gang restarts allowed before the job is Failed."
    )
    active_deadline_seconds: int | None = Field(
        default=None,
        ge=1,
        description="Wall-clock seconds from start after which a running job is Failed "
        "(reason DeadlineExceeded).",
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None,
        ge=0,
        description="Seconds after Succeeded/Failed after which the TrainingJob is deleted.",
    )
    suspend: bool = Field(
        default=False,
        description="true deletes the job's pods and holds it; false resumes (a new gang).",
    )
    success_policy: Literal["AllWorkers", "RankZero"] = Field(
        default="AllWorkers",
        description="AllWorkers: Succeeded when every pod of the ranked roles has exited 0 "
        "(a TensorFlow Chief counts for its job). RankZero: Succeeded when rank 0 exits 0; "
        "the other pods are then stopped.",
    )


class GpuSharing(ApiModel):
    mode: Literal["MIG", "Shared"] = Field(
        description="MIG: one MIG slice of profile migProfile (nodes under the MIG single "
        "strategy, product '...-MIG-<profile>', or mixed, resource nvidia.com/mig-<profile>). "
        "Shared: one time-sliced or MPS replica of a GPU (nodes with nvidia.com/gpu.replicas "
        "> 1). Only for jobs with one GPU pod asking for gpus: 1."
    )
    mig_profile: str | None = Field(
        default=None,
        pattern=r"^\d+g\.\d+gb$",
        description='MIG profile, e.g. "1g.5gb" (required for mode MIG).',
    )


class Elastic(ApiModel):
    """An elastic collective role: trainop runs it at any size in [minReplicas, maxReplicas]."""

    min_replicas: int = Field(
        ge=1,
        le=4096,
        description="Fewest Worker pods the job runs with: it is admitted as soon as this many "
        "fit together, and preemption shrinks it down to this many before evicting it.",
    )
    max_replicas: int = Field(
        ge=1,
        le=4096,
        description="Most Worker pods: admitted at the largest size in range that fits, and "
        "grown towards this when GPUs free up. spec.replicaSpecs.Worker.replicas must equal it.",
    )
    rendezvous_last_call_seconds: int | None = Field(
        default=None,
        ge=0,
        le=600,
        description="How long torchrun's c10d rendezvous waits for more workers once "
        "minReplicas have joined (its last_call_timeout; torchrun's default is 30). Every "
        "resize re-forms the rendezvous, so a shorter wait resumes training sooner when the "
        "pods start together.",
    )


# Frameworks whose launcher re-forms the collective when members come and go: torchrun's
# elastic agent with the c10d rendezvous (https://pytorch.org/docs/stable/elastic/run.html).
ELASTIC_FRAMEWORKS: tuple[str, ...] = ("pytorch",)


class RuntimeRef(ApiModel):
    """Which runtime a TrainingJob starts from."""

    kind: Literal["ClusterTrainingRuntime", "TrainingRuntime"] = Field(
        default="ClusterTrainingRuntime",
        description="ClusterTrainingRuntime (cluster-scoped, the default) or TrainingRuntime "
        "(in the job's namespace).",
    )
    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        description="The runtime's metadata.name.",
    )


class RuntimeStatus(ApiModel):
    """The runtime a job's spec was merged with, as status records it."""

    kind: str = Field(description="ClusterTrainingRuntime or TrainingRuntime.")
    name: str = Field(description="The runtime's name.")
    generation: int | None = Field(
        default=None,
        description="The runtime's metadata.generation the job's current gang was planned "
        "with; a runtime edited later changes only the job's next gang.",
    )


class TrainingJobSpec(ApiModel):
    framework: Framework = Field(
        description="Framework and optional version. Required unless spec.runtimeRef names "
        "a runtime that sets it."
    )
    runtime_ref: RuntimeRef | None = Field(
        default=None,
        description="The ClusterTrainingRuntime or TrainingRuntime this job starts from: "
        "its framework, image, pod templates and defaults, with this job's own fields "
        "winning (docs/runtimes.md). Empty: the job states everything itself.",
    )
    cuda: str | None = Field(
        default=None,
        pattern=r"^\d+\.\d+$",
        description='Minimum CUDA version, e.g. "12.4". Drives the NGC image choice and '
        "which nodes' drivers and GPUs can run the job.",
    )
    image: str | None = Field(
        default=None,
        description="Explicit container image. When it is an NGC tag the catalog still knows "
        "its CUDA; otherwise spec.cuda states it. Empty: the catalog picks the NGC image.",
    )
    queue: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="TrainingQueue name; empty uses the namespace's default queue.",
    )
    priority_class_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="PriorityClass whose value orders jobs within the queue; it must exist "
        "(the job is Invalid, with nothing created, until it does).",
    )
    replica_specs: dict[str, ReplicaSpec] = Field(
        description="Role -> replica spec. Worker always; Chief/PS/Evaluator for TensorFlow; "
        "Launcher for MPI; Server/Scheduler for MXNet. Optional with spec.runtimeRef: the "
        "runtime's roles are merged in.",
        min_length=1,
        max_length=len(ROLES),
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "self.all(k, k in ['Worker', 'Chief', 'PS', 'Evaluator', 'Launcher', "
                    "'Server', 'Scheduler'])",
                    "roles must be Worker, Chief, PS, Evaluator, Launcher, Server or Scheduler",
                ),
                _cel(
                    "!('Chief' in self) || !has(self['Chief'].replicas) || "
                    "self['Chief'].replicas <= 1",
                    "at most one Chief: set spec.replicaSpecs.Chief.replicas to 1",
                ),
                _cel(
                    "!('Evaluator' in self) || !has(self['Evaluator'].replicas) || "
                    "self['Evaluator'].replicas <= 1",
                    "at most one Evaluator: set spec.replicaSpecs.Evaluator.replicas to 1",
                ),
                _cel(
                    "!('Launcher' in self) || !has(self['Launcher'].replicas) || "
                    "self['Launcher'].replicas == 1",
                    "exactly one Launcher: set spec.replicaSpecs.Launcher.replicas to 1",
                ),
                _cel(
                    "!('Scheduler' in self) || !has(self['Scheduler'].replicas) || "
                    "self['Scheduler'].replicas == 1",
                    "exactly one Scheduler: set spec.replicaSpecs.Scheduler.replicas to 1",
                ),
            ]
        },
    )
    placement: Placement = Field(
        default_factory=Placement,
        description="Gang placement over the network topology.",
        json_schema_extra={"default": {}},
    )
    network: Network = Field(
        default_factory=Network,
        description="Fabric selection for NCCL.",
        json_schema_extra={"default": {}},
    )
    gpu_sharing: GpuSharing | None = Field(
        default=None,
        description="Run the single GPU pod on a slice of a GPU (MIG or time-slicing/MPS) "
        "instead of a whole one. Empty: whole GPUs, and nodes that share GPUs are never used.",
    )
    nccl_env: dict[str, str] = Field(
        default_factory=dict,
        description="NCCL_* (or any) env set on every pod; wins over trainop's tuned values.",
    )
    run_policy: RunPolicy = Field(
        default_factory=RunPolicy,
        description="Restarts, deadlines, clean-up and suspension.",
        json_schema_extra={"default": {}},
    )
    progress: ProgressSpec = Field(
        default_factory=ProgressSpec,
        description="What trainop knows of the training's length and speed (progress reports).",
        json_schema_extra={"default": {}},
    )
    checkpoint: CheckpointSpec | None = Field(
        default=None,
        description="Ask the trainer for a checkpoint before trainop preempts or drains the "
        "gang, and wait for it up to gracePeriodSeconds. Empty: the gang is deleted at once.",
    )
    elastic: Elastic | None = Field(
        default=None,
        description="Run the Worker role elastically (pytorch only): torchrun's c10d "
        "rendezvous with PET_NNODES=min:max; admitted at the largest size in range that fits, "
        "grown when GPUs free up, shrunk down to minReplicas instead of evicted. Empty: a "
        "fixed-size gang.",
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "self.minReplicas <= self.maxReplicas",
                    "spec.elastic.minReplicas must not exceed spec.elastic.maxReplicas",
                )
            ]
        },
    )

    def worker_gpus_at(self, replicas: int) -> int:
        """The job's GPUs with the Worker role at `replicas` pods (elastic sizing)."""
        worker = self.replica_specs["Worker"]
        return self.total_gpus - worker.gpus * (worker.replicas - replicas)

    @field_validator("replica_specs")
    @classmethod
    def _known_roles(cls, value: dict[str, ReplicaSpec]) -> dict[str, ReplicaSpec]:
        unknown = sorted(set(value) - set(ROLES))
        if unknown:
            raise ValueError(f"unknown role {unknown[0]!r}: roles are {', '.join(ROLES)}")
        if "Worker" not in value:
            raise ValueError("a Worker role is required: add spec.replicaSpecs.Worker")
        return value

    @property
    def total_gpus(self) -> int:
        return sum(r.replicas * r.gpus for r in self.replica_specs.values())

    @property
    def total_pods(self) -> int:
        return sum(r.replicas for r in self.replica_specs.values())


def elastic_problem(spec: TrainingJobSpec) -> tuple[str, str] | None:
    """(field, message with the fix) when spec.elastic cannot be honoured; None when fine.
    The same rules as the CEL below, for `trainop render` and an API server without CEL."""
    el = spec.elastic
    if el is None:
        return None
    if el.min_replicas > el.max_replicas:
        return (
            "spec.elastic.minReplicas",
            f"{el.min_replicas} exceeds spec.elastic.maxReplicas ({el.max_replicas}): lower "
            "minReplicas or raise maxReplicas",
        )
    if spec.framework.name not in ELASTIC_FRAMEWORKS:
        return (
            "spec.elastic",
            f"framework {spec.framework.name} cannot resize a running gang; remove "
            f"spec.elastic or use framework {' or '.join(ELASTIC_FRAMEWORKS)}",
        )
    worker = spec.replica_specs.get("Worker")
    if worker is not None and worker.replicas != el.max_replicas:
        return (
            "spec.replicaSpecs.Worker.replicas",
            f"{worker.replicas} must equal spec.elastic.maxReplicas ({el.max_replicas}) in an "
            "elastic job: set both to the largest size",
        )
    return None


# Cross-field rules of the job as written. With spec.runtimeRef the job may leave
# framework and replicaSpecs to its runtime, so each rule reads only what the job states
# (has() guards); trainop.runtimes checks the merged spec with the same rules
# (planner.check_semantics) before anything is created.
_BOTH = "!has(self.framework) || !has(self.replicaSpecs) || "
TRAININGJOB_SPEC_VALIDATIONS = [
    _cel(
        "has(self.framework) || has(self.runtimeRef)",
        "spec.framework is required: set it, or name a runtime that sets it in spec.runtimeRef",
        ".framework",
    ),
    _cel(
        "has(self.replicaSpecs) || has(self.runtimeRef)",
        "spec.replicaSpecs is required: add spec.replicaSpecs.Worker, or name a runtime in "
        "spec.runtimeRef",
        ".replicaSpecs",
    ),
    _cel(
        "!has(self.replicaSpecs) || has(self.runtimeRef) || 'Worker' in self.replicaSpecs",
        "a Worker role is required: add spec.replicaSpecs.Worker",
        ".replicaSpecs",
    ),
    _cel(
        _BOTH + "self.framework.name != 'mpi' || 'Launcher' in self.replicaSpecs || "
        "has(self.runtimeRef)",
        "an mpi job needs spec.replicaSpecs.Launcher (replicas: 1)",
        ".replicaSpecs",
    ),
    _cel(
        _BOTH + "self.framework.name == 'mpi' || !('Launcher' in self.replicaSpecs)",
        "Launcher is a role of mpi jobs only: remove spec.replicaSpecs.Launcher or use "
        "framework mpi",
        ".replicaSpecs",
    ),
    _cel(
        _BOTH + "self.framework.name == 'tensorflow' || !('Chief' in self.replicaSpecs || "
        "'PS' in self.replicaSpecs || 'Evaluator' in self.replicaSpecs)",
        "Chief, PS and Evaluator are roles of tensorflow jobs only",
        ".replicaSpecs",
    ),
    _cel(
        _BOTH + "self.framework.name == 'mxnet' || !('Server' in self.replicaSpecs || "
        "'Scheduler' in self.replicaSpecs)",
        "Server and Scheduler are roles of mxnet jobs only",
        ".replicaSpecs",
    ),
    _cel(
        _BOTH + "self.framework.name != 'mxnet' || has(self.runtimeRef) || "
        "('Scheduler' in self.replicaSpecs && 'Server' in self.replicaSpecs)",
        "an mxnet job needs spec.replicaSpecs.Scheduler and spec.replicaSpecs.Server",
        ".replicaSpecs",
    ),
    _cel(
        "!has(self.elastic) || !has(self.framework) || self.framework.name in ['pytorch']",
        "spec.elastic is for framework pytorch only (torchrun's elastic agent): remove it",
        ".elastic",
    ),
    _cel(
        "!has(self.elastic) || !has(self.replicaSpecs) || !('Worker' in self.replicaSpecs) || "
        "!has(self.replicaSpecs['Worker'].replicas) || "
        "self.replicaSpecs['Worker'].replicas == self.elastic.maxReplicas",
        "spec.replicaSpecs.Worker.replicas must equal spec.elastic.maxReplicas",
        ".elastic",
    ),
]


# Rules on the whole object (CEL may read metadata.name at the root): every generated name
# must fit. Pods are `<job>-<role>-<index>` and double as hostnames (DNS labels, <= 63); the
# headless Service `<job>` must be a DNS-1035 label. trainop.validation checks the same.
TRAININGJOB_ROOT_VALIDATIONS = [
    _cel(
        "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
        "metadata.name must be a DNS-1035 label (lower-case letters, digits and '-', starting "
        "with a letter, no dots): it names the job's headless Service",
    ),
    _cel(
        "!has(self.spec.replicaSpecs) || self.spec.replicaSpecs.all(r, "
        "self.metadata.name.size() + r.size() + "
        "string((has(self.spec.replicaSpecs[r].replicas) ? "
        "self.spec.replicaSpecs[r].replicas : 1) - 1).size() + 2 <= 63)",
        "metadata.name is too long: pod names <name>-<role>-<index> are hostnames of at most "
        "63 characters; shorten metadata.name",
    ),
]


class Condition(ApiModel):
    type: str = Field(description="Condition type, e.g. Admitted, Running, Succeeded, Invalid.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(default="", description="CamelCase machine-readable reason.")
    message: str = Field(default="", description="Human-readable sentence, with the fix.")
    last_transition_time: str | None = Field(default=None, description="RFC 3339 time.")
    observed_generation: int | None = Field(default=None, description="Generation it reflects.")


class ReplicaStatus(ApiModel):
    pending: int = Field(
        default=0, description="Pods not yet running (gated, unscheduled, starting)."
    )
    running: int = Field(default=0, description="Pods running.")
    succeeded: int = Field(default=0, description="Pods exited 0.")
    failed: int = Field(default=0, description="Pods exited non-zero.")


class PlacementStatus(ApiModel):
    level: str | None = Field(default=None, description="node | clique | rack | block | cluster.")
    domain: str | None = Field(
        default=None, description="The domain holding the gang, e.g. rack-h100-a."
    )
    nodes: list[str] = Field(default_factory=list, description="Nodes in rank order.")
    span: dict[str, int] = Field(
        default_factory=dict, description="Distinct nodes/racks/blocks used."
    )
    score: float | None = Field(default=None, description="Placement score (lower is better).")
    estimated_allreduce_seconds: float | None = Field(
        default=None,
        description="The fabric cost model's estimate of one 1 GiB allreduce over the gang's "
        "GPUs on these nodes, in seconds (see docs/placement-cost.md).",
    )
    allreduce_bottleneck: str | None = Field(
        default=None,
        description="The widest link that allreduce crosses: node | clique | rack | block | "
        "cluster.",
    )
    imex: str | None = Field(
        default=None,
        description="Multi-node NVLink, for a gang across the trays of one NVLink clique: "
        "ComputeDomain (the gang's ComputeDomain <job>-imex gives each GPU pod an IMEX channel) "
        "or NotSetUp (operator config dra.computeDomains is off: NCCL crosses trays over the "
        "network). Unset for other placements (docs/mnnvl.md).",
    )


class FailureStatus(ApiModel):
    reason: str = Field(
        description="ExitCode | Signal | OOMKilled | Evicted | NodeLost | ImagePullFailed | "
        "NCCLError | PeerUnresolved | GPUXid | Unknown."
    )
    pod: str = Field(default="", description="The pod that failed.")
    exit_code: int | None = Field(default=None, description="Its non-zero exit code, if any.")
    retryable: bool = Field(
        default=False, description="Whether restartPolicy ExitCode restarts the gang for it."
    )
    message: str = Field(default="", description="What happened, in one sentence.")


class SizeEstimate(ApiModel):
    replicas: int = Field(description="Worker pods.")
    seconds: float = Field(description="Estimated seconds of one 1 GiB allreduce.")
    bottleneck: str = Field(default="", description="The widest link it crosses.")


class ElasticStatus(ApiModel):
    current_replicas: int = Field(
        default=0, description="Worker pods the job runs with now (live, not being deleted)."
    )
    target_replicas: int = Field(
        default=0, description="Worker pods admission gave the job: it grows or shrinks to this."
    )
    min_replicas: int = Field(default=0, description="spec.elastic.minReplicas.")
    max_replicas: int = Field(default=0, description="spec.elastic.maxReplicas.")
    allreduce_by_size: list[SizeEstimate] = Field(
        default_factory=list,
        description="The fabric cost model's 1 GiB allreduce estimate at each size from "
        "minReplicas to maxReplicas, for the gang of that size alone on the fleet (its best "
        "placement; see docs/placement-cost.md).",
    )


class MigrationStatus(ApiModel):
    phase: Literal["Moving", "Moved"] = Field(
        description="Moving: a checkpoint is asked for and the destination is reserved; "
        "Moved: the gang runs again."
    )
    source: list[str] = Field(default_factory=list, description="The nodes it moved from.")
    destination: list[str] = Field(default_factory=list, description="The nodes it moves to.")
    reserved: dict[str, int] = Field(
        default_factory=dict,
        description="GPUs per node held for it while it checkpoints and restarts.",
    )
    estimated_gain_seconds: float = Field(default=0.0, description="The move's estimated gain.")
    estimated_cost_seconds: float = Field(default=0.0, description="Its cost as estimated.")
    requested_at: str = Field(description="When the move was decided (RFC 3339).")
    moved_at: str | None = Field(default=None, description="When the gang ran again.")
    measured_cost_seconds: float | None = Field(
        default=None,
        description="From the checkpoint request to Running again: the cost of its next move.",
    )
    moves: int = Field(default=0, description="Moves of this job so far.")
    message: str = Field(default="", description="Why it moved: from, to, gain, cost.")


class TrainingJobStatus(ApiModel):
    phase: Phase | None = Field(default=None, description="Summary of the conditions.")
    conditions: list[Condition] = Field(default_factory=list, description="Lifecycle conditions.")
    replica_statuses: dict[str, ReplicaStatus] = Field(
        default_factory=dict, description="Pod counts per role."
    )
    gpus: int | None = Field(default=None, description="GPUs the job asks for in total.")
    framework: str | None = Field(
        default=None,
        description="The framework the job runs: its own spec.framework, or its runtime's "
        "(spec.runtimeRef). The FRAMEWORK column of kubectl get trainingjobs.",
    )
    image: str | None = Field(default=None, description="The image the pods run.")
    restart_count: int = Field(
        default=0, description="Gang restarts so far (not counting preemptions)."
    )
    start_time: str | None = Field(default=None, description="When the gang was first admitted.")
    completion_time: str | None = Field(default=None, description="When the job finished.")
    last_restart_time: str | None = Field(default=None, description="When the gang last restarted.")
    observed_generation: int | None = Field(
        default=None, description="Last spec generation acted on."
    )
    placement: PlacementStatus | None = Field(default=None, description="Where the gang landed.")
    queue_position: int | None = Field(
        default=None, description="1-based position among pending jobs of its queue."
    )
    pending_reason: str | None = Field(
        default=None, description="Quota | NoFit | Policy | Incompatible | QueueInvalid | Topology."
    )
    pending_message: str | None = Field(
        default=None, description="Why the job waits, in one sentence."
    )
    queue: str | None = Field(
        default=None,
        description="The TrainingQueue that admitted the job, or that it waits in "
        "((built-in) when no TrainingQueue serves its namespace).",
    )
    last_failure: FailureStatus | None = Field(
        default=None, description="The last pod failure, classified (see docs/failures.md)."
    )
    compatibility: str | None = Field(
        default=None,
        description="How the nodes run the image: Native (driver >= the release's own "
        "requirement), ForwardCompat (CUDA forward compatibility on a data-center GPU) or "
        "MinorVersionCompat (CUDA minor-version compatibility).",
    )
    image_tried: list[str] = Field(
        default_factory=list,
        description="The releases image choice tried, in order, and why each was refused.",
    )
    progress: ProgressStatus | None = Field(
        default=None, description="What the trainer reported (step, rate, checkpoint)."
    )
    checkpoint_request: CheckpointRequest | None = Field(
        default=None,
        description="An outstanding request for a checkpoint before the gang is evicted.",
    )
    elastic: ElasticStatus | None = Field(
        default=None, description="An elastic job's current and target size (spec.elastic)."
    )
    runtime: RuntimeStatus | None = Field(
        default=None,
        description="The runtime (spec.runtimeRef) and its generation the job's spec was "
        "merged with.",
    )
    migration: MigrationStatus | None = Field(
        default=None,
        description="The gang's last move to a better placement (operator config migration).",
    )

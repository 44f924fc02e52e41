"""Pydantic models of the runtimes a TrainingJob names with spec.runtimeRef.

A `ClusterTrainingRuntime` (cluster-scoped) or a `TrainingRuntime` (namespaced, seen by the
jobs of its namespace) is written once by a platform team: framework and version, CUDA, the
image (or the catalog's choice), a default pod template per role and defaults for placement,
network, run policy, progress, checkpoint and elastic settings. The same shape as
`TrainingJobSpec`, every field optional; `trainop.runtimes` merges a job onto its runtime
(the job's fields win, except those the runtime lists in `lockedFields`) and
`trainop.api.crdgen` generates both CRDs from these models.

Modelled on Kubeflow Trainer's runtimes
(https://github.com/kubeflow/trainer/blob/master/pkg/apis/trainer/v1alpha1/trainingruntime_types.go),
with trainop's own fields instead of a JobSet template.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from trainop.api.base import ApiModel
from trainop.api.progress import CheckpointSpec, ProgressSpec
from trainop.api.trainingjob import (
    ROLES,
    Elastic,
    Framework,
    GpuSharing,
    Network,
    Placement,
    RunPolicy,
)

CLUSTER_RUNTIME_KIND = "ClusterTrainingRuntime"
RUNTIME_KIND = "TrainingRuntime"
RUNTIME_KINDS: tuple[str, ...] = (CLUSTER_RUNTIME_KIND, RUNTIME_KIND)

# Top-level spec fields a runtime may lock (the job may not set them to another value), and
# `podSecurity`: the job's pod templates may not set the pod's or any container's
# securityContext, hostNetwork/hostPID/hostIPC, serviceAccountName or
# automountServiceAccountToken. docs/runtimes.md explains the rules.
LockableField = Literal[
    "framework",
    "cuda",
    "image",
    "placement",
    "network",
    "ncclEnv",
    "runPolicy",
    "progress",
    "checkpoint",
    "elastic",
    "gpuSharing",
    "priorityClassName",
    "podSecurity",
]
LOCKABLE_FIELDS: tuple[str, ...] = LockableField.__args__  # type: ignore[attr-defined]


class RuntimeReplicaSpec(ApiModel):
    """A role's defaults: pod count, GPUs per pod and the pod template jobs start from."""

    replicas: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="Default number of pods of this role; the job's replicaSpecs.<role>."
        "replicas wins.",
    )
    gpus: int | None = Field(
        default=None,
        ge=0,
        le=64,
        description="Default GPUs (nvidia.com/gpu) per pod of this role; the job's wins.",
    )
    template: dict[str, Any] = Field(
        default_factory=dict,
        description="The PodTemplateSpec every job naming this runtime starts from for this "
        "role: volumes, env, resources, tolerations, sidecars and init containers. The job's "
        "template is merged onto it (containers, initContainers, env, volumes and "
        "volumeMounts by name; see docs/runtimes.md).",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class TrainingRuntimeSpec(ApiModel):
    """What every TrainingJob naming this runtime in spec.runtimeRef starts from."""

    framework: Framework | None = Field(
        default=None,
        description="Framework and optional version of the jobs that name this runtime.",
    )
    cuda: str | None = Field(
        default=None,
        pattern=r"^\d+\.\d+$",
        description='Minimum CUDA version, e.g. "12.4": drives the NGC image choice.',
    )
    image: str | None = Field(
        default=None,
        description="Container image of the jobs; empty: the catalog picks the NGC image for "
        "the framework and CUDA.",
    )
    priority_class_name: str | None = Field(
        default=None,
        max_length=253,
        description="Default PriorityClass of the jobs.",
    )
    replica_specs: dict[str, RuntimeReplicaSpec] = Field(
        default_factory=dict,
        description="Role -> defaults (replicas, gpus, pod template) for the jobs' roles. A "
        "role listed here and not in the job is added to the job.",
        max_length=len(ROLES),
    )
    placement: Placement | None = Field(
        default=None, description="Default gang placement (topology, mode, GPU products)."
    )
    network: Network | None = Field(default=None, description="Default fabric selection.")
    gpu_sharing: GpuSharing | None = Field(
        default=None, description="Default GPU sharing (MIG or time-slicing)."
    )
    nccl_env: dict[str, str] = Field(
        default_factory=dict,
        description="NCCL_* (or any) env for every pod; the job's ncclEnv is merged on top.",
    )
    run_policy: RunPolicy | None = Field(
        default=None, description="Default restarts, deadlines, clean-up and success policy."
    )
    progress: ProgressSpec | None = Field(
        default=None, description="Default progress settings (report interval, degraded rule)."
    )
    checkpoint: CheckpointSpec | None = Field(
        default=None, description="Default checkpoint-before-preemption settings."
    )
    elastic: Elastic | None = Field(
        default=None, description="Default elastic range of the Worker role (pytorch only)."
    )
    locked_fields: list[LockableField] = Field(
        default_factory=list,
        description="Fields a job naming this runtime may not set to another value: "
        + ", ".join(LOCKABLE_FIELDS)
        + ". podSecurity: the job's pod templates may not set securityContext (pod or "
        "container), hostNetwork, hostPID, hostIPC, serviceAccountName or "
        "automountServiceAccountToken. A job that does is refused, naming the field.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )

    @field_validator("replica_specs")
    @classmethod
    def _known_roles(cls, value: dict[str, RuntimeReplicaSpec]) -> dict[str, RuntimeReplicaSpec]:
        unknown = sorted(set(value) - set(ROLES))
        if unknown:
            raise ValueError(f"unknown role {unknown[0]!r}: roles are {', '.join(ROLES)}")
        return value


RUNTIME_SPEC_VALIDATIONS = [
    {
        "rule": "!has(self.replicaSpecs) || self.replicaSpecs.all(k, k in ['Worker', 'Chief', "
        "'PS', 'Evaluator', 'Launcher', 'Server', 'Scheduler'])",
        "message": "roles must be Worker, Chief, PS, Evaluator, Launcher, Server or Scheduler",
        "fieldPath": ".replicaSpecs",
    },
]

"""Every TrainingJob spec field, and what `trainop convert` makes of it: which Kubeflow field
fills it, or why none does.

tests/unit/test_convert.py compares this table with the fields of `TrainingJobSpec` (nested
models included, `*` for a map's values), so a spec field added to the API without a
decision here fails a test: either a converter learns to fill it, or the table says why
Kubeflow has nothing for it. docs/migrate-from-kubeflow.md is the prose version.

Neighbours: the per-kind converters in this package; `trainop.api.trainingjob`.
"""

from __future__ import annotations

NONE = "no Kubeflow equivalent"

SPEC_FIELDS: dict[str, str] = {
    "framework": "the kind (PyTorchJob -> pytorch, TFJob -> tensorflow, JAXJob -> jax, ...) "
    "or a Trainer runtime's mlPolicy",
    "framework.name": "as framework",
    "framework.version": f"{NONE}: Kubeflow names an image, not a framework version",
    "runtimeRef": "TrainJob spec.runtimeRef (the runtime converts to a trainop runtime)",
    "runtimeRef.kind": "TrainJob spec.runtimeRef.kind",
    "runtimeRef.name": "TrainJob spec.runtimeRef.name",
    "cuda": f"{NONE}: the catalog reads the CUDA of an NGC image from its tag",
    "image": "the primary role's container image; TrainJob spec.trainer.image",
    "queue": "runPolicy.schedulingPolicy.queue",
    "priorityClassName": "runPolicy.schedulingPolicy.priorityClass",
    "replicaSpecs": "the replica specs (Master merges into Worker), a runtime's replicated "
    "Jobs node -> Worker and launcher -> Launcher",
    "replicaSpecs.*.replicas": "replicas; TrainJob spec.trainer.numNodes; mlPolicy.numNodes",
    "replicaSpecs.*.gpus": "nvidia.com/gpu of the training container; TrainJob "
    "spec.trainer.resourcesPerNode",
    "replicaSpecs.*.template": "the replica's pod template; TrainJob podTemplateOverrides, "
    "runtimePatches and spec.trainer",
    "placement": f"{NONE}: Kubeflow leaves placement to the scheduler",
    "placement.topology": f"{NONE}: no network-topology packing in Kubeflow",
    "placement.mode": f"{NONE}: as placement.topology",
    "placement.gpuProducts": f"{NONE}: a nodeSelector in the template is kept as it is",
    "placement.replaceDegraded": f"{NONE}: Kubeflow has no progress-based health",
    "placement.migratable": f"{NONE}: Kubeflow never moves a running job (trainop migration)",
    "network": f"{NONE}: NCCL's fabric is the image's and the env's in Kubeflow",
    "network.fabric": f"{NONE}: as network",
    "gpuSharing": f"{NONE}: MIG or shared GPUs are resource names in Kubeflow templates",
    "gpuSharing.mode": f"{NONE}: as gpuSharing",
    "gpuSharing.migProfile": f"{NONE}: as gpuSharing",
    "ncclEnv": f"{NONE}: NCCL_* env stays in the container's env",
    "runPolicy": "runPolicy; a Trainer runtime's JobSet failurePolicy/successPolicy",
    "runPolicy.restartPolicy": "the primary replica's restartPolicy; failurePolicy.maxRestarts",
    "runPolicy.backoffLimit": "runPolicy.backoffLimit; failurePolicy.maxRestarts",
    "runPolicy.activeDeadlineSeconds": "runPolicy.activeDeadlineSeconds; TrainJob "
    "spec.activeDeadlineSeconds",
    "runPolicy.ttlSecondsAfterFinished": "runPolicy.ttlSecondsAfterFinished",
    "runPolicy.suspend": "runPolicy.suspend; TrainJob spec.suspend",
    "runPolicy.successPolicy": "TFJob successPolicy, a Master's presence (RankZero), "
    "a JobSet successPolicy",
    "progress": f"{NONE}: Kubeflow's progress reports are the trainer's own (status only)",
    "progress.totalSteps": f"{NONE}: as progress",
    "progress.warmupSteps": f"{NONE}: as progress",
    "progress.startupDeadlineSeconds": f"{NONE}: as progress",
    "progress.degradedFactor": f"{NONE}: as progress",
    "checkpoint": f"{NONE}: Kubeflow deletes pods without asking for a checkpoint",
    "checkpoint.gracePeriodSeconds": f"{NONE}: as checkpoint",
    "checkpoint.signal": f"{NONE}: as checkpoint",
    "checkpoint.ranks": f"{NONE}: as checkpoint",
    "checkpoint.volume": f"{NONE}: as checkpoint",
    "checkpoint.path": f"{NONE}: as checkpoint",
    "elastic": "PyTorchJob spec.elasticPolicy; a torch runtime's mlPolicy.torch.elasticPolicy",
    "elastic.minReplicas": "elasticPolicy.minReplicas; elasticPolicy.minNodes",
    "elastic.maxReplicas": "elasticPolicy.maxReplicas; elasticPolicy.maxNodes",
    "elastic.rendezvousLastCallSeconds": "elasticPolicy.rdzvConf last_call_timeout",
}

"""PyTorchJob (kubeflow.org/v1) -> a pytorch TrainingJob.

Master and Worker replicas become one Worker role: Kubeflow's Master is rank 0 and its
Workers ranks 1..N, trainop ranks all Worker pods in placement order and gives rank 0 the
torchrun master address. The job succeeds as in Kubeflow: when the Master exits 0 (trainop
RankZero) if there is one, else when every Worker has (AllWorkers). An elasticPolicy
becomes spec.elastic (torchrun's c10d rendezvous over minReplicas..maxReplicas). Types:
https://github.com/kubeflow/training-operator/blob/v1.8.1/pkg/apis/kubeflow.org/v1/pytorch_types.go
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from trainop.convert.common import (
    ConvertError,
    Role,
    Source,
    as_count,
    master_worker,
    nproc_note,
    take_metadata,
    take_run_policy,
    training_job,
)

SPECS = "spec.pytorchReplicaSpecs"
CONTAINER = "pytorch"  # PyTorchJobDefaultContainerName
ELASTIC = "spec.elasticPolicy"
RDZV = (
    "no equivalent: trainop runs torchrun's c10d rendezvous on rank 0's pod itself "
    "(PET_RDZV_ENDPOINT, a job-unique id)"
)


def convert(src: Source) -> dict[str, Any]:
    meta = take_metadata(src)
    worker, restart, has_master = master_worker(src, SPECS, CONTAINER, "OnFailure")
    nproc_note(src, "spec.nprocPerNode", src.get("spec.nprocPerNode"), worker.gpus)
    # minAvailable is compared with the Kubeflow gang, before an elastic range resizes it.
    run, extra = take_run_policy(src, "spec.runPolicy", worker.replicas)
    elastic = take_elastic(src, ELASTIC, worker)
    if elastic is not None:
        worker = replace(worker, replicas=elastic["maxReplicas"])
    run["restartPolicy"] = restart
    run["successPolicy"] = "RankZero" if has_master else "AllWorkers"
    if elastic is not None:
        extra = {**extra, "elastic": elastic}
    return training_job(meta, "pytorch", {"Worker": worker}, run, extra)


def take_elastic(src: Source, path: str, worker: Role) -> dict[str, Any] | None:
    """elasticPolicy -> spec.elastic: minReplicas/maxReplicas (default: the Worker count)
    over torchrun's c10d rendezvous, the one trainop runs; the rest is listed. trainop
    requires Worker replicas == maxReplicas, so the Worker count becomes maxReplicas.
    https://github.com/kubeflow/training-operator/blob/v1.8.1/pkg/apis/kubeflow.org/v1/pytorch_types.go
    """
    policy = src.mapping(path)
    if not policy:
        return None
    lo, hi = src.get(f"{path}.minReplicas"), src.get(f"{path}.maxReplicas")
    top = as_count(hi if hi is not None else worker.replicas, f"{path}.maxReplicas", minimum=1)
    low = as_count(lo if lo is not None else top, f"{path}.minReplicas", minimum=1)
    if low > top:
        raise ConvertError(f"{path}.minReplicas", f"{low} exceeds maxReplicas ({top})")
    if top != worker.replicas:
        src.note(
            f"{path}.maxReplicas",
            f"{top}: trainop's elastic Worker role is written at its largest size, so "
            f"spec.replicaSpecs.Worker.replicas is {top} (was {worker.replicas}); it is "
            "admitted at the largest size in range that fits",
        )
    backend = src.get(f"{path}.rdzvBackend")
    if backend not in (None, "c10d"):
        src.note(f"{path}.rdzvBackend", f"{backend}: trainop uses torchrun's c10d rendezvous")
    for key in ("rdzvHost", "rdzvPort", "rdzvId"):
        src.unmapped(f"{path}.{key}", RDZV)
    elastic: dict[str, Any] = {"minReplicas": low, "maxReplicas": top}
    _rdzv_conf(src, f"{path}.rdzvConf", elastic)
    src.unmapped(f"{path}.standalone", "no equivalent: trainop's rendezvous is on rank 0's pod")
    nproc_note(src, f"{path}.nProcPerNode", src.get(f"{path}.nProcPerNode"), worker.gpus)
    src.unmapped(
        f"{path}.maxRestarts",
        "no equivalent: trainop restarts the whole gang (spec.runPolicy.backoffLimit) and "
        "resizes it instead of restarting workers in place",
    )
    src.unmapped(
        f"{path}.metrics",
        "no equivalent: trainop grows an elastic gang when GPUs free up and shrinks it "
        "before preempting it, with no HorizontalPodAutoscaler",
    )
    return elastic


def _rdzv_conf(src: Source, path: str, elastic: dict[str, Any]) -> None:
    """rdzvConf key/value pairs: last_call_timeout -> rendezvousLastCallSeconds."""
    for i, kv in enumerate(src.get(path) or []):
        key = kv.get("key") if isinstance(kv, dict) else None
        value = kv.get("value") if isinstance(kv, dict) else None
        if key == "last_call_timeout" and str(value).isdigit():
            elastic["rendezvousLastCallSeconds"] = int(str(value))
        else:
            src.note(f"{path}[{i}]", f"{key}: no equivalent (trainop sets its own rendezvous)")

"""PyTorchJob (kubeflow.org/v1) -> a pytorch TrainingJob.

Master and Worker replicas become one Worker role: Kubeflow's Master is rank 0 and its
Workers ranks 1..N, trainop ranks all Worker pods in placement order and gives rank 0 the
torchrun master address. The job succeeds as in Kubeflow: when the Master exits 0 (trainop
RankZero) if there is one, else when every Worker has (AllWorkers). Types:
https://github.com/kubeflow/training-operator/blob/v1.8.1/pkg/apis/kubeflow.org/v1/pytorch_types.go
"""

from __future__ import annotations

from typing import Any

from trainop.convert.common import (
    Source,
    master_worker,
    nproc_note,
    take_metadata,
    take_run_policy,
    training_job,
)

SPECS = "spec.pytorchReplicaSpecs"
CONTAINER = "pytorch"  # PyTorchJobDefaultContainerName
ELASTIC = (
    "no equivalent: trainop runs a static gang of spec.replicaSpecs.Worker.replicas pods "
    "(torchrun's static rendezvous)"
)


def convert(src: Source) -> dict[str, Any]:
    meta = take_metadata(src)
    worker, restart, has_master = master_worker(src, SPECS, CONTAINER, "OnFailure")
    nproc_note(src, "spec.nprocPerNode", src.get("spec.nprocPerNode"), worker.gpus)
    take_elastic(src, "spec.elasticPolicy")
    run, extra = take_run_policy(src, "spec.runPolicy", worker.replicas)
    run["restartPolicy"] = restart
    run["successPolicy"] = "RankZero" if has_master else "AllWorkers"
    return training_job(meta, "pytorch", {"Worker": worker}, run, extra)


def take_elastic(src: Source, path: str) -> None:
    """Each elasticPolicy field that is set is listed: trainop has no elastic training."""
    for key in sorted(src.mapping(path)):
        src.unmapped(f"{path}.{key}", ELASTIC)

"""XGBoostJob (kubeflow.org/v1) -> a TrainingJob with framework pytorch.

trainop has no xgboost framework. Kubeflow gives XGBoost pods the Rabit tracker address as
MASTER_ADDR/MASTER_PORT plus WORLD_SIZE and RANK; trainop's pytorch wiring sets MASTER_ADDR,
MASTER_PORT, WORLD_SIZE (= pods, for CPU pods) and NODE_RANK, so the job runs once the
script reads NODE_RANK for its rank. That, and WORKER_ADDRS/WORKER_PORT, are said on stderr.
Master and Worker merge into Worker as for PyTorchJob; the job succeeds when the Master
(rank 0) does, as in Kubeflow. Types and env:
https://github.com/kubeflow/training-operator/blob/v1.8.1/pkg/apis/kubeflow.org/v1/xgboost_types.go
https://github.com/kubeflow/training-operator/blob/v1.8.1/pkg/controller.v1/xgboost/xgboost.go
"""

from __future__ import annotations

from typing import Any

from trainop.convert.common import (
    Source,
    master_worker,
    take_metadata,
    take_run_policy,
    training_job,
)

SPECS = "spec.xgbReplicaSpecs"
CONTAINER = "xgboost"  # XGBoostJobDefaultContainerName
FRAMEWORK_NOTE = (
    "trainop has no xgboost framework: converted with framework pytorch, whose pods get "
    "MASTER_ADDR, MASTER_PORT, WORLD_SIZE and NODE_RANK but not RANK, WORKER_ADDRS or "
    "WORKER_PORT: read the rank from NODE_RANK"
)


def convert(src: Source) -> dict[str, Any]:
    meta = take_metadata(src)
    if src.mapping(SPECS):
        src.note("kind", FRAMEWORK_NOTE)
    worker, restart, has_master = master_worker(src, SPECS, CONTAINER, "Never")
    run, extra = take_run_policy(src, "spec.runPolicy", worker.replicas)
    run["restartPolicy"] = restart
    run["successPolicy"] = "RankZero" if has_master else "AllWorkers"
    return training_job(meta, "pytorch", {"Worker": worker}, run, extra)

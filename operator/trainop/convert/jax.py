"""JAXJob (kubeflow.org/v1, training-operator v1.9+) -> a jax TrainingJob.

JAXJob has one replica type, Worker; worker 0 hosts the JAX coordinator, as trainop's rank
0 does (JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID on every pod). Kubeflow's
default restart policy for it is Never and its container is named `jax`. Types:
https://github.com/kubeflow/training-operator/blob/v1.9.0/pkg/apis/kubeflow.org/v1/jax_types.go
https://github.com/kubeflow/training-operator/blob/v1.9.0/pkg/apis/kubeflow.org/v1/jax_defaults.go
"""

from __future__ import annotations

from typing import Any

from trainop.convert.common import (
    ConvertError,
    Source,
    check_roles,
    restart_policy,
    take_metadata,
    take_replica,
    take_run_policy,
    training_job,
)

SPECS = "spec.jaxReplicaSpecs"
CONTAINER = "jax"  # JAXJobDefaultContainerName
DEFAULT_RESTART = "Never"  # JAXJobDefaultRestartPolicy


def convert(src: Source) -> dict[str, Any]:
    meta = take_metadata(src)
    specs = src.mapping(SPECS)
    check_roles(src, SPECS, specs, ("Worker",))
    if "Worker" not in specs:
        raise ConvertError(f"{SPECS}.Worker", "required: a JAXJob runs Workers")
    worker = take_replica(src, f"{SPECS}.Worker", CONTAINER)
    run, extra = take_run_policy(src, "spec.runPolicy", worker.replicas)
    run["restartPolicy"] = restart_policy(src, {"Worker": worker}, "Worker", DEFAULT_RESTART)
    run["successPolicy"] = "AllWorkers"
    return training_job(meta, "jax", {"Worker": worker}, run, extra)

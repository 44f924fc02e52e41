"""PaddleJob (kubeflow.org/v1) -> a paddle TrainingJob (collective mode).

Kubeflow runs a PaddleJob with Workers only in collective mode and one with a Master in
parameter-server mode (the Masters are the servers). trainop wires collective mode only
(PADDLE_MASTER/PADDLE_NNODES for `paddle.distributed.launch`), so a Master is refused.
Types and env: https://github.com/kubeflow/training-operator/blob/v1.8.1/pkg/apis/kubeflow.org/v1/paddlepaddle_types.go
https://github.com/kubeflow/training-operator/blob/v1.8.1/pkg/controller.v1/paddlepaddle/envvar.go
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

SPECS = "spec.paddleReplicaSpecs"
CONTAINER = "paddle"  # PaddleJobDefaultContainerName
ELASTIC = "no equivalent: trainop runs a static gang of spec.replicaSpecs.Worker.replicas pods"


def convert(src: Source) -> dict[str, Any]:
    meta = take_metadata(src)
    specs = src.mapping(SPECS)
    check_roles(src, SPECS, specs, ("Master", "Worker"))
    if "Master" in specs:
        raise ConvertError(
            f"{SPECS}.Master",
            "parameter-server mode has no trainop equivalent (trainop runs paddle in "
            "collective mode, Workers only): remove Master and train collectively",
        )
    if "Worker" not in specs:
        raise ConvertError(f"{SPECS}.Worker", "required: the Worker replica spec")
    roles = {"Worker": take_replica(src, f"{SPECS}.Worker", CONTAINER)}
    for key in sorted(src.mapping("spec.elasticPolicy")):
        src.unmapped(f"spec.elasticPolicy.{key}", ELASTIC)
    run, extra = take_run_policy(src, "spec.runPolicy", roles["Worker"].replicas)
    run["restartPolicy"] = restart_policy(src, roles, "Worker", "OnFailure")
    run["successPolicy"] = "AllWorkers"
    return training_job(meta, "paddle", roles, run, extra)

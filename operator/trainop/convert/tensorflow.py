"""TFJob (kubeflow.org/v1) -> a tensorflow TrainingJob.

Roles keep their names (Kubeflow's deprecated Master is trainop's Chief). Success: Kubeflow's
default policy ends the job when the Chief exits 0, or worker 0 when there is no Chief;
trainop's AllWorkers with a Chief is exactly the Chief, and RankZero without one is the
rank-0 Worker. Types:
https://github.com/kubeflow/training-operator/blob/v1.8.1/pkg/apis/kubeflow.org/v1/tensorflow_types.go
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

SPECS = "spec.tfReplicaSpecs"
CONTAINER = "tensorflow"  # TFJobDefaultContainerName
_ROLE = {
    "Chief": "Chief",
    "Master": "Chief",
    "PS": "PS",
    "Worker": "Worker",
    "Evaluator": "Evaluator",
}


def convert(src: Source) -> dict[str, Any]:
    meta = take_metadata(src)
    specs = src.mapping(SPECS)
    check_roles(src, SPECS, specs, tuple(_ROLE))
    if "Chief" in specs and "Master" in specs:
        raise ConvertError(f"{SPECS}.Master", "a TFJob has one Chief: remove Master or Chief")
    if "Worker" not in specs:
        raise ConvertError(
            f"{SPECS}.Worker",
            "required by trainop: a tensorflow TrainingJob needs Workers (a Chief-only job "
            "can be written as one Worker)",
        )
    roles = {_ROLE[r]: take_replica(src, f"{SPECS}.{r}", CONTAINER) for r in specs}
    run, extra = take_run_policy(src, "spec.runPolicy", sum(r.replicas for r in roles.values()))
    run["restartPolicy"] = restart_policy(src, roles, "Worker", "Never")
    run["successPolicy"] = _success(src, "Chief" in roles)
    src.unmapped(
        "spec.enableDynamicWorker",
        "no equivalent: trainop's TF_CONFIG lists a fixed set of workers",
    )
    return training_job(meta, "tensorflow", roles, run, extra)


def _success(src: Source, chief: bool) -> str:
    policy = src.get("spec.successPolicy") or ""
    if policy not in ("", "AllWorkers"):
        raise ConvertError("spec.successPolicy", f"unknown policy {policy!r}: '' or AllWorkers")
    if policy == "AllWorkers" and chief:
        src.note(
            "spec.successPolicy",
            "AllWorkers: with a Chief, trainop's job succeeds when the Chief exits 0 "
            "(successPolicy AllWorkers counts the Chief only); make the Chief wait for the "
            "Workers if they must all finish",
        )
    if policy == "AllWorkers" or chief:
        return "AllWorkers"
    return "RankZero"

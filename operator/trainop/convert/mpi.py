"""MPIJob (kubeflow.org/v2beta1 from mpi-operator, or training-operator's kubeflow.org/v1)
-> an mpi TrainingJob.

Launcher and Worker keep their roles. trainop writes the Open MPI hostfile with
`slots=<gpus>` per Worker, mounts the job's SSH keys at /etc/trainop-ssh and makes the
Launcher wait until every Worker resolves in DNS before mpirun starts (close to
mpi-operator's launcherCreationPolicy WaitForWorkersReady). The job succeeds when the
Launcher exits 0, as in Kubeflow. Types:
https://github.com/kubeflow/mpi-operator/blob/master/pkg/apis/kubeflow/v2beta1/types.go
https://github.com/kubeflow/training-operator/blob/v1.8.1/pkg/apis/kubeflow.org/v1/mpi_types.go
"""

from __future__ import annotations

from typing import Any

from trainop.convert.common import (
    ConvertError,
    Source,
    as_count,
    check_roles,
    clean_pod_policy,
    restart_policy,
    take_metadata,
    take_replica,
    take_run_policy,
    training_job,
)

SPECS = "spec.mpiReplicaSpecs"
V1_CONTAINER = "mpi"  # training-operator's MPIJobDefaultContainerName


def convert(src: Source) -> dict[str, Any]:
    v1 = str(src.body.get("apiVersion")) == "kubeflow.org/v1"
    meta = take_metadata(src)
    specs = src.mapping(SPECS)
    check_roles(src, SPECS, specs, ("Launcher", "Worker"))
    for role in ("Launcher", "Worker"):
        if role not in specs:
            raise ConvertError(f"{SPECS}.{role}", f"required by trainop: an mpi job has a {role}")
    # mpi-operator runs the first container; training-operator's v1 the one named
    # spec.mainContainer (default "mpi").
    main = (src.get("spec.mainContainer") or V1_CONTAINER) if v1 else None
    roles = {r: take_replica(src, f"{SPECS}.{r}", main) for r in ("Launcher", "Worker")}
    if roles["Launcher"].replicas != 1:
        raise ConvertError(f"{SPECS}.Launcher.replicas", "an MPIJob has exactly one Launcher")
    _slots(src, roles["Worker"].gpus)
    _v2_fields(src)
    if v1:
        clean_pod_policy(src, "spec.cleanPodPolicy")
    run, extra = take_run_policy(src, "spec.runPolicy", roles["Worker"].replicas + 1)
    run["restartPolicy"] = restart_policy(src, roles, "Launcher", "Never")
    run["successPolicy"] = "AllWorkers"  # for mpi: the Launcher's exit status
    return training_job(meta, "mpi", roles, run, extra)


def _slots(src: Source, gpus: int) -> None:
    value = src.get("spec.slotsPerWorker")
    if value is None or as_count(value, "spec.slotsPerWorker") == max(gpus, 1):
        return
    src.note(
        "spec.slotsPerWorker",
        f"{value}: trainop's hostfile gives each Worker slots = its GPUs ({max(gpus, 1)}); "
        "pass -np / --map-by to mpirun in the Launcher's command for another layout",
    )


def _v2_fields(src: Source) -> None:
    impl = src.get("spec.mpiImplementation")
    if impl not in (None, "", "OpenMPI"):
        src.note(
            "spec.mpiImplementation",
            f"{impl}: trainop's hostfile and env are for Open MPI (OMPI_*/PRTE_*): point "
            "your MPI at /etc/trainop/hostfile yourself, or use an Open MPI image",
        )
    src.unmapped(
        "spec.runLauncherAsWorker",
        "no equivalent: trainop's Launcher runs no ranks; add one Worker instead",
    )
    src.unmapped(
        "spec.sshAuthMountPath",
        "no equivalent: trainop mounts the job's SSH keys at /etc/trainop-ssh and its "
        "images (trainop-launch) copy them to ~/.ssh; copy them yourself in other images",
    )
    policy = src.get("spec.launcherCreationPolicy")
    if policy not in (None, "", "AtStartup", "WaitForWorkersReady"):
        raise ConvertError(
            "spec.launcherCreationPolicy", f"unknown {policy!r}: AtStartup or WaitForWorkersReady"
        )

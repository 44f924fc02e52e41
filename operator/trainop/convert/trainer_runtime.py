"""Kubeflow Trainer's ClusterTrainingRuntime / TrainingRuntime -> a trainop runtime.

A Kubeflow runtime (trainer.kubeflow.org/v1alpha1) holds an mlPolicy (torch | mpi | jax |
xgboost | ...) and a JobSet template whose replicated Job `node` runs the trainer pods
(`launcher` too for MPI). It becomes the trainop runtime of the same kind and name
(docs/runtimes.md): the mlPolicy picks the framework, numNodes the Worker replicas, the
`node` pod template the Worker's (`launcher` the Launcher's), the trainer image spec.image,
failurePolicy.maxRestarts the gang restarts, and a torch elasticPolicy (minNodes/maxNodes)
spec.elastic. Each field with no equivalent is a Note, as for the jobs.

Neighbours: `convert.runtime` (finding a runtime, its replicated Jobs, pod patches),
`convert.trainjob` (a TrainJob naming the runtime becomes a TrainingJob naming this one).
Types:
https://github.com/kubeflow/trainer/blob/v2.1.0/pkg/apis/trainer/v1alpha1/trainingruntime_types.go
https://github.com/kubeflow/trainer/blob/master/pkg/apis/trainer/v1alpha1/trainingruntime_types.go
(TorchElasticPolicy: maxRestarts, minNodes, maxNodes, metrics)
"""

from __future__ import annotations

from typing import Any

from trainop.api import constants as c
from trainop.convert.common import (
    ConvertError,
    Role,
    Source,
    as_count,
    main_container,
    nproc_note,
    shape_template,
    take_metadata,
)
from trainop.convert.runtime import LAUNCHER, NODE, ReplicatedJob, replicated_jobs
from trainop.convert.xgboost import FRAMEWORK_NOTE

ML_FRAMEWORKS = {"torch": "pytorch", "mpi": "mpi", "jax": "jax", "xgboost": "pytorch"}


def ml_framework(rt: Source) -> tuple[str, str]:
    """(the mlPolicy kind, e.g. torch; the trainop framework), or ConvertError."""
    kinds = [k for k in (rt.peek("spec.mlPolicy") or {}) if k != "numNodes"]
    if not kinds or kinds[0] not in ML_FRAMEWORKS:
        got = kinds[0] if kinds else "none"
        raise ConvertError(
            "spec.runtimeRef",
            f"runtime {rt.who}: spec.mlPolicy {got}: trainop has no framework for it "
            "(it converts torch, mpi, jax and xgboost runtimes)",
        )
    return kinds[0], ML_FRAMEWORKS[kinds[0]]


def _ml_policy(rt: Source) -> tuple[str, tuple[str, Any], dict[str, Any] | None]:
    """The trainop framework, (path, value) of the runtime's numProcPerNode and
    spec.elastic (torch elasticPolicy); other policy fields are listed."""
    kind, framework = ml_framework(rt)
    rt.mapping("spec.mlPolicy")
    if kind == "xgboost":
        rt.note("spec.mlPolicy.xgboost", FRAMEWORK_NOTE)
    path = f"spec.mlPolicy.{kind}"
    rt.used.add(path)
    policy = rt.mapping(path)
    impl = policy.get("mpiImplementation")
    if impl not in (None, "OpenMPI"):
        rt.note(f"{path}.mpiImplementation", f"{impl}: trainop's hostfile and env are for Open MPI")
    if policy.get("sshAuthMountPath"):
        rt.note(
            f"{path}.sshAuthMountPath",
            "no equivalent: trainop mounts the job's SSH keys at /etc/trainop-ssh "
            "(trainop-launch copies them to ~/.ssh); copy them yourself in other images",
        )
    if policy.get("runLauncherAsNode"):
        rt.note(
            f"{path}.runLauncherAsNode",
            "no equivalent: trainop's Launcher runs no ranks; the job gets numNodes Workers "
            "and a CPU-only Launcher",
        )
    elastic = _elastic(rt, f"{path}.elasticPolicy") if policy.get("elasticPolicy") else None
    known = {"numProcPerNode", "mpiImplementation", "sshAuthMountPath", "runLauncherAsNode"}
    for key in sorted(set(policy) - known - {"elasticPolicy"}):
        rt.note(f"{path}.{key}", "no equivalent")
    return framework, (f"{path}.numProcPerNode", policy.get("numProcPerNode")), elastic


def _elastic(rt: Source, path: str) -> dict[str, Any] | None:
    """A torch elasticPolicy -> spec.elastic: torchrun's c10d rendezvous over
    minNodes..maxNodes Worker pods, as trainop runs it."""
    lo, hi = rt.get(f"{path}.minNodes"), rt.get(f"{path}.maxNodes")
    rt.unmapped(
        f"{path}.maxRestarts",
        "no equivalent: trainop restarts the whole gang (spec.runPolicy.backoffLimit) and "
        "resizes it instead of restarting workers in place",
    )
    rt.unmapped(
        f"{path}.metrics",
        "no equivalent: trainop grows an elastic gang when GPUs free up and shrinks it "
        "before preempting it, with no autoscaler",
    )
    if lo is None and hi is None:
        return None
    top = as_count(hi if hi is not None else lo, f"{path}.maxNodes", minimum=1)
    low = as_count(lo if lo is not None else hi, f"{path}.minNodes", minimum=1)
    return {"minReplicas": low, "maxReplicas": top}


def _role(rt: Source, job: ReplicatedJob, replicas: int | None) -> Role:
    names = [x.get("name") for x in (job.template.get("spec") or {}).get("containers") or []]
    main = NODE if NODE in names else LAUNCHER
    gpus, image = shape_template(rt, f"{job.path}.template.spec.template", job.template, main)
    return Role(job.path, replicas or 0, gpus, job.template, image, None)


def _run_policy(rt: Source, framework: str) -> dict[str, Any]:
    """JobSet failurePolicy.maxRestarts -> gang restarts; successPolicy checked."""
    run: dict[str, Any] = {}
    fp = "spec.template.spec.failurePolicy"
    restarts = rt.get(f"{fp}.maxRestarts")
    run["restartPolicy"] = "OnFailure" if restarts else "Never"
    if restarts:
        run["backoffLimit"] = as_count(restarts, f"{fp}.maxRestarts")
    for key in sorted(set(rt.mapping(fp)) - {"maxRestarts"}):
        rt.unmapped(f"{fp}.{key}", "no equivalent: trainop restarts the whole gang")
    sp = "spec.template.spec.successPolicy"
    policy = rt.mapping(sp)
    rt.used.add(sp)
    targets = set(policy.get("targetReplicatedJobs") or [])
    wanted = LAUNCHER if framework == "mpi" else NODE
    if policy and (policy.get("operator") not in (None, "All") or targets - {wanted}):
        rt.note(
            sp,
            f"no equivalent: trainop's job succeeds when every {wanted} pod has exited 0 "
            "(successPolicy AllWorkers)",
        )
    run["successPolicy"] = "AllWorkers"
    return run


def _unmapped(rt: Source) -> None:
    pg = "spec.podGroupPolicy"
    rt.unmapped(
        f"{pg}.coscheduling.scheduleTimeoutSeconds",
        "no equivalent: a trainop gang waits in its queue until it fits (trainop always "
        "places the whole gang at once)",
    )
    rt.used.add(f"{pg}.coscheduling")
    rt.unmapped(f"{pg}.volcano", "no equivalent: trainop places the gang itself")
    rt.unmapped(
        "spec.template.spec.network",
        "no equivalent: trainop gives each job a headless Service <job> and each pod the "
        "hostname <job>-<role>-<index>",
    )


def _replica_spec(role: Role, image: str | None) -> dict[str, Any]:
    main = main_container(role.template)
    if image and main is not None and main.get("image") == image:
        del main["image"]
    rs: dict[str, Any] = {}
    if role.replicas:
        rs["replicas"] = role.replicas
    if role.gpus:
        rs["gpus"] = role.gpus
    rs["template"] = role.template
    return rs


def convert_runtime(rt: Source) -> dict[str, Any]:
    """The trainop runtime of the same kind and name."""
    meta = take_metadata(rt)
    framework, nproc, elastic = _ml_policy(rt)
    jobs = replicated_jobs(rt)
    if framework == "mpi" and LAUNCHER not in jobs:
        raise ConvertError("spec.template.spec.replicatedJobs", "an mpi runtime needs a launcher")
    nodes = rt.get("spec.mlPolicy.numNodes")
    workers = as_count(nodes, "spec.mlPolicy.numNodes", minimum=1) if nodes is not None else None
    if elastic is not None:
        workers = elastic["maxReplicas"]
    roles = {"Worker": _role(rt, jobs[NODE], workers)}
    if framework == "mpi":
        roles["Launcher"] = _role(rt, jobs[LAUNCHER], 1)
    if roles["Worker"].gpus:  # else the jobs' GPUs decide, and their TrainJobs' numProcPerNode
        nproc_note(rt, nproc[0], nproc[1], roles["Worker"].gpus)
    else:
        rt.used.add(nproc[0])
    spec: dict[str, Any] = {"framework": {"name": framework}}
    image = roles["Worker"].image
    if image:
        spec["image"] = image
    spec["replicaSpecs"] = {name: _replica_spec(r, image) for name, r in roles.items()}
    spec["runPolicy"] = _run_policy(rt, framework)
    if elastic is not None:
        spec["elastic"] = elastic
    _unmapped(rt)
    if rt.kind == "ClusterTrainingRuntime":
        meta.pop("namespace", None)
    return {"apiVersion": c.API_VERSION, "kind": rt.kind, "metadata": meta, "spec": spec}

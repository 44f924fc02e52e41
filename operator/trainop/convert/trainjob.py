"""TrainJob (trainer.kubeflow.org/v1alpha1, Kubeflow Trainer v2) + its runtime -> a TrainingJob.

The runtime's mlPolicy picks the framework (torch -> pytorch, mpi -> mpi, jax -> jax,
xgboost -> pytorch, as for XGBoostJob); its replicated Job `node` becomes the Worker role
(`launcher` the Launcher for MPI). spec.trainer (image, command, args, env,
resourcesPerNode, numNodes) and spec.podTemplateOverrides (v2.1/v2.2) or spec.runtimePatches
(v2.3) are applied to those pod templates first, as the Trainer controller would. The JobSet
failurePolicy.maxRestarts restarts the whole JobSet, i.e. trainop's gang restart. Types:
https://github.com/kubeflow/trainer/blob/v2.1.0/pkg/apis/trainer/v1alpha1/trainjob_types.go
https://github.com/kubeflow/trainer/blob/v2.3.0/pkg/apis/trainer/v1alpha1/trainjob_types.go
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainop.convert.common import (
    ConvertError,
    Role,
    Source,
    as_count,
    main_container,
    nproc_note,
    shape_template,
    take_metadata,
    training_job,
)
from trainop.convert.runtime import (
    LAUNCHER,
    NODE,
    ReplicatedJob,
    RuntimeKey,
    apply_pod_patch,
    find_runtime,
    merge_env,
    replicated_jobs,
    runtime_key,
    trainer_job,
)
from trainop.convert.xgboost import FRAMEWORK_NOTE

_ML = {"torch": "pytorch", "mpi": "mpi", "jax": "jax", "xgboost": "pytorch"}
ELASTIC = "no equivalent: trainop runs a static gang of numNodes Workers"
Jobs = dict[str, ReplicatedJob]


def convert(src: Source, runtimes: Mapping[RuntimeKey, Mapping[str, Any]]) -> dict[str, Any]:
    meta = take_metadata(src)
    rt = Source(find_runtime(src, runtimes))
    rt.used.add("metadata")  # the runtime's identity: it is not converted itself
    framework, nproc = _ml_policy(src, rt)
    jobs = replicated_jobs(rt)
    if framework == "mpi" and LAUNCHER not in jobs:
        raise ConvertError("spec.runtimeRef", "an mpi runtime needs a replicated Job launcher")
    _apply_trainer(src, jobs, trainer_job(jobs))
    _apply_patches(src, jobs)
    default_nodes = rt.get("spec.mlPolicy.numNodes") or 1
    nodes = src.get("spec.trainer.numNodes") or default_nodes
    roles = {"Worker": _role(rt, jobs[NODE], as_count(nodes, "spec.trainer.numNodes", minimum=1))}
    if framework == "mpi":
        roles["Launcher"] = _role(rt, jobs[LAUNCHER], 1)
    trainer_nproc = src.get("spec.trainer.numProcPerNode")
    nproc_note(src, "spec.trainer.numProcPerNode", trainer_nproc, roles["Worker"].gpus)
    if trainer_nproc is None:
        nproc_note(rt, _ml_path(rt) + ".numProcPerNode", nproc, roles["Worker"].gpus)
    run = _run_policy(src, rt, framework)
    _unmapped_spec(src, rt)
    _runtime_notes(src, rt)
    return training_job(meta, framework, roles, run, {})


def _ml_path(rt: Source) -> str:
    ml = rt.peek("spec.mlPolicy") or {}
    return "spec.mlPolicy." + next((k for k in ml if k != "numNodes"), "")


def _ml_policy(src: Source, rt: Source) -> tuple[str, Any]:
    """The trainop framework and the runtime's numProcPerNode; other policy fields listed."""
    kinds = [k for k in rt.mapping("spec.mlPolicy") if k != "numNodes"]
    if not kinds or kinds[0] not in _ML:
        got = kinds[0] if kinds else "none"
        raise ConvertError(
            "spec.runtimeRef",
            f"runtime {rt.who}: spec.mlPolicy {got}: trainop has no framework for it "
            "(it converts torch, mpi, jax and xgboost runtimes)",
        )
    if kinds[0] == "xgboost":
        src.note("spec.runtimeRef", FRAMEWORK_NOTE)
    path = f"spec.mlPolicy.{kinds[0]}"
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
    for key in sorted(
        set(policy)
        - {"numProcPerNode", "mpiImplementation", "sshAuthMountPath", "runLauncherAsNode"}
    ):
        rt.note(f"{path}.{key}", ELASTIC if key == "elasticPolicy" else "no equivalent")
    return _ML[kinds[0]], policy.get("numProcPerNode")


def _container(template: dict[str, Any], *names: str) -> dict[str, Any]:
    containers = (template.get("spec") or {}).get("containers") or []
    for c in containers:
        if isinstance(c, dict) and c.get("name") in names:
            return c
    first = main_container(template)
    if first is None:
        raise ConvertError("spec.runtimeRef", "the runtime's trainer pod has no container")
    return first


def _apply_trainer(src: Source, jobs: Jobs, trainer: str) -> None:
    """spec.trainer onto the trainer container (image, command, args, env) and the node
    container (resourcesPerNode), as the Trainer controller does."""
    t = src.mapping("spec.trainer")
    target = _container(jobs[trainer].template, NODE, LAUNCHER)
    for key in ("image", "command", "args"):
        if t.get(key):
            target[key] = src.get(f"spec.trainer.{key}")
    if t.get("env"):
        target["env"] = merge_env(target.get("env") or [], src.get("spec.trainer.env"))
    if t.get("resourcesPerNode") is not None:
        node = _container(jobs[NODE].template, NODE)
        node["resources"] = dict(src.get("spec.trainer.resourcesPerNode"))


def _apply_patches(src: Source, jobs: Jobs) -> None:
    """podTemplateOverrides (v2.1/v2.2) and runtimePatches (v2.3) onto the pod templates."""
    overrides = src.get("spec.podTemplateOverrides") or []
    for i, o in enumerate(overrides):
        path = f"spec.podTemplateOverrides[{i}]"
        for target in o.get("targetJobs") or []:
            name = target.get("name")
            if name not in jobs:
                src.note(f"{path}.targetJobs", f"{name!r}: not a trainer Job; not applied")
                continue
            apply_pod_patch(src, path, jobs[name].template, o.get("metadata"), o.get("spec"))
    for i, patch in enumerate(src.get("spec.runtimePatches") or []):
        base = f"spec.runtimePatches[{i}].trainingRuntimeSpec.template"
        tmpl = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
        if tmpl.get("metadata"):
            src.note(f"{base}.metadata", "JobSet labels/annotations: no equivalent")
        for j, rj in enumerate((tmpl.get("spec") or {}).get("replicatedJobs") or []):
            path = f"{base}.spec.replicatedJobs[{j}]"
            if rj.get("name") not in jobs:
                src.note(path, f"{rj.get('name')!r}: not a trainer Job; not applied")
                continue
            job_t = rj.get("template") or {}
            if job_t.get("metadata"):
                src.note(f"{path}.template.metadata", "Job labels/annotations: no equivalent")
            pod_t = (job_t.get("spec") or {}).get("template") or {}
            apply_pod_patch(
                src,
                f"{path}.template.spec.template",
                jobs[rj["name"]].template,
                pod_t.get("metadata"),
                pod_t.get("spec"),
            )


def _role(rt: Source, job: ReplicatedJob, replicas: int) -> Role:
    path, template = job.path, job.template
    names = [c.get("name") for c in (template.get("spec") or {}).get("containers") or []]
    main = NODE if NODE in names else LAUNCHER
    gpus, image = shape_template(rt, f"{path}.template.spec.template", template, main)
    return Role(path, replicas, gpus, template, image, None)


def _run_policy(src: Source, rt: Source, framework: str) -> dict[str, Any]:
    run: dict[str, Any] = {}
    if src.get("spec.suspend") is not None:
        run["suspend"] = bool(src.get("spec.suspend"))
    deadline = src.get("spec.activeDeadlineSeconds")
    if deadline:
        run["activeDeadlineSeconds"] = as_count(deadline, "spec.activeDeadlineSeconds", minimum=1)
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


def _unmapped_spec(src: Source, rt: Source) -> None:
    for part in sorted(src.mapping("spec.initializer")):
        src.unmapped(
            f"spec.initializer.{part}",
            "no equivalent: trainop has no initializer step; fetch it beforehand or in an "
            "initContainer of spec.replicaSpecs.Worker.template",
        )
    for key in ("labels", "annotations"):
        src.unmapped(
            f"spec.{key}",
            "for the JobSet and its Jobs, which trainop does not create: put them on the "
            "TrainingJob's metadata or in spec.replicaSpecs.<role>.template.metadata",
        )
    src.unmapped("spec.managedBy", "no equivalent: trainop's operator manages every TrainingJob")
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
    src.used.add("spec.runtimePatches")  # applied; manager/time are bookkeeping


def _runtime_notes(src: Source, rt: Source) -> None:
    """The runtime's notes and unread fields, as the TrainJob's (they shape its pods)."""
    kind, _, name = runtime_key(rt.body)
    for n in rt.notes:
        src.note(f"{kind} {name} {n.path}", n.message)
    for path in rt.leftovers():
        src.note(f"{kind} {name} {path}", "not converted: trainop has no equivalent")

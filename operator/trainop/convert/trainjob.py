"""TrainJob (trainer.kubeflow.org/v1alpha1, Kubeflow Trainer v2) -> a TrainingJob that names
the converted runtime in spec.runtimeRef (docs/runtimes.md), not an inlined copy of it.

The job keeps only what is its own: spec.trainer (image -> spec.image; command, args, env
and resourcesPerNode onto the trainer container, by the runtime container's name, so the
runtime merge puts them in place; numNodes -> Worker replicas), spec.podTemplateOverrides
(v2.1/v2.2) and spec.runtimePatches (v2.3) as the roles' templates, suspend and
activeDeadlineSeconds. The runtime itself converts to a trainop runtime of the same kind and
name (`trainer_runtime`); the TrainJob's runtime must be among the inputs so the result can
be checked merged with it. Types:
https://github.com/kubeflow/trainer/blob/v2.1.0/pkg/apis/trainer/v1alpha1/trainjob_types.go
https://github.com/kubeflow/trainer/blob/v2.3.0/pkg/apis/trainer/v1alpha1/trainjob_types.go
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainop.api import constants as c
from trainop.convert.common import (
    ConvertError,
    Source,
    as_count,
    main_container,
    nproc_note,
    take_gpus,
    take_metadata,
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
    trainer_job,
)
from trainop.convert.trainer_runtime import ml_framework

Jobs = dict[str, ReplicatedJob]
ROLE_OF = {NODE: "Worker", LAUNCHER: "Launcher"}


def convert(src: Source, runtimes: Mapping[RuntimeKey, Mapping[str, Any]]) -> dict[str, Any]:
    meta = take_metadata(src)
    rt_body = find_runtime(src, runtimes)
    rt = Source(rt_body)  # read only: the runtime's own notes go with its own conversion
    _, framework = ml_framework(rt)
    jobs = _stubs(replicated_jobs(rt))
    if framework == "mpi" and LAUNCHER not in jobs:
        raise ConvertError("spec.runtimeRef", "an mpi runtime needs a replicated Job launcher")
    trainer = trainer_job(jobs)
    _apply_trainer(src, jobs, trainer)
    _apply_patches(src, jobs)
    spec: dict[str, Any] = {
        "runtimeRef": {"kind": rt.kind, "name": str((rt_body.get("metadata") or {}).get("name"))}
    }
    image = src.get("spec.trainer.image")
    if image and trainer == NODE:  # the whole job's image; a launcher-only image stays put
        spec["image"] = image
        main = _container(jobs[NODE].template, NODE, LAUNCHER)
        main.pop("image", None)
    roles = _replica_specs(src, jobs)
    if roles:
        spec["replicaSpecs"] = roles
    run = _run_policy(src)
    if run:
        spec["runPolicy"] = run
    _unmapped_spec(src)
    return {"apiVersion": c.API_VERSION, "kind": "TrainingJob", "metadata": meta, "spec": spec}


def _stubs(jobs: Jobs) -> Jobs:
    """The runtime's replicated Jobs with pod templates that only name their containers:
    what the TrainJob changes is written onto them, and only that stays in the job."""
    out = {}
    for name, job in jobs.items():
        containers = (job.template.get("spec") or {}).get("containers") or []
        stub = {"spec": {"containers": [{"name": x.get("name")} for x in containers]}}
        out[name] = ReplicatedJob(job.path, stub, job.trainer)
    return out


def _pruned(template: dict[str, Any]) -> dict[str, Any]:
    """The stub minus containers nothing was written onto, and empty parts."""
    pod = template.get("spec") or {}
    containers = [x for x in pod.get("containers") or [] if set(x) - {"name"}]
    if containers:
        pod["containers"] = containers
    else:
        pod.pop("containers", None)
    if not pod:
        template.pop("spec", None)
    return template


def _replica_specs(src: Source, jobs: Jobs) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kf, role in ROLE_OF.items():
        if kf not in jobs:
            continue
        rs: dict[str, Any] = {}
        template = jobs[kf].template
        if kf == NODE:
            nodes = src.get("spec.trainer.numNodes")
            if nodes is not None:
                rs["replicas"] = as_count(nodes, "spec.trainer.numNodes", minimum=1)
            main = _container(template, NODE)
            gpus = take_gpus(main, "spec.trainer.resourcesPerNode") if main.get("resources") else 0
            if gpus:
                rs["gpus"] = gpus
            nproc_note(
                src, "spec.trainer.numProcPerNode", src.get("spec.trainer.numProcPerNode"), gpus
            )
        template = _pruned(template)
        if template:
            rs["template"] = template
        if rs:
            out[role] = rs
    return out


def _container(template: dict[str, Any], *names: str) -> dict[str, Any]:
    containers = (template.get("spec") or {}).get("containers") or []
    for x in containers:
        if isinstance(x, dict) and x.get("name") in names:
            return x
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
    src.used.add("spec.runtimePatches")  # applied; manager/time are bookkeeping


def _run_policy(src: Source) -> dict[str, Any]:
    """suspend and activeDeadlineSeconds; restarts are the runtime's (failurePolicy)."""
    run: dict[str, Any] = {}
    if src.get("spec.suspend") is not None:
        run["suspend"] = bool(src.get("spec.suspend"))
    deadline = src.get("spec.activeDeadlineSeconds")
    if deadline:
        run["activeDeadlineSeconds"] = as_count(deadline, "spec.activeDeadlineSeconds", minimum=1)
    return run


def _unmapped_spec(src: Source) -> None:
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

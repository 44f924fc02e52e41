"""Kubeflow Trainer v2 runtimes: find the one a TrainJob names, read its JobSet template, and
apply TrainJob pod overrides/patches to the pod templates of its replicated Jobs.

A (Cluster)TrainingRuntime holds an mlPolicy (torch | mpi | jax | xgboost | flux) and a
JobSet template whose replicated Job `node` runs the trainer pods (`launcher` too for MPI;
`dataset-initializer` / `model-initializer` fetch data first). Neighbours: `trainjob` uses
this; the notes are the TrainJob's own. Pure. Types:
https://github.com/kubeflow/trainer/blob/v2.1.0/pkg/apis/trainer/v1alpha1/trainingruntime_types.go
https://github.com/kubeflow/trainer/blob/v2.1.0/pkg/apis/trainer/v1alpha1/trainjob_types.go
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainop.convert.common import ConvertError, Source

GROUP = "trainer.kubeflow.org"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
NODE, LAUNCHER = "node", "launcher"  # replicated Job (and container) names of the trainer
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"

RuntimeKey = tuple[str, str, str]  # kind, namespace ("" for the cluster-scoped kind), name


def runtime_key(body: Mapping[str, Any]) -> RuntimeKey:
    meta = body.get("metadata") or {}
    kind = str(body.get("kind"))
    ns = "" if kind == "ClusterTrainingRuntime" else str(meta.get("namespace") or "default")
    return kind, ns, str(meta.get("name") or "")


def index_runtimes(bodies: Iterable[Mapping[str, Any]]) -> dict[RuntimeKey, Mapping[str, Any]]:
    return {runtime_key(b): b for b in bodies}


def find_runtime(
    src: Source, runtimes: Mapping[RuntimeKey, Mapping[str, Any]]
) -> Mapping[str, Any]:
    """The runtime spec.runtimeRef names; ConvertError saying which one is needed."""
    name = src.get("spec.runtimeRef.name")
    kind = src.get("spec.runtimeRef.kind") or "ClusterTrainingRuntime"
    group = src.get("spec.runtimeRef.apiGroup") or GROUP
    if not name:
        raise ConvertError("spec.runtimeRef.name", "required: the runtime the TrainJob uses")
    if group != GROUP or kind not in RUNTIME_KINDS:
        raise ConvertError(
            "spec.runtimeRef",
            f"{group} {kind}: trainop converts {GROUP} ClusterTrainingRuntime/TrainingRuntime only",
        )
    ns = (
        "" if kind == "ClusterTrainingRuntime" else str(src.peek("metadata.namespace") or "default")
    )
    found = runtimes.get((kind, ns, name))
    if found is None:
        where = f" in namespace {ns}" if ns else ""
        raise ConvertError(
            "spec.runtimeRef",
            f"needs {kind} {name}{where}, which is in none of the files: add it to them or "
            f"pass --runtime FILE (`kubectl get {kind.lower()} {name}"
            f"{' -n ' + ns if ns else ''} -o yaml`)",
        )
    return found


@dataclass
class ReplicatedJob:
    """A trainer Job of the runtime's JobSet: where it is, a copy of its pod template, and
    whether it is the one labelled as the trainer ancestor (where spec.trainer goes)."""

    path: str
    template: dict[str, Any]
    trainer: bool


def replicated_jobs(rt: Source) -> dict[str, ReplicatedJob]:
    """Replicated Job name -> ReplicatedJob, for node and launcher. Other Jobs (the
    initializers) and Job-level settings are listed as notes."""
    jobs = rt.get("spec.template.spec.replicatedJobs") or []
    if not isinstance(jobs, list):
        raise ConvertError("spec.template.spec.replicatedJobs", "must be a list")
    out: dict[str, ReplicatedJob] = {}
    for i, job in enumerate(jobs):
        path = f"spec.template.spec.replicatedJobs[{i}]"
        name = job.get("name") if isinstance(job, Mapping) else None
        if name not in (NODE, LAUNCHER):
            rt.note(
                path,
                f"replicated Job {name!r}: no equivalent (trainop has no initializer step); "
                "fetch the data beforehand or in an initContainer of the Worker template",
            )
            continue
        assert isinstance(job, Mapping)
        job_t = job.get("template") or {}
        tmpl = (job_t.get("spec") or {}).get("template") or {}
        labels = (job_t.get("metadata") or {}).get("labels") or {}
        is_trainer = labels.get(ANCESTOR_LABEL) == "trainer"
        out[name] = ReplicatedJob(path, copy.deepcopy(dict(tmpl)), is_trainer)
        _job_level(rt, path, job)
    if NODE not in out:
        raise ConvertError(
            "spec.template.spec.replicatedJobs", "needs a replicated Job named node (the trainers)"
        )
    return out


def _job_level(rt: Source, path: str, job: Mapping[str, Any]) -> None:
    if job.get("replicas", 1) != 1:
        rt.note(f"{path}.replicas", "JobSet replicas other than 1: no equivalent; converted as 1")
    labels = dict(((job.get("template") or {}).get("metadata") or {}).get("labels") or {})
    labels.pop(ANCESTOR_LABEL, None)
    meta = {**((job.get("template") or {}).get("metadata") or {}), "labels": labels}
    if any(meta.values()):
        rt.note(f"{path}.template.metadata", "labels/annotations of the Job: no equivalent")
    job_spec = dict((job.get("template") or {}).get("spec") or {})
    job_spec.pop("template", None)
    for key in sorted(job_spec):
        rt.note(
            f"{path}.template.spec.{key}",
            "a batch Job setting: no equivalent (trainop creates the pods itself; restarts "
            "follow spec.runPolicy)",
        )
    for key in sorted(set(job) - {"name", "replicas", "template"}):
        rt.note(f"{path}.{key}", "a JobSet replicated-Job setting: no equivalent")


def trainer_job(jobs: Mapping[str, ReplicatedJob]) -> str:
    """The replicated Job that TrainJob.spec.trainer overrides: the one labelled as the
    trainer ancestor (the launcher for MPI runtimes that run it as a node), else node."""
    return next((n for n, j in jobs.items() if j.trainer), NODE)


def apply_pod_patch(src: Source, path: str, template: dict[str, Any], meta: Any, spec: Any) -> None:
    """Merge a podTemplateOverride / runtime patch into a pod template, as Kubeflow does: maps
    merged, lists (volumes, tolerations, ...) appended, containers matched by name."""
    if isinstance(meta, Mapping):
        tmeta = template.setdefault("metadata", {})
        for key in ("labels", "annotations"):
            if meta.get(key):
                tmeta[key] = {**(tmeta.get(key) or {}), **meta[key]}
        for key in sorted(set(meta) - {"labels", "annotations"}):
            src.note(f"{path}.metadata.{key}", "no equivalent in a pod template: not applied")
    if not isinstance(spec, Mapping):
        return
    pod = template.setdefault("spec", {})
    for key, value in spec.items():
        if key in ("volumes", "tolerations", "imagePullSecrets", "schedulingGates"):
            pod[key] = [*(pod.get(key) or []), *copy.deepcopy(value or [])]
        elif key == "nodeSelector":
            pod[key] = {**(pod.get(key) or {}), **(value or {})}
        elif key in ("containers", "initContainers"):
            _patch_containers(src, f"{path}.spec.{key}", pod, key, value or [])
        else:  # serviceAccountName, affinity, securityContext, terminationGracePeriodSeconds
            pod[key] = copy.deepcopy(value)


def _patch_containers(src: Source, path: str, pod: dict[str, Any], key: str, patches: Any) -> None:
    have = {c.get("name"): c for c in pod.get(key) or [] if isinstance(c, dict)}
    for i, patch in enumerate(patches):
        target = have.get(patch.get("name"))
        if target is None:
            src.note(
                f"{path}[{i}]",
                f"container {patch.get('name')!r} is not in the runtime's pod: not applied",
            )
            continue
        if patch.get("env"):
            target["env"] = merge_env(target.get("env") or [], patch["env"])
        if patch.get("volumeMounts"):
            target["volumeMounts"] = [*(target.get("volumeMounts") or []), *patch["volumeMounts"]]
        if patch.get("securityContext"):
            target["securityContext"] = copy.deepcopy(patch["securityContext"])


def merge_env(base: list[Any], extra: list[Any]) -> list[Any]:
    """`extra` wins by name; order kept, new names appended."""
    names = {e.get("name") for e in extra if isinstance(e, Mapping)}
    kept = [e for e in base if not (isinstance(e, Mapping) and e.get("name") in names)]
    return [*kept, *copy.deepcopy(extra)]

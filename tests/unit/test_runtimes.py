"""The runtime merge rules (trainop.runtimes, docs/runtimes.md) as named-case tables:
what the job wins, what merges by name, which lists are replaced, what a lock refuses,
and every way `resolve` fails closed (missing, invalid, locked, incomplete)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.builders import JobBuilder, RuntimeBuilder, job, runtime
from trainop.runtimes import (
    RUNTIME_INVALID,
    RUNTIME_LOCKED,
    RUNTIME_MERGE_INVALID,
    RUNTIME_NOT_FOUND,
    Resolved,
    RuntimeProblem,
    merge,
    resolve,
    resolve_live,
    runtime_index,
)


def _trainer(body: dict[str, Any], role: str = "Worker") -> dict[str, Any]:
    c: dict[str, Any] = body["spec"]["replicaSpecs"][role]["template"]["spec"]["containers"][0]
    return c


def _pod(body: dict[str, Any], role: str = "Worker") -> dict[str, Any]:
    p: dict[str, Any] = body["spec"]["replicaSpecs"][role]["template"]["spec"]
    return p


@dataclass(frozen=True)
class MergeCase:
    name: str
    runtime: dict[str, Any]
    job: dict[str, Any]
    check: Any  # merged body -> the value compared with `want`
    want: Any
    notes: str = field(default="")


# Fresh builders per case: a builder mutates itself.
def RT() -> RuntimeBuilder:
    return runtime("rt").framework("pytorch", "2.4").set("cuda", "12.4")


def JOB() -> JobBuilder:
    return job("bert", version=None, cuda=None).unset("framework").runtime_ref("rt")


MERGE_CASES = [
    MergeCase(
        "framework and cuda come from the runtime when the job leaves them out",
        RT().build(),
        JOB().build(),
        lambda b: (b["spec"]["framework"], b["spec"]["cuda"]),
        ({"name": "pytorch", "version": "2.4"}, "12.4"),
    ),
    MergeCase(
        "the job's scalar wins",
        RT().build(),
        job("bert", version=None, cuda="12.8").unset("framework").runtime_ref("rt").build(),
        lambda b: b["spec"]["cuda"],
        "12.8",
    ),
    MergeCase(
        "the job's framework replaces the runtime's whole (no version carried over)",
        RT().build(),
        job("bert", "jax", version=None, cuda=None).runtime_ref("rt").build(),
        lambda b: b["spec"]["framework"],
        {"name": "jax"},
    ),
    MergeCase(
        "an empty image in the job asks for the catalog's choice over the runtime's image",
        runtime("rt").framework("pytorch").set("image", "registry.corp/pt:1").build(),
        JOB().set("image", "").build(),
        lambda b: b["spec"]["image"],
        "",
    ),
    MergeCase(
        "objects merge key by key, the job's keys winning",
        RT().set("placement", {"topology": "rack", "mode": "Required"}).build(),
        JOB().set("placement", {"mode": "Preferred"}).build(),
        lambda b: b["spec"]["placement"],
        {"topology": "rack", "mode": "Preferred"},
    ),
    MergeCase(
        "runPolicy: the runtime's backoffLimit stays beside the job's restartPolicy",
        runtime("rt").framework("pytorch").set("runPolicy", {"backoffLimit": 7}).build(),
        JOB().set("runPolicy", {"restartPolicy": "Never"}).build(),
        lambda b: b["spec"]["runPolicy"],
        {"backoffLimit": 7, "restartPolicy": "Never"},
    ),
    MergeCase(
        "lists inside spec objects are replaced (placement.gpuProducts)",
        runtime("rt").framework("pytorch").set("placement", {"gpuProducts": ["A", "B"]}).build(),
        JOB().set("placement", {"gpuProducts": ["C"]}).build(),
        lambda b: b["spec"]["placement"]["gpuProducts"],
        ["C"],
    ),
    MergeCase(
        "ncclEnv merges by variable, the job's value winning",
        runtime("rt").framework("pytorch").set("ncclEnv", {"A": "1", "B": "1"}).build(),
        JOB().set("ncclEnv", {"B": "2"}).build(),
        lambda b: b["spec"]["ncclEnv"],
        {"A": "1", "B": "2"},
    ),
    MergeCase(
        "gpuSharing is replaced whole (no MIG profile left under mode Shared)",
        runtime("rt")
        .framework("pytorch")
        .set("gpuSharing", {"mode": "MIG", "migProfile": "1g.10gb"})
        .build(),
        JOB().set("gpuSharing", {"mode": "Shared"}).build(),
        lambda b: b["spec"]["gpuSharing"],
        {"mode": "Shared"},
    ),
    MergeCase(
        "replicas and gpus: the job's, else the runtime's",
        runtime("rt").framework("pytorch").role("Worker", replicas=4, gpus=8).build(),
        JOB().set("replicaSpecs", {"Worker": {"replicas": 2}}).build(),
        lambda b: b["spec"]["replicaSpecs"]["Worker"],
        {"replicas": 2, "gpus": 8},
    ),
    MergeCase(
        "a role only the runtime has is added to the job",
        runtime("rt").framework("mpi").role("Launcher", replicas=1, gpus=0).build(),
        JOB().build(),
        lambda b: sorted(b["spec"]["replicaSpecs"]),
        ["Launcher", "Worker"],
    ),
    MergeCase(
        "containers merge by name: the job's command onto the runtime's image and resources",
        runtime("rt")
        .framework("pytorch")
        .trainer(image="img:1", resources={"requests": {"cpu": "8"}})
        .build(),
        job("bert")
        .runtime_ref("rt")
        .workers(template={"spec": {"containers": [{"name": "trainer", "command": ["python"]}]}})
        .build(),
        _trainer,
        {
            "name": "trainer",
            "image": "img:1",
            "resources": {"requests": {"cpu": "8"}},
            "command": ["python"],
        },
    ),
    MergeCase(
        "a container of another name is added after the runtime's (a sidecar)",
        runtime("rt").framework("pytorch").pod().build(),
        job("bert")
        .runtime_ref("rt")
        .workers(template={"spec": {"containers": [{"name": "logger", "image": "busybox"}]}})
        .build(),
        lambda b: [x["name"] for x in _pod(b)["containers"]],
        ["trainer", "logger"],
    ),
    MergeCase(
        "initContainers merge by name",
        runtime("rt")
        .framework("pytorch")
        .pod(initContainers=[{"name": "fetch", "image": "a", "args": ["x"]}])
        .build(),
        job("bert")
        .runtime_ref("rt")
        .workers(template={"spec": {"initContainers": [{"name": "fetch", "args": ["y"]}]}})
        .build(),
        lambda b: _pod(b)["initContainers"],
        [{"name": "fetch", "image": "a", "args": ["y"]}],
    ),
    MergeCase(
        "env merges by name; the job's entry replaces the runtime's whole (one source)",
        runtime("rt")
        .framework("pytorch")
        .trainer(
            env=[
                {"name": "A", "value": "1"},
                {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            ]
        )
        .build(),
        job("bert")
        .runtime_ref("rt")
        .workers(
            template={
                "spec": {
                    "containers": [
                        {
                            "name": "trainer",
                            "env": [{"name": "B", "value": "2"}, {"name": "C", "value": "3"}],
                        }
                    ]
                }
            }
        )
        .build(),
        lambda b: _trainer(b)["env"],
        [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "C", "value": "3"}],
    ),
    MergeCase(
        "volumes merge by name; the job's volume replaces the runtime's (one type)",
        runtime("rt")
        .framework("pytorch")
        .pod(volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}])
        .build(),
        job("bert")
        .runtime_ref("rt")
        .workers(template={"spec": {"volumes": [{"name": "data", "emptyDir": {}}]}})
        .build(),
        lambda b: _pod(b)["volumes"],
        [{"name": "data", "emptyDir": {}}],
    ),
    MergeCase(
        "volumeMounts merge by name",
        runtime("rt")
        .framework("pytorch")
        .trainer(
            volumeMounts=[{"name": "data", "mountPath": "/data"}, {"name": "c", "mountPath": "/c"}]
        )
        .build(),
        job("bert")
        .runtime_ref("rt")
        .workers(
            template={
                "spec": {
                    "containers": [
                        {"name": "trainer", "volumeMounts": [{"name": "data", "mountPath": "/d"}]}
                    ]
                }
            }
        )
        .build(),
        lambda b: _trainer(b)["volumeMounts"],
        [{"name": "data", "mountPath": "/d"}, {"name": "c", "mountPath": "/c"}],
    ),
    MergeCase(
        "tolerations: the runtime's, then the job's new ones",
        runtime("rt")
        .framework("pytorch")
        .pod(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
        .build(),
        job("bert")
        .runtime_ref("rt")
        .workers(
            template={
                "spec": {
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists"},
                        {"key": "pool", "value": "a"},
                    ]
                }
            }
        )
        .build(),
        lambda b: _pod(b)["tolerations"],
        [{"key": "nvidia.com/gpu", "operator": "Exists"}, {"key": "pool", "value": "a"}],
    ),
    MergeCase(
        "command and args are replaced, never concatenated",
        runtime("rt").framework("pytorch").trainer(command=["a"], args=["1", "2"]).build(),
        job("bert")
        .runtime_ref("rt")
        .workers(template={"spec": {"containers": [{"name": "trainer", "args": ["3"]}]}})
        .build(),
        lambda b: (_trainer(b)["command"], _trainer(b)["args"]),
        (["a"], ["3"]),
    ),
    MergeCase(
        "labels and nodeSelector merge key by key",
        runtime("rt")
        .framework("pytorch")
        .role(
            "Worker",
            template={
                "metadata": {"labels": {"team": "x", "tier": "a"}},
                "spec": {"nodeSelector": {"a": "1"}},
            },
        )
        .build(),
        job("bert")
        .runtime_ref("rt")
        .workers(
            template={"metadata": {"labels": {"tier": "b"}}, "spec": {"nodeSelector": {"b": "2"}}}
        )
        .build(),
        lambda b: (
            b["spec"]["replicaSpecs"]["Worker"]["template"]["metadata"]["labels"],
            _pod(b)["nodeSelector"],
        ),
        ({"team": "x", "tier": "b"}, {"a": "1", "b": "2"}),
    ),
    MergeCase(
        "a null in the job is unset: the runtime's value stays",
        runtime("rt").framework("pytorch").set("cuda", "12.4").build(),
        JOB().set("cuda", None).build(),
        lambda b: b["spec"]["cuda"],
        "12.4",
    ),
    MergeCase(
        "lockedFields never reaches the job; runtimeRef stays",
        runtime("rt").framework("pytorch").lock("image").build(),
        JOB().build(),
        lambda b: ("lockedFields" in b["spec"], b["spec"]["runtimeRef"]),
        (False, {"kind": "ClusterTrainingRuntime", "name": "rt"}),
    ),
]


@pytest.mark.parametrize("case", MERGE_CASES, ids=[c.name for c in MERGE_CASES])
def test_merge_rules(case: MergeCase) -> None:
    assert case.check(merge(case.job, case.runtime)) == case.want


def test_merge_leaves_its_inputs_alone() -> None:
    rt, jb = RT().trainer(env=[{"name": "A", "value": "1"}]).build(), JOB().build()
    before = (repr(rt), repr(jb))
    merge(jb, rt)
    assert (repr(rt), repr(jb)) == before


# --- resolve ---------------------------------------------------------------------------


def PT() -> RuntimeBuilder:
    return (
        runtime("pytorch")
        .framework("pytorch", "2.4")
        .set("cuda", "12.4")
        .role("Worker", 2, 8)
        .pod()
    )


NS = "team-a"


@dataclass(frozen=True)
class ResolveCase:
    name: str
    job: dict[str, Any]
    runtimes: list[dict[str, Any]]
    reason: str | None  # None: resolved
    field: str = ""
    says: tuple[str, ...] = ()


RESOLVE_CASES = [
    ResolveCase(
        "a job without runtimeRef is returned as it is",
        job("bert").build(),
        [],
        None,
    ),
    ResolveCase(
        "a three-line job resolves against a complete runtime",
        job("bert", workers=None)
        .unset("framework", "cuda", "replicaSpecs")
        .runtime_ref("pytorch")
        .build(),
        [PT().build()],
        None,
    ),
    ResolveCase(
        "a missing ClusterTrainingRuntime names itself and how to list the others",
        job("bert").runtime_ref("nope").build(),
        [PT().build()],
        RUNTIME_NOT_FOUND,
        "spec.runtimeRef.name",
        ("ClusterTrainingRuntime nope not found", "kubectl get clustertrainingruntimes"),
    ),
    ResolveCase(
        "a TrainingRuntime is looked up in the job's namespace only",
        job("bert").runtime_ref("pytorch", "TrainingRuntime").build(),
        [runtime("pytorch", "other-ns").framework("pytorch").build()],
        RUNTIME_NOT_FOUND,
        "spec.runtimeRef.name",
        (f"TrainingRuntime pytorch not found in namespace {NS}",),
    ),
    ResolveCase(
        "a TrainingRuntime in the job's namespace is found",
        job("bert").runtime_ref("pytorch", "TrainingRuntime").build(),
        [runtime("pytorch", NS).framework("pytorch").build()],
        None,
    ),
    ResolveCase(
        "a bad runtimeRef kind is refused naming the field",
        job("bert").set("runtimeRef", {"kind": "JobSet", "name": "x"}).build(),
        [],
        RUNTIME_INVALID,
        "spec.runtimeRef.kind",
    ),
    ResolveCase(
        "an invalid runtime spec names the runtime, its field and the fix",
        job("bert").runtime_ref("pytorch").build(),
        [PT().set("cuda", "twelve").build()],
        RUNTIME_INVALID,
        "spec.cuda",
        (
            "ClusterTrainingRuntime pytorch is invalid",
            "kubectl edit clustertrainingruntime pytorch",
        ),
    ),
    ResolveCase(
        "a runtime pod template with a misspelt field is invalid",
        job("bert").runtime_ref("pytorch").build(),
        [PT().pod(contianers=[]).build()],
        RUNTIME_INVALID,
        "spec.replicaSpecs.Worker.template.spec.contianers",
    ),
    ResolveCase(
        "neither the job nor the runtime sets the framework",
        job("bert").unset("framework").runtime_ref("bare").build(),
        [runtime("bare").build()],
        RUNTIME_MERGE_INVALID,
        "spec.framework",
        ("neither the job nor ClusterTrainingRuntime bare sets it",),
    ),
    ResolveCase(
        "the merged spec is checked as the planner checks it (no GPUs at all)",
        job("bert", workers=None).unset("replicaSpecs").runtime_ref("pytorch").build(),
        [PT().role("Worker", gpus=0).build()],
        RUNTIME_MERGE_INVALID,
        "spec.replicaSpecs.Worker.gpus",
        ("merged with ClusterTrainingRuntime pytorch",),
    ),
    ResolveCase(
        "a locked field set to another value is refused",
        job("bert").runtime_ref("pytorch").set("image", "me/mine:1").build(),
        [PT().set("image", "nvcr.io/nvidia/pytorch:24.05-py3").lock("image").build()],
        RUNTIME_LOCKED,
        "spec.image",
        ("locks spec.image",),
    ),
    ResolveCase(
        "a locked field repeated with the runtime's value is fine",
        job("bert").runtime_ref("pytorch").build(),
        [PT().lock("framework", "cuda").build()],
        None,
    ),
    ResolveCase(
        "a locked object: a job key that changes it is refused",
        job("bert").runtime_ref("pytorch").run_policy(backoffLimit=100).build(),
        [PT().set("runPolicy", {"backoffLimit": 3}).lock("runPolicy").build()],
        RUNTIME_LOCKED,
        "spec.runPolicy",
    ),
    ResolveCase(
        "podSecurity: a job container's securityContext is refused",
        job("bert")
        .runtime_ref("pytorch")
        .template(containers=[{"name": "trainer", "securityContext": {"privileged": True}}])
        .build(),
        [PT().lock("podSecurity").build()],
        RUNTIME_LOCKED,
        "spec.replicaSpecs.Worker.template.spec.containers[0].securityContext",
        ("locks the pods' security settings",),
    ),
    ResolveCase(
        "podSecurity: hostNetwork in the job is refused",
        job("bert").runtime_ref("pytorch").template(hostNetwork=True).build(),
        [PT().lock("podSecurity").build()],
        RUNTIME_LOCKED,
        "spec.replicaSpecs.Worker.template.spec.hostNetwork",
    ),
]


@pytest.mark.parametrize("case", RESOLVE_CASES, ids=[c.name for c in RESOLVE_CASES])
def test_resolve(case: ResolveCase) -> None:
    got = resolve(case.job, runtime_index(case.runtimes))
    if case.reason is None:
        assert isinstance(got, Resolved), got
        return
    assert isinstance(got, RuntimeProblem), got
    assert (got.reason, got.field) == (case.reason, case.field), got
    for text in case.says:
        assert text in got.message, got.message


def test_resolved_records_the_runtime_and_its_generation() -> None:
    got = resolve(
        job("bert").runtime_ref("pytorch").build(),
        runtime_index([PT().generation(7).build()]),
    )
    assert isinstance(got, Resolved)
    assert got.status() == {
        "runtime": {"kind": "ClusterTrainingRuntime", "name": "pytorch", "generation": 7}
    }
    assert got.body["spec"]["framework"] == {"name": "pytorch", "version": "2.4"}


def test_no_runtime_no_status() -> None:
    got = resolve(job("bert").build(), {})
    assert isinstance(got, Resolved) and got.status() == {}


# --- a running gang keeps its merge (resolve_live) --------------------------------------


def _live(
    job_gen: int, runtimes: list[dict[str, Any]], gang_live: bool
) -> Resolved | RuntimeProblem:
    first = resolve(
        job("bert", cuda=None).runtime_ref("pytorch").build(),
        runtime_index([PT().generation(1).build()]),
    )
    assert isinstance(first, Resolved)
    now = job("bert", cuda=None).runtime_ref("pytorch").generation(job_gen).build()
    return resolve_live(now, runtime_index(runtimes), first, gang_live)


LIVE_CASES = [
    # (id, job generation, runtimes now, gang live, runtime generation wanted | problem reason)
    (
        "running-gang-keeps-its-merge-when-the-runtime-is-edited",
        1,
        [PT().set("cuda", "12.8").generation(2).build()],
        True,
        1,
    ),
    ("running-gang-survives-a-deleted-runtime", 1, [], True, 1),
    (
        "running-gang-survives-a-broken-runtime",
        1,
        [PT().set("cuda", "x").generation(2).build()],
        True,
        1,
    ),
    (
        "no-gang-merges-the-edited-runtime",
        1,
        [PT().set("cuda", "12.8").generation(2).build()],
        False,
        2,
    ),
    ("no-gang-waits-for-a-deleted-runtime", 1, [], False, RUNTIME_NOT_FOUND),
    ("a-job-edited-while-running-is-merged-again", 2, [PT().generation(3).build()], True, 3),
]


@pytest.mark.parametrize(
    ("job_gen", "rts", "live", "want"), [pytest.param(*c[1:], id=c[0]) for c in LIVE_CASES]
)
def test_resolve_live(job_gen: int, rts: list[dict[str, Any]], live: bool, want: int | str) -> None:
    got = _live(job_gen, rts, live)
    if isinstance(want, str):
        assert isinstance(got, RuntimeProblem) and got.reason == want
        return
    assert isinstance(got, Resolved) and got.runtime is not None
    assert got.runtime.generation == want
    assert got.body["metadata"]["generation"] == job_gen
    cuda = "12.8" if want == 2 else "12.4"
    assert got.body["spec"]["cuda"] == cuda

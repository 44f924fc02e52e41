"""Bad input at scale on the real control plane (issue 12).

Hypothesis writes a few hundred TrainingJob and TrainingQueue documents, near-valid ones
broken in every field, and sends each to the real apiserver (server-side dry-run, strict
field validation). Each is either refused with the field named, or accepted; whatever is
accepted must go through the operator's pure path without an exception (a TrainingJob
reconciles to a phase, a Invalid one naming a field; a TrainingQueue becomes a QueueState or
a QueueConfigError naming a field). A sample of the accepted documents is then created for
real with the operator running: every job reaches a phase with a clear message, no job is
left with a partial gang, and the operator stays up.

The examples are derandomized (the same documents every run: a fuzz test must not flake);
`FUZZ_JOBS` / `FUZZ_QUEUES` raise the counts for a longer local run.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.builders import A100, H100, job, queue
from tests.integration.conftest import Kube, OperatorProcess
from trainop.api import constants as c
from trainop.api.trainingjob import TrainingJobSpec
from trainop.cluster.fleet import load_fleet, node_manifests
from trainop.inventory import build_snapshot
from trainop.planner import OperatorConfig
from trainop.queueing import QueueConfigError, QueueState
from trainop.reconcile import reconcile

JOBS = int(os.environ.get("FUZZ_JOBS", "200"))
QUEUES = int(os.environ.get("FUZZ_QUEUES", "80"))
LIVE_JOBS = 30  # accepted jobs created for real, with the operator running
LIVE_QUEUES = 6
FUZZ = settings(
    max_examples=1,  # overridden per use
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)

names = st.one_of(
    st.from_regex(r"\A[a-z][a-z0-9-]{0,20}[a-z0-9]\Z"),
    st.integers(40, 70).map(lambda n: "j" * n),
    st.sampled_from(["Bert", "bert.v2", "bert_1", "1bert", "bert-", "-b", "a" * 254]),
)
roles = st.sampled_from(["Worker", "Worker", "Chief", "PS", "Launcher", "Master", "worker"])


def _containers(**fields: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "trainer", **fields}]}}


# Pod templates: harmless, escalating (refused by a queue's policy) and malformed.
TEMPLATES = [
    {},
    {"metadata": {"labels": {"team": "ok"}}},
    {"metadata": {"labels": {"team": "x" * 64}}},
    {"metadata": {"labels": {"a b": "x"}}},
    {"spec": {"hostNetwork": True}},
    {"spec": {"hostIPC": True, "hostPID": True}},
    {"spec": {"securityContext": {"runAsUser": 0}}},
    {"spec": {"volumes": [{"name": "h", "hostPath": {"path": "/dev"}}]}},
    {"spec": {"containers": {"name": "not-a-list"}}},
    {"spec": "not-a-pod-spec"},
    _containers(securityContext={"privileged": True}),
    _containers(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}}),
    _containers(image="evil.io/x:1"),
    _containers(image="Bad Image"),
]
templates = st.sampled_from(TEMPLATES)


@st.composite
def job_docs(draw: st.DrawFn, namespace: str, run: str) -> dict[str, Any]:
    """A valid one-worker job, then 1-2 breakages of any field (some harmless)."""
    name = draw(st.from_regex(r"\A[a-z][a-z0-9-]{0,14}[a-z0-9]\Z"))
    doc = job(name, namespace=namespace, workers=1, gpus=1).products(A100).manifest()
    spec = doc["spec"]
    worker = spec["replicaSpecs"]["Worker"]
    mutations = {
        "name": lambda: doc["metadata"].update(name=draw(names)),
        "framework": lambda: spec["framework"].update(
            name=draw(st.sampled_from(["mpi", "tensorflow", "torch", "jax"]))
        ),
        "version": lambda: spec["framework"].update(
            version=draw(st.sampled_from(["9.9", "two", "2"]))
        ),
        "cuda": lambda: spec.update(cuda=draw(st.sampled_from(["12", "abc", "99.9", "11.0"]))),
        "role": lambda: spec["replicaSpecs"].update({draw(roles): {"replicas": 1, "gpus": 0}}),
        "no-worker": lambda: spec.update(replicaSpecs={"Chief": {"replicas": 1, "gpus": 1}}),
        "replicas": lambda: worker.update(replicas=draw(st.sampled_from([0, -1, 2, 5000, 4097]))),
        "gpus": lambda: worker.update(gpus=draw(st.sampled_from([0, -1, 2, 65]))),
        "template": lambda: worker.update(template=draw(templates)),
        "image": lambda: spec.update(image=draw(st.sampled_from(["evil.io/x:1", "", "Bad Image"]))),
        "queue": lambda: spec.update(
            queue=draw(st.sampled_from([f"fuzz-q-0-{run}", f"fuzz-q-1-{run}", "Bad_Q", "nope"]))
        ),
        "priority": lambda: spec.update(
            priorityClassName=draw(st.sampled_from(["missing-pc", "Bad Name", "fuzz-pc"]))
        ),
        "placement": lambda: spec.update(
            placement=draw(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "topology": st.sampled_from(["rack", "galaxy"]),
                        "gpuProducts": st.sampled_from([[H100], ["NVIDIA-NOPE"], "A100"]),
                    },
                )
            )
        ),
        "run-policy": lambda: spec.update(
            runPolicy=draw(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "restartPolicy": st.sampled_from(["ExitCode", "Sometimes"]),
                        "backoffLimit": st.sampled_from([0, 3, -1]),
                        "activeDeadlineSeconds": st.sampled_from([0, 60]),
                    },
                )
            )
        ),
        "unknown-field": lambda: spec.update(bogusField=1),
    }
    broken = st.lists(st.sampled_from(sorted(mutations)), min_size=1, max_size=2, unique=True)
    for key in draw(broken):
        mutations[key]()
    return doc


@st.composite
def queue_docs(draw: st.DrawFn, namespace: str, run: str) -> dict[str, Any]:
    """A valid queue serving only the fuzz namespace, then 0-2 breakages."""
    doc = queue("fuzz").serves(namespace).quota("h100", 8, H100).quota("a100", 8).build()
    spec = doc["spec"]
    quotas = spec["quotas"]
    mutations = {
        "selector": lambda: spec.update(namespaceSelector={"matchLabels": {"trainop-fuzz": run}}),
        "default": lambda: spec.update(default=True),
        # Both pass CEL; the operator finds the clash (an unnamed quota's key is its product).
        "group-key-clash": lambda: (
            quotas[0].pop("name"),
            quotas.append({"name": "h100-80gb-hbm3", "products": ["NVIDIA-H200"], "gpus": 1}),
        ),
        "any-key-clash": lambda: (
            quotas.append({"name": "any", "products": ["NVIDIA-H200"], "gpus": 1})
            if quotas[1].pop("name")
            else None
        ),
        "same-product": lambda: quotas[1].update(products=[H100]),
        "same-name": lambda: quotas[1].update(name="h100"),
        "two-any": lambda: quotas[0].update(products=[]),
        "empty-product": lambda: quotas[0].update(products=[""]),
        "negative": lambda: quotas[0].update(gpus=-1),
        "borrow": lambda: quotas[0].update(borrowingLimit=draw(st.sampled_from([-2, 0, 4]))),
        "weight": lambda: spec.update(weight=draw(st.sampled_from([0, -1, 0.5]))),
        "cohort": lambda: spec.update(cohort=f"fuzz-{run}"),
        "policy": lambda: spec.update(
            policy=draw(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "allowedImagePrefixes": st.sampled_from(
                            [["nvcr.io/nvidia/"], ["nvcr.io"], [""]]
                        ),
                        "maxGpusPerJob": st.sampled_from([1, 0, 8]),
                        "allowHostIPC": st.booleans(),
                        "allowHostPid": st.booleans(),
                    },
                )
            )
        ),
        "unknown-field": lambda: spec.update(bogus=True),
    }
    for key in draw(st.lists(st.sampled_from(sorted(mutations)), max_size=2, unique=True)):
        mutations[key]()
    name = draw(st.sampled_from(["fuzz-q-0", "fuzz-q-1", "fuzz-q-2", "fuzz-q-3", "Fuzz_Q"]))
    doc["metadata"]["name"] = f"{name}-{run}" if name != "Fuzz_Q" else name
    return doc


def _refusal(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body).get("message", ""))
    except (TypeError, ValueError):
        return str(exc.body)


def _names_a_field(message: str) -> bool:
    return any(k in message for k in ("spec.", "metadata.name", "unknown field", ".spec"))


NOW = datetime(2025, 6, 1, 12, 0, 0)
CONFIG = OperatorConfig()
SNAPSHOT = build_snapshot(node_manifests(load_fleet()))


def _pure_verdict(doc: dict[str, Any]) -> str:
    """The operator's pure path on an accepted job: a phase, never an exception."""
    body = json.loads(json.dumps(doc))
    body["metadata"].setdefault("uid", "fuzz-uid")
    acts = reconcile(body, [], lambda: SNAPSHOT, CONFIG, NOW, priority_classes={"fuzz-pc"})
    phase = str(acts.status.get("phase"))
    if phase == "Invalid":
        msg = next(x["message"] for x in acts.status["conditions"] if x["type"] == "Invalid")
        assert _names_a_field(msg) or msg.startswith("spec"), msg
    return phase


@pytest.fixture(scope="module")
def api(kube: Kube, crds_installed: None) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(config.new_client_from_config(config_file=kube.kubeconfig))


@pytest.fixture
def fuzz_ns(kube: Kube) -> Iterator[tuple[str, str]]:
    run = uuid.uuid4().hex[:6]
    ns = f"fuzz-{run}"
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"trainop-fuzz": run}},
        }
    )
    kube.apply(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "fuzz-pc"},
            "value": 5,
        }
    )
    yield ns, run
    kube.run("delete", "trainingqueues", "-l", f"trainop-fuzz={run}", "--wait=false", check=False)
    kube.run("delete", "trainingjobs", "--all", "-n", ns, "--wait=false", check=False)
    # Leave the fleet as found: later tests plan against it.
    kube.wait_for("fuzz pods gone", lambda: not kube.get("pods", "-n", ns)["items"], timeout=60)
    kube.run("delete", "namespace", ns, "--wait=false", check=False)


def _create(api: client.CustomObjectsApi, doc: dict[str, Any], dry: bool) -> str:
    """'' when accepted, else the apiserver's refusal."""
    kw: dict[str, Any] = {"field_validation": "Strict"}
    if dry:
        kw["dry_run"] = "All"
    try:
        if doc["kind"] == "TrainingJob":
            ns = doc["metadata"]["namespace"]
            api.create_namespaced_custom_object(c.GROUP, c.VERSION, ns, "trainingjobs", doc, **kw)
        else:
            api.create_cluster_custom_object(c.GROUP, c.VERSION, "trainingqueues", doc, **kw)
    except ApiException as exc:
        assert exc.status in (400, 422), (exc.status, _refusal(exc))
        return _refusal(exc) or "(refused)"
    return ""


def test_fuzzed_documents_are_refused_with_the_field_or_handled(
    api: client.CustomObjectsApi,
    kube: Kube,
    operator: OperatorProcess,
    fuzz_ns: tuple[str, str],
) -> None:
    ns, run = fuzz_ns
    tally: Counter[str] = Counter()
    live_jobs: list[dict[str, Any]] = []
    live_queues: list[dict[str, Any]] = []
    live_verdicts: list[str] = []

    @settings(FUZZ, max_examples=JOBS)
    @given(job_docs(ns, run))
    def jobs(doc: dict[str, Any]) -> None:
        refusal = _create(api, doc, dry=True)
        if refusal:
            assert _names_a_field(refusal), refusal
            tally["job refused"] += 1
            return
        verdict = _pure_verdict(doc)
        tally[f"job accepted -> {verdict}"] += 1
        # Live sample: up to a third Invalid ones, the rest valid; one job per name.
        quota = LIVE_JOBS // 3 if verdict == "Invalid" else LIVE_JOBS - LIVE_JOBS // 3
        taken = {j["metadata"]["name"] for j in live_jobs}
        if sum(v == verdict for v in live_verdicts) < quota and (
            doc["metadata"]["name"] not in taken
        ):
            live_jobs.append(doc)
            live_verdicts.append(verdict)

    @settings(FUZZ, max_examples=QUEUES)
    @given(queue_docs(ns, run))
    def queues(doc: dict[str, Any]) -> None:
        refusal = _create(api, doc, dry=True)
        if refusal:
            assert _names_a_field(refusal), refusal
            tally["queue refused"] += 1
            return
        try:
            QueueState.from_resource(doc)
            kind = "usable"
        except QueueConfigError as exc:
            assert exc.field.startswith("spec."), exc
            kind = "invalid"
        tally[f"queue accepted -> {kind}"] += 1
        names = {q["metadata"]["name"] for q in live_queues}
        if len(live_queues) < LIVE_QUEUES and doc["metadata"]["name"] not in names:
            live_queues.append(doc)

    started = time.monotonic()
    jobs()
    queues()
    print(
        f"fuzz: {sum(tally.values())} documents in {time.monotonic() - started:.1f} s: "
        f"{dict(sorted(tally.items()))}"
    )
    assert tally["job refused"] and any(k.startswith("job accepted") for k in tally)

    _run_live(api, kube, operator, ns, run, live_queues, live_jobs)


def _run_live(
    api: client.CustomObjectsApi,
    kube: Kube,
    operator: OperatorProcess,
    ns: str,
    run: str,
    queues: list[dict[str, Any]],
    jobs: list[dict[str, Any]],
) -> None:
    """Create accepted documents for real; every job gets a clear phase, no partial gangs."""
    for q in queues:
        q["metadata"]["labels"] = {"trainop-fuzz": run}
        assert _create(api, q, dry=False) == ""
    for j in jobs:
        assert _create(api, j, dry=False) == ""
    names = {j["metadata"]["name"] for j in jobs}

    def settled() -> list[dict[str, Any]] | None:
        items = api.list_namespaced_custom_object(c.GROUP, c.VERSION, ns, "trainingjobs")["items"]
        mine = [i for i in items if i["metadata"]["name"] in names]
        done = all((i.get("status") or {}).get("phase") for i in mine)
        return mine if done and len(mine) == len(names) else None

    items = kube.wait_for("every fuzzed job to have a phase", settled, timeout=60, interval=1)
    phases = Counter(i["status"]["phase"] for i in items)
    print(f"fuzz live: {len(queues)} queues, {len(items)} jobs: {dict(sorted(phases.items()))}")
    for item in items:
        st = item["status"]
        conds = {x["type"]: x for x in st.get("conditions") or []}
        if st["phase"] == "Invalid":
            assert ": " in conds["Invalid"]["message"], conds["Invalid"]
        if st["phase"] == "Queued":
            assert st.get("pendingReason") or conds["Queued"]["reason"], st
    pods = kube.get("pods", "-n", ns)["items"]
    by_job = Counter(p["metadata"]["labels"].get(c.LABEL_JOB_NAME) for p in pods)
    for item in items:
        count = by_job.get(item["metadata"]["name"], 0)
        if item["status"]["phase"] in ("Invalid", "Queued"):
            assert count == 0, (item["metadata"]["name"], item["status"])
        else:  # a gang is whole or absent, never partial
            spec = TrainingJobSpec.model_validate(item["spec"])
            assert count in (0, spec.total_pods), (item["metadata"]["name"], count)
    assert operator.proc is not None and operator.proc.poll() is None, operator.log_tail()
    log = operator.log_path.read_text(errors="replace")
    assert f"reconcile of {ns}/" not in log, operator.log_tail()

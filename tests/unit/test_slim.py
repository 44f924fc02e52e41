"""handlers.slim: a slim pod answers every reader exactly as the whole pod does.

Each case is a pod the operator meets (rendered by the planner, pinned, bound, gated,
sidecars, overhead, each failure kind, deleting); each reader of cached pods is asked about
the whole body and about its slim copy, and must say the same.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from tests.builders import fleet_snapshot, job, pod
from trainop.failures import classify_failed, image_pull_failure
from trainop.handlers.slim import slim_job, slim_node, slim_pod
from trainop.inventory.pods import is_gated, is_terminated, pod_binding, pod_request
from trainop.planner import OperatorConfig, Plan, plan_job
from trainop.reconcile import _generation, _lost_nodes


def _rendered(replicas: int, gpus: int) -> dict[str, Any]:
    result = plan_job(job("r").workers(replicas, gpus).build(), fleet_snapshot(), OperatorConfig())
    assert isinstance(result, Plan), result
    return result.pods[-1]


W = "j-worker-0"  # pod(name) reads the job, role and index from the name
CASES: dict[str, Callable[[], dict[str, Any]]] = {
    "rendered by the planner (3 affinity terms)": lambda: _rendered(2, 8),
    "rendered, part of a node": lambda: _rendered(1, 2),
    "pinned, gated, 3 terms": lambda: pod(W).gpus(8).pinned("n1", terms=3).build(),
    "pinned to two hosts (no binding)": lambda: pod(W).gpus(8).pinned("n1", "n2").build(),
    "bound and running": lambda: pod(W).gpus(4).bound("n1").running().build(),
    "node selector": lambda: pod(W).gpus(2).node_selector("n3").build(),
    "sidecar and overhead": lambda: pod(W).gpus(2).init(1, sidecar=True).overhead(1).build(),
    "failed with code 3": lambda: pod(W).gpus(8).bound("n1").failed(3).build(),
    "OOM killed": lambda: pod(W).gpus(8).bound("n1").oom_killed().build(),
    "evicted": lambda: pod(W).gpus(8).bound("n1").evicted().build(),
    "node lost": lambda: pod(W).gpus(8).bound("n1").node_lost().build(),
    "image pull": lambda: pod(W).gpus(8).on("n1").image_pull().build(),
    "deleting": lambda: pod(W).gpus(8).bound("n1").deleting().build(),
    "restarted gang": lambda: pod(W).gpus(8).generation(2).bound("n1").build(),
}


def _answers(p: Mapping[str, Any]) -> dict[str, Any]:
    phase = (p.get("status") or {}).get("phase")
    return {
        "binding": pod_binding(p),
        "gpus": pod_request(p),
        "gated": is_gated(p),
        "terminated": is_terminated(p),
        "failure": classify_failed(p) if phase == "Failed" else None,
        "image pull": image_pull_failure(p),
        "lost nodes": _lost_nodes([p], fleet_snapshot()),
        "generation": _generation(p),
        "owners": [o.get("uid") for o in p["metadata"].get("ownerReferences") or []],
        "labels": p["metadata"].get("labels"),
    }


@pytest.mark.parametrize("case", list(CASES))
def test_slim_pod_answers_as_the_whole_pod(case: str) -> None:
    whole = CASES[case]()
    assert _answers(slim_pod(whole)) == _answers(whole)


def _terms(p: Mapping[str, Any]) -> list[Any]:
    affinity = p["spec"]["affinity"]["nodeAffinity"]
    terms: list[Any] = affinity["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    return terms


def test_slim_pod_keeps_one_pin_term_and_no_env() -> None:
    whole = _rendered(2, 8)
    slim = slim_pod(whole)
    # The pod as created already has one (the term its node meets, planner._pinned_terms);
    # one that came with all of the catalog's terms (made before) is slimmed to one too.
    assert len(_terms(slim)) == 1 == len(_terms(whole))
    many = copy.deepcopy(whole)
    affinity = many["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    terms.append(copy.deepcopy(terms[0]))
    assert len(_terms(slim_pod(many))) == 1 < len(_terms(many))
    assert "env" not in slim["spec"]["containers"][0]


def test_slim_copies_share_nothing_and_intern_strings() -> None:
    whole = pod(W).gpus(8).bound("n1").running().build()
    slim = slim_pod(whole)
    whole["metadata"]["labels"]["x"] = "y"
    whole["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    assert "x" not in slim["metadata"]["labels"] and pod_request(slim) == 8
    name = "".join(["n", "1"])  # built at run time: not the same object unless interned
    assert slim["spec"]["nodeName"] is sys.intern(name)


def test_slim_job_and_node_drop_what_nobody_reads() -> None:
    body = job("j").workers(1, 8).build()
    body["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    assert "managedFields" not in slim_job(body)["metadata"]
    assert slim_job(body)["spec"] == body["spec"]
    node = {
        "metadata": {"name": "n1", "labels": {"a": "b"}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "lastHeartbeatTime": "t"}]},
    }
    assert slim_node(node)["status"]["conditions"] == [{"type": "Ready"}]

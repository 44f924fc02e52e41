"""`trainop cluster up` returns a schedulable fleet: a node counts once it is Ready and the
node lifecycle controller took its node.kubernetes.io/not-ready taint off (issue 33)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from trainop.cluster.local import NOT_READY_TAINT, node_schedulable, stages_path


def _node(ready: str | None, *taints: tuple[str, str]) -> dict[str, Any]:
    node: dict[str, Any] = {"metadata": {"name": "n"}, "spec": {}, "status": {}}
    if ready is not None:
        node["status"]["conditions"] = [{"type": "Ready", "status": ready}]
    if taints:
        node["spec"]["taints"] = [{"key": k, "effect": e} for k, e in taints]
    return node


@pytest.mark.parametrize(
    ("node", "schedulable"),
    [
        pytest.param(_node("True"), True, id="ready-untainted"),
        pytest.param(
            _node("True", (NOT_READY_TAINT, "NoSchedule")), False, id="ready-still-tainted"
        ),
        pytest.param(_node("False", (NOT_READY_TAINT, "NoSchedule")), False, id="not-ready"),
        pytest.param(_node(None), False, id="no-conditions-yet"),
        pytest.param(_node("True", ("nvidia.com/gpu", "NoSchedule")), True, id="other-taint"),
    ],
)
def test_node_schedulable(node: dict[str, Any], schedulable: bool) -> None:
    assert node_schedulable(node) is schedulable


def test_controller_manager_client_is_not_throttled_to_20_qps() -> None:
    """The taint comes off with one write per node; the default 20 requests a second of
    the controller manager's client left 1,000 nodes tainted for minutes."""
    docs = list(yaml.safe_load_all(stages_path().read_text()))
    config = next(d for d in docs if d and d.get("kind") == "KwokctlConfiguration")
    kcm = next(p for p in config["componentsPatches"] if p["name"] == "kube-controller-manager")
    args = {a["key"]: int(a["value"]) for a in kcm["extraArgs"]}
    assert args["kube-api-qps"] >= 200
    assert args["kube-api-burst"] >= args["kube-api-qps"]

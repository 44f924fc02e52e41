"""TensorFlow wiring: TF_CONFIG per pod, one cluster spec for all, evaluator outside it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trainop import frameworks as fw
from trainop.frameworks import Member, WiringInput, member_host


def gang(*members: tuple[str, int, int | None, int], port: int = 2222) -> WiringInput:
    """(role, index, rank, gpus) tuples -> WiringInput for job mnist in namespace team."""
    return WiringInput(
        job="mnist",
        namespace="team",
        members=tuple(
            Member(r, i, k, g, member_host("mnist", "team", r, i, served=True))
            for r, i, k, g in members
        ),
        port=port,
    )


def addr(role: str, index: int, port: int = 2222) -> str:
    return f"mnist-{role}-{index}.mnist.team.svc:{port}"


def tf_configs(inp: WiringInput) -> dict[tuple[str, int], dict[str, Any]]:
    w = fw.wire("tensorflow", inp)
    assert all(list(env) == ["TF_CONFIG"] for env in w.env.values())
    return {k: json.loads(env["TF_CONFIG"]) for k, env in w.env.items()}


CASES = [
    pytest.param(
        gang(("Worker", 0, 0, 8), ("Worker", 1, 1, 8)),
        {"worker": [addr("worker", 0), addr("worker", 1)]},
        {("Worker", 0): ("worker", 0), ("Worker", 1): ("worker", 1)},
        id="workers-only",
    ),
    pytest.param(
        gang(
            ("Chief", 0, 0, 4),
            ("Worker", 0, 1, 4),
            ("Worker", 1, 2, 4),
            ("PS", 0, None, 0),
            ("PS", 1, None, 0),
            ("Evaluator", 0, None, 1),
        ),
        {
            "chief": [addr("chief", 0)],
            "worker": [addr("worker", 0), addr("worker", 1)],
            "ps": [addr("ps", 0), addr("ps", 1)],
        },
        {
            ("Chief", 0): ("chief", 0),
            ("Worker", 0): ("worker", 0),
            ("Worker", 1): ("worker", 1),
            ("PS", 0): ("ps", 0),
            ("PS", 1): ("ps", 1),
            ("Evaluator", 0): ("evaluator", 0),
        },
        id="chief-workers-ps-evaluator",
    ),
    pytest.param(
        gang(("Chief", 0, 1, 8), ("Worker", 0, 2, 8), ("Worker", 1, 0, 8), ("Worker", 2, 3, 8)),
        {
            "chief": [addr("chief", 0)],
            "worker": [addr("worker", 1), addr("worker", 0), addr("worker", 2)],
        },
        {
            ("Chief", 0): ("chief", 0),
            ("Worker", 1): ("worker", 0),
            ("Worker", 0): ("worker", 1),
            ("Worker", 2): ("worker", 2),
        },
        id="workers-in-rank-order",
    ),
    pytest.param(
        gang(("Worker", 0, 2, 8), ("Worker", 1, 0, 8), ("Evaluator", 0, 1, 1)),
        {"worker": [addr("worker", 1), addr("worker", 0)]},
        {
            ("Worker", 1): ("worker", 0),
            ("Worker", 0): ("worker", 1),
            ("Evaluator", 0): ("evaluator", 0),
        },
        id="gpu-evaluator-ranked-by-placement",
    ),
    pytest.param(  # render exited 1 ("members Chief-0 have no rank while others do")
        gang(("Chief", 0, None, 0), ("Worker", 0, 1, 8), ("Worker", 1, 0, 8), ("PS", 0, None, 0)),
        {
            "chief": [addr("chief", 0)],
            "worker": [addr("worker", 1), addr("worker", 0)],
            "ps": [addr("ps", 0)],
        },
        {
            ("Chief", 0): ("chief", 0),
            ("Worker", 1): ("worker", 0),
            ("Worker", 0): ("worker", 1),
            ("PS", 0): ("ps", 0),
        },
        id="cpu-chief-gpu-workers",
    ),
    pytest.param(
        gang(("Worker", 0, 0, 8), ("Evaluator", 0, None, 1), port=5000),
        {"worker": [addr("worker", 0, 5000)]},
        {("Worker", 0): ("worker", 0), ("Evaluator", 0): ("evaluator", 0)},
        id="custom-port",
    ),
]


@pytest.mark.parametrize(("inp", "cluster", "tasks"), CASES)
def test_tf_config(
    inp: WiringInput, cluster: dict[str, list[str]], tasks: dict[tuple[str, int], tuple[str, int]]
) -> None:
    configs = tf_configs(inp)
    assert set(configs) == set(tasks)
    for key, (task_type, task_index) in tasks.items():
        assert configs[key]["cluster"] == cluster, key
        assert configs[key]["task"] == {"type": task_type, "index": task_index}, key


def test_cluster_is_byte_identical_across_pods() -> None:
    inp = gang(
        ("Chief", 0, 0, 8), ("Worker", 0, 1, 8), ("PS", 0, None, 0), ("Evaluator", 0, None, 0)
    )
    raw = [env["TF_CONFIG"] for env in fw.wire("tensorflow", inp).env.values()]
    clusters = {s[: s.index(',"task"')] for s in raw}
    assert len(clusters) == 1


def test_json_is_compact_with_sorted_keys() -> None:
    env = fw.wire("tensorflow", gang(("Worker", 0, 0, 8))).env[("Worker", 0)]
    assert env["TF_CONFIG"] == (
        '{"cluster":{"worker":["mnist-worker-0.mnist.team.svc:2222"]},'
        '"task":{"index":0,"type":"worker"}}'
    )


def test_evaluator_is_not_in_cluster_spec() -> None:
    configs = tf_configs(gang(("Worker", 0, 0, 8), ("Evaluator", 0, None, 1)))
    for cfg in configs.values():
        assert "evaluator" not in cfg["cluster"]
    assert configs[("Evaluator", 0)]["task"] == {"type": "evaluator", "index": 0}


def test_ports() -> None:
    inp = gang(
        ("Chief", 0, 0, 8), ("Worker", 0, 1, 8), ("PS", 0, None, 0), ("Evaluator", 0, None, 0)
    )
    w = fw.wire("tensorflow", inp)
    assert w.container_ports == {
        "Chief": (2222,),
        "Evaluator": (),
        "PS": (2222,),
        "Worker": (2222,),
    }
    assert not w.needs_ssh and w.command_for is None and w.config_files == {}


def test_spec() -> None:
    spec = fw.get("tensorflow")
    assert set(spec.roles) == {"Chief", "Worker", "PS", "Evaluator"}
    assert spec.max_replicas == {"Chief": 1, "Evaluator": 1}
    assert spec.ranked == ("Chief", "Worker")
    assert spec.default_port == 2222


def test_needs_chief_or_worker() -> None:
    with pytest.raises(ValueError, match="Chief or Worker"):
        fw.wire("tensorflow", gang(("Evaluator", 0, None, 1)))

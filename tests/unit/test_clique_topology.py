"""placement.topology: clique (issue 36): one multi-node NVLink domain (nvidia.com/gpu.clique,
e.g. a GB200 NVL72 rack) as a Required or Preferred placement level."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import job as make_job
from tests.builders import node as make_node
from trainop.api import constants as c
from trainop.catalog import load_catalog
from trainop.catalog.gfd import LABEL_ARCH
from trainop.inventory import build_snapshot
from trainop.planner import OperatorConfig, Plan, Wait, plan_job
from trainop.queueing.inadmissible import fleet_shortfall
from trainop.workload import topology_key

LEVELS = (c.LABEL_RACK, c.LABEL_HOSTNAME)
ARM_OK = {"images": {"pytorch": {"unconfirmed": []}, "mpi": {"unconfirmed": ["horovod"]}}}
CONFIG = OperatorConfig(topology_levels=LEVELS, catalog=load_catalog(overrides=ARM_OK))
GB200 = ("NVIDIA-GB200", ("10", "0"))


def tray(name: str, clique: str | None, rack: str = "nvl0", gpus: int = 4) -> Any:
    b = make_node(name).gfd(GB200[0], "580.95.05", GB200[1]).rack(rack).gpus(gpus)
    b = b.labels({LABEL_ARCH: "arm64"})
    if clique is not None:
        b = b.clique(clique)
    return b.build()


# one rack, two cliques of two trays each; and a rack of trays without clique labels
TWO_CLIQUES = (
    tray("a1", "nvl0.0"),
    tray("a2", "nvl0.0"),
    tray("b1", "nvl0.1"),
    tray("b2", "nvl0.1"),
)
NO_LABEL = (tray("u1", None, "r-u"), tray("u2", None, "r-u"))


def job(pods: int, mode: str) -> dict[str, Any]:
    b = make_job("j", "pytorch", None, None, namespace="ns", workers=None)
    return b.workers(pods, 4, {}).placement("clique", mode).build()


CASES = [
    # fleet, pods, mode, placed on (None: waits), words of the wait or the placement
    pytest.param(TWO_CLIQUES, 2, "Required", {"a1", "a2"}, "in clique nvl0.0", id="fits-one"),
    pytest.param(TWO_CLIQUES, 3, "Required", None, "one clique", id="required-does-not-span-two"),
    pytest.param(
        TWO_CLIQUES, 3, "Preferred", {"a1", "a2", "b1"}, "Preferred", id="preferred-widens"
    ),
    pytest.param(
        NO_LABEL,
        2,
        "Required",
        None,
        "no eligible node carries label nvidia.com/gpu.clique",
        id="unlabelled-required-waits-naming-the-label",
    ),
    pytest.param(NO_LABEL, 1, "Required", {"u1"}, "", id="one-pod-needs-no-label"),
]


@pytest.mark.parametrize(("fleet", "pods", "mode", "nodes", "words"), CASES)
def test_clique_topology(
    fleet: tuple[Any, ...], pods: int, mode: str, nodes: Any, words: str
) -> None:
    result = plan_job(job(pods, mode), build_snapshot(list(fleet), levels=LEVELS), CONFIG)
    if nodes is None:
        assert isinstance(result, Wait), result
        text = " ".join([result.message, *result.details])
        assert words in text, text
        return
    assert isinstance(result, Plan), result
    assert set(result.placement.nodes) == nodes or len(result.placement.nodes) == len(nodes)
    assert words in result.placement.explanation, result.placement.explanation


def test_a_gang_larger_than_any_clique_is_inadmissible() -> None:
    snapshot = build_snapshot(list(TWO_CLIQUES), levels=LEVELS)
    why = fleet_shortfall(12, 4, (), "clique", "Required", snapshot)
    assert why == "needs 12 GPUs in one clique (Required); the largest clique has 8 GPUs"
    assert fleet_shortfall(12, 4, (), "clique", "Preferred", snapshot) is None


@pytest.mark.parametrize(
    ("topology", "mode", "key"),
    [
        pytest.param("clique", "Required", c.LABEL_GPU_CLIQUE, id="clique-required"),
        pytest.param("clique", "Preferred", None, id="clique-preferred"),
        pytest.param("rack", "Required", c.LABEL_RACK, id="rack-required"),
    ],
)
def test_kubernetes_gang_scheduling_topology_key(topology: str, mode: str, key: Any) -> None:
    assert topology_key(topology, mode, LEVELS) == key

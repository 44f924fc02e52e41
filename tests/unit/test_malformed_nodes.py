"""Malformed node labels never crash inventory, catalog, placement or a reconcile (issue 12).

Hypothesis takes the default fake fleet and breaks its nodes' GFD and topology labels and
allocatable quantities: non-integer driver versions, missing or contradictory labels (new and
deprecated GFD generations disagreeing), nonsense quantities, labels that are not strings.
Every function must return a value (a snapshot, a verdict, a Plan or Wait, an Actions), or
raise the InvalidJob that reconcile turns into phase Invalid; never anything else.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import NOW, job
from trainop.api import constants as c
from trainop.catalog import check_node, gpu_facts_from_labels, load_catalog
from trainop.cluster.fleet import load_fleet, node_manifests
from trainop.inventory import build_snapshot
from trainop.planner import InvalidJob, OperatorConfig, Plan, Wait, plan_job
from trainop.reconcile import reconcile

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CONFIG = OperatorConfig()
CATALOG = load_catalog()
FLEET = tuple(node_manifests(load_fleet()))

GFD_KEYS = [
    c.GFD_PRODUCT,
    c.GFD_COUNT,
    c.GFD_MEMORY,
    c.GFD_FAMILY,
    c.GFD_COMPUTE_MAJOR,
    c.GFD_COMPUTE_MINOR,
    c.GFD_DRIVER_MAJOR,
    c.GFD_DRIVER_MINOR,
    c.GFD_DRIVER_REVISION,
    c.GFD_DRIVER_FULL,
    c.GFD_RUNTIME_MAJOR,
    c.GFD_RUNTIME_MINOR,
    c.GFD_DRIVER_MAJOR_OLD,
    c.GFD_DRIVER_MINOR_OLD,
    c.GFD_DRIVER_REV_OLD,
    c.GFD_RUNTIME_MAJOR_OLD,
    c.GFD_RUNTIME_MINOR_OLD,
    c.GFD_MIG_CAPABLE,
    c.LABEL_GPU_CLIQUE,
    c.LABEL_RACK,
    c.LABEL_BLOCK,
    c.LABEL_HOSTNAME,
]

label_values = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            "550",
            "550.54.14",
            "550.54",
            "abc",
            "5.5.5.5.5",
            "-1",
            "12",
            "12.4",
            "0",
            "99999999999999999999",
            "NVIDIA-H100-80GB-HBM3",
            "1e3",
            "٣",
        ]
    ),
    st.text(max_size=12),
    st.integers(-5, 10**6).map(str),
    st.none(),  # the label goes away
    st.integers(0, 9),  # not a string at all (a broken client wrote it)
)
quantities = st.one_of(
    st.sampled_from(["8", "0", "-8", "8.5", "1k", "abc", "", "4Gi", "1e2", "100m"]),
    st.integers(-3, 16),
    st.none(),
)


@st.composite
def broken_fleets(draw: st.DrawFn) -> list[dict[str, Any]]:
    nodes = [copy.deepcopy(n) for n in FLEET]
    for node in draw(st.lists(st.sampled_from(nodes), min_size=1, max_size=6, unique_by=id)):
        labels = node["metadata"].setdefault("labels", {})
        for key in draw(st.lists(st.sampled_from(GFD_KEYS), max_size=6)):
            value = draw(label_values)
            if value is None:
                labels.pop(key, None)
            else:
                labels[key] = value
        if draw(st.booleans()):
            alloc = node.setdefault("status", {}).setdefault("allocatable", {})
            value = draw(quantities)
            if value is None:
                alloc.pop(c.RESOURCE_GPU, None)
            else:
                alloc[c.RESOURCE_GPU] = value
    return nodes


@SETTINGS
@given(broken_fleets())
def test_broken_labels_never_crash_inventory_catalog_or_placement(nodes: list[dict]) -> None:
    snap = build_snapshot(nodes)
    for n in snap.nodes:
        check_node(CATALOG, n.gpu, (12, 4), None)
        assert n.gpus_allocatable >= 0
    try:
        result = plan_job(job().build(), snap, CONFIG)
    except InvalidJob as exc:
        assert exc.field.startswith("spec.")
    else:
        assert isinstance(result, Plan | Wait)


@SETTINGS
@given(broken_fleets())
def test_broken_labels_never_crash_a_reconcile(nodes: list[dict]) -> None:
    snap = build_snapshot(nodes)
    acts = reconcile(job().build(), [], lambda: snap, CONFIG, NOW)
    assert acts.status["phase"] in ("Admitted", "Queued", "Invalid")


@SETTINGS
@given(st.dictionaries(st.sampled_from(GFD_KEYS), label_values.filter(lambda v: v is not None)))
def test_gfd_parsing_is_total(labels: dict[str, Any]) -> None:
    facts = gpu_facts_from_labels({k: v for k, v in labels.items()})
    assert facts.driver is None or all(isinstance(p, int) for p in facts.driver)


def test_contradictory_driver_generations_prefer_the_newer_labels() -> None:
    facts = gpu_facts_from_labels(
        {c.GFD_DRIVER_MAJOR: "550", c.GFD_DRIVER_MINOR: "54", c.GFD_DRIVER_MAJOR_OLD: "470"}
    )
    assert facts.driver == (550, 54)

"""Property tests: a chosen image never runs outside its architecture range or driver rule.

An independent oracle restates the rules from the catalog tables (not through
`check_node`) and is checked on every node of every placement hypothesis finds.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import job, node
from trainop.api import constants as c
from trainop.catalog import Release, load_catalog
from trainop.catalog.compat import MODE_FORWARD, MODE_MINOR, MODE_NATIVE, MODES
from trainop.inventory import build_snapshot
from trainop.planner import InvalidJob, OperatorConfig, Plan, plan_job

CAT = load_catalog()
LEVELS = (c.LABEL_RACK, c.LABEL_HOSTNAME)
PRODUCTS = [g for g in CAT.gpus]
DRIVERS = [
    "418.87.01",
    "450.80.02",
    "470.57.02",
    "510.47.03",
    "525.60.13",
    "525.85.12",
    "535.104.05",
    "545.23.08",
    "550.54.15",
    "560.35.03",
    "570.86.10",
    "575.51.03",
    "580.65.06",
    "590.44.01",
    "610.43.02",
]


@st.composite
def fleets(draw: Any) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 6))
    nodes = []
    for i in range(n):
        g = draw(st.sampled_from(PRODUCTS))
        driver = draw(st.sampled_from(DRIVERS))
        rack = f"r{draw(st.integers(0, 1))}"
        gpus = draw(st.sampled_from([4, 8]))
        compute = (str(g.cc[0]), str(g.cc[1]))
        nodes.append(node(f"n{i}").gfd(g.label, driver, compute).rack(rack).gpus(gpus).build())
    return nodes


@st.composite
def jobs(draw: Any) -> dict[str, Any]:
    fw = draw(st.sampled_from(["pytorch", "tensorflow", "mxnet", "jax"]))
    builder = job("p", fw, None, None, namespace="ns", workers=None)
    builder.workers(draw(st.integers(1, 3)), draw(st.sampled_from([1, 4, 8])))
    builder.set("placement", {"topology": draw(st.sampled_from(["none", "rack"]))})
    if fw == "mxnet":
        builder.role("Server", 1).role("Scheduler", 1)
    cuda = draw(st.sampled_from([None, "11.2", "12.1", "12.4", "12.8", "13.0"]))
    return builder.cuda(cuda).build()


def _arch_ok(cc: tuple[int, int], rel: Release) -> bool:
    cuda = rel.cuda_mm
    floor_major = max((v for k, v in CAT.cuda_min_cc if k <= cuda[0]), default=(0, 0))
    ceilings = [v for k, v in CAT.cuda_max_cc if k <= cuda]
    below_ceiling = not ceilings or cc[0] <= ceilings[-1][0]
    return cc >= rel.min_cc and cc >= floor_major and below_ceiling


def _modes_ok(driver: tuple[int, ...], dc: bool, rel: Release) -> set[str]:
    ok = set()
    if driver >= rel.min_driver:
        ok.add(MODE_NATIVE)
    if dc and any(driver[0] == b[0] and driver >= b for b in rel.fc_branches):
        ok.add(MODE_FORWARD)
    mvc = dict(CAT.minor_version_compat).get(rel.cuda_mm[0])
    if mvc is not None and driver >= mvc:
        ok.add(MODE_MINOR)
    return ok


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=fleets(),
    body=jobs(),
    modes=st.sets(st.sampled_from(MODES), min_size=1),
    strict=st.booleans(),
)
def test_chosen_image_runs_inside_its_architecture_range_and_driver_rule(
    nodes: list[dict[str, Any]], body: dict[str, Any], modes: set[str], strict: bool
) -> None:
    config = OperatorConfig(
        topology_levels=LEVELS,
        compatibility_modes=frozenset(modes),
        allow_unconfirmed_releases=not strict,
    )
    try:
        result = plan_job(body, build_snapshot(nodes, levels=LEVELS), config)
    except InvalidJob:
        return
    if not isinstance(result, Plan):
        return
    rel = result.image.release
    assert rel is not None
    if strict:
        assert not rel.unconfirmed_node_facts(result.image.image.split("/")[-1].split(":")[0])
    worst = 0
    snap = build_snapshot(nodes, levels=LEVELS)
    for name in result.placement.nodes:
        g = snap.node(name).gpu
        assert g.compute_capability is not None and g.driver is not None
        assert _arch_ok(g.compute_capability, rel), (name, g, rel.name)
        usable = _modes_ok(g.driver, CAT.is_data_center(g.product), rel) & modes
        assert usable, (name, g.driver, rel.name, modes)
        worst = max(worst, min(MODES.index(m) for m in usable))
    assert result.compatibility == MODES[worst]

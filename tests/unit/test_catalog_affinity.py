"""node_affinity_terms: well-formed, and sound against check_node over a grid of synthetic nodes."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest

from trainop.api import constants as c
from trainop.catalog import check_node, gpu_facts_from_labels, load_catalog, node_affinity_terms
from trainop.catalog.compat import (
    KIND_DRIVER,
    KIND_LABELS,
    KIND_MEMORY,
    driver_rule,
    effective_cuda,
)
from trainop.catalog.model import Release

CAT = load_catalog()
_INT = re.compile(r"^[+-]?\d+$")  # what Go's strconv.ParseInt accepts (base 10)
# A Gt/Lt value must also be a valid label value, which cannot start with a sign: the API
# server refuses "Gt -1" with 422 (kubernetes.io/docs/concepts/overview/working-with-objects/labels).
_BOUND = re.compile(r"^\d+$")


# ---------------------------------------------------------------- a tiny matcher


def _expr_matches(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    """Kubernetes NodeSelectorRequirement semantics."""
    key, op, values = expr["key"], expr["operator"], expr.get("values", [])
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        (bound,) = values
        if not present or not _INT.match(labels[key]):
            return False
        v = int(labels[key])
        return v > int(bound) if op == "Gt" else v < int(bound)
    raise AssertionError(f"unknown operator {op}")


def admits(terms: list[dict[str, Any]], labels: dict[str, str]) -> bool:
    """nodeSelectorTerms are ORed; an empty term matches nothing."""
    return any(
        t["matchExpressions"] and all(_expr_matches(e, labels) for e in t["matchExpressions"])
        for t in terms
    )


# ---------------------------------------------------------------- synthetic nodes


def labels_for(
    product: str | None, cc: str | None, driver: str | None, gen: str, runtime: bool
) -> dict[str, str]:
    """Labels as GFD writes them: every label of one generation together, runtime derived
    from the driver (the newest CUDA it runs natively)."""
    out: dict[str, str] = {}
    if product:
        out[c.GFD_PRODUCT] = product
    if cc:
        out[c.GFD_COMPUTE_MAJOR], out[c.GFD_COMPUTE_MINOR] = cc.split(".")
    if driver:
        major, minor, rev = [*driver.split("."), "", ""][:3]
        if gen in ("new", "both"):
            out |= {
                c.GFD_DRIVER_MAJOR: major,
                c.GFD_DRIVER_MINOR: minor,
                c.GFD_DRIVER_REVISION: rev,
            }
            out[c.GFD_DRIVER_FULL] = driver
        if gen in ("old", "both"):
            out |= {
                c.GFD_DRIVER_MAJOR_OLD: major,
                c.GFD_DRIVER_MINOR_OLD: minor,
                c.GFD_DRIVER_REV_OLD: rev,
            }
        facts = gpu_facts_from_labels(out)
        top = CAT.max_cuda_for_driver(facts.driver) if (runtime and facts.driver) else None
        if top:
            if gen in ("new", "both"):
                out |= {c.GFD_RUNTIME_MAJOR: str(top[0]), c.GFD_RUNTIME_MINOR: str(top[1])}
            if gen in ("old", "both"):
                out |= {c.GFD_RUNTIME_MAJOR_OLD: str(top[0]), c.GFD_RUNTIME_MINOR_OLD: str(top[1])}
    return {k: v for k, v in out.items() if v != ""}


PRODUCTS = [
    ("Tesla-V100-SXM2-32GB", "7.0"),
    ("Tesla-T4", "7.5"),
    ("Tesla-K80", "3.7"),
    ("A100-SXM4-40GB", "8.0"),  # older drivers omit "NVIDIA-"
    ("NVIDIA-H100-80GB-HBM3-SHARED", "9.0"),
    ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "8.0"),
    ("NVIDIA-GeForce-RTX-4090", "8.9"),
    ("Jetson-Orin", "8.7"),
    (None, "8.0"),
    ("NVIDIA-L4", None),  # no compute capability labels
]
DRIVERS = [
    None,
    "396.26",
    "418.87.01",
    "440.30.05",
    "450.80.02",
    "470.42.01",
    "470.57.02",
    "525.60.12",
    "525.60.13",
    "535.104.05",
    "545.23.06",
    "550.40.07",
    "550.54.14",
    "570.26",
    "575.51.03",
    "580.65.05",
    "580.65.06",
    "595.45.04",
    "610.43.02",
    "abc",
]
NODES = [
    labels_for(p, cc, d, gen, rt)
    for (p, cc), d, gen, rt in itertools.product(
        PRODUCTS, DRIVERS, ("new", "old", "both"), (True, False)
    )
] + [
    {},
    {"kubernetes.io/hostname": "cpu"},
    {  # a driver newer than the toolkit table: only its runtime label tells what it runs
        c.GFD_PRODUCT: "NVIDIA-B200",
        c.GFD_COMPUTE_MAJOR: "10",
        c.GFD_COMPUTE_MINOR: "0",
        c.GFD_DRIVER_MAJOR: "700",
        c.GFD_DRIVER_FULL: "700.10.01",
        c.GFD_RUNTIME_MAJOR: "14",
        c.GFD_RUNTIME_MINOR: "0",
    },
]

RELEASES = ["20.03", "21.03", "22.03", "23.03", "24.05", "24.12", "25.01", "25.08", "26.07"]
SCENARIOS: list[Any] = [
    *[pytest.param(None, r, id=f"ngc-{r}") for r in RELEASES],
    pytest.param((12, 4), "24.05", id="cuda12.4-ngc-24.05"),
    pytest.param((10, 2), None, id="cuda10.2"),
    pytest.param((11, 8), None, id="cuda11.8"),
    pytest.param((12, 4), None, id="cuda12.4"),
    pytest.param((12, 7), None, id="cuda12.7"),
    pytest.param((13, 0), None, id="cuda13.0"),
    pytest.param((14, 0), None, id="cuda14.0"),
    pytest.param(None, None, id="no-requirement"),
]
PRODUCT_LISTS = [
    pytest.param((), id="any-product"),
    pytest.param(
        ("Tesla-T4", "NVIDIA-GeForce-RTX-4090", "A100-SXM4-40GB", "NVIDIA-B200"), id="allow-list"
    ),
]


def _release(name: str | None) -> Release | None:
    return CAT.release(name) if name else None


@pytest.mark.parametrize("products", PRODUCT_LISTS)
@pytest.mark.parametrize(("need", "release"), SCENARIOS)
def test_affinity_is_sound(need: Any, release: str | None, products: tuple[str, ...]) -> None:
    rel = _release(release)
    terms = node_affinity_terms(CAT, need, rel, products)
    assert terms
    cuda = effective_cuda(need, rel)
    rule = driver_rule(CAT, cuda, rel) if cuda else None
    floors = {d[0] for d in (rule.direct, rule.minor_compat) if d is not None} if rule else set()
    fc_majors = {b[0] for b in rule.fc_branches} if rule else set()
    admitted = 0
    for labels in NODES:
        facts = gpu_facts_from_labels(labels)
        verdict = check_node(CAT, facts, need, rel, gpu_products=products)
        scheduler = admits(terms, labels)
        admitted += scheduler
        # never stricter than check_node: the scheduler never blocks a node the operator chose
        if verdict.ok:
            assert scheduler, (labels, terms)
            continue
        # as strict at branch level: it admits a rejected node only on driver minor numbers
        if scheduler and verdict.kind == KIND_LABELS:
            # coarser only on a driver label present but malformed (no floor to compare)
            assert need is None and release is None, (verdict.reason, labels)
            continue
        if scheduler:
            assert verdict.kind in (KIND_DRIVER, KIND_MEMORY), (verdict.reason, labels)
            assert facts.driver is not None
            assert facts.driver[0] in floors | fc_majors, (verdict.reason, labels)
    assert admitted  # the grid exercises the admitting side too


@pytest.mark.parametrize(("need", "release"), SCENARIOS)
def test_terms_are_well_formed(need: Any, release: str | None) -> None:
    for term in node_affinity_terms(CAT, need, _release(release), ("Tesla-T4",)):
        assert set(term) == {"matchExpressions"}
        assert term["matchExpressions"]
        for e in term["matchExpressions"]:
            assert e["operator"] in ("In", "Gt", "Lt", "Exists")
            if e["operator"] in ("Gt", "Lt"):
                assert len(e["values"]) == 1
                assert _BOUND.match(e["values"][0]) and isinstance(e["values"][0], str)
            elif e["operator"] == "In":
                assert e["values"] and all(isinstance(v, str) for v in e["values"])
            else:
                assert "values" not in e


@pytest.mark.parametrize(
    ("need", "release", "expected"),
    [
        pytest.param(
            (13, 0),
            None,
            [
                {"key": c.GFD_DRIVER_MAJOR, "operator": "Gt", "values": ["579"]},
                {"key": c.GFD_COMPUTE_MAJOR, "operator": "Gt", "values": ["7"]},
                {"key": c.GFD_COMPUTE_MAJOR, "operator": "Lt", "values": ["13"]},
            ],
            id="cuda13-driver-and-cc",
        ),
        pytest.param(
            None,
            "24.05",
            [
                {"key": c.GFD_DRIVER_MAJOR_OLD, "operator": "Gt", "values": ["524"]},
                {"key": c.GFD_COMPUTE_MAJOR, "operator": "Gt", "values": ["5"]},
                {"key": c.GFD_COMPUTE_MAJOR, "operator": "Lt", "values": ["10"]},
            ],
            id="deprecated-driver-label",
        ),
    ],
)
def test_expected_terms_present(
    need: Any, release: str | None, expected: list[dict[str, Any]]
) -> None:
    terms = node_affinity_terms(CAT, need, _release(release))
    assert {"matchExpressions": expected} in terms


def test_forward_compat_term_lists_only_data_center_products() -> None:
    terms = node_affinity_terms(CAT, None, _release("24.05"))
    fc = [
        t
        for t in terms
        if any(e["operator"] == "Lt" and "driver" in e["key"] for e in t["matchExpressions"])
    ]
    assert fc
    for t in fc:
        (products,) = [e["values"] for e in t["matchExpressions"] if e["key"] == c.GFD_PRODUCT]
        assert "Tesla-T4" in products
        assert "NVIDIA-GeForce-RTX-4090" not in products


def test_no_driver_floor_needs_only_a_driver_label() -> None:
    """A job with its own image and no `cuda` has no driver floor: the term asks only that
    a driver label exists (valid for the API server, where "Gt -1" was refused with 422)."""
    terms = node_affinity_terms(CAT, None, None)
    assert not admits(terms, {c.GFD_PRODUCT: "Tesla-T4"})
    assert admits(terms, {c.GFD_DRIVER_MAJOR_OLD: "470"})
    exprs = [e for t in terms for e in t["matchExpressions"] if "driver" in e["key"]]
    assert exprs and all(e == {"key": e["key"], "operator": "Exists"} for e in exprs)


@pytest.mark.parametrize("products", PRODUCT_LISTS)
@pytest.mark.parametrize(("need", "release"), SCENARIOS)
def test_every_bound_is_a_valid_label_value(
    need: Any, release: str | None, products: tuple[str, ...]
) -> None:
    for term in node_affinity_terms(CAT, need, _release(release), products):
        for e in term["matchExpressions"]:
            if e["operator"] in ("Gt", "Lt"):
                assert _BOUND.match(e["values"][0]), e

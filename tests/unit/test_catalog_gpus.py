"""Catalog GPU products of the 2025-2026 fleets (issue #36): compute capability, CUDA and
driver floors, what stays unconfirmed, and check_node's use of a product's CUDA floor."""

from __future__ import annotations

from typing import Any

import pytest

from trainop.api import constants as c
from trainop.catalog import CatalogError, gpu_facts_from_labels, load_catalog
from trainop.catalog.compat import KIND_COMPUTE, check_node, summarize_incompatible
from trainop.catalog.table import unconfirmed_facts

CAT = load_catalog()

# label, compute capability, min CUDA, min driver, unconfirmed facts
PRODUCTS = [
    pytest.param("NVIDIA-B200", (10, 0), (12, 8), (570, 133, 20), set(), id="B200"),
    pytest.param("NVIDIA-GB200", (10, 0), (12, 8), (570, 26), {"label", "min_driver"}, id="GB200"),
    pytest.param("NVIDIA-B300-SXM6-AC", (10, 3), (12, 9), (575, 51, 3), {"min_driver"}, id="B300"),
    pytest.param(
        "NVIDIA-GB300", (10, 3), (12, 9), (575, 51, 3), {"label", "min_driver"}, id="GB300"
    ),
    pytest.param(
        "NVIDIA-GH200-480GB", (9, 0), (11, 8), (520, 61, 5), {"label", "min_driver"}, id="GH200"
    ),
    pytest.param("NVIDIA-H200", (9, 0), (11, 8), (520, 61, 5), {"min_driver"}, id="H200"),
    pytest.param(
        "NVIDIA-H20", (9, 0), (11, 8), (520, 61, 5), {"cc", "label", "min_driver"}, id="H20"
    ),
    pytest.param("NVIDIA-L40S", (8, 9), (11, 8), (520, 61, 5), {"min_driver"}, id="L40S"),
    pytest.param(
        "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
        (12, 0),
        (12, 8),
        (570, 26),
        {"label", "min_driver"},
        id="RTX-PRO-6000-server",
    ),
]


@pytest.mark.parametrize(("label", "cc", "min_cuda", "min_driver", "unconfirmed"), PRODUCTS)
def test_product_facts(
    label: str, cc: Any, min_cuda: Any, min_driver: Any, unconfirmed: set[str]
) -> None:
    g = CAT.gpu(label)
    assert g is not None
    assert (g.cc, g.min_cuda, tuple(g.min_driver or ())) == (cc, min_cuda, min_driver)
    assert g.unconfirmed == unconfirmed
    assert g.data_center and g.family in ("hopper", "blackwell", "ada-lovelace")
    # the CUDA floor is at least what the architecture table says CUDA X.Y can target
    first = CAT.first_cuda_for_cc(g.cc)
    assert first is not None and g.min_cuda is not None and g.min_cuda >= first


def test_check_lists_every_unconfirmed_gpu_fact_and_horovod() -> None:
    lines = unconfirmed_facts(CAT)
    assert "GPU NVIDIA-H20: cc 9.0; label NVIDIA-H20; min_driver 520.61.05" in lines
    assert not any(line.startswith("GPU NVIDIA-B200:") for line in lines)
    assert "image mpi (nvcr.io/nvidia/pytorch): which releases still bundle Horovod" in lines


def labels(product: str, cc: str, driver: str) -> dict[str, str]:
    major, minor = cc.split(".")
    return {
        c.GFD_PRODUCT: product,
        c.GFD_COMPUTE_MAJOR: major,
        c.GFD_COMPUTE_MINOR: minor,
        c.GFD_DRIVER_FULL: driver,
        c.GFD_DRIVER_MAJOR: driver.split(".")[0],
    }


# node, CUDA the image needs, ok, words the reason has
FLOORS = [
    pytest.param("NVIDIA-B300-SXM6-AC", "10.3", (12, 8), False, "CUDA >= 12.9", id="b300-12.8"),
    pytest.param("NVIDIA-B300-SXM6-AC", "10.3", (12, 9), True, None, id="b300-12.9"),
    pytest.param("NVIDIA-B300-SXM6-AC", "10.3", (13, 0), True, None, id="b300-13.0"),
    pytest.param("NVIDIA-GB300", "10.3", (12, 8), False, "CUDA >= 12.9", id="gb300-12.8"),
    pytest.param("NVIDIA-B200", "10.0", (12, 8), True, None, id="b200-12.8"),
    pytest.param("NVIDIA-B200", "10.0", (12, 6), False, "up to 9.0", id="b200-12.6-ceiling"),
    pytest.param("NVIDIA-GH200-480GB", "9.0", (12, 4), True, None, id="gh200-12.4"),
    pytest.param("NVIDIA-L40S", "8.9", (11, 8), True, None, id="l40s-11.8"),
    pytest.param("Some-Future-GPU", "10.3", (12, 8), True, None, id="unknown-product"),
]


@pytest.mark.parametrize(("product", "cc", "need", "ok", "words"), FLOORS)
def test_product_cuda_floor(product: str, cc: str, need: Any, ok: bool, words: str | None) -> None:
    facts = gpu_facts_from_labels(labels(product, cc, "610.43.02"))
    verdict = check_node(CAT, facts, need, None)
    assert verdict.ok is ok, verdict.reason
    if not ok:
        assert verdict.kind == KIND_COMPUTE
        assert words is not None and words in (verdict.reason or "")


def test_product_floor_groups_by_image_cuda() -> None:
    facts = gpu_facts_from_labels(labels("NVIDIA-B300-SXM6-AC", "10.3", "580.126.20"))
    results = [(f"n{i}", facts, check_node(CAT, facts, (12, 8), None)) for i in range(3)]
    assert summarize_incompatible(results) == (
        "the image is built with CUDA 12.8, but nodes have "
        "NVIDIA-B300-SXM6-AC (needs CUDA >= 12.9) x3."
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        pytest.param({"cc": "9.0", "min_cuda": 11.8}, "quoted version", id="unquoted-cuda"),
        pytest.param({"cc": "9.0", "min_cuda": "11"}, "expected X.Y", id="cuda-not-x.y"),
        pytest.param({"cc": "9.0", "unconfirmed": ["nvlink"]}, "unconfirmed", id="bad-fact"),
        pytest.param({"cc": "9.0", "min_driver": "r570"}, "dotted version", id="bad-driver"),
    ],
)
def test_bad_gpu_entries_are_refused(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        load_catalog(overrides={"gpus": {"NVIDIA-X": entry}})


def test_bad_image_unconfirmed_is_refused() -> None:
    with pytest.raises(CatalogError, match=r"images\['mpi'\].unconfirmed"):
        load_catalog(overrides={"images": {"mpi": {"unconfirmed": ["tensorrt"]}}})

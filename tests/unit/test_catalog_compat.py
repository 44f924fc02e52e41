"""check_node: driver paths (direct, runtime, minor-version, forward compat), cc gates, labels."""

from __future__ import annotations

from typing import Any

import pytest

from trainop.api import constants as c
from trainop.catalog import (
    Compat,
    GpuFacts,
    check_node,
    gpu_facts_from_labels,
    load_catalog,
    summarize_incompatible,
)
from trainop.catalog.compat import (
    KIND_COMPUTE,
    KIND_DRIVER,
    KIND_LABELS,
    KIND_MEMORY,
    KIND_NOT_GPU,
    KIND_PRODUCT,
    VIA_DRIVER,
    VIA_FORWARD_COMPAT,
    VIA_MINOR_COMPAT,
    VIA_NO_REQUIREMENT,
    VIA_RUNTIME,
)

CAT = load_catalog()


def gfd(
    product: str | None = None,
    cc: str | None = None,
    driver: str | None = None,
    runtime: str | None = None,
    gen: str = "new",
    memory: int | None = None,
) -> dict[str, str]:
    """GFD labels as a node carries them; gen: new | old | both label generations."""
    out: dict[str, str] = {"kubernetes.io/hostname": "n"}
    if product:
        out[c.GFD_PRODUCT] = product
        out[c.GFD_COUNT] = "8"
    if cc:
        out[c.GFD_COMPUTE_MAJOR], out[c.GFD_COMPUTE_MINOR] = cc.split(".")
    if memory is not None:
        out[c.GFD_MEMORY] = str(memory)
    if driver:
        p = [*driver.split("."), "", ""]
        if gen in ("new", "both"):
            out |= {c.GFD_DRIVER_MAJOR: p[0], c.GFD_DRIVER_MINOR: p[1], c.GFD_DRIVER_REVISION: p[2]}
            out[c.GFD_DRIVER_FULL] = driver
        if gen in ("old", "both"):
            out |= {
                c.GFD_DRIVER_MAJOR_OLD: p[0],
                c.GFD_DRIVER_MINOR_OLD: p[1],
                c.GFD_DRIVER_REV_OLD: p[2],
            }
    if runtime:
        rmaj, rmin = runtime.split(".")
        if gen in ("new", "both"):
            out |= {c.GFD_RUNTIME_MAJOR: rmaj, c.GFD_RUNTIME_MINOR: rmin}
        if gen in ("old", "both"):
            out |= {c.GFD_RUNTIME_MAJOR_OLD: rmaj, c.GFD_RUNTIME_MINOR_OLD: rmin}
    return {k: v for k, v in out.items() if v != ""}


H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
V100 = "Tesla-V100-SXM2-32GB"
T4 = "Tesla-T4"
RTX = "NVIDIA-GeForce-RTX-4090"

# (labels, need_cuda, release, kwargs, ok, kind-or-via, substrings of the reason)
CASES: list[Any] = [
    # --- direct ---
    pytest.param(
        gfd(H100, "9.0", "550.54.14"),
        None,
        "24.05",
        {},
        True,
        VIA_DRIVER,
        [],
        id="direct-new-labels",
    ),
    pytest.param(
        gfd(H100, "9.0", "550.54.14", gen="old"),
        None,
        "24.05",
        {},
        True,
        VIA_DRIVER,
        [],
        id="direct-old-labels",
    ),
    pytest.param(
        gfd(H100, "9.0", "550.54.14", gen="both"),
        None,
        "24.05",
        {},
        True,
        VIA_DRIVER,
        [],
        id="direct-both-labels",
    ),
    pytest.param(
        gfd(H100, "9.0", "550.40.07", "12.4"),
        (12, 4),
        None,
        {},
        True,
        VIA_RUNTIME,
        [],
        id="runtime-label-new",
    ),
    pytest.param(
        gfd(H100, "9.0", "550.40.07", "12.4", gen="old"),
        (12, 4),
        None,
        {},
        True,
        VIA_RUNTIME,
        [],
        id="runtime-label-old",
    ),
    pytest.param(
        gfd(H100, "9.0", "610.43.02", "13.3"),
        (14, 0),
        None,
        {},
        False,
        KIND_DRIVER,
        ["driver 610.43.02 supports CUDA up to 13.3", "cuda.runtime-version is >= 14.0"],
        id="cuda-beyond-table",
    ),
    pytest.param(
        gfd(H100, "9.0", "700.10.01", "14.0"),
        (14, 0),
        None,
        {},
        True,
        VIA_RUNTIME,
        [],
        id="cuda-beyond-table-runtime",
    ),
    pytest.param(
        gfd(V100, "7.0", "418.87.01"),
        (10, 2),
        None,
        {},
        False,
        KIND_DRIVER,
        ["CUDA 10.2 needs driver >= 440.33"],
        id="cuda10-no-minor-compat",
    ),
    pytest.param(
        gfd(H100, "9.0", "570.26"),
        (12, 7),
        None,
        {},
        True,
        VIA_DRIVER,
        [],
        id="cuda-12.7-uses-12.8-row",
    ),
    # --- minor-version compatibility ---
    pytest.param(
        gfd(A100, "8.0", "535.104.05"),
        None,
        "24.05",
        {},
        True,
        VIA_FORWARD_COMPAT,  # R535 >= 535.86 is an FC branch of 24.05: ranked before minor
        [],
        id="minor-compat-12",
    ),
    pytest.param(
        gfd(A100, "8.0", "525.60.13"),
        None,
        "24.05",
        {},
        True,
        VIA_MINOR_COMPAT,
        [],
        id="minor-compat-12-floor",
    ),
    pytest.param(
        gfd(A100, "8.0", "525.60.12"),
        None,
        "24.05",
        {},
        False,
        KIND_DRIVER,
        ["525.60.13 (minor-version compatibility) or 545", "R525 >= 525.85"],
        id="minor-compat-12-below-floor",
    ),
    pytest.param(
        gfd(H100, "9.0", "580.65.06"),
        None,
        "26.07",
        {},
        True,
        VIA_MINOR_COMPAT,
        [],
        id="minor-compat-13",
    ),
    pytest.param(
        gfd(H100, "9.0", "575.51.03"),
        None,
        "25.08",
        {},
        False,
        KIND_DRIVER,
        ["CUDA 13.0 needs driver >= 580"],
        id="cuda13-on-r575",
    ),
    pytest.param(
        gfd(A100, "8.0", "450.80.02"),
        (11, 8),
        None,
        {},
        True,
        VIA_MINOR_COMPAT,
        [],
        id="minor-compat-11",
    ),
    # --- forward compatibility ---
    pytest.param(
        gfd(T4, "7.5", "470.57.02"), None, "24.05", {}, True, VIA_FORWARD_COMPAT, [], id="fc-t4"
    ),
    pytest.param(
        gfd("A100-SXM4-40GB", "8.0", "470.82.01"),
        None,
        "24.05",
        {},
        True,
        VIA_FORWARD_COMPAT,
        [],
        id="fc-unprefixed-label",
    ),
    pytest.param(
        gfd("NVIDIA-A100-SXM4-80GB-SHARED", "8.0", "470.82.01"),
        None,
        "24.05",
        {},
        True,
        VIA_FORWARD_COMPAT,
        [],
        id="fc-time-sliced",
    ),
    pytest.param(
        gfd(T4, "7.5", "470.57.02", gen="old"),
        None,
        "24.05",
        {},
        True,
        VIA_FORWARD_COMPAT,
        [],
        id="fc-old-labels",
    ),
    pytest.param(
        gfd(V100, "7.0", "396.26"),
        None,
        "20.03",
        {},
        True,
        VIA_FORWARD_COMPAT,
        [],
        id="fc-whole-branch-r396",
    ),
    pytest.param(
        gfd(RTX, "8.9", "470.57.02"),
        None,
        "24.05",
        {},
        False,
        KIND_DRIVER,
        ["works only on data-center GPUs and NVIDIA-GeForce-RTX-4090 is not one"],
        id="fc-geforce",
    ),
    pytest.param(
        gfd("NVIDIA-Foo-9000", "8.0", "470.57.02"),
        None,
        "24.05",
        {},
        False,
        KIND_DRIVER,
        ["is not one"],
        id="fc-unknown-product",
    ),
    pytest.param(
        gfd("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "8.0", "470.57.02"),
        None,
        "24.05",
        {},
        False,
        KIND_DRIVER,
        ["is not one"],
        id="fc-mig-not-listed",
    ),
    pytest.param(
        gfd(T4, "7.5", "470.42.01"),
        None,
        "24.05",
        {},
        False,
        KIND_DRIVER,
        ["on a data-center GPU a forward-compatible branch of NGC 24.05 (R470 >= 470.57"],
        id="fc-branch-too-old",
    ),
    pytest.param(
        gfd(T4, "7.5", "460.106.00"),
        None,
        "24.05",
        {},
        False,
        KIND_DRIVER,
        ["driver 460.106.00 supports CUDA up to 11.2"],
        id="fc-branch-not-listed",
    ),
    pytest.param(
        gfd(T4, "7.5", "470.57.02"),
        (12, 4),
        None,
        {},
        False,
        KIND_DRIVER,
        [],
        id="fc-needs-ngc-release",
    ),
    pytest.param(
        gfd(T4, "7.5", "470.57.02"),
        None,
        "25.01",
        {},
        True,
        VIA_FORWARD_COMPAT,  # the 25.01 notes list R470 >= 470.57
        [],
        id="fc-listed-25.01",
    ),
    pytest.param(
        {**gfd(RTX, "8.9", "470.57.02"), c.GFD_DRIVER_MAJOR_OLD: "550"},
        None,
        "24.05",
        {},
        False,
        KIND_DRIVER,
        [],
        id="new-label-wins-over-old",
    ),
    # --- compute capability ---
    pytest.param(
        gfd(V100, "7.0", "580.65.06"),
        None,
        "25.08",
        {},
        False,
        KIND_COMPUTE,
        ["CUDA 13.0 needs compute capability >= 7.5; Tesla-V100-SXM2-32GB is 7.0"],
        id="cc-cuda13-v100",
    ),
    pytest.param(
        gfd(T4, "7.5", "580.65.06"), None, "25.08", {}, True, VIA_DRIVER, [], id="cc-cuda13-t4"
    ),
    pytest.param(
        gfd("Tesla-K80", "3.7", "525.60.13"),
        (12, 0),
        None,
        {},
        False,
        KIND_COMPUTE,
        ["CUDA 12.0 needs compute capability >= 5.0; Tesla-K80 is 3.7"],
        id="cc-cuda12-kepler",
    ),
    pytest.param(
        gfd("Tesla-K80", "3.7", "470.57.02"),
        (11, 4),
        None,
        {},
        True,
        VIA_DRIVER,
        [],
        id="cc-cuda11-kepler",
    ),
    pytest.param(
        gfd(V100, "7.0", "570.86.10"),
        None,
        "25.01",
        {},
        False,
        KIND_COMPUTE,
        ["NGC 25.01 needs compute capability >= 7.5; Tesla-V100-SXM2-32GB is 7.0"],
        id="cc-release-25.01",
    ),
    pytest.param(
        gfd("Tesla-K80", "3.7", "550.54.14"),
        None,
        "24.05",
        {},
        False,
        KIND_COMPUTE,
        ["NGC 24.05 needs compute capability >= 6.0"],
        id="cc-release-24.05-kepler",
    ),
    pytest.param(
        gfd("Tesla-P100-SXM2-16GB", "6.0", "550.54.14"),
        None,
        "24.05",
        {},
        True,
        VIA_DRIVER,
        [],
        id="cc-release-24.05-pascal",
    ),
    pytest.param(
        gfd("Jetson", "7.2", "580.65.06"),
        (13, 0),
        None,
        {},
        False,
        KIND_COMPUTE,
        ["Jetson is 7.2"],
        id="cc-minor-below",
    ),
    # --- labels missing / malformed ---
    pytest.param({}, None, "24.05", {}, False, KIND_NOT_GPU, ["not a GPU node"], id="no-labels"),
    pytest.param(
        {"kubernetes.io/hostname": "cpu-1"},
        (12, 4),
        None,
        {},
        False,
        KIND_NOT_GPU,
        [],
        id="cpu-node",
    ),
    pytest.param(
        gfd(H100, "9.0"),
        None,
        "24.05",
        {},
        False,
        KIND_LABELS,
        ["nvidia.com/cuda.driver-version.major", "missing"],
        id="driver-label-missing",
    ),
    pytest.param(
        gfd(H100, "9.0"),
        None,
        None,
        {},
        False,
        KIND_LABELS,
        ["missing"],
        id="driver-label-missing-no-cuda",
    ),
    pytest.param(
        gfd(H100, "9.0", "abc.1.2"),
        None,
        "24.05",
        {},
        False,
        KIND_LABELS,
        ["not a number"],
        id="driver-label-malformed",
    ),
    pytest.param(
        gfd(H100, "nine.0", "550.54.14"),
        None,
        "24.05",
        {},
        False,
        KIND_LABELS,
        ["nvidia.com/gpu.compute.major is missing or not a number"],
        id="cc-label-malformed",
    ),
    pytest.param(
        gfd(H100, None, "550.54.14"),
        None,
        None,
        {},
        True,
        VIA_NO_REQUIREMENT,
        [],
        id="cc-label-missing-no-requirement",
    ),
    pytest.param(
        gfd(H100, "9.x", "550.54.14"),
        None,
        "24.05",
        {},
        True,
        VIA_DRIVER,
        [],
        id="cc-minor-malformed-reads-0",
    ),
    pytest.param(
        gfd(H100, "9.0", "550.54.14", "x.y"),
        (12, 4),
        None,
        {},
        True,
        VIA_DRIVER,
        [],
        id="runtime-malformed-ignored",
    ),
    pytest.param(
        gfd(None, "9.0", "550.54.14"),
        None,
        "24.05",
        {},
        True,
        VIA_DRIVER,
        [],
        id="product-label-missing",
    ),
    # --- product allow-list and memory ---
    pytest.param(
        gfd(H100, "9.0", "550.54.14"),
        None,
        "24.05",
        {"gpu_products": [H100]},
        True,
        VIA_DRIVER,
        [],
        id="products-hit",
    ),
    pytest.param(
        gfd(T4, "7.5", "550.54.14"),
        None,
        "24.05",
        {"gpu_products": [H100, A100]},
        False,
        KIND_PRODUCT,
        [
            "Tesla-T4 is not in spec.placement.gpuProducts (NVIDIA-H100-80GB-HBM3, NVIDIA-A100-SXM4-80GB)"
        ],
        id="products-miss",
    ),
    pytest.param(
        gfd(None, "9.0", "550.54.14"),
        None,
        "24.05",
        {"gpu_products": [H100]},
        False,
        KIND_PRODUCT,
        [],
        id="products-no-label",
    ),
    pytest.param(
        gfd(H100, "9.0", "550.54.14", memory=81559),
        None,
        "24.05",
        {"min_memory_mib": 80000},
        True,
        VIA_DRIVER,
        [],
        id="memory-ok",
    ),
    pytest.param(
        gfd(T4, "7.5", "550.54.14", memory=15360),
        None,
        "24.05",
        {"min_memory_mib": 40000},
        False,
        KIND_MEMORY,
        ["needs >= 40000 MiB", "Tesla-T4 has 15360 MiB"],
        id="memory-small",
    ),
    pytest.param(
        gfd(T4, "7.5", "550.54.14"),
        None,
        "24.05",
        {"min_memory_mib": 1},
        False,
        KIND_MEMORY,
        ["nvidia.com/gpu.memory is missing"],
        id="memory-label-missing",
    ),
    # --- no requirement at all (non-NGC image, no spec.cuda) ---
    pytest.param(
        gfd("Tesla-K80", "3.7", "390.1"),
        None,
        None,
        {},
        True,
        VIA_NO_REQUIREMENT,
        [],
        id="no-requirement",
    ),
]


@pytest.mark.parametrize(("labels", "need", "release", "kwargs", "ok", "what", "reason"), CASES)
def test_check_node(
    labels: dict[str, str],
    need: tuple[int, int] | None,
    release: str | None,
    kwargs: dict[str, Any],
    ok: bool,
    what: str,
    reason: list[str],
) -> None:
    rel = CAT.release(release) if release else None
    assert release is None or rel is not None
    got = check_node(CAT, gpu_facts_from_labels(labels), need, rel, **kwargs)
    assert got.ok is ok, got.reason
    assert bool(got) is ok
    if ok:
        assert got.via == what
        assert got.reason is None
    else:
        assert got.kind == what, got.reason
        assert got.reason and got.requirement
        for part in reason:
            assert part in got.reason


@pytest.mark.parametrize(
    ("labels", "need", "release", "reason"),
    [
        pytest.param(
            gfd(V100, "7.0", "580.65.06"),
            None,
            "25.08",
            "CUDA 13.0 needs compute capability >= 7.5; Tesla-V100-SXM2-32GB is 7.0",
            id="cc",
        ),
        pytest.param(
            gfd(V100, "7.0", "418.87"),
            (12, 4),
            None,
            "driver 418.87 supports CUDA up to 10.1; CUDA 12.4 needs driver >= 525.60.13 "
            "(minor-version compatibility) or 550.54.14",
            id="driver",
        ),
        pytest.param(
            gfd(V100, "7.0", "418.87.01", "10.1"),
            None,
            "24.05",
            "driver 418.87.01 supports CUDA up to 10.1; CUDA 12.4 needs driver >= 525.60.13 "
            "(minor-version compatibility) or 545, or on a data-center GPU a "
            "forward-compatible branch of NGC 24.05 (R470 >= 470.57, R525 >= 525.85, R535 >= 535.86, "
            "R545 >= 545.23)",
            id="driver-with-fc",
        ),
    ],
)
def test_reason_sentences(
    labels: dict[str, str], need: Any, release: str | None, reason: str
) -> None:
    rel = CAT.release(release) if release else None
    assert check_node(CAT, gpu_facts_from_labels(labels), need, rel).reason == reason


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param({c.GFD_DRIVER_MAJOR: ""}, id="empty-values"),
        pytest.param({c.GFD_COMPUTE_MAJOR: "-1", c.GFD_DRIVER_FULL: "1.2.3.4.5"}, id="odd-numbers"),
        pytest.param(
            {c.GFD_DRIVER_FULL: "550..14", c.GFD_RUNTIME_MAJOR: "12", c.GFD_MEMORY: "lots"},
            id="holes",
        ),
        pytest.param({c.GFD_PRODUCT: "x", c.GFD_DRIVER_MAJOR_OLD: " 550 "}, id="spaces"),
    ],
)
def test_malformed_labels_never_raise(labels: dict[str, str]) -> None:
    facts = gpu_facts_from_labels(labels)
    for rel in (None, CAT.release("24.05"), CAT.release("26.07")):
        for need in (None, (12, 4), (13, 0)):
            got = check_node(CAT, facts, need, rel, gpu_products=["x"], min_memory_mib=1)
            assert isinstance(got, Compat)


def test_driver_label_text_keeps_leading_zeros() -> None:
    assert gpu_facts_from_labels(gfd(T4, "7.5", "470.57.02")).driver_label == "470.57.02"
    old = gpu_facts_from_labels(gfd(T4, "7.5", "470.57.02", gen="old"))
    assert (old.driver, old.driver_label) == ((470, 57, 2), "470.57.02")


def _results(
    *nodes: tuple[str, dict[str, str]], release: str = "25.08"
) -> list[tuple[str, GpuFacts, Compat]]:
    rel = CAT.release(release)
    out = []
    for name, labels in nodes:
        facts = gpu_facts_from_labels(labels)
        out.append((name, facts, check_node(CAT, facts, None, rel)))
    return out


def test_summarize_groups_by_reason_and_product() -> None:
    results = _results(
        *[(f"v{i}", gfd(V100, "7.0", "580.65.06")) for i in range(4)],
        ("p0", gfd("Tesla-P100-SXM2-16GB", "6.0", "580.65.06")),
        ("a0", gfd(A100, "8.0", "550.54.14")),
        ("a1", gfd(A100, "8.0", "550.54.14")),
        ("cpu0", {}),
        ("cpu1", {}),
        ("cpu2", {}),
        ("h0", gfd(H100, "9.0", "580.65.06")),  # ok: ignored
    )
    assert summarize_incompatible(results) == (
        "CUDA 13.0 needs compute capability >= 7.5, but nodes have Tesla-V100-SXM2-32GB (7.0) x4, "
        "Tesla-P100-SXM2-16GB (6.0) x1; 3 nodes are not GPU nodes; "
        "CUDA 13.0 needs driver >= 580, but nodes have NVIDIA-A100-SXM4-80GB (driver 550.54.14) x2."
    )


def test_summarize_labels_and_single_cpu() -> None:
    results = _results(("x", gfd(H100, "9.0")), ("cpu", {}))
    assert summarize_incompatible(results) == (
        "GPU nodes need label nvidia.com/cuda.driver-version.major (or the deprecated "
        "nvidia.com/cuda.driver.major); missing on NVIDIA-H100-80GB-HBM3 x1; 1 node is not a GPU node."
    )


def test_summarize_nothing_rejected() -> None:
    assert (
        summarize_incompatible(_results(("h", gfd(H100, "9.0", "580.65.06"))))
        == "no node was rejected."
    )
    assert summarize_incompatible([]) == "no node was rejected."

"""catalog_table: the `trainop catalog` view, with and without nodes."""

from __future__ import annotations

import pytest

from trainop.catalog import GpuFacts, ResolutionError, catalog_table, load_catalog

CAT = load_catalog()
V100 = GpuFacts(product="Tesla-V100-SXM2-32GB", compute_capability=(7, 0), driver=(550, 54, 14))
H100 = GpuFacts(product="NVIDIA-H100-80GB-HBM3", compute_capability=(9, 0), driver=(580, 65, 6))


def _rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()]


def test_all_frameworks() -> None:
    rows = _rows(catalog_table(CAT))
    assert rows[0] == [
        "FRAMEWORK",
        "VERSION",
        "RELEASE",
        "CUDA",
        "MIN",
        "DRIVER",
        "MIN",
        "CC",
        "ARCH",
        "IMAGE",
    ]
    frameworks = {r[0] for r in rows[1:-1]}
    assert frameworks == {"pytorch", "tensorflow", "jax", "paddle", "mxnet", "mpi"}
    assert [
        "pytorch",
        "2.4.0a0",
        "24.05",
        "12.4.1",
        "545",
        "6.0",
        "amd64,arm64*",  # the PyTorch arm64 window is unconfirmed: not used
        "nvcr.io/nvidia/pytorch:24.05-py3",
    ] in rows
    assert next(r for r in rows if r[0] == "jax")[6] == "amd64"
    assert rows[-1][0] == "*"  # footnote for unconfirmed values


def test_fixed_width_columns() -> None:
    lines = catalog_table(CAT, "pytorch").splitlines()[:-1]
    col = lines[0].index("RELEASE")
    assert all(line[col : col + 5].strip().count(".") == 1 for line in lines[1:])


@pytest.mark.parametrize(
    ("framework", "cuda", "first", "last", "count"),
    [
        pytest.param("jax", None, "24.10", "23.08", 7, id="jax-newest-first"),
        pytest.param("pytorch", "13.0", "26.07", "25.08", 6, id="cuda-filter"),
        pytest.param("mxnet", None, "24.06", "21.03", 4, id="mxnet"),
    ],
)
def test_filters(framework: str, cuda: str | None, first: str, last: str, count: int) -> None:
    rows = [r for r in _rows(catalog_table(CAT, framework, cuda))[1:] if r[0] == framework]
    assert (rows[0][2], rows[-1][2], len(rows)) == (first, last, count)


def test_unconfirmed_marked() -> None:
    rows = _rows(catalog_table(CAT, "pytorch"))
    row = next(r for r in rows if r[2] == "24.06")
    assert row[3] == "12.5.0*" and row[4] == "555*"
    row = next(r for r in rows if r[2] == "24.05")
    assert "*" not in "".join(row[:6] + row[7:])  # all but ARCH (arm64 is unconfirmed)


def test_nodes_column() -> None:
    nodes = [("v0", V100), ("v1", V100), ("h0", H100), ("cpu", GpuFacts())]
    text = catalog_table(CAT, "pytorch", nodes=nodes)
    lines = text.splitlines()
    assert lines[0].split()[-1] == "NODES"
    by_release = {line.split()[2]: line for line in lines[1:-1]}
    assert by_release["26.07"].endswith("NVIDIA-H100-80GB-HBM3 x1")
    assert by_release["24.12"].endswith("Tesla-V100-SXM2-32GB x2, NVIDIA-H100-80GB-HBM3 x1")
    nobody = catalog_table(CAT, "pytorch", nodes=[("cpu", GpuFacts())])
    assert all(line.endswith("none") for line in nobody.splitlines()[1:-1])


def test_no_rows_and_errors() -> None:
    assert catalog_table(CAT, "mxnet", "13.0") == "no image in the catalog matches"
    with pytest.raises(ResolutionError, match="unknown framework 'caffe'"):
        catalog_table(CAT, "caffe")
    with pytest.raises(ResolutionError, match="CUDA version"):
        catalog_table(CAT, "pytorch", "x")

"""Catalog data: the packaged file's invariants, overrides deep-merge, validation errors."""

from __future__ import annotations

from typing import Any

import pytest

from trainop.catalog import CatalogError, load_catalog, resolve_image
from trainop.catalog.model import base_product

CAT = load_catalog()


# ---------------------------------------------------------------- packaged data


def test_releases_sorted_and_unique() -> None:
    keys = [r.key for r in CAT.releases]
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)
    assert CAT.releases[0].name == "20.03"
    assert CAT.releases[-1].name == "26.07"


@pytest.mark.parametrize("release", CAT.releases, ids=lambda r: r.name)
def test_release_invariants(release: Any) -> None:
    # every release's CUDA is in the toolkit/driver table
    assert CAT.min_driver_for_cuda(release.cuda_mm) is not None
    # from 25.01 NGC needs 7.5+ (reference); CUDA 13 itself needs 7.5+
    if release.key >= (25, 1):
        assert release.min_cc == (7, 5)
    else:
        assert release.min_cc == (6, 0)
    # forward compatibility only ever lists branches older than the release's own
    for b in release.fc_branches:
        assert b[0] <= release.min_driver[0]
    assert release.frameworks


@pytest.mark.parametrize(
    ("release", "field", "value"),
    [
        pytest.param("24.05", "cuda", (12, 4, 1), id="24.05-cuda"),
        pytest.param("24.05", "cudnn", "9.1.0.70", id="24.05-cudnn"),
        pytest.param("22.03", "min_driver", (510,), id="22.03-min-driver"),
        pytest.param(
            "20.03", "fc_branches", ((396,), (384, 111), (410,), (418,), (440, 30)), id="20.03-fc"
        ),
        pytest.param("25.08", "cuda", (13, 0, 0), id="25.08-cuda"),
        pytest.param("26.07", "nccl", "2.30.7", id="26.07-nccl"),
    ],
)
def test_reference_values(release: str, field: str, value: Any) -> None:
    r = CAT.release(release)
    assert r is not None
    assert getattr(r, field) == value


@pytest.mark.parametrize(
    ("framework", "first", "last"),
    [
        pytest.param("jax", "23.08", "24.10", id="jax-from-23.08"),
        pytest.param("mxnet", "21.03", "24.06", id="mxnet-until-24.06"),
        pytest.param("pytorch", "20.03", "26.07", id="pytorch"),
        pytest.param("mpi", "20.03", "26.07", id="mpi-uses-pytorch"),
        pytest.param("paddle", "23.11", "24.05", id="paddle"),
        pytest.param("tensorflow", "23.03", "25.03", id="tensorflow"),
    ],
)
def test_framework_windows(framework: str, first: str, last: str) -> None:
    rels = CAT.releases_for(framework)
    assert (rels[0].name, rels[-1].name) == (first, last)


def test_month_by_month_pytorch_list() -> None:
    # reference: 24.02-24.04: 2.3, 24.05-24.07: 2.4, 24.08-24.10: 2.5, 24.11-25.01: 2.6,
    # 25.02-25.04: 2.7, 25.05-25.08: 2.8, 25.09-25.10: 2.9, 25.12: 2.10, 26.03: 2.11, 26.07: 2.13
    expect = {"24.02": "2.3", "24.07": "2.4", "24.08": "2.5", "25.01": "2.6", "25.04": "2.7"}
    expect |= {"25.08": "2.8", "25.09": "2.9", "25.12": "2.10", "26.03": "2.11", "26.07": "2.13"}
    for name, mm in expect.items():
        r = CAT.release(name)
        assert r is not None
        assert r.version_of("pytorch") == f"{mm}.0a0", name


@pytest.mark.parametrize(
    ("cuda", "driver"),
    [
        pytest.param((12, 4), (550, 54, 14), id="12.4"),
        pytest.param((12, 7), (570, 26), id="12.7-takes-12.8"),
        pytest.param((12, 10), None, id="12.10-beyond-table"),
        pytest.param((14, 0), None, id="14.0-unknown"),
        pytest.param((10, 2), (440, 33), id="10.2"),
    ],
)
def test_min_driver_for_cuda(cuda: tuple[int, int], driver: Any) -> None:
    assert CAT.min_driver_for_cuda(cuda) == driver


@pytest.mark.parametrize(
    ("major", "cc"),
    [
        pytest.param(9, None, id="9-none"),
        pytest.param(10, (3, 0), id="10"),
        pytest.param(11, (3, 5), id="11"),
        pytest.param(12, (5, 0), id="12"),
        pytest.param(13, (7, 5), id="13"),
        pytest.param(14, (7, 5), id="14-inherits-13"),
    ],
)
def test_min_cc_for_cuda(major: int, cc: Any) -> None:
    assert CAT.min_cc_for_cuda(major) == cc


@pytest.mark.parametrize(
    ("product", "dc"),
    [
        pytest.param("Tesla-T4", True, id="t4"),
        pytest.param("NVIDIA-Tesla-T4", True, id="t4-prefixed"),
        pytest.param("A100-SXM4-40GB", True, id="a100-old-driver-label"),
        pytest.param("NVIDIA-H100-80GB-HBM3-SHARED", True, id="h100-time-sliced"),
        pytest.param("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", False, id="mig-exact-names-only"),
        pytest.param("NVIDIA-GeForce-RTX-4090", False, id="geforce"),
        pytest.param("NVIDIA-Unknown-9000", False, id="unknown"),
        pytest.param(None, False, id="none"),
    ],
)
def test_is_data_center(product: str | None, dc: bool) -> None:
    assert CAT.is_data_center(product) is dc
    # the affinity's product list is exactly what is_data_center accepts
    assert (product in CAT.data_center_labels()) is dc


def test_base_product() -> None:
    assert base_product("NVIDIA-H100-80GB-HBM3-SHARED") == "H100-80GB-HBM3"
    assert base_product("Tesla-T4") == "Tesla-T4"


def test_packaged_catalog_is_shared() -> None:
    assert load_catalog() is load_catalog()


# ---------------------------------------------------------------- overrides


def test_override_adds_release() -> None:
    cat = load_catalog(
        overrides={
            "releases": {
                "26.08": {
                    "cuda": "13.3.2",
                    "min_driver": "610",
                    "min_cc": "7.5",
                    "frameworks": {"pytorch": "2.13.0a0"},
                }
            }
        }
    )
    assert cat.releases[-1].name == "26.08"
    assert resolve_image(cat, "pytorch", None, None).image == "nvcr.io/nvidia/pytorch:26.08-py3"
    assert load_catalog().releases[-1].name == "26.07"  # the default is untouched


def test_override_changes_one_field_keeps_the_rest() -> None:
    cat = load_catalog(overrides={"releases": {"24.05": {"min_driver": "550"}}})
    r = cat.release("24.05")
    assert r is not None
    assert r.min_driver == (550,)
    assert r.cuda == (12, 4, 1)
    assert r.version_of("pytorch") == "2.4.0a0"


def test_override_null_removes_release() -> None:
    cat = load_catalog(overrides={"releases": {"26.07": None}})
    assert cat.release("26.07") is None
    assert cat.releases[-1].name == "26.03"


def test_override_list_replaces() -> None:
    cat = load_catalog(overrides={"releases": {"24.05": {"fc_branches": ["535.86"]}}})
    r = cat.release("24.05")
    assert r is not None
    assert r.fc_branches == ((535, 86),)


def test_override_mirror_repository() -> None:
    cat = load_catalog(
        overrides={"images": {"pytorch": {"repository": "registry.local/nvidia/pytorch"}}}
    )
    choice = resolve_image(cat, "pytorch", "2.4", None)
    assert choice.image == "registry.local/nvidia/pytorch:24.07-py3"
    explicit = resolve_image(
        cat, "pytorch", None, None, image="registry.local/nvidia/pytorch:24.05-py3"
    )
    assert explicit.release is not None
    assert explicit.release.name == "24.05"


def test_override_adds_gpu() -> None:
    cat = load_catalog(overrides={"gpus": {"NVIDIA-A30": {"cc": "8.0", "data_center": True}}})
    assert cat.is_data_center("NVIDIA-A30")
    assert len(cat.gpus) == len(CAT.gpus) + 1


def test_load_from_path(tmp_path: Any) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(
        """
releases:
  "24.05": {cuda: "12.4.1", min_driver: "545", min_cc: "6.0", frameworks: {pytorch: "2.4.0a0"}}
cuda_min_driver: {"12.4": "550.54.14"}
images:
  pytorch: {ships: pytorch, repository: nvcr.io/nvidia/pytorch, tag: "{release}-py3"}
"""
    )
    cat = load_catalog(str(p))
    assert [r.name for r in cat.releases] == ["24.05"]
    assert cat.minor_compat_driver(12) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(None, "cannot read catalog", id="missing-file"),
        pytest.param("releases: [", "not valid YAML", id="bad-yaml"),
        pytest.param("- 1\n- 2\n", "catalog: expected a mapping", id="not-a-mapping"),
    ],
)
def test_load_errors(tmp_path: Any, text: str | None, message: str) -> None:
    p = tmp_path / "c.yaml"
    if text is not None:
        p.write_text(text)
    with pytest.raises(CatalogError, match=message):
        load_catalog(str(p))


_NEW = {
    "cuda": "13.3.1",
    "min_driver": "610",
    "min_cc": "7.5",
    "frameworks": {"pytorch": "2.13.0a0"},
}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param({"bogus": 1}, "catalog: unknown key 'bogus'", id="unknown-top-key"),
        pytest.param(
            {"releases": {"24.05": {"cuda": "abc"}}}, r"releases\['24.05'\].cuda", id="bad-cuda"
        ),
        pytest.param({"releases": {"24.05": {"cuda": 12.4}}}, "quoted version", id="unquoted-cuda"),
        pytest.param({"releases": {"24.05": {"cuda": "12"}}}, "major.minor", id="cuda-major-only"),
        pytest.param(
            {"releases": {"24.05": {"colour": "red"}}}, "unknown key 'colour'", id="unknown-field"
        ),
        pytest.param({"releases": {24.1: _NEW}}, "quoted 'YY.MM'", id="unquoted-release-name"),
        pytest.param({"releases": {"2024.5": _NEW}}, "quoted 'YY.MM'", id="bad-release-name"),
        pytest.param(
            {"releases": {"26.08": {"cuda": "13.3.1"}}},
            r"releases\['26.08'\].min_driver: required",
            id="missing-min-driver",
        ),
        pytest.param(
            {"releases": {"24.05": {"min_cc": "6"}}}, r"min_cc: expected X.Y", id="bad-min-cc"
        ),
        pytest.param(
            {"releases": {"24.05": {"fc_branches": "470"}}},
            "fc_branches: expected a list",
            id="fc-not-list",
        ),
        pytest.param(
            {"releases": {"24.05": {"fc_branches": ["r470"]}}},
            r"fc_branches\[0\]",
            id="fc-bad-entry",
        ),
        pytest.param(
            {"releases": {"24.05": {"unconfirmed": ["colour"]}}},
            "unconfirmed: 'colour'",
            id="bad-unconfirmed",
        ),
        pytest.param(
            {"releases": {"24.05": {"unconfirmed": "cuda"}}},
            "unconfirmed: expected a list",
            id="unconfirmed-str",
        ),
        pytest.param(
            {"releases": {"24.05": {"frameworks": {"caffe": "1.0"}}}},
            "no image in `images` ships 'caffe'",
            id="unknown-framework",
        ),
        pytest.param(
            {"releases": {"24.05": {"frameworks": {"pytorch": 2.4}}}},
            r"frameworks.pytorch",
            id="fw-version-number",
        ),
        pytest.param(
            {"releases": {"24.05": {"python": ""}}},
            r"releases\['24.05'\].python",
            id="empty-python",
        ),
        pytest.param(
            {"releases": {"24.05": "x"}},
            r"releases\['24.05'\]: expected a mapping",
            id="release-not-mapping",
        ),
        pytest.param(
            {"gpus": {"Tesla-T4": {"data_center": "yes"}}},
            r"gpus\['Tesla-T4'\].data_center",
            id="gpu-dc-str",
        ),
        pytest.param(
            {"gpus": {"NVIDIA-Tesla-T4": {"cc": "7.5"}}},
            "same product as 'Tesla-T4'",
            id="gpu-duplicate",
        ),
        pytest.param(
            {"gpus": {"X": {"cc": "8.0", "memory_mib": -1}}},
            r"gpus\['X'\].memory_mib",
            id="gpu-memory",
        ),
        pytest.param(
            {"gpus": {"X": {"family": "x"}}}, r"gpus\['X'\].cc: required", id="gpu-cc-missing"
        ),
        pytest.param(
            {"gpus": {"X": {"cc": "8.0", "speed": 1}}},
            "unknown key 'speed'",
            id="gpu-unknown-field",
        ),
        pytest.param(
            {"images": {"pytorch": {"tag": "py3"}}}, "must contain '{release}'", id="tag-no-release"
        ),
        pytest.param(
            {"images": {"pytorch": {"tag": "{release}-{x}"}}},
            "only '{release}'",
            id="tag-bad-field",
        ),
        pytest.param(
            {"images": {"pytorch": {"since": "2024-05"}}},
            r"images\['pytorch'\].since",
            id="bad-since",
        ),
        pytest.param(
            {"images": {"foo": {"ships": "foo", "repository": "r", "tag": "{release}"}}},
            "no release lists framework 'foo'",
            id="image-ships-unknown",
        ),
        pytest.param(
            {"images": {"caffe": {"ships": "caffe"}}},
            r"images\['caffe'\].repository: required",
            id="image-incomplete",
        ),
        pytest.param(
            {"cuda_min_driver": {"12.10": 570}}, r"cuda_min_driver\['12.10'\]", id="driver-number"
        ),
        pytest.param(
            {"cuda_min_driver": {"twelve": "570"}}, "cuda_min_driver", id="driver-bad-key"
        ),
        pytest.param(
            {"minor_version_compat": {"x": {"min_driver": "1"}}},
            "minor_version_compat",
            id="mvc-bad-key",
        ),
        pytest.param(
            {"minor_version_compat": {"14": {}}}, "min_driver: required", id="mvc-missing"
        ),
        pytest.param({"cuda_min_cc": {"13": "7"}}, r"cuda_min_cc\['13'\]", id="min-cc-bad"),
    ],
)
def test_override_validation(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        load_catalog(overrides=overrides)

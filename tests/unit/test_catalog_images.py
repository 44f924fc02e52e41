"""resolve_image: version prefix, CUDA minimum, fleet preference, explicit images, errors."""

from __future__ import annotations

from typing import Any

import pytest

from trainop.catalog import GpuFacts, ResolutionError, load_catalog, resolve_image, version_matches
from trainop.catalog.images import available_versions

CAT = load_catalog()

V100 = GpuFacts(product="Tesla-V100-SXM2-32GB", compute_capability=(7, 0), driver=(550, 54, 14))
H100_R580 = GpuFacts(
    product="NVIDIA-H100-80GB-HBM3", compute_capability=(9, 0), driver=(580, 65, 6)
)
H100_R550 = GpuFacts(
    product="NVIDIA-H100-80GB-HBM3", compute_capability=(9, 0), driver=(550, 54, 14)
)
T4_R470 = GpuFacts(product="Tesla-T4", compute_capability=(7, 5), driver=(470, 57, 2))
RTX_R470 = GpuFacts(
    product="NVIDIA-GeForce-RTX-4090", compute_capability=(8, 9), driver=(470, 57, 2)
)
CPU = GpuFacts()


@pytest.mark.parametrize(
    ("requested", "actual", "ok"),
    [
        pytest.param("2.4", "2.4.0a0", True, id="minor-prefix"),
        pytest.param("2.4.0", "2.4.0a0", True, id="patch-before-prerelease"),
        pytest.param("2.4.0a0", "2.4.0a0", True, id="exact"),
        pytest.param("2", "2.4.0a0", True, id="major-only"),
        pytest.param("v2.4", "2.4.0a0", True, id="v-prefix"),
        pytest.param("2.1", "2.10.0a0", False, id="2.1-is-not-2.10"),
        pytest.param("2.4.1", "2.4.0a0", False, id="other-patch"),
        pytest.param("2.4.0.1", "2.4.0", False, id="longer-than-actual"),
        pytest.param("0.4.2", "0.4.26", False, id="jax-patch-not-prefix"),
        pytest.param("0.4.26", "0.4.26", True, id="jax-exact"),
    ],
)
def test_version_matches(requested: str, actual: str, ok: bool) -> None:
    assert version_matches(requested, actual) is ok


def test_available_versions() -> None:
    assert (
        available_versions(["1.5.0a0", "2.0.0a0", "2.1.0a0", "2.2.0a0", "2.13.0a0"])
        == "1.5, 2.0 .. 2.2, 2.13"
    )
    assert (
        available_versions(["0.4.14", "0.4.17", "0.4.24", "0.4.25", "0.4.26"])
        == "0.4.14, 0.4.17, 0.4.24 .. 0.4.26"
    )
    assert available_versions(["2.3.0", "2.4.0"]) == "2.3, 2.4"


# (framework, version, cuda, fleet, expected image, expected framework version, reason words)
CASES: list[Any] = [
    pytest.param(
        "pytorch", None, None, (), "pytorch:26.07-py3", "2.13.0a0", ["newest"], id="newest"
    ),
    pytest.param(
        "pytorch", "2.4", None, (), "pytorch:24.07-py3", "2.4.0a0", ["pytorch 2.4"], id="prefix-2.4"
    ),
    pytest.param(
        "pytorch", "2.4.0", None, (), "pytorch:24.07-py3", "2.4.0a0", [], id="prefix-2.4.0"
    ),
    pytest.param("pytorch", "2.1", None, (), "pytorch:23.10-py3", "2.1.0a0", [], id="2.1-not-2.10"),
    pytest.param("pytorch", "2.10", None, (), "pytorch:25.12-py3", "2.10.0a0", [], id="2.10"),
    pytest.param("pytorch", "2", None, (), "pytorch:26.07-py3", "2.13.0a0", [], id="major-only"),
    pytest.param(
        "pytorch",
        "2.3",
        "12.4",
        (),
        "pytorch:24.04-py3",
        "2.3.0a0",
        ["CUDA >= 12.4"],
        id="cuda-min-12.4",
    ),
    pytest.param(
        "pytorch", "2.3", "12.4.1", (), "pytorch:24.04-py3", "2.3.0a0", [], id="cuda-min-patch"
    ),
    pytest.param(
        "pytorch", "2.3", "12", (), "pytorch:24.04-py3", "2.3.0a0", [], id="cuda-min-major"
    ),
    pytest.param(
        "pytorch", None, "12.4", (), "pytorch:26.07-py3", "2.13.0a0", [], id="cuda-min-only"
    ),
    pytest.param(
        "tensorflow", None, None, (), "tensorflow:25.03-tf2-py3", "2.17.0", [], id="tensorflow-tag"
    ),
    pytest.param(
        "tensorflow",
        "2.15",
        None,
        (),
        "tensorflow:24.05-tf2-py3",
        "2.15.0",
        [],
        id="tensorflow-2.15",
    ),
    pytest.param("jax", None, None, (), "jax:24.10-py3", "0.4.33", [], id="jax"),
    pytest.param("paddle", None, None, (), "paddlepaddle:24.05-py3", "2.6.1", [], id="paddle"),
    pytest.param(
        "paddlepaddle", None, None, (), "paddlepaddle:24.05-py3", "2.6.1", [], id="paddle-alias"
    ),
    pytest.param("mxnet", None, None, (), "mxnet:24.06-py3", "1.9.1", [], id="mxnet-last"),
    pytest.param(
        "mpi", "2.4", None, (), "pytorch:24.07-py3", "2.4.0a0", [], id="mpi-uses-pytorch-image"
    ),
    # fleet preference
    pytest.param(
        "pytorch",
        None,
        None,
        (V100,),
        "pytorch:24.12-py3",
        "2.6.0a0",
        ["fleet", "newer 26.07"],
        id="fleet-volta-stops-at-24.12",
    ),
    pytest.param(
        "pytorch",
        None,
        None,
        (V100, H100_R580),
        "pytorch:26.07-py3",
        "2.13.0a0",
        ["a node of the fleet can run it"],
        id="fleet-one-node-enough",
    ),
    pytest.param(
        "pytorch",
        None,
        None,
        (H100_R550,),
        "pytorch:25.07-py3",
        "2.8.0a0",
        [],
        id="fleet-r550-stays-on-cuda12",
    ),
    pytest.param(
        "pytorch",
        None,
        None,
        (T4_R470,),
        "pytorch:25.06-py3",  # the 25.01..25.06 notes list R470 >= 470.57 as FC
        "2.8.0a0",
        [],
        id="fleet-forward-compat",
    ),
    pytest.param(
        "pytorch",
        None,
        None,
        (RTX_R470,),
        "pytorch:20.03-py3",
        "1.5.0a0",
        [],
        id="fleet-geforce-no-fc",
    ),
    pytest.param(
        "pytorch",
        None,
        None,
        (CPU, CPU),
        "pytorch:26.07-py3",
        "2.13.0a0",
        ["no node of the fleet"],
        id="fleet-none-can-run",
    ),
    pytest.param(
        "pytorch",
        "2.4",
        "12.4",
        (V100,),
        "pytorch:24.07-py3",
        "2.4.0a0",
        [],
        id="fleet-with-filters",
    ),
]


@pytest.mark.parametrize(
    ("framework", "version", "cuda", "fleet", "image", "fw_version", "words"), CASES
)
def test_resolve(
    framework: str,
    version: str | None,
    cuda: str | None,
    fleet: tuple[GpuFacts, ...],
    image: str,
    fw_version: str,
    words: list[str],
) -> None:
    got = resolve_image(CAT, framework, version, cuda, fleet=fleet)
    assert got.image == "nvcr.io/nvidia/" + image
    assert got.framework_version == fw_version
    assert got.release is not None
    assert got.cuda == got.release.cuda_mm
    assert got.reason.endswith(".")
    for w in words:
        assert w in got.reason


# (image, framework, version, cuda, release name or None, cuda, framework version)
EXPLICIT: list[Any] = [
    pytest.param(
        "nvcr.io/nvidia/pytorch:24.05-py3",
        "pytorch",
        None,
        None,
        "24.05",
        (12, 4),
        "2.4.0a0",
        id="ngc-pytorch",
    ),
    pytest.param(
        "nvcr.io/nvidia/pytorch:24.05-py3",
        "pytorch",
        "2.4",
        "12.4",
        "24.05",
        (12, 4),
        "2.4.0a0",
        id="ngc-consistent",
    ),
    pytest.param(
        "nvcr.io/nvidia/pytorch:24.05-py3@sha256:" + "a" * 64,
        "pytorch",
        None,
        None,
        "24.05",
        (12, 4),
        "2.4.0a0",
        id="ngc-with-digest",
    ),
    pytest.param(
        "nvcr.io/nvidia/tensorflow:23.03-tf2-py3",
        "tensorflow",
        None,
        None,
        "23.03",
        (12, 1),
        "2.11.0",
        id="ngc-tensorflow",
    ),
    pytest.param(
        "nvcr.io/nvidia/pytorch:24.05-py3",
        "mpi",
        None,
        None,
        "24.05",
        (12, 4),
        "2.4.0a0",
        id="ngc-mpi",
    ),
    pytest.param(
        "nvcr.io/nvidia/jax:24.05-py3",
        "jax",
        "0.4.26",
        None,
        "24.05",
        (12, 4),
        "0.4.26",
        id="ngc-release-without-that-framework",
    ),
    pytest.param(
        "nvcr.io/nvidia/pytorch:19.10-py3",
        "pytorch",
        None,
        "10.1",
        None,
        (10, 1),
        None,
        id="ngc-unknown-release",
    ),
    pytest.param(
        "nvcr.io/nvidia/nemo:24.05",
        "pytorch",
        None,
        "12.4",
        None,
        (12, 4),
        None,
        id="ngc-unknown-repo",
    ),
    pytest.param(
        "ghcr.io/acme/train:1.0",
        "pytorch",
        "2.4",
        "12.4.1",
        None,
        (12, 4),
        "2.4",
        id="non-ngc-with-cuda",
    ),
    pytest.param(
        "ghcr.io/acme/train:1.0", "pytorch", None, None, None, None, None, id="non-ngc-no-cuda"
    ),
    pytest.param(
        "ghcr.io/acme/train:1.0", "caffe", None, None, None, None, None, id="non-ngc-any-framework"
    ),
]


@pytest.mark.parametrize(
    ("image", "framework", "version", "cuda", "release", "need", "fw_version"), EXPLICIT
)
def test_explicit_image(
    image: str,
    framework: str,
    version: str | None,
    cuda: str | None,
    release: str | None,
    need: tuple[int, int] | None,
    fw_version: str | None,
) -> None:
    got = resolve_image(CAT, framework, version, cuda, image=image, fleet=(CPU,))
    assert got.image == image  # respected as given
    assert (got.release.name if got.release else None) == release
    assert got.cuda == need
    assert got.framework_version == fw_version
    assert got.reason.startswith("spec.image is used as given")


# (framework, version, cuda, image, field, message)
ERRORS: list[Any] = [
    pytest.param(
        "pytorch",
        "1.9",
        None,
        None,
        "spec.framework.version",
        "spec.framework.version: pytorch 1.9 is in no NGC release in the catalog; "
        "available: 1.5, 2.0 .. 2.11, 2.13",
        id="version-unknown",
    ),
    pytest.param(
        "pytorch",
        "2.4",
        "12.6",
        None,
        "spec.cuda",
        "spec.cuda: no NGC release ships pytorch 2.4 with CUDA >= 12.6; pytorch 2.4 comes with "
        "CUDA 12.4.1 .. 12.5.1 (NGC 24.05 .. 24.07)",
        id="version-and-cuda",
    ),
    pytest.param(
        "jax",
        None,
        "13.0",
        None,
        "spec.cuda",
        "no NGC release ships jax with CUDA >= 13.0",
        id="cuda-too-new",
    ),
    pytest.param(
        "mxnet",
        None,
        "12.6",
        None,
        "spec.cuda",
        "mxnet comes with CUDA 11.2.1 .. 12.4.1",  # 24.06 MXNet stayed on 12.4.1
        id="mxnet-ended",
    ),
    pytest.param(
        "caffe",
        None,
        None,
        None,
        "spec.framework.name",
        "known: pytorch, tensorflow, jax, paddle, mxnet, mpi",
        id="framework-unknown",
    ),
    pytest.param(
        "pytorch",
        None,
        "twelve",
        None,
        "spec.cuda",
        "expected a CUDA version such as 12.4",
        id="cuda-malformed",
    ),
    pytest.param(
        "pytorch",
        None,
        "12.4.1.1",
        None,
        "spec.cuda",
        "expected a CUDA version",
        id="cuda-too-long",
    ),
    pytest.param(
        "pytorch",
        "latest",
        None,
        None,
        "spec.framework.version",
        "expected a version such as 2.4",
        id="version-malformed",
    ),
    pytest.param(
        "jax",
        "0.4.2",
        None,
        None,
        "spec.framework.version",
        "available: 0.4.14, 0.4.17, 0.4.21",
        id="jax-versions-listed",
    ),
    pytest.param(
        "pytorch",
        None,
        "12.6",
        "nvcr.io/nvidia/pytorch:24.05-py3",
        "spec.cuda",
        "CUDA 12.4.1, older than the requested 12.6",
        id="explicit-cuda-conflict",
    ),
    pytest.param(
        "pytorch",
        "2.3",
        None,
        "nvcr.io/nvidia/pytorch:24.05-py3",
        "spec.framework.version",
        "pytorch 2.3 does not match spec.image",
        id="explicit-version-conflict",
    ),
    pytest.param(
        "pytorch",
        None,
        "bad",
        "ghcr.io/acme/train:1",
        "spec.cuda",
        "expected a CUDA version",
        id="explicit-cuda-malformed",
    ),
]


@pytest.mark.parametrize(("framework", "version", "cuda", "image", "field", "message"), ERRORS)
def test_errors(
    framework: str,
    version: str | None,
    cuda: str | None,
    image: str | None,
    field: str,
    message: str,
) -> None:
    with pytest.raises(ResolutionError) as err:
        resolve_image(CAT, framework, version, cuda, image=image)
    assert err.value.field == field
    assert str(err.value).startswith(field + ": ")
    assert message in str(err.value)


def test_empty_strings_mean_unset() -> None:
    got = resolve_image(CAT, "pytorch", "", "", image="")
    assert got.image == "nvcr.io/nvidia/pytorch:26.07-py3"


def test_fleet_checks_identical_nodes_once() -> None:
    # many identical nodes must not multiply the work: a large fleet resolves quickly
    got = resolve_image(CAT, "pytorch", None, None, fleet=[V100] * 5000)
    assert got.image.endswith(":24.12-py3")


def test_explicit_image_uses_the_framework_specific_figures() -> None:
    from trainop.catalog import load_catalog, resolve_image

    choice = resolve_image(
        load_catalog(), "mxnet", None, None, image="nvcr.io/nvidia/mxnet:24.06-py3"
    )
    assert choice.release is not None
    assert (choice.cuda, choice.release.min_driver_text) == ((12, 4), "545")

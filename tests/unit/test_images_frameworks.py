"""The framework images' recipes (tensorflow-cpu, jax-cpu, paddle-cpu, mxnet-cpu): pinned
wheels, keyed by content, and the venv hooks that install them offline."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from trainop.cluster import images, wheels

FRAMEWORK_PIN = [
    pytest.param("tensorflow-cpu", "tensorflow-cpu==2.21.0", id="tensorflow"),
    pytest.param("jax-cpu", "jaxlib==0.10.2", id="jax"),
    pytest.param("paddle-cpu", "paddlepaddle==3.3.1", id="paddle"),
    pytest.param("mxnet-cpu", "mxnet==1.9.1", id="mxnet"),
]


@pytest.mark.parametrize(("image", "pin"), FRAMEWORK_PIN)
def test_each_framework_image_pins_its_framework(image: str, pin: str) -> None:
    recipe = images.RECIPES[image]
    assert pin in recipe.wheels
    assert image in images.FRAMEWORK_IMAGES and image in images.ALL_IMAGES
    assert recipe.config.env["PATH"].startswith(f"{images.VENV}/bin:")
    assert "launcher" in recipe.files and "examples" in recipe.files
    assert "libstdc++6" in recipe.packages  # the compiled modules link it


@pytest.mark.parametrize("image", images.FRAMEWORK_IMAGES)
def test_every_wheel_is_pinned_once(image: str) -> None:
    pins = images.RECIPES[image].wheels
    names = [p.split("==")[0] for p in pins]
    assert all("==" in p for p in pins), pins
    assert len(names) == len(set(names)), names


def test_mxnet_keeps_a_numpy_with_its_aliases() -> None:
    # MXNet 1.9.1 uses np.bool and friends, removed in NumPy 1.24.
    numpy = next(p for p in wheels.MXNET if p.startswith("numpy=="))
    major, minor = (int(x) for x in numpy.split("==")[1].split(".")[:2])
    assert (major, minor) < (1, 24)


def test_a_pin_change_rebuilds_only_that_image(monkeypatch: pytest.MonkeyPatch) -> None:
    before = {name: images.image_ref(name) for name in images.ALL_IMAGES}
    jax = images.RECIPES["jax-cpu"]
    moved = tuple(p.replace("scipy==1.17.1", "scipy==1.17.0") for p in jax.wheels)
    monkeypatch.setitem(images.RECIPES, "jax-cpu", replace(jax, wheels=moved))
    after = {name: images.image_ref(name) for name in images.ALL_IMAGES}
    assert [n for n in before if before[n] != after[n]] == ["jax-cpu"]


def test_wheel_hooks_install_offline_into_the_venv(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ran: list[list[str]] = []
    monkeypatch.setattr(images, "_run", lambda cmd, what, *a, **k: ran.append(cmd))
    hooks = images._wheel_hooks(("jax==0.10.2", "jaxlib==0.10.2"), tmp_path / "w")
    (download,) = ran
    assert download[-2:] == ["jax==0.10.2", "jaxlib==0.10.2"]
    assert {"--no-deps", "--only-binary=:all:", "manylinux_2_36_x86_64"} <= set(download)
    assert any("--system-site-packages /opt/venv" in h for h in hooks)
    install = next(h for h in hooks if "pip install" in h)
    assert "--no-index" in install and "jaxlib==0.10.2" in install


def test_hf_image_is_trixie_with_debian_torch_and_pinned_wheels(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # transformers 5 needs torch >= 2.6: trixie's python3-torch (CPython 3.13, glibc 2.41),
    # never PyPI's torch (gigabytes of CUDA wheels).
    recipe = images.RECIPES["hf-cpu"]
    assert recipe.suite == "trixie" and recipe.python == "3.13" and recipe.glibc == 41
    assert "python3-torch" in recipe.packages and "hf-cpu" in images.ALL_IMAGES
    assert {"transformers==5.24.0", "lightning==2.6.6"} <= set(recipe.wheels)
    names = [p.split("==")[0] for p in recipe.wheels]
    assert len(names) == len(set(names)) and all("==" in p for p in recipe.wheels)
    assert not [n for n in names if n in ("torch", "triton") or n.startswith("nvidia-")]
    # its torchrun starts the workers with the venv's python (transformers lives there)
    torchrun = images._trainop_files()["torchrun-venv"]["usr/local/bin/torchrun"][0]
    assert torchrun.startswith(b"#!/opt/venv/bin/python3\n")
    ran: list[list[str]] = []
    monkeypatch.setattr(images, "_run", lambda cmd, what, *a, **k: ran.append(cmd))
    monkeypatch.setattr(images.shutil, "which", lambda name: f"/usr/bin/{name}")
    images._mmdebstrap(recipe, tmp_path / "rootfs.tar", tmp_path)
    download, mmdebstrap = ran
    assert download[download.index("--python-version") + 1] == "3.13"
    assert "manylinux_2_41_x86_64" in download and "manylinux_2_42_x86_64" not in download
    assert mmdebstrap[-3] == "trixie"
    # the other images keep bookworm, and their keys
    assert images._base_key(images.RECIPES["jax-cpu"]) == images._base_key(
        replace(images.RECIPES["jax-cpu"], suite="bookworm")
    )

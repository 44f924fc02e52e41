"""The lock files (`make lock`) cover pyproject.toml: every dependency pinned, with hashes, within
its range; the runtime lock agrees with the dev lock; the operator image installs the runtime lock.

A dependency added to pyproject.toml without `make lock` fails here, before `make install`
(which installs only the dev lock) leaves it out of every fresh venv.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from trainop.cluster import images

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
RUNTIME = [Requirement(r) for r in PYPROJECT["dependencies"]]
DEV = RUNTIME + [Requirement(r) for r in PYPROJECT["optional-dependencies"]["dev"]]
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) \\$")


def pins(name: str) -> dict[str, Version]:
    """Name -> pinned version of a pip-compile --generate-hashes file; each pin is followed by
    at least one sha256 hash."""
    lines = (ROOT / name).read_text().splitlines()
    out: dict[str, Version] = {}
    for i, line in enumerate(lines):
        found = _PIN.match(line)
        if found is None:
            continue
        assert lines[i + 1].strip().startswith("--hash=sha256:"), f"{name}: {line} has no hash"
        out[canonicalize_name(found.group(1))] = Version(found.group(2))
    return out


@pytest.mark.parametrize(
    ("lock", "wanted"),
    [
        pytest.param("requirements.lock", RUNTIME, id="runtime"),
        pytest.param("requirements-dev.lock", DEV, id="dev"),
    ],
)
def test_lock_pins_every_dependency_within_its_range(lock: str, wanted: list[Requirement]) -> None:
    pinned = pins(lock)
    missing = sorted(r.name for r in wanted if canonicalize_name(r.name) not in pinned)
    assert not missing, f"{lock} lacks {missing}: run `make lock`"
    outside = [
        f"{r.name}=={pinned[canonicalize_name(r.name)]} is not {r.specifier}"
        for r in wanted
        if not r.specifier.contains(pinned[canonicalize_name(r.name)], prereleases=True)
    ]
    assert not outside, f"{lock}: {outside}: run `make lock`"


def test_runtime_lock_agrees_with_the_dev_lock() -> None:
    runtime, dev = pins("requirements.lock"), pins("requirements-dev.lock")
    differ = {n: (v, dev.get(n)) for n, v in runtime.items() if dev.get(n) != v}
    assert not differ, f"runtime vs dev pins: {differ}: run `make lock`"


def test_every_runtime_dependency_has_an_upper_bound() -> None:
    # Below the next major version: two image builds a month apart install the same majors.
    unbounded = [str(r) for r in RUNTIME if not any(s.operator in ("<", "<=") for s in r.specifier)]
    assert not unbounded, f"pyproject.toml dependencies without an upper bound: {unbounded}"


def test_operator_image_installs_the_runtime_lock() -> None:
    deps = images.trainop_dependencies()
    assert {
        canonicalize_name(Requirement(d).name): str(Requirement(d).specifier) for d in deps
    } == {n: f"=={v}" for n, v in pins("requirements.lock").items()}


def test_operator_image_refuses_a_stale_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\ndependencies = ["kopf>=1.37,<2", "Brand_New.Thing>=1"]\n'
    )
    (tmp_path / "requirements.lock").write_text(
        "kopf==1.45.2 \\\n    --hash=sha256:00\n    # via x (pyproject.toml)\n"
    )
    monkeypatch.setattr(images, "repo_root", lambda: tmp_path)
    with pytest.raises(images.ImageError, match=r"lacks brand-new-thing .*run `make lock`"):
        images.trainop_dependencies()

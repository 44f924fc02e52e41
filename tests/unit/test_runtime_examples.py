"""Every TrainingJob example has a runtime-based twin in examples/runtimes/ (issue 34): at
most 12 lines, naming one of the ClusterTrainingRuntimes the chart ships
(charts/trainop/runtimes/), and `trainop render --runtimes` of the twin gives the same
objects as the render of the inlined example. "The same" allows one thing: a container's
command and args are compared as the one argv they make (the MPI runtime's mpirun flags are
its command, the twin's program its args). The line counts are the table in
docs/runtimes.md."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from tests.unit.manifest_helpers import EXAMPLES, FLEET_NODES, ROOT, job_examples
from trainop.cli.main import cli

TWINS = EXAMPLES / "runtimes"
RUNTIMES = ROOT / "charts" / "trainop" / "runtimes"
DOC = ROOT / "docs" / "runtimes.md"
MAX_LINES = 12


def yaml_lines(path: Path) -> int:
    """Lines a user writes: not blank, not a comment."""
    return sum(
        1
        for line in path.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )


def _render(path: Path, *extra: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(cli, ["render", str(path), "--nodes", str(FLEET_NODES), *extra])
    assert result.exit_code == 0, result.output
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def _argv(obj: Any) -> Any:
    """command + args of every container as one argv (see the module docstring)."""
    if isinstance(obj, dict):
        out = {k: _argv(v) for k, v in obj.items() if k not in ("command", "args")}
        if "command" in obj or "args" in obj:
            out["argv"] = [*(obj.get("command") or []), *(obj.get("args") or [])]
        return out
    if isinstance(obj, list):
        return [_argv(x) for x in obj]
    return obj


def _without_spec_hash(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # The pod's spec hash covers its command/args split, which _argv compares as one argv.
    for o in objs:
        (o["metadata"].get("annotations") or {}).pop("trainop.dev/spec-hash", None)
    return objs


def test_every_example_has_a_twin() -> None:
    assert sorted(p.name for p in TWINS.glob("*.yaml")) == sorted(job_examples())


def test_the_chart_ships_one_runtime_per_framework() -> None:
    names = sorted(
        yaml.safe_load(p.read_text())["metadata"]["name"] for p in RUNTIMES.glob("*.yaml")
    )
    assert names == sorted(["pytorch", "tensorflow", "jax", "mpi", "paddle", "mxnet"])


@pytest.mark.parametrize("name", job_examples())
def test_twin_is_short(name: str) -> None:
    assert yaml_lines(TWINS / name) <= MAX_LINES, f"examples/runtimes/{name}"


@pytest.mark.parametrize("name", job_examples())
def test_twin_renders_as_the_inlined_example(name: str) -> None:
    runtimes = [a for p in sorted(RUNTIMES.glob("*.yaml")) for a in ("--runtimes", str(p))]
    twin = _render(TWINS / name, *runtimes)
    inlined = _render(EXAMPLES / name)
    assert _argv(_without_spec_hash(twin)) == _argv(_without_spec_hash(inlined))


@pytest.mark.parametrize("name", job_examples())
def test_docs_table_counts_the_lines(name: str) -> None:
    row = re.search(rf"^\| `{re.escape(name)}` \| (\d+) \| (\d+) \|", DOC.read_text(), re.M)
    assert row, f"docs/runtimes.md: no row for {name}"
    assert (int(row[1]), int(row[2])) == (yaml_lines(EXAMPLES / name), yaml_lines(TWINS / name))


# --- `trainop render` with runtimes -----------------------------------------------------


def _run(*args: str) -> Any:
    result = CliRunner().invoke(cli, ["render", *args, "--nodes", str(FLEET_NODES)])
    assert "Traceback" not in result.output
    return result


def test_runtimes_beside_the_job_in_one_file(tmp_path: Path) -> None:
    both = tmp_path / "both.yaml"
    both.write_text(
        (RUNTIMES / "pytorch.yaml").read_text() + "---\n" + (TWINS / "pytorch-ddp.yaml").read_text()
    )
    result = _run(str(both))
    assert result.exit_code == 0, result.output
    assert "# runtime: ClusterTrainingRuntime pytorch, merged with the job" in result.stdout


def test_a_missing_runtime_exits_2_naming_it() -> None:
    result = _run(str(TWINS / "pytorch-ddp.yaml"))
    assert result.exit_code == 2
    assert "spec.runtimeRef.name: ClusterTrainingRuntime pytorch not found" in result.stderr


def test_runtimes_flag_takes_runtimes_only() -> None:
    result = _run(str(TWINS / "pytorch-ddp.yaml"), "--runtimes", str(EXAMPLES / "pytorch-ddp.yaml"))
    assert result.exit_code == 2
    assert (
        "expected trainop.dev/v1alpha1 ClusterTrainingRuntime or TrainingRuntime" in result.stderr
    )

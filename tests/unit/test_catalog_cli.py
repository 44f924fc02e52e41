"""`trainop catalog` through click's CliRunner: filters, the NODES column, and flag errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from tests.unit.manifest_helpers import FLEET_NODES
from trainop.catalog import catalog_table, load_catalog
from trainop.cli.main import cli


def run(*args: str) -> Result:
    result = CliRunner().invoke(cli, ["catalog", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def test_prints_the_catalog_table() -> None:
    result = run()
    assert result.exit_code == 0
    assert result.stdout == catalog_table(load_catalog()) + "\n"


def test_framework_and_cuda_filters() -> None:
    result = run("--framework", "jax", "--cuda", "12.4")
    assert result.exit_code == 0
    rows = result.stdout.splitlines()[1:]
    assert rows and all(r.split()[0] == "jax" for r in rows if not r.startswith("*"))


def test_nodes_column_from_a_nodes_file() -> None:
    result = run("--framework", "pytorch", "--nodes", str(FLEET_NODES))
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split()[-1] == "NODES"
    newest = lines[1]
    assert newest.endswith("NVIDIA-H100-80GB-HBM3 x16"), "only the H100s run CUDA 13 images"
    assert any("Tesla-V100-SXM2-32GB x4" in line for line in lines), "old images run on V100"


def test_unknown_framework_lists_the_frameworks() -> None:
    result = run("--framework", "torch")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --framework: unknown framework 'torch'")
    for fw in ("pytorch", "tensorflow", "jax", "paddle", "mxnet", "mpi"):
        assert fw in result.stderr


def test_bad_cuda() -> None:
    result = run("--cuda", "twelve")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --cuda: ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--cuda", "99.0"],
            "error: --cuda 99.0: no image in the catalog has CUDA 99.0 or newer; the newest has CUDA ",
            id="any-framework",
        ),
        pytest.param(
            ["--framework", "jax", "--cuda", "13.5"],
            "error: --cuda 13.5: no jax image in the catalog has CUDA 13.5 or newer; the newest has CUDA 12.",
            id="one-framework",
        ),
    ],
)
def test_filters_matching_nothing_exit_3_naming_the_newest(args: list[str], message: str) -> None:
    result = run(*args)
    assert result.exit_code == 3
    assert result.stdout == ""
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1, result.stderr
    assert "(NGC " in result.stderr


def test_cuda_filter_at_the_newest_release_still_matches() -> None:
    newest = max(load_catalog().releases, key=lambda r: r.cuda)
    result = run("--cuda", ".".join(str(x) for x in newest.cuda[:2]))
    assert result.exit_code == 0 and newest.name in result.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [("kind: Pod\nmetadata: {name: p}\n", "expected Node"), ("a: [\n", "not valid YAML")],
)
def test_bad_nodes_file(tmp_path: Path, content: str, message: str) -> None:
    p = tmp_path / "nodes.yaml"
    p.write_text(content)
    result = run("--nodes", str(p))
    assert result.exit_code == 2 and message in result.stderr


def test_config_overrides_apply(tmp_path: Path) -> None:
    p = tmp_path / "config.yaml"
    p.write_text("catalogOverrides: {images: {jax: {repository: mirror.local/jax}}}\n")
    result = run("--framework", "jax", "--config", str(p))
    assert result.exit_code == 0
    assert "mirror.local/jax:" in result.stdout


def test_check_lists_unconfirmed_facts_and_fails() -> None:
    result = run("--check")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert any(line.startswith("NGC 24.01: cuda 12.3.2") for line in lines)
    assert not any(line.startswith("NGC 25.01:") and "fc_branches" in line for line in lines)
    assert lines[-1].endswith("set them through catalogOverrides")


def test_check_passes_when_everything_is_confirmed(tmp_path: Path) -> None:
    cat = load_catalog()
    over = {
        "releases": {r.name: {"unconfirmed": []} for r in cat.releases if r.unconfirmed},
        "gpus": {g.label: {"unconfirmed": []} for g in cat.gpus if g.unconfirmed},
        "images": {i.framework: {"unconfirmed": []} for i in cat.images if i.unconfirmed},
    }
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"catalogOverrides": over}))
    result = run("--check", "--config", str(config))
    assert result.exit_code == 0
    assert result.stdout.strip() == "every catalog fact is confirmed"


def test_nodes_adds_a_node_class_table() -> None:
    result = run("--framework", "pytorch", "--nodes", str(FLEET_NODES))
    assert result.exit_code == 0
    table = result.stdout.split("\n\n", 1)[1].splitlines()
    assert table[0].split()[:3] == ["NODE", "CLASS", "NODES"]
    assert "NATIVE" in table[0] and "MINOR-VERSION ONLY" in table[0]
    assert any(line.startswith("NVIDIA-H100-80GB-HBM3") for line in table[1:])

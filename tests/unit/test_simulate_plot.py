"""`trainop simulate --plot`: the timeline PNG (cli.timeline), its lanes and its errors."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from trainop.cli.main import cli
from trainop.cli.timeline import Bar, PlotError, lanes, layout, rack_of, utilisation
from trainop.queueing.simulate import JobResult, Run, SimResult

ROOT = Path(__file__).resolve().parents[2]
FLEET_NODES = ROOT / "examples" / "fleet-nodes.yaml"
SIM = ROOT / "examples" / "sim"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def simulate(*extra: str) -> Any:
    args = ["--nodes", str(FLEET_NODES), "--queues", str(SIM / "queues.yaml")]
    return CliRunner().invoke(cli, ["simulate", *args, "--jobs", str(SIM / "jobs.yaml"), *extra])


@pytest.mark.parametrize("by", ["rack", "queue"])
def test_plot_writes_a_png(tmp_path: Path, by: str) -> None:
    out = tmp_path / "timeline.png"
    res = simulate("--plot", str(out), "--plot-by", by)
    assert res.exit_code == 0, res.output
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000
    assert "team-nlp/gpt-pretrain" in res.output  # the table is still printed


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(["--plot", "{tmp}/timeline.svg"], "is not a .png file name", id="not-png"),
        pytest.param(["--plot", "{tmp}/missing/t.png"], "does not exist; create it", id="no-dir"),
        pytest.param(
            ["--plot", "{tmp}/t.png", "--plot-by", "node"], "'node' is not one of", id="bad-by"
        ),
    ],
)
def test_plot_bad_values_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    res = simulate(*(a.format(tmp=tmp_path) for a in args))
    assert res.exit_code == 2
    assert says in res.output
    assert "Traceback" not in res.output
    assert not list(tmp_path.glob("**/*.png"))


def test_plot_without_matplotlib_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    res = simulate("--plot", str(tmp_path / "t.png"))
    assert res.exit_code == 2
    assert "matplotlib is not installed" in res.output


def _node(name: str, rack: str) -> dict[str, Any]:
    labels = {"trainop.dev/block": "b0", "trainop.dev/rack": rack}
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }


def _job(key: str, *runs: Run, queue: str = "q") -> JobResult:
    last = runs[-1]
    return JobResult(
        key,
        queue,
        16,
        0,
        0.0,
        100.0,
        "Finished",
        last.admitted,
        last.started,
        last.ended,
        last.nodes,
        0,
        runs,
        (),
    )


def test_lanes_split_a_spread_run_and_utilisation_steps() -> None:
    racks = rack_of(
        [_node("n1", "r1"), _node("n2", "r2")],
        ["trainop.dev/block", "trainop.dev/rack", "kubernetes.io/hostname"],
    )
    spread = Run(0.0, 0.0, 50.0, ("n1", "n2"), None, "Migration", (("n1", 8), ("n2", 8)))
    whole = Run(50.0, 60.0, 100.0, ("n1",), None, None, (("n1", 16),))
    result = SimResult((_job("ns/a", spread, whole),), (), (), 100.0)
    got = [(b.lane, b.start, b.end, b.ended_by) for b in lanes(result, "rack", racks)]
    assert got == [
        ("b0/r1", 0.0, 50.0, "Migration"),
        ("b0/r2", 0.0, 50.0, "Migration"),
        ("b0/r1", 60.0, 100.0, None),
    ]
    assert [b.lane for b in lanes(result, "queue", racks)] == ["q", "q"]
    assert utilisation(result, 16) == [(0.0, 1.0), (50.0, 1.0), (100.0, 0.0)]
    with pytest.raises(PlotError, match="--plot-by: must be one of rack, queue"):
        lanes(result, "node", racks)


@pytest.mark.parametrize(
    ("spans", "rows"),
    [
        pytest.param([("r1", 0, 10), ("r1", 10, 20)], [0.0, 0.0], id="one-after-another-one-row"),
        pytest.param([("r1", 0, 10), ("r1", 5, 20)], [0.0, 1.0], id="overlap-second-row"),
        pytest.param(
            [("r1", 0, 10), ("r1", 5, 20), ("r1", 12, 30)], [0.0, 1.0, 0.0], id="first-free-row"
        ),
        pytest.param([("r2", 0, 10), ("r1", 0, 10)], [1.5, 0.0], id="lanes-in-name-order"),
    ],
)
def test_layout_stacks_overlapping_runs(
    spans: list[tuple[str, int, int]], rows: list[float]
) -> None:
    bars = [Bar(lane, f"ns/j{i}", start, end, 8) for i, (lane, start, end) in enumerate(spans)]
    got, ticks = layout(bars)
    assert got == rows
    assert [name for _, name in ticks] == sorted({lane for lane, _, _ in spans})

"""Smoke test of `make bench-placement` at tiny sizes: it runs end to end and writes every
figure for every policy (no timing or quality assertions: those are benchmark numbers)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.placement.__main__ import main
from bench.placement.report import POLICIES

METRICS = (
    "allreduce_ms_mean",
    "allreduce_ratio_mean",
    "one_rack_share",
    "gpu_utilisation",
    "fragmentation",
    "wait_s_mean",
    "wait_s_p95",
    "makespan_s",
)


def test_smoke_run_writes_results(tmp_path: Path) -> None:
    lines: list[str] = []
    assert main(["--smoke", "--out", str(tmp_path)], log=lines.append) == 0
    report = json.loads((tmp_path / "placement.json").read_text())
    assert set(report["workloads"]) == {
        "a-synthetic@90%",
        "b-openb-fill",
        "c-spot@90%",
        "d-nvl72@90%",
    }
    for label, row in report["workloads"].items():
        for policy in POLICIES:
            assert set(METRICS) <= set(row[policy]), (label, policy)
    synthetic = report["workloads"]["a-synthetic@90%"]
    assert synthetic["lower-bound"]["allreduce_ratio_mean"] == 1.0
    assert synthetic["trainop"]["multi_node_jobs"] == synthetic["spread"]["multi_node_jobs"] > 0
    summary = (tmp_path / "placement.md").read_text()
    assert "| a-synthetic@90% | trainop |" in summary and "## Targets" in summary


def test_migration_runs_write_the_table(tmp_path: Path) -> None:
    """`--migration-only` (issue 37): with and without migration (and consolidation) at 90% and
    120% load, on the synthetic and spot workloads; the timeline PNG."""
    lines: list[str] = []
    assert main(["--smoke", "--migration-only", "--out", str(tmp_path)], log=lines.append) == 0
    report = json.loads((tmp_path / "placement-migration.json").read_text())
    assert set(report["workloads"]) == {"synthetic", "spot"}
    for loads in report["workloads"].values():
        assert set(loads) == {"90%", "120%"}
        for row in loads.values():
            assert row["without"]["moves"] == 0
            for m in row.values():
                assert {
                    "allreduce_ratio_time",
                    "moves_per_hour",
                    "realised_gain_s",
                    "share_decisions_gain_2x_cost",
                } <= set(m)
    table = (tmp_path / "placement-migration.md").read_text()
    assert (
        "| synthetic | 90% | with |" in table
        and "| spot | 120% | consolidate, 4 at once |" in table
    )
    assert (tmp_path / "placement-migration-timeline.png").stat().st_size > 10_000


def test_fairness_runs_write_the_table_and_plot(tmp_path: Path) -> None:
    """`--fairness-only` (issue 37): three teams with and without a usage half-life."""
    lines: list[str] = []
    assert main(["--smoke", "--fairness-only", "--out", str(tmp_path)], log=lines.append) == 0
    report = json.loads((tmp_path / "fairness.json").read_text())
    for name in ("without", "with"):
        shares = report["runs"][name]["contested"]
        assert set(shares) == {"a", "b", "c"} and abs(sum(shares.values()) - 1) < 0.01
    assert (tmp_path / "fairness.png").stat().st_size > 0
    assert "| a without |" in (tmp_path / "fairness.md").read_text()

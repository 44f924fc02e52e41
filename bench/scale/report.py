"""bench/results/scale.{json,md,png} and controlplane.{md,json} from the scenarios' results."""

from __future__ import annotations

import json
import os
from typing import Any

from bench.scale import common, controlplane, gang_modes
from bench.scale.burst import _burst_lines
from bench.scale.common import SEED
from bench.scale.deep import _deep_lines
from bench.scale.trace import trace_lines

KUBEFLOW_NOTE = (
    "The burst runs a second baseline: Kubeflow's training-operator v1.8.1, built from the "
    "Go module proxy (bench/kubeflow_baseline.py) and run as a plain process with its upstream "
    "defaults (one controller thread, client QPS 20), the same gangs as PyTorchJobs (a "
    "Master plus Workers) placed by kube-scheduler with no gang scheduler. Outside a pod "
    "its webhook certificates are copied from their Secret into the directory the "
    "kubelet would mount; no webhook configuration is registered, so PyTorchJobs skip "
    "admission validation. Trainer v2 (github.com/kubeflow/trainer/v2 v2.0.0) needs its "
    "JobSet controller as well and was not tried."
)


def write_report(results: dict[str, Any]) -> None:
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    (common.RESULTS / "scale.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = ["# make bench-scale", "", f"Machine: {os.cpu_count()} cores. Seed {SEED}.", ""]
    for key in ("burst", "burst_2000", "burst_5000"):
        if results.get(key):
            lines += _burst_lines(results[key])
    lines += trace_lines(results.get("trace"))
    d = results.get("deep")
    if d:
        lines += _deep_lines(d)
    lines += gang_modes.report_lines(results.get("gang_modes"))
    lines += [
        "## Kubeflow baseline",
        "",
        KUBEFLOW_NOTE,
        "",
    ]
    (common.RESULTS / "scale.md").write_text("\n".join(lines))
    _plot(results)
    write_costs(results)


def write_costs(results: dict[str, Any]) -> None:
    """bench/results/controlplane.{md,json}: where each burst's control-plane time went."""
    sections = {}
    for key in ("burst", "burst_2000", "burst_5000"):
        b = results.get(key) or {}
        bare = (b.get("baseline") or {}).get("detail", {}).get("cost")
        ours = (b.get("trainop") or {}).get("detail", {}).get("cost")
        if bare and ours:
            title = f"Burst: {b['jobs']} jobs ({b['pods']} pods) on {b['nodes']} nodes"
            sections[title] = {"jobs": b["jobs"], "bare": bare, "trainop": ours}
    if sections:
        controlplane.write(common.RESULTS / "controlplane.md", sections)


def _plot(results: dict[str, Any]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    b = results.get("burst")
    if not b:
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    keys = ["p50_seconds", "p99_seconds", "total_seconds"]
    x = range(len(keys))
    ax.bar([i - 0.2 for i in x], [b["trainop"][k] for k in keys], 0.4, label="trainop")
    ax.bar([i + 0.2 for i in x], [b["baseline"][k] for k in keys], 0.4, label="bare pods")
    ax.set_xticks(list(x), ["p50", "p99", "all Running"])
    ax.set_ylabel("seconds from creation")
    ax.set_title(f"Burst: {b['jobs']} jobs on {b['nodes']} nodes")
    ax.legend()
    fig.tight_layout()
    fig.savefig(common.RESULTS / "scale.png", dpi=110)

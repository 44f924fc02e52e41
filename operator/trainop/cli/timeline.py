"""`trainop simulate --plot OUT.png`: the simulated timeline as a picture (issue 37).

Neighbours: `cli.simulate` runs `trainop.queueing.simulate` and calls `draw` with its
SimResult and the Node objects it read. The figure has two panels: a Gantt chart with one
lane per rack (the finest topology level above the node, from the operator config's
topologyLevels) or per queue, each run of each job a bar (a gang across two racks has a bar
in each; a moved or preempted job has one bar per run), and the share of the fleet's GPUs
held over time. `lanes` and `utilisation` are pure (the unit tests read them); `draw` alone
needs matplotlib, imported when called, so the rest of trainop runs without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainop.api import constants as c
from trainop.queueing.simulate import SimResult

BY = ("rack", "queue")
NO_RACK = "(no rack label)"


class PlotError(ValueError):
    """The plot cannot be drawn; the message names the option and the fix."""


@dataclass(frozen=True)
class Bar:
    lane: str
    job: str
    start: float
    end: float
    gpus: int
    ended_by: str | None = None  # Migration, Priority, Reclaim ... (None: ran to its end)


def rack_of(nodes: Sequence[Mapping[str, Any]], levels: Sequence[str]) -> dict[str, str]:
    """Node name -> its rack: the values of the topology levels above the node, joined."""
    above = [lv for lv in levels if lv != c.LABEL_HOSTNAME]
    out: dict[str, str] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        path = [str(labels[lv]) for lv in above if lv in labels]
        out[str(meta.get("name", ""))] = "/".join(path) or NO_RACK
    return out


def lanes(result: SimResult, by: str, racks: Mapping[str, str]) -> list[Bar]:
    """One bar per run and lane (rack or queue), in time order."""
    if by not in BY:
        raise PlotError(f"--plot-by: must be one of {', '.join(BY)}, got {by!r}")
    bars: list[Bar] = []
    for job in result.jobs:
        for run in job.runs:
            end = run.ended if run.ended is not None else result.end
            if by == "queue":
                names = [job.queue or "-"]
            else:
                names = sorted({racks.get(n, NO_RACK) for n in run.nodes}) or [NO_RACK]
            for lane in names:
                bars.append(Bar(lane, job.key, run.started, end, job.gpus, run.preempt_reason))
    return sorted(bars, key=lambda b: (b.start, b.lane, b.job))


def layout(bars: Sequence[Bar]) -> tuple[list[float], list[tuple[float, str]]]:
    """Each bar's row (bars that overlap in time within a lane go on rows of their own, the
    first row free at the bar's start), and each lane's label at the middle of its rows:
    lanes in name order, top to bottom."""
    ends: dict[str, list[float]] = {}  # lane -> each row's last end
    slot: list[int] = []
    for b in bars:
        rows = ends.setdefault(b.lane, [])
        free = next((i for i, end in enumerate(rows) if end <= b.start), None)
        if free is None:
            rows.append(b.end)
            free = len(rows) - 1
        rows[free] = b.end
        slot.append(free)
    offset: dict[str, float] = {}
    ticks: list[tuple[float, str]] = []
    top = 0.0
    for lane in sorted(ends):
        offset[lane] = top
        ticks.append((top + (len(ends[lane]) - 1) / 2, lane))
        top += len(ends[lane]) + 0.5  # a gap between lanes
    return [offset[b.lane] + s for b, s in zip(bars, slot, strict=True)], ticks


def utilisation(result: SimResult, total_gpus: int) -> list[tuple[float, float]]:
    """(time, share of the fleet's GPUs held) at each change, a step function: a run holds
    its GPUs from admission to its end (a move's restart included)."""
    if total_gpus <= 0:
        return []
    changes: dict[float, int] = {}
    for job in result.jobs:
        for run in job.runs:
            held = sum(g for _, g in run.gpus_by_node) or job.gpus
            end = run.ended if run.ended is not None else result.end
            changes[run.admitted] = changes.get(run.admitted, 0) + held
            changes[end] = changes.get(end, 0) - held
    out, level = [], 0
    for t in sorted(changes):
        level += changes[t]
        out.append((t, level / total_gpus))
    return out


def total_gpus(nodes: Sequence[Mapping[str, Any]]) -> int:
    out = 0
    for node in nodes:
        raw = ((node.get("status") or {}).get("allocatable") or {}).get(c.RESOURCE_GPU, 0)
        try:
            out += int(str(raw))
        except ValueError:
            continue
    return out


def check_path(path: str) -> Path:
    """The PNG to write: a .png name in a folder that exists."""
    out = Path(path)
    if out.suffix.lower() != ".png":
        raise PlotError(f"--plot: {path!r} is not a .png file name (e.g. --plot timeline.png)")
    if not out.parent.is_dir():
        raise PlotError(f"--plot: folder {str(out.parent)!r} does not exist; create it first")
    return out


def draw(
    result: SimResult,
    nodes: Sequence[Mapping[str, Any]],
    path: str,
    by: str = "rack",
    levels: Sequence[str] = c.DEFAULT_TOPOLOGY_LEVELS,
) -> Path:
    """Write the Gantt chart (lanes by `by`) and utilisation over time to `path` (PNG)."""
    out = check_path(path)
    bars = lanes(result, by, rack_of(nodes, levels))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotError(
            "--plot: matplotlib is not installed; install it (pip install matplotlib, or "
            "trainop's dev extra) or leave --plot out"
        ) from None
    rows, ticks = layout(bars)
    jobs = sorted({b.job for b in bars})
    palette = plt.get_cmap("tab20")
    colour = {job: palette(i % 20) for i, job in enumerate(jobs)}
    height = min(30.0, 3 + 0.12 * (ticks[-1][0] if ticks else 0))
    fig, (gantt, util) = plt.subplots(2, 1, figsize=(12, height), sharex=True, height_ratios=(4, 1))
    for b, y in zip(bars, rows, strict=True):
        hatch = "//" if b.ended_by else None
        gantt.barh(
            y,
            (b.end - b.start) / 3600,
            left=b.start / 3600,
            height=0.8,
            color=colour[b.job],
            edgecolor="black",
            linewidth=0.3,
            hatch=hatch,
        )
    gantt.set_yticks([t for t, _ in ticks], [name for _, name in ticks], fontsize=7)
    gantt.invert_yaxis()
    gantt.set_ylabel(by)
    gantt.set_title(f"trainop simulate: runs per {by} (hatched: ended early, e.g. moved)")
    steps = utilisation(result, total_gpus(nodes))
    if steps:
        util.step([t / 3600 for t, _ in steps], [u for _, u in steps], where="post")
    util.set_ylim(0, 1.05)
    util.set_ylabel("GPUs held")
    util.set_xlabel("hours")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out

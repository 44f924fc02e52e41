"""Fair share over time (issue 37): three teams with shares 2:1:1 and bursty demand, with and
without a usage half-life.

Both runs are `trainop.queueing.simulate` with trainop's placer on 8 DGX H100 (64 GPUs). The
teams are TrainingQueues that may each use the whole fleet (quota 64, no cohort) with
weights 2:1:1 (a, b, c), so whose head goes next is the weighted fair-share order alone. Demand comes from Alibaba's openb trace
(bench/data, CC BY 4.0): each pod keeps its GPU count (1-8) and its lifetime clipped to
[10 min, 4 h]; each team submits one every 90 s (0.9x the fleet for two teams, 1.3x for three), so every
active team's line stays full. Teams a and b submit from hour 0, team c only from hour 12 (a
burst after a quiet half day), all until hour 36. With the half-life
(spec.fairSharing.usageHalfLifeSeconds = HALF_LIFE) the queues are ordered by their decayed
usage: a and b, which used c's idle share before hour 12, yield to c after it.

Measured: each team's share of the GPU-hours held in sliding 24-hour windows (every 6 h), and
over hours 12-36 (while all three compete). Writes OUT/fairness.{json,md,png}.
"""

from __future__ import annotations

import csv
import gzip
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench.placement import fleets
from bench.placement.policies import factory, place

from trainop.queueing import SimResult, simulate

DATA = Path(__file__).resolve().parents[1] / "data" / "openb_gpu_pods.csv.gz"
HOUR = 3600.0
HALF_LIFE = 6 * 3600
# quota, weight: shares 2:1:1 by weight. Each team may use the whole fleet (no cohort, so
# no borrowing and no reclaim): who goes next is the fair-share order alone, as among the
# LocalQueues of one Kueue ClusterQueue under admission fair sharing. (With nominal quotas
# and a cohort, reclaim and "within nominal first" decide most of the order instead.)
TEAMS = {"a": (64, 2.0), "b": (64, 1.0), "c": (64, 1.0)}
# team -> (first hour, last hour, seconds between its submissions)
DEMAND = {"a": (0, 36, 90.0), "b": (0, 36, 90.0), "c": (12, 36, 90.0)}
QUIET = 12  # hours before team c submits
END = 36
WINDOW = 24 * HOUR
STEP = 6 * HOUR
H100 = "NVIDIA-H100-80GB-HBM3"


def _trace() -> list[tuple[int, float]]:
    with gzip.open(DATA, "rt") as f:
        return [
            (int(r["gpus"]), min(max(float(r["duration_seconds"]), 600.0), 4 * HOUR))
            for r in csv.DictReader(f)
        ]


def queues(half_life: int | None) -> list[dict[str, Any]]:
    out = []
    for name, (gpus, weight) in TEAMS.items():
        spec: dict[str, Any] = {
            "namespaces": [f"team-{name}"],
            "default": True,
            "weight": weight,
            # No backfill holds: a head that waited past the threshold would hold its
            # cohort's GPUs, and the longest waiter, not the fair-share order, would go next.
            "backfillWaitSeconds": 10**8,
            "quotas": [{"name": "h100", "gpus": gpus, "products": [H100]}],
        }
        if half_life:
            spec["fairSharing"] = {"usageHalfLifeSeconds": half_life}
        out.append(
            {
                "apiVersion": "trainop.dev/v1alpha1",
                "kind": "TrainingQueue",
                "metadata": {"name": name},
                "spec": spec,
            }
        )
    return out


def jobs(scale: float = 1.0) -> list[dict[str, Any]]:
    """Each team's submissions in its hours, trace pods dealt round-robin to the teams."""
    trace = _trace()
    out = []
    for k, (team, (first, last, every)) in enumerate(DEMAND.items()):
        t = first * HOUR * scale
        n = 0
        while t < last * HOUR * scale:
            # Team k takes trace pods k, k+3, k+6, ...: the same mix of sizes for each team.
            i = (3 * n + k) % len(trace)
            n += 1
            gpus, life = trace[i]
            out.append(
                {
                    "apiVersion": "trainop.dev/v1alpha1",
                    "kind": "TrainingJob",
                    "metadata": {
                        "name": f"{team}{n:05d}",
                        "namespace": f"team-{team}",
                        "annotations": {
                            "trainop.dev/sim-submit-seconds": f"{t:.1f}",
                            "trainop.dev/sim-duration-seconds": f"{life:.1f}",
                        },
                    },
                    "spec": {
                        "framework": {"name": "pytorch"},
                        "replicaSpecs": {"Worker": {"replicas": 1, "gpus": gpus}},
                        "placement": {"topology": "node", "gpuProducts": [H100]},
                    },
                }
            )
            t += every
    return out


def shares(result: SimResult, start: float, end: float) -> dict[str, float]:
    """Each team's share of the GPU-seconds held in [start, end)."""
    held = dict.fromkeys(TEAMS, 0.0)
    for j in result.jobs:
        for r in j.runs:
            ended = r.ended if r.ended is not None else result.end
            inside = max(0.0, min(ended, end) - max(r.admitted, start))
            held[j.queue] += j.gpus * inside
    total = sum(held.values()) or 1.0
    return {team: round(v / total, 3) for team, v in held.items()}


def compare(smoke: bool, log: Callable[[str], None] = print) -> dict[str, Any]:
    fleet = fleets.h100_grid(1, 1, 8)
    scale = 0.1 if smoke else 1.0
    bodies = jobs(scale)
    horizon = END * HOUR * scale
    report: dict[str, Any] = {
        "meta": {
            "fleet": fleet.name,
            "jobs": len(bodies),
            "teams": {k: {"quota": q, "weight": w} for k, (q, w) in TEAMS.items()},
            "demand_hours": {k: [a, b] for k, (a, b, _) in DEMAND.items()},
            "half_life_s": HALF_LIFE,
        },
        "runs": {},
    }
    for name, half_life in (("without", None), ("with", HALF_LIFE)):
        t0 = time.perf_counter()
        result = simulate(list(fleet.nodes), queues(half_life), bodies, placer=factory(place))
        windows = []
        t = 0.0
        while t + WINDOW <= horizon or (smoke and t == 0.0):
            windows.append({"from_h": t / HOUR, **shares(result, t, t + WINDOW)})
            t += STEP
        contest = shares(result, QUIET * HOUR * scale, horizon)
        report["runs"][name] = {
            "windows": windows,
            "contested": contest,
            "wall_s": round(time.perf_counter() - t0, 1),
        }
        log(f"fairness {name:8} hours {QUIET}-{END} {contest}")
    return report


def table(report: Mapping[str, Any]) -> str:
    meta = report["meta"]
    lines = [
        "# Fair share over time: teams a:b:c = 2:1:1, bursty demand (openb pods)",
        "",
        f"{meta['jobs']} pods on {meta['fleet']}; quotas/weights {meta['teams']}; demand hours "
        f"{meta['demand_hours']}; half-life {meta['half_life_s'] / 3600:.0f} h. Shares of the "
        f"GPU-hours held, per sliding day (every 6 h) and over hours {QUIET}-{END} (all three "
        "compete; weights 0.5 / 0.25 / 0.25). See bench/placement/fairness.py.",
        "",
        "| day from hour | a without | b without | c without | a with | b with | c with |",
        "|---|---|---|---|---|---|---|",
    ]
    without, with_ = report["runs"]["without"], report["runs"]["with"]
    for w0, w1 in zip(without["windows"], with_["windows"], strict=True):
        lines.append(
            f"| {w0['from_h']:.0f} | {w0['a']} | {w0['b']} | {w0['c']} "
            f"| {w1['a']} | {w1['b']} | {w1['c']} |"
        )
    c0, c1 = without["contested"], with_["contested"]
    lines.append(
        f"| **{QUIET}-{END}** | {c0['a']} | {c0['b']} | {c0['c']} "
        f"| {c1['a']} | {c1['b']} | {c1['c']} |"
    )
    return "\n".join(lines) + "\n"


def plot(report: Mapping[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, name in zip(axes, ("without", "with"), strict=True):
        windows = report["runs"][name]["windows"]
        xs = [w["from_h"] for w in windows]
        for team, target in (("a", 0.5), ("b", 0.25), ("c", 0.25)):
            line = ax.plot(xs, [w[team] for w in windows], marker="o", label=f"team {team}")
            ax.axhline(target, color=line[0].get_color(), linestyle=":", linewidth=1)
        ax.set_title(f"{name} half-life")
        ax.set_xlabel("sliding day from hour")
    axes[0].set_ylabel("share of GPU-hours")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out / "fairness.png", dpi=110)
    plt.close(fig)


def write(report: Mapping[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "fairness.json").write_text(json.dumps(report, indent=2))
    (out / "fairness.md").write_text(table(report))
    plot(report, out)

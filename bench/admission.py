"""`make bench-admission`: the operator's admission cycle alone, with no API server.

It drives the operator's own `AdmissionLoop.cycle` over a `ShellState` fed the way the watch
feeds it (nodes, TrainingJobs, then the pods of each admitted gang), on synthetic DGX H100
fleets (racks of 25, 8 racks a block) of 1,000 to 10,000 nodes, and reports for each size:

  burst   G gangs of 4 pods x 8 GPUs, `placement: {topology: rack, mode: Preferred}`, all
          pending at once on an empty fleet; cycles run until every gang is admitted (the
          pods of a cycle's admissions are shown to the state before the next cycle, as the
          watch would). Decision time per cycle (p50/p99), gangs and pods decided per second.
          The 750 x 4 shape at 5,000 nodes is the one kube-scheduler's own topology-aware
          gang scheduling was measured on (562-630 pods/s, kubernetes/kubernetes#139859).
  deep    the fleet filled by running gangs, then P mixed gangs pending behind it: the cost
          of a cycle when nothing changed, and when one pod ended (its node's GPUs freed).
  tree    queue trees (issue 25): org > 10 divisions > 10 teams each (100 leaf queues, every
          team's quota carved out of its division's, its division's out of org's; the
          fleet's GPUs are org's quota), 1.5 G gangs of 4 x 8 GPUs spread over the teams,
          a third of the teams sending twice as many so they borrow up the tree: the first
          cycle admits what fits, later ones (idle: nothing changed) decide the third that
          waits on quota. The same jobs in 100 flat queues of one cohort: the baseline.
  rss     the process's peak resident set after each size.

Times are CPU seconds of the bench process (time.process_time), so other work on the
machine does not inflate them.

Writes bench/results/admission.{json,md,png}. Numbers, never assertions: see README.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.scale import RESULTS, Gang, fleet_file, mixed_gangs

from trainop.cluster.fleet import load_fleet, node_manifests
from trainop.handlers.scheduler import AdmissionLoop
from trainop.handlers.state import ShellState
from trainop.planner import OperatorConfig, Plan

NS = "bench"
SAMPLES = 15  # cycles measured per deep case, idle and with one pod changed


def job_body(
    g: Gang, topology: str = "rack", ns: str = NS, queue: str | None = None
) -> dict[str, Any]:
    body = _job_body(g, topology, ns)
    if queue:
        body["spec"]["queue"] = queue
    return body


def _job_body(g: Gang, topology: str, ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainop.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {
            "name": g.name,
            "namespace": ns,
            "uid": str(uuid.uuid4()),
            "generation": 1,
            "resourceVersion": "1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "framework": {"name": "pytorch", "version": "2.4"},
            "cuda": "12.4",
            "replicaSpecs": {"Worker": {"replicas": g.replicas, "gpus": g.gpus}},
            "placement": {"topology": topology, "mode": "Preferred"},
        },
    }


def pod_body(job: dict[str, Any], name: str, node: str, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": job["metadata"]["namespace"],
            "uid": str(uuid.uuid4()),
            "labels": {"trainop.dev/job-name": job["metadata"]["name"]},
            "ownerReferences": [{"uid": job["metadata"]["uid"], "kind": "TrainingJob"}],
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }


class Bench:
    """One state, one loop, the operator's cycle; admitted gangs' pods appear at once."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.state = ShellState()
        self.state.load("nodes", nodes)
        self.config = OperatorConfig()
        self.admitted: list[str] = []

        async def nothing(*_: Any) -> None:
            return None

        self.loop = AdmissionLoop(self.state, lambda: self.config, nothing, nothing, nothing)
        # One event loop for every cycle, as in the operator (asyncio.run would make a new
        # loop and a new worker thread per cycle, and count their start-up as the cycle's).
        self.events = asyncio.new_event_loop()
        self.state.mark_synced()

    def add_jobs(self, bodies: list[dict[str, Any]]) -> None:
        self.state.load("trainingjobs", bodies)

    def cycle(self) -> tuple[float, int, int]:
        """One cycle; returns (seconds, gangs admitted, pods admitted)."""
        # CPU seconds of this process (the cycle's worker thread included): the same as
        # wall time on an idle machine, and unmoved by other work sharing the cores.
        start = time.process_time()
        self.events.run_until_complete(self.loop.cycle())
        took = time.process_time() - start
        gangs = pods = 0
        for key, mem in list(self.state.jobs.items()):
            verdict = mem.verdict
            plan = verdict.admission.plan if verdict is not None else None
            if verdict is None or not verdict.admission.admitted or not isinstance(plan, Plan):
                continue
            job = mem.body
            assert job is not None
            mem.undecided()
            self.state.load(
                "pods",
                [pod_body(job, p, n, g) for p, (n, g) in plan.pinned().items()],
            )
            self._mark_running(key)
            gangs += 1
            pods += len(plan.pinned())
        return took, gangs, pods

    def _mark_running(self, key: str) -> None:
        body = dict(self.state.jobs[key].body or {})
        meta = dict(body["metadata"])
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        body["metadata"] = meta
        body["status"] = {"phase": "Running", "startTime": "2026-01-01T00:00:01Z"}
        self.state.upsert_job(body)


def fleet(nodes: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        return node_manifests(load_fleet(fleet_file(nodes, 25, Path(tmp) / "f.yaml")))


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def burst(nodes: int, gangs: int) -> dict[str, Any]:
    bench = Bench(fleet(nodes))
    bench.add_jobs([job_body(Gang(f"b{i:05d}", 4, 8)) for i in range(gangs)])
    times: list[float] = []
    total_gangs = total_pods = 0
    for _ in range(50):
        took, g, p = bench.cycle()
        times.append(took)
        total_gangs += g
        total_pods += p
        if g == 0:
            break
    spent = sum(times)
    return {
        "nodes": nodes,
        "gangs": gangs,
        "admitted_gangs": total_gangs,
        "admitted_pods": total_pods,
        "cycles": len(times),
        "cycle_p50_s": round(pct(times, 0.5), 4),
        "cycle_p99_s": round(pct(times, 0.99), 4),
        "decide_seconds": round(spent, 3),
        "gangs_per_s": round(total_gangs / spent, 1) if spent else 0.0,
        "pods_per_s": round(total_pods / spent, 1) if spent else 0.0,
    }


def deep(nodes: int, pending: int) -> dict[str, Any]:
    bench = Bench(fleet(nodes))
    fill = [job_body(Gang(f"f{i:05d}", 25, 8)) for i in range(nodes // 25)]
    bench.add_jobs(fill)
    while bench.cycle()[1]:
        pass
    bench.add_jobs([job_body(g) for g in mixed_gangs(pending, 5, 8)])
    first, _, _ = bench.cycle()
    # 15 samples each (5 until issue 33's last cuts: a cycle of 2 ms that a collection of
    # Python's garbage collector falls in reads 3 ms, and with 5 samples one or two did).
    idle = [bench.cycle()[0] for _ in range(SAMPLES)]
    one_pod: list[float] = []
    for i in range(SAMPLES):
        key = next(iter(sorted(bench.state.pods)))
        pod = bench.state.pods[key]
        bench.state.remove_pod(*key)
        one_pod.append(bench.cycle()[0])
        bench.state.load("pods", [pod])  # back, so the next round frees another one
        del i
    return {
        "nodes": nodes,
        "pending": pending,
        "first_cycle_s": round(first, 4),
        "idle_cycle_p50_s": round(statistics.median(idle), 4),
        "one_pod_change_p50_s": round(statistics.median(one_pod), 4),
        "one_pod_change_max_s": round(max(one_pod), 4),
    }


def tree_queues(gpus: int, nested: bool) -> list[dict[str, Any]]:
    """org > 10 divisions > 10 teams (nested), or the same 100 teams as flat queues of one
    cohort."""
    team_q, div_q = gpus * 8 // 1000, gpus // 10  # teams: 80% of their division's quota
    out = []
    if nested:
        out.append(_tq("org", gpus, None, ()))
        out += [_tq(f"div{d}", div_q, "org", ()) for d in range(10)]
    for d in range(10):
        for t in range(10):
            parent = f"div{d}" if nested else None
            out.append(_tq(f"team{d}-{t}", team_q, parent, (f"team{d}-{t}",)))
    if not nested:  # the flat baseline borrows across one cohort
        for q in out:
            q["spec"]["cohort"] = "all"
    return out


def _tq(name: str, gpus: int, parent: str | None, namespaces: tuple[str, ...]) -> dict[str, Any]:
    spec: dict[str, Any] = {"quotas": [{"name": "h100", "gpus": gpus}]}
    if parent:
        spec["parent"] = parent
    if namespaces:
        spec["namespaces"] = list(namespaces)
    return {"metadata": {"name": name, "resourceVersion": "1"}, "spec": spec}


def tree(nodes: int, gangs: int, nested: bool) -> dict[str, Any]:
    bench = Bench(fleet(nodes))
    bench.state.load("trainingqueues", tree_queues(nodes * 8, nested))
    bodies = []
    for i in range(gangs):
        team = i % 130  # teams 0-29 get a second share: they borrow
        d, t = divmod(team % 100, 10)
        name = f"team{d}-{t}"
        bodies.append(job_body(Gang(f"q{i:05d}", 4, 8), ns=name, queue=name))
    bench.add_jobs(bodies)
    times: list[float] = []
    total = 0
    for _ in range(50):
        took, g, _p = bench.cycle()
        times.append(took)
        total += g
        if g == 0:
            break
    idle = [bench.cycle()[0] for _ in range(5)]  # the rest wait on quota; nothing changes
    return {
        "nodes": nodes,
        "gangs": gangs,
        "queues": "org > 10 > 100" if nested else "100 flat",
        "admitted_gangs": total,
        "cycles": len(times),
        "first_cycle_s": round(times[0], 4),
        "idle_cycle_p50_s": round(statistics.median(idle), 4),
        "decide_seconds": round(sum(times), 3),
    }


def rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def report(results: dict[str, Any]) -> str:
    base = results.get("baseline") or {}
    before = {b["nodes"]: b for b in base.get("burst", [])}
    lines = [
        "# bench-admission: the operator's admission cycle, no API server",
        "",
        f"Before: {base['label']}." if base else "",
        "",
        "| nodes | gangs (4 x 8 GPUs, rack) | cycles | cycle p50 / p99 (s) | gangs/s | pods/s "
        "| pods/s before |",
        "|---|---|---|---|---|---|---|",
    ]
    for b in results["burst"]:
        was = before.get(b["nodes"], {}).get("pods_per_s", "-")
        lines.append(
            f"| {b['nodes']:,} | {b['gangs']:,} | {b['cycles']} | {b['cycle_p50_s']} / "
            f"{b['cycle_p99_s']} | {b['gangs_per_s']} | {b['pods_per_s']} | {was} |"
        )
    lines += [
        "",
        "| nodes | pending | first cycle (s) | idle cycle (s) | one pod changed p50 / max (s) "
        "| before: idle / one pod p50 (s) |",
        "|---|---|---|---|---|---|",
    ]
    deep_before = {(d["nodes"], d["pending"]): d for d in base.get("deep", [])}
    for d in results["deep"]:
        was = deep_before.get((d["nodes"], d["pending"]))
        then = f"{was['idle_cycle_p50_s']} / {was['one_pod_change_p50_s']}" if was else "-"
        lines.append(
            f"| {d['nodes']:,} | {d['pending']:,} | {d['first_cycle_s']} | "
            f"{d['idle_cycle_p50_s']} | {d['one_pod_change_p50_s']} / {d['one_pod_change_max_s']} "
            f"| {then} |"
        )
    if results.get("tree"):
        lines += [
            "",
            "| nodes | queues | gangs (4 x 8) | admitted | first cycle (s) | idle cycle (s) |",
            "|---|---|---|---|---|---|",
        ]
        for t in results["tree"]:
            lines.append(
                f"| {t['nodes']:,} | {t['queues']} | {t['gangs']:,} | {t['admitted_gangs']:,} "
                f"| {t['first_cycle_s']} | {t['idle_cycle_p50_s']} |"
            )
    lines += ["", f"Peak RSS of the bench process: {results['rss_mb']} MB."]
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [b["nodes"] for b in results["burst"]]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(xs, [b["pods_per_s"] for b in results["burst"]], marker="o", label="trainop cycle")
    ax.axhline(562, color="grey", linestyle="--", label="kube-scheduler TAS gangs (562 pods/s)")
    ax.set_xlabel("nodes")
    ax.set_ylabel("pods decided per second")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="*", default=[1000, 2000, 5000, 10000])
    ap.add_argument("--gangs", type=int, default=750)
    ap.add_argument("--pending", type=int, nargs="*", default=[100, 1000, 10000])
    ap.add_argument("--deep-nodes", type=int, nargs="*", default=[1000, 5000])
    ap.add_argument("--tree-nodes", type=int, nargs="*", default=[1000, 5000])
    ap.add_argument("--out", default=str(RESULTS / "admission"))
    ap.add_argument(
        "--baseline",
        default=str(RESULTS / "admission-before-33.json"),
        help="an earlier run's results, shown beside these (skipped when absent)",
    )
    args = ap.parse_args(argv)
    results: dict[str, Any] = {"burst": [], "deep": [], "tree": []}
    if Path(args.baseline).exists():
        results["baseline"] = json.loads(Path(args.baseline).read_text())
    for n in args.tree_nodes:
        for nested in (True, False):
            fits = min(args.gangs, n * 8 // 32)
            results["tree"].append(tree(n, fits * 3 // 2, nested))  # a third wait on quota
            print(json.dumps(results["tree"][-1]), flush=True)
    for n in args.nodes:
        results["burst"].append(burst(n, min(args.gangs, n * 8 // 32)))
        print(json.dumps(results["burst"][-1]), flush=True)
    for n in args.deep_nodes:
        for p in args.pending:
            results["deep"].append(deep(n, p))
            print(json.dumps(results["deep"][-1]), flush=True)
    results["rss_mb"] = rss_mb()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    out.with_suffix(".md").write_text(report(results))
    plot(results, out.with_suffix(".png"))
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

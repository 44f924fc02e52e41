"""Where the control plane's time goes during a burst: the API server's own request
counters by resource and verb, etcd's writes, and each process's CPU, for `make bench-scale`.

A `CostMeter` scrapes the API server's `/metrics` (`apiserver_request_total`,
`apiserver_request_duration_seconds` and `apiserver_response_sizes` sums,
`apiserver_watch_events_total`/`_sizes`), etcd's `/metrics` (`etcd_mvcc_put_total`,
`etcd_mvcc_delete_total`, `etcd_mvcc_txn_total`, `etcd_mvcc_range_total`,
`etcd_debugging_mvcc_total_put_size_in_bytes`) and the CPU seconds of the cluster's
processes (from kwokctl's pid files) and of the operator, before and after a burst. It
first samples the idle cluster (KWOK's node heartbeats and leases go on during every
burst) and subtracts that rate over the burst's length, so what is left is the burst's
own work. `cost_lines` turns a bare-pod and a trainop measurement into the tables of
bench/results/controlplane.md. Used by `bench.scale.burst` (run_bare, run_operator); the
figures are numbers for the report, never assertions.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROCESSES = (
    "kube-apiserver",
    "etcd",
    "kube-scheduler",
    "kube-controller-manager",
    "kwok-controller",
    "operator",
)
ETCD = {
    "etcd_mvcc_put_total": "puts",
    "etcd_mvcc_delete_total": "deletes",
    "etcd_mvcc_txn_total": "txns",
    "etcd_mvcc_range_total": "ranges",
    "etcd_debugging_mvcc_total_put_size_in_bytes": "put bytes",
    "etcd_server_proposals_committed_total": "proposals committed",
}
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_REQ = {
    "apiserver_request_total": 0,
    "apiserver_request_duration_seconds_sum": 1,
    "apiserver_response_sizes_sum": 2,
}
_WATCH = {"apiserver_watch_events_total": 0, "apiserver_watch_events_sizes_sum": 1}
MUTATING = ("POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION")
BACKGROUND = ("leases", "nodes")  # KWOK's heartbeats and leases, always going


def _labels(line: str) -> dict[str, str]:
    return dict(_LABEL.findall(line.split("{", 1)[1].rsplit("}", 1)[0]))


def resource_of(labels: dict[str, str]) -> str:
    """`pods`, `pods/binding`, `trainingjobs.trainop.dev/status`: one row per resource."""
    name = labels.get("resource", "")
    if labels.get("group"):
        name += "." + labels["group"]
    sub = labels.get("subresource", "")
    return f"{name}/{sub}" if sub else name


def parse_apiserver(text: str) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """(`resource VERB` -> [requests, seconds, response bytes], resource -> [watch events,
    bytes]) from the API server's metrics text; requests for no resource are left out."""
    requests: dict[str, list[float]] = {}
    watch: dict[str, list[float]] = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0]
        if name in _REQ:
            labels = _labels(line)
            if not labels.get("resource"):
                continue
            key = f"{resource_of(labels)} {labels.get('verb', '')}"
            requests.setdefault(key, [0.0, 0.0, 0.0])[_REQ[name]] += float(line.rsplit(" ", 1)[1])
        elif name in _WATCH:
            key = resource_of(_labels(line))
            watch.setdefault(key, [0.0, 0.0])[_WATCH[name]] += float(line.rsplit(" ", 1)[1])
    return requests, watch


def parse_etcd(text: str) -> dict[str, float]:
    out = dict.fromkeys(ETCD.values(), 0.0)
    for line in text.splitlines():
        name = line.split(" ", 1)[0].split("{", 1)[0]
        if name in ETCD:
            out[ETCD[name]] += float(line.rsplit(" ", 1)[1])
    return out


@dataclass
class Scrape:
    at: float
    requests: dict[str, list[float]]
    watch: dict[str, list[float]]
    etcd: dict[str, float]
    cpu: dict[str, float]

    def minus(self, other: Scrape, scale: float = 1.0) -> Scrape:
        """self - scale * other, key by key (a key missing on one side counts 0)."""

        def sub(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for k in a.keys() | b.keys():
                x, y = a.get(k), b.get(k)
                if isinstance(x, list) or isinstance(y, list):
                    xs, ys = x or [0.0] * len(y or []), y or [0.0] * len(x or [])
                    out[k] = [p - scale * q for p, q in zip(xs, ys, strict=True)]
                else:
                    out[k] = (x or 0.0) - scale * (y or 0.0)
            return out

        return Scrape(
            self.at - scale * other.at,
            sub(self.requests, other.requests),
            sub(self.watch, other.watch),
            sub(self.etcd, other.etcd),
            sub(self.cpu, other.cpu),
        )


def cluster_dir(kubeconfig: str) -> Path:
    """The kwokctl folder of the cluster a LocalCluster kubeconfig (`<name>.kubeconfig`)
    belongs to."""
    path = Path(kubeconfig)
    return path.parent / "kwok" / "clusters" / path.name.removesuffix(".kubeconfig")


def etcd_metrics_url(folder: Path) -> str | None:
    """etcd's metrics address as kwokctl recorded it in the cluster's kwok.yaml."""
    import yaml

    try:
        docs = list(yaml.safe_load_all((folder / "kwok.yaml").read_text()))
    except OSError:
        return None
    comps = [c for d in docs if isinstance(d, dict) for c in d.get("components") or []]
    for comp in comps:
        metric = comp.get("metric") or {}
        if comp.get("name") == "etcd" and metric.get("host"):
            return (
                f"{metric.get('scheme', 'http')}://{metric['host']}{metric.get('path', '/metrics')}"
            )
    return None


def process_cpu(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds (user + system) so far of each named process; a gone one is left out."""
    import os

    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for name, pid in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[name] = (int(fields[11]) + int(fields[12])) / tick
    return out


def cluster_pids(folder: Path) -> dict[str, int]:
    out = {}
    for pidfile in (folder / "pids").glob("*.pid"):
        try:
            out[pidfile.stem] = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            continue
    return out


@dataclass
class CostMeter:
    """Scrapes one cluster; `apiserver_metrics` returns the API server's /metrics text."""

    apiserver_metrics: Callable[[], str]
    kubeconfig: str
    operator_pid: int | None = None
    idle: Scrape | None = None  # the idle cluster's counters over `idle_seconds`
    notes: list[str] = field(default_factory=list)

    def scrape(self) -> Scrape:
        folder = cluster_dir(self.kubeconfig)
        pids = cluster_pids(folder)
        if self.operator_pid is not None:
            pids["operator"] = self.operator_pid
        cpu = process_cpu(pids)
        requests, watch = parse_apiserver(self.apiserver_metrics())
        etcd: dict[str, float] = {}
        url = etcd_metrics_url(folder)
        if url:
            try:
                with urllib.request.urlopen(url, timeout=10) as r:
                    etcd = parse_etcd(r.read().decode())
            except OSError as exc:
                self.notes.append(f"etcd metrics unreadable: {exc}")
        return Scrape(time.monotonic(), requests, watch, etcd, cpu)

    def sample_idle(self, seconds: float = 10.0) -> None:
        first = self.scrape()
        time.sleep(seconds)
        self.idle = self.scrape().minus(first)

    def settle(self, quiet: float = 3.0, limit: float = 30.0) -> Scrape:
        """Scrape until no write but KWOK's heartbeats reached the API server for `quiet`
        seconds (the last status writes of a burst land after its pods run), at most `limit`."""
        last = self.scrape()
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            time.sleep(quiet)
            now = self.scrape()
            going = _writes(now.minus(last))
            if not going:
                return now
            last = now
        self.notes.append(f"writes still going {limit:.0f} s after the burst: {sorted(going)}")
        return last

    def background(self) -> Scrape:
        """The idle sample's steady part: all CPU and etcd, but of the requests and watch
        events only KWOK's heartbeats and leases (anything else the idle window saw, such
        as the last events of an earlier run, is no rate that goes on during a burst)."""
        assert self.idle is not None
        idle = self.idle

        def steady(rows: dict[str, list[float]]) -> dict[str, list[float]]:
            return {k: v for k, v in rows.items() if _base(k.rsplit(" ", 1)[0]) in BACKGROUND}

        return Scrape(idle.at, steady(idle.requests), steady(idle.watch), idle.etcd, idle.cpu)

    def burst_cost(self, before: Scrape, after: Scrape) -> dict[str, Any]:
        """The burst's counters, net of the idle rate over its length, as JSON."""
        raw = after.minus(before)
        net = raw
        if self.idle is not None and self.idle.at > 0:
            net = raw.minus(self.background(), raw.at / self.idle.at)
            if "operator" in raw.cpu:  # its start-up is no idle rate: the operator's raw CPU
                net.cpu["operator"] = raw.cpu["operator"]
        for key in [k for k in net.requests if k.endswith(" WATCH")]:
            net.requests[key][1] = 0.0  # a watch's duration is how long it stayed open
        return {
            "seconds": round(raw.at, 2),
            "cpu_raw": {k: round(v, 2) for k, v in raw.cpu.items()},
            "cpu": {k: round(v, 2) for k, v in net.cpu.items()},
            "requests": {k: [round(x, 4) for x in v] for k, v in net.requests.items()},
            "watch": {k: [round(x, 1) for x in v] for k, v in net.watch.items()},
            "etcd": {k: round(v, 1) for k, v in net.etcd.items()},
            "notes": list(self.notes),
        }


def _base(resource: str) -> str:
    """`leases.coordination.k8s.io/status` -> `leases`."""
    return resource.split("/")[0].split(".")[0]


def _writes(s: Scrape) -> set[str]:
    """The write requests (resource verb) in `s`, KWOK's heartbeats and leases left out."""
    out = set()
    for k, v in s.requests.items():
        resource, verb = k.rsplit(" ", 1)
        if v[0] > 0 and verb in MUTATING and _base(resource) not in BACKGROUND:
            out.add(k)
    return out


# --- the report ---------------------------------------------------------------------------------
def _per_job(value: float, jobs: int) -> float:
    return value / jobs if jobs else float("nan")


def cpu_rows(bare: dict[str, Any], ours: dict[str, Any], jobs: int) -> list[str]:
    """CPU seconds per job of each process, bare pods against trainop (net of idle)."""
    lines = [
        "| Process | bare pods CPU ms/job | trainop CPU ms/job | trainop - bare ms/job |",
        "|---|---|---|---|",
    ]
    tb = to = 0.0
    for name in PROCESSES:
        b = _per_job(bare["cpu"].get(name, 0.0), jobs) * 1000
        o = _per_job(ours["cpu"].get(name, 0.0), jobs) * 1000
        tb, to = tb + b, to + o
        lines.append(f"| {name} | {b:.1f} | {o:.1f} | {o - b:+.1f} |")
    ratio = to / tb if tb else float("nan")
    lines.append(f"| **all** | {tb:.1f} | {to:.1f} | {to - tb:+.1f} (x{ratio:.2f}) |")
    return lines


def request_rows(bare: dict[str, Any], ours: dict[str, Any], jobs: int, top: int = 20) -> list[str]:
    """Resource x verb, sorted by the API server time trainop adds (trainop - bare)."""
    keys = bare["requests"].keys() | ours["requests"].keys()
    zero = [0.0, 0.0, 0.0]
    rows = []
    for k in keys:
        b, o = bare["requests"].get(k, zero), ours["requests"].get(k, zero)
        rows.append((o[1] - b[1], k, b, o))
    rows.sort(key=lambda r: -r[0])
    extra_total = sum(r[0] for r in rows)
    lines = [
        "| Resource verb | bare req/job | trainop req/job | bare ms/job | trainop ms/job "
        "| extra ms/job | share of extra | trainop KB/job |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for extra, k, b, o in rows[:top]:
        share = extra / extra_total if extra_total else float("nan")
        lines.append(
            f"| {k} | {_per_job(b[0], jobs):.2f} | {_per_job(o[0], jobs):.2f} "
            f"| {_per_job(b[1], jobs) * 1000:.2f} | {_per_job(o[1], jobs) * 1000:.2f} "
            f"| {_per_job(extra, jobs) * 1000:+.2f} | {share:.0%} "
            f"| {_per_job(o[2], jobs) / 1024:.1f} |"
        )
    tb = sum(r[2][1] for r in rows)
    to = sum(r[3][1] for r in rows)
    lines.append(
        f"| **all requests** | {_per_job(sum(r[2][0] for r in rows), jobs):.2f} "
        f"| {_per_job(sum(r[3][0] for r in rows), jobs):.2f} | {_per_job(tb, jobs) * 1000:.2f} "
        f"| {_per_job(to, jobs) * 1000:.2f} | {_per_job(to - tb, jobs) * 1000:+.2f} | 100% | |"
    )
    return lines


def watch_and_etcd_rows(bare: dict[str, Any], ours: dict[str, Any], jobs: int) -> list[str]:
    """Watch events sent per job by resource (top 8 by trainop's bytes), and etcd per job."""
    lines = [
        "| Watch events of | bare events/job | trainop events/job | bare KB/job | trainop KB/job |",
        "|---|---|---|---|---|",
    ]
    keys = sorted(
        bare["watch"].keys() | ours["watch"].keys(),
        key=lambda k: -(ours["watch"].get(k, [0, 0])[1]),
    )
    for k in keys[:8]:
        b, o = bare["watch"].get(k, [0.0, 0.0]), ours["watch"].get(k, [0.0, 0.0])
        lines.append(
            f"| {k} | {_per_job(b[0], jobs):.1f} | {_per_job(o[0], jobs):.1f} "
            f"| {_per_job(b[1], jobs) / 1024:.1f} | {_per_job(o[1], jobs) / 1024:.1f} |"
        )
    lines += ["", "| etcd, per job | bare pods | trainop |", "|---|---|---|"]
    for name in ETCD.values():
        b, o = bare["etcd"].get(name), ours["etcd"].get(name)
        if b is None and o is None:
            continue
        scale = 1024 if name == "put bytes" else 1
        unit = " (KB)" if scale > 1 else ""
        lines.append(
            f"| {name}{unit} | {_per_job(b or 0.0, jobs) / scale:.1f} "
            f"| {_per_job(o or 0.0, jobs) / scale:.1f} |"
        )
    return lines


def cost_lines(title: str, bare: dict[str, Any], ours: dict[str, Any], jobs: int) -> list[str]:
    """The markdown section for one burst: CPU per process, requests, watches, etcd."""
    return [
        f"## {title}",
        "",
        f"Per job, net of the idle cluster's rate (sampled for {IDLE_SECONDS:.0f} s before "
        f"each burst) over the burst's length (bare {bare['seconds']} s, trainop "
        f"{ours['seconds']} s, each until the last write settled). API server time is the "
        "sum of `apiserver_request_duration_seconds` (wall time in the server, not CPU).",
        "",
        *cpu_rows(bare, ours, jobs),
        "",
        *request_rows(bare, ours, jobs),
        "",
        *watch_and_etcd_rows(bare, ours, jobs),
        "",
        *[f"- {n}" for n in sorted(set(bare.get("notes", []) + ours.get("notes", [])))],
        "",
    ]


IDLE_SECONDS = 10.0


def write(path: Path, sections: dict[str, dict[str, Any]]) -> None:
    """bench/results/controlplane.{json,md}: each burst's bare and trainop costs."""
    path.with_suffix(".json").write_text(json.dumps(sections, indent=1) + "\n")
    lines = ["# Control-plane cost per job (make bench-scale)", ""]
    for title, s in sections.items():
        lines += cost_lines(title, s["bare"], s["trainop"], s["jobs"])
    path.with_suffix(".md").write_text("\n".join(lines))

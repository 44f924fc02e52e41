"""`simulate` with a 3-level queue tree over the openb trace (issue 25 part 2).

Trace: the first TRACE_PODS GPU pods of Alibaba's openb trace (cluster-trace-gpu-v2023,
https://github.com/alibaba/clusterdata/tree/master/cluster-trace-gpu-v2023, Weng et al.,
USENIX ATC '23; CC BY 4.0, reduced copy and changes in bench/data/README.md). Each pod
keeps its GPU count and its lifetime (clipped to [1 min, 4 h]); arrivals are compressed to
one pod every ARRIVAL seconds in trace order. The trace has no tenants: pod i goes to team
TEAMS[i % 7], so detect sends three times what segment does and vision borrows.

    org 64 H100 (8 DGX nodes)
    ├── vision 32 (borrowingLimit 16)   ├── nlp 32
    │   ├── detect 12 (limit 16)        │   ├── chat 16
    │   └── segment 12                  │   └── translate 16
"""

from __future__ import annotations

import csv
import gzip
from functools import cache
from pathlib import Path
from typing import Any

from tests.builders import H100, fleet_nodes, job, queue
from trainop.api import constants as c
from trainop.queueing import SimResult, simulate

TRACE = Path(__file__).resolve().parents[2] / "bench" / "data" / "openb_gpu_pods.csv.gz"
TRACE_PODS = 160
ARRIVAL = 30.0
TEAMS = ("detect", "detect", "detect", "segment", "chat", "chat", "translate")
DIVISION = {"detect": "vision", "segment": "vision", "chat": "nlp", "translate": "nlp"}
LIMITS = {"org": None, "vision": 16, "nlp": None, "detect": 16}


def _tree() -> list[dict[str, Any]]:
    def tq(name: str, gpus: int, parent: str | None = None) -> dict[str, Any]:
        b = queue(name).quota("h100", gpus, H100, limit=LIMITS.get(name))
        if parent:
            b.parent(parent)
        if name in DIVISION:
            b.serves(f"team-{name}", default=True)
        return b.build()

    return [
        tq("org", 64),
        tq("vision", 32, "org"),
        tq("nlp", 32, "org"),
        tq("detect", 12, "vision"),
        tq("segment", 12, "vision"),
        tq("chat", 16, "nlp"),
        tq("translate", 16, "nlp"),
    ]


def _pods() -> list[dict[str, Any]]:
    out = []
    with gzip.open(TRACE, "rt") as f:
        for i, row in enumerate(csv.DictReader(f)):
            if i >= TRACE_PODS:
                break
            gpus, life = int(row["gpus"]), float(row["duration_seconds"])
            team = TEAMS[i % len(TEAMS)]
            body = job(f"p{i:03d}", namespace=f"team-{team}").workers(1, gpus).build()
            body["spec"]["placement"] = {"gpuProducts": [H100]}
            body["metadata"]["annotations"] = {
                c.ANNOTATION_SIM_SUBMIT: str(i * ARRIVAL),
                c.ANNOTATION_SIM_DURATION: str(min(max(life, 60.0), 4 * 3600.0)),
            }
            out.append(body)
    return out


@cache
def result() -> SimResult:
    nodes = [n for n in fleet_nodes() if n["metadata"]["name"].startswith("h100-")][:8]
    return simulate(nodes, _tree(), _pods())


def test_every_trace_pod_runs_to_the_end() -> None:
    got = result()
    assert {j.state for j in got.jobs} == {"Finished"}
    assert len(got.jobs) == TRACE_PODS


def test_no_level_exceeds_its_limit_at_any_time() -> None:
    quotas = {"org": 64, "vision": 32, "nlp": 32, "detect": 12, "segment": 12}
    for _, usage in result().usage:
        for name, cap in quotas.items():
            g = usage[name].groups[0]
            limit = LIMITS.get(name)
            assert g.used <= (cap if name == "org" else cap + (limit or 10**9)), name
        # a parent's usage is its children's (roll-up), level by level
        for parent, kids in (("vision", ("detect", "segment")), ("nlp", ("chat", "translate"))):
            assert usage[parent].groups[0].used == sum(usage[k].groups[0].used for k in kids)
        assert usage["org"].groups[0].used == sum(
            usage[d].groups[0].used for d in ("vision", "nlp")
        )


def test_borrowing_goes_up_the_tree_and_comes_back_by_reclaim() -> None:
    got = result()
    peak = got.peak_usage()
    assert peak["detect"]["h100"][1] > 0  # detect borrowed (from segment, then from nlp)
    assert peak["vision"]["h100"][1] > 0  # ... and vision from nlp
    assert peak["vision"]["h100"][1] <= 16  # within vision's borrowingLimit
    reclaims = [
        (j.key, r.preempted_by) for j in got.jobs for r in j.runs if r.preempt_reason == "Reclaim"
    ]
    assert reclaims, "owners reclaimed what detect borrowed"
    for victim, by in reclaims:
        assert victim.startswith("team-detect/") or victim.startswith("team-segment/"), victim
        assert by is not None and not by.startswith("team-detect/"), by

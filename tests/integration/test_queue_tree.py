"""A 3-level TrainingQueue tree on the real operator and the fake fleet (issue 25 part 2):
borrowing from a sibling, then from above; reclaim down the tree to whoever borrowed; a
job held by a parent's borrowingLimit says which level (status and `trainop explain`); a
cycle of parents leaves its jobs waiting with the reason.

    org-S 64 H100
    ├── vision-S 32 (borrowingLimit 16)
    │   ├── detect-S 16   (serves namespace detect-S)
    │   └── segment-S 16  (serves namespace segment-S)
    └── nlp-S 32 (idle: vision borrows its quota)
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.builders import H100, job, queue
from tests.integration.conftest import Kube
from trainop.inventory.pods import is_terminated, pod_binding

pytestmark = pytest.mark.usefixtures("operator")
EXPLAIN = (sys.executable, "-m", "trainop.cli.main", "explain")


def _tq(name: str, gpus: int, parent: str | None = None, **spec: Any) -> dict[str, Any]:
    b = queue(name).quota("h100", gpus, H100, limit=spec.pop("limit", None))
    if parent:
        b.parent(parent)
    for key, value in spec.items():
        b.set(key, value)
    return b.set("topologyWaitSeconds", 0).build()


def _job(namespace: str, name: str) -> dict[str, Any]:
    """Two pods of 8 H100 GPUs."""
    return (
        job(name, namespace=namespace, workers=2).placement("block", "Preferred", [H100]).manifest()
    )


def _status(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return dict(kube.get("trainingjob", name, "-n", ns).get("status") or {})


def _running(kube: Kube, ns: str, name: str) -> bool:
    pods = kube.get("pods", "-n", ns, "-l", f"trainop.dev/job-name={name}")["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return len(live) == 2 and all(p["status"].get("phase") == "Running" for p in live)


def _usage(kube: Kube, name: str) -> dict[str, Any]:
    status = kube.get("trainingqueue", name).get("status") or {}
    h100 = next((u for u in status.get("usage", []) if u["name"] == "h100"), {})
    return {
        "used": h100.get("used"),
        "borrowed": h100.get("borrowed"),
        "level": status.get("level"),
    }


@pytest.fixture
def tree(kube: Kube) -> Iterator[dict[str, str]]:
    sfx = uuid.uuid4().hex[:5]
    names = {
        n: f"{n}-{sfx}" for n in ("org", "vision", "nlp", "detect", "segment", "cyc-a", "cyc-b")
    }

    def h100_free() -> bool:  # earlier tests' gangs are gone from the H100s
        return not any(
            (b := pod_binding(p)) is not None and b[1].startswith("h100-") and not is_terminated(p)
            for p in kube.get("pods", "-A")["items"]
        )

    kube.wait_for("H100 nodes free", h100_free, timeout=90)
    for ns in ("detect", "segment", "cyc-a"):
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": names[ns]}})
    n = names
    kube.apply(
        [
            _tq(n["org"], 64),
            _tq(n["vision"], 32, n["org"], limit=16),
            _tq(n["nlp"], 32, n["org"]),
            _tq(n["detect"], 16, n["vision"], namespaces=[n["detect"]], default=True),
            _tq(n["segment"], 16, n["vision"], namespaces=[n["segment"]], default=True),
            _tq(n["cyc-a"], 8, n["cyc-b"], namespaces=[n["cyc-a"]], default=True),
            _tq(n["cyc-b"], 8, n["cyc-a"]),
        ]
    )
    yield names
    for ns in ("detect", "segment", "cyc-a"):
        kube.run("delete", "namespace", names[ns], "--wait=false", check=False)
    for name in names.values():
        kube.run("delete", "trainingqueue", name, "--wait=false", check=False)


def test_tree_borrows_up_and_reclaims_down(kube: Kube, tree: dict[str, str]) -> None:
    det, seg = tree["detect"], tree["segment"]
    # detect: 16 within its quota, 16 borrowed from its idle sibling, 16 more from above.
    for name in ("d1", "d2", "d3"):
        kube.apply(_job(det, name))
        kube.wait_for(f"{name} running", lambda name=name: _running(kube, det, name), timeout=60)
        # Start and creation times have a one-second resolution: a gang started in the same
        # second as the one before ties with it on age, and the tie goes by name
        # (queueing.ordering.victim_order), so d2 could be taken as "the youngest".
        time.sleep(1.1)
    kube.wait_for(
        "usage per level",
        lambda: (
            _usage(kube, det) == {"used": 48, "borrowed": 32, "level": 3}
            and _usage(kube, tree["vision"]) == {"used": 48, "borrowed": 16, "level": 2}
            and _usage(kube, tree["org"]) == {"used": 48, "borrowed": 0, "level": 1}
        ),
        timeout=40,
    )
    cols = kube.run("get", "tq", tree["vision"]).stdout
    assert tree["org"] in cols and "h100 48/32(+16)" in cols, cols

    # segment claims its own quota: vision is at its borrowingLimit, so the youngest gang
    # detect borrowed is reclaimed; detect's gangs within its quota keep running.
    kube.apply(_job(seg, "s1"))
    kube.wait_for("s1 running", lambda: _running(kube, seg, "s1"), timeout=90)
    victim = _status(kube, det, "d3")
    preempted = next((c for c in victim.get("conditions", []) if c["type"] == "Preempted"), {})
    assert preempted.get("reason") == "Reclaim", victim
    assert _running(kube, det, "d1") and _running(kube, det, "d2")

    # d3 (requeued) now waits on vision's borrowingLimit: status and explain name the level.
    st = kube.wait_for(
        "d3 waits on vision",
        lambda: (s := _status(kube, det, "d3")).get("pendingReason") == "Quota" and s,
        timeout=40,
    )
    assert f"held at {tree['vision']} (level 2 of 3" in st["pendingMessage"], st
    out = subprocess.run(
        [*EXPLAIN, "d3", "-n", det, "--kubeconfig", kube.kubeconfig],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"Tree:       {tree['org']} > {tree['vision']} > {det}" in out, out
    held = [ln for ln in out.splitlines() if "<- holds the job" in ln]
    assert len(held) == 1 and tree["vision"] in held[0], out


def test_a_cycle_of_parents_leaves_jobs_waiting_with_the_reason(
    kube: Kube, tree: dict[str, str]
) -> None:
    ns = tree["cyc-a"]
    kube.apply(_job(ns, "c1"))
    st = kube.wait_for(
        "c1 waits on the broken queue",
        lambda: (s := _status(kube, ns, "c1")).get("pendingReason") == "QueueInvalid" and s,
        timeout=40,
    )
    assert "form a cycle" in st["pendingMessage"], st
    cond = next(
        c
        for c in kube.get("trainingqueue", tree["cyc-a"])["status"]["conditions"]
        if c["type"] == "Active"
    )
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec")
    # CEL refuses the simplest cycle outright: a queue naming itself.
    bad = _tq(f"self-{tree['org']}", 8, f"self-{tree['org']}")
    proc = kube.apply(bad, check=False)
    assert proc.returncode != 0 and "spec.parent names the queue itself" in proc.stderr

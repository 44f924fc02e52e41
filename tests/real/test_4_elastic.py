"""An elastic PyTorch job on the real node (issue 25): 2 of max 3 workers, grown to 3 when a
job ends, shrunk back to 2 for a higher-priority job; training goes on through both changes.
About 2-3 minutes (c10d re-rendezvous with a 5 s last call, pod starts, 0.2 s steps)."""

from __future__ import annotations

from tests.real.elastic_scenario import NAME, Phases, run_elastic
from tests.real.scenarios import Target


def test_elastic_ddp_grows_and_shrinks_and_its_step_keeps_increasing(
    target: Target, namespace: str
) -> None:
    phases: Phases = run_elastic(target, namespace)
    print(f"elastic steps (world, first, last): {phases.runs}")
    assert phases.worlds()[:3] == [2, 3, 2], phases.runs
    (_, a0, a1), (_, b0, b1), (_, c0, c1) = phases.runs[:3]
    # Each size resumes from the checkpoint of the last (never from step 0) and trains on.
    assert 0 <= a0 < a1 < b0 < b1 < c0 < c1, phases.runs
    tj = target.kube.get("trainingjob", NAME, "-n", namespace)
    assert tj["status"]["phase"] == "Running"
    assert tj["status"]["elastic"]["targetReplicas"] == 2
    reasons = [e["reason"] for e in target.kube.events_for(namespace, NAME)]
    assert "Grown" in reasons and "Shrunk" in reasons

"""A small `make bench-scale`: the same code, a burst of a few gangs on the test fleet.

It checks that the benchmark runs end to end (bare pods and operator both bring every gang
to Running, the figures are filled in); it asserts no timing: figures live in the bench.
"""

from __future__ import annotations

import pytest
from bench import scale
from bench.scale import controlplane

from tests.integration.conftest import Kube, OperatorProcess


def test_burst_smoke_runs_both_policies(
    kube: Kube, operator: OperatorProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The idle cluster's rate is sampled as in the bench, for 1 s instead of 10 (twice):
    # the smoke checks that the figures are filled in, never what they are.
    monkeypatch.setattr(controlplane, "IDLE_SECONDS", 1.0)
    client = scale.Client(kube.kubeconfig, workers=4)
    gangs = [scale.Gang("sa", 2, 8), scale.Gang("sb", 1, 4), scale.Gang("sc", 1, 8)]
    bare = scale.run_bare(client, gangs, timeout=120)
    assert bare.completed == len(gangs), bare
    assert operator.proc is not None
    ours = scale.run_operator(client, gangs, 120, operator.proc.pid, operator.metrics)
    assert ours.completed == len(gangs), ours
    assert ours.api_writes_per_job is not None and ours.api_writes_per_job > 0
    assert ours.operator_peak_rss_mb is not None and ours.operator_peak_rss_mb > 0

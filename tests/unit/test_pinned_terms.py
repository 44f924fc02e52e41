"""A pinned GPU pod carries the one compatibility term its node meets (issue 33, part 2:
the other OR-ed terms are for other nodes, and were about 70% of a pod's bytes on every
create, status patch and watch event)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tests.builders import fleet_snapshot, job
from trainop.placement.constraints import terms_met
from trainop.planner import OperatorConfig, Plan, plan_job

NEW = {"matchExpressions": [{"key": "driver", "operator": "Gt", "values": ["524"]}]}
OLD = {"matchExpressions": [{"key": "old-driver", "operator": "Gt", "values": ["524"]}]}
FC = {"matchExpressions": [{"key": "product", "operator": "In", "values": ["A", "B", "C"]}]}


@pytest.mark.parametrize(
    ("labels", "want"),
    [
        pytest.param({"driver": "580", "old-driver": "580"}, (NEW,), id="first-met-alone"),
        pytest.param({"old-driver": "580"}, (OLD,), id="second-met"),
        pytest.param({"product": "B"}, (FC,), id="product-list-met"),
        pytest.param({"driver": "470"}, (NEW, OLD, FC), id="none-met-keeps-all"),
    ],
)
def test_the_first_term_the_node_meets(labels: dict[str, str], want: tuple[Any, ...]) -> None:
    node: Any = SimpleNamespace(name="n1", labels=labels)
    assert terms_met((NEW, OLD, FC), node) == want


def test_every_pinned_gpu_pod_has_one_term_with_its_pin() -> None:
    result = plan_job(job(workers=4, gpus=8).build(), fleet_snapshot(), OperatorConfig())
    assert isinstance(result, Plan)
    for pod in (o for o in result.objects if o["kind"] == "Pod"):
        terms = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert len(terms) == 1, terms
        (host,) = [e for e in terms[0]["matchExpressions"] if e["key"] == "kubernetes.io/hostname"]
        assert terms[0]["matchFields"][0]["values"] == host["values"]
        assert len(terms[0]["matchExpressions"]) > 1  # the compatibility expressions stay

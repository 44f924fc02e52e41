"""Checks before anything is created (`trainop.validation`): generated names and references."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import job
from trainop.api.trainingjob import TrainingJobSpec
from trainop.planner import InvalidJob, OperatorConfig, parse_spec
from trainop.validation import (
    check_names,
    check_priority_class,
    check_queue_label,
    longest_pod_name,
    max_job_name_length,
)


def spec(**roles: tuple[int, int]) -> TrainingJobSpec:
    b = job(workers=None)
    for role, (replicas, gpus) in roles.items():
        b.role(role, replicas, gpus)
    return TrainingJobSpec.model_validate(b.build()["spec"])


def spec_with(template: dict[str, Any]) -> TrainingJobSpec:
    return TrainingJobSpec.model_validate(job().role("Worker", 2, 8, template).build()["spec"])


W2 = spec(Worker=(2, 8))
W100 = spec(Worker=(100, 8))

# (id, job name, spec, field named or None when valid, text in the message)
NAME_CASES = [
    ("short-name", "bert", W2, None, ""),
    ("longest-that-fits", "b" * 54, W2, None, ""),  # b...b-worker-1 is 63
    ("one-too-long", "b" * 55, W2, "metadata.name", "at most 54 characters"),
    ("more-replicas-less-room", "b" * 54, W100, "metadata.name", "-worker-99 has 64 characters"),
    ("names-the-role", "b" * 55, W2, "metadata.name", "from spec.replicaSpecs.Worker"),
    ("dot", "bert.v2", W2, "metadata.name", "DNS-1035 label"),
    ("leading-digit", "1bert", W2, "metadata.name", "starting with a letter"),
    ("upper-case", "Bert", W2, "metadata.name", "DNS-1035"),
    ("trailing-dash", "bert-", W2, "metadata.name", "DNS-1035"),
    ("empty", "", W2, "metadata.name", "DNS-1035"),
    (
        "label-value-too-long",
        "bert",
        spec_with({"metadata": {"labels": {"team": "x" * 64}}}),
        "spec.replicaSpecs.Worker.template.metadata.labels.team",
        "at most 63",
    ),
    (
        "label-value-bad-char",
        "bert",
        spec_with({"metadata": {"labels": {"team": "a b"}}}),
        "spec.replicaSpecs.Worker.template.metadata.labels.team",
        "label value 'a b'",
    ),
    (
        "label-value-not-a-string",
        "bert",
        spec_with({"metadata": {"labels": {"n": 3}}}),
        "spec.replicaSpecs.Worker.template.metadata.labels.n",
        "label value 3",
    ),
    (
        "label-key-bad",
        "bert",
        spec_with({"metadata": {"labels": {"a b": "x"}}}),
        "spec.replicaSpecs.Worker.template.metadata.labels",
        "label key 'a b'",
    ),
    (
        "label-key-prefix-ok",
        "bert",
        spec_with({"metadata": {"labels": {"x.io/team": "a"}}}),
        None,
        "",
    ),
    (
        "label-key-prefix-bad",
        "bert",
        spec_with({"metadata": {"labels": {"X_IO/team": "a"}}}),
        "spec.replicaSpecs.Worker.template.metadata.labels",
        "label key",
    ),
    ("empty-label-value-ok", "bert", spec_with({"metadata": {"labels": {"team": ""}}}), None, ""),
]


@pytest.mark.parametrize(
    ("name", "job_spec", "field", "says"),
    [pytest.param(*c[1:], id=c[0]) for c in NAME_CASES],
)
def test_check_names(name: str, job_spec: TrainingJobSpec, field: str | None, says: str) -> None:
    if field is None:
        check_names(name, job_spec)
        return
    with pytest.raises(InvalidJob) as err:
        check_names(name, job_spec)
    assert err.value.field == field
    assert err.value.reason == "InvalidName"
    assert says in err.value.detail, err.value.detail


def test_longest_pod_name_is_the_last_index_of_the_longest_role() -> None:
    s = spec(Worker=(12, 8), Chief=(1, 8), PS=(2, 0))
    assert longest_pod_name("tf", s) == "tf-worker-11"
    assert max_job_name_length(s) == 63 - len("-worker-11")


@pytest.mark.parametrize(
    ("wanted", "known", "ok"),
    [
        pytest.param(None, set(), True, id="none-asked"),
        pytest.param("high", {"high"}, True, id="exists"),
        pytest.param("high", None, True, id="unknown-cluster-not-checked"),
        pytest.param("high", set(), False, id="cluster-has-none"),
        pytest.param("high-2", {"high"}, False, id="exact-name"),
    ],
)
def test_check_priority_class(wanted: str | None, known: set[str] | None, ok: bool) -> None:
    b = job()
    if wanted:
        b.set("priorityClassName", wanted)
    s = TrainingJobSpec.model_validate(b.build()["spec"])
    if ok:
        check_priority_class(s, known)
        return
    with pytest.raises(InvalidJob) as err:
        check_priority_class(s, known)
    assert err.value.field == "spec.priorityClassName"
    assert err.value.reason == "PriorityClassNotFound"
    assert "create it or name an existing one" in err.value.detail


def test_queue_and_priority_class_names_are_checked_by_the_schema() -> None:
    body = job().set("queue", "Team A").set("priorityClassName", "Hi There").build()
    with pytest.raises(InvalidJob) as err:
        parse_spec(body)
    assert err.value.field in ("spec.queue", "spec.priorityClassName")


KUEUE = OperatorConfig(external_queue="kueue")


@pytest.mark.parametrize(
    ("queue", "config", "ok"),
    [
        pytest.param(None, KUEUE, True, id="no-queue"),
        pytest.param("q" * 63, KUEUE, True, id="kueue-63"),
        pytest.param("q" * 64, KUEUE, False, id="kueue-64"),  # every pod was refused (422)
        pytest.param("q" * 64, OperatorConfig(), True, id="own-queues-take-253"),
    ],
)
def test_check_queue_label(queue: str | None, config: OperatorConfig, ok: bool) -> None:
    b = job()
    if queue:
        b.queue(queue)
    job_spec = parse_spec(b.build())
    if ok:
        check_queue_label(job_spec, config)
        return
    with pytest.raises(InvalidJob) as err:
        check_queue_label(job_spec, config)
    assert err.value.field == "spec.queue" and "at most 63" in err.value.detail

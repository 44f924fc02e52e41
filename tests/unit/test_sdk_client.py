"""trainop.sdk.client's own logic against fakes of the two API groups it calls: logs() that
follow a rank across a gang restart, wait() and its callback, and the API server's
refusals turned into the SDK's typed errors. The real API server is in
tests/integration/test_sdk.py."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.builders import pod
from trainop.sdk import (
    ApiError,
    ForbiddenError,
    InvalidJobError,
    JobExistsError,
    JobFailedError,
    JobNotFoundError,
    NotInstalledError,
    TrainopClient,
    WaitTimeoutError,
)


def _job(phase: str | None, step: int | None = None, **status: Any) -> dict[str, Any]:
    st: dict[str, Any] = dict(status)
    if phase:
        st["phase"] = phase
    if step is not None:
        st["progress"] = {"step": step, "summary": f"step {step}"}
    return {
        "apiVersion": "trainop.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "j", "namespace": "team"},
        "spec": {
            "replicaSpecs": {
                "Worker": {"template": {"spec": {"containers": [{"name": "trainer"}]}}}
            }
        },
        "status": st,
    }


def _running_pod(uid: str, created: str, deleting: bool = False) -> dict[str, Any]:
    b = pod("j-worker-0", namespace="team").running()
    if deleting:
        b.deleting()
    out = b.build()
    out["metadata"].update(uid=uid, creationTimestamp=created)
    return out


class Stream:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self, amt: int) -> Iterator[bytes]:
        for i in range(0, len(self.data), 3):  # lines split across chunks
            yield self.data[i : i + 3]

    def release_conn(self) -> None:
        pass


class FakeCustom:
    """Answers each get with the next of `jobs` (the last one repeats)."""

    def __init__(self, jobs: list[Any]) -> None:
        self.jobs = jobs
        self.gets = 0

    def get_namespaced_custom_object(self, *args: Any) -> dict[str, Any]:
        item = self.jobs[min(self.gets, len(self.jobs) - 1)]
        self.gets += 1
        if isinstance(item, Exception):
            raise item
        return dict(item)


class FakeCore:
    def __init__(self, pods: list[list[dict[str, Any]]], logs: dict[str, bytes]) -> None:
        self.pods, self.logs, self.lists = pods, logs, 0
        self.read: list[tuple[str, bool]] = []

    def list_namespaced_pod(self, namespace: str, label_selector: str) -> Any:
        items = self.pods[min(self.lists, len(self.pods) - 1)]
        self.lists += 1
        return type("L", (), {"items": items})()

    def read_namespaced_pod_log(
        self, name: str, ns: str, container: str, follow: bool, _preload_content: bool
    ) -> Stream:
        uid = next(
            p
            for p in self.pods[min(self.lists - 1, len(self.pods) - 1)]
            if p["metadata"]["name"] == name
        )["metadata"]["uid"]
        self.read.append((uid, follow))
        return Stream(self.logs[uid])


def sdk(custom: Any, core: Any = None) -> TrainopClient:
    c = TrainopClient("team", api_client=client.ApiClient(), poll_seconds=0)
    c.custom, c.core = custom, core
    return c


def test_logs_follow_rank_zero_across_a_gang_restart() -> None:
    old, new = _running_pod("A", "t1"), _running_pod("B", "t2")
    custom = FakeCustom(
        [_job("Running"), _job("Running"), _job("Restarting"), _job("Running"), _job("Succeeded")]
    )
    core = FakeCore(
        [[old], [_running_pod("A", "t1", deleting=True)], [new], [new]],
        {"A": b"step 1\nstep 2\n", "B": b"step 3\nend"},
    )
    lines = list(sdk(custom, core).logs("j", rank=0, follow=True))
    assert lines == [
        "step 1",
        "step 2",
        "--- trainop: rank 0 is now pod j-worker-0 (the gang was recreated) ---",
        "step 3",
        "end",
    ]
    assert core.read == [("A", True), ("B", True)]


def test_logs_without_follow_read_what_there_is_once() -> None:
    core = FakeCore([[_running_pod("A", "t1")]], {"A": b"x\ny\n"})
    assert list(sdk(FakeCustom([_job("Running")]), core).logs("j", follow=False)) == ["x", "y"]
    assert core.read == [("A", False)]


def test_logs_of_a_job_that_ended_before_its_pod_started_end() -> None:
    core = FakeCore([[]], {})
    assert list(sdk(FakeCustom([_job("Failed")]), core).logs("j")) == []


def test_wait_calls_back_on_each_change_and_returns_the_job() -> None:
    custom = FakeCustom(
        [
            _job(None),
            _job("Queued"),
            _job("Queued"),
            _job("Running", 5),
            _job("Running", 9),
            _job("Succeeded", 10),
        ]
    )
    seen: list[tuple[str, Any]] = []
    job = sdk(custom).wait(
        "j", callback=lambda j: seen.append((j.phase, j.progress.step if j.progress else None))
    )
    assert job.phase == "Succeeded" and job.progress is not None and job.progress.step == 10
    assert seen == [("", None), ("Queued", None), ("Running", 5), ("Running", 9), ("Succeeded", 10)]


WAIT_ERRORS = [
    (
        "failed, with its reason",
        [
            _job(
                "Failed",
                conditions=[
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "BackoffLimitExceeded",
                        "message": "3 restarts",
                    }
                ],
            )
        ],
        "Succeeded",
        JobFailedError,
        "is Failed: BackoffLimitExceeded: 3 restarts",
    ),
    (
        "succeeded when Running was asked",
        [_job("Succeeded")],
        "Running",
        JobFailedError,
        "is Succeeded",
    ),
    (
        "timed out, naming the phase",
        [_job("Queued")],
        "Running",
        WaitTimeoutError,
        "not Running within 0 s; it is Queued",
    ),
    (
        "gone",
        [ApiException(status=404)],
        "Running",
        JobNotFoundError,
        "TrainingJob team/j not found",
    ),
]


@pytest.mark.parametrize(
    ("name", "jobs", "until", "error", "message"), WAIT_ERRORS, ids=[c[0] for c in WAIT_ERRORS]
)
def test_wait_errors(name: str, jobs: list[Any], until: str, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        sdk(FakeCustom(jobs)).wait("j", until=until, timeout=0)


def _api_error(status: int, message: str = "") -> ApiException:
    exc = ApiException(status=status, reason="Reason")
    exc.body = json.dumps({"message": message})
    return exc


REFUSALS = [
    (
        "a job that is not there",
        _api_error(404),
        "j",
        JobNotFoundError,
        "TrainingJob team/j not found",
    ),
    (
        "a kind that is not installed",
        _api_error(404, "the server could not find the requested resource"),
        None,
        NotInstalledError,
        "kubectl apply --server-side -f crds/",
    ),
    ("a name taken", _api_error(409), "j", JobExistsError, "already exists: pick another name"),
    (
        "the API server names the field",
        _api_error(
            422,
            'TrainingJob.trainop.dev "j" is invalid: spec.replicaSpecs.Worker.gpus: Invalid value: -1',
        ),
        "j",
        InvalidJobError,
        "spec.replicaSpecs.Worker.gpus: Invalid value: -1",
    ),
    (
        "not allowed",
        _api_error(403, "forbidden"),
        "j",
        ForbiddenError,
        "forbidden \\(namespace team\\)",
    ),
    ("anything else", _api_error(500, "etcd timeout"), "j", ApiError, "500: etcd timeout"),
]


@pytest.mark.parametrize(
    ("name", "exc", "job", "error", "message"), REFUSALS, ids=[c[0] for c in REFUSALS]
)
def test_refusals_become_typed_errors(
    name: str, exc: ApiException, job: str | None, error: type, message: str
) -> None:
    err = sdk(None)._fail(exc, job)
    assert isinstance(err, error)
    assert re.search(message, str(err)), str(err)


def test_an_invalid_field_names_the_path() -> None:
    msg = 'TrainingJob.trainop.dev "j" is invalid: spec.replicaSpecs.Worker.gpus: Invalid value: -1'
    err = sdk(None)._fail(_api_error(422, msg), "j")
    assert isinstance(err, InvalidJobError) and err.field == "spec.replicaSpecs.Worker.gpus"
    causes = _api_error(422, msg)
    causes.body = json.dumps(
        {
            "message": msg,
            "details": {"causes": [{"field": "spec.queue", "message": "Invalid value: x"}]},
        }
    )
    err = sdk(None)._fail(causes, "j")
    assert isinstance(err, InvalidJobError) and (err.field, err.detail) == (
        "spec.queue",
        "Invalid value: x",
    )

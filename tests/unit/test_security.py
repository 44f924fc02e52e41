"""Security properties of what trainop creates (issue 12): the MPI SSH Secret is the job's own,
mounted read-only with mode 0400, and never another object's."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.unit.builders import NOW, fleet_snapshot, job
from trainop.kube.secrets import secret_owner_verdict, ssh_secret
from trainop.manifests import SSH_VOLUME, JobRef
from trainop.planner import OperatorConfig
from trainop.reconcile import reconcile

REF = JobRef("hv", "team-a", "uid-hv")


def mpi_objects(name: str = "hv") -> tuple[list[dict[str, Any]], str | None]:
    body = job(name, "mpi", None, workers=None).role("Launcher", 1, 0).role("Worker", 2, 8)
    acts = reconcile(body.build(), [], fleet_snapshot, OperatorConfig(), NOW)
    return acts.create, acts.needs_ssh_secret


def test_every_pod_mounts_the_job_secret_read_only_with_mode_0400() -> None:
    objects, secret = mpi_objects()
    pods = [o for o in objects if o["kind"] == "Pod"]
    assert secret == "hv-ssh" and len(pods) == 3
    for pod in pods:
        vols = [v for v in pod["spec"]["volumes"] if v["name"] == SSH_VOLUME]
        assert vols == [
            {"name": SSH_VOLUME, "secret": {"secretName": "hv-ssh", "defaultMode": 0o400}}
        ]
        mounts = [
            m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == SSH_VOLUME
        ]
        assert len(mounts) == 1 and mounts[0]["readOnly"] is True


def test_two_jobs_never_share_a_secret() -> None:
    (_, a), (_, b) = mpi_objects("hv"), mpi_objects("hv2")
    assert a != b


def test_the_secret_is_owned_by_its_job_and_its_keys_are_fresh() -> None:
    one, two = ssh_secret(REF, "hv-ssh"), ssh_secret(REF, "hv-ssh")
    owner = one["metadata"]["ownerReferences"]
    assert owner == [REF.owner_reference()] and owner[0]["uid"] == "uid-hv"
    assert owner[0]["controller"] is True
    assert one["data"]["id_ed25519"] != two["data"]["id_ed25519"]
    pub = base64.b64decode(one["data"]["id_ed25519.pub"])
    assert base64.b64decode(one["data"]["authorized_keys"]) == pub


def existing(owners: list[dict[str, Any]], labels: dict[str, str] | None = None) -> dict:
    meta: dict[str, Any] = {"name": "hv-ssh", "ownerReferences": owners}
    meta["labels"] = (
        {"trainop.dev/job-name": "hv", "app.kubernetes.io/managed-by": "trainop"}
        if labels is None
        else labels
    )
    return {"metadata": meta}


JOB_OWNER = {"kind": "TrainingJob", "name": "hv", "uid": "uid-hv"}


@pytest.mark.parametrize(
    ("secret", "verdict"),
    [
        pytest.param(existing([JOB_OWNER]), "ours", id="this-job"),
        pytest.param(existing([{**JOB_OWNER, "uid": "old"}]), "stale", id="earlier-job-same-name"),
        pytest.param(
            existing([{**JOB_OWNER, "name": "other", "uid": "o"}]), "foreign", id="another-job"
        ),
        pytest.param(existing([], {}), "foreign", id="a-users-secret"),
        pytest.param(existing([]), "foreign", id="labelled-but-unowned"),
        pytest.param(
            existing([{**JOB_OWNER, "uid": "old"}], {"app": "x"}),
            "foreign",
            id="owned-by-old-job-but-not-made-by-trainop",
        ),
        pytest.param(
            existing([{"kind": "Deployment", "name": "hv", "uid": "d"}]),
            "foreign",
            id="owned-by-something-else",
        ),
    ],
)
def test_secret_owner_verdict(secret: dict[str, Any], verdict: str) -> None:
    assert secret_owner_verdict(secret, REF) == verdict

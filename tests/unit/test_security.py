"""Security properties of what trainop creates (issue 12): the MPI SSH Secret is the job's own
(owned by it, named after its uid), mounted read-only with mode 0400, never shared."""

from __future__ import annotations

import base64
from typing import Any

from tests.builders import NOW, fleet_snapshot, job
from trainop.kube.secrets import ssh_secret
from trainop.manifests import SSH_VOLUME, JobRef
from trainop.planner import OperatorConfig
from trainop.reconcile import reconcile

REF = JobRef("hv", "team-a", "uid-hv")


def mpi_objects(name: str = "hv", uid: str | None = None) -> tuple[list[dict[str, Any]], str]:
    body = job(name, "mpi", None, workers=None).role("Launcher", 1, 0).role("Worker", 2, 8).build()
    if uid:
        body["metadata"]["uid"] = uid
    acts = reconcile(body, [], fleet_snapshot, OperatorConfig(), NOW)
    assert acts.needs_ssh_secret is not None
    return acts.create, acts.needs_ssh_secret


def test_every_pod_mounts_the_job_secret_read_only_with_mode_0400() -> None:
    objects, secret = mpi_objects()
    pods = [o for o in objects if o["kind"] == "Pod"]
    assert secret.startswith("hv-ssh-") and len(pods) == 3
    for pod in pods:
        vols = [v for v in pod["spec"]["volumes"] if v["name"] == SSH_VOLUME]
        assert vols == [
            {"name": SSH_VOLUME, "secret": {"secretName": secret, "defaultMode": 0o400}}
        ]
        mounts = [
            m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == SSH_VOLUME
        ]
        assert len(mounts) == 1 and mounts[0]["readOnly"] is True


def test_two_jobs_never_share_a_secret() -> None:
    (_, a), (_, b) = mpi_objects("hv"), mpi_objects("hv2")
    assert a != b


def test_a_job_recreated_under_the_same_name_gets_a_new_secret() -> None:
    """The old job's Secret may outlive it until garbage collection: never reuse it."""
    (_, old), (_, new) = mpi_objects("hv", uid="uid-1"), mpi_objects("hv", uid="uid-2")
    assert old != new and old.startswith("hv-ssh-") and new.startswith("hv-ssh-")


def test_a_secret_called_job_ssh_is_not_the_jobs() -> None:
    _, secret = mpi_objects("hv")
    assert secret != "hv-ssh"


def test_the_secret_is_owned_by_its_job_and_its_keys_are_fresh() -> None:
    one, two = ssh_secret(REF, "hv-ssh-x"), ssh_secret(REF, "hv-ssh-x")
    owner = one["metadata"]["ownerReferences"]
    assert owner == [REF.owner_reference()] and owner[0]["uid"] == "uid-hv"
    assert owner[0]["controller"] is True
    assert one["data"]["id_ed25519"] != two["data"]["id_ed25519"]
    pub = base64.b64decode(one["data"]["id_ed25519.pub"])
    assert base64.b64decode(one["data"]["authorized_keys"]) == pub

"""Security on the real control plane (issue 12): the MPI SSH Secret is the job's own and is
never another object's; a job cannot use a queue that does not serve its namespace; a queue's
policy refuses escalations (see also test_fail_loud: a broken queue never lets them through).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.builders import A100, job, queue
from tests.integration.conftest import Kube

pytestmark = pytest.mark.usefixtures("operator")


def mpi_job(ns: str, name: str) -> dict[str, Any]:
    builder = job(name, "mpi", None, namespace=ns, workers=None).products(A100)
    return builder.role("Launcher", 1, 0).role("Worker", 1, 1).manifest()


def pods(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    return list(kube.get("pods", "-n", ns, "-l", f"trainop.dev/job-name={name}")["items"])


def secret_of(pod: dict[str, Any]) -> str:
    (vol,) = [v for v in pod["spec"]["volumes"] if v.get("secret")]
    return str(vol["secret"]["secretName"])


def test_ssh_secret_is_owned_read_only_0400_and_per_job(kube: Kube, namespace: str) -> None:
    # A Secret squatting on the old `<job>-ssh` name is never mounted.
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "hv-ssh", "namespace": namespace},
            "stringData": {"id_ed25519": "not yours"},
        }
    )
    kube.apply([mpi_job(namespace, "hv"), mpi_job(namespace, "hw")])
    for name in ("hv", "hw"):
        kube.wait_for(f"{name} pods", lambda n=name: len(pods(kube, namespace, n)) == 2)
    keys = {}
    for name in ("hv", "hw"):
        uid = kube.get("trainingjob", name, "-n", namespace)["metadata"]["uid"]
        mounted = {secret_of(p) for p in pods(kube, namespace, name)}
        assert len(mounted) == 1
        secret_name = mounted.pop()
        assert secret_name.startswith(f"{name}-ssh-")
        secret = kube.get("secret", secret_name, "-n", namespace)
        owners = secret["metadata"]["ownerReferences"]
        assert [(o["kind"], o["uid"], o.get("controller")) for o in owners] == [
            ("TrainingJob", uid, True)
        ]
        keys[name] = secret["data"]["id_ed25519"]
        for pod in pods(kube, namespace, name):
            (vol,) = [v for v in pod["spec"]["volumes"] if v.get("secret")]
            assert vol["secret"]["defaultMode"] == 0o400
            mounts = [
                m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == vol["name"]
            ]
            assert mounts and all(m.get("readOnly") for m in mounts)
    assert keys["hv"] != keys["hw"]
    squatter = kube.get("secret", "hv-ssh", "-n", namespace)
    assert not squatter["metadata"].get("ownerReferences")  # untouched, unused


def test_a_job_cannot_use_a_queue_of_another_namespace(kube: Kube, namespace: str) -> None:
    qname = f"other-{uuid.uuid4().hex[:6]}"
    kube.apply(queue(qname).serves("somewhere-else").build())
    job = mpi_job(namespace, "intruder")
    job["spec"]["queue"] = qname
    try:
        kube.apply(job)

        def invalid() -> dict[str, Any] | None:
            st = kube.get("trainingjob", "intruder", "-n", namespace).get("status") or {}
            return st if st.get("phase") == "Invalid" else None

        st = kube.wait_for("Invalid", invalid)
        cond = next(c for c in st["conditions"] if c["type"] == "Invalid")
        assert cond["reason"] == "PolicyViolation"
        assert f"does not serve namespace {namespace}" in cond["message"]
        assert pods(kube, namespace, "intruder") == []
    finally:
        kube.run("delete", "trainingqueue", qname, "--wait=false", check=False)

"""Security on the real control plane (issue 12): the MPI SSH Secret is the job's own and is
never another object's; a job cannot use a queue that does not serve its namespace; a queue's
policy refuses escalations (see also test_fail_loud: a broken queue never lets them through).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.integration.conftest import Kube

pytestmark = pytest.mark.usefixtures("operator")

A100 = "NVIDIA-A100-SXM4-80GB"


def mpi_job(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainop.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "framework": {"name": "mpi"},
            "cuda": "12.4",
            "replicaSpecs": {"Launcher": {"replicas": 1, "gpus": 0},
                             "Worker": {"replicas": 1, "gpus": 1}},
            "placement": {"gpuProducts": [A100]},
        },
    }  # fmt: skip


def pods(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    return list(kube.get("pods", "-n", ns, "-l", f"trainop.dev/job-name={name}")["items"])


def test_ssh_secret_is_owned_read_only_0400_and_per_job(kube: Kube, namespace: str) -> None:
    kube.apply([mpi_job(namespace, "hv"), mpi_job(namespace, "hw")])
    for name in ("hv", "hw"):
        kube.wait_for(f"{name} pods", lambda n=name: len(pods(kube, namespace, n)) == 2)
    secrets = {}
    for name in ("hv", "hw"):
        uid = kube.get("trainingjob", name, "-n", namespace)["metadata"]["uid"]
        secret = kube.get("secret", f"{name}-ssh", "-n", namespace)
        owners = secret["metadata"]["ownerReferences"]
        assert [(o["kind"], o["uid"], o.get("controller")) for o in owners] == [
            ("TrainingJob", uid, True)
        ]
        secrets[name] = secret["data"]["id_ed25519"]
        for pod in pods(kube, namespace, name):
            vols = [v for v in pod["spec"]["volumes"] if v.get("secret")]
            assert [v["secret"] for v in vols] == [
                {"secretName": f"{name}-ssh", "defaultMode": 256}
            ]
            mounts = [m for m in pod["spec"]["containers"][0]["volumeMounts"]
                      if m["name"] == vols[0]["name"]]  # fmt: skip
            assert mounts and all(m.get("readOnly") for m in mounts)
    assert secrets["hv"] != secrets["hw"]


def test_a_secret_of_someone_else_is_never_mounted(kube: Kube, namespace: str) -> None:
    kube.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hx-ssh",
                "namespace": namespace}, "stringData": {"id_ed25519": "not yours"}})  # fmt: skip
    kube.apply(mpi_job(namespace, "hx"))
    kube.wait_for(
        "SecretConflict event",
        lambda: any(e["reason"] == "SecretConflict" for e in kube.events_for(namespace, "hx")),
    )
    assert pods(kube, namespace, "hx") == []
    secret = kube.get("secret", "hx-ssh", "-n", namespace)
    assert not secret["metadata"].get("ownerReferences")  # untouched


def test_a_job_cannot_use_a_queue_of_another_namespace(kube: Kube, namespace: str) -> None:
    qname = f"other-{uuid.uuid4().hex[:6]}"
    kube.apply({"apiVersion": "trainop.dev/v1alpha1", "kind": "TrainingQueue",
                "metadata": {"name": qname}, "spec": {"namespaces": ["somewhere-else"]}})  # fmt: skip
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

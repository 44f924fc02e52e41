"""The runtime CRDs on the real API server (issue 34): ClusterTrainingRuntime and
TrainingRuntime are structural and explained, a TrainingJob with spec.runtimeRef may leave
framework and replicaSpecs to its runtime and is stored without defaults filled in (a
runtime's defaults apply to what the job leaves unset), and a job with neither framework
nor runtimeRef is refused with the field and the fix named (CEL)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from tests.builders import job, runtime
from tests.integration.conftest import Kube

pytestmark = pytest.mark.usefixtures("crds_installed")

RUNTIME_CRDS = ("clustertrainingruntimes", "trainingruntimes")


@pytest.fixture(scope="module")
def ns(kube: Kube) -> Iterator[str]:
    name = f"rt-{uuid.uuid4().hex[:6]}"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    for crd in RUNTIME_CRDS:
        kube.wait_for(
            f"CRD {crd} Established",
            lambda crd=crd: any(
                c.get("type") == "Established" and c.get("status") == "True"
                for c in (kube.get("crd", f"{crd}.trainop.dev").get("status") or {}).get(
                    "conditions"
                )
                or []
            ),
            timeout=30,
        )
    yield name
    kube.run("delete", "namespace", name, "--wait=false", check=False)


def _create(kube: Kube, body: dict) -> tuple[int, str]:
    proc = kube.run("create", "-f", "-", input=json.dumps(body), check=False)
    return proc.returncode, proc.stderr


def test_runtime_crds_are_structural(kube: Kube, ns: str) -> None:
    for crd in RUNTIME_CRDS:
        got = kube.get("crd", f"{crd}.trainop.dev")
        conditions = {c["type"]: c["status"] for c in got["status"].get("conditions", [])}
        assert conditions.get("NonStructuralSchema") is None, got["status"]["conditions"]


def test_a_runtime_and_a_short_job_are_accepted(kube: Kube, ns: str) -> None:
    name = f"pt-{uuid.uuid4().hex[:6]}"
    rt = (
        runtime(name)
        .framework("pytorch", "2.4")
        .set("cuda", "12.4")
        .role("Worker", 2, 8)
        .trainer(env=[{"name": "A", "value": "1"}])
        .set("placement", {"topology": "rack"})
        .lock("podSecurity")
        .manifest()
    )
    code, err = _create(kube, rt)
    assert code == 0, err
    listed = kube.run("get", "clustertrainingruntimes").stdout
    assert "FRAMEWORK" in listed and name in listed, listed
    body = job("short", namespace=ns, workers=None).unset("framework", "cuda", "replicaSpecs")
    code, err = _create(kube, body.runtime_ref(name).manifest())
    assert code == 0, err
    stored = kube.get("trainingjob", "short", "-n", ns)
    assert "placement" not in stored["spec"], stored["spec"]  # no defaults filled in
    kube.run("delete", "clustertrainingruntime", name, check=False)


def test_a_namespaced_runtime_is_accepted(kube: Kube, ns: str) -> None:
    code, err = _create(kube, runtime("tf", ns).framework("tensorflow").manifest())
    assert code == 0, err


@pytest.mark.parametrize(
    ("name", "body", "says"),
    [
        (
            "no-framework",
            job("nofw").unset("framework").manifest(),
            "spec.framework is required: set it, or name a runtime",
        ),
        (
            "no-roles",
            job("noroles", workers=None).unset("replicaSpecs").manifest(),
            "spec.replicaSpecs is required",
        ),
        (
            "elastic-replicas",
            job("el").elastic(1, 4).set("replicaSpecs", {"Worker": {"replicas": 2}}).manifest(),
            "spec.replicaSpecs.Worker.replicas must equal spec.elastic.maxReplicas",
        ),
    ],
)
def test_refusals_name_the_field(kube: Kube, ns: str, name: str, body: dict, says: str) -> None:
    body["metadata"]["namespace"] = ns
    code, err = _create(kube, body)
    assert code != 0
    assert says in err, err


def test_a_runtime_with_an_unknown_role_is_refused(kube: Kube, ns: str) -> None:
    code, err = _create(kube, runtime("badrole", ns).role("Boss", 1).manifest())
    assert code != 0 and "roles must be" in err, err


def test_explain_documents_runtimes(kube: Kube) -> None:
    out = kube.run("explain", "clustertrainingruntime.spec").stdout
    assert "lockedFields" in out and "replicaSpecs" in out, out
    tpl = kube.run("explain", "trainingruntime.spec.replicaSpecs.template.spec.containers").stdout
    assert "command" in tpl, tpl
    ref = kube.run("explain", "trainingjob.spec.runtimeRef").stdout
    assert "ClusterTrainingRuntime" in ref, ref

"""Pod templates are checked as pod templates by the real API server (issue 22).

The TrainingJob CRD embeds the structural PodTemplateSpec schema of Kubernetes v1.36.3
(`trainop.api.podtemplate`): the API server accepts the CRD as structural, `kubectl apply`
of a job whose template misspells a field is refused with the field named (kubectl sends
fieldValidation=Strict by default), and `kubectl explain` documents the template's fields.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import job
from tests.integration.conftest import Kube, repo_root
from tests.unit.manifest_helpers import EXAMPLES
from tests.unit.test_pod_template_schema import FULL_TEMPLATE

pytestmark = pytest.mark.usefixtures("crds_installed")

CRD = "trainingjobs.trainop.dev"


@pytest.fixture(scope="module")
def ns(kube: Kube) -> Iterator[str]:
    """One namespace for the module (parametrized test ids are not namespace names)."""
    name = f"schema-{uuid.uuid4().hex[:6]}"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kube.run("delete", "namespace", name, "--wait=false", check=False)


def tj(namespace: str, name: str, template: dict[str, Any]) -> dict[str, Any]:
    return job(name, namespace=namespace, workers=None).workers(1, 1, template).manifest()


def test_crd_schema_is_structural(kube: Kube) -> None:
    crd = kube.get("crd", CRD)
    conditions = {c["type"]: c["status"] for c in crd["status"].get("conditions", [])}
    assert conditions.get("Established") == "True", conditions
    assert conditions.get("NonStructuralSchema") is None, crd["status"]["conditions"]


# (id, template, text the API server's refusal must contain; '' means accepted)
CASES = [
    ("full-template", FULL_TEMPLATE, ""),
    (
        "typo-top-of-pod-spec",
        {"spec": {"contianers": [{"name": "trainer"}]}},
        'unknown field "spec.replicaSpecs.Worker.template.spec.contianers"',
    ),
    (
        "typo-inside-container",
        {"spec": {"containers": [{"name": "trainer", "comand": ["python"]}]}},
        'unknown field "spec.replicaSpecs.Worker.template.spec.containers[0].comand"',
    ),
    (
        "command-not-a-list",
        {"spec": {"containers": [{"name": "trainer", "command": "python"}]}},
        "spec.replicaSpecs.Worker.template.spec.containers[0].command",
    ),
    (
        "bad-quantity",
        {"spec": {"containers": [{"name": "t", "resources": {"limits": {"memory": "64GB"}}}]}},
        "spec.replicaSpecs.Worker.template.spec.containers[0].resources.limits.memory",
    ),
]


@pytest.mark.parametrize(("template", "says"), [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_kubectl_apply_checks_the_template(
    kube: Kube, ns: str, template: dict[str, Any], says: str
) -> None:
    name = f"bert-{uuid.uuid4().hex[:6]}"
    proc = kube.apply(tj(ns, name, template), check=False)
    if not says:
        assert proc.returncode == 0, proc.stderr
        assert "unknown field" not in proc.stderr, proc.stderr  # no Warn-mode warnings either
        stored = kube.get("trainingjob", name, "-n", ns)
        assert stored["spec"]["replicaSpecs"]["Worker"]["template"] == template
    else:
        assert proc.returncode != 0, proc.stdout
        assert says in proc.stderr, proc.stderr
        assert kube.maybe_get("trainingjob", name, "-n", ns) is None


def test_explain_documents_the_template(kube: Kube) -> None:
    out = kube.run("explain", "trainingjob.spec.replicaSpecs.template.spec.containers").stdout
    assert "command" in out and "env" in out and "resources" in out, out
    env = kube.run("explain", "trainingjob.spec.replicaSpecs.template.spec.containers.env").stdout
    assert "valueFrom" in env, env


def test_crds_also_apply_client_side(kube: Kube) -> None:
    """The last-applied annotation of a client-side `kubectl apply` (limit 256 KiB in all)
    holds the whole CRD: the embedded schema keeps it well below."""
    path = Path(repo_root() / "crds" / f"trainop.dev_{CRD.split('.')[0]}.yaml")
    proc = kube.run("apply", "--dry-run=server", "-o", "json", "-f", str(path))
    applied = json.loads(proc.stdout)
    annotation = applied["metadata"]["annotations"][
        "kubectl.kubernetes.io/last-applied-configuration"
    ]
    assert len(annotation) < 256 * 1024


def _example_jobs() -> list[Any]:
    out = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "TrainingJob":
                rel = path.relative_to(EXAMPLES)
                out.append(pytest.param(doc, id=f"{rel}:{doc['metadata']['name']}"))
    return out


@pytest.mark.parametrize("doc", _example_jobs())
def test_every_example_job_applies(kube: Kube, ns: str, doc: dict[str, Any]) -> None:
    doc["metadata"]["namespace"] = ns  # the examples' own namespaces may not exist here
    proc = kube.run("create", "--dry-run=server", "-f", "-", input=json.dumps(doc), check=False)
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr

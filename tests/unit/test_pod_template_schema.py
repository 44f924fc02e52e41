"""Pod templates checked as Kubernetes PodTemplateSpecs: the vendored schema, its structural
conversion (what the TrainingJob CRD embeds), the template validator, and render's exit 2."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from tests.builders import NOW, fleet_snapshot, job
from tests.unit.manifest_helpers import EXAMPLES, FLEET_NODES
from trainop.api import podtemplate
from trainop.api.crdgen import all_crds
from trainop.api.templatecheck import Problem, template_problems
from trainop.cli.main import cli
from trainop.cluster.binaries import KUBERNETES_VERSION
from trainop.planner import InvalidJob, OperatorConfig, check_semantics, parse_spec
from trainop.reconcile import reconcile
from trainop.yamlio import dump_yaml_all

SCHEMA = podtemplate.structural_schema()
POD_SPEC = SCHEMA["properties"]["spec"]
CONTAINER = POD_SPEC["properties"]["containers"]["items"]

# --- the vendored file -----------------------------------------------------------------------


def test_vendored_file_records_source_and_version() -> None:
    data = podtemplate.vendored()
    assert data["kubernetesVersion"] == KUBERNETES_VERSION
    assert f"k8s.io/kubernetes@{KUBERNETES_VERSION}" in data["source"]
    assert data["root"] == podtemplate.ROOT
    assert "io.k8s.api.core.v1.Container" in data["schemas"]
    # Byte-identical to what `trainop generate pod-schema` writes from the same content.
    assert podtemplate.VENDORED.read_text() == podtemplate.dump_vendored(data)


def _upstream_document() -> Path | None:
    """The upstream OpenAPI file in the local Go module cache, when `trainop cluster build`
    (or `go mod download`) has put k8s.io/kubernetes there; else None."""
    go = shutil.which("go")
    if go is None:
        return None
    cache = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True).stdout
    path = (
        Path(cache.strip()) / f"k8s.io/kubernetes@{KUBERNETES_VERSION}" / podtemplate.UPSTREAM_PATH
    )
    return path if cache.strip() and path.is_file() else None


def test_vendored_file_is_what_the_upstream_module_holds() -> None:
    """`trainop generate pod-schema` would write the same bytes (offline: the module cache)."""
    upstream = _upstream_document()
    if upstream is None:
        pytest.skip(f"k8s.io/kubernetes@{KUBERNETES_VERSION} is not in the Go module cache")
    source = f"k8s.io/kubernetes@{KUBERNETES_VERSION} {podtemplate.UPSTREAM_PATH}"
    content = podtemplate.extract(json.loads(upstream.read_text()), KUBERNETES_VERSION, source)
    assert podtemplate.dump_vendored(content) == podtemplate.VENDORED.read_text(), (
        "run `trainop generate pod-schema` then `make generate`"
    )


def _doc(**schemas: Any) -> dict[str, Any]:
    return {"components": {"schemas": schemas}}


def _ref(name: str) -> dict[str, Any]:
    return {"allOf": [{"$ref": f"#/components/schemas/{name}"}]}


def test_extract_takes_the_closure_of_the_root_only() -> None:
    doc = _doc(
        **{
            podtemplate.ROOT: {"type": "object", "properties": {"spec": _ref("A")}},
            "A": {"type": "object", "properties": {"b": {"type": "array", "items": _ref("B")}}},
            "B": {"type": "string"},
            "Unused": {"type": "string"},
        }
    )
    content = podtemplate.extract(doc, "v0.0.1", "test")
    assert sorted(content["schemas"]) == sorted(["A", "B", podtemplate.ROOT])
    assert (content["kubernetesVersion"], content["source"]) == ("v0.0.1", "test")


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        pytest.param(_doc(), "no components.schemas", id="no-root"),
        pytest.param(
            _doc(**{podtemplate.ROOT: {"type": "object", "properties": {"x": _ref("Gone")}}}),
            "Gone is referenced but not defined",
            id="dangling-ref",
        ),
    ],
)
def test_extract_refuses_a_document_without_the_types(doc: dict[str, Any], says: str) -> None:
    with pytest.raises(podtemplate.SchemaSourceError, match=says):
        podtemplate.extract(doc, "v0", "test")


@pytest.mark.parametrize(
    ("doc", "exit_code", "says"),
    [
        pytest.param(
            _doc(
                **{
                    podtemplate.ROOT: {"type": "object", "properties": {"s": _ref("S")}},
                    "S": {"type": "string"},
                }
            ),
            0,
            "wrote ",
            id="refreshed",
        ),
        pytest.param(_doc(), 1, "no components.schemas", id="not-core-v1"),
        pytest.param(
            _doc(**{podtemplate.ROOT: {"oneOf": [{"type": "boolean"}, {"type": "string"}]}}),
            1,
            "cannot express oneOf",
            id="not-structural",
        ),
    ],
)
def test_generate_pod_schema_from_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, doc: dict[str, Any], exit_code: int, says: str
) -> None:
    source = tmp_path / "openapi.json"
    source.write_text(json.dumps(doc))
    target = tmp_path / "vendored.json"
    monkeypatch.setattr(podtemplate, "VENDORED", target)
    result = CliRunner().invoke(cli, ["generate", "pod-schema", "--openapi", str(source)])
    assert result.exit_code == exit_code, result.output
    assert says in result.output
    assert target.exists() is (exit_code == 0)
    if exit_code == 0:
        assert json.loads(target.read_text())["source"] == str(source)


def test_convert_refuses_a_recursive_type() -> None:
    doc = _doc(
        **{podtemplate.ROOT: {"type": "object", "properties": {"self": _ref(podtemplate.ROOT)}}}
    )
    with pytest.raises(podtemplate.SchemaSourceError, match="refers to itself"):
        podtemplate.convert(podtemplate.extract(doc, "v0", "test"))


# --- the structural conversion ----------------------------------------------------------------


def _nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for key, sub in node.get("properties", {}).items():
        yield from _nodes(sub, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}{{}}")


FORBIDDEN = {"$ref", "allOf", "oneOf", "anyOf", "default", "x-kubernetes-list-type", "format"}


def test_converted_schema_is_structural() -> None:
    for path, node in _nodes(SCHEMA):
        assert not FORBIDDEN & set(node), f"{path}: {sorted(FORBIDDEN & set(node))}"
        typed = (
            node.get("type")
            or node.get("x-kubernetes-int-or-string")
            or node.get("x-kubernetes-preserve-unknown-fields")
        )
        assert typed, f"{path}: no type"
        if path.endswith(("[]", "{}")):
            continue  # list items and map values: their field has the description
        assert node.get("description"), f"{path}: no description (kubectl explain shows it)"


QUANTITY = {"x-kubernetes-int-or-string": True, "pattern": podtemplate.QUANTITY_PATTERN}

# (id, path of property names from the template, the schema keys expected there)
CONVERTED = [
    ("container-command", "spec.containers[].command", {"type": "array"}),
    ("env-name-required", "spec.containers[].env[]", {"required": ["name"]}),
    ("quantity-int-or-string", "spec.containers[].resources.limits{}", QUANTITY),
    (
        "probe-port-int-or-string",
        "spec.containers[].livenessProbe.httpGet.port",
        {"x-kubernetes-int-or-string": True},
    ),
    ("labels-map", "metadata.labels{}", {"type": "string"}),
    (
        "fieldsv1-opaque",
        "metadata.managedFields[].fieldsV1",
        {"x-kubernetes-preserve-unknown-fields": True},
    ),
    ("containers-filled-by-trainop", "spec", {"type": "object"}),
]


@pytest.mark.parametrize(("path", "want"), [pytest.param(p, w, id=i) for i, p, w in CONVERTED])
def test_converted_schema_at(path: str, want: dict[str, Any]) -> None:
    node = dict(_nodes(SCHEMA))["." + path]
    assert {k: node.get(k) for k in want} == want


def test_required_fields_trainop_fills_are_not_required() -> None:
    assert "containers" not in POD_SPEC.get("required", [])
    assert "name" not in CONTAINER.get("required", [])


def test_crd_embeds_the_schema_under_every_role() -> None:
    tj = next(c for c in all_crds() if c["spec"]["names"]["kind"] == "TrainingJob")
    root = tj["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    template = root["properties"]["spec"]["properties"]["replicaSpecs"]["additionalProperties"][
        "properties"
    ]["template"]
    assert template["properties"] == SCHEMA["properties"]
    assert "merged into every generated pod" in template["description"]
    assert "x-kubernetes-preserve-unknown-fields" not in template


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("500m", True),
        ("2Gi", True),
        ("1.5", True),
        ("4", True),
        ("1e3", True),
        (".5", True),
        ("+1k", True),
        ("1Gx", False),
        ("", False),
        ("abc", False),
        ("1.5.5", False),
        ("2 Gi", False),
    ],
)
def test_quantity_pattern(value: str, ok: bool) -> None:
    assert bool(re.match(podtemplate.QUANTITY_PATTERN, value)) is ok


# --- the validator ---------------------------------------------------------------------------

FULL_TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"team": "nlp"}, "annotations": {"a.example.com/x": "1"}},
    "spec": {
        "serviceAccountName": "trainer",
        "nodeSelector": {"pool": "gpu"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        },
        "securityContext": {"runAsUser": 1000, "fsGroup": 1000},
        "initContainers": [{"name": "fetch", "image": "busybox", "args": ["sh", "-c", "true"]}],
        "containers": [
            {
                "name": "trainer",
                "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "command": ["torchrun"],
                "args": ["/workspace/train.py"],
                "env": [
                    {"name": "A", "value": "1"},
                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                ],
                "envFrom": [{"configMapRef": {"name": "settings"}}],
                "ports": [{"containerPort": 8080, "name": "http"}],
                "resources": {"limits": {"cpu": 4, "memory": "64Gi"}, "requests": {"cpu": "500m"}},
                "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 5},
                "livenessProbe": {"tcpSocket": {"port": 8080}},
                "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
                "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
            }
        ],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "cache", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
        ],
    },
}


def _env(**entry: Any) -> dict[str, Any]:
    return {
        "spec": {"containers": [{"name": "trainer", "env": [{"name": "A", "value": "1"}, entry]}]}
    }


def _container(**fields: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "trainer", **fields}]}}


# (id, template, the first problem or None when valid)
VALIDATOR_CASES: list[tuple[str, Any, Problem | None]] = [
    ("valid-full-template", FULL_TEMPLATE, None),
    ("valid-empty", {}, None),
    ("valid-no-containers", {"spec": {"nodeSelector": {"a": "b"}}}, None),
    ("valid-null-value", _container(resources=None), None),
    (
        "typo-top-of-pod-spec",
        {"spec": {"contianers": [{"name": "trainer"}]}},
        Problem("spec.contianers", 'unknown field; did you mean "containers"?'),
    ),
    (
        "typo-inside-container",
        _container(comand=["python"]),
        Problem("spec.containers[0].comand", 'unknown field; did you mean "command"?'),
    ),
    (
        "typo-in-env-entry",
        _env(name="B", valu="2"),
        Problem("spec.containers[0].env[1].valu", 'unknown field; did you mean "value"?'),
    ),
    (
        "typo-in-metadata",
        {"metadata": {"lables": {"a": "b"}}},
        Problem("metadata.lables", 'unknown field; did you mean "labels"?'),
    ),
    (
        "unknown-without-near-name",
        _container(gpuMemoryFraction=0.5),
        Problem(
            "spec.containers[0].gpuMemoryFraction",
            "unknown field: not in the Kubernetes PodTemplateSpec here; remove it or fix its name",
        ),
    ),
    (
        "wrong-type-string-for-list",
        _container(command="python train.py"),
        Problem("spec.containers[0].command", "must be a list, got a string"),
    ),
    (
        "env-without-name",
        _env(value="2"),
        Problem("spec.containers[0].env[1].name", "required: this field must be set"),
    ),
    (
        "bad-quantity",
        _container(resources={"limits": {"memory": "64GB"}}),
        Problem(
            "spec.containers[0].resources.limits.memory",
            '\'64GB\' is not a quantity: write e.g. "500m", "2Gi", "1.5" or 4',
        ),
    ),
    (
        "float-quantity",
        _container(resources={"requests": {"cpu": 0.5}}),
        Problem(
            "spec.containers[0].resources.requests.cpu",
            'must be an integer or a string (a quantity such as "500m" or "2Gi"), got a number',
        ),
    ),
    ("template-not-an-object", ["spec"], Problem("", "must be an object, got a list")),
]


@pytest.mark.parametrize(
    ("template", "want"), [pytest.param(t, w, id=i) for i, t, w in VALIDATOR_CASES]
)
def test_template_problems(template: Any, want: Problem | None) -> None:
    problems = template_problems(template)
    assert (problems[0] if problems else None) == want


def test_every_problem_is_reported_in_document_order() -> None:
    template = {"spec": {"contianers": [], "containers": [{"name": "t", "comand": []}]}}
    assert [p.path for p in template_problems(template)] == [
        "spec.contianers",
        "spec.containers[0].comand",
    ]


# --- the one place a job is checked: check_semantics (render and the operator) -----------------


def test_check_semantics_names_the_field_from_the_job() -> None:
    body = job("bert").workers(2, 8, {"spec": {"containers": [{"name": "t", "comand": ["x"]}]}})
    with pytest.raises(InvalidJob) as exc:
        check_semantics(parse_spec(body.build()))
    assert exc.value.field == "spec.replicaSpecs.Worker.template.spec.containers[0].comand"
    assert exc.value.detail == 'unknown field; did you mean "command"?'


def test_operator_marks_the_job_invalid_and_creates_nothing() -> None:
    body = job("bert").workers(2, 8, {"spec": {"containers": [{"name": "t", "comand": ["x"]}]}})
    acts = reconcile(body.build(), [], fleet_snapshot, OperatorConfig(), NOW)
    assert acts.status["phase"] == "Invalid"
    invalid = next(x for x in acts.status["conditions"] if x["type"] == "Invalid")
    assert invalid["message"] == (
        "spec.replicaSpecs.Worker.template.spec.containers[0].comand: unknown field; "
        'did you mean "command"?'
    )
    assert not acts.create


def test_render_exits_2_naming_the_misspelt_field(tmp_path: Path) -> None:
    body = job("bert", version=None, cuda=None).workers(2, 8, {"spec": {"contianers": []}})
    path = tmp_path / "job.yaml"
    path.write_text(dump_yaml_all([body.build()]))
    result = CliRunner().invoke(cli, ["render", str(path), "--nodes", str(FLEET_NODES)])
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        "error: spec.replicaSpecs.Worker.template.spec.contianers: unknown field; "
        'did you mean "containers"?\n'
    )
    assert result.stdout == ""


def _example_templates() -> Iterator[Any]:
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "TrainingJob":
                for role, rs in doc["spec"]["replicaSpecs"].items():
                    name = f"{path.relative_to(EXAMPLES)}:{doc['metadata']['name']}:{role}"
                    yield pytest.param(rs.get("template", {}), id=name)


@pytest.mark.parametrize("template", list(_example_templates()))
def test_every_example_template_is_valid(template: Any) -> None:
    assert template_problems(template) == []

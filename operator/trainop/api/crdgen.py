"""Generates the CustomResourceDefinitions from the pydantic models (structural OpenAPI v3 schemas)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from trainop.api import constants as c
from trainop.api.podtemplate import structural_schema as pod_template_schema

# Keywords a structural schema may carry; pydantic's others (title, $defs, ...) are dropped.
_KEEP = {
    "type",
    "description",
    "default",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "items",
    "properties",
    "required",
    "additionalProperties",
    "format",
    "nullable",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
}


def _resolve(node: Any, defs: dict[str, Any]) -> Any:  # noqa: C901, PLR0912 - one branch per JSON Schema construct pydantic emits
    """Inline $refs, turn `anyOf [X, null]` into X (optional fields), keep structural keywords."""
    if isinstance(node, list):
        return [_resolve(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = copy.deepcopy(defs[node["$ref"].split("/")[-1]])
        extra = {k: v for k, v in node.items() if k != "$ref"}
        target.update(extra)
        return _resolve(target, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express anyOf {node['anyOf']} structurally")
        merged = {**{k: v for k, v in node.items() if k != "anyOf"}, **options[0]}
        if merged.get("default", 0) is None:
            del merged["default"]  # null defaults mean "unset", which is the API's absence
        return _resolve(merged, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in _KEEP:
            continue
        if key == "properties":
            out[key] = {k: _resolve(v, defs) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _resolve(value, defs)
        elif key == "enum" and "type" not in node:
            out[key] = value
            out["type"] = "string"
        else:
            out[key] = value
    # OpenAPI v3.0 (what CRDs speak) writes exclusive bounds as booleans beside min/max.
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(out.get(bound), int | float) and not isinstance(out[bound], bool):
            out[plain] = out[bound]
            out[bound] = True
    if "const" in node:  # single-value Literal
        out["enum"] = [node["const"]]
        out.setdefault("type", "string")
    if out.get("x-kubernetes-preserve-unknown-fields"):
        out["type"] = "object"
        out.pop("additionalProperties", None)
    if (
        out.get("type") == "object"
        and "properties" not in out
        and "additionalProperties" not in out
    ):
        out["x-kubernetes-preserve-unknown-fields"] = True
    if out.get("additionalProperties") is False:
        del out["additionalProperties"]
    return out


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return dict(_resolve(raw, raw.get("$defs", {})))


@dataclass(frozen=True)
class CrdSpec:
    """What one CRD needs beyond its models."""

    kind: str
    plural: str
    singular: str
    scope: str
    spec_model: type[BaseModel]
    status_model: type[BaseModel] | None
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ("trainop",)
    printer_columns: tuple[dict[str, Any], ...] = ()
    spec_validations: tuple[dict[str, str], ...] = ()
    root_validations: tuple[dict[str, str], ...] = ()
    description: str = ""
    spec_required: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    # Schemas a model field only names (a dict of Kubernetes' own type) put in its place:
    # the path of property names under spec ("*" for a map's values), and the schema.
    embedded: tuple[tuple[tuple[str, ...], Callable[[], dict[str, Any]]], ...] = ()
    # Spec fields the model requires (the planner reads a resolved spec) that the API
    # server must not: a TrainingJob with spec.runtimeRef may take them from its runtime.
    optional_fields: tuple[str, ...] = ()
    # False: no `default` under spec. A runtime's defaults apply only to fields the job left
    # unset, and an API server that filled the model's defaults in would set them all; the
    # pydantic model applies the same defaults when the operator parses the merged spec.
    spec_defaults: bool = True


def _strip_defaults(node: Any) -> None:
    if isinstance(node, dict):
        node.pop("default", None)
        for value in node.values():
            _strip_defaults(value)
    elif isinstance(node, list):
        for value in node:
            _strip_defaults(value)


def _embed(spec_schema: dict[str, Any], path: tuple[str, ...], schema: dict[str, Any]) -> None:
    """Replace the schema at `path` by `schema`, keeping the field's own description."""
    node = spec_schema
    for step in path[:-1]:
        node = node["additionalProperties"] if step == "*" else node["properties"][step]
    field_schema = node["properties"][path[-1]]  # KeyError: the model no longer has the field
    description = field_schema.get("description")
    field_schema.clear()
    field_schema.update(schema)
    if description:
        field_schema["description"] = description


def build_crd(spec: CrdSpec) -> dict[str, Any]:
    spec_schema = model_schema(spec.spec_model)
    if not spec.spec_defaults:
        _strip_defaults(spec_schema)
    if spec.optional_fields:
        required = [f for f in spec_schema.get("required", []) if f not in spec.optional_fields]
        if required:
            spec_schema["required"] = required
        else:
            spec_schema.pop("required", None)
    for path, schema in spec.embedded:
        _embed(spec_schema, path, schema())
    spec_schema["description"] = (
        spec.spec_model.__doc__.strip().splitlines()[0]
        if (spec.spec_model.__doc__)
        else f"Desired state of the {spec.kind}."
    )
    if spec.spec_validations:
        spec_schema["x-kubernetes-validations"] = list(spec.spec_validations)
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string", "description": "trainop.dev/v1alpha1"},
        "kind": {"type": "string", "description": spec.kind},
        "metadata": {"type": "object"},
        "spec": spec_schema,
    }
    if spec.status_model is not None:
        status = model_schema(spec.status_model)
        status["description"] = f"Observed state of the {spec.kind}, written by the operator."
        properties["status"] = status
    root: dict[str, Any] = {
        "type": "object",
        "description": spec.description,
        "properties": properties,
    }
    if spec.spec_required:
        root["required"] = ["spec"]
    if spec.root_validations:
        root["x-kubernetes-validations"] = list(spec.root_validations)
    version: dict[str, Any] = {
        "name": c.VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": root},
    }
    if spec.status_model is not None:
        version["subresources"] = {"status": {}}
    if spec.printer_columns:
        version["additionalPrinterColumns"] = list(spec.printer_columns)
    names: dict[str, Any] = {
        "kind": spec.kind,
        "listKind": f"{spec.kind}List",
        "plural": spec.plural,
        "singular": spec.singular,
        "categories": list(spec.categories),
    }
    if spec.short_names:
        names["shortNames"] = list(spec.short_names)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{spec.plural}.{c.GROUP}",
            "labels": {"app.kubernetes.io/name": "trainop", "app.kubernetes.io/part-of": "trainop"},
        },
        "spec": {"group": c.GROUP, "names": names, "scope": spec.scope, "versions": [version]},
    }


def _trainingqueue_crd(age: dict[str, Any]) -> CrdSpec:
    from trainop.api.trainingqueue import (
        ROOT_VALIDATIONS,
        SPEC_VALIDATIONS,
        TrainingQueueSpec,
        TrainingQueueStatus,
    )

    return CrdSpec(
        kind="TrainingQueue",
        plural="trainingqueues",
        singular="trainingqueue",
        scope="Cluster",
        spec_model=TrainingQueueSpec,
        status_model=TrainingQueueStatus,
        short_names=("tq",),
        description="A tenant queue: which namespaces it serves, GPU quotas per product, "
        "cohort borrowing or a parent queue, fair-share weight and tenant policy.",
        spec_validations=tuple(SPEC_VALIDATIONS),
        root_validations=tuple(ROOT_VALIDATIONS),
        printer_columns=(
            {
                "name": "Active",
                "type": "string",
                "jsonPath": '.status.conditions[?(@.type=="Active")].status',
            },
            {"name": "Cohort", "type": "string", "jsonPath": ".spec.cohort"},
            {"name": "Parent", "type": "string", "jsonPath": ".spec.parent"},
            {"name": "Level", "type": "integer", "jsonPath": ".status.level"},
            {"name": "Usage", "type": "string", "jsonPath": ".status.summary"},
            {"name": "Weight", "type": "number", "jsonPath": ".spec.weight"},
            {"name": "Admitted", "type": "integer", "jsonPath": ".status.admittedJobs"},
            {"name": "Pending", "type": "integer", "jsonPath": ".status.pendingJobs"},
            age,
        ),
    )


def _runtime_crds(age: dict[str, Any]) -> tuple[CrdSpec, CrdSpec]:
    from trainop.api.trainingruntime import RUNTIME_SPEC_VALIDATIONS, TrainingRuntimeSpec

    columns = (
        {"name": "Framework", "type": "string", "jsonPath": ".spec.framework.name"},
        {"name": "Version", "type": "string", "jsonPath": ".spec.framework.version"},
        {"name": "CUDA", "type": "string", "jsonPath": ".spec.cuda"},
        {"name": "Image", "type": "string", "jsonPath": ".spec.image", "priority": 1},
        age,
    )
    common: dict[str, Any] = {
        "spec_model": TrainingRuntimeSpec,
        "status_model": None,
        "spec_validations": tuple(RUNTIME_SPEC_VALIDATIONS),
        "embedded": ((("replicaSpecs", "*", "template"), pod_template_schema),),
        "printer_columns": columns,
        "spec_defaults": False,
    }
    what = (
        "framework, CUDA, image, a pod template per role and defaults for placement, "
        "network, run policy, progress, checkpoint and elastic settings, which a TrainingJob "
        "names in spec.runtimeRef (docs/runtimes.md)."
    )
    return (
        CrdSpec(
            kind="ClusterTrainingRuntime",
            plural="clustertrainingruntimes",
            singular="clustertrainingruntime",
            scope="Cluster",
            short_names=("ctr",),
            description="A cluster-wide training runtime: " + what,
            **common,
        ),
        CrdSpec(
            kind="TrainingRuntime",
            plural="trainingruntimes",
            singular="trainingruntime",
            scope="Namespaced",
            short_names=("tr",),
            description="A training runtime for the jobs of its namespace: " + what,
            **common,
        ),
    )


def all_crd_specs() -> list[CrdSpec]:
    # Imported here so `crdgen` stays importable while a model module is being edited.
    from trainop.api.fabricprofile import FabricProfileSpec
    from trainop.api.trainingjob import (
        TRAININGJOB_ROOT_VALIDATIONS,
        TRAININGJOB_SPEC_VALIDATIONS,
        TrainingJobSpec,
        TrainingJobStatus,
    )

    age = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    return [
        CrdSpec(
            kind="TrainingJob",
            plural="trainingjobs",
            singular="trainingjob",
            scope="Namespaced",
            spec_model=TrainingJobSpec,
            status_model=TrainingJobStatus,
            short_names=("tj",),
            description="A distributed GPU training job: a gang of pods placed together along "
            "the network topology, wired for its framework, admitted through a queue.",
            spec_validations=tuple(TRAININGJOB_SPEC_VALIDATIONS),
            root_validations=tuple(TRAININGJOB_ROOT_VALIDATIONS),
            # The real PodTemplateSpec (trainop.api.podtemplate), as Kubeflow's CRDs embed it:
            # the API server refuses unknown fields and `kubectl explain` documents them.
            embedded=((("replicaSpecs", "*", "template"), pod_template_schema),),
            optional_fields=("framework", "replicaSpecs"),
            spec_defaults=False,
            # The framework as the operator resolved it (the job's own or its runtime's):
            # .spec.framework.name is empty for a job that takes it from its runtime.
            printer_columns=(
                {"name": "Framework", "type": "string", "jsonPath": ".status.framework"},
                {
                    "name": "Runtime",
                    "type": "string",
                    "jsonPath": ".spec.runtimeRef.name",
                    "priority": 1,
                },
                {"name": "GPUs", "type": "integer", "jsonPath": ".status.gpus"},
                {"name": "Queue", "type": "string", "jsonPath": ".status.queue"},
                {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                {"name": "Progress", "type": "string", "jsonPath": ".status.progress.summary"},
                # -o wide: the placement level (clique: one NVLink domain across trays) and
                # whether its IMEX ComputeDomain is set up (docs/mnnvl.md)
                {
                    "name": "Placement",
                    "type": "string",
                    "jsonPath": ".status.placement.level",
                    "priority": 1,
                },
                {
                    "name": "IMEX",
                    "type": "string",
                    "jsonPath": ".status.placement.imex",
                    "priority": 1,
                },
                age,
            ),
        ),
        _trainingqueue_crd(age),
        *_runtime_crds(age),
        CrdSpec(
            kind="FabricProfile",
            plural="fabricprofiles",
            singular="fabricprofile",
            scope="Cluster",
            spec_model=FabricProfileSpec,
            status_model=None,
            short_names=("fp",),
            description="How NCCL reaches a kind of node: fabric, RDMA resource, HCAs in GPU "
            "order, RoCE GID index, SHARP/NVLS, extra env.",
            printer_columns=(
                {"name": "Fabric", "type": "string", "jsonPath": ".spec.fabric"},
                {"name": "RDMA", "type": "string", "jsonPath": ".spec.rdmaResource"},
                {"name": "Priority", "type": "integer", "jsonPath": ".spec.priority"},
                age,
            ),
        ),
    ]


def all_crds() -> list[dict[str, Any]]:
    return [build_crd(s) for s in all_crd_specs()]

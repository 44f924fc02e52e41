"""The Kubernetes PodTemplateSpec schema: vendored from upstream, converted to a structural schema.

What `spec.replicaSpecs.<role>.template` may hold is the real `core/v1` PodTemplateSpec of
the Kubernetes version trainop builds (`cluster.binaries.KUBERNETES_VERSION`). Its OpenAPI v3
components (PodTemplateSpec and every type it reaches) are checked in verbatim as
`data/podtemplatespec-v1.36.json`, with their source and version, so that generating the
CRDs is deterministic and offline. `extract` makes that file from an upstream OpenAPI v3
document (`trainop generate pod-schema` refreshes it); `structural_schema` turns it into the
structural schema a CRD embeds.

Neighbours: `crdgen` embeds `structural_schema()` in the TrainingJob CRD, and `templatecheck`
validates templates against the same schema (for `trainop render` and the operator), so the
API server, render and the operator agree on which fields exist.

Sources:
  upstream document  https://github.com/kubernetes/kubernetes/blob/master/api/openapi-spec/v3/api__v1_openapi.json
  structural schemas https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#specifying-a-structural-schema
  quantities         https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

ROOT = "io.k8s.api.core.v1.PodTemplateSpec"
VENDORED = Path(__file__).parent / "data" / "podtemplatespec-v1.36.json"
UPSTREAM_PATH = "api/openapi-spec/v3/api__v1_openapi.json"

# A Kubernetes quantity ("500m", "2Gi", "1e3", 4): an optional sign, a decimal number, then
# a binary-SI suffix (Ki..Ei), a decimal-SI suffix (n u m k M G T P E) or a decimal exponent.
# Written in the subset of RE2 that both the API server and Python's re read the same way.
QUANTITY_PATTERN = (
    r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)))?$"
)

# Required upstream, but filled in by trainop when the template leaves them out: a template
# without containers gets the trainer container, and the first container its name
# (`manifests.build_pod`). Every other upstream `required` stays.
_FILLED_BY_TRAINOP = {
    "io.k8s.api.core.v1.PodSpec": {"containers"},
    "io.k8s.api.core.v1.Container": {"name"},
}

# Longest description kept: the first sentence, cut here. Full upstream text would make the
# TrainingJob CRD several times larger for `kubectl explain` prose alone.
_DESCRIPTION_MAX = 160


class SchemaSourceError(ValueError):
    """The upstream document lacks what trainop needs (not a Kubernetes core/v1 OpenAPI v3)."""


# --- the vendored file ---------------------------------------------------------------------
def _refs(node: Any) -> list[str]:
    if isinstance(node, Mapping):
        out = [node["$ref"].rsplit("/", 1)[-1]] if "$ref" in node else []
        for value in node.values():
            out += _refs(value)
        return out
    if isinstance(node, list):
        return [r for item in node for r in _refs(item)]
    return []


def extract(document: Mapping[str, Any], version: str, source: str) -> dict[str, Any]:
    """The vendored file's content: PodTemplateSpec and every component it reaches, verbatim."""
    components = (document.get("components") or {}).get("schemas") or {}
    if ROOT not in components:
        raise SchemaSourceError(f"{source}: no components.schemas[{ROOT!r}]")
    wanted: dict[str, Any] = {}
    todo = [ROOT]
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        if name not in components:
            raise SchemaSourceError(f"{source}: {name} is referenced but not defined")
        wanted[name] = components[name]
        todo += _refs(components[name])
    return {
        "kubernetesVersion": version,
        "source": source,
        "root": ROOT,
        "schemas": dict(sorted(wanted.items())),
    }


def dump_vendored(content: Mapping[str, Any]) -> str:
    return json.dumps(content, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


@cache
def vendored() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(VENDORED.read_text())
    return data


# --- conversion to a structural schema -----------------------------------------------------
def _description(text: str) -> str:
    first = text.strip().split("\n")[0]
    match = re.search(r"\.(\s|$)", first)
    if match:
        first = first[: match.start() + 1]
    if len(first) > _DESCRIPTION_MAX:
        first = first[: _DESCRIPTION_MAX - 3].rstrip() + "..."
    return first


def _scalar_union(name: str, node: Mapping[str, Any]) -> dict[str, Any]:
    """oneOf of scalar types -> int-or-string (IntOrString), with a pattern for Quantity."""
    types = {o.get("type") for o in node["oneOf"]}
    if types == {"integer", "string"}:
        return {"x-kubernetes-int-or-string": True}
    if types == {"number", "string"}:  # a Quantity: CRDs can only say integer or string
        return {"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN}
    raise SchemaSourceError(f"{name}: cannot express oneOf {sorted(map(str, types))} structurally")


class _Converter:
    """Inlines $refs of the vendored components and keeps what a structural schema allows."""

    def __init__(self, schemas: Mapping[str, Any]) -> None:
        self.schemas = schemas

    def component(self, name: str, stack: tuple[str, ...]) -> dict[str, Any]:
        if name in stack:
            raise SchemaSourceError(f"{name} refers to itself ({' > '.join(stack)}): not inlinable")
        node = self.schemas[name]
        out = _scalar_union(name, node) if "oneOf" in node else self.node(node, (*stack, name))
        required = [r for r in out.get("required", []) if r not in _FILLED_BY_TRAINOP.get(name, ())]
        if required:
            out["required"] = required
        else:
            out.pop("required", None)
        return out

    def node(self, node: Mapping[str, Any], stack: tuple[str, ...]) -> dict[str, Any]:
        ref = node.get("$ref") or _single_ref(node.get("allOf"))
        if ref:
            inlined = self.component(ref.rsplit("/", 1)[-1], stack)
            if node.get("description"):  # the field's own text beats its type's
                inlined["description"] = _description(node["description"])
            return inlined
        out: dict[str, Any] = {}
        if "type" in node:
            out["type"] = node["type"]
        if node.get("description"):
            out["description"] = _description(node["description"])
        if node.get("format") == "int-or-string":
            out.pop("type", None)
            out["x-kubernetes-int-or-string"] = True
        if "properties" in node:
            out["properties"] = {
                key: self.node(sub, stack) for key, sub in sorted(node["properties"].items())
            }
        if isinstance(node.get("items"), Mapping):
            out["items"] = self.node(node["items"], stack)
        if isinstance(node.get("additionalProperties"), Mapping):
            out["additionalProperties"] = self.node(node["additionalProperties"], stack)
        if node.get("required"):
            out["required"] = sorted(node["required"])
        if (
            out.get("type") == "object"
            and "properties" not in out
            and "additionalProperties" not in out
        ):
            out["x-kubernetes-preserve-unknown-fields"] = True  # opaque JSON (FieldsV1)
        return out


def _single_ref(all_of: Any) -> str | None:
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], Mapping):
        ref = all_of[0].get("$ref")
        return ref if isinstance(ref, str) else None
    return None


def convert(content: Mapping[str, Any]) -> dict[str, Any]:
    """The structural schema of the vendored PodTemplateSpec: $refs inlined; defaults,
    list/map merge hints, formats and unions dropped (a CRD would apply the defaults to the
    stored TrainingJob; the pod's own validation still applies when trainop creates it)."""
    return _Converter(content["schemas"]).component(content["root"], ())


@cache
def _structural() -> dict[str, Any]:
    return convert(vendored())


def structural_schema() -> dict[str, Any]:
    """The PodTemplateSpec schema the TrainingJob CRD embeds and templates are checked against."""
    return copy.deepcopy(_structural())


def shared_schema() -> Mapping[str, Any]:
    """The same schema, not copied: for readers that never modify it (`templatecheck`)."""
    return _structural()


__all__ = [
    "QUANTITY_PATTERN",
    "ROOT",
    "UPSTREAM_PATH",
    "VENDORED",
    "SchemaSourceError",
    "convert",
    "dump_vendored",
    "extract",
    "shared_schema",
    "structural_schema",
    "vendored",
]

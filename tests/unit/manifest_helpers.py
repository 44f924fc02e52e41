"""Readers of what the operator rendered (pods, env, pins) and of the shipped examples.

Builders of the objects themselves live in tests/builders.py.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from trainop.api import constants as c

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FLEET_NODES = EXAMPLES / "fleet-nodes.yaml"


def example(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((EXAMPLES / name).read_text())
    assert isinstance(doc, dict)
    return doc


def job_examples() -> list[str]:
    """Example files holding TrainingJobs (fleet-nodes.yaml and other kinds left out)."""
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        if docs and all(d.get("kind") == "TrainingJob" for d in docs):
            out.append(path.name)
    return out


def pods_of(objects: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [o for o in objects if o["kind"] == "Pod"]


def env_of(pod: Mapping[str, Any], container: int = 0) -> dict[str, str]:
    env = pod["spec"]["containers"][container].get("env") or []
    return {e["name"]: e.get("value") for e in env}


def pinned_node(pod: Mapping[str, Any]) -> str | None:
    """The node every nodeSelectorTerm pins the pod to (None when not pinned); asserts that
    all terms agree, since terms are OR-ed and an unpinned term would free the pod."""
    aff = (pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}
    req = aff.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not req:
        return None
    pins = set()
    for term in req["nodeSelectorTerms"]:
        hosts = [e for e in term["matchExpressions"] if e["key"] == c.LABEL_HOSTNAME]
        assert len(hosts) == 1, term
        assert hosts[0]["operator"] == "In" and len(hosts[0]["values"]) == 1
        pins.add(hosts[0]["values"][0])
    assert len(pins) == 1, pins
    return pins.pop()


def walk(obj: Any) -> Iterator[Any]:
    """Every container and scalar in a nested structure, depth first."""
    yield obj
    if isinstance(obj, Mapping):
        for v in obj.values():
            yield from walk(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from walk(v)

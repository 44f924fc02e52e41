"""Readers of what the operator rendered (pods, env, pins) and of the shipped examples.

Builders of the objects themselves live in tests/builders.py.
"""

from __future__ import annotations

import re
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


# --- issue 38: every address trainop writes into a pod resolves inside that pod ----------
# The names the kubelet writes into a pod's /etc/hosts are its hostname and
# `<hostname>.<subdomain>.<ns>.svc.<cluster domain>` (never the `.svc` name without the
# cluster domain); the cluster DNS answers `<hostname>.<subdomain>.<ns>.svc` (completed by
# the resolver's search domains) only when a headless Service named `<subdomain>` selects
# the pod, and before the pod is Ready only with publishNotReadyAddresses
# (https://kubernetes.io/docs/concepts/services-networking/dns-pod-service/). A pod on the
# host's network has the node's hostname and /etc/hosts, and the cluster DNS only with
# dnsPolicy ClusterFirstWithHostNet. This oracle is written from those rules alone, not
# from trainop's own host naming.
_HOST_TOKEN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")


def _texts_of(pod: Mapping[str, Any], config_maps: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Every env value of the pod's containers and every file of the ConfigMaps it mounts."""
    spec = pod["spec"]
    ctrs = [*(spec.get("initContainers") or []), *spec["containers"]]
    texts = [str(e.get("value", "")) for ctr in ctrs for e in ctr.get("env") or []]
    for vol in spec.get("volumes") or []:
        cm = config_maps.get((vol.get("configMap") or {}).get("name", ""))
        texts += [str(v) for v in ((cm or {}).get("data") or {}).values()]
    return texts


def unresolvable_hosts(objects: Sequence[Mapping[str, Any]]) -> list[str]:
    """'<pod>: <name> (<why>)' for each name of a gang member (`<job>-<role>-<n>`, alone or
    with a domain) that a rendered pod's env or mounted config files carry and that the pod
    could not resolve; [] when every one resolves."""
    pods = pods_of(objects)
    if not pods:
        return []
    ns = pods[0]["metadata"]["namespace"]
    job = pods[0]["metadata"]["labels"][c.LABEL_JOB_NAME]
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    config_maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    member = re.compile(rf"{re.escape(job)}-[a-z0-9]+-\d+(?:\.[A-Za-z0-9.-]+)?")
    in_dns: set[str] = set()
    for p in pods:
        sub = p["spec"].get("subdomain")
        svc = (services.get(sub) or {}).get("spec") or {}
        labels = p["metadata"].get("labels") or {}
        if (
            svc.get("clusterIP") == "None"
            and svc.get("publishNotReadyAddresses")
            and svc.get("selector")
            and all(labels.get(k) == v for k, v in svc["selector"].items())
        ):
            in_dns.add(f"{p['spec'].get('hostname') or p['metadata']['name']}.{sub}.{ns}.svc")
    problems = []
    for p in pods:
        spec, name = p["spec"], p["metadata"]["name"]
        host_net = bool(spec.get("hostNetwork"))
        own = set() if host_net else {spec.get("hostname") or name}
        dns = not host_net or spec.get("dnsPolicy") == "ClusterFirstWithHostNet"
        for text in _texts_of(p, config_maps):
            for tok in _HOST_TOKEN.findall(text):
                if not member.fullmatch(tok):
                    continue
                if tok in own or (dns and tok in in_dns):
                    continue
                why = "no Service serves it" if tok.endswith(".svc") else "not this pod's name"
                problems.append(f"{name}: {tok} ({why})")
    return sorted(set(problems))

"""Checks a TrainingJob must pass before anything is created: generated names and references.

Neighbours: `reconcile` calls `check_names` on every valid spec and `check_priority_class`
before it starts a gang; `queueing.cluster` calls both so a job that can never be created
never takes an admission slot. Both raise `planner.InvalidJob` naming the field and the fix,
which reconcile turns into phase Invalid, a condition and a Warning Event, with nothing
created. Pure: the PriorityClasses the cluster has are passed in by the caller.

The names come from `manifests` / `frameworks` / `dra`:
  pods and their hostnames  <job>-<role>-<index>   DNS-1123 label, at most 63 characters
  headless Service, pod subdomain  <job>           DNS-1035 label, at most 63 characters
  ConfigMap <job>-config, SSH Secret <job>-ssh-<uid digest>, ResourceClaimTemplate <job>-<role>-gpu-nic
                                                   DNS-1123 subdomain, at most 253 characters
  label trainop.dev/job-name = <job>               label value, at most 63 characters
  label kueue.x-k8s.io/queue-name = spec.queue      (Kueue mode) label value, at most 63
Rules: https://kubernetes.io/docs/concepts/overview/working-with-objects/names/ and
https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from trainop.api.trainingjob import TrainingJobSpec
from trainop.dra import template_name
from trainop.frameworks import config_map_name, ssh_secret_name
from trainop.manifests import pod_name
from trainop.planner import (
    KUEUE_QUEUE_LABEL,
    InvalidJob,
    OperatorConfig,
    check_semantics,
    parse_spec,
    version_memo,
)

DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253
LABEL_VALUE_MAX = 63
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")

INVALID_NAME = "InvalidName"
MISSING_PRIORITY_CLASS = "PriorityClassNotFound"


def longest_pod_name(job: str, spec: TrainingJobSpec) -> str:
    """The longest `<job>-<role>-<index>` the job generates (its last replica index)."""
    names = [pod_name(job, role, r.replicas - 1) for role, r in spec.replica_specs.items()]
    return max(names, key=lambda n: (len(n), n))


def max_job_name_length(spec: TrainingJobSpec) -> int:
    """How long metadata.name may be for this spec: the longest pod name must fit 63."""
    return DNS_LABEL_MAX - (len(longest_pod_name("", spec)))


def check_names(job: str, spec: TrainingJobSpec) -> None:
    """InvalidJob (reason InvalidName) when an object trainop would create gets a bad name."""
    if not _DNS1035.match(job) or len(job) > DNS_LABEL_MAX:
        raise InvalidJob(
            "metadata.name",
            f"{job!r} cannot name the job's headless Service and pod subdomain: it must be a "
            "DNS-1035 label (lower-case letters, digits and '-', starting with a letter, no "
            f"dots, at most {DNS_LABEL_MAX} characters): rename the TrainingJob",
            reason=INVALID_NAME,
        )
    longest = longest_pod_name(job, spec)
    if len(longest) > DNS_LABEL_MAX:
        role = max(
            spec.replica_specs,
            key=lambda r: len(pod_name(job, r, spec.replica_specs[r].replicas - 1)),
        )
        raise InvalidJob(
            "metadata.name",
            f"pod name {longest} has {len(longest)} characters, more than the {DNS_LABEL_MAX} "
            f"a pod hostname may have (from spec.replicaSpecs.{role}): shorten metadata.name "
            f"to at most {max_job_name_length(spec)} characters",
            reason=INVALID_NAME,
        )
    subdomains = [
        ("ConfigMap", config_map_name(job)),
        ("SSH Secret", ssh_secret_name(job, "uid")),  # a fixed-length uid digest
        *(("ResourceClaimTemplate", template_name(job, role)) for role in spec.replica_specs),
    ]
    for kind, name in subdomains:
        if len(name) > DNS_SUBDOMAIN_MAX or not _DNS1123_SUBDOMAIN.match(name):
            raise InvalidJob(
                "metadata.name",
                f"{kind} name {name} is not a valid DNS subdomain: rename the TrainingJob",
                reason=INVALID_NAME,
            )
    for role, r in spec.replica_specs.items():
        _check_template_labels(role, r.template)


def _check_template_labels(role: str, template: Mapping[str, Any]) -> None:
    meta = template.get("metadata") if isinstance(template, Mapping) else None
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if not isinstance(labels, Mapping):
        return
    where = f"spec.replicaSpecs.{role}.template.metadata.labels"
    for key, value in labels.items():
        if not _label_key_ok(str(key)):
            raise InvalidJob(
                where,
                f"label key {key!r} is not valid: an optional DNS-subdomain prefix and '/', then "
                "a name of at most 63 letters, digits, '-', '_' or '.': fix the key",
                reason=INVALID_NAME,
            )
        text = value if isinstance(value, str) else None
        if text is None or len(text) > LABEL_VALUE_MAX or not _LABEL_VALUE.match(text):
            raise InvalidJob(
                f"{where}.{key}",
                f"label value {value!r} is not valid: a string of at most {LABEL_VALUE_MAX} "
                "letters, digits, '-', '_' or '.', beginning and ending with a letter or digit",
                reason=INVALID_NAME,
            )


def _label_key_ok(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (len(prefix) > DNS_SUBDOMAIN_MAX or not _DNS1123_SUBDOMAIN.match(prefix)):
        return False
    return len(name) <= DNS_LABEL_MAX and bool(_LABEL_NAME.match(name))


def check_priority_class(spec: TrainingJobSpec, known: Collection[str] | None) -> None:
    """InvalidJob (reason PriorityClassNotFound) when spec.priorityClassName names no
    PriorityClass the cluster has; `known` None means the caller does not know (no check)."""
    wanted = spec.priority_class_name
    if not wanted or known is None or wanted in known:
        return
    have = ", ".join(sorted(known)[:8]) or "none"
    raise InvalidJob(
        "spec.priorityClassName",
        f"PriorityClass {wanted!r} does not exist (the cluster has: {have}): create it or "
        "name an existing one; the job starts once it exists",
        reason=MISSING_PRIORITY_CLASS,
    )


__all__ = [
    "INVALID_NAME",
    "MISSING_PRIORITY_CLASS",
    "check_names",
    "check_priority_class",
    "longest_pod_name",
    "max_job_name_length",
]


def checked_spec(body: Mapping[str, Any], config: OperatorConfig | None = None) -> TrainingJobSpec:
    """The job's spec, parsed and checked as one: the schema (`parse_spec`), the rules the
    schema cannot state (`check_semantics`, with `config`: some catalog release can ever
    satisfy it) and the names trainop would generate (`check_names`). Raises InvalidJob
    naming the first bad field. The one place the admission cycle, the reconcile and
    `in_line` check a spec; memoised per (uid, generation, name) in `config.memo`, which a
    new config (catalog, FabricProfiles) starts empty."""
    if config is None:
        return _check(body, config)
    spec: TrainingJobSpec = version_memo(config, "checked-spec", body, lambda: _check(body, config))
    return spec


def _check(body: Mapping[str, Any], config: OperatorConfig | None) -> TrainingJobSpec:
    spec = parse_spec(body)
    check_semantics(spec, config)
    check_names((body.get("metadata") or {}).get("name", ""), spec)
    if config is not None:
        check_queue_label(spec, config)
    return spec


def check_queue_label(spec: TrainingJobSpec, config: OperatorConfig) -> None:
    """Under Kueue (`external_queue: kueue`) spec.queue names the job's LocalQueue, which
    Kueue's own jobs carry as the kueue.x-k8s.io/queue-name label, a label value of at most
    63 characters: a longer name could never be written that way (see docs/kueue.md)."""
    queue = spec.queue or ""
    if config.external_queue == "kueue" and len(queue) > LABEL_VALUE_MAX:
        raise InvalidJob(
            "spec.queue",
            f"{len(queue)} characters: under Kueue it names a LocalQueue, whose name is a "
            f"{KUEUE_QUEUE_LABEL} label value, at most {LABEL_VALUE_MAX} characters; name a "
            "LocalQueue that fits",
        )

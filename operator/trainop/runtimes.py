"""A TrainingJob merged onto the runtime it names in spec.runtimeRef: pure, fail closed.

`merge(job_body, runtime_body)` is the merge itself: the runtime's spec is the base and the
job's own fields win (the rules are in docs/runtimes.md and below; the named-case table in
tests/unit/test_runtimes.py tests each). `resolve(job_body, runtimes)` is what the operator's
shell, `trainop render` and `trainop explain` call: it finds the runtime, checks it, refuses
a job that overrides a field the runtime locks, merges, and checks the merged spec as the
planner will. It returns either `Resolved` (the merged body, and what status.runtime records)
or a `RuntimeProblem` whose message names the runtime and the fix; never a half-merged spec.
`resolve_live` is the shell's per-cycle entry point: `resolve`, except that a job with a live
gang keeps the merge its pods were planned from.

Merge rules, spec level:
- scalars (cuda, image, queue, priorityClassName): the job's value when it sets one (an
  empty string counts: `image: ""` asks for the catalog's choice over the runtime's image);
- framework and gpuSharing: the job's object replaces the runtime's whole;
- placement, network, runPolicy, progress, checkpoint, elastic, ncclEnv: merged key by key,
  the job's keys win; lists inside them (placement.gpuProducts) are replaced;
- replicaSpecs: by role. A role only the runtime has is added (the job can take all its roles
  from the runtime); replicas and gpus: the job's; templates merged as below.

Pod templates (`TEMPLATE_KEYED` says which lists merge by which key):
- objects (metadata.labels, nodeSelector, resources, securityContext, ...): key by key;
- containers, initContainers, ephemeralContainers: by name, each merged key by key (the
  runtime's order, then the job's new ones). containers[0] is the trainer trainop wires
  (manifests), so runtimes name their trainer `trainer`, as examples/ do;
- env, volumes, volumeMounts, imagePullSecrets, resourceClaims, volumeDevices: by name, the
  job's entry replacing the runtime's entry whole (an env var has one source, a volume one
  type);
- tolerations: the runtime's, then those of the job that are not already there;
- every other list (command, args, envFrom, ports, affinity terms, ...): the job's replaces.

Locks: `spec.lockedFields` of the runtime names top-level fields the job may not set to
another value, and `podSecurity` (the job's templates may not set securityContext, host
namespaces or the service account). The queue's policy (queueing.policy) is checked on the
merged spec, so a runtime cannot smuggle in what a queue forbids either.

Neighbours: `api.trainingruntime` (the runtime model), `planner.parse_spec` and
`planner.check_semantics` (the checks of the merged spec), `cli.render` (runtimes from files).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from trainop.api.base import all_errors
from trainop.api.templatecheck import template_problems
from trainop.api.trainingjob import RuntimeRef, RuntimeStatus
from trainop.api.trainingruntime import (
    CLUSTER_RUNTIME_KIND,
    RUNTIME_KIND,
    TrainingRuntimeSpec,
)
from trainop.planner import InvalidJob, check_semantics, parse_spec

# (kind, namespace, name); the namespace is "" for a ClusterTrainingRuntime.
RuntimeKey = tuple[str, str, str]

# Problem reasons, for the condition and the Event the shell writes.
RUNTIME_NOT_FOUND = "RuntimeNotFound"
RUNTIME_INVALID = "RuntimeInvalid"
RUNTIME_LOCKED = "RuntimeLocked"
RUNTIME_MERGE_INVALID = "RuntimeMergeInvalid"

# Spec fields whose object the job replaces whole.
REPLACED_OBJECTS = frozenset({"framework", "gpuSharing"})
# Runtime spec fields that are not TrainingJob fields.
RUNTIME_ONLY = frozenset({"lockedFields"})

# Template lists merged by a key: list name -> (key, merge the matched entries key by key).
TEMPLATE_KEYED: dict[str, tuple[str, bool]] = {
    "containers": ("name", True),
    "initContainers": ("name", True),
    "ephemeralContainers": ("name", True),
    "env": ("name", False),
    "volumes": ("name", False),
    "volumeMounts": ("name", False),
    "volumeDevices": ("name", False),
    "imagePullSecrets": ("name", False),
    "resourceClaims": ("name", False),
}
TEMPLATE_APPENDED = frozenset({"tolerations"})

# What `podSecurity` locks in each of the job's pod templates.
POD_SECURITY_FIELDS = (
    "securityContext",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "serviceAccountName",
    "serviceAccount",
    "automountServiceAccountToken",
)


def runtime_key(body: Mapping[str, Any]) -> RuntimeKey:
    """The key `resolve` looks a runtime object up by."""
    meta = body.get("metadata") or {}
    kind = str(body.get("kind") or "")
    ns = "" if kind == CLUSTER_RUNTIME_KIND else str(meta.get("namespace") or "default")
    return kind, ns, str(meta.get("name") or "")


def runtime_index(objects: Iterator[Mapping[str, Any]] | list[Any]) -> dict[RuntimeKey, Any]:
    """runtime_key -> body for the runtime objects among `objects` (others are skipped)."""
    return {
        runtime_key(o): o
        for o in objects
        if isinstance(o, Mapping) and o.get("kind") in (CLUSTER_RUNTIME_KIND, RUNTIME_KIND)
    }


# --- the merge -------------------------------------------------------------------------


def _merge_maps(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Key by key, `over` winning; nested objects merged; lists replaced. A None in `over`
    is unset (the API server prunes nulls), so the base value stays."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if value is None:
            continue
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge_maps(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_keyed(base: list[Any], over: list[Any], key: str, deep: bool) -> list[Any]:
    """Entries matched by `key`: the base's order, then the new entries of `over`."""
    out = [copy.deepcopy(x) for x in base]
    where = {x.get(key): i for i, x in enumerate(out) if isinstance(x, Mapping)}
    for entry in over:
        name = entry.get(key) if isinstance(entry, Mapping) else None
        if name is not None and name in where:
            i = where[name]
            out[i] = merge_template(out[i], entry) if deep else copy.deepcopy(entry)
        else:
            out.append(copy.deepcopy(entry))
    return out


def merge_template(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """A pod template (or any object inside one) merged with the rules above."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if value is None:
            continue
        have = out.get(key)
        if key in TEMPLATE_KEYED and isinstance(value, list) and isinstance(have, list):
            field, deep = TEMPLATE_KEYED[key]
            out[key] = _merge_keyed(have, value, field, deep)
        elif key in TEMPLATE_APPENDED and isinstance(value, list) and isinstance(have, list):
            out[key] = [*copy.deepcopy(have), *(copy.deepcopy(v) for v in value if v not in have)]
        elif isinstance(value, Mapping) and isinstance(have, Mapping):
            out[key] = merge_template(have, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_roles(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for role in [*base, *(r for r in over if r not in base)]:
        b, o = base.get(role) or {}, over.get(role) or {}
        merged = {k: copy.deepcopy(v) for k, v in b.items() if k != "template"}
        merged.update(
            {k: copy.deepcopy(v) for k, v in o.items() if k != "template" and v is not None}
        )
        template = merge_template(b.get("template") or {}, o.get("template") or {})
        if template:
            merged["template"] = template
        out[role] = merged
    return out


def merge_spec(runtime_spec: Mapping[str, Any], job_spec: Mapping[str, Any]) -> dict[str, Any]:
    """The job's spec merged onto the runtime's spec (module docstring)."""
    out = {k: copy.deepcopy(v) for k, v in runtime_spec.items() if k not in RUNTIME_ONLY}
    for key, value in job_spec.items():
        if value is None:
            continue
        have = out.get(key)
        if key == "replicaSpecs" and isinstance(value, Mapping) and isinstance(have, Mapping):
            out[key] = _merge_roles(have, value)
        elif (
            key not in REPLACED_OBJECTS and isinstance(value, Mapping) and isinstance(have, Mapping)
        ):
            out[key] = _merge_maps(have, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def merge(job_body: Mapping[str, Any], runtime_body: Mapping[str, Any]) -> dict[str, Any]:
    """The TrainingJob body with its spec merged onto the runtime's; metadata and status are
    the job's, spec.runtimeRef stays (so explain and status can name the runtime)."""
    out = copy.deepcopy(dict(job_body))
    out["spec"] = merge_spec(runtime_body.get("spec") or {}, job_body.get("spec") or {})
    return out


# --- resolve ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolved:
    """The merged job body and the runtime it came from (None: the job names none)."""

    body: dict[str, Any]
    runtime: RuntimeStatus | None = None

    def status(self) -> dict[str, Any]:
        """The status fields to write: {"runtime": {kind, name, generation}} or {}."""
        return {"runtime": self.runtime.to_api()} if self.runtime is not None else {}


@dataclass(frozen=True)
class RuntimeProblem:
    """Why a job cannot be merged with its runtime; it waits until the job or the runtime
    is fixed. `reason` goes in the condition and the Event, `message` names the fix."""

    reason: str
    field: str
    message: str
    kind: str = ""
    name: str = ""

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def _ref(job_body: Mapping[str, Any]) -> RuntimeRef | RuntimeProblem | None:
    raw = (job_body.get("spec") or {}).get("runtimeRef")
    if raw is None:
        return None
    try:
        return RuntimeRef.model_validate(raw)
    except ValidationError as exc:
        path, msg = all_errors(exc, "spec.runtimeRef")[0]
        return RuntimeProblem(RUNTIME_INVALID, path, f"{msg}: name a runtime as {{kind, name}}")


def _missing(ref: RuntimeRef, namespace: str) -> RuntimeProblem:
    if ref.kind == RUNTIME_KIND:
        where, listing = (
            f" in namespace {namespace}",
            f"kubectl get trainingruntimes -n {namespace}",
        )
    else:
        where, listing = "", "kubectl get clustertrainingruntimes"
    return RuntimeProblem(
        RUNTIME_NOT_FOUND,
        "spec.runtimeRef.name",
        f"{ref.kind} {ref.name} not found{where}: create it, or name an existing runtime "
        f"({listing}); the job waits until it exists",
        ref.kind,
        ref.name,
    )


def check_runtime(body: Mapping[str, Any]) -> RuntimeProblem | None:
    """A runtime object's own problems (its spec and its pod templates), naming its field."""
    kind, name = str(body.get("kind") or ""), str((body.get("metadata") or {}).get("name") or "")
    who = f"{kind} {name}"
    fix = f"fix the runtime (kubectl edit {kind.lower()} {name})"
    spec = body.get("spec") or {}
    try:
        model = TrainingRuntimeSpec.model_validate(spec)
    except ValidationError as exc:
        path, msg = all_errors(exc, "spec")[0]
        return RuntimeProblem(RUNTIME_INVALID, path, f"{who} is invalid: {msg}: {fix}", kind, name)
    for role, r in model.replica_specs.items():
        problems = template_problems(r.template)
        if problems:
            path = f"spec.replicaSpecs.{role}.template" + (
                f".{problems[0].path}" if problems[0].path else ""
            )
            return RuntimeProblem(
                RUNTIME_INVALID, path, f"{who} is invalid: {problems[0].message}: {fix}", kind, name
            )
    return None


def _security_fields(job_spec: Mapping[str, Any]) -> Iterator[str]:
    """Paths of the fields `podSecurity` locks that the job's templates set."""
    for role, r in (job_spec.get("replicaSpecs") or {}).items():
        pod = ((r or {}).get("template") or {}).get("spec") or {}
        if not isinstance(pod, Mapping):
            continue
        base = f"spec.replicaSpecs.{role}.template.spec"
        for f in POD_SECURITY_FIELDS:
            if pod.get(f) is not None:
                yield f"{base}.{f}"
        for kind in ("initContainers", "containers", "ephemeralContainers"):
            for i, c in enumerate(pod.get(kind) or []):
                if isinstance(c, Mapping) and c.get("securityContext") is not None:
                    yield f"{base}.{kind}[{i}].securityContext"


def locked_problem(
    job_spec: Mapping[str, Any], runtime_body: Mapping[str, Any]
) -> RuntimeProblem | None:
    """The first field the job sets that the runtime's spec.lockedFields forbids."""
    kind = str(runtime_body.get("kind") or "")
    name = str((runtime_body.get("metadata") or {}).get("name") or "")
    rt_spec = runtime_body.get("spec") or {}
    fix = "remove it from the job (the platform team sets it in the runtime)"
    for f in rt_spec.get("lockedFields") or []:
        if f == "podSecurity":
            for path in _security_fields(job_spec):
                return RuntimeProblem(
                    RUNTIME_LOCKED,
                    path,
                    f"{kind} {name} locks the pods' security settings (lockedFields: "
                    f"podSecurity): {fix}",
                    kind,
                    name,
                )
            continue
        mine = job_spec.get(f)
        if mine is None:
            continue
        theirs = rt_spec.get(f)
        merged = merge_spec({f: theirs} if theirs is not None else {}, {f: mine}).get(f)
        if merged != theirs:
            return RuntimeProblem(
                RUNTIME_LOCKED,
                f"spec.{f}",
                f"{kind} {name} locks spec.{f} (lockedFields) to "
                f"{theirs if theirs is not None else 'its default'}: {fix}",
                kind,
                name,
            )
    return None


def _merged_problem(merged: Mapping[str, Any], kind: str, name: str) -> RuntimeProblem | None:
    """The merged spec checked as the planner will check it (model, then semantics)."""
    with_rt = f"the job merged with {kind} {name}"
    try:
        check_semantics(parse_spec(merged))
    except InvalidJob as exc:
        detail = exc.detail
        if detail == "Field required":
            detail = (
                f"required, and neither the job nor {kind} {name} sets it: set it in the job "
                "or in the runtime"
            )
        else:
            detail = f"{detail} (in {with_rt})"
        return RuntimeProblem(RUNTIME_MERGE_INVALID, exc.field, detail, kind, name)
    return None


def resolve(
    job_body: Mapping[str, Any], runtimes: Mapping[RuntimeKey, Mapping[str, Any]]
) -> Resolved | RuntimeProblem:
    """The job merged with its runtime, checked; or the problem (module docstring). A job
    without spec.runtimeRef is returned as it is (Resolved.runtime None)."""
    ref = _ref(job_body)
    if ref is None:
        return Resolved(copy.deepcopy(dict(job_body)))
    if isinstance(ref, RuntimeProblem):
        return ref
    namespace = str((job_body.get("metadata") or {}).get("namespace") or "default")
    key = (ref.kind, namespace if ref.kind == RUNTIME_KIND else "", ref.name)
    runtime = runtimes.get(key)
    if runtime is None:
        return _missing(ref, namespace)
    problem = check_runtime(runtime) or locked_problem(job_body.get("spec") or {}, runtime)
    if problem is not None:
        return problem
    merged = merge(job_body, runtime)
    problem = _merged_problem(merged, ref.kind, ref.name)
    if problem is not None:
        return problem
    generation = (runtime.get("metadata") or {}).get("generation")
    return Resolved(
        merged,
        RuntimeStatus(
            kind=ref.kind,
            name=ref.name,
            generation=generation if isinstance(generation, int) else None,
        ),
    )


def resolve_live(
    job_body: Mapping[str, Any],
    runtimes: Mapping[RuntimeKey, Mapping[str, Any]],
    last: Resolved | None,
    gang_live: bool,
) -> Resolved | RuntimeProblem:
    """What the shell acts on for a job each cycle. Without a live gang: `resolve`. With
    one, and `last` (the merge its pods were planned from) made from the job's current
    generation: `last`'s spec and runtime, under the job's current metadata and status, so
    a runtime edited, deleted or broken under a running gang changes nothing until its next
    gang (docs/runtimes.md). A job edited while it runs (a new metadata.generation) is
    merged again, as its own edits apply today."""
    if gang_live and last is not None and _generation(last.body) == _generation(job_body):
        body = copy.deepcopy(dict(job_body))
        body["spec"] = copy.deepcopy(last.body.get("spec") or {})
        return Resolved(body, last.runtime)
    return resolve(job_body, runtimes)


def _generation(body: Mapping[str, Any]) -> Any:
    return (body.get("metadata") or {}).get("generation")

"""Tenant policy of a TrainingQueue checked against a job: a list of violations, never a fix-up.

Each violation is one sentence naming the job field and the queue's rule, e.g.
`spec.replicaSpecs.Worker.template.spec.containers[0].securityContext.privileged: queue nlp
does not allow privileged containers (policy.allowPrivileged is false)`. The operator refuses
such a job (condition Invalid, reason PolicyViolation); it never strips the offending field.

Rules: images (the resolved image, and any image a pod template sets) must start with one of
policy.allowedImagePrefixes; the framework must be in allowedFrameworks; the CUDA the image
needs (else spec.cuda) must lie in policy.cuda (unknown CUDA is a violation when a range is
set: it cannot be checked); the gang's GPUs at most maxGpusPerJob; pod templates must not be
privileged or use hostNetwork / hostPID / hostIPC / hostPath unless allowed, nor ask for
runAsUser 0 (pod or container) unless allowRunAsRoot, nor add capabilities beyond
allowedCapabilities (IPC_LOCK, which trainop adds itself for RDMA, is always allowed). Image
prefixes match at a registry/path/tag boundary (see `image_allowed`).
Runtimes (docs/runtimes.md): a job naming a runtime in spec.runtimeRef must name one of
policy.allowedRuntimes when that is set, and policy.requireRuntime refuses a job naming
none. The job is checked merged with its runtime (`runtimes.resolve` comes first), so the
rules above see what the runtime adds too.
maxRunningJobs is not checked here: it is a quota (the job waits, reason Quota).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from trainop.api.trainingjob import TrainingJobSpec
from trainop.api.trainingqueue import TenantPolicy
from trainop.catalog import parse_version

ALWAYS_ALLOWED_CAPABILITIES = frozenset({"IPC_LOCK"})


@dataclass(frozen=True)
class Violation:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def _cap(name: str) -> str:
    # Kubernetes takes "SYS_ADMIN"; people also write "CAP_SYS_ADMIN" or lower case.
    n = str(name).strip().upper()
    return n.removeprefix("CAP_")


def _containers(pod_spec: Mapping[str, Any]) -> Iterator[tuple[str, int, Mapping[str, Any]]]:
    for kind in ("initContainers", "containers"):
        items = pod_spec.get(kind)
        if isinstance(items, list):
            for i, c in enumerate(items):
                if isinstance(c, Mapping):
                    yield kind, i, c


def _root(sc: Any) -> bool:
    return isinstance(sc, Mapping) and sc.get("runAsUser") == 0


def _root_message(q: str) -> str:
    return f"{q} does not allow runAsUser 0 (policy.allowRunAsRoot is false): run as a non-root UID"


def normalized_image(image: str) -> str:
    """The fully qualified form of a Docker Hub short name (ubuntu -> docker.io/library/ubuntu,
    me/app -> docker.io/me/app); other references are returned as they are."""
    first, sep, _ = image.partition("/")
    if not sep:
        return f"docker.io/library/{image}"
    if "." in first or ":" in first or first == "localhost":
        return image
    return f"docker.io/{image}"


def image_allowed(image: str, prefixes: tuple[str, ...]) -> bool:
    """Whether `image` (as written, or its Docker Hub full form) starts with one of
    `prefixes` at a boundary: the prefix ends in '/', ':' or '@', or the image goes on with
    one of those, so registry.corp never admits registry.corp.evil.io/x."""
    for ref in dict.fromkeys((image, normalized_image(image))):
        for p in prefixes:
            if not p or not ref.startswith(p):
                continue
            if p[-1] in "/:@" or len(ref) == len(p) or ref[len(p)] in "/:@":
                return True
    return False


def _version_text(v: tuple[int, ...]) -> str:
    return ".".join(str(p) for p in v)


def check_policy(
    spec: TrainingJobSpec,
    policy: TenantPolicy,
    *,
    queue: str,
    image: str | None = None,
    cuda: tuple[int, ...] | None = None,
) -> tuple[Violation, ...]:
    """Violations of `policy` (queue `queue`) by a job; `image` is the image the pods run
    (the planner's resolved choice) and `cuda` the CUDA it needs, when known."""
    q = f"queue {queue}"
    prefixes = tuple(policy.allowed_image_prefixes)
    out = [
        *_image_violations(spec, prefixes, q, image),
        *_framework_violations(spec, policy, q),
        *_cuda_violations(spec, policy, q, cuda),
        *_gpu_violations(spec, policy, q),
        *runtime_violations(spec, policy, q),
    ]
    for role, r in spec.replica_specs.items():
        out.extend(_template_violations(role, r.template, policy, q, prefixes))
    return tuple(out)


def _image_violations(
    spec: TrainingJobSpec, prefixes: tuple[str, ...], q: str, image: str | None
) -> Iterator[Violation]:
    """The image the pods run, when it starts with none of policy.allowedImagePrefixes."""
    if prefixes and image and not image_allowed(image, prefixes):
        fld = "spec.image" if spec.image else "spec.framework"
        how = "" if spec.image else " (the image trainop chose for the framework)"
        yield Violation(
            fld,
            f"image {image}{how} is not allowed by {q}: images must start with "
            f"{', '.join(prefixes)} (policy.allowedImagePrefixes)",
        )


def _framework_violations(
    spec: TrainingJobSpec, policy: TenantPolicy, q: str
) -> Iterator[Violation]:
    """The job's framework, when policy.allowedFrameworks lists others only."""
    frameworks = tuple(policy.allowed_frameworks)
    if frameworks and spec.framework.name not in frameworks:
        yield Violation(
            "spec.framework.name",
            f"framework {spec.framework.name} is not allowed by {q}: allowed are "
            f"{', '.join(frameworks)} (policy.allowedFrameworks)",
        )


def _cuda_violations(
    spec: TrainingJobSpec, policy: TenantPolicy, q: str, cuda: tuple[int, ...] | None
) -> Iterator[Violation]:
    """The job's CUDA (major.minor) outside policy.cuda, or unknown while a range is set."""
    rng = policy.cuda
    if rng is None or not (rng.min or rng.max):
        return
    have = cuda or parse_version(spec.cuda)
    lo, hi = parse_version(rng.min), parse_version(rng.max)
    if have is None:
        yield Violation(
            "spec.cuda",
            f"the job's CUDA version is unknown and {q} limits CUDA (policy.cuda): set spec.cuda",
        )
        return
    mm = tuple(have[:2])
    if lo is not None and mm < tuple(lo[:2]):
        yield Violation(
            "spec.cuda",
            f"CUDA {_version_text(mm)} is below {q}'s minimum {rng.min} (policy.cuda.min)",
        )
    if hi is not None and mm > tuple(hi[:2]):
        yield Violation(
            "spec.cuda",
            f"CUDA {_version_text(mm)} is above {q}'s maximum {rng.max} (policy.cuda.max)",
        )


def runtime_allowed(kind: str, name: str, allowed: tuple[str, ...]) -> bool:
    """Whether runtime `kind`/`name` is on the list: Kind/name entries, or a bare name for
    a ClusterTrainingRuntime."""
    return f"{kind}/{name}" in allowed or (kind == "ClusterTrainingRuntime" and name in allowed)


def runtime_violations(spec: TrainingJobSpec, policy: TenantPolicy, q: str) -> Iterator[Violation]:
    """The runtime the job names, when policy.allowedRuntimes lists others only, or none
    while policy.requireRuntime is set."""
    allowed = tuple(policy.allowed_runtimes)
    ref = spec.runtime_ref
    listed = f": allowed are {', '.join(allowed)} (policy.allowedRuntimes)" if allowed else ""
    if ref is None:
        if policy.require_runtime:
            yield Violation(
                "spec.runtimeRef",
                f"{q} requires jobs to name a runtime (policy.requireRuntime){listed}; "
                "set spec.runtimeRef {kind, name}",
            )
        return
    if allowed and not runtime_allowed(ref.kind, ref.name, allowed):
        yield Violation(
            "spec.runtimeRef",
            f"{ref.kind} {ref.name} is not allowed by {q}{listed}",
        )


def _gpu_violations(spec: TrainingJobSpec, policy: TenantPolicy, q: str) -> Iterator[Violation]:
    """The gang's GPUs, when more than policy.maxGpusPerJob."""
    limit = policy.max_gpus_per_job
    if limit is not None and spec.total_gpus > limit:
        parts = ", ".join(
            f"{role}: {r.replicas} x {r.gpus}" for role, r in spec.replica_specs.items() if r.gpus
        )
        yield Violation(
            "spec.replicaSpecs",
            f"the job asks for {spec.total_gpus} GPUs ({parts}); {q} allows at most "
            f"{limit} per job (policy.maxGpusPerJob)",
        )


def _template_violations(  # noqa: C901, PLR0912 - one branch per pod-template escalation the policy can refuse
    role: str,
    template: Mapping[str, Any],
    policy: TenantPolicy,
    q: str,
    prefixes: tuple[str, ...],
) -> Iterator[Violation]:
    pod = template.get("spec") if isinstance(template, Mapping) else None
    if not isinstance(pod, Mapping):
        return
    base = f"spec.replicaSpecs.{role}.template.spec"
    if pod.get("hostNetwork") and not policy.allow_host_network:
        yield Violation(
            f"{base}.hostNetwork",
            f"{q} does not allow hostNetwork (policy.allowHostNetwork is false)",
        )
    if pod.get("hostPID") and not policy.allow_host_pid:
        yield Violation(
            f"{base}.hostPID", f"{q} does not allow hostPID (policy.allowHostPID is false)"
        )
    if pod.get("hostIPC") and not policy.allow_host_ipc:
        yield Violation(
            f"{base}.hostIPC", f"{q} does not allow hostIPC (policy.allowHostIPC is false)"
        )
    if not policy.allow_run_as_root and _root(pod.get("securityContext")):
        yield Violation(f"{base}.securityContext.runAsUser", _root_message(q))
    volumes = pod.get("volumes")
    if isinstance(volumes, list) and not policy.allow_host_path:
        for i, v in enumerate(volumes):
            if isinstance(v, Mapping) and v.get("hostPath") is not None:
                yield Violation(
                    f"{base}.volumes[{i}].hostPath",
                    f"{q} does not allow hostPath volumes (policy.allowHostPath is false)",
                )
    allowed_caps = {_cap(c) for c in policy.allowed_capabilities} | ALWAYS_ALLOWED_CAPABILITIES
    for kind, i, c in _containers(pod):
        where = f"{base}.{kind}[{i}]"
        image = c.get("image")
        if prefixes and isinstance(image, str) and image and not image_allowed(image, prefixes):
            yield Violation(
                f"{where}.image",
                f"image {image} is not allowed by {q}: images must start with "
                f"{', '.join(prefixes)} (policy.allowedImagePrefixes)",
            )
        sc = c.get("securityContext")
        if not isinstance(sc, Mapping):
            continue
        if not policy.allow_run_as_root and _root(sc):
            yield Violation(f"{where}.securityContext.runAsUser", _root_message(q))
        if sc.get("privileged") and not policy.allow_privileged:
            yield Violation(
                f"{where}.securityContext.privileged",
                f"{q} does not allow privileged containers (policy.allowPrivileged is false)",
            )
        caps = sc.get("capabilities")
        added = caps.get("add") if isinstance(caps, Mapping) else None
        if isinstance(added, list):
            extra = [str(a) for a in added if _cap(a) not in allowed_caps]
            if extra:
                allowed = ", ".join(sorted(allowed_caps))
                yield Violation(
                    f"{where}.securityContext.capabilities.add",
                    f"{q} does not allow adding {', '.join(extra)}: allowed are {allowed} "
                    "(policy.allowedCapabilities)",
                )

"""Why a pod of a gang failed, as a typed reason: the pure classifier `reconcile` acts on.

Neighbours: `reconcile` classifies the failed (or image-pull-stuck) pods of a gang, writes the
result to status.lastFailure and decides from it: retry the gang, fail the job, or restart
without counting against backoffLimit; `metrics.observe_transition` counts it in
`trainop_job_failures_total{reason}`. Reads only the pod as the API returns it.

Reasons, strongest root cause first (when several pods failed, the strongest one is reported,
since a lost peer makes the others fail with NCCL errors or plain exit codes):
  NodeLost         the node went away or is shutting down (pod status reason NodeLost /
                   Terminated, or a DisruptionTarget condition): restart, not counted
  Evicted          the kubelet evicted the pod (node pressure): restart, not counted
  GPUXid           an NVIDIA Xid in the termination message (e.g. 79, fallen off the bus)
  OOMKilled        the container hit its memory limit
  ImagePullFailed  the image cannot be pulled: never retried, the job fails naming the image
  NCCLError        an NCCL error in the termination message (peer or fabric trouble)
  PeerUnresolved   trainop-launch found a peer's host name unresolvable for its whole wait
                   (trainop.launcher.peers): the gang could never meet
  Signal           exit code 128+N: killed by signal N
  ExitCode         exit code 1-127: the program failed
  Unknown          Failed with no container exit status
`retryable` is what restartPolicy ExitCode does with it: everything but ExitCode, Unknown and
ImagePullFailed restarts the gang.

Sources: pod failure and disruption conditions,
https://kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions ;
node-pressure eviction, https://kubernetes.io/docs/concepts/scheduling-eviction/node-pressure-eviction/ ;
image pull states, https://kubernetes.io/docs/concepts/containers/images/#imagepullbackoff ;
Xid errors, https://docs.nvidia.com/deploy/xid-errors/index.html ;
termination messages, https://kubernetes.io/docs/tasks/debug/debug-application/determine-reason-pod-failure/
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NODE_LOST = "NodeLost"
EVICTED = "Evicted"
GPU_XID = "GPUXid"
OOM_KILLED = "OOMKilled"
IMAGE_PULL = "ImagePullFailed"
NCCL_ERROR = "NCCLError"
PEER_UNRESOLVED = "PeerUnresolved"
SIGNAL = "Signal"
EXIT_CODE = "ExitCode"
UNKNOWN = "Unknown"
# Strongest root cause first.
REASONS: tuple[str, ...] = (
    NODE_LOST,
    EVICTED,
    GPU_XID,
    OOM_KILLED,
    IMAGE_PULL,
    NCCL_ERROR,
    PEER_UNRESOLVED,
    SIGNAL,
    EXIT_CODE,
    UNKNOWN,
)
# A peer name that did not resolve may yet (a DNS outage, a peer pod that came too late).
RETRYABLE = frozenset(
    {NODE_LOST, EVICTED, GPU_XID, OOM_KILLED, NCCL_ERROR, PEER_UNRESOLVED, SIGNAL}
)
# Not the job's fault: the gang restarts without counting against backoffLimit.
INFRASTRUCTURE = frozenset({NODE_LOST, EVICTED})

# Pull failures the kubelet keeps retrying (they may heal: registry down, token expired) and
# those that never heal.
PULL_RETRYING = frozenset({"ErrImagePull", "ImagePullBackOff"})
PULL_PERMANENT = frozenset({"InvalidImageName", "ErrImageNeverPull"})

# trainop.launcher.peers.MARKER (the launcher is standard library only and imports nothing
# of the operator's, so the words are kept in both places; a unit test ties them).
PEER_MARKER = "trainop-launch: peer host"
_NODE_LOST_REASONS = frozenset(
    {"NodeLost", "NodeShutdown", "Terminated", "UnexpectedAdmissionError"}
)
_DISRUPTION_NODE = frozenset({"DeletionByTaintManager", "DeletionByPodGC", "TerminationByKubelet"})
# "NVRM: Xid (PCI:0000:3b:00): 79, pid=..." (the kernel log line), or "Xid 79" / "Xid: 79".
_XID = re.compile(r"\bXid\b(?:\s*\([^)]*\))?[\s:=]*(?:error\s*)?(\d{1,3})\b", re.IGNORECASE)
_NCCL = re.compile(
    r"NCCL (error|WARN)|nccl(System|Internal|Remote|InvalidUsage|Unhandled\w*)Error|"
    r"NCCL communicator was aborted|ProcessGroupNCCL",
    re.IGNORECASE,
)
_XID_NAMES = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup",
    48: "double-bit ECC error",
    63: "ECC page retirement",
    64: "ECC page retirement failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
}


@dataclass(frozen=True)
class Failure:
    """One classified pod failure (TrainingJob status.lastFailure)."""

    reason: str
    pod: str
    message: str
    exit_code: int | None = None

    @property
    def retryable(self) -> bool:
        return self.reason in RETRYABLE

    @property
    def infrastructure(self) -> bool:
        return self.reason in INFRASTRUCTURE

    def to_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "reason": self.reason,
            "pod": self.pod,
            "retryable": self.retryable,
            "message": self.message,
        }
        if self.exit_code is not None:
            out["exitCode"] = self.exit_code
        return out


def _status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    st = pod.get("status")
    return st if isinstance(st, Mapping) else {}


def _container_statuses(pod: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    st = _status(pod)
    for kind in ("initContainerStatuses", "containerStatuses"):
        items = st.get(kind)
        if isinstance(items, list):
            yield from (x for x in items if isinstance(x, Mapping))


def _state(cs: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    state = cs.get("state")
    inner = state.get(key) if isinstance(state, Mapping) else None
    return inner if isinstance(inner, Mapping) else None


def _terminations(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Terminated states, the non-zero ones first (the one that failed the pod)."""
    terms = [t for cs in _container_statuses(pod) if (t := _state(cs, "terminated")) is not None]
    return sorted(terms, key=lambda t: _int(t.get("exitCode")) in (0, None))


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _node_lost(pod: Mapping[str, Any]) -> str | None:
    st = _status(pod)
    if st.get("reason") in _NODE_LOST_REASONS:
        return str(st.get("message") or st.get("reason"))
    for cond in st.get("conditions") or []:
        if (
            isinstance(cond, Mapping)
            and cond.get("type") == "DisruptionTarget"
            and cond.get("status") == "True"
            and cond.get("reason") in _DISRUPTION_NODE
        ):
            return str(cond.get("message") or cond.get("reason"))
    return None


def classify_failed(pod: Mapping[str, Any]) -> Failure:
    """The typed reason a pod in phase Failed failed."""
    name = str((pod.get("metadata") or {}).get("name", ""))
    st = _status(pod)
    lost = _node_lost(pod)
    if lost is not None:
        return Failure(NODE_LOST, name, f"pod {name} lost its node: {lost}")
    if st.get("reason") == "Evicted":
        why = st.get("message") or "evicted by the kubelet"
        return Failure(EVICTED, name, f"pod {name} was evicted: {why}")
    terms = _terminations(pod)
    code = _int(terms[0].get("exitCode")) if terms else None
    text = " ".join(str(t.get("message") or "") for t in terms)
    xid = _XID.search(text)
    if xid:
        n = int(xid.group(1))
        what = f" ({_XID_NAMES[n]})" if n in _XID_NAMES else ""
        return Failure(GPU_XID, name, f"pod {name}: GPU Xid {n}{what}", code)
    if any(t.get("reason") == "OOMKilled" for t in terms):
        return Failure(
            OOM_KILLED,
            name,
            f"pod {name} was OOM-killed: raise the container's memory limit in its template",
            code,
        )
    nccl = _NCCL.search(text)
    if nccl:
        return Failure(NCCL_ERROR, name, f"pod {name}: NCCL error ({_line_of(text, nccl)})", code)
    peer = text.find(PEER_MARKER)
    if peer >= 0:
        said = text[peer:].split(": the gang cannot meet")[0]
        return Failure(PEER_UNRESOLVED, name, f"pod {name}: {said[:300]}", code)
    if code is not None and code >= 128:
        return Failure(SIGNAL, name, f"pod {name} was killed by signal {code - 128}", code)
    if code is not None and code != 0:
        return Failure(EXIT_CODE, name, f"pod {name} exited with code {code}", code)
    return Failure(UNKNOWN, name, f"pod {name} failed ({st.get('reason') or 'no exit status'})")


def _line_of(text: str, match: re.Match[str]) -> str:
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    return text[start : end if end >= 0 else len(text)].strip()[:200]


def image_pull_failure(pod: Mapping[str, Any]) -> tuple[Failure, bool] | None:
    """(failure, permanent) when a container of the pod cannot pull its image."""
    name = str((pod.get("metadata") or {}).get("name", ""))
    for cs in _container_statuses(pod):
        waiting = _state(cs, "waiting")
        reason = waiting.get("reason") if waiting else None
        if reason in PULL_RETRYING or reason in PULL_PERMANENT:
            image = cs.get("image") or _spec_image(pod, cs.get("name")) or "?"
            detail = (waiting or {}).get("message") or reason
            msg = f"pod {name} cannot pull image {image} ({reason}: {detail}): {_pull_fix(image)}"
            return Failure(IMAGE_PULL, name, msg), reason in PULL_PERMANENT
    return None


# The registry name of the images `trainop images build` makes (trainop.cluster.images):
# they are never pulled from anywhere, only imported into the local nodes' containerd.
LOCAL_IMAGE_REGISTRY = "trainop.local/"


def _pull_fix(image: str) -> str:
    """What the user should do about an image that cannot be pulled."""
    if image.startswith(LOCAL_IMAGE_REGISTRY):
        return (
            "this image is built on this machine, not pulled: build it with `trainop images "
            "build` and load it into the real nodes with `trainop cluster up --real-nodes N` "
            "(which imports every image already built), or push it to a registry with "
            "`trainop images push` and name that"
        )
    return (
        "fix spec.image (or the template's image), or the registry credentials (imagePullSecrets)"
    )


def _spec_image(pod: Mapping[str, Any], container: Any) -> str | None:
    spec = pod.get("spec") or {}
    for kind in ("initContainers", "containers"):
        for c in spec.get(kind) or []:
            if isinstance(c, Mapping) and c.get("name") == container:
                return str(c.get("image") or "") or None
    return None


def strongest(failures: Sequence[Failure]) -> Failure:
    """The root cause among several pods' failures; ties go to the first pod by name."""
    return min(failures, key=lambda f: (REASONS.index(f.reason), f.pod))

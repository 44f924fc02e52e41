"""API errors split into permanent and transient, the way the operator reacts to them.

Neighbours: `handlers.operator` classifies every exception a reconcile raised while carrying
out a decision: a transient one is retried with capped exponential backoff, a permanent one
becomes a condition and a Warning Event on the TrainingJob and is not retried until the
spec changes. Status codes as the Kubernetes API documents them:
https://kubernetes.io/docs/reference/using-api/api-concepts/#http-status-codes
"""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

PERMANENT = "Permanent"
TRANSIENT = "Transient"

# 400 Bad Request, 403 Forbidden (RBAC, admission, quota), 404 Not Found (e.g. a missing
# PriorityClass), 409 Conflict that is not an "already exists" we tolerate, 422 Invalid.
_PERMANENT_CODES = frozenset({400, 403, 404, 405, 409, 413, 415, 422})
# 429 Too Many Requests (API priority and fairness, storage initialising), 5xx, timeouts.
_TRANSIENT_CODES = frozenset({408, 429, 500, 502, 503, 504})


class ApplyError(Exception):
    """A write failed while carrying out a decision; `what` names the object, e.g. "Pod a-0"."""

    def __init__(self, what: str, cause: BaseException) -> None:
        super().__init__(f"{what}: {cause}")
        self.what = what
        self.cause = cause


@dataclass(frozen=True)
class Failure:
    kind: str  # PERMANENT | TRANSIENT
    code: int | None
    message: str

    @property
    def permanent(self) -> bool:
        return self.kind == PERMANENT


def classify(exc: BaseException) -> Failure:
    """What kind of failure `exc` is, with a one-line message for conditions and Events."""
    if isinstance(exc, ApplyError):
        inner = classify(exc.cause)
        return Failure(inner.kind, inner.code, f"{exc.what}: {inner.message}")
    if isinstance(exc, ApiException):
        code = int(exc.status or 0)
        text = _api_message(exc)
        # A namespace seconds old has no default ServiceAccount yet: admission refuses pods
        # with 403 until the ServiceAccount controller catches up, so that one is retried.
        lowered = text.lower()
        not_yet = code == 403 and "service account" in lowered and "not found" in lowered
        if code in _TRANSIENT_CODES or code >= 500 or code == 0 or not_yet:
            return Failure(TRANSIENT, code or None, f"{code} {exc.reason}: {text}")
        if code in _PERMANENT_CODES:
            return Failure(PERMANENT, code, f"{code} {exc.reason}: {text}")
        return Failure(PERMANENT, code, f"{code} {exc.reason}: {text}")
    if isinstance(exc, HTTPError | TimeoutError | ConnectionError | OSError):
        return Failure(TRANSIENT, None, f"{type(exc).__name__}: {exc}")
    # A bug of ours: retrying cannot help, but neither can the user; say so loudly and
    # retry slowly (a later release or a changed cluster may get past it).
    return Failure(TRANSIENT, None, f"internal error {type(exc).__name__}: {exc}")


def _api_message(exc: ApiException) -> str:
    import json

    try:
        body = json.loads(exc.body or "{}")
        return str(body.get("message") or exc.body or "")[:500]
    except (ValueError, TypeError):
        return str(exc.body or "")[:500]


def backoff(attempt: int, base: float = 1.0, cap: float = 60.0) -> float:
    """Seconds before retry number `attempt` (1-based) of a transient failure."""
    return float(min(cap, base * 2 ** max(0, attempt - 1)))

"""Leader election on a coordination.k8s.io/v1 Lease: only the holder of the Lease acts.

Neighbours: `handlers.operator` runs `Elector.step` every `Shell.renew_seconds` (the retry
period, `trainop run --retry-period-seconds`) in a worker thread and records the outcome in
the shell state (ShellState.leader); on shutdown it calls `release`, so a standby takes over
at once instead of waiting for the Lease to expire.

The rules, as client-go's leaderelection package applies them to Leases
(https://kubernetes.io/docs/concepts/architecture/leases/):
- a missing Lease is created with us as holder;
- the holder renews `spec.renewTime`; anyone else may take the Lease over only once
  `renewTime + leaseDurationSeconds` has passed (or the holder released it: empty holder);
- every write carries the resourceVersion that was read, so two candidates racing for an
  expired Lease cannot both win (the loser gets 409 Conflict and stays standby);
- a leader whose renewals fail (API errors, timeouts) keeps leading only while its next
  attempt still falls inside `renew_deadline_seconds` from its last successful renewal,
  then stands down. Each API call times out after one retry period, so a failing leader
  stops within renew deadline + 2 retry periods, which must be shorter than the lease
  duration: it has stopped before anyone else may take the Lease over. A read that shows
  another holder ends leadership at once.

The three timings are client-go's, with its defaults 15 s / 10 s / 2 s and its rule renew
deadline > 1.2 x retry period
(https://pkg.go.dev/k8s.io/client-go/tools/leaderelection#LeaderElectionConfig); trainop
also asks lease duration > renew deadline + 2 retry periods (the bound above).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from kubernetes import client
from kubernetes.client.rest import ApiException

log = logging.getLogger("trainop.lease")

_FMT = "%Y-%m-%dT%H:%M:%S.%fZ"


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _parse(value: Any) -> datetime | None:
    """A Lease time as naive UTC: the API's RFC 3339 MicroTime text, or the client's datetime."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        stamp = value
    else:
        try:
            stamp = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return None
    if stamp.tzinfo is not None:
        stamp = stamp.astimezone(UTC).replace(tzinfo=None)
    return stamp


def expired(spec: dict[str, Any], now: datetime) -> bool:
    """Whether a Lease spec may be taken over: released, never renewed, or past its term."""
    if not spec.get("holderIdentity"):
        return True
    renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
    if renewed is None:
        return True
    return renewed + timedelta(seconds=int(spec.get("leaseDurationSeconds") or 15)) < now


# client-go's leaderelection.JitterFactor: the renew deadline must exceed 1.2 retry periods.
JITTER_FACTOR = 1.2


def timing_error(duration: float, renew_deadline: float, retry_period: float) -> str | None:
    """Why these leader-election timings cannot work together, or None when they can."""
    if retry_period <= 0:
        return f"the retry period must be > 0 s, got {retry_period:g}"
    if renew_deadline <= JITTER_FACTOR * retry_period:
        return (
            f"the renew deadline ({renew_deadline:g} s) must be greater than "
            f"{JITTER_FACTOR:g} x the retry period ({retry_period:g} s)"
        )
    if duration <= renew_deadline + 2 * retry_period:
        return (
            f"the lease duration ({duration:g} s) must be greater than the renew deadline "
            f"plus 2 retry periods ({renew_deadline + 2 * retry_period:g} s): a leader that "
            "cannot renew must stop acting before its Lease can be taken over"
        )
    return None


@dataclass
class Elector:
    name: str
    namespace: str
    identity: str
    duration_seconds: int = 15
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 2.0  # also the timeout of each API call
    # time.monotonic() of our last successful acquire or renew; None while standing by.
    renewed_at: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.api = client.CoordinationV1Api()

    def _held(self) -> bool:
        """After a failed renewal: still leading while inside the renew deadline."""
        if self.renewed_at is None:
            return False
        elapsed = time.monotonic() - self.renewed_at
        if elapsed + self.retry_period_seconds < self.renew_deadline_seconds:
            return True
        log.warning(
            "Lease %s/%s not renewed for %g s (the renew deadline): standing down",
            self.namespace,
            self.name,
            self.renew_deadline_seconds,
        )
        self.renewed_at = None
        return False

    def _won(self, started: float) -> bool:
        self.renewed_at = started  # the renewTime written was taken before the calls
        return True

    def _spec(self, now: datetime, transitions: int, acquired: datetime) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration_seconds,
            "acquireTime": acquired.strftime(_FMT),
            "renewTime": now.strftime(_FMT),
            "leaseTransitions": transitions,
        }

    def step(self) -> bool:
        """Acquire or renew; True while we hold the Lease. An API error keeps a leader
        leading until its renew deadline, and a standby standing by."""
        now, started = _now(), time.monotonic()
        try:
            lease = self.api.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self.retry_period_seconds
            )
        except ApiException as exc:
            if exc.status != 404:
                log.warning("reading Lease %s/%s failed: %s", self.namespace, self.name, exc.reason)
                return self._held()
            return self._create(now, started)
        except Exception as exc:  # no answer (connection refused, timeout)
            log.warning("reading Lease %s/%s failed: %s", self.namespace, self.name, exc)
            return self._held()
        raw = client.ApiClient().sanitize_for_serialization(lease)
        spec = raw.get("spec") or {}
        mine = spec.get("holderIdentity") == self.identity
        if not mine and not expired(spec, now):
            self.renewed_at = None  # someone else holds it: stand down at once
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
        acquired = (_parse(spec.get("acquireTime")) or now) if mine else now
        raw["spec"] = self._spec(now, transitions, acquired)
        try:
            self.api.replace_namespaced_lease(
                self.name, self.namespace, raw, _request_timeout=self.retry_period_seconds
            )
        except Exception as exc:  # 409: someone else wrote it first; else no answer
            if getattr(exc, "status", None) != 409:
                log.warning("renewing Lease %s/%s failed: %s", self.namespace, self.name, exc)
            return self._held() if mine else False
        return self._won(started)

    def _create(self, now: datetime, started: float) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": self._spec(now, 0, now),
        }
        try:
            self.api.create_namespaced_lease(
                self.namespace, cast(Any, body), _request_timeout=self.retry_period_seconds
            )
        except Exception as exc:  # 409: someone else created it first; else no answer
            if getattr(exc, "status", None) != 409:
                log.warning("creating Lease %s/%s failed: %s", self.namespace, self.name, exc)
            return self._held()
        return self._won(started)

    def release(self) -> None:
        """Give the Lease up (empty holder) so a standby need not wait for it to expire."""
        self.renewed_at = None
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
            raw = client.ApiClient().sanitize_for_serialization(lease)
            if (raw.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            raw["spec"]["holderIdentity"] = ""
            raw["spec"]["renewTime"] = None
            self.api.replace_namespaced_lease(self.name, self.namespace, raw)
        except ApiException as exc:
            log.warning("releasing Lease %s/%s failed: %s", self.namespace, self.name, exc.reason)

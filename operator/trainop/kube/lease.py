"""Leader election on a coordination.k8s.io/v1 Lease: only the holder of the Lease acts.

Neighbours: `handlers.operator` runs `Elector.step` every `renew_seconds` in a worker thread
and records the outcome in the shell state (ShellState.leader); on shutdown it calls
`release`, so a standby takes over at once instead of waiting for the Lease to expire.

The rules, as client-go's leaderelection package applies them to Leases
(https://kubernetes.io/docs/concepts/architecture/leases/):
- a missing Lease is created with us as holder;
- the holder renews `spec.renewTime`; anyone else may take the Lease over only once
  `renewTime + leaseDurationSeconds` has passed (or the holder released it: empty holder);
- every write carries the resourceVersion that was read, so two candidates racing for an
  expired Lease cannot both win (the loser gets 409 Conflict and stays standby).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
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


@dataclass
class Elector:
    name: str
    namespace: str
    identity: str
    duration_seconds: int = 10

    def __post_init__(self) -> None:
        self.api = client.CoordinationV1Api()

    def _spec(self, now: datetime, transitions: int, acquired: datetime) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration_seconds,
            "acquireTime": acquired.strftime(_FMT),
            "renewTime": now.strftime(_FMT),
            "leaseTransitions": transitions,
        }

    def step(self) -> bool:
        """Acquire or renew; True while we hold the Lease. API errors mean 'not leader'."""
        now = _now()
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("reading Lease %s/%s failed: %s", self.namespace, self.name, exc.reason)
                return False
            return self._create(now)
        raw = client.ApiClient().sanitize_for_serialization(lease)
        spec = raw.get("spec") or {}
        mine = spec.get("holderIdentity") == self.identity
        if not mine and not expired(spec, now):
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
        acquired = (_parse(spec.get("acquireTime")) or now) if mine else now
        raw["spec"] = self._spec(now, transitions, acquired)
        try:
            self.api.replace_namespaced_lease(self.name, self.namespace, raw)
        except ApiException as exc:
            if exc.status != 409:
                log.warning(
                    "renewing Lease %s/%s failed: %s", self.namespace, self.name, exc.reason
                )
            return False
        return True

    def _create(self, now: datetime) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": self._spec(now, 0, now),
        }
        try:
            self.api.create_namespaced_lease(self.namespace, cast(Any, body))
        except ApiException as exc:
            if exc.status != 409:
                log.warning(
                    "creating Lease %s/%s failed: %s", self.namespace, self.name, exc.reason
                )
            return False
        return True

    def release(self) -> None:
        """Give the Lease up (empty holder) so a standby need not wait for it to expire."""
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

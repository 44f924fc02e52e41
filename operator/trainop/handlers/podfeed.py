"""The pod watch: one thread per watched scope streams pod events, slims them, hands them on.

Why not a kopf handler, as for the other kinds: pods are most of the events a cluster sends
(created, released, bound, started, ended: five or more per pod), and in `make bench-scale`'s
burst kopf's per-event machinery (a worker task per object, a Body, causes, a logger, the
handler call) and its JSON decoding on the event loop were about 40% of the operator's CPU.
Here a plain thread reads the stream, decodes each line and keeps only what the state reads
(`handlers.slim.slim_pod`), so a whole pod body lives for one event and is never queued;
the event loop gets batches and does only the state update and the reconcile wake-up.

Neighbours: `kube.client.KubeApi` (list_pod_pages, watch_pods: the HTTP side),
`handlers.operator` (starts the feed after the start-up listing, applies its batches to
`handlers.state.ShellState` and wakes the jobs whose pods changed).

Resilience, as client-go's reflector does it: the watch starts at the listing's
resourceVersion and moves on with every event and BOOKMARK; a closed stream is opened again
from there; 410 Gone (too old) lists the scope again and hands the listing over as a
RELISTED batch, whose absent pods the state forgets; other errors back off (1 s doubling to
30 s) and retry. https://kubernetes.io/docs/reference/using-api/api-concepts/
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from trainop.handlers.slim import slim_pod
from trainop.kube.client import Expired, KubeApi

log = logging.getLogger("trainop.podfeed")

RELISTED = "RELISTED"  # a batch item: (RELISTED, [slim pods of the scope], namespace or None)
# One item of a batch: ("ADDED" | "MODIFIED" | "DELETED", slim pod, None) or a relisting.
Item = tuple[str, Any, str | None]


class PodFeed:
    """Pod events of every scope, delivered on the event loop in batches: `deliver(items)`
    is called there with what arrived since the last call (nothing is lost or reordered
    within a scope). `start` takes the resourceVersion of each scope's listing."""

    def __init__(
        self,
        api: KubeApi,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[list[Item]], None],
    ) -> None:
        self.api, self.loop, self.deliver = api, loop, deliver
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._pending: list[Item] = []
        self._scheduled = False
        self.threads: list[threading.Thread] = []

    def start(self, versions: dict[str | None, str]) -> None:
        for scope, version in versions.items():
            thread = threading.Thread(
                target=self._run, args=(scope, version), name=f"trainop-pods-{scope or 'all'}"
            )
            thread.daemon = True  # a stream blocked in read must not hold the process up
            thread.start()
            self.threads.append(thread)

    def close(self) -> None:
        self.stop.set()

    # --- the watch thread -------------------------------------------------------------
    def _run(self, scope: str | None, version: str) -> None:
        delay, relist = 1.0, False
        while not self.stop.is_set():
            try:
                if relist:  # inside the try: a listing that fails is retried, not fatal
                    version, relist = self._relist(scope), False
                version = self._stream(scope, version)
                delay = 1.0
            except Expired:
                log.info("pod watch of %s expired; listing again", scope or "all namespaces")
                relist = True
            except Exception as exc:  # a broken stream, an API error: back off, go on
                if self.stop.is_set():
                    return
                log.warning("pod watch of %s failed (%s); again in %.0f s", scope, exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, 30.0)

    def _stream(self, scope: str | None, version: str) -> str:
        """Follow the watch until the server ends it; returns the last resourceVersion."""
        for kind, obj in self.api.watch_pods(scope, version, self.stop):
            version = (obj.get("metadata") or {}).get("resourceVersion") or version
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self._push([(kind, slim_pod(obj), None)])
        return version

    def _relist(self, scope: str | None) -> str:
        versions: dict[str | None, str] = {}
        listed: list[dict[str, Any]] = []
        for page in self.api.list_pod_pages(scope, versions):
            listed.extend(slim_pod(p) for p in page)
        self._push([(RELISTED, listed, scope)])
        return versions.get(scope, "")

    def _push(self, items: Sequence[Item]) -> None:
        """Queue items; one loop callback drains everything queued until it runs."""
        with self._lock:
            self._pending.extend(items)
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: the operator is exiting
            self.stop.set()

    # --- the event loop -----------------------------------------------------------------
    def _drain(self) -> None:
        with self._lock:
            items, self._pending, self._scheduled = self._pending, [], False
        if items:
            self.deliver(items)


def scopes(namespaces: Iterable[str]) -> list[str | None]:
    """The watch scopes of `trainop run --namespace` (none given: all namespaces)."""
    return list(namespaces) or [None]

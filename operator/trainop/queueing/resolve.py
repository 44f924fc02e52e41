"""Which TrainingQueue serves a job: its spec.queue, else its namespace's default, else built-in.

Rules:
  * spec.queue names a queue: that queue must exist and serve the job's namespace (listed in
    spec.namespaces, or the namespace's labels match spec.namespaceSelector); otherwise a
    QueueError (reason Policy) naming spec.queue.
  * no spec.queue: the queue with `default: true` that serves the namespace. Several such
    queues: the first by name (deterministic; `trainop explain` shows which one).
  * no default queue serves the namespace: BUILTIN_QUEUE, an unlimited queue: jobs are
    admitted on fit alone (priority, then FIFO), with no quota, no tenant policy, no
    preemption and plain backfill. A cluster without any TrainingQueue behaves like the
    operator before queueing existed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from trainop.queueing.model import POLICY, QueueState

BUILTIN_QUEUE_NAME = "(built-in)"  # not a valid object name, so no TrainingQueue can clash

BUILTIN_QUEUE = QueueState(
    name=BUILTIN_QUEUE_NAME,
    unlimited=True,
    builtin=True,
    within_queue="Never",
    reclaim_within_cohort=False,
    backfill_wait_seconds=float("inf"),
)


class QueueError(Exception):
    """The job cannot be put in a queue; `field` is spec.queue, reason Policy."""

    reason = POLICY

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.detail = message


def serves(queue: QueueState, namespace: str, labels: Mapping[str, str] | None = None) -> bool:
    """Whether `queue` serves `namespace` (by name, or by its labels)."""
    if queue.builtin:
        return True
    if namespace in queue.namespaces:
        return True
    if queue.namespace_selector is not None:
        have = labels or {}
        # An empty selector matches every namespace, as in Kubernetes label selectors.
        return all(have.get(k) == v for k, v in queue.namespace_selector)
    return False


def resolve_queue(
    namespace: str,
    requested: str | None,
    queues: Iterable[QueueState],
    namespace_labels: Mapping[str, str] | None = None,
) -> QueueState:
    """The queue serving a job of `namespace` that asks for `requested` (spec.queue)."""
    by_name = {q.name: q for q in queues}
    if requested:
        queue = by_name.get(requested)
        if queue is None:
            known = ", ".join(
                sorted(n for n, q in by_name.items() if serves(q, namespace, namespace_labels))
            )
            hint = (
                f"queues serving {namespace}: {known}" if known else f"no queue serves {namespace}"
            )
            raise QueueError("spec.queue", f"TrainingQueue {requested!r} does not exist ({hint})")
        if not serves(queue, namespace, namespace_labels):
            raise QueueError(
                "spec.queue",
                f"TrainingQueue {requested} does not serve namespace {namespace} (add it to "
                "the queue's spec.namespaces or namespaceSelector, or pick another queue)",
            )
        return queue
    defaults = sorted(
        (q for q in by_name.values() if q.default and serves(q, namespace, namespace_labels)),
        key=lambda q: q.name,
    )
    return defaults[0] if defaults else BUILTIN_QUEUE

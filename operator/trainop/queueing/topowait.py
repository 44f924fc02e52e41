"""Topology-aware waiting: whether a Preferred gang waits a bounded time for a better domain.

Neighbours: `queueing.admission` asks `topology_wait` about every Fit it is about to admit;
the placer fills Fit.allreduce and Fit.ideal from the fabric cost model (`placement.cost`);
`trainop simulate`, the benchmark and the operator share this code through `admit`. Pure.

The rule (delay scheduling with a bound, as in Zaharia et al.'s delay scheduling and the
consolidation of Tiresias/Gandiva; Kueue's and KAI's topology-aware scheduling wait too):
  1. Only Preferred gangs whose placer gave an ideal estimate (the gang alone on an empty
     fleet) are considered; Required gangs keep their meaning (the placer never spreads
     them), and a placement whose estimated allreduce is within TOLERANCE (10%) of the
     ideal is admitted at once. The placer always takes the best domain free now, so a gang
     never waits while a good domain is free.
  2. The bound: the queue's spec.topologyWaitSeconds (else the operator's
     topologyWaitSeconds) scaled by the cost of spreading, min(1, ratio - 1): a gang whose
     allreduce would take 2x its ideal or more may wait the whole bound, one at 1.3x 30% of
     it. Once the gang has waited that long (since it last entered the queue) it takes the
     best placement available: it never starves.
  3. Running jobs' expected ends: per domain of the ideal's level (rack, block, ...), the
     free GPUs of nodes with the placement's GPU product, plus the GPUs of running jobs there
     expected to end before the bound runs out (from activeDeadlineSeconds), must reach the
     gang's GPUs; if no domain can, waiting is pointless and the gang is admitted now. A
     running job whose end is unknown counts for nothing: a gang never waits on a hope
     (a burst whose jobs had no deadline waited the whole bound in vain). (GPU counts, not
     node shapes: a heuristic that can wait in vain, which the bound limits.)
  4. While it waits, the gang holds the free GPUs of the most promising domain for the rest
     of the admission pass, so that smaller jobs do not take what it waits for.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from trainop.api.constants import LABEL_GPU_CLIQUE
from trainop.inventory import NodeInfo, Snapshot
from trainop.placement.engine import level_names
from trainop.queueing.model import Fit, QueuedJob

TOLERANCE = 0.10


@dataclass(frozen=True)
class TopologyWait:
    """Wait for `domain` (a level's domain name); `hold` its free GPUs (node -> GPUs)."""

    message: str
    domain: str
    hold: Mapping[str, int]
    expected: float | None  # when enough GPUs are expected free there (None: unknown)


def _domain_of(node: NodeInfo, level: str, keys: Mapping[str, str]) -> str | None:
    if level == "node":
        return node.name
    if level == "cluster":
        return "cluster"
    key = LABEL_GPU_CLIQUE if level == "clique" else keys.get(level)
    for depth, (k, _) in enumerate(node.topology):
        if k == key:
            return "/".join(v for _, v in node.topology[: depth + 1])
    return None


def _bound(fit: Fit, configured: float) -> float:
    assert fit.allreduce is not None and fit.ideal is not None
    ratio = fit.allreduce.seconds / fit.ideal.seconds
    return configured * min(1.0, ratio - 1.0)


def topology_wait(  # noqa: C901 - the waiting rules of docs/placement-cost.md, in order
    job: QueuedJob,
    fit: Fit,
    now: float,
    bound_seconds: float,
    snapshot: Snapshot,
    running: Iterable[QueuedJob],
) -> TopologyWait | None:
    """A TopologyWait when the gang should wait for a better domain, else None (admit now).
    `bound_seconds`: the queue's (or operator's) topologyWaitSeconds; `running`: admitted
    jobs (not those admitted in this pass), whose expected_end may be known."""
    if fit.allreduce is None or fit.ideal is None or fit.ideal.seconds <= 0:
        return None
    if fit.allreduce.seconds <= fit.ideal.seconds * (1 + TOLERANCE) or bound_seconds <= 0:
        return None
    bound = _bound(fit, bound_seconds)
    waited = now - job.waiting_since
    if waited >= bound:
        return None
    deadline = now + (bound - waited)
    level = fit.ideal.level
    keys = {name: key for key, name in level_names(snapshot.levels).items()}
    free: dict[str, dict[str, int]] = defaultdict(dict)
    for node in snapshot.nodes:
        if not node.schedulable or (fit.product and node.gpu.product != fit.product):
            continue
        domain = _domain_of(node, level, keys)
        if domain is not None and node.gpus_free > 0:
            free[domain][node.name] = node.gpus_free
    releases: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for other in running:
        end = other.expected_end
        if end is None or end > deadline:
            continue
        for name, gpus in other.nodes:
            held = snapshot.get(name)
            if held is None or (fit.product and held.gpu.product != fit.product):
                continue
            domain = _domain_of(held, level, keys)
            if domain is not None:
                releases[domain].append((max(end, now), gpus))
    best = _most_promising(job.gpus, free, releases)
    if best is None:
        return None
    domain, expected = best
    when = "at an unknown time" if expected is None else f"in about {expected - now:.0f}s"
    message = (
        f"Preferred placement now would take {fit.allreduce.seconds * 1000:.1f} ms per 1 GiB "
        f"allreduce ({fit.allreduce.level}), {fit.allreduce.seconds / fit.ideal.seconds:.1f}x "
        f"its ideal {fit.ideal.seconds * 1000:.1f} ms ({fit.ideal.level}); waiting for "
        f"{level} {domain}, expected free {when}, at most {bound - waited:.0f}s more "
        f"(topologyWaitSeconds {bound_seconds:g}, scaled by the cost)"
    )
    return TopologyWait(message, domain, dict(free.get(domain, {})), expected)


def _most_promising(
    need: int,
    free: Mapping[str, Mapping[str, int]],
    releases: Mapping[str, list[tuple[float, int]]],
) -> tuple[str, float | None] | None:
    """(domain, expected time enough GPUs are free there or None if that depends on jobs of
    unknown end) for the domain expected first; None when no domain can hold the gang."""
    found: list[tuple[float, str]] = []
    for domain in sorted(set(free) | set(releases)):
        have = sum(free.get(domain, {}).values())
        when = -math.inf
        for end, gpus in sorted(releases.get(domain, [])):
            if have >= need:
                break
            have += gpus
            when = end
        if have >= need:
            found.append((when, domain))
    if not found:
        return None
    when, domain = min(found)
    return domain, (None if math.isinf(when) else when)

"""Migration: which running gangs to move, by checkpoint and restart, to a better placement.

trainop places a gang well when it is admitted; a gang admitted across two racks would stay
there until it ends. A gang that checkpoints (spec.checkpoint) can be moved cheaply: ask for
a checkpoint, wait for it, and start the gang again elsewhere with TRAINOP_RESUME_FROM. This
module decides when that pays. Pure: the clock, the snapshot and the placer are arguments.

Neighbours: the caller (the operator's admission cycle, `queueing.cluster`, and the
simulator, `queueing.simulate`) runs `plan_moves` after `queueing.admission.admit`, on the
snapshot as the pass left it (everything admitted and every hold reserved), so a move only
ever takes GPUs no waiting gang was given. `queueing.preemption.protection` supplies the
minimum-run rule; `queueing.model` the records. The operator carries a Move out through
the checkpoint-then-restart path of `trainop.reconcile` (status.checkpointRequest).

The rule, in words (issue 37):
- **Gain**: (the gang's allreduce estimate now - the estimate at the best placement free
  now) x its steps left: seconds of this gang's time saved, if it does one allreduce per step
  (the cost model's 1 GiB estimate). Steps left come from status.progress.step and
  spec.progress.totalSteps; no estimate of steps left, no move.
- **Cost**: seconds this gang is down for the move: its own measured time from a checkpoint
  request to Running again (from its last move), or the configured default before it has one.
- **Or the gain of a waiting gang**: a gang W that waits for GPUs (NoFit), of priority at
  least this gang's, that fits whole once this gang moves to a placement free now (W on
  this gang's nodes and what is free, this gang elsewhere). Worth W's expected run
  (`QueuedJob.expected_run`; unknown: nothing) x W's GPUs / this gang's GPUs: W's work
  started now rather than later, in this gang's seconds; less what this gang loses when
  its new placement is slower (its steps left x the allreduce difference; unknown steps
  left: only a placement no slower counts). The larger of the two gains is taken.
- **Move when gain >= multiple x cost** (default 2x).
- **Bounds**, each a named refusal: the operator's switch (off by default); at most
  `max_in_flight` moves at once; never the same job twice within `window_seconds`; never a
  job without spec.checkpoint, with spec.placement.migratable false, or of a queue that opts
  out; never a job younger than its guaranteed minimum run (its queue's minRunSeconds or
  its PriorityClass's trainop.dev/min-run-seconds); never for its own sake while a job of
  higher priority waits for GPUs (a move must not take what preemption would not let it
  take), and only for waiting gangs of at least its priority.
- **Consolidation** (policy.consolidate, off by default): a gang spread over several domains
  of the finest level that could hold it whole (a rack, for a gang of one rack's size or
  less), no domain of which is free for it, may move into one once smaller gangs step aside.
  The DOMAINS_TRIED domains that miss the fewest GPUs are tried; inside one, up to
  MAX_STEP_ASIDE smaller gangs (mostly inside it first), each eligible by every bound above,
  must go onto GPUs free now (not onto each other's or the spread gang's nodes, so each move
  can be carried out alone, in order) at a placement no slower than theirs. Gain: the
  spread gang's allreduce saved x its steps left; cost: its own plus each stepping gang's,
  weighed by its GPUs / the spread gang's; the same multiple decides. The moves of the
  stepping gangs come first in the plan (`Move.makes_room_for`), then the spread gang's
  (`Move.room`); each counts against max_in_flight, so it needs two slots at least. Taken
  over a plain move of the same gang when its gain less the multiple x cost is larger.
- The destination is reserved (on the snapshot the caller keeps) from the decision until the
  gang runs there, so no one takes it while the gang checkpoints.
- Candidates go largest gain first; each move reserves its destination before the next is
  looked for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from trainop.api.constants import LABEL_HOSTNAME
from trainop.inventory import Snapshot
from trainop.planner import MigrationPolicy
from trainop.queueing.groups import group_of
from trainop.queueing.model import Fit, Placer, QueuedJob, QueueState
from trainop.queueing.ordering import Running
from trainop.queueing.preemption import protection

__all__ = ["MigrationPlan", "MigrationPolicy", "Move", "Mover", "Refusal", "plan_moves"]

# Refusals, each with a named-case row in tests/unit/test_queueing_migration.py.
OFF = "Off"
NO_CHECKPOINT = "NoCheckpoint"
OPTED_OUT = "OptedOut"
QUEUE_OPTED_OUT = "QueueOptedOut"
IN_FLIGHT = "InFlight"
RECENTLY_MOVED = "RecentlyMoved"
MIN_RUN = "MinRun"
NO_ESTIMATE = "NoEstimate"
HIGHER_PRIORITY_WAITS = "HigherPriorityWaits"
NO_BETTER_PLACEMENT = "NoBetterPlacement"
NOT_WORTH_IT = "NotWorthIt"
SLOTS_FULL = "SlotsFull"


@dataclass(frozen=True)
class Mover:
    """A running gang as migration sees it.

    job: its QueuedJob (admitted: nodes, started, priority, queue). checkpoints: it has
    spec.checkpoint. migratable: spec.placement.migratable. allreduce: its placement's
    estimate now (status.placement.estimatedAllreduceSeconds). steps_left: totalSteps - step
    (None: unknown). measured_cost: seconds from its last move's checkpoint request to
    Running again (None: never moved). last_moved: when its last move was decided.
    moving: a move of it is under way now (it counts against max_in_flight)."""

    job: QueuedJob
    checkpoints: bool
    migratable: bool = True
    allreduce: float | None = None
    steps_left: int | None = None
    measured_cost: float | None = None
    last_moved: float | None = None
    moving: bool = False
    ideal: float | None = None  # the estimate alone on an empty fleet (None: unknown)

    @property
    def at_ideal(self) -> bool:
        """Already as fast as it can be anywhere: no placement can beat it (this spares
        the placer a search per running gang and look)."""
        return (
            self.ideal is not None
            and self.allreduce is not None
            and (self.allreduce <= self.ideal * (1 + 1e-9))
        )

    @property
    def key(self) -> str:
        return self.job.key


@dataclass(frozen=True)
class Move:
    """Move `key` from `source` to the placement `to`: est. `gain` and `cost` in seconds."""

    key: str
    source: tuple[str, ...]
    to: Fit
    gain: float
    cost: float
    cost_measured: bool
    allreduce_before: float
    allreduce_after: float
    unblocks: str | None = None  # the waiting gang this move lets start
    makes_room_for: str | None = None  # the spread gang this (smaller) gang steps aside for
    room: tuple[Move, ...] = ()  # the smaller gangs that step aside first (consolidation)

    def reserves(self, job: QueuedJob) -> dict[str, int]:
        """The GPUs the destination takes beyond those the gang holds there already (those
        stay its own through the move): what is reserved while it checkpoints."""
        own = dict(job.nodes)
        out = {n: g - own.get(n, 0) for n, g in self.to.gpus_by_node}
        return {n: g for n, g in out.items() if g > 0}

    @property
    def destination(self) -> tuple[str, ...]:
        return self.to.nodes or tuple(n for n, _ in self.to.gpus_by_node)

    @property
    def message(self) -> str:
        how = "measured on its last move" if self.cost_measured else "the configured default"
        why = f"so that {self.unblocks} can start" if self.unblocks else "over the steps left"
        if self.makes_room_for:
            why = f"making room for {self.makes_room_for}"
        elif self.room:
            why += f", once {', '.join(r.key for r in self.room)} step aside"
        return (
            f"moved from {', '.join(self.source)} to {', '.join(self.destination)}: est. "
            f"allreduce {self.allreduce_before * 1000:.1f} -> {self.allreduce_after * 1000:.1f} "
            f"ms/step, gain {self.gain:.0f} s {why}, cost {self.cost:.0f} s ({how})"
        )


@dataclass(frozen=True)
class Refusal:
    key: str
    rule: str
    message: str


@dataclass(frozen=True)
class MigrationPlan:
    """What one look decided: the moves (largest gain first), the snapshot with their
    destinations reserved, and why every other candidate stays."""

    moves: tuple[Move, ...] = ()
    snapshot: Snapshot | None = None
    refusals: Mapping[str, Refusal] = field(default_factory=dict)


def eligibility(
    m: Mover,
    now: float,
    policy: MigrationPolicy,
    queues: Mapping[str, QueueState],
    waiting: Iterable[QueuedJob],
) -> Refusal | None:
    """The first rule that keeps `m` where it is, before any placement is tried."""
    q = queues.get(m.job.queue)

    def no(rule: str, message: str) -> Refusal:
        return Refusal(m.key, rule, message)

    if not policy.enabled:
        return no(OFF, "migration is off (operator config migration.enabled)")
    if m.moving:
        return no(IN_FLIGHT, "a move of it is under way")
    if not m.checkpoints:
        return no(NO_CHECKPOINT, "no spec.checkpoint: it cannot resume elsewhere")
    if not m.migratable:
        return no(OPTED_OUT, "spec.placement.migratable is false")
    if q is not None and not q.migratable:
        return no(QUEUE_OPTED_OUT, f"queue {q.name} opts out (spec.migratable false)")
    if m.last_moved is not None and now - m.last_moved < policy.window_seconds:
        left = policy.window_seconds - (now - m.last_moved)
        return no(RECENTLY_MOVED, f"moved {now - m.last_moved:.0f} s ago; again in {left:.0f} s")
    shielded, rule = protection(Running(m.job, "", at=now), queues)
    if shielded > 0:
        return no(MIN_RUN, f"within its guaranteed minimum run ({rule}) for {shielded:.0f} s more")
    if m.allreduce is None:
        return no(NO_ESTIMATE, "no allreduce estimate of its placement now")
    return None


def plan_moves(
    now: float,
    movers: Sequence[Mover],
    snapshot: Snapshot,
    place: Placer,
    queues: Mapping[str, QueueState],
    policy: MigrationPolicy,
    waiting: Sequence[QueuedJob] = (),
) -> MigrationPlan:
    """The moves to start now (see the module doc). `snapshot`: the cluster as the pass left
    it, movers' GPUs held; `waiting`: jobs of the pass that wait for GPUs (Quota, NoFit,
    Topology); `place`: the placer the pass used. A consolidation comes out as the moves of
    the gangs that step aside, then the move of the gang they make room for."""
    refusals: dict[str, Refusal] = {}
    slots = policy.max_in_flight - sum(1 for m in movers if m.moving)
    offers: list[Move] = []
    free: dict[str, Mover] = {}
    for m in movers:
        why = eligibility(m, now, policy, queues, waiting)
        if why is None:
            free[m.key] = m
        else:
            refusals[m.key] = why
    if slots < 2:  # a consolidation moves two gangs at least
        policy = replace(policy, consolidate=False)
    for m in free.values():
        move, why = _offer(m, free, snapshot, place, queues, policy, waiting)
        if why is not None:
            refusals[m.key] = why
        elif move is not None:
            offers.append(move)
    moves: list[Move] = []
    for move in sorted(offers, key=lambda o: (-o.gain, o.key)):
        if move.key not in free:
            continue  # it stepped aside for a gang of larger gain
        if slots < 1 + len(move.room):
            refusals[move.key] = Refusal(
                move.key, SLOTS_FULL, f"{policy.max_in_flight} move(s) already under way"
            )
            continue
        # An earlier move of this look may have taken its destination: place it again.
        m = free[move.key]
        again, why = _offer(m, free, snapshot, place, queues, policy, waiting)
        if again is None:
            refusals[move.key] = why or Refusal(move.key, NO_BETTER_PLACEMENT, "taken")
            continue
        for r in again.room:
            snapshot = snapshot.with_reserved(dict(r.to.gpus_by_node))
            snapshot = snapshot.with_released(dict(free[r.key].job.nodes))
            del free[r.key]
        moves.extend((*again.room, again))
        snapshot = snapshot.with_reserved(again.reserves(m.job))
        del free[m.key]
        slots -= 1 + len(again.room)
    return MigrationPlan(tuple(moves), snapshot, refusals)


def _offer(
    m: Mover,
    free: Mapping[str, Mover],
    snapshot: Snapshot,
    place: Placer,
    queues: Mapping[str, QueueState],
    policy: MigrationPolicy,
    waiting: Sequence[QueuedJob],
) -> tuple[Move | None, Refusal | None]:
    """`_best`, or, with policy.consolidate, a consolidation when that gains more."""
    move, why = _best(m, snapshot, place, queues, policy, waiting)
    if not policy.consolidate or (why is not None and why.rule == HIGHER_PRIORITY_WAITS):
        return move, why
    group = consolidation(m, free, snapshot, place, queues, policy)
    if group is None:
        return move, why
    higher = [w for w in waiting if w.priority > m.job.priority]
    if higher:  # as for a move for its own sake
        if move is not None:
            return move, why
        w = higher[0]
        return None, Refusal(
            m.key,
            HIGHER_PRIORITY_WAITS,
            f"{w.key} (priority {w.priority}) waits for GPUs: no consolidation for its own sake",
        )
    net = policy.gain_multiple
    if move is None or group.gain - net * group.cost > move.gain - net * move.cost:
        return group, None
    return move, why


def _best(
    m: Mover,
    snapshot: Snapshot,
    place: Placer,
    queues: Mapping[str, QueueState],
    policy: MigrationPolicy,
    waiting: Sequence[QueuedJob],
) -> tuple[Move | None, Refusal | None]:
    """The better of moving `m` for its own sake and moving it for a waiting gang, and
    whether that pays (gain >= multiple x cost)."""
    assert m.allreduce is not None
    own_move, why = _for_itself(m, snapshot, place, queues)
    higher = [w for w in waiting if w.priority > m.job.priority]
    if higher and own_move is not None:
        # A move for its own sake must not take what a higher-priority gang waits for
        # (preemption would not let it); a move that lets such a gang start may go on.
        own_move = None
        why = Refusal(
            m.key,
            HIGHER_PRIORITY_WAITS,
            f"{higher[0].key} (priority {higher[0].priority}) waits for GPUs",
        )
    offers = [x for x in (own_move, *_for_waiters(m, snapshot, place, queues, waiting)) if x]
    if not offers:
        return None, why
    cost = m.measured_cost if m.measured_cost is not None else policy.default_cost_seconds
    best = max(offers, key=lambda o: (o[0], o[2] or ""))
    gain, fit, unblocks = best
    if gain < policy.gain_multiple * cost:
        return None, Refusal(
            m.key,
            NOT_WORTH_IT,
            f"gain {gain:.0f} s < {policy.gain_multiple:g} x cost {cost:.0f} s",
        )
    assert fit.allreduce is not None
    move = Move(
        m.key,
        tuple(n for n, _ in m.job.nodes),
        fit,
        gain,
        cost,
        m.measured_cost is not None,
        m.allreduce,
        fit.allreduce.seconds,
        unblocks,
    )
    return move, None


_Offer = tuple[float, Fit, str | None]  # gain, destination, the waiting gang it serves


def _as_pending(job: QueuedJob) -> QueuedJob:
    return QueuedJob(
        key=job.key,
        queue=job.queue,
        gpus=job.gpus,
        created=job.created,
        priority=job.priority,
        products=job.products,
    )


def _products(m: Mover, queues: Mapping[str, QueueState]) -> tuple[str, ...] | None:
    q = queues.get(m.job.queue)
    group = q.group(group_of(q, m.job.product)) if q is not None and not q.unlimited else None
    return group.products if group is not None and group.products else None


def _for_itself(
    m: Mover, snapshot: Snapshot, place: Placer, queues: Mapping[str, QueueState]
) -> tuple[_Offer | None, Refusal | None]:
    """The best placement free now for `m` and its gain. Its own GPUs count as free (the
    new placement may keep some of its nodes); the gang restarts whole."""
    assert m.allreduce is not None
    if m.at_ideal:
        return None, Refusal(m.key, NO_BETTER_PLACEMENT, "already at its ideal placement")
    own = {node: gpus for node, gpus in m.job.nodes if node in snapshot}
    result = place(_as_pending(m.job), snapshot.with_released(own), _products(m, queues))
    if not isinstance(result, Fit) or result.allreduce is None:
        return None, Refusal(m.key, NO_BETTER_PLACEMENT, "no placement free now")
    after = result.allreduce.seconds
    if set(result.gpus_by_node) == set(m.job.nodes) or after >= m.allreduce:
        return None, Refusal(
            m.key,
            NO_BETTER_PLACEMENT,
            f"the best placement free now is no faster ({after * 1000:.1f} ms vs "
            f"{m.allreduce * 1000:.1f} ms)",
        )
    if m.steps_left is None:
        return None, Refusal(
            m.key, NO_ESTIMATE, "no estimate of steps left (spec.progress.totalSteps, reports)"
        )
    return ((m.allreduce - after) * m.steps_left, result, None), None


def _for_waiters(
    m: Mover,
    snapshot: Snapshot,
    place: Placer,
    queues: Mapping[str, QueueState],
    waiting: Sequence[QueuedJob],
) -> list[_Offer]:
    """Moves of `m` that let a waiting gang of at least its priority start whole now."""
    assert m.allreduce is not None
    out: list[_Offer] = []
    own = {node: gpus for node, gpus in m.job.nodes if node in snapshot}
    freed = snapshot.with_released(own)
    for w in waiting:
        if w.priority < m.job.priority or not w.expected_run or w.admitted:
            continue
        if isinstance(place(w, snapshot, None), Fit):
            continue  # it fits without the move (it waits on quota, or the pass held it)
        fw = place(w, freed, None)
        if not isinstance(fw, Fit):
            continue
        rest = freed.with_reserved(dict(fw.gpus_by_node))
        fm = place(_as_pending(m.job), rest, _products(m, queues))
        if not isinstance(fm, Fit) or fm.allreduce is None:
            continue
        slower = fm.allreduce.seconds - m.allreduce
        if slower > 0 and m.steps_left is None:
            continue  # its own loss unknown: only a placement no slower counts
        loss = max(0.0, slower) * (m.steps_left or 0)
        value = w.expected_run * w.gpus / max(m.job.gpus, 1) - loss
        out.append((value, fm, w.key))
    return out


def consolidation(
    m: Mover,
    free: Mapping[str, Mover],
    snapshot: Snapshot,
    place: Placer,
    queues: Mapping[str, QueueState],
    policy: MigrationPolicy,
) -> Move | None:
    """Moving smaller gangs out of a domain so that `m`, spread over several domains of the
    finest level that could hold it whole, moves into it (see the module doc). Tried on the
    DOMAINS_TRIED domains that miss the fewest GPUs; the best that pays is returned."""
    if m.steps_left is None or m.allreduce is None or m.at_ideal:
        return None
    best: Move | None = None
    for nodes in _target_domains(m, snapshot):
        group = _blockers(m, free, nodes, snapshot)
        move = _priced(m, group, snapshot, place, queues, policy) if group else None
        if move is not None and (best is None or move.gain - move.cost > best.gain - best.cost):
            best = move
    return best


DOMAINS_TRIED = 3
MAX_STEP_ASIDE = 3  # gangs that step aside for one move, at most


def _target_domains(m: Mover, snapshot: Snapshot) -> list[frozenset[str]]:
    """The domains of the finest level that could hold m whole (its product's GPUs), that
    miss the fewest GPUs for it; [] when m is already whole inside one of them."""
    own = dict(m.job.nodes)
    for level in reversed(snapshot.levels):
        if level == LABEL_HOSTNAME:
            continue
        found: list[tuple[int, list[str], frozenset[str]]] = []
        for members in snapshot.domains(level).values():
            nodes = [n for n in members if n.schedulable and n.gpu.product == m.job.product]
            if sum(n.gpus_allocatable for n in nodes) < m.job.gpus:
                continue
            names = frozenset(n.name for n in nodes)
            if all(n in names for n in own):
                return []  # already whole in one domain of this level
            missing = m.job.gpus - sum(own.get(n.name, 0) + n.gpus_free for n in nodes)
            if missing > 0:
                found.append((missing, sorted(names), names))
        if found:
            return [names for *_, names in sorted(found)][:DOMAINS_TRIED]
    return []


def _blockers(
    m: Mover, free: Mapping[str, Mover], nodes: frozenset[str], snapshot: Snapshot
) -> tuple[Mover, ...]:
    """Smaller movable gangs inside `nodes`, smallest first, until what they hold there and
    what is free there (with m's own) reach m's GPUs; () when they cannot."""
    own = dict(m.job.nodes)
    have = sum(own.get(n, 0) + snapshot.node(n).gpus_free for n in nodes)
    inside = [
        b
        for b in free.values()
        if b.key != m.key
        and b.job.gpus < m.job.gpus
        and b.allreduce is not None
        and any(n in nodes for n, _ in b.job.nodes)
    ]
    inside.sort(
        key=lambda b: (
            -sum(g for n, g in b.job.nodes if n in nodes) / b.job.gpus,
            b.job.gpus,
            b.key,
        )
    )
    group: list[Mover] = []
    for b in inside:
        if have >= m.job.gpus or len(group) == MAX_STEP_ASIDE:
            break
        group.append(b)
        have += sum(g for n, g in b.job.nodes if n in nodes)
    return tuple(group) if have >= m.job.gpus else ()


def _cost(m: Mover, policy: MigrationPolicy) -> float:
    return m.measured_cost if m.measured_cost is not None else policy.default_cost_seconds


def _priced(
    m: Mover,
    group: Sequence[Mover],
    snapshot: Snapshot,
    place: Placer,
    queues: Mapping[str, QueueState],
    policy: MigrationPolicy,
) -> Move | None:
    """m's move into the room `group` leaves, with the group's own moves (each onto GPUs free
    now, no slower than where it is): gain m's allreduce saved x its steps left, cost m's
    plus each of the group's in m's seconds (its GPUs / m's); None when m would be no faster,
    a gang of the group has nowhere as fast to go, or it does not pay."""
    assert m.allreduce is not None and m.steps_left is not None
    freed = snapshot.with_released(dict(m.job.nodes))
    for b in group:
        freed = freed.with_released(dict(b.job.nodes))
    fm = place(_as_pending(m.job), freed, _products(m, queues))
    if not isinstance(fm, Fit) or fm.allreduce is None or fm.allreduce.seconds >= m.allreduce:
        return None
    # The gangs that step aside go where GPUs are free now (not onto each other's nodes or
    # m's), so each move can be carried out on its own, in order.
    held: dict[str, int] = {}
    for x in (m, *group):
        for n, g in x.job.nodes:
            held[n] = held.get(n, 0) + g
    beyond = {n: g - held.get(n, 0) for n, g in fm.gpus_by_node if g > held.get(n, 0)}
    rest = snapshot.with_reserved(beyond)
    room: list[Move] = []
    cost = _cost(m, policy)
    for b in sorted(group, key=lambda b: (-b.job.gpus, b.key)):
        assert b.allreduce is not None
        fb = place(_as_pending(b.job), rest, _products(b, queues))
        if not isinstance(fb, Fit) or fb.allreduce is None:
            return None
        rest = rest.with_reserved(dict(fb.gpus_by_node))
        if set(fb.gpus_by_node) == set(b.job.nodes):
            continue  # it need not move
        if fb.allreduce.seconds > b.allreduce * (1 + 1e-9):
            return None  # a gang steps aside only onto a placement no slower
        cost += _cost(b, policy) * b.job.gpus / m.job.gpus
        source = tuple(n for n, _ in b.job.nodes)
        room.append(
            Move(
                b.key,
                source,
                fb,
                0.0,
                _cost(b, policy),
                b.measured_cost is not None,
                b.allreduce,
                fb.allreduce.seconds,
                makes_room_for=m.key,
            )
        )
    gain = (m.allreduce - fm.allreduce.seconds) * m.steps_left
    if not room or gain < policy.gain_multiple * cost:
        return None
    source = tuple(n for n, _ in m.job.nodes)
    return Move(
        m.key,
        source,
        fm,
        gain,
        cost,
        m.measured_cost is not None,
        m.allreduce,
        fm.allreduce.seconds,
        room=tuple(room),
    )

"""Formats one screen answering "why is it pending / where is it running" for a TrainingJob (pure).

For a job of a queue tree it walks the tree from the root down (quota, used, borrowed and
borrowingLimit per level) and marks the level whose quota or limit holds the job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from trainop.api.constants import ANNOTATION_MIN_RUN
from trainop.queueing.preemption import class_min_run


def _cond_lines(status: Mapping[str, Any]) -> list[str]:
    out = []
    for cond in status.get("conditions") or []:
        if cond.get("status") == "True":
            msg = f" - {cond['message']}" if cond.get("message") else ""
            out.append(f"  {cond['type']:<11} {cond.get('reason', '')}{msg}")
    return out


def _queue_lines(queue: Mapping[str, Any] | None, queue_name: str | None) -> list[str]:
    if not queue_name:
        return ["Queue:      (none: admitted on fit only)"]
    if queue_name.startswith("("):  # queueing.resolve.BUILTIN_QUEUE_NAME, not an object
        return [
            f"Queue:      {queue_name}: no TrainingQueue serves the namespace; admitted on fit only"
        ]
    conds = {
        cd.get("type"): cd for cd in ((queue or {}).get("status") or {}).get("conditions") or []
    }
    active = conds.get("Active")
    if active is not None and active.get("status") == "False":
        return [f"Queue:      {queue_name} (INVALID: {active.get('message', '')})"]
    if queue is None:
        return [f"Queue:      {queue_name} (not found)"]
    lines = [
        f"Queue:      {queue_name}  cohort={queue.get('spec', {}).get('cohort') or '-'}  "
        f"weight={queue.get('spec', {}).get('weight', 1)}"
    ]
    usage = (queue.get("status") or {}).get("usage") or []
    if usage:
        lines.append("  product        quota   used  borrowed  pending")
        for u in usage:
            lines.append(
                f"  {u.get('name', '-'):<13} {u.get('quota', 0):>6} {u.get('used', 0):>6} "
                f"{u.get('borrowed', 0):>9} {u.get('pending', 0):>8}"
            )
    fair = (queue.get("status") or {}).get("fairSharing") or {}
    if fair.get("usageHalfLifeSeconds"):
        averages = ", ".join(
            f"{u.get('name', '-')} {u.get('averageGpus', 0):g}" for u in fair.get("usage") or []
        )
        lines.append(
            f"  fair share over time: half-life {fair['usageHalfLifeSeconds']} s; average GPUs "
            f"used {averages or '0'} (as of {fair.get('updated', '-')}); the queue order reads "
            "these, not the GPUs held now"
        )
    return lines


def _tree_lines(
    queue: Mapping[str, Any] | None, ancestors: Sequence[Mapping[str, Any]], message: str
) -> list[str]:
    """The queue's tree from the root down, one row per level and product group, marking
    the level the pending message says holds the job ("held at NAME (level ...")."""
    if queue is None or not ancestors:
        return []
    levels = [*reversed(ancestors), queue]
    names = [str((q.get("metadata") or {}).get("name", "?")) for q in levels]
    out = [
        "Tree:       " + " > ".join(names),
        "  level queue            product  quota   used  borrowed  limit",
    ]
    for depth, (name, q) in enumerate(zip(names, levels, strict=True), start=1):
        limits = {
            qq.get("name"): qq.get("borrowingLimit")
            for qq in (q.get("spec") or {}).get("quotas") or []
        }
        held = "  <- holds the job" if f"held at {name} (" in message else ""
        for u in (q.get("status") or {}).get("usage") or [{"name": "-"}]:
            limit = limits.get(u.get("name"))
            out.append(
                f"  {depth:<5} {name:<16} {u.get('name', '-'):<8} {u.get('quota', 0):>5} "
                f"{u.get('used', 0):>6} {u.get('borrowed', 0):>9} "
                f"{'-' if limit is None else limit:>6}{held}"
            )
            held = ""
    return out


MAX_METRICS_SHOWN = 12


def _progress_lines(status: Mapping[str, Any]) -> list[str]:
    """What the trainer reported (status.progress, docs/progress.md) and a pending
    checkpoint request."""
    p = status.get("progress")
    if not p:
        return []
    rate = [
        f"{p[k]:g} {unit}"
        for k, unit in (
            ("stepSeconds", "s/step"),
            ("samplesPerSecond", "samples/s"),
            ("tokensPerSecond", "tokens/s"),
        )
        if p.get(k) is not None
    ]
    lines = [
        f"Progress:   {p.get('summary') or p.get('step')}"
        + (f"  {', '.join(rate)}" if rate else "")
        + (f"  ETA {p['eta']}" if p.get("eta") else "")
        + (f"  phase {p['phase']}" if p.get("phase") else "")
        + f"  (reported {p.get('lastReportTime') or '-'}"
        + (" by Kubeflow trainerStatus)" if p.get("source") == "kubeflow" else ")")
    ]
    metrics = p.get("metrics") or []
    if metrics:
        shown = ", ".join(f"{m.get('name')} {m.get('value')}" for m in metrics[:MAX_METRICS_SHOWN])
        more = len(metrics) - MAX_METRICS_SHOWN
        lines.append(f"  metrics: {shown}" + (f" (and {more} more)" if more > 0 else ""))
    ckpt = p.get("lastCheckpoint")
    if ckpt:
        lines.append(
            f"  last checkpoint: step {ckpt.get('step')} at {ckpt.get('path')} ({ckpt.get('time')})"
        )
    expected = p.get("baselineStepSeconds") or p.get("bestStepSeconds")
    if expected:
        lines.append(
            f"  step time reference: {expected:g} s (earlier placement or best after warm-up)"
        )
    slow = sorted(p.get("ranks") or [], key=lambda r: -float(r.get("stepSeconds") or 0))[:2]
    if len(slow) > 1:
        lines.append(
            "  slowest ranks: "
            + ", ".join(
                f"rank {r['rank']} on {r.get('node') or '-'} {r['stepSeconds']:g} s" for r in slow
            )
        )
    request = status.get("checkpointRequest")
    if request:
        lines.append(
            f"  checkpoint asked for at {request.get('requestedAt')} (step {request.get('step')}), "
            f"eviction at {request.get('deadline')} at the latest"
        )
    return lines


def _runtime_lines(spec: Mapping[str, Any], status: Mapping[str, Any]) -> list[str]:
    """The runtime the job names (spec.runtimeRef) and the generation its spec was merged
    with (status.runtime); docs/runtimes.md."""
    ref, merged = spec.get("runtimeRef") or {}, status.get("runtime") or {}
    if not ref and not merged:
        return []
    kind = merged.get("kind") or ref.get("kind") or "ClusterTrainingRuntime"
    name = merged.get("name") or ref.get("name")
    gen = merged.get("generation")
    how = f"generation {gen}" if gen is not None else "not merged yet"
    line = f"Runtime:    {kind} {name} ({how})"
    if not spec.get("framework"):
        line += "; framework, image and defaults come from it"
    return [line]


def _protection_lines(
    queue: Mapping[str, Any] | None,
    status: Mapping[str, Any],
    priority_class: Mapping[str, Any] | None = None,
) -> list[str]:
    """A running job's guaranteed minimum run: the stricter of its queue's
    spec.preemption.minRunSeconds and its PriorityClass's trainop.dev/min-run-seconds (the
    queue's on a tie), from when it may be a preemption (or migration) victim, and which."""
    by_queue = ((queue or {}).get("spec") or {}).get("preemption", {}).get("minRunSeconds") or 0
    meta = (priority_class or {}).get("metadata") or {}
    try:
        by_class = class_min_run(str(meta.get("name")), meta.get("annotations"))
    except ValueError as exc:  # the operator counts it as none
        return [f"Protected:  none from its PriorityClass: {exc}"]
    start = status.get("startTime")
    if not (by_queue or by_class) or not start or status.get("phase") != "Running":
        return []
    if by_class > by_queue:
        least, rule = (
            by_class,
            f"PriorityClass {meta.get('name')} {ANNOTATION_MIN_RUN} {by_class:g}",
        )
    else:
        least, rule = float(by_queue), f"queue minRunSeconds {by_queue}"
    try:
        since = datetime.strptime(str(start), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return []
    until = (since + timedelta(seconds=least)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [
        f"Protected:  no preemption or migration victim before {until} "
        f"({rule} from its start {start})"
    ]


_IMEX = {
    "ComputeDomain": "IMEX channels from the job's ComputeDomain (NCCL_MNNVL_ENABLE=1)",
    "NotSetUp": "IMEX not set up (operator config dra.computeDomains is off): NCCL crosses "
    "trays over the network",
}


def _migration_lines(status: Mapping[str, Any]) -> list[str]:
    """status.migration (queueing.migration): a move under way or the last one done."""
    move = status.get("migration")
    if not isinstance(move, Mapping) or not move.get("phase"):
        return []
    src = ", ".join(move.get("source") or []) or "-"
    dst = ", ".join(move.get("destination") or []) or "-"
    gain = float(move.get("estimatedGainSeconds") or 0)
    cost = float(move.get("estimatedCostSeconds") or 0)
    lines = [f"Migration:  {move['phase']} (move {move.get('moves') or 1} of this job)"]
    lines.append(f"  from {src} to {dst}")
    lines.append(f"  est. gain {gain:.0f} s for an est. cost of {cost:.0f} s")
    if move["phase"] == "Moving":
        held = move.get("reserved") or {}
        lines.append(
            f"  asked at {move.get('requestedAt', '?')}: checkpoint, then restart there"
            + (f" (held: {', '.join(f'{n} {g} GPUs' for n, g in sorted(held.items()))})"
               if held else "")
        )  # fmt: skip
    else:
        measured = move.get("measuredCostSeconds")
        lines.append(
            f"  ran again at {move.get('movedAt', '?')}"
            + (f", measured cost {float(measured):.0f} s (prices its next move)"
               if measured is not None else "")
        )  # fmt: skip
    return lines


def explain_text(
    job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]],
    queue: Mapping[str, Any] | None,
    ancestors: Sequence[Mapping[str, Any]] = (),
    priority_class: Mapping[str, Any] | None = None,
) -> str:
    """One screen about a job; `ancestors`: its queue's parent, grandparent, ... (a tree);
    `priority_class`: its spec.priorityClassName's object (its guaranteed minimum run)."""
    meta, spec, status = job.get("metadata", {}), job.get("spec", {}), job.get("status") or {}
    fw = spec.get("framework", {})
    lines = [
        f"TrainingJob {meta.get('namespace')}/{meta.get('name')}",
        f"Phase:      {status.get('phase', '(not reconciled yet)')}",
        f"Framework:  {fw.get('name')} {fw.get('version') or ''}  cuda>={spec.get('cuda') or '-'}  "
        f"GPUs={status.get('gpus', '-')}",
        f"Image:      {status.get('image') or '(not chosen yet)'}"
        + (f"  ({status['compatibility']})" if status.get("compatibility") else ""),
    ]
    lines += _runtime_lines(spec, status)
    tried = status.get("imageTried") or []
    if len(tried) > 1:
        lines.append("  releases tried: " + "; ".join(tried))
    lines += _queue_lines(queue, status.get("queue") or spec.get("queue"))
    lines += _tree_lines(queue, ancestors, str(status.get("pendingMessage") or ""))
    if status.get("phase") == "Queued":
        pos = status.get("queuePosition")
        lines.append(
            f"Waiting:    {status.get('pendingReason', '?')}"
            + (f" (position {pos} in queue)" if pos else "")
        )
        if status.get("pendingMessage"):
            lines.append(f"  {status['pendingMessage']}")
    placement = status.get("placement")
    if placement:
        lines.append(
            f"Placement:  {placement.get('level')} {placement.get('domain')}  "
            f"span={placement.get('span')}  score={placement.get('score')}"
        )
        lines.append(f"  nodes (rank order): {', '.join(placement.get('nodes') or [])}")
        seconds = placement.get("estimatedAllreduceSeconds")
        if seconds is not None:
            lines.append(
                f"  est. allreduce of 1 GiB: {seconds * 1000:.1f} ms "
                f"(widest link: {placement.get('allreduceBottleneck') or '-'})"
            )
        imex = placement.get("imex")
        if imex:  # a gang across the trays of one NVLink clique (docs/mnnvl.md)
            lines.append(f"  multi-node NVLink: {_IMEX.get(imex, imex)}")
    lines += _migration_lines(status)
    lines += _progress_lines(status)
    lines += _protection_lines(queue, status, priority_class)
    if status.get("restartCount"):
        lines.append(
            f"Restarts:   {status['restartCount']} (backoffLimit "
            f"{spec.get('runPolicy', {}).get('backoffLimit', 3)})"
        )
    lines.append("Conditions:")
    lines += _cond_lines(status) or ["  (none)"]
    if pods:
        lines.append("Pods:")
        for p in sorted(pods, key=lambda p: p["metadata"]["name"]):
            labels = p["metadata"].get("labels") or {}
            gated = " gated" if (p.get("spec") or {}).get("schedulingGates") else ""
            lines.append(
                f"  {p['metadata']['name']:<34} {(p.get('status') or {}).get('phase', '?'):<10} "
                f"rank={labels.get('trainop.dev/rank', '-'):<3} node={(p.get('spec') or {}).get('nodeName') or '-'}{gated}"
            )
    if events:
        lines.append("Recent events:")
        for e in sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")[
            -6:
        ]:
            lines.append(
                f"  {e.get('type', ''):<7} {e.get('reason', ''):<16} {e.get('message', '')}"
            )
    return "\n".join(lines)

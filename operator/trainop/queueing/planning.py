"""Admission <-> planner glue: a placer that runs `plan_job`; policy checked on the planner's image.

Neighbours: `queueing.admission` calls the placer on what-if snapshots; the operator and
`queueing.simulate` build one per pass from the TrainingJob bodies. Because the placer is the
planner itself, what admission admits is exactly what the operator creates and
`trainop render` prints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from trainop.api.constants import RESOURCE_MIG_PREFIX
from trainop.api.trainingjob import TrainingJobSpec
from trainop.inventory import Snapshot
from trainop.placement import Placement
from trainop.planner import (
    InvalidJob,
    OperatorConfig,
    Plan,
    Wait,
    config_for_queue,
    ideal_placement,
    plan_growth,
    plan_job,
    resolve,
)
from trainop.queueing.model import (
    INCOMPATIBLE,
    NOFIT,
    Bound,
    Fit,
    QueuedJob,
    QueueState,
    Unfit,
)
from trainop.queueing.policy import Violation, check_policy


def with_products(body: Mapping[str, Any], products: tuple[str, ...]) -> dict[str, Any]:
    """A copy of the job body whose spec.placement.gpuProducts is narrowed to `products`
    (intersected with what the job allows), so the planner places on one quota group."""
    spec = dict(body.get("spec") or {})
    placement = dict(spec.get("placement") or {})
    allowed = placement.get("gpuProducts") or []
    placement["gpuProducts"] = [p for p in products if not allowed or p in allowed]
    spec["placement"] = placement
    out = dict(body)
    out["spec"] = spec
    return out


def fit_of(plan: Plan | Placement, snapshot: Snapshot, ideal: Placement | None = None) -> Fit:
    """A planner Plan (or a bare Placement) as admission's Fit (the Plan rides along as
    `placement`); `ideal`: the gang's placement on an empty fleet (topology-aware waiting).
    A job on MIG-mixed slices is charged to the slice's product ('<product>-MIG-<profile>',
    as the MIG single strategy names it), never to the node's whole GPUs."""
    p = plan.placement if isinstance(plan, Plan) else plan
    product = None
    for name in p.nodes:
        node = snapshot.get(name)
        if node is not None and node.gpu.product:
            product = node.gpu.product
            break
    resource = plan.gpu_resource if isinstance(plan, Plan) else ""
    if product and resource.startswith(RESOURCE_MIG_PREFIX):
        product = f"{product}-MIG-{resource[len(RESOURCE_MIG_PREFIX) :]}"
    return Fit(
        placement=plan,
        gpus_by_node=tuple(sorted(p.gpus_by_node().items())),
        product=product,
        nodes=p.nodes,
        allreduce=p.allreduce,
        ideal=ideal.allreduce if ideal is not None else None,
    )


class PlannerPlacer:
    """try_place backed by planner.plan_job; `bodies` maps QueuedJob.key to the job body."""

    def __init__(
        self,
        bodies: Mapping[str, Mapping[str, Any]],
        config: OperatorConfig,
        queues: Mapping[str, QueueState] | None = None,
    ) -> None:
        self.bodies = bodies
        self.config = config
        # queue name -> its state: its policy.compatibilityModes narrow the config's modes
        self.queues = queues or {}

    def cannot_fit(self, job: QueuedJob, body: Mapping[str, Any], snapshot: Snapshot) -> str | None:
        """Why the gang can be placed nowhere on this snapshot, from the fleet's free GPUs
        alone (O(1), before the planner): more GPUs than are free in the whole cluster, or a
        replica larger than any node's free GPUs. None: the planner decides. Not for GPU
        sharing or DRA, whose units the node totals do not count alike."""
        if self.config.dra.enabled or (body.get("spec") or {}).get("gpuSharing"):
            return None
        total, most = snapshot.free_bound()
        if job.gpus > total:
            return f"needs {job.gpus} GPUs; the cluster has {total} free"
        largest = _largest_replica(body)
        if largest > most:
            return (
                f"a replica needs {largest} GPUs on one node; the most free on any node is {most}"
            )
        return None

    def ideal(self, key: str, body: Mapping[str, Any], snapshot: Snapshot) -> Placement | None:
        """The gang alone on the empty fleet, for Preferred gangs only. It depends on the
        nodes, not on their use, so the snapshot keeps it (a "static" memo) across the
        what-if copies of a cycle and across cycles while no node changes."""
        spec = body.get("spec") or {}
        placement = spec.get("placement") or {}
        if placement.get("mode", "Preferred") != "Preferred":
            return None
        # Keyed by the spec, not the job: only the estimate (`allreduce`) of the ideal is
        # read, and it is the same for every job of one shape (a burst has few shapes).
        shape = json.dumps(spec, sort_keys=True, default=str)
        found: Placement | None = snapshot.memo(
            ("static", "ideal", shape, id(self.config)),
            lambda: ideal_placement(body, snapshot, self.config),
        )
        return found

    def __call__(
        self, job: QueuedJob, snapshot: Snapshot, products: tuple[str, ...] | None
    ) -> Fit | Unfit:
        body = self.bodies[job.key]
        seen = _placeable_key(job, body, products)
        short = self.cannot_fit(job, body, snapshot) if seen in snapshot.memo_view() else None
        if short is not None:  # the same answer wherever the free bound and `seen` are alike
            return Unfit(NOFIT, short, basis=Bound(snapshot.free_bound(), seen))
        result = self._plan(job, body, snapshot, products)
        if isinstance(result, Fit) or result.reason == NOFIT:
            snapshot.memo(seen, lambda: True)  # compatible: later tries may take the shortcut
        return result

    def _plan(
        self,
        job: QueuedJob,
        body: Mapping[str, Any],
        snapshot: Snapshot,
        products: tuple[str, ...] | None,
    ) -> Fit | Unfit:
        if products is not None:
            body = with_products(body, products)
            if not body["spec"]["placement"]["gpuProducts"]:
                return Unfit(INCOMPATIBLE, "the job allows none of the group's GPU products")
        try:
            # Pods carry the gang generation; a restarted job's new gang must match it.
            generation = int((body.get("status") or {}).get("restartCount") or 0)
            queue = self.queues.get(job.queue)
            config = (
                config_for_queue(self.config, queue.policy.compatibility_modes)
                if queue is not None
                else self.config
            )
            if job.grow_from is not None:
                return self._growth(job, body, snapshot, config, generation)
            result = plan_job(
                body,
                snapshot,
                config,
                gang_generation=generation,
                workers=job.size if job.elastic is not None else None,
            )
        except InvalidJob as exc:
            # e.g. no image of the framework runs on this group's GPUs: another group may do.
            return Unfit(INCOMPATIBLE, f"{exc.field}: {exc.detail}")
        if isinstance(result, Wait):
            return Unfit(result.reason, result.message)
        ideal = None
        if len(result.placement.nodes) > 1:
            ideal = self.ideal(job.key, body, snapshot)
        return fit_of(result, snapshot, ideal)

    def _growth(
        self,
        job: QueuedJob,
        body: Mapping[str, Any],
        snapshot: Snapshot,
        config: OperatorConfig,
        generation: int,
    ) -> Fit | Unfit:
        """The new workers of a growth (queueing.elastic), placed near the gang's nodes."""
        assert job.grow_from is not None and job.size is not None
        result = plan_growth(
            body,
            snapshot,
            config,
            grow_from=job.grow_from,
            size=job.size,
            held=[node for node, _ in job.nodes],
            gang_generation=generation,
        )
        if isinstance(result, Wait):
            return Unfit(result.reason, result.message)
        plan, where = result
        return replace(fit_of(plan, snapshot), note=where)


def _placeable_key(
    job: QueuedJob, body: Mapping[str, Any], products: tuple[str, ...] | None
) -> tuple[Any, ...]:
    """A "static" memo key: this job version (for these products) has been found
    compatible with some nodes (a Fit, or NoFit rather than Incompatible), so a shortage of
    free GPUs alone may answer for it. Static: kept while no node changes."""
    meta = body.get("metadata") or {}
    return ("static", "placeable", job.key, meta.get("uid"), meta.get("generation"), products)


def memo_job(key: Any) -> str | None:
    """The job whose "placeable" memo `key` is (see `_placeable_key`), else None: its
    entries go once the job is gone (ShellState), or derived snapshots would keep them for
    as long as no node changes."""
    if isinstance(key, tuple) and len(key) > 2 and key[:2] == ("static", "placeable"):
        return str(key[2])
    return None


def _largest_replica(body: Mapping[str, Any]) -> int:
    roles = (body.get("spec") or {}).get("replicaSpecs") or {}
    return max((int((r or {}).get("gpus") or 0) for r in roles.values()), default=0)


def job_policy(
    spec: TrainingJobSpec, queue: QueueState, snapshot: Snapshot, config: OperatorConfig
) -> tuple[Violation, ...]:
    """Tenant-policy violations of a job in `queue`, checked on the image the planner picks
    (raises InvalidJob when no image can be chosen at all). Built-in queue: none."""
    if queue.builtin:
        return ()
    choice = resolve(spec, snapshot, config)
    return check_policy(spec, queue.policy, queue=queue.name, image=choice.image, cuda=choice.cuda)

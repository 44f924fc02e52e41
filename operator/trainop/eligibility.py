"""Image choice together with gang placement: the newest suitable release the whole gang fits on.

The planner calls `choose_and_place` once per job (the one entry point). It works in
three steps, each pure and cheap on 1,000+ node fleets:

1. Node-level filter, once per node and release-independent: the pod templates'
   nodeSelector / required node affinity / tolerations (`placement.constraints`), the
   job's GPU product allow-list, GPU sharing (a whole-GPU gang never lands on time-sliced,
   MPS or MIG slices; a `spec.gpuSharing` job only on the slices it asks for) and any
   extra filter of the caller (the fabric check).
2. Node classes: nodes with identical GFD GPU facts (product, driver, compute
   capability, ...; not their clique or name) get one verdict per release from
   `catalog.check_node`, cached for the call; a release no class can run is skipped
   without ever calling placement.
3. Ranked search: for each allowed compatibility mode, best first (native, then forward
   compatibility, then minor-version compatibility), the candidate releases are tried
   confirmed-first, newest-first; the first one whose eligible nodes hold the whole gang
   (topology mode respected, `placement.place`) wins. A release whose eligible node set
   equals one already refused is refused without placing again. A node is eligible only
   if the image is published for its CPU architecture (`kubernetes.io/arch`, the catalog's
   per-image arm64 window), and a gang never mixes architectures: when a release's
   eligible nodes span amd64 and arm64, each architecture is tried on its own, the one
   with the most free GPUs first (`by_arch`).

Every release tried is reported with why it was refused (`GangChoice.tried`), for
`trainop render` / `explain`, and the mode used becomes status.compatibility.
Neighbours: `catalog.images` lists candidate releases, `catalog.compat` judges nodes,
`placement` places; the planner turns the result into a Plan or a Wait.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from trainop.api import constants as c
from trainop.catalog import Catalog, Compat, GpuFacts, ImageChoice, check_node
from trainop.catalog.compat import ALL_MODES, KIND_NOT_GPU, MODES, summarize_incompatible
from trainop.catalog.gfd import LABEL_ARCH
from trainop.catalog.images import Candidates
from trainop.inventory import DEFAULT_TOLERATED_TAINT_KEYS, NodeInfo, Snapshot
from trainop.placement import GangRequest, NodeFilter, NoFit, Placement, place
from trainop.placement.constraints import (
    Constraints,
    from_template,
    selector_verdict,
    tolerated_view,
)

KIND_EXCLUDED = "excluded"
SHARE_MIG = "MIG"
SHARE_SHARED = "Shared"

RequestFor = Callable[[NodeFilter, str], GangRequest]


@dataclass(frozen=True)
class Sharing:
    """What a single-replica job asks of a shared GPU (spec.gpuSharing); None: whole GPUs."""

    mode: str  # MIG | Shared
    mig_profile: str | None = None


@dataclass(frozen=True)
class ChoiceOptions:
    """Operator/queue settings for image choice."""

    modes: frozenset[str] = ALL_MODES
    allow_unconfirmed: bool = True
    tolerated_taint_keys: tuple[str, ...] = DEFAULT_TOLERATED_TAINT_KEYS


@dataclass(frozen=True)
class GangChoice:
    """The outcome: the image, and where the gang goes (or why it cannot go anywhere)."""

    image: ImageChoice
    result: Placement | NoFit | None  # None: no node can run any candidate (Incompatible)
    compatibility: str | None = None  # Native | ForwardCompat | MinorVersionCompat when placed
    tried: tuple[str, ...] = ()
    incompatible: str | None = None  # the message when result is None
    snapshot: Snapshot | None = None  # the job's view (tolerations, shared capacity applied)
    gpu_resource: str = c.RESOURCE_GPU  # the resource each GPU pod requests


def class_key(facts: GpuFacts) -> GpuFacts:
    """Nodes with equal keys get equal compatibility verdicts (the clique does not matter)."""
    return replace(facts, clique=None) if facts.clique is not None else facts


# ------------------------------------------------------------------ node level


def sharing_verdict(node: NodeInfo, sharing: Sharing | None) -> tuple[str | None, int, str]:
    """(reason or None, GPUs of the requested kind allocatable, resource name)."""
    g = node.gpu
    if sharing is None:
        if g.shared:
            kind = f"MIG {g.mig_profile}" if g.mig_profile else g.sharing
            reps = f", {g.replicas} replicas per GPU" if g.replicas and g.replicas > 1 else ""
            return (
                f"its nvidia.com/gpu are slices of GPUs ({kind}{reps}): ranks of a gang need "
                "whole GPUs (spec.gpuSharing asks for a slice, single-replica jobs only)",
                0,
                c.RESOURCE_GPU,
            )
        return None, node.gpus_allocatable, c.RESOURCE_GPU
    if sharing.mode == SHARE_MIG:
        profile = sharing.mig_profile or ""
        if g.mig_profile == profile:
            return None, node.gpus_allocatable, c.RESOURCE_GPU  # MIG single strategy
        mixed = c.RESOURCE_MIG_PREFIX + profile
        if node.extended.get(mixed, 0) > 0:  # MIG mixed strategy
            return None, node.extended[mixed], mixed
        return f"offers no MIG {profile} slices", 0, c.RESOURCE_GPU
    if g.sharing in ("time-slicing", "mps"):
        return None, node.gpus_allocatable, c.RESOURCE_GPU
    return "does not share its GPUs (no time-slicing or MPS)", 0, c.RESOURCE_GPU


def _job_view(
    node: NodeInfo, sharing: Sharing | None, constraints: Sequence[Constraints], keys: Iterable[str]
) -> tuple[NodeInfo, str | None, str]:
    """The node as this job sees it, the node-level reason it is excluded, its GPU resource."""
    view = tolerated_view(node, constraints, keys) if constraints else node
    why, capacity, resource = sharing_verdict(node, sharing)
    if sharing is not None and why is None and capacity != node.gpus_allocatable:
        used = 0  # MIG mixed: per-profile use is checked by the scheduler at bind time
        view = replace(view, gpus_allocatable=capacity, gpus_used=used, gpus_free=capacity)
    return view, why, resource


@dataclass
class _Fleet:
    """Per-call state: the job's view of the fleet and cached verdicts."""

    catalog: Catalog
    modes: frozenset[str]
    static: dict[str, str | None] = field(default_factory=dict)
    classes: dict[GpuFacts, list[NodeInfo]] = field(default_factory=dict)
    verdicts: dict[tuple[GpuFacts, str], Compat] = field(default_factory=dict)
    resource: dict[str, str] = field(default_factory=dict)
    plain: bool = False  # built by _plain_fleet: its filters may be shared across jobs
    # The CPU architectures of `classes`, when known up front (_plain_fleet's, worked out
    # once per snapshot): one architecture means no gang needs splitting (`by_arch`).
    archs: frozenset[str] | None = None

    def verdict(self, key: GpuFacts, image: ImageChoice) -> Compat:
        vk = (key, image.image)
        got = self.verdicts.get(vk)
        if got is None:
            got = check_node(
                self.catalog, key, image.cuda, image.release, modes=self.modes, archs=image.archs
            )
            self.verdicts[vk] = got
        return got

    def eligible(self, image: ImageChoice, tier: int) -> frozenset[GpuFacts]:
        return frozenset(k for k in self.classes if self.verdict(k, image).rank <= tier)


def _build_fleet(
    catalog: Catalog,
    snapshot: Snapshot,
    *,
    options: ChoiceOptions,
    constraints: Sequence[Constraints],
    products: Collection[str],
    sharing: Sharing | None,
    extra: NodeFilter | None,
) -> tuple[_Fleet, Snapshot]:
    if sharing is None and not constraints and extra is None:
        return _plain_fleet(catalog, snapshot, options, tuple(products)), snapshot
    fleet = _Fleet(catalog, options.modes)
    views = []
    for node in snapshot.nodes:
        view, why, resource = _job_view(node, sharing, constraints, options.tolerated_taint_keys)
        views.append(view)
        fleet.resource[node.name] = resource
        if why is None and products and node.gpu.product not in products:
            why = (
                f"{node.gpu.product or 'unlabelled GPU'} is not in spec.placement.gpuProducts "
                f"({', '.join(products)})"
            )
        if why is None and constraints:
            why = selector_verdict(constraints, node)
        if why is None and extra is not None:
            why = extra(node)
        fleet.static[node.name] = why
        if why is None and view.gpus_allocatable > 0:
            fleet.classes.setdefault(class_key(node.gpu), []).append(view)
    return fleet, Snapshot(nodes=tuple(views), levels=snapshot.levels)


def _plain_fleet(
    catalog: Catalog, snapshot: Snapshot, options: ChoiceOptions, products: tuple[str, ...]
) -> _Fleet:
    """The common case, a job with no sharing, template constraints or fabric filter: the
    job sees the snapshot as it is, and which nodes it may use depends only on the products,
    so that part is worked out once per snapshot (and kept by its what-if copies) instead of
    once per job: at 1,000s of nodes and jobs per admission cycle this is most of the work."""

    def build() -> tuple[
        dict[str, str | None], dict[GpuFacts, list[NodeInfo]], dict[str, str], frozenset[str]
    ]:
        static: dict[str, str | None] = {}
        classes: dict[GpuFacts, list[NodeInfo]] = {}
        for node in snapshot.nodes:
            why = sharing_verdict(node, None)[0]  # sliced GPUs never carry a gang
            if why is None and products and node.gpu.product not in products:
                why = (
                    f"{node.gpu.product or 'unlabelled GPU'} is not in spec.placement.gpuProducts "
                    f"({', '.join(products)})"
                )
            static[node.name] = why
            if why is None and node.gpus_allocatable > 0:
                classes.setdefault(class_key(node.gpu), []).append(node)
        archs = frozenset(k.cpu_arch for k in classes)
        return static, classes, dict.fromkeys(static, c.RESOURCE_GPU), archs

    static, classes, resource, archs = snapshot.memo(("static", "plain-fleet", products), build)
    return _Fleet(
        catalog, options.modes, static, classes, resource=resource, plain=True, archs=archs
    )


# ------------------------------------------------------------------ the search


def _ordered(cands: Candidates) -> list[ImageChoice]:
    """Confirmed releases newest-first, then unconfirmed ones newest-first."""
    if cands.explicit is not None:
        return [cands.explicit]
    ships = cands.spec.ships if cands.spec else None
    newest = list(reversed(cands.releases))
    confirmed = [r for r in newest if not r.unconfirmed_node_facts(ships)]
    unconfirmed = [r for r in newest if r.unconfirmed_node_facts(ships)]
    out = []
    for r in confirmed + unconfirmed:
        tail = (
            ""
            if r in confirmed
            else (f" (its {', '.join(r.unconfirmed_node_facts(ships))} unconfirmed)")
        )
        out.append(cands.choice(r, f"{cands.head(r)}{tail}"))
    return out


def _label(image: ImageChoice) -> str:
    r = image.release
    return f"NGC {r.name} ({image.image})" if r is not None else image.image


def _filter_for(
    fleet: _Fleet, image: ImageChoice, tier: int, arch: str | None = None
) -> NodeFilter:
    """Nodes that run `image` by a mode up to `tier`; with `arch`, only nodes of that CPU
    architecture (one try of a gang whose eligible nodes span several)."""
    allowed = MODES[tier]

    def check(node: NodeInfo) -> str | None:
        why = fleet.static.get(node.name)
        if why is not None:
            return why
        verdict = fleet.verdict(class_key(node.gpu), image)
        if verdict.rank <= tier:
            if arch is not None and node.gpu.cpu_arch != arch:
                return (
                    f"{LABEL_ARCH}={node.gpu.cpu_arch}: this try places the gang on {arch} "
                    "nodes (a gang's pods share one architecture)"
                )
            return None
        if verdict.ok:
            return f"runs the image only through {verdict.mode}, beyond {allowed} (tried later)"
        return verdict.reason or "cannot run the image"

    return check


def by_arch(fleet: _Fleet, eligible: frozenset[GpuFacts]) -> list[tuple[str | None, frozenset]]:
    """The eligible node classes split by CPU architecture, most free GPUs first (then by
    name): a gang never mixes amd64 and arm64 nodes (its pods run one image, which
    need not be the same program on both, and collectives across them are untested).
    One architecture: [(None, eligible)], no split."""
    if fleet.archs is not None and len(fleet.archs) <= 1:
        return [(None, eligible)]  # the fleet has one architecture: so have its subsets
    groups: dict[str, set[GpuFacts]] = {}
    for key in eligible:
        groups.setdefault(key.cpu_arch, set()).add(key)
    if len(groups) == 1:
        return [(None, eligible)]
    free = {
        arch: sum(n.gpus_free for k in keys for n in fleet.classes.get(k, ()))
        for arch, keys in groups.items()
    }
    order = sorted(groups, key=lambda a: (-free[a], a))
    return [(a, frozenset(groups[a])) for a in order]


def choose_and_place(
    catalog: Catalog,
    candidates: Candidates,
    snapshot: Snapshot,
    request_for: RequestFor,
    *,
    options: ChoiceOptions = ChoiceOptions(),
    constraints: Sequence[Constraints] = (),
    products: Collection[str] = (),
    sharing: Sharing | None = None,
    extra_filter: NodeFilter | None = None,
) -> GangChoice:
    """Choose the image and place the gang (see the module docstring)."""
    fleet, view = _build_fleet(
        catalog,
        snapshot,
        options=options,
        constraints=constraints,
        products=products,
        sharing=sharing,
        extra=extra_filter,
    )
    images = _ordered(candidates)
    tiers = [t for t, mode in enumerate(MODES) if mode in options.modes]
    tried: list[str] = []
    refused: dict[frozenset[GpuFacts], str] = {}  # eligible class set -> release refused on it
    first_nofit: tuple[ImageChoice, NoFit] | None = None
    for tier in tiers:
        for image in images:
            eligible = fleet.eligible(image, tier)
            if not eligible:
                if tier == tiers[-1]:  # reported once, after every mode was tried
                    tried.append(f"{_label(image)}: no node can run it ({_why_none(fleet, image)})")
                continue
            for arch, subset in by_arch(fleet, eligible):
                label = _label(image) + (f" on {arch} nodes" if arch else "")
                if subset in refused:
                    tried.append(f"{label} [{MODES[tier]}]: NoFit, same nodes as {refused[subset]}")
                    continue
                request = request_for(_filter_for(fleet, image, tier, arch), image.image)
                if fleet.plain:  # equal keys, equal eligibility: place() shares the work
                    key = (id(catalog), image.image, id(image.release), tier, options.modes, arch)
                    request = replace(request, filter_key=key)
                result = place(view, request)
                if isinstance(result, Placement):
                    used = _mode_used(fleet, view, image, result)
                    tried.append(f"{label} [{used}]: placed")
                    return GangChoice(
                        image=image,
                        result=result,
                        compatibility=used,
                        tried=tuple(tried),
                        snapshot=view,
                        gpu_resource=_resource(fleet, result),
                    )
                refused[subset] = label
                tried.append(f"{label} [{MODES[tier]}]: NoFit: {result.reason}")
                first_nofit = first_nofit or (image, result)
    return _give_up(fleet, view, images, tuple(tried), first_nofit)


def _give_up(
    fleet: _Fleet,
    view: Snapshot,
    images: Sequence[ImageChoice],
    tried: tuple[str, ...],
    first_nofit: tuple[ImageChoice, NoFit] | None,
) -> GangChoice:
    """No release placed: NoFit from the best release some nodes run, else Incompatible."""
    if first_nofit is not None:
        image, nofit = first_nofit
        details = (*nofit.details, "image choice, releases tried in order:", *brief(tried))
        return GangChoice(
            image=image, result=NoFit(nofit.reason, details), tried=tried, snapshot=view
        )
    # Nothing runs anywhere: report against the oldest candidate, whose needs are the lowest,
    # so the message names the real obstacle (e.g. an old driver).
    lowest = min(images, key=lambda i: i.release.key if i.release else (0, 0))
    return GangChoice(
        image=lowest,
        result=None,
        tried=tried,
        snapshot=view,
        incompatible=f"no node can run {lowest.image}: {_summary(fleet, view, lowest)}",
    )


def brief(tried: Sequence[str], limit: int = 12) -> tuple[str, ...]:
    """At most `limit` lines of a releases-tried list: the first ones and the last."""
    if len(tried) <= limit:
        return tuple(tried)
    return (*tried[: limit - 2], f"... {len(tried) - limit + 1} more", tried[-1])


def _mode_used(fleet: _Fleet, view: Snapshot, image: ImageChoice, placement: Placement) -> str:
    ranks = [fleet.verdict(class_key(view.node(n).gpu), image).rank for n in placement.nodes]
    return MODES[max(ranks)] if ranks else MODES[0]


def _resource(fleet: _Fleet, placement: Placement) -> str:
    names = {fleet.resource.get(n, c.RESOURCE_GPU) for n in placement.nodes}
    return names.pop() if len(names) == 1 else c.RESOURCE_GPU


def _why_none(fleet: _Fleet, image: ImageChoice) -> str:
    if not fleet.classes:
        return "no node passes the node-level checks"
    results = [
        (nodes[0].name, key, fleet.verdict(key, image))
        for key, nodes in fleet.classes.items()
        for _ in nodes
    ]
    return summarize_incompatible(results).rstrip(".")


def _summary(fleet: _Fleet, snapshot: Snapshot, image: ImageChoice) -> str:
    """Every node's reason, grouped: node-level exclusions and compatibility verdicts."""
    if not snapshot.nodes:
        return "the cluster has no nodes."
    results: list[tuple[str, GpuFacts, Compat]] = []
    for node in snapshot.nodes:
        why = fleet.static.get(node.name)
        if why is not None:
            head = why.split(" (node has")[0]
            verdict = Compat(False, why, KIND_EXCLUDED, head, node.gpu.product or "")
        elif node.gpus_allocatable <= 0:
            verdict = check_node(
                fleet.catalog,
                node.gpu,
                image.cuda,
                image.release,
                modes=fleet.modes,
                archs=image.archs,
            )
            if verdict.ok:
                verdict = Compat(
                    False, "no nvidia.com/gpu allocatable", KIND_NOT_GPU, "not a GPU node", ""
                )
        else:
            verdict = fleet.verdict(class_key(node.gpu), image)
        results.append((node.name, node.gpu, verdict))
    return summarize_incompatible(results)


def constraints_of(templates: Mapping[str, Any]) -> tuple[Constraints, ...]:
    """Constraints of the GPU roles' templates that constrain anything."""
    out = tuple(from_template(role, t) for role, t in sorted(templates.items()))
    return tuple(x for x in out if not x.empty)

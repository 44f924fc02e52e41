"""TrainingJob + cluster snapshot -> Plan (image, placement, NCCL, pods, Service) or a reason to wait.

Pure and deterministic: the same job body, snapshot and config always give the same objects.
The operator (handlers) and `trainop render` both call `plan_job`, so what render prints is
what the operator creates.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from pydantic import ValidationError

from trainop import frameworks, progress
from trainop.api import constants as c
from trainop.api.base import all_errors
from trainop.api.fabricprofile import FabricProfile
from trainop.api.reasons import WaitReason
from trainop.api.templatecheck import template_problems
from trainop.api.trainingjob import TrainingJobSpec, elastic_problem
from trainop.catalog import (
    Catalog,
    ImageChoice,
    ResolutionError,
    load_catalog,
    node_affinity_terms,
    resolve_image,
)
from trainop.catalog.compat import ALL_MODES
from trainop.catalog.gfd import LABEL_ARCH
from trainop.catalog.images import Candidates, candidate_releases
from trainop.dra import (
    IMEX_COMPUTE_DOMAIN,
    IMEX_NOT_SET_UP,
    DraConfig,
    claim_template,
    compute_domain,
    use_channel,
    use_claim,
)
from trainop.eligibility import (
    ChoiceOptions,
    GangChoice,
    Sharing,
    brief,
    choose_and_place,
    constraints_of,
)
from trainop.inventory import NodeInfo, Snapshot
from trainop.manifests import (
    JobRef,
    PodPlan,
    build_config_map,
    build_pod,
    build_service,
    pod_name,
)
from trainop.nccl import FabricMismatch, NcclSettings, nccl_settings, select_profile
from trainop.placement import FabricCost, GangRequest, GroupRequest, NoFit, Placement
from trainop.placement.constraints import terms_met
from trainop.placement.engine import CLIQUE as CLIQUE_LEVEL
from trainop.placement.engine import level_names
from trainop.workload import (
    KUBERNETES,
    TRAINOP,
    eligibility_terms,
    gang_objects,
    join_group,
    topology_key,
)


@dataclass(frozen=True)
class MigrationPolicy:
    """The operator config's `migration:` block: moving running gangs that checkpoint to a
    better placement (queueing.migration decides; off by default)."""

    enabled: bool = False
    gain_multiple: float = 2.0  # move when gain >= gain_multiple x cost
    default_cost_seconds: float = 300.0  # a move's cost before the job has a measured one
    max_in_flight: int = 1  # moves under way at once (checkpointing or restarting)
    window_seconds: float = 3600.0  # never the same job twice within this
    # Also move smaller gangs out of a domain so that a spread gang can move into it
    # whole (queueing.migration's consolidation); each such move counts as a move.
    consolidate: bool = False


@dataclass(frozen=True)
class OperatorConfig:
    """Operator-wide settings that shape plans (from Helm values / `trainop run` flags)."""

    topology_levels: tuple[str, ...] = c.DEFAULT_TOPOLOGY_LEVELS
    fabric_profiles: tuple[FabricProfile, ...] = ()
    catalog: Catalog = field(default_factory=load_catalog)
    # Emit the catalog's compatibility rule as node affinity too (scheduler safety net).
    compat_affinity: bool = True
    restart_backoff_seconds: float = 10.0
    restart_backoff_max_seconds: float = 300.0
    # A running gang whose node has not been Ready for this long is restarted elsewhere
    # (not counted against backoffLimit), as Kubernetes evicts after its NotReady toleration.
    node_lost_seconds: float = 60.0
    # A gang whose image cannot be pulled (ErrImagePull / ImagePullBackOff) this long after
    # it was created fails (reason ImagePullFailed) instead of waiting for ever.
    image_pull_grace_seconds: float = 120.0
    # "kueue": Kueue admits the gang through a Workload trainop owns per job (the shell's
    # handlers.kueue), trainop's own queues stand aside; trainop still places the gang on
    # the admitted flavor's nodes, wires and releases it. See docs/kueue.md.
    external_queue: str = "none"
    dra: DraConfig = field(default_factory=DraConfig)
    # Node verdicts per (node class, image, request): see `_node_verdict`. Owned by this
    # config, so a new config (new catalog or profiles) starts with an empty memo.
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    # Image choice: the CUDA compatibility modes allowed (Native, ForwardCompat,
    # MinorVersionCompat; see catalog.compat) and whether releases with unconfirmed
    # catalog facts may be chosen at all (they are always tried after confirmed ones).
    compatibility_modes: frozenset[str] = ALL_MODES
    allow_unconfirmed_releases: bool = True
    # Default bound of topology-aware waiting for queues that set no
    # spec.topologyWaitSeconds (see queueing.topowait).
    topology_wait_seconds: float = 1800.0
    # "kubernetes": kube-scheduler holds, places and binds each gang through the upstream
    # Workload/PodGroup API (Kubernetes 1.37, trainop.workload); trainop's own queues stand
    # aside and pods are not pinned. "trainop" (the default until that API is GA): as before.
    gang_scheduling: str = TRAINOP
    # Where pods send progress reports (trainop.progress; `trainop run --progress-url`):
    # "" wires no report channel. Reports go out at most every progress_interval seconds.
    progress_url: str = ""
    progress_interval: float = 10.0
    # The progress endpoint's CA bundle (PEM; handlers.tls keeps it current): pods get it
    # beside their token and verify the server with it. "": a plain-HTTP endpoint.
    progress_ca: str = ""
    # Pods wired for progress also get KUBEFLOW_TRAINER_SERVER_URL and _TOKEN, so
    # transformers' KubeflowCallback reports to trainop (trainop.trainerstatus); config key
    # kubeflowTrainerStatus (false: not wired).
    kubeflow_trainer_status: bool = True
    # Moving running gangs to a better placement (config key migration; queueing.migration).
    migration: MigrationPolicy = field(default_factory=MigrationPolicy)
    # The fabric cost model over fabric_profiles (placement.cost), built once per config.
    cost: FabricCost = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cost", FabricCost(self.fabric_profiles))


EXTERNAL_QUEUES = ("none", "kueue")


def config_for_queue(config: OperatorConfig, queue_modes: Collection[str]) -> OperatorConfig:
    """The config a queue's jobs are planned with: its policy.compatibilityModes (when set)
    narrow the operator's modes; an empty list leaves them as they are."""
    if not queue_modes:
        return config
    return replace(config, compatibility_modes=config.compatibility_modes & frozenset(queue_modes))


# The label by which Kueue's jobs name their LocalQueue (spec.queue under Kueue).
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


class InvalidJob(Exception):
    """The job can never run as written; `field` names the spec field, the message the fix."""

    def __init__(self, field: str, message: str, reason: str = "InvalidSpec") -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.detail = message
        self.reason = reason


@dataclass(frozen=True)
class Wait:
    """Valid, but cannot be placed now. reason: NoFit | Incompatible."""

    reason: WaitReason
    message: str
    details: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """The objects to create for one gang generation, and the facts status reports."""

    image: ImageChoice
    placement: Placement
    # The pod manifests, built on first use: the admission cycle decides on the placement
    # and the image, and only the job's reconcile needs the manifests (a 32-pod gang takes
    # tens of ms to render, time every other pending job of the cycle would wait for).
    # Two plans with the same image and placement are equal; the factory is not compared.
    build_pods: Callable[[], tuple[dict[str, Any], ...]] = field(compare=False, repr=False)
    # The headless Service, for gangs of several pods only: a one-pod gang reaches itself
    # through its own hostname, which the kubelet writes into the pod's /etc/hosts with
    # the subdomain (https://kubernetes.io/docs/concepts/services-networking/dns-pod-service/#pod-s-hostname-and-subdomain-fields),
    # and a Service per single-pod job was one API write in six of a burst's happy path.
    service: dict[str, Any] | None
    config_map: dict[str, Any] | None
    secret_name: str | None  # MPI: the SSH Secret the pods mount (made by the kube layer)
    claim_templates: tuple[dict[str, Any], ...] = ()  # DRA mode only
    # Multi-node NVLink (trainop.dra): the gang's ComputeDomain (dra.computeDomains, a gang
    # across trays of one clique) and status.placement.imex (ComputeDomain | NotSetUp).
    compute_domain: dict[str, Any] | None = None
    imex: str | None = None
    gang: tuple[dict[str, Any], ...] = ()  # gangScheduling kubernetes: Workload, PodGroup
    compatibility: str | None = None  # status.compatibility: Native | ForwardCompat | ...
    image_tried: tuple[str, ...] = ()  # status.imageTried: releases tried, in order
    gpu_resource: str = c.RESOURCE_GPU  # what each GPU pod requests (nvidia.com/mig-<p>: MIG)
    job: str = ""  # the TrainingJob's name (pod names derive from it)

    def pinned(self) -> dict[str, tuple[str, int]]:
        """Pod name -> (node, GPUs) of each pod pinned to a node, without building the pods."""
        return {
            pod_name(self.job, a.role, a.index): (a.node, a.gpus)
            for a in self.placement.assignments
            if a.node is not None and a.gpus
        }

    @cached_property
    def pods(self) -> tuple[dict[str, Any], ...]:
        return self.build_pods()

    @property
    def objects(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [self.service] if self.service else []
        if self.config_map:
            out.append(self.config_map)
        out.extend(self.claim_templates)
        if self.compute_domain:
            out.append(self.compute_domain)
        out.extend(self.gang)
        out.extend(self.pods)
        return out

    def placement_status(self) -> dict[str, Any]:
        p = self.placement
        domain = "/".join(v for _, v in p.domain) if p.domain else "cluster"
        return {
            "level": p.level,
            "domain": domain,
            "nodes": list(p.nodes),
            "span": dict(p.span),
            "score": round(p.score, 4),
            **_allreduce_status(p),
            **({"imex": self.imex} if self.imex else {}),
        }


def _allreduce_status(p: Placement) -> dict[str, Any]:
    if p.allreduce is None:
        return {}
    return {
        "estimatedAllreduceSeconds": round(p.allreduce.seconds, 6),
        "allreduceBottleneck": p.allreduce.level,
    }


def parse_spec(body: Mapping[str, Any]) -> TrainingJobSpec:
    """Validate a TrainingJob body's spec; InvalidJob names the first bad field."""
    try:
        return TrainingJobSpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        path, msg = all_errors(exc, "spec")[0]
        raise InvalidJob(path, msg) from exc


def job_ref(body: Mapping[str, Any]) -> JobRef:
    meta = body.get("metadata") or {}
    return JobRef(
        name=meta.get("name", ""),
        namespace=meta.get("namespace") or "default",
        uid=meta.get("uid") or "00000000-0000-0000-0000-000000000000",
    )


def check_semantics(spec: TrainingJobSpec, config: OperatorConfig | None = None) -> None:
    """Rules the CRD schema cannot express, in the order a user would fix them. With a
    config, also that some catalog release can ever satisfy the image fields (else the job
    would wait for ever)."""
    fw = spec.framework.name
    problems = frameworks.validate(fw, {role: r.replicas for role, r in spec.replica_specs.items()})
    if problems:
        raise InvalidJob("spec.replicaSpecs", problems[0])
    elastic = elastic_problem(spec)
    if elastic is not None:
        raise InvalidJob(*elastic)
    gpu_roles = [role for role, r in spec.replica_specs.items() if r.gpus > 0]
    if not gpu_roles:
        raise InvalidJob(
            "spec.replicaSpecs.Worker.gpus",
            "no role asks for GPUs: set gpus >= 1 on the Worker role",
        )
    # Roles outside the collective may still use GPUs (a TF evaluator): placement pins and
    # ranks them with the gang, and the framework wiring ignores their ranks
    # (frameworks.base.ranked_members), so they are not refused here.
    for role, r in spec.replica_specs.items():
        pod_spec = r.template.get("spec", {}) if r.template else {}
        if not isinstance(pod_spec, dict):  # before reading inside it (a fuzz test found this)
            raise InvalidJob(f"spec.replicaSpecs.{role}.template.spec", "must be a PodSpec object")
        containers = (pod_spec or {}).get("containers")
        if containers is not None and not isinstance(containers, list):
            raise InvalidJob(
                f"spec.replicaSpecs.{role}.template.spec.containers", "must be a list of containers"
            )
        _check_template(role, r.template)
    _check_sharing(spec)
    checkpoint_location(spec)
    if config is not None:
        candidates(spec, config)


def checkpoint_location(spec: TrainingJobSpec) -> str | None:
    """The directory every checkpoint of the job must lie under (trainop.progress.
    checkpoint_root), None without spec.checkpoint; InvalidJob naming the field and the fix
    when spec.checkpoint names no such place."""
    if spec.checkpoint is None:
        return None
    ranked = frameworks.get(spec.framework.name).ranked
    roles = [role for role in ranked if role in spec.replica_specs] or list(spec.replica_specs)
    templates = {role: r.template or {} for role, r in spec.replica_specs.items()}
    try:
        return progress.checkpoint_root(spec.checkpoint.to_api(), templates, roles)
    except progress.LocationError as err:
        raise InvalidJob(err.field, err.message) from None


def _check_template(role: str, template: Mapping[str, Any]) -> None:
    """The template against the PodTemplateSpec schema the CRD embeds (api.templatecheck):
    an unknown field fails here, named, instead of being dropped when the pod is created."""
    problems = template_problems(template)
    if problems:
        first = problems[0]
        where = f"spec.replicaSpecs.{role}.template"
        raise InvalidJob(f"{where}.{first.path}" if first.path else where, first.message)


def _check_sharing(spec: TrainingJobSpec) -> None:
    share = spec.gpu_sharing
    if share is None:
        return
    gpu_pods = [(role, r) for role, r in spec.replica_specs.items() if r.gpus > 0]
    if sum(r.replicas for _, r in gpu_pods) != 1 or gpu_pods[0][1].gpus != 1:
        raise InvalidJob(
            "spec.gpuSharing",
            "a GPU slice serves a single-replica job only: exactly one pod with gpus: 1 "
            "(distributed ranks need whole GPUs; remove spec.gpuSharing)",
        )
    if share.mode == "MIG" and not share.mig_profile:
        raise InvalidJob("spec.gpuSharing.migProfile", 'required for mode MIG, e.g. "1g.5gb"')
    if share.mode == "Shared" and share.mig_profile:
        raise InvalidJob("spec.gpuSharing.migProfile", "only for mode MIG: remove it")


# A long-lived operator sees many job versions: per-version memo entries of one kind are
# dropped together once the config's memo grows past this.
_MEMO_MAX = 50_000


def _outcome(compute: Callable[[], Any]) -> Any:
    """compute()'s value, or its InvalidJob as (field, detail, reason) to keep in a memo."""
    try:
        return compute()
    except InvalidJob as exc:
        return (exc.field, exc.detail, exc.reason)


def _result(found: Any) -> Any:
    """A memoised outcome back: the value, or a fresh InvalidJob (no traceback piles up)."""
    if isinstance(found, tuple):
        raise InvalidJob(*found)
    return found


def version_memo(
    config: OperatorConfig, tag: str, body: Mapping[str, Any], compute: Callable[[], Any]
) -> Any:
    """compute() for this job version, memoised in `config.memo` per (tag, uid, generation,
    name); InvalidJob is kept and raised again. The spec itself is compared too (a dict
    compare, far cheaper than a parse, against a copy: a caller may edit a body in place):
    the API server bumps the generation on every spec change, test fixtures and `trainop
    simulate` may not. Bodies without uid or generation are computed every time."""
    meta = body.get("metadata") or {}
    uid, generation = meta.get("uid"), meta.get("generation")
    if not uid or generation is None:
        return compute()
    key = (tag, uid, generation, meta.get("name", ""))
    raw = body.get("spec")
    hit = config.memo.get(key)
    if hit is not None and hit[0] == raw:
        return _result(hit[1])
    found = _outcome(compute)
    if len(config.memo) > _MEMO_MAX:
        for stale in [k for k in config.memo if isinstance(k, tuple) and k[0] == tag]:
            del config.memo[stale]
    config.memo[key] = (copy.deepcopy(raw), found)
    return _result(found)


def _parsed(body: Mapping[str, Any], config: OperatorConfig) -> TrainingJobSpec:
    """parse_spec + check_semantics (without the catalog rule), once per job version: the
    admission cycle plans every waiting gang again on each try."""

    def parse() -> TrainingJobSpec:
        spec = parse_spec(body)
        check_semantics(spec)
        return spec

    spec: TrainingJobSpec = version_memo(config, "parsed-spec", body, parse)
    return spec


def candidates(spec: TrainingJobSpec, config: OperatorConfig) -> Candidates:
    """The releases the spec allows; InvalidJob when no catalog release can ever satisfy it.
    Memoised in `config.memo` by the fields it reads: every cycle asks it for every waiting
    gang, and a burst has few distinct (framework, version, cuda, image)."""
    key = (
        "candidates",
        spec.framework.name,
        spec.framework.version,
        spec.cuda,
        own_image(spec),
    )
    found = config.memo.get(key)
    if found is None:
        found = config.memo[key] = _outcome(lambda: _candidates(spec, config))
    result: Candidates = _result(found)
    return result


def template_image(spec: TrainingJobSpec) -> tuple[str, str] | None:
    """(field, image) when a GPU role's pod template names its trainer's image (the first
    container's; the collective's roles first): that image replaces the NGC choice, as
    spec.image would, so image choice and node eligibility treat it as the job's own image
    (its CUDA from spec.cuda). Other roles' own images (a TF evaluator's) stay theirs."""
    ranked = frameworks.get(spec.framework.name).ranked  # the collective's roles, in order
    for role in sorted(spec.replica_specs, key=lambda x: (x not in ranked, x)):
        r = spec.replica_specs[role]
        containers = ((r.template or {}).get("spec") or {}).get("containers") or []
        first = containers[0] if containers and isinstance(containers[0], dict) else {}
        if r.gpus > 0 and first.get("image"):
            return f"spec.replicaSpecs.{role}.template.spec.containers[0].image", first["image"]
    return None


def own_image(spec: TrainingJobSpec) -> str | None:
    """The image the user declared: spec.image, else a GPU role's template image."""
    found = template_image(spec)
    return spec.image or (found[1] if found else None)


def _candidates(spec: TrainingJobSpec, config: OperatorConfig) -> Candidates:
    try:
        return candidate_releases(
            config.catalog,
            spec.framework.name,
            spec.framework.version,
            spec.cuda,
            image=own_image(spec),
            allow_unconfirmed=config.allow_unconfirmed_releases,
        )
    except ResolutionError as exc:
        raise InvalidJob(exc.field, exc.detail, reason="UnknownImage") from exc


def _classes(snapshot: Snapshot, products: set[str]) -> list[Any]:
    """One GpuFacts per node class (of the allowed products): what image choice looks at."""
    return list(
        {
            n.class_key: n.gpu for n in snapshot.nodes if not products or n.gpu.product in products
        }.values()
    )


def resolve(spec: TrainingJobSpec, snapshot: Snapshot, config: OperatorConfig) -> ImageChoice:
    """The image without placing (tenant policy): newest release some allowed node runs."""
    products = set(spec.placement.gpu_products)
    candidates(spec, config)  # the same Invalid rules as planning
    try:
        return resolve_image(
            config.catalog,
            spec.framework.name,
            spec.framework.version,
            spec.cuda,
            image=own_image(spec),
            fleet=snapshot.memo(
                ("static", "gpu-classes", tuple(sorted(products))),
                lambda: _classes(snapshot, products),
            ),
        )
    except ResolutionError as exc:
        raise InvalidJob(exc.field, exc.detail, reason="UnknownImage") from exc


def _fabric_filter(spec: TrainingJobSpec, config: OperatorConfig):
    if spec.network.fabric == "Auto":
        return None

    def check(node: NodeInfo) -> str | None:
        try:
            select_profile(node.labels, config.fabric_profiles, spec.network.fabric)
        except FabricMismatch as exc:
            return str(exc)
        return None

    return check


def choose_gang(
    spec: TrainingJobSpec, name: str, snapshot: Snapshot, config: OperatorConfig
) -> GangChoice:
    """Image + placement for this gang (trainop.eligibility.choose_and_place): the one entry
    point the planner uses for image choice and node eligibility."""
    share = spec.gpu_sharing
    gpu_templates = {
        role: r.template for role, r in spec.replica_specs.items() if r.gpus > 0 and r.template
    }
    return choose_and_place(
        config.catalog,
        candidates(spec, config),
        snapshot,
        lambda node_filter, image: gang_request(spec, name, node_filter, image, cost=config.cost),
        options=ChoiceOptions(
            modes=frozenset(config.compatibility_modes),
            allow_unconfirmed=config.allow_unconfirmed_releases,
        ),
        constraints=constraints_of(gpu_templates),
        products=tuple(spec.placement.gpu_products),
        sharing=Sharing(share.mode, share.mig_profile) if share is not None else None,
        extra_filter=_fabric_filter(spec, config),
    )


def gang_request(
    spec: TrainingJobSpec,
    name: str,
    node_filter: Any,
    image: str | None,
    filter_key: Any = None,
    cost: FabricCost | None = None,
) -> GangRequest:
    # Ranks run across GPU groups in group order: the framework's collective roles first
    # (in its order, e.g. Chief before Worker), then any other GPU role (an evaluator), so
    # rank 0 is never a side role whatever order the spec lists roles in.
    ranked = frameworks.get(spec.framework.name).ranked
    order = sorted(
        spec.replica_specs,
        key=lambda role: (ranked.index(role) if role in ranked else len(ranked), role),
    )
    groups = tuple(
        GroupRequest(role, spec.replica_specs[role].replicas, spec.replica_specs[role].gpus)
        for role in order
    )
    return GangRequest(
        job=name,
        groups=groups,
        topology=spec.placement.topology,
        mode=spec.placement.mode,
        gpu_products=tuple(spec.placement.gpu_products),
        node_filter=node_filter,
        image=image,
        filter_key=filter_key,
        cost=cost,
    )


def plan_job(
    body: Mapping[str, Any],
    snapshot: Snapshot,
    config: OperatorConfig,
    *,
    gang_generation: int = 0,
    gated: bool = True,
    workers: int | None = None,
) -> Plan | Wait:
    """Plan one gang generation of a job. Raises InvalidJob for a job that can never run.
    `workers`: an elastic job's size (spec.elastic), the Worker pods to plan."""
    spec = _parsed(body, config)
    if workers is not None:
        spec = with_workers(spec, workers)
    ref = job_ref(body)
    if not snapshot.nodes:
        candidates(spec, config)
        return Wait(WaitReason.INCOMPATIBLE, "the cluster has no nodes")
    if config.gang_scheduling == KUBERNETES:  # kube-scheduler waits for room, not trainop
        snapshot, gated = free_fleet(snapshot), False
    chosen = choose_gang(spec, ref.name, snapshot, config)
    if chosen.result is None:
        return Wait(
            WaitReason.INCOMPATIBLE,
            chosen.incompatible or "no node can run the image",
            brief(chosen.tried),
        )
    if isinstance(chosen.result, NoFit):
        return Wait(WaitReason.NOFIT, chosen.result.reason, tuple(chosen.result.details))
    plan = build_plan(
        ref,
        spec,
        chosen.image,
        chosen.result,
        snapshot,
        config,
        gang_generation,
        gated,
        gpu_resource=chosen.gpu_resource,
    )
    tried = brief(chosen.tried)
    found = template_image(spec) if not spec.image else None
    if found is not None:  # render's header and status.imageTried say so
        cuda = f"spec.cuda {spec.cuda}" if spec.cuda else "no spec.cuda: no driver floor"
        tried = (
            f"{found[1]}: from {found[0]}, overriding the NGC choice; nodes judged by "
            f"{cuda} (declare the image's CUDA there)",
            *tried,
        )
    return replace(
        plan,
        compatibility=chosen.compatibility,
        image_tried=tried,
        gpu_resource=chosen.gpu_resource,
        gang=_gang(ref, spec, len(plan.placement.assignments), config),
    )


def with_workers(spec: TrainingJobSpec, workers: int) -> TrainingJobSpec:
    """The spec with its Worker role at `workers` pods: one size of an elastic job."""
    roles = dict(spec.replica_specs)
    roles["Worker"] = roles["Worker"].model_copy(update={"replicas": workers})
    return spec.model_copy(update={"replica_specs": roles})


def plan_growth(
    body: Mapping[str, Any],
    snapshot: Snapshot,
    config: OperatorConfig,
    *,
    grow_from: int,
    size: int,
    held: Collection[str],
    gang_generation: int = 0,
) -> tuple[Plan, str] | Wait:
    """The pods that grow a running elastic gang from `grow_from` to `size` Workers (indexes
    grow_from..size-1), with a sentence on where they go. They are placed in the smallest
    scope that holds them: the gang's own nodes, then each enclosing domain of the gang
    (clique, rack, block), then the cluster, which the sentence calls a crossing. The
    existing pods stay where they are (their env does not depend on the size)."""
    spec = _parsed(body, config)
    ref = job_ref(body)
    added = with_workers(spec, size - grow_from)
    for view, where in _growth_scopes(snapshot, held):
        chosen = choose_gang(added, ref.name, view, config)
        if not isinstance(chosen.result, Placement):
            continue
        moved = tuple(
            replace(
                a,
                index=a.index + grow_from,
                rank=None if a.rank is None else a.rank + grow_from,
            )
            for a in chosen.result.assignments
        )
        placement = replace(chosen.result, assignments=moved)
        plan = build_plan(
            ref,
            with_workers(spec, size),
            chosen.image,
            placement,
            snapshot,
            config,
            gang_generation,
            True,
            gpu_resource=chosen.gpu_resource,
        )
        return replace(plan, compatibility=chosen.compatibility), where
    return Wait(WaitReason.NOFIT, f"no room for {size - grow_from} more workers anywhere")


def _growth_scopes(snapshot: Snapshot, held: Collection[str]) -> list[tuple[Snapshot, str]]:
    """(a view with only the scope's GPUs free, what placing there means), smallest first."""
    paths = [snapshot.node(n).topology for n in held if n in snapshot]
    common: tuple[tuple[str, str], ...] = paths[0] if paths else ()
    for path in paths[1:]:
        depth = 0
        while depth < min(len(common), len(path)) and common[depth] == path[depth]:
            depth += 1
        common = common[:depth]
    names = level_names(snapshot.levels)
    scopes: list[tuple[frozenset[str], str]] = [(frozenset(held), "on the gang's own nodes")]
    for depth in range(len(common), 0, -1):
        key, value = common[depth - 1]
        inside = frozenset(n.name for n in snapshot.nodes if n.topology[:depth] == common[:depth])
        scopes.append((inside, f"within {names.get(key, key)} {value}"))
    widest = scopes[-1][1].removeprefix("within ") if len(scopes) > 1 else "its nodes"
    out: list[tuple[Snapshot, str]] = []
    seen: set[frozenset[str]] = set()
    for inside, where in scopes:
        if inside in seen or not inside:
            continue
        seen.add(inside)
        outside = {n.name: n.gpus_free for n in snapshot.nodes if n.name not in inside}
        view = snapshot.with_reserved({k: v for k, v in outside.items() if v > 0})
        out.append((view, where))
    out.append((snapshot, f"crosses {widest}: no room for the new workers within it"))
    return out


def free_fleet(snapshot: Snapshot) -> Snapshot:
    """The fleet with every GPU free (memoised: depends on the nodes only)."""
    return snapshot.memo(
        ("static", "empty"),
        lambda: snapshot.with_released({n.name: n.gpus_used for n in snapshot.nodes}).standalone(),
    )


def size_estimates(
    body: Mapping[str, Any], snapshot: Snapshot, config: OperatorConfig
) -> list[dict[str, Any]]:
    """An elastic job's 1 GiB allreduce estimate (placement.cost) at each size from
    minReplicas to maxReplicas, for the gang of that size alone on the fleet (its best
    placement): what growing or shrinking does to a step's communication. Once per job
    version; [] for a fixed-size job."""

    def compute() -> list[dict[str, Any]]:
        spec = _parsed(body, config)
        el = spec.elastic
        if el is None:
            return []
        empty, name, out = free_fleet(snapshot), job_ref(body).name, []
        for n in range(el.min_replicas, el.max_replicas + 1):
            found = choose_gang(with_workers(spec, n), name, empty, config).result
            if isinstance(found, Placement) and found.allreduce is not None:
                est = found.allreduce
                row = {"replicas": n, "seconds": round(est.seconds, 6), "bottleneck": est.level}
                out.append(row)
        return out

    found: list[dict[str, Any]] = version_memo(config, "elastic-sizes", body, compute)
    return found


def ideal_placement(
    body: Mapping[str, Any], snapshot: Snapshot, config: OperatorConfig
) -> Placement | None:
    """Where the gang would go alone on the fleet with every GPU free (the lower bound that
    topology-aware waiting compares with); None when even then it does not fit."""
    spec = parse_spec(body)
    chosen = choose_gang(spec, job_ref(body).name, free_fleet(snapshot), config)
    return chosen.result if isinstance(chosen.result, Placement) else None


def needs_gate(pod_plans: Sequence[PodPlan]) -> bool:
    """Whether a gang's pods are created behind trainop's scheduling gate (and released by
    a PATCH each once all exist): only a gang of two or more with a pod left to
    kube-scheduler (a CPU role such as MPI's Launcher or TensorFlow's PS). A gang of one is
    whole the moment it exists. A pod pinned to its planned node can bind nowhere else,
    on GPUs the planner has counted for it, so a gate would hold back nothing that binding
    could get wrong; a gang that is never whole (a create failed, the operator stopped
    mid-create) is deleted and re-planned while its status still says Admitted
    (reconcile._incomplete; docs/operator.md#gang-creation)."""
    return len(pod_plans) > 1 and any(p.node is None for p in pod_plans)


def build_plan(
    ref: JobRef,
    spec: TrainingJobSpec,
    choice: ImageChoice,
    placement: Placement,
    snapshot: Snapshot,
    config: OperatorConfig,
    gang_generation: int,
    gated: bool,
    *,
    gpu_resource: str = c.RESOURCE_GPU,
) -> Plan:
    """The objects of one placed gang: framework wiring, pods, Service, ConfigMap, DRA claims."""
    fw = frameworks.get(spec.framework.name)
    served = _served(spec, len(placement.assignments))
    members = _members(ref, placement, served=served)
    last_call = spec.elastic.rendezvous_last_call_seconds if spec.elastic else None
    inp = frameworks.WiringInput(
        ref.name, ref.namespace, members, fw.default_port, _range(spec), last_call
    )
    wiring = fw.wire(inp)
    cm_name = frameworks.config_map_name(ref.name) if wiring.config_files else None
    ssh_secret = frameworks.ssh_secret_name(ref.name, ref.uid) if wiring.needs_ssh else None
    pod_plans = _pod_plans(
        spec,
        choice,
        placement,
        snapshot,
        config,
        wiring,
        ref,
        gpu_resource=gpu_resource,
        mount_config=cm_name is not None,
        ssh_secret=ssh_secret,
    )
    gpu_roles = [
        (role, spec.replica_specs[role].gpus)
        for role in sorted({a.role for a in placement.assignments if a.gpus})
    ]
    claim_templates, imex, domain = _dra_objects(ref, placement, config.dra, gpu_roles)

    gate = gated and needs_gate(pod_plans)

    def build_pods() -> tuple[dict[str, Any], ...]:
        pods = [
            build_pod(
                ref,
                plan,
                spec.replica_specs[plan.role].template,
                gang_generation=gang_generation,
                priority_class_name=spec.priority_class_name,
                gated=gate,
                config_map=cm_name,
            )
            for plan in pod_plans
        ]
        return _for_mnnvl(_for_dra(pods, ref, config, gpu_roles), ref, gpu_roles, domain)

    config_map = build_config_map(ref, cm_name, wiring.config_files) if cm_name else None
    return Plan(
        claim_templates=claim_templates,
        compute_domain=domain,
        imex=imex,
        image=choice,
        placement=placement,
        job=ref.name,
        build_pods=_joined(build_pods, ref.name, config),
        service=(
            build_service(ref, sorted({p for plan in pod_plans for p in plan.ports}))
            if served
            else None
        ),
        config_map=config_map,
        secret_name=ssh_secret,
    )


def _dra_objects(
    ref: JobRef, placement: Placement, dra: DraConfig, gpu_roles: list[tuple[str, int]]
) -> tuple[tuple[dict[str, Any], ...], str | None, dict[str, Any] | None]:
    """DRA's claim templates (one per GPU role: pods then hold GPUs/NICs by claim), the
    gang's status.placement.imex and its ComputeDomain (multi-node NVLink, trainop.dra)."""
    templates = tuple(
        claim_template(ref, role, gpus, dra) for role, gpus in gpu_roles if dra.enabled
    )
    imex = mnnvl_imex(placement, dra)
    domain = compute_domain(ref, len(placement.nodes)) if imex == IMEX_COMPUTE_DOMAIN else None
    return templates, imex, domain


def _gang(
    ref: JobRef, spec: TrainingJobSpec, pods: int, config: OperatorConfig
) -> tuple[dict[str, Any], ...]:
    """gangScheduling kubernetes: the Workload and PodGroup of a gang of `pods` pods."""
    if config.gang_scheduling != KUBERNETES:
        return ()
    p = spec.placement
    key = topology_key(p.topology, p.mode, config.topology_levels)
    return gang_objects(ref, pods, key, spec.priority_class_name)


def _joined(
    build: Callable[[], tuple[dict[str, Any], ...]], group: str, config: OperatorConfig
) -> Callable[[], tuple[dict[str, Any], ...]]:
    """gangScheduling kubernetes: the pods, each a member of the gang's PodGroup."""
    if config.gang_scheduling != KUBERNETES:
        return build
    return lambda: tuple(join_group(p, group) for p in build())


def _unpinned(
    pod_plans: list[PodPlan],
    spec: TrainingJobSpec,
    choice: ImageChoice,
    snapshot: Snapshot,
    config: OperatorConfig,
) -> list[PodPlan]:
    """gangScheduling kubernetes: no node pin; a GPU pod must land on a node the image runs
    on (the catalog's compatibility terms, always) of the fabric its NCCL settings were
    tuned for (the planned node's FabricProfile selector)."""
    compat = _catalog_terms(spec, choice, config)
    out = []
    for plan in pod_plans:
        terms: tuple[Mapping[str, Any], ...] = () if plan.gpus else plan.compat_terms
        if plan.gpus and plan.node_object is not None:
            labels = snapshot.node(plan.node_object).labels
            profile = select_profile(labels, config.fabric_profiles, spec.network.fabric)
            terms = eligibility_terms(compat, profile.spec.node_selector)
        out.append(replace(plan, node=None, node_object=None, compat_terms=terms))
    return out


def _range(spec: TrainingJobSpec) -> tuple[int, int] | None:
    """spec.elastic as (minReplicas, maxReplicas); None for a fixed-size job."""
    el = spec.elastic
    return (el.min_replicas, el.max_replicas) if el is not None else None


def _served(spec: TrainingJobSpec, pods: int) -> bool:
    """Whether this gang of `pods` pods gets its headless Service (gang_has_service)."""
    host_network = any(
        (rs.template.get("spec") or {}).get("hostNetwork") for rs in spec.replica_specs.values()
    )
    return frameworks.gang_has_service(pods, spec.elastic is not None, host_network)


def _members(ref: JobRef, placement: Placement, *, served: bool) -> tuple[frameworks.Member, ...]:
    """The gang as the framework sees it: role, index, rank, GPUs and the host name the
    others reach it by (through the Service when `served`, else its own hostname)."""
    return tuple(
        frameworks.Member(
            role=a.role,
            index=a.index,
            rank=a.rank,
            gpus=a.gpus,
            host=frameworks.member_host(ref.name, ref.namespace, a.role, a.index, served=served),
        )
        for a in placement.assignments
    )


def _pod_plans(
    spec: TrainingJobSpec,
    choice: ImageChoice,
    placement: Placement,
    snapshot: Snapshot,
    config: OperatorConfig,
    wiring: frameworks.Wiring,
    ref: JobRef,
    *,
    gpu_resource: str,
    mount_config: bool,
    ssh_secret: str | None,
) -> list[PodPlan]:
    """One PodPlan per assignment: the framework's wiring plus NCCL tuning for its node."""
    gpu_pods = [a for a in placement.assignments if a.node is not None]
    nodes_in_gang = len({a.node for a in gpu_pods})
    compat = _compat_terms(spec, choice, config)
    cpu_pod_terms = _arch_terms(placement, snapshot)
    pod_plans: list[PodPlan] = []
    roles = tuple(spec.replica_specs)
    files = tuple(wiring.config_files.values()) if mount_config else ()
    for a in placement.assignments:
        env = dict(wiring.env.get((a.role, a.index), {}))
        peers = frameworks.hosts_named((*env.values(), *files), ref.name, ref.namespace, roles)
        if peers:
            env[c.ENV_PEER_HOSTS] = ",".join(peers)
        tuned: NcclSettings | None = None
        node_name: str | None = None
        annotations: dict[str, str] = {}
        if a.node is not None:
            node_name, tuned = _tuned_for_node(
                snapshot.node(a.node),
                a.gpus,
                spec,
                config,
                pods_in_gang=len(gpu_pods),
                nodes_in_gang=nodes_in_gang,
            )
            env.update(tuned.env)
            annotations = {**tuned.annotations, c.ANNOTATION_FABRIC_PROFILE: tuned.profile_name}
        else:
            env.update(spec.nccl_env)
        pod_plans.append(
            PodPlan(
                role=a.role,
                index=a.index,
                rank=a.rank,
                gpus=a.gpus,
                node=node_name,
                image=choice.image,
                env=env,
                ports=tuple(wiring.container_ports.get(a.role, ())),
                rdma_resources=tuned.rdma_resources if tuned else {},
                capabilities=tuned.capabilities if tuned else (),
                shm_size=tuned.shm_size if tuned else None,
                annotations=annotations,
                command_prefix=tuple((wiring.command_for or {}).get(a.role, ())),
                compat_terms=_pinned_terms(compat, snapshot, a.node) if a.gpus else cpu_pod_terms,
                node_object=a.node,
                gpu_resource=gpu_resource,
                mount_config=mount_config,
                ssh_secret=ssh_secret,
            )
        )
    if config.gang_scheduling == KUBERNETES:  # kube-scheduler picks the nodes
        return _unpinned(pod_plans, spec, choice, snapshot, config)
    return pod_plans


def _pinned_terms(
    compat: tuple[Mapping[str, Any], ...], snapshot: Snapshot, node: str | None
) -> tuple[Mapping[str, Any], ...]:
    """A pinned GPU pod's compatibility terms: the one its node meets (docs/operator.md)."""
    return terms_met(compat, snapshot.node(node)) if compat and node is not None else compat


def _arch_terms(placement: Placement, snapshot: Snapshot) -> tuple[Mapping[str, Any], ...]:
    """On a fleet of more than one CPU architecture, the pods without GPUs (an MPI
    launcher, a parameter server: not pinned) must land on the gang's architecture, which
    the image was chosen for (docs/catalog.md#cpu-architectures-amd64-arm64); else ()."""
    fleet_archs = snapshot.memo(
        ("static", "cpu-archs"), lambda: frozenset(n.gpu.cpu_arch for n in snapshot.nodes)
    )
    gang = {snapshot.node(a.node).gpu.cpu_arch for a in placement.assignments if a.node}
    if len(fleet_archs) < 2 or len(gang) != 1:
        return ()
    return ({"matchExpressions": [{"key": LABEL_ARCH, "operator": "In", "values": sorted(gang)}]},)


def _compat_terms(
    spec: TrainingJobSpec, choice: ImageChoice, config: OperatorConfig
) -> tuple[Mapping[str, Any], ...]:
    """Node-affinity terms that keep GPU pods on drivers the image runs on (when configured)."""
    return _catalog_terms(spec, choice, config) if config.compat_affinity else ()


def _catalog_terms(
    spec: TrainingJobSpec, choice: ImageChoice, config: OperatorConfig
) -> tuple[Mapping[str, Any], ...]:
    """The catalog's compatibility terms for the chosen image (driver, architecture, products)."""
    return tuple(
        node_affinity_terms(
            config.catalog,
            choice.cuda,
            choice.release,
            tuple(spec.placement.gpu_products),
            modes=config.compatibility_modes,
        )
    )


def _tuned_for_node(
    node: NodeInfo,
    gpus: int,
    spec: TrainingJobSpec,
    config: OperatorConfig,
    *,
    pods_in_gang: int,
    nodes_in_gang: int,
) -> tuple[str, NcclSettings]:
    """The hostname a GPU pod is pinned to and the NCCL settings of its node's fabric."""
    node_name = node.labels.get(c.LABEL_HOSTNAME, node.name)
    try:
        profile = select_profile(node.labels, config.fabric_profiles, spec.network.fabric)
    except FabricMismatch as exc:  # the node filter excludes these; keep the message
        raise InvalidJob("spec.network.fabric", str(exc)) from exc
    tuned = nccl_settings(
        profile,
        gpus_per_pod=gpus,
        pods_in_gang=pods_in_gang,
        nodes_in_gang=nodes_in_gang,
        whole_node=gpus == node.gpus_allocatable,
        gpus_on_node=node.gpus_allocatable or None,
        user_env=spec.nccl_env,
    )
    return node_name, tuned


def _for_dra(
    pods: list[dict[str, Any]],
    ref: JobRef,
    config: OperatorConfig,
    gpu_roles: list[tuple[str, int]],
) -> tuple[dict[str, Any], ...]:
    """DRA: GPU pods hold their GPUs and NICs by claim. (Under Kueue the pods carry no
    Kueue label: the job's Workload stands for the gang, see docs/kueue.md.)"""
    for role, gpus in gpu_roles if config.dra.enabled else ():
        pods = [
            use_claim(p, ref.name, role, gpus) if _role_label(p) == role.lower() else p
            for p in pods
        ]
    return tuple(pods)


def _for_mnnvl(
    pods: tuple[dict[str, Any], ...],
    ref: JobRef,
    gpu_roles: list[tuple[str, int]],
    domain: dict[str, Any] | None,
) -> tuple[dict[str, Any], ...]:
    """With the gang's ComputeDomain: GPU pods claim its IMEX channel (trainop.dra)."""
    if domain is None:
        return pods
    roles = {role.lower() for role, _ in gpu_roles}
    return tuple(use_channel(p, ref.name) if _role_label(p) in roles else p for p in pods)


def mnnvl_imex(placement: Placement, dra: DraConfig) -> str | None:
    """status.placement.imex for a gang: None unless its GPU pods span the trays of one NVLink
    clique (placement level clique: the smallest domain holding them is a clique, so they are
    on several nodes); then ComputeDomain with dra.computeDomains, else NotSetUp (the gang
    still packs into the clique, NCCL crosses trays over the network)."""
    if placement.level != CLIQUE_LEVEL:
        return None
    return IMEX_COMPUTE_DOMAIN if dra.compute_domains else IMEX_NOT_SET_UP


def _role_label(pod: Mapping[str, Any]) -> str:
    return str(pod["metadata"]["labels"].get(c.LABEL_REPLICA_TYPE, ""))


def success_roles(spec: TrainingJobSpec) -> tuple[str, ...]:
    """Roles whose pods must all exit 0 for AllWorkers success (see RunPolicy.successPolicy)."""
    roles = spec.replica_specs
    if spec.framework.name == "mpi":
        return ("Launcher",)  # mpirun's exit status is the job's; workers only run sshd
    if spec.framework.name == "tensorflow" and "Chief" in roles:
        return ("Chief",)
    return ("Worker",)

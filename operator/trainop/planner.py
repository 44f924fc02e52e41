"""TrainingJob + cluster snapshot -> Plan (image, placement, NCCL, pods, Service) or a reason to wait.

Pure and deterministic: the same job body, snapshot and config always give the same objects.
The operator (handlers) and `trainop render` both call `plan_job`, so what render prints is
what the operator creates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from trainop import frameworks
from trainop.api import constants as c
from trainop.api.base import all_errors
from trainop.api.fabricprofile import FabricProfile
from trainop.api.trainingjob import TrainingJobSpec
from trainop.catalog import (
    Catalog,
    ImageChoice,
    ResolutionError,
    check_node,
    load_catalog,
    node_affinity_terms,
    resolve_image,
    summarize_incompatible,
)
from trainop.dra import DraConfig, claim_template, use_claim
from trainop.inventory import NodeInfo, Snapshot
from trainop.manifests import JobRef, PodPlan, build_config_map, build_pod, build_service
from trainop.nccl import FabricMismatch, nccl_settings, select_profile
from trainop.placement import FabricCost, GangRequest, GroupRequest, NoFit, Placement, place


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
    # "kueue": Kueue admits the gang (plain pod group labels), trainop's own queues stand
    # aside; trainop still places, wires and releases the pods. See docs/queues.md.
    external_queue: str = "none"
    dra: DraConfig = field(default_factory=DraConfig)
    # Default bound of topology-aware waiting for queues that set no
    # spec.topologyWaitSeconds (see queueing.topowait).
    topology_wait_seconds: float = 1800.0
    # The fabric cost model over fabric_profiles (placement.cost), built once per config.
    cost: FabricCost = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cost", FabricCost(self.fabric_profiles))


EXTERNAL_QUEUES = ("none", "kueue")

# Kueue plain-pod groups (kueue.sigs.k8s.io, "Run plain Pods as a group").
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"


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

    reason: str
    message: str
    details: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """The objects to create for one gang generation, and the facts status reports."""

    image: ImageChoice
    placement: Placement
    pods: tuple[dict[str, Any], ...]
    service: dict[str, Any]
    config_map: dict[str, Any] | None
    secret_name: str | None  # MPI: the SSH Secret the pods mount (made by the kube layer)
    claim_templates: tuple[dict[str, Any], ...] = ()  # DRA mode only

    @property
    def objects(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [self.service]
        if self.config_map:
            out.append(self.config_map)
        out.extend(self.claim_templates)
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


def check_semantics(spec: TrainingJobSpec) -> None:
    """Rules the CRD schema cannot express, in the order a user would fix them."""
    fw = spec.framework.name
    problems = frameworks.validate(fw, {role: r.replicas for role, r in spec.replica_specs.items()})
    if problems:
        raise InvalidJob("spec.replicaSpecs", problems[0])
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
        containers = (r.template.get("spec") or {}).get("containers") if r.template else None
        if containers is not None and not isinstance(containers, list):
            raise InvalidJob(
                f"spec.replicaSpecs.{role}.template.spec.containers", "must be a list of containers"
            )
        if r.template and not isinstance(r.template.get("spec", {}), dict):
            raise InvalidJob(f"spec.replicaSpecs.{role}.template.spec", "must be a PodSpec object")


def resolve(spec: TrainingJobSpec, snapshot: Snapshot, config: OperatorConfig) -> ImageChoice:
    # Only nodes the job may use count when choosing the image: with the whole fleet, an
    # A100-only job would get the newest image some H100 runs and no A100 can.
    products = set(spec.placement.gpu_products)
    try:
        return resolve_image(
            config.catalog,
            spec.framework.name,
            spec.framework.version,
            spec.cuda,
            image=spec.image,
            fleet=[n.gpu for n in snapshot.nodes if not products or n.gpu.product in products],
        )
    except ResolutionError as exc:
        raise InvalidJob(exc.field, exc.detail, reason="UnknownImage") from exc


def _node_filter(spec: TrainingJobSpec, choice: ImageChoice, config: OperatorConfig):
    products = tuple(spec.placement.gpu_products)

    def check(node: NodeInfo) -> str | None:
        verdict = check_node(
            config.catalog, node.gpu, choice.cuda, choice.release, gpu_products=products
        )
        if not verdict.ok:
            return verdict.reason
        if spec.network.fabric != "Auto":
            try:
                select_profile(node.labels, config.fabric_profiles, spec.network.fabric)
            except FabricMismatch as exc:
                return str(exc)
        return None

    return check


def _incompatible(
    spec: TrainingJobSpec, choice: ImageChoice, snapshot: Snapshot, config: OperatorConfig
) -> Wait | None:
    """Wait(Incompatible) when no node at all (free or busy) could run the image."""
    results = []
    products = tuple(spec.placement.gpu_products)
    for node in snapshot.nodes:
        verdict = check_node(
            config.catalog, node.gpu, choice.cuda, choice.release, gpu_products=products
        )
        if verdict.ok:
            return None
        results.append((node.name, node.gpu, verdict))
    if not results:
        return Wait("Incompatible", "the cluster has no nodes")
    return Wait(
        "Incompatible", f"no node can run {choice.image}: {summarize_incompatible(results)}"
    )


def gang_request(
    spec: TrainingJobSpec,
    name: str,
    node_filter: Any,
    image: str | None,
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
        cost=cost,
    )


def plan_job(
    body: Mapping[str, Any],
    snapshot: Snapshot,
    config: OperatorConfig,
    *,
    gang_generation: int = 0,
    gated: bool = True,
) -> Plan | Wait:
    """Plan one gang generation of a job. Raises InvalidJob for a job that can never run."""
    spec = parse_spec(body)
    check_semantics(spec)
    ref = job_ref(body)
    choice = resolve(spec, snapshot, config)
    incompatible = _incompatible(spec, choice, snapshot, config)
    if incompatible:
        return incompatible
    request = gang_request(
        spec, ref.name, _node_filter(spec, choice, config), choice.image, config.cost
    )
    result = place(snapshot, request)
    if isinstance(result, NoFit):
        return Wait("NoFit", result.reason, tuple(result.details))
    return build_plan(ref, spec, choice, result, snapshot, config, gang_generation, gated)


def ideal_placement(
    body: Mapping[str, Any], snapshot: Snapshot, config: OperatorConfig
) -> Placement | None:
    """Where the gang would go alone on the fleet with every GPU free (the lower bound that
    topology-aware waiting compares with); None when even then it does not fit."""
    spec = parse_spec(body)
    choice = resolve(spec, snapshot, config)
    request = gang_request(
        spec, job_ref(body).name, _node_filter(spec, choice, config), choice.image, config.cost
    )
    empty = snapshot.with_released({n.name: n.gpus_used for n in snapshot.nodes})
    result = place(empty, request)
    return result if isinstance(result, Placement) else None


def build_plan(
    ref: JobRef,
    spec: TrainingJobSpec,
    choice: ImageChoice,
    placement: Placement,
    snapshot: Snapshot,
    config: OperatorConfig,
    gang_generation: int,
    gated: bool,
) -> Plan:
    fw = frameworks.get(spec.framework.name)
    members = tuple(
        frameworks.Member(
            role=a.role,
            index=a.index,
            rank=a.rank,
            gpus=a.gpus,
            host=frameworks.member_host(ref.name, ref.namespace, a.role, a.index),
        )
        for a in placement.assignments
    )
    wiring = fw.wire(frameworks.WiringInput(ref.name, ref.namespace, members, port=fw.default_port))
    cm_name = frameworks.config_map_name(ref.name) if wiring.config_files else None
    ssh_secret = frameworks.ssh_secret_name(ref.name) if wiring.needs_ssh else None
    gpu_pods = [a for a in placement.assignments if a.node is not None]
    nodes_in_gang = len({a.node for a in gpu_pods})
    compat: tuple[Mapping[str, Any], ...] = ()
    if config.compat_affinity:
        compat = tuple(
            node_affinity_terms(
                config.catalog, choice.cuda, choice.release, tuple(spec.placement.gpu_products)
            )
        )

    pods = []
    all_ports: set[int] = set()
    for a in placement.assignments:
        env = dict(wiring.env.get((a.role, a.index), {}))
        ports = tuple(wiring.container_ports.get(a.role, ()))
        all_ports.update(ports)
        rdma: Mapping[str, int] = {}
        caps: tuple[str, ...] = ()
        shm: str | None = None
        annotations: dict[str, str] = {}
        node_name: str | None = None
        if a.node is not None:
            node = snapshot.node(a.node)
            node_name = node.labels.get(c.LABEL_HOSTNAME, node.name)
            try:
                profile = select_profile(node.labels, config.fabric_profiles, spec.network.fabric)
            except FabricMismatch as exc:  # the node filter excludes these; keep the message
                raise InvalidJob("spec.network.fabric", str(exc)) from exc
            tuned = nccl_settings(
                profile,
                gpus_per_pod=a.gpus,
                pods_in_gang=len(gpu_pods),
                nodes_in_gang=nodes_in_gang,
                whole_node=a.gpus == node.gpus_allocatable,
                gpus_on_node=node.gpus_allocatable or None,
                user_env=spec.nccl_env,
            )
            env.update(tuned.env)
            rdma, caps, shm = tuned.rdma_resources, tuned.capabilities, tuned.shm_size
            annotations.update(tuned.annotations)
            annotations[c.ANNOTATION_FABRIC_PROFILE] = tuned.profile_name
        else:
            env.update(spec.nccl_env)
        prefix = tuple((wiring.command_for or {}).get(a.role, ()))
        plan = PodPlan(
            role=a.role,
            index=a.index,
            rank=a.rank,
            gpus=a.gpus,
            node=node_name,
            image=choice.image,
            env=env,
            ports=ports,
            rdma_resources=rdma,
            capabilities=caps,
            shm_size=shm,
            annotations=annotations,
            command_prefix=prefix,
            compat_terms=compat if a.gpus else (),
            mount_config=cm_name is not None,
            ssh_secret=ssh_secret,
        )
        pods.append(
            build_pod(
                ref,
                plan,
                spec.replica_specs[a.role].template,
                gang_generation=gang_generation,
                priority_class_name=spec.priority_class_name,
                gated=gated,
                config_map=cm_name,
            )
        )
    claim_templates: list[dict[str, Any]] = []
    if config.dra.enabled:  # one template per GPU role; pods then hold GPUs/NICs by claim
        for role in sorted({a.role for a in placement.assignments if a.gpus}):
            gpus = spec.replica_specs[role].gpus
            claim_templates.append(claim_template(ref, role, gpus, config.dra))
            pods = [
                use_claim(p, ref.name, role, gpus) if _role_label(p) == role.lower() else p
                for p in pods
            ]
    if config.external_queue == "kueue":
        for pod in pods:  # one Kueue workload for the whole gang
            pod["metadata"]["labels"][KUEUE_GROUP_LABEL] = ref.name
            pod["metadata"]["annotations"][KUEUE_GROUP_COUNT] = str(len(pods))
            if spec.queue:
                pod["metadata"]["labels"][KUEUE_QUEUE_LABEL] = spec.queue
    config_map = build_config_map(ref, cm_name, wiring.config_files) if cm_name else None
    return Plan(
        claim_templates=tuple(claim_templates),
        image=choice,
        placement=placement,
        pods=tuple(pods),
        service=build_service(ref, sorted(all_ports)),
        config_map=config_map,
        secret_name=ssh_secret,
    )


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

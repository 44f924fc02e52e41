"""`trainop render JOB.yaml --nodes NODES.yaml`: print the objects the operator would create.

No cluster needed: the inventory comes from `kubectl get nodes -o yaml` (and optionally
`kubectl get pods -A -o yaml`, whose pods hold GPUs), and the same `planner.plan_job` the
operator calls turns each TrainingJob into a Plan, rendered exactly as the operator creates
it (pods carry the admission scheduling gate), so a render can be diffed against a cluster.

A job that names a runtime (spec.runtimeRef) is merged with it first (`runtimes.resolve`,
as the operator does): runtimes come from JOB.yaml itself (ClusterTrainingRuntime and
TrainingRuntime documents beside the jobs) and from --runtimes files; a missing or invalid
runtime is exit 2, naming it and the fix.

Exit codes (DESIGN.md): 0 placed; 2 invalid (the message names the field) or unreadable
input; 3 valid but not placeable now (the reason, then its details); 4 valid but never
placeable on this fleet (more GPUs than it has at all, a replica larger than any node, a
Required domain larger than any: "never fits this fleet" with the numbers). With several
TrainingJobs in JOB.yaml each is rendered and the exit code is the highest.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import click

from trainop.api import constants as c
from trainop.api.trainingruntime import RUNTIME_KINDS
from trainop.cli.inputs import (
    EXIT_INVALID,
    InputError,
    exit_invalid,
    object_name,
    read_documents,
    read_objects,
)
from trainop.config import ConfigError, load_operator_config
from trainop.inventory import Snapshot, build_snapshot
from trainop.planner import InvalidJob, OperatorConfig, Plan, Wait, parse_spec, plan_job
from trainop.queueing.cluster import least_gpus
from trainop.queueing.inadmissible import fleet_shortfall
from trainop.reconcile import wire_object
from trainop.runtimes import RuntimeKey, RuntimeProblem, resolve, runtime_index
from trainop.validation import check_queue_label
from trainop.yamlio import dump_yaml_all

EXIT_PLACED = 0
EXIT_INTERNAL = 1
EXIT_WAIT = 3
EXIT_NEVER = 4

# The Service `<job>` needs a DNS-1035 label; the API server would refuse it otherwise.
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_LABEL_MAX = 63


@dataclass
class Rendered:
    """The outcome for one TrainingJob document."""

    who: str  # ns/name, for messages when JOB.yaml holds several jobs
    code: int
    plan: Plan | None = None
    errors: list[str] = field(default_factory=list)
    runtime: str = ""  # "ClusterTrainingRuntime pytorch (generation 2)" when merged with one
    # The plan's objects as the operator creates them: with the config's progress URL, gang
    # pods wired to report (reconcile.wire_object); else the plan's own.
    objects: list[dict[str, Any]] = field(default_factory=list)


def _check_identity(body: Mapping[str, Any]) -> str | None:
    """Checks the API server would make before the planner ever sees the job."""
    api = body.get("apiVersion")
    if api != c.API_VERSION:
        return f"apiVersion: expected {c.API_VERSION}, got {api!r}"
    meta = body.get("metadata")
    if meta is not None and not isinstance(meta, Mapping):
        return "metadata: must be an object with name (and namespace)"
    name = object_name(body)
    if not name:
        return "metadata.name: required: every TrainingJob needs a name"
    if len(name) > _DNS_LABEL_MAX or not _DNS1035.match(name):
        return (
            f"metadata.name: {name!r} is not a DNS-1035 label (lower-case letters, digits "
            f"and '-', starting with a letter, at most {_DNS_LABEL_MAX} characters); the "
            "job's headless Service carries this name"
        )
    return None


def _long_hostnames(plan: Plan) -> str | None:
    # Pods set spec.hostname to their name, which must be a DNS label too.
    for pod in plan.pods:
        name = object_name(pod)
        if len(name) > _DNS_LABEL_MAX:
            return (
                f"metadata.name: too long: pod hostname {name!r} has {len(name)} characters, "
                f"the limit is {_DNS_LABEL_MAX}; shorten the job name"
            )
    return None


def _own_pod(job: str, namespace: str) -> Any:
    """Pods of the job itself do not hold GPUs against it (the operator re-plans likewise)."""

    def ignore(pod: Mapping[str, Any]) -> bool:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        return bool(
            labels.get(c.LABEL_JOB_NAME) == job
            and (meta.get("namespace") or "default") == namespace
        )

    return ignore


def render_job(
    body: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    config: OperatorConfig,
    runtimes: Mapping[RuntimeKey, Mapping[str, Any]] | None = None,
) -> Rendered:
    """Plan one TrainingJob body on the inventory, merged with the runtime it names (from
    `runtimes`, keyed as `runtimes.runtime_index` keys them); never raises for a bad job."""
    raw_meta = body.get("metadata")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    who = f"{meta.get('namespace') or 'default'}/{object_name(body) or '<no name>'}"
    problem = _check_identity(body)
    if problem:
        return Rendered(who, EXIT_INVALID, errors=[f"error: {problem}"])
    resolved = resolve(body, runtimes or {})
    if isinstance(resolved, RuntimeProblem):
        return Rendered(who, EXIT_INVALID, errors=[f"error: {resolved}"])
    out = render_merged(who, resolved.body, nodes, pods, config, meta)
    rt = resolved.runtime
    if rt is not None:
        gen = f" (generation {rt.generation})" if rt.generation is not None else ""
        out.runtime = f"{rt.kind} {rt.name}{gen}"
    return out


def render_merged(
    who: str,
    body: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    config: OperatorConfig,
    meta: Mapping[str, Any],
) -> Rendered:
    """render_job's planning, for a body already merged with its runtime."""
    name, namespace = object_name(body), meta.get("namespace") or "default"
    try:
        snapshot = build_snapshot(
            nodes, pods, levels=config.topology_levels, ignore_pods=_own_pod(name, namespace)
        )
    except ValueError as exc:  # e.g. two nodes with one name
        return Rendered(who, EXIT_INVALID, errors=[f"error: --nodes: {exc}"])
    return _plan(who, body, snapshot, config)


def _plan(
    who: str, body: Mapping[str, Any], snapshot: Snapshot, config: OperatorConfig
) -> Rendered:
    try:
        check_queue_label(parse_spec(body), config)  # as the operator's checked_spec does
        result = _largest_size(body, snapshot, config, plan_job(body, snapshot, config, gated=True))
    except InvalidJob as exc:
        return Rendered(who, EXIT_INVALID, errors=[f"error: {exc.field}: {exc.detail}"])
    except Exception as exc:  # a planner bug: one clear line, never a traceback
        return Rendered(
            who,
            EXIT_INTERNAL,
            errors=[f"error: internal error while planning {who}: {type(exc).__name__}: {exc}"],
        )
    if isinstance(result, Wait):
        lines = [f"{result.reason}: {result.message}", *(f"  {d}" for d in result.details)]
        never = _never_fits(body, snapshot)
        if never is not None:
            return Rendered(who, EXIT_NEVER, errors=[f"never fits this fleet: {never}", *lines])
        return Rendered(who, EXIT_WAIT, errors=lines)
    too_long = _long_hostnames(result)
    if too_long:
        return Rendered(who, EXIT_INVALID, errors=[f"error: {too_long}"])
    return Rendered(who, EXIT_PLACED, plan=result, objects=_wired(body, result, config))


# With an https progress URL and no `progress.caBundle` in the config, the CA annotation
# holds this: the bundle lives in the operator's Secret, which render cannot read.
CA_PLACEHOLDER = "<the CA bundle of the operator's progress TLS Secret (docs/progress.md)>"


def _wired(body: Mapping[str, Any], result: Plan, config: OperatorConfig) -> list[dict[str, Any]]:
    """The plan's objects wired as the operator wires them (a first gang: no resume)."""
    if not config.progress_url:
        return list(result.objects)
    if config.progress_url.startswith("https:") and not config.progress_ca:
        config = dataclasses.replace(config, progress_ca=CA_PLACEHOLDER)
    spec = parse_spec(body)
    return [wire_object(obj, spec, {}, config) for obj in result.objects]


def _largest_size(
    body: Mapping[str, Any], snapshot: Snapshot, config: OperatorConfig, result: Plan | Wait
) -> Plan | Wait:
    """An elastic job runs at the largest size in range that fits (queueing.elastic):
    when maxReplicas does not, render that size, as the operator admits it."""
    el = parse_spec(body).elastic
    if el is None or not isinstance(result, Wait):
        return result
    for size in range(el.max_replicas - 1, el.min_replicas - 1, -1):
        sized = plan_job(body, snapshot, config, gated=True, workers=size)
        if isinstance(sized, Plan):
            return sized
    return result


def _never_fits(body: Mapping[str, Any], snapshot: Snapshot) -> str | None:
    """The operator's Inadmissible rule for the fleet (queueing.inadmissible)."""
    spec = parse_spec(body)
    if spec.gpu_sharing is not None:
        return None
    largest = max((r.gpus for r in spec.replica_specs.values()), default=0)
    p = spec.placement
    return fleet_shortfall(
        least_gpus(spec), largest, tuple(p.gpu_products), p.topology, p.mode, snapshot
    )


def placement_header(plan: Plan, runtime: str = "") -> str:
    """The comment lines opening a job's YAML: where the gang landed, and what is not shown."""
    st = plan.placement_status()
    lines = [f"# placement: {st['level']} {st['domain']} nodes={','.join(st['nodes'])}"]
    if runtime:
        lines.append(f"# runtime: {runtime}, merged with the job (docs/runtimes.md)")
    if plan.gang:  # gangScheduling kubernetes
        lines.append(
            "# gangScheduling kubernetes: kube-scheduler places the PodGroup; the nodes above "
            "are trainop's estimate on an idle fleet (NCCL tuned for them)"
        )
    if plan.compute_domain:  # a gang across trays of one NVLink clique (docs/mnnvl.md)
        lines.append(
            f"# multi-node NVLink: ComputeDomain {plan.compute_domain['metadata']['name']} "
            "gives each GPU pod an IMEX channel"
        )
    elif plan.imex:
        lines.append(
            "# multi-node NVLink: IMEX not set up (operator config dra.computeDomains is off)"
        )
    if plan.compatibility:
        lines.append(f"# image: {plan.image.image} ({plan.compatibility})")
    if plan.image_tried and "overriding the NGC choice" in plan.image_tried[0]:
        lines.append(f"# image: {plan.image_tried[0]}")
    if len(plan.image_tried) > 1:
        lines.append("# image choice, releases tried in order:")
        lines += [f"#   {t}" for t in plan.image_tried]
    if plan.secret_name:
        lines.append(
            f"# not rendered: Secret {plan.secret_name} (the operator generates "
            "the job's SSH keypair in it)"
        )
    return "\n".join(lines) + "\n"


def _is_runtime(doc: Mapping[str, Any]) -> bool:
    return doc.get("apiVersion") == c.API_VERSION and doc.get("kind") in RUNTIME_KINDS


def _runtimes(paths: Sequence[str]) -> list[dict[str, Any]]:
    """The runtime objects of the --runtimes files; another kind is an InputError."""
    out = []
    for path in paths:
        for i, doc in enumerate(read_documents(path)):
            if not _is_runtime(doc):
                raise InputError(
                    f"--runtimes {path}: object {i + 1} is a {doc.get('apiVersion')} "
                    f"{doc.get('kind')}, expected {c.API_VERSION} ClusterTrainingRuntime or "
                    "TrainingRuntime objects"
                )
            if not object_name(doc):
                raise InputError(f"--runtimes {path}: object {i + 1} has no metadata.name")
            out.append(doc)
    return out


def _jobs(path: str) -> tuple[list[dict[str, Any]], list[str], list[dict[str, Any]]]:
    """TrainingJob documents of JOB.yaml, notes about documents of other kinds skipped, and
    the runtimes among its documents."""
    docs = read_documents(path)
    jobs, notes, runtimes = [], [], []
    for i, doc in enumerate(docs):
        kind = doc.get("kind")
        if kind == "TrainingJob":
            jobs.append(doc)
        elif _is_runtime(doc):
            runtimes.append(doc)
        elif kind is None:
            raise InputError(f"{path}: document {i + 1}: kind: required (kind: TrainingJob)")
        else:
            notes.append(
                f"note: skipping {kind} {object_name(doc) or f'(document {i + 1})'}: "
                "not a TrainingJob"
            )
    if not jobs:
        found = ", ".join(sorted({str(d.get("kind")) for d in docs})) or "nothing"
        raise InputError(f"{path}: no TrainingJob document (found {found})")
    return jobs, notes, runtimes


_file = click.Path(dir_okay=False, exists=True, allow_dash=True)


@click.command("render")
@click.argument("job_file", metavar="JOB.yaml", type=_file)
@click.option(
    "--nodes",
    "nodes_file",
    required=True,
    metavar="NODES.yaml",
    type=_file,
    help="Nodes, as `kubectl get nodes -o yaml` prints them (or any stream of Nodes).",
)
@click.option(
    "--pods",
    "pods_file",
    metavar="PODS.yaml",
    type=_file,
    help="Pods, as `kubectl get pods -A -o yaml` prints them: their GPUs count as used.",
)
@click.option(
    "--config",
    "config_file",
    metavar="CONFIG.yaml",
    type=_file,
    help="Operator config: topologyLevels, fabricProfiles, catalogOverrides.",
)
@click.option(
    "--runtimes",
    "runtime_files",
    multiple=True,
    metavar="RUNTIMES.yaml",
    type=_file,
    help="ClusterTrainingRuntime/TrainingRuntime objects the jobs name in spec.runtimeRef "
    "(repeatable; `kubectl get clustertrainingruntimes -o yaml`). Runtimes in JOB.yaml are "
    "used too.",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["yaml", "json"]),
    default="yaml",
    show_default=True,
    help="yaml: a multi-document stream; json: one v1 List.",
)
def render(
    job_file: str,
    nodes_file: str,
    pods_file: str | None,
    config_file: str | None,
    runtime_files: tuple[str, ...],
    output: str,
) -> None:
    """Print the objects the operator would create for the TrainingJob(s) in JOB.yaml on the
    given inventory, each pod pinned to its node.

    Exit 0: placed. 2: invalid (the message names the field). 3: valid but cannot be placed
    now (the reason follows)."""
    given = [
        f for f in (job_file, nodes_file, pods_file, config_file, *runtime_files) if f is not None
    ]
    if given.count("-") > 1:
        exit_invalid("only one input can be read from standard input ('-')")
    try:
        config = load_operator_config(config_file) if config_file else OperatorConfig()
        nodes = read_objects(nodes_file, "Node", "--nodes")
        pods = read_objects(pods_file, "Pod", "--pods") if pods_file else []
        jobs, notes, inline_runtimes = _jobs(job_file)
        runtimes = runtime_index([*_runtimes(runtime_files), *inline_runtimes])
    except ConfigError as exc:
        exit_invalid(f"--config: {exc}")
    except InputError as exc:
        exit_invalid(str(exc))
    for note in notes:
        click.echo(note, err=True)

    results = [render_job(body, nodes, pods, config, runtimes) for body in jobs]
    several = len(results) > 1
    for r in results:
        for line in r.errors:
            click.echo(f"{r.who}: {line}" if several else line, err=True)

    placed = [r.plan for r in results if r.plan is not None]
    if output == "json":
        if placed:
            items = [obj for r in results if r.plan is not None for obj in r.objects]
            # default=str: a stray non-JSON value from the user's template prints, not crashes
            click.echo(
                json.dumps(
                    {"apiVersion": "v1", "kind": "List", "items": items}, indent=2, default=str
                )
            )
    else:
        chunks = [
            placement_header(r.plan, r.runtime) + dump_yaml_all(r.objects)
            for r in results
            if r.plan is not None
        ]
        if chunks:
            click.echo("".join(chunks), nl=False)
    sys.exit(max(r.code for r in results))

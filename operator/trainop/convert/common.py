"""The pieces every Kubeflow kind shares: field tracking, notes, replicas, run policy, the job.

`Source` wraps one Kubeflow object. Converters read it through `get`, which remembers each
field path they used; `unmapped` records a field that has no trainop equivalent together
with what the user should do; at the end `leftovers` lists every field of the input that
no converter looked at, so nothing is ever dropped silently (a field a newer Kubeflow added
shows up as "not converted" instead of vanishing).

Neighbours: the per-kind modules (`pytorch`, `tensorflow`, `mpi`, `paddle`, `xgboost`,
`trainjob`) build on this; `convert/__init__` dispatches and checks the result with
`trainop.validation`. Pure: dicts in, dicts and notes out.

Kubeflow types followed (training-operator v1.8.1, mpi-operator v2beta1):
https://github.com/kubeflow/training-operator/blob/v1.8.1/pkg/apis/kubeflow.org/v1/common_types.go
https://github.com/kubeflow/mpi-operator/blob/master/pkg/apis/kubeflow/v2beta1/types.go
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainop.api import constants as c

GPU = c.RESOURCE_GPU


class ConvertError(ValueError):
    """The object cannot become a TrainingJob; the message names the field and the fix."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail


@dataclass(frozen=True)
class Note:
    """A field of the input with no (or only a partial) trainop equivalent, and what to do."""

    path: str
    message: str


# Fields the API server sets: meaningless on a new object, so they are listed and dropped.
_SERVER_SET = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
)
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


class Source:
    """One input object: reads fields by dotted path and tracks which were used."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body
        self.kind = str(body.get("kind"))
        self.used: set[str] = {"apiVersion", "kind"}
        self.notes: list[Note] = []

    @property
    def who(self) -> str:
        meta = self.body.get("metadata") or {}
        if self.kind == "ClusterTrainingRuntime":  # cluster-scoped
            return f"{self.kind} {meta.get('name') or '?'}"
        return f"{self.kind} {meta.get('namespace') or 'default'}/{meta.get('name') or '?'}"

    def peek(self, path: str, default: Any = None) -> Any:
        node: Any = self.body
        for part in path.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return default
            node = node[part]
        return node

    def get(self, path: str, default: Any = None) -> Any:
        """The value at `path` (or `default`), marking the field as converted."""
        self.used.add(path)
        return self.peek(path, default)

    def mapping(self, path: str) -> dict[str, Any]:
        """The object at `path` ({} when absent); ConvertError when it is not an object. Its
        fields are not marked used: the caller reads (or lists) each of them."""
        value = self.peek(path, {})
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ConvertError(path, f"must be an object, got {type(value).__name__}")
        return dict(value)

    def note(self, path: str, message: str) -> None:
        self.notes.append(Note(path, message))

    def unmapped(self, path: str, message: str) -> None:
        """`path` has no trainop equivalent: mark it used and say what to do, if it is set."""
        value = self.get(path)
        if value is not None and value is not False and value not in ({}, [], ""):
            self.note(path, message)

    def leftovers(self) -> list[str]:
        """Paths of the input's fields that no converter read."""
        out: list[str] = []
        self._walk(self.body, "", out)
        return out

    def _walk(self, node: Any, prefix: str, out: list[str]) -> None:
        if prefix and prefix in self.used:
            return
        if isinstance(node, Mapping):
            for key, value in node.items():
                self._walk(value, f"{prefix}.{key}" if prefix else str(key), out)
        elif node is not None:
            out.append(prefix)


def take_metadata(src: Source) -> dict[str, Any]:
    """name, namespace, labels and annotations; server-set and owner fields are listed."""
    meta = src.mapping("metadata")
    out: dict[str, Any] = {}
    for key in ("name", "namespace", "labels", "annotations"):
        if meta.get(key):
            out[key] = copy.deepcopy(meta[key])
        src.get(f"metadata.{key}")
    if _LAST_APPLIED in (out.get("annotations") or {}):
        del out["annotations"][_LAST_APPLIED]
        if not out["annotations"]:
            del out["annotations"]
        src.note(
            f"metadata.annotations.{_LAST_APPLIED}",
            "kubectl's record of the Kubeflow object: not carried over (kubectl apply writes "
            "a new one)",
        )
    for key in _SERVER_SET:
        src.unmapped(f"metadata.{key}", "set by the API server: not carried over")
    src.unmapped(
        "metadata.generateName",
        "trainop needs a fixed name (it names the pods and the Service): set metadata.name",
    )
    src.unmapped(
        "metadata.ownerReferences",
        "owners are UIDs of the old cluster objects: not carried over; re-add them if a "
        "controller should own the TrainingJob",
    )
    src.unmapped("metadata.finalizers", "Kubeflow finalizers: not carried over (trainop uses none)")
    src.unmapped("status", "the Kubeflow job's status: not carried over (trainop writes its own)")
    if not out.get("name"):
        raise ConvertError("metadata.name", "required: give the job a name")
    return out


# --- replicas -------------------------------------------------------------------------------


@dataclass
class Role:
    """One Kubeflow replica spec, turned into trainop's shape."""

    path: str  # where it came from, for notes
    replicas: int
    gpus: int
    template: dict[str, Any]
    image: str | None
    restart: str | None  # the Kubeflow restartPolicy, mapped job-wide later
    extra: dict[str, Any] = field(default_factory=dict)


def as_count(value: Any, path: str, *, minimum: int = 0) -> int:
    """An integer field (YAML may give "8"); ConvertError naming `path` otherwise."""
    if isinstance(value, bool):
        raise ConvertError(path, f"must be an integer, got {value!r}")
    if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
        n = int(value)
        if n >= minimum:
            return n
    raise ConvertError(path, f"must be an integer >= {minimum}, got {value!r}")


def take_replica(src: Source, path: str, main: str | None) -> Role:
    """The replica spec at `path`; `main` names the training container (None: the first)."""
    spec = src.mapping(path)
    replicas = as_count(spec.get("replicas", 1), f"{path}.replicas", minimum=1)
    template = copy.deepcopy(spec.get("template") or {})
    if not isinstance(template, dict):
        raise ConvertError(f"{path}.template", "must be a PodTemplateSpec object")
    src.used.update({f"{path}.replicas", f"{path}.template", f"{path}.restartPolicy"})
    restart = spec.get("restartPolicy")
    gpus, image = shape_template(src, f"{path}.template", template, main)
    return Role(path, replicas, gpus, template, image, restart)


def main_container(template: Mapping[str, Any]) -> dict[str, Any] | None:
    containers = (template.get("spec") or {}).get("containers") or []
    return containers[0] if containers and isinstance(containers[0], dict) else None


def shape_template(
    src: Source, path: str, template: dict[str, Any], main: str | None
) -> tuple[int, str | None]:
    """Puts the training container first (trainop wires the first container), moves its
    nvidia.com/gpu into `gpus`, and drops the pod restartPolicy trainop always overrides."""
    pod = template.get("spec")
    if pod is None:
        raise ConvertError(f"{path}.spec", "required: the pod spec with the training container")
    if not isinstance(pod, dict):
        raise ConvertError(f"{path}.spec", "must be a PodSpec object")
    containers = pod.get("containers")
    if not isinstance(containers, list) or not containers:
        raise ConvertError(f"{path}.spec.containers", "required: at least one container")
    if not all(isinstance(x, dict) for x in containers):
        raise ConvertError(f"{path}.spec.containers", "every container must be an object")
    names = [x.get("name") for x in containers]
    if main is not None and main in names and names[0] != main:
        containers.insert(0, containers.pop(names.index(main)))
    policy = pod.pop("restartPolicy", None)
    if policy not in (None, "Never"):
        src.note(
            f"{path}.spec.restartPolicy",
            f"{policy}: trainop pods always have restartPolicy Never (failed pods restart as "
            "a gang, by spec.runPolicy.restartPolicy): dropped",
        )
    gpus = take_gpus(containers[0], f"{path}.spec.containers[0].resources")
    for i, other in enumerate(containers[1:], start=1):
        if isinstance(other, dict) and _gpu_quantity(other):
            src.note(
                f"{path}.spec.containers[{i}].resources",
                "asks for nvidia.com/gpu in a container other than the training one: trainop "
                "places only the first container's GPUs; move them to the training container",
            )
    image = containers[0].get("image")
    return gpus, image if isinstance(image, str) and image else None


def _gpu_quantity(container: Mapping[str, Any]) -> Any:
    res = container.get("resources") or {}
    limits, requests = res.get("limits") or {}, res.get("requests") or {}
    return limits.get(GPU, requests.get(GPU))


def take_gpus(container: dict[str, Any], path: str) -> int:
    """nvidia.com/gpu of the container (limits, else requests), removed from it: trainop sets
    it from `gpus` (with RDMA resources) on each pod."""
    value = _gpu_quantity(container)
    if value is None:
        return 0
    gpus = as_count(value, f"{path}.limits.{GPU}")
    res = container["resources"]
    for part in ("limits", "requests"):
        if isinstance(res.get(part), dict):
            res[part].pop(GPU, None)
            if not res[part]:
                del res[part]
    if not res:
        del container["resources"]
    return gpus


# --- restart and run policy -----------------------------------------------------------------

# Kubeflow's replica restartPolicy -> trainop's job-wide one. Kubeflow restarts one pod in
# place; trainop restarts the whole gang (a collective cannot go on without a peer).
_RESTART = {
    "OnFailure": "OnFailure",
    "Always": "OnFailure",
    "Never": "Never",
    "ExitCode": "ExitCode",
}


def restart_policy(src: Source, roles: Mapping[str, Role], primary: str, default: str) -> str:
    """The primary role's restartPolicy (Kubeflow's default for the kind when unset), mapped;
    other roles whose policy differs are listed, since trainop has one per job."""
    chosen = roles[primary].restart or default
    if chosen not in _RESTART:
        raise ConvertError(
            f"{roles[primary].path}.restartPolicy",
            f"unknown restart policy {chosen!r}: use OnFailure, Never, ExitCode or Always",
        )
    if chosen == "Always":
        src.note(
            f"{roles[primary].path}.restartPolicy",
            "Always: mapped to OnFailure (trainop restarts the gang on failure only; a pod "
            "that exits 0 is finished)",
        )
    for role in roles.values():
        if role is not roles[primary] and (role.restart or default) != chosen:
            src.note(
                f"{role.path}.restartPolicy",
                f"{role.restart or default}: trainop has one restart policy per job; it takes "
                f"the {primary}'s ({chosen}) -> spec.runPolicy.restartPolicy",
            )
    return _RESTART[chosen]


def take_run_policy(
    src: Source, path: str, total_pods: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Kubeflow RunPolicy -> (trainop runPolicy fields, spec fields queue/priorityClassName)."""
    src.mapping(path)
    run: dict[str, Any] = {}
    for key in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        value = src.get(f"{path}.{key}")
        if value is not None:
            run[key] = as_count(value, f"{path}.{key}")
    suspend = src.get(f"{path}.suspend")
    if suspend is not None:
        run["suspend"] = bool(suspend)
    clean_pod_policy(src, f"{path}.cleanPodPolicy")
    src.unmapped(
        f"{path}.managedBy",
        "no equivalent: trainop's operator manages every TrainingJob (for Kueue see "
        "docs/queues.md, externalQueue: kueue); removed",
    )
    return run, take_scheduling(src, f"{path}.schedulingPolicy", total_pods)


def clean_pod_policy(src: Source, path: str) -> None:
    """trainop deletes a finished job's still-running pods and keeps the finished ones until
    ttlSecondsAfterFinished deletes the job: Kubeflow's `Running`."""
    value = src.get(path)
    if value in (None, "", "Running"):
        return
    if value == "All":
        src.note(
            path,
            "All: no equivalent; trainop deletes a finished job's running pods and keeps "
            "finished ones until the job is deleted: set spec.runPolicy.ttlSecondsAfterFinished "
            "to remove them",
        )
    elif value == "None":
        src.note(
            path,
            "None: no equivalent; trainop deletes a finished job's still-running pods (e.g. "
            "parameter servers) to free their GPUs; keep logs elsewhere if you need them",
        )
    else:
        raise ConvertError(path, f"unknown clean pod policy {value!r}: All, Running or None")


def take_scheduling(src: Source, path: str, total_pods: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    src.mapping(path)
    queue = src.get(f"{path}.queue")
    if queue:
        out["queue"] = queue
        src.note(
            f"{path}.queue",
            f"-> spec.queue {queue!r}: trainop reads it as a TrainingQueue name; create that "
            "TrainingQueue (docs/queues.md) or remove spec.queue to use the namespace default",
        )
    prio = src.get(f"{path}.priorityClass")
    if prio:
        out["priorityClassName"] = prio
    min_available = src.get(f"{path}.minAvailable")
    if min_available is not None and min_available != total_pods:
        src.note(
            f"{path}.minAvailable",
            f"{min_available}: no equivalent; trainop admits and places all {total_pods} pods "
            "of the gang together",
        )
    src.unmapped(
        f"{path}.minResources",
        "no equivalent: trainop computes the gang's GPUs from replicaSpecs and admits it "
        "against its TrainingQueue quota",
    )
    src.unmapped(
        f"{path}.scheduleTimeoutSeconds",
        "no equivalent: a trainop gang waits in its queue until it fits (`trainop explain` "
        "says why); use spec.runPolicy.activeDeadlineSeconds to bound the run",
    )
    return out


# --- the TrainingJob ------------------------------------------------------------------------


def training_job(
    meta: Mapping[str, Any],
    framework: str,
    roles: Mapping[str, Role],
    run_policy: Mapping[str, Any],
    extra_spec: Mapping[str, Any],
    primary: str = "Worker",
) -> dict[str, Any]:
    """The TrainingJob body. spec.image is the primary role's image (so image choice and node
    compatibility use it); a role whose container runs another image keeps it in its template."""
    image = roles[primary].image or next((r.image for r in roles.values() if r.image), None)
    replica_specs: dict[str, Any] = {}
    for name, role in roles.items():
        main = main_container(role.template)
        if image and main is not None and main.get("image") == image:
            del main["image"]
        rs: dict[str, Any] = {"replicas": role.replicas}
        if role.gpus:
            rs["gpus"] = role.gpus
        rs["template"] = role.template
        replica_specs[name] = rs
    spec: dict[str, Any] = {"framework": {"name": framework}}
    if image:
        spec["image"] = image
    spec.update(extra_spec)
    spec["replicaSpecs"] = replica_specs
    spec["runPolicy"] = dict(run_policy)
    return {
        "apiVersion": c.API_VERSION,
        "kind": "TrainingJob",
        "metadata": dict(meta),
        "spec": spec,
    }


def merge_into_worker(src: Source, master: Role, worker: Role | None) -> Role:
    """Kubeflow's Master (rank 0) and Workers -> trainop's one Worker role, ranks in placement
    order. Their templates are normally the same; when not, the Worker's is kept and said so."""
    if worker is None:
        return Role(
            master.path, master.replicas, master.gpus, master.template, master.image, master.restart
        )
    if master.template != worker.template or master.gpus != worker.gpus:
        src.note(
            f"{master.path}.template",
            "differs from the Worker's template (or GPUs): trainop runs every rank from one "
            "template, the Worker's; put what rank 0 needs into spec.replicaSpecs.Worker",
        )
    return Role(
        worker.path,
        master.replicas + worker.replicas,
        worker.gpus,
        worker.template,
        worker.image,
        worker.restart,
    )


def check_roles(src: Source, path: str, specs: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(specs) - set(allowed))
    if unknown:
        raise ConvertError(
            f"{path}.{unknown[0]}",
            f"not a {src.kind} replica type: use {', '.join(allowed)}",
        )


def nproc_note(src: Source, path: str, value: Any, gpus: int) -> None:
    """torchrun's processes per pod: trainop starts one per GPU (PET_NPROC_PER_NODE)."""
    if value is None or str(value) in ("auto", "gpu") or str(value) == str(max(gpus, 1)):
        return
    src.note(
        path,
        f"{value}: trainop runs one process per GPU ({max(gpus, 1)} per pod: torchrun's "
        "PET_NPROC_PER_NODE, MPI hostfile slots); for another count set PET_NPROC_PER_NODE "
        "in the Worker container's env, or pass -np to mpirun",
    )


def master_worker(
    src: Source, specs_path: str, container: str, default_restart: str
) -> tuple[Role, str, bool]:
    """A Master/Worker kind (PyTorchJob, XGBoostJob) as one Worker role: (the Worker, the
    job's restart policy, whether there was a Master, whose exit decides success)."""
    specs = src.mapping(specs_path)
    check_roles(src, specs_path, specs, ("Master", "Worker"))
    if not specs:
        raise ConvertError(specs_path, "required: a Master and/or Worker replica spec")
    roles = {r: take_replica(src, f"{specs_path}.{r}", container) for r in specs}
    main = "Worker" if "Worker" in roles else "Master"
    restart = restart_policy(src, roles, main, default_restart)
    if "Master" in roles:
        return merge_into_worker(src, roles["Master"], roles.get("Worker")), restart, True
    return roles["Worker"], restart, False

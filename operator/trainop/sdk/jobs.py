"""The SDK's pure decisions: the TrainingJob `train()` submits, a submitted job (model, dict
or YAML) checked into the API's JSON, what `wait()` makes of a phase, and which pod is a
rank's in `logs()`. No I/O.

The TrainingJob of `train(func, runtime=..., num_nodes=N, gpus_per_node=G)`:

    spec:
      runtimeRef: {kind, name}                # when a runtime is named
      framework: {name: pytorch}              # only when the runtime gives none (a job's
      queue: ...                              #   framework would replace the runtime's whole,
      replicaSpecs:                           #   version included); a runtime of another
        Worker:                               #   framework is refused: train() runs torchrun
          replicas: N
          gpus: G
          template: {spec: {containers: [{name: <the runtime's Worker container, else
                                                 trainer>, command: [...], env: [...]}]}}

The container takes the name of the runtime's first Worker container, so the runtime's
merge (containers by name, trainop.runtimes) lays the command and env over the platform's
image, volumes and resources instead of adding a second container.

The command is `trainop-launch -- torchrun -m trainop.launcher.sdkrun` (after a `pip
install` of `packages`, when any), so every pod runs trainop-launch's GPU/NIC discovery and
peer check, torchrun reads the PET_* variables the operator wires, and each of its
processes runs the function from TRAINOP_SDK_FUNC (trainop.launcher.sdkrun). The env also
carries PYTHONUNBUFFERED=1 (logs() sees lines as they are printed) and, when the function
uses a Hugging Face Trainer, DISABLE_KUBEFLOW_INTEGRATION=true: trainop's callback reports
instead of transformers' KubeflowCallback, so the job gets one report stream, not two
(docs/progress.md).

Neighbours: trainop.sdk.functions (the payload), trainop.sdk.client (sends these bodies),
trainop.api.trainingjob (the models a submitted job is checked against).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from trainop.api import constants as c
from trainop.api.base import all_errors
from trainop.api.trainingjob import PHASES, TERMINAL_PHASES, TrainingJobSpec
from trainop.api.trainingruntime import CLUSTER_RUNTIME_KIND, RUNTIME_KIND
from trainop.launcher.sdkrun import PAYLOAD_ENV
from trainop.sdk.errors import InvalidJobError
from trainop.sdk.functions import TRANSFORMERS, Packed
from trainop.yamlio import YamlInputError, load_yaml

CLUSTER_RUNTIME = CLUSTER_RUNTIME_KIND
NAMESPACED_RUNTIME = RUNTIME_KIND
RUNTIME_KINDS = (CLUSTER_RUNTIME, NAMESPACED_RUNTIME)
CONTAINER = "trainer"
RUNNER = ["trainop-launch", "--", "torchrun", "-m", "trainop.launcher.sdkrun"]
SDK_ANNOTATION = "trainop.dev/sdk-function"
MAX_NAME = 40  # pods are <job>-worker-<index>, hostnames of at most 63 characters
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
# What the API server sets on an object it stores: dropped from a submitted job.
SERVER_SET = (
    "resourceVersion", "uid", "creationTimestamp", "generation", "managedFields",
    "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds",
)  # fmt: skip
# The variables train() itself sets: env= may not override them.
RESERVED_ENV = (PAYLOAD_ENV,)


def runtime_ref(runtime: str) -> dict[str, str]:
    """`name` (a ClusterTrainingRuntime), or `Kind/name` for either kind."""
    kind, _, name = runtime.rpartition("/")
    kind = kind or CLUSTER_RUNTIME
    if kind not in RUNTIME_KINDS:
        raise InvalidJobError(
            "runtime", f"{runtime!r}: the kind must be one of {', '.join(RUNTIME_KINDS)}"
        )
    if not name:
        raise InvalidJobError("runtime", "must name a runtime, e.g. 'pytorch' (the chart's)")
    return {"kind": kind, "name": name}


def job_name(func_name: str, suffix: str) -> str:
    """A DNS-1035 name from the function's name and a random suffix: `train-mnist-x7k2q`."""
    base = re.sub(r"[^a-z0-9-]+", "-", func_name.lower()).strip("-") or "train"
    if not base[0].isalpha():
        base = "train-" + base
    return f"{base[: MAX_NAME - len(suffix) - 1].rstrip('-')}-{suffix}"


def check_name(name: str) -> str:
    if len(name) > MAX_NAME + 14 or not _DNS1035.match(name):
        raise InvalidJobError(
            "name",
            f"{name!r} is not a DNS-1035 label of at most {MAX_NAME + 14} characters "
            "(lower-case letters, digits and '-', starting with a letter)",
        )
    return name


def _env_list(env: Mapping[str, str] | None, packed: Packed) -> list[dict[str, str]]:
    user = dict(env or {})
    for key, value in user.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise InvalidJobError(f"env.{key}", "not a valid environment variable name")
        if key in RESERVED_ENV:
            raise InvalidJobError(f"env.{key}", "set by train() itself (the function's payload)")
        if not isinstance(value, str):
            raise InvalidJobError(f"env.{key}", f"must be a string, got {type(value).__name__}")
    out = {"PYTHONUNBUFFERED": "1"}
    if TRANSFORMERS in packed.integrations:
        out["DISABLE_KUBEFLOW_INTEGRATION"] = "true"
    out.update(user)
    out[PAYLOAD_ENV] = packed.payload
    return [{"name": k, "value": v} for k, v in out.items()]


def pod_command(packages: Sequence[str]) -> list[str]:
    """The trainer container's command: the runner, after `pip install` of `packages`."""
    for p in packages:
        if not isinstance(p, str) or not p.strip() or p.startswith("-"):
            raise InvalidJobError("packages", f"{p!r} is not a requirement (e.g. 'datasets>=3')")
    if not packages:
        return list(RUNNER)
    pip = "python3 -m pip install --quiet --no-warn-script-location " + " ".join(
        shlex.quote(p) for p in packages
    )
    return ["sh", "-c", f"{pip} && exec {shlex.join(RUNNER)}"]


def runtime_container(runtime_spec: Mapping[str, Any] | None) -> str:
    """The name of the runtime's first Worker container (CONTAINER when it has none)."""
    worker = ((runtime_spec or {}).get("replicaSpecs") or {}).get("Worker") or {}
    containers = ((worker.get("template") or {}).get("spec") or {}).get("containers") or []
    first = containers[0] if containers and isinstance(containers[0], Mapping) else {}
    return str(first.get("name") or CONTAINER)


def job_container(job: Mapping[str, Any]) -> str:
    """The trainer container of a job train() made (the Worker template's first)."""
    return runtime_container(job.get("spec"))


def runtime_framework(runtime_spec: Mapping[str, Any] | None, runtime: str) -> str | None:
    """The runtime's framework; InvalidJobError when it is not one train() can run."""
    name = ((runtime_spec or {}).get("framework") or {}).get("name")
    if name and name != "pytorch":
        raise InvalidJobError(
            "runtime",
            f"{runtime} is a {name} runtime; train() runs torchrun, so it needs a pytorch "
            "runtime (or submit() a TrainingJob of your own)",
        )
    return str(name) if name else None


def train_job(
    packed: Packed,
    *,
    name: str,
    namespace: str,
    runtime: Mapping[str, str] | None,
    num_nodes: int,
    gpus_per_node: int,
    packages: Sequence[str] = (),
    queue: str | None = None,
    env: Mapping[str, str] | None = None,
    runtime_spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The TrainingJob body of one train() call (see the module docstring); `runtime_spec`
    is the named runtime's spec when the cluster was asked for it."""
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
        raise InvalidJobError("num_nodes", f"must be an integer >= 1, got {num_nodes!r}")
    if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) or gpus_per_node < 0:
        raise InvalidJobError("gpus_per_node", f"must be an integer >= 0, got {gpus_per_node!r}")
    given = runtime_framework(runtime_spec, (runtime or {}).get("name", ""))
    container = {
        "name": runtime_container(runtime_spec),
        "command": pod_command(tuple(packages)),
        "env": _env_list(env, packed),
    }
    spec: dict[str, Any] = {}
    if runtime is not None:
        spec["runtimeRef"] = dict(runtime)
    if given is None:
        spec["framework"] = {"name": "pytorch"}
    if queue:
        spec["queue"] = queue
    spec["replicaSpecs"] = {
        "Worker": {
            "replicas": num_nodes,
            "gpus": gpus_per_node,
            "template": {"spec": {"containers": [container]}},
        }
    }
    return {
        "apiVersion": c.API_VERSION,
        "kind": "TrainingJob",
        "metadata": {
            "name": check_name(name),
            "namespace": namespace,
            "annotations": {SDK_ANNOTATION: packed.name},
        },
        "spec": spec,
    }


def coerce_job(job: Any, namespace: str) -> dict[str, Any]:
    """A TrainingJob given as a dict, YAML text or a pydantic model (the whole object, or a
    TrainingJobSpec with no metadata: refused, it has no name), checked against the API's
    models: InvalidJobError names the first bad field as `spec.replicaSpecs.Worker.gpus`."""
    if isinstance(job, BaseModel):
        job = job.model_dump(by_alias=True, exclude_none=True, mode="json")
        if "replicaSpecs" in job:
            raise InvalidJobError(
                "metadata.name", "a TrainingJobSpec alone has no name: submit a dict"
            )
    if isinstance(job, str):
        try:
            job = load_yaml(job, "job")  # bounded: size, nesting, alias expansion
        except YamlInputError as err:
            raise InvalidJobError("job", str(err)) from err
    if not isinstance(job, Mapping):
        raise InvalidJobError(
            "job", f"must be a TrainingJob (dict, YAML or model), got {type(job).__name__}"
        )
    body = dict(job)
    body.setdefault("apiVersion", c.API_VERSION)
    body.setdefault("kind", "TrainingJob")
    if body["apiVersion"] != c.API_VERSION or body["kind"] != "TrainingJob":
        raise InvalidJobError(
            "apiVersion",
            f"expected {c.API_VERSION} TrainingJob, got {body['apiVersion']} {body['kind']}",
        )
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k not in SERVER_SET}
    body.pop("status", None)  # a job read back (get().raw) submits as a new one
    if not meta.get("name"):
        raise InvalidJobError("metadata.name", "required")
    meta["namespace"] = meta.get("namespace") or namespace
    body["metadata"] = meta
    spec = body.get("spec")
    if not isinstance(spec, Mapping):
        raise InvalidJobError("spec", "required, an object")
    check_spec(spec)
    return body


def check_spec(spec: Mapping[str, Any]) -> None:
    """The spec against TrainingJobSpec; a job naming a runtime may leave framework and
    replicaSpecs out (the runtime gives them; the operator checks the merge), so they are
    only required without runtimeRef, as the CRD's own rules say."""
    probe = dict(spec)
    if "runtimeRef" in probe:  # stand-ins for the runtime's
        probe.setdefault("framework", {"name": "pytorch"})
        probe.setdefault("replicaSpecs", {"Worker": {}})
    try:
        TrainingJobSpec.model_validate(probe)
    except ValidationError as err:
        field, detail = all_errors(err, "spec")[0]
        raise InvalidJobError(field, detail) from err


# --- wait -----------------------------------------------------------------------------------
def until_phases(until: str | Iterable[str]) -> tuple[str, ...]:
    phases = (until,) if isinstance(until, str) else tuple(until)
    for p in phases:
        if p not in PHASES:
            raise InvalidJobError("until", f"{p!r} is not a phase; phases: {', '.join(PHASES)}")
    if not phases:
        raise InvalidJobError("until", "name at least one phase")
    return phases


def phase_of(job: Mapping[str, Any]) -> str:
    return str((job.get("status") or {}).get("phase") or "")


def failure_message(job: Mapping[str, Any]) -> str:
    """The reason a job ended (its Failed/Invalid condition or lastFailure), for errors."""
    status = job.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") in ("Failed", "Invalid") and cond.get("status") == "True":
            return f"{cond.get('reason', '')}: {cond.get('message', '')}".strip(": ")
    last = status.get("lastFailure") or {}
    return str(last.get("message") or "")


def wait_verdict(job: Mapping[str, Any], until: tuple[str, ...]) -> str | None:
    """'done' when the job is in one of `until`; 'ended' when it can never get there (a
    terminal phase that is not asked for); None to keep waiting."""
    phase = phase_of(job)
    if phase in until:
        return "done"
    if phase in TERMINAL_PHASES or phase == "Invalid":
        return "ended"
    return None


# --- logs -----------------------------------------------------------------------------------
def pod_rank(pod: Mapping[str, Any]) -> int | None:
    meta = pod.get("metadata") or {}
    value = (meta.get("annotations") or {}).get(c.ANNOTATION_RANK)
    if value is None:
        labels = meta.get("labels") or {}
        if labels.get(c.LABEL_REPLICA_TYPE) != "worker":
            return None
        value = labels.get(c.LABEL_REPLICA_INDEX)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def rank_pod(pods: Iterable[Mapping[str, Any]], rank: int) -> Mapping[str, Any] | None:
    """The current pod of `rank`: not being deleted, newest first (a gang restart makes new
    pods under the same names, so the uid tells them apart)."""
    live = [
        p
        for p in pods
        if pod_rank(p) == rank and not (p.get("metadata") or {}).get("deletionTimestamp")
    ]
    live.sort(key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))
    return live[-1] if live else None


def log_ready(pod: Mapping[str, Any], container: str = CONTAINER) -> bool:
    """Whether the trainer container has started (running or ended): it has logs to read."""
    for st in (pod.get("status") or {}).get("containerStatuses") or []:
        if st.get("name") == container:
            state = st.get("state") or {}
            return "running" in state or "terminated" in state
    return False

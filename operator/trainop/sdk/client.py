"""`TrainopClient`: TrainingJobs from Python, for notebooks and scripts. The SDK's shell: the
only SDK module that talks to the API server (an import-linter contract), through its own
`kubernetes` ApiClient, so it never touches the process-wide default configuration.

    from trainop.sdk import TrainopClient
    client = TrainopClient()                                  # kubeconfig, or in-cluster
    name = client.train(train_fn, runtime="pytorch", num_nodes=2, gpus_per_node=8)
    for line in client.logs(name, follow=True):               # rank 0, across gang restarts
        print(line)
    client.wait(name)                                         # Succeeded, or JobFailedError

The shape follows the Kubeflow SDK's TrainerClient (train, list_runtimes, get_job_logs with
follow, wait_for_job_status: https://www.kubeflow.org/docs/components/trainer/getting-started/)
over trainop's own objects: a TrainingJob naming a ClusterTrainingRuntime or TrainingRuntime
with spec.runtimeRef. Errors are trainop.sdk.errors types naming the object or the field;
the API server's own refusal (a 422 naming the field) is passed on in its words.

Neighbours: trainop.sdk.jobs and trainop.sdk.functions decide (pure), trainop.explain writes
`explain()`'s text, trainop.kube.reads gathers what it needs; trainop.sdk.local runs the
same train() as local processes.
"""

from __future__ import annotations

import json
import os
import secrets
import string
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from pydantic import BaseModel, ValidationError

from trainop.api import constants as c
from trainop.api.progress import ProgressStatus
from trainop.api.trainingjob import TrainingJobStatus
from trainop.api.trainingruntime import TrainingRuntimeSpec
from trainop.sdk import jobs
from trainop.sdk.errors import (
    ApiError,
    ForbiddenError,
    InvalidJobError,
    JobExistsError,
    JobFailedError,
    JobNotFoundError,
    NotInstalledError,
    RuntimeNotFoundError,
    TrainopError,
    WaitTimeoutError,
)
from trainop.sdk.functions import pack

JOBS = "trainingjobs"
RUNTIME_PLURALS = {
    jobs.CLUSTER_RUNTIME: "clustertrainingruntimes",
    jobs.NAMESPACED_RUNTIME: "trainingruntimes",
}
SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclass(frozen=True)
class Runtime:
    """One ClusterTrainingRuntime or TrainingRuntime, as list_runtimes() shows it."""

    kind: str
    name: str
    namespace: str | None
    framework: str
    generation: int | None
    spec: TrainingRuntimeSpec | None  # None when the stored spec is newer than this SDK
    raw: dict[str, Any]


@dataclass(frozen=True)
class Job:
    """A TrainingJob as get() returns it: its status typed by trainop.api's model (None when
    the stored status is newer than this SDK's model), and the object as stored."""

    name: str
    namespace: str
    phase: str
    status: TrainingJobStatus | None
    raw: dict[str, Any]

    @property
    def progress(self) -> ProgressStatus | None:
        return self.status.progress if self.status is not None else None


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str
    count: int
    time: str


def _typed(model: type[BaseModel], data: Any) -> Any:
    try:
        return model.model_validate(data or {})
    except ValidationError:
        return None


def _api_client(kubeconfig: str | None, context: str | None) -> client.ApiClient:
    if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        cfg = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=cfg)
            return client.ApiClient(cfg)
        except config.ConfigException:
            pass
    try:
        return config.new_client_from_config(config_file=kubeconfig, context=context)
    except (config.ConfigException, OSError) as err:
        raise TrainopError(
            f"no cluster credentials: {err} (set KUBECONFIG, pass kubeconfig=, or run in a pod)"
        ) from err


def _default_namespace(kubeconfig: str | None, context: str | None) -> str:
    if kubeconfig is None and context is None and os.path.exists(SA_NAMESPACE):
        with open(SA_NAMESPACE) as f:
            return f.read().strip() or "default"
    try:
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
    except (config.ConfigException, OSError):
        return "default"
    chosen = next((x for x in contexts if x.get("name") == context), None) if context else active
    return str(((chosen or {}).get("context") or {}).get("namespace") or "default")


def _message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)


def _invalid_field(exc: ApiException, msg: str) -> tuple[str, str]:
    """(field, detail) of a 422: its Status's first cause, else the message's
    `... is invalid: spec.x.y: detail`."""
    try:
        causes = (json.loads(exc.body or "{}").get("details") or {}).get("causes") or []
    except (ValueError, AttributeError):
        causes = []
    if causes and causes[0].get("field"):
        return str(causes[0]["field"]), str(causes[0].get("message") or msg)
    tail = msg.split(" is invalid: ", 1)[-1]
    field, _, detail = tail.partition(": ")
    return (field, detail) if detail else ("job", msg)


class TrainopClient:
    """TrainingJobs of one namespace (default: the kubeconfig context's, or the pod's)."""

    def __init__(
        self,
        namespace: str | None = None,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        api_client: client.ApiClient | None = None,
        poll_seconds: float = 2.0,
    ) -> None:
        self.api = api_client or _api_client(kubeconfig, context)
        self.namespace = namespace or _default_namespace(kubeconfig, context)
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)
        self.poll_seconds = poll_seconds

    # --- errors ------------------------------------------------------------------------------
    def _fail(self, exc: ApiException, name: str | None = None) -> TrainopError:
        msg = _message(exc)
        if exc.status == 404 and name is not None:
            return JobNotFoundError(name, self.namespace)
        if exc.status == 404:
            return NotInstalledError(
                f"{msg}: is trainop installed? (kubectl apply --server-side -f crds/)"
            )
        if exc.status == 409 and name is not None:
            return JobExistsError(name, self.namespace)
        if exc.status == 422:  # the API server names the field
            field, detail = _invalid_field(exc, msg)
            return InvalidJobError(field, detail)
        if exc.status in (401, 403):
            return ForbiddenError(f"{msg} (namespace {self.namespace})")
        return ApiError(exc.status or 0, msg)

    # --- runtimes ----------------------------------------------------------------------------
    def list_runtimes(self) -> list[Runtime]:
        """The ClusterTrainingRuntimes, then this namespace's TrainingRuntimes, by name.
        NotInstalledError when neither kind is installed on the cluster."""
        out: list[Runtime] = []
        missing = 0
        for kind, plural in RUNTIME_PLURALS.items():
            try:
                if kind == jobs.CLUSTER_RUNTIME:
                    items = self.custom.list_cluster_custom_object(c.GROUP, c.VERSION, plural)
                else:
                    items = self.custom.list_namespaced_custom_object(
                        c.GROUP, c.VERSION, self.namespace, plural
                    )
            except ApiException as exc:
                if exc.status != 404:
                    raise self._fail(exc) from exc
                missing += 1
                continue
            for obj in sorted(
                cast(dict[str, Any], items).get("items") or [], key=lambda o: o["metadata"]["name"]
            ):
                meta = obj.get("metadata") or {}
                fw = ((obj.get("spec") or {}).get("framework") or {}).get("name") or ""
                out.append(
                    Runtime(
                        kind,
                        meta["name"],
                        meta.get("namespace"),
                        fw,
                        meta.get("generation"),
                        _typed(TrainingRuntimeSpec, obj.get("spec")),
                        obj,
                    )
                )
        if missing == len(RUNTIME_PLURALS):
            raise NotInstalledError(
                "the runtime kinds (clustertrainingruntimes.trainop.dev, "
                "trainingruntimes.trainop.dev) are not installed: apply trainop's crds/"
            )
        return out

    def _runtime(self, ref: Mapping[str, str]) -> dict[str, Any]:
        """The runtime `ref` names; RuntimeNotFoundError listing the ones there are."""
        kind, name = ref["kind"], ref["name"]
        try:
            if kind == jobs.CLUSTER_RUNTIME:
                got = self.custom.get_cluster_custom_object(
                    c.GROUP, c.VERSION, RUNTIME_PLURALS[kind], name
                )
            else:
                got = self.custom.get_namespaced_custom_object(
                    c.GROUP, c.VERSION, self.namespace, RUNTIME_PLURALS[kind], name
                )
            return cast(dict[str, Any], got)
        except ApiException as exc:
            if exc.status != 404:
                raise self._fail(exc) from exc
        try:
            known = [f"{r.kind}/{r.name}" for r in self.list_runtimes()]
        except NotInstalledError as err:
            raise RuntimeNotFoundError(kind, name, None, str(err)) from None
        hint = f"runtimes here: {', '.join(known)}" if known else "no runtime exists yet"
        ns = self.namespace if kind == jobs.NAMESPACED_RUNTIME else None
        raise RuntimeNotFoundError(kind, name, ns, hint)

    # --- submit and train --------------------------------------------------------------------
    def submit(self, job: Any) -> str:
        """Create a TrainingJob given as a dict, YAML text or a pydantic model; its name."""
        body = jobs.coerce_job(job, self.namespace)
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        try:
            self.custom.create_namespaced_custom_object(
                c.GROUP, c.VERSION, ns, JOBS, body, field_validation="Strict"
            )
        except ApiException as exc:
            if exc.status == 404:
                raise self._fail(exc) from exc  # the CRD or the namespace
            raise self._fail(exc, name if exc.status == 409 else None) from exc
        return str(name)

    def train(
        self,
        func: Callable[..., Any],
        *,
        runtime: str | None,
        num_nodes: int,
        gpus_per_node: int,
        packages: Sequence[str] = (),
        queue: str | None = None,
        env: Mapping[str, str] | None = None,
        name: str | None = None,
        args: Mapping[str, Any] | None = None,
    ) -> str:
        """Run `func(**args)` in every training process of a `num_nodes`-pod PyTorch job
        (trainop.sdk.jobs has the job it makes); its name. `runtime`: a
        ClusterTrainingRuntime's name, `TrainingRuntime/<name>` for this namespace's, or None
        for no runtime (the catalog's PyTorch image)."""
        packed = pack(func, args)
        ref = jobs.runtime_ref(runtime) if runtime is not None else None
        runtime_spec = (self._runtime(ref).get("spec") or {}) if ref is not None else None
        suffix = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(5))
        body = jobs.train_job(
            packed,
            name=name or jobs.job_name(packed.name, suffix),
            namespace=self.namespace,
            runtime=ref,
            num_nodes=num_nodes,
            gpus_per_node=gpus_per_node,
            packages=packages,
            queue=queue,
            env=env,
            runtime_spec=runtime_spec,
        )
        return self.submit(body)

    # --- read --------------------------------------------------------------------------------
    def _raw(self, name: str) -> dict[str, Any]:
        try:
            return cast(
                dict[str, Any],
                self.custom.get_namespaced_custom_object(
                    c.GROUP, c.VERSION, self.namespace, JOBS, name
                ),
            )
        except ApiException as exc:
            raise self._fail(exc, name) from exc

    def get(self, name: str) -> Job:
        raw = self._raw(name)
        status = _typed(TrainingJobStatus, raw.get("status"))
        return Job(name, self.namespace, jobs.phase_of(raw), status, raw)

    def list_jobs(self) -> list[Job]:
        """Every TrainingJob of the namespace."""
        try:
            items = self.custom.list_namespaced_custom_object(
                c.GROUP, c.VERSION, self.namespace, JOBS
            )
        except ApiException as exc:
            raise self._fail(exc) from exc
        return [
            Job(
                o["metadata"]["name"],
                self.namespace,
                jobs.phase_of(o),
                _typed(TrainingJobStatus, o.get("status")),
                o,
            )
            for o in cast(dict[str, Any], items).get("items") or []
        ]

    def progress(self, name: str) -> ProgressStatus | None:
        """status.progress (step, ETA, loss, last checkpoint...), None before any report."""
        data = (self._raw(name).get("status") or {}).get("progress")
        return None if not data else cast(ProgressStatus | None, _typed(ProgressStatus, data))

    def events(self, name: str) -> list[Event]:
        """The job's Events, oldest first (Admitted, Preempted, CheckpointRequested, ...)."""
        self._raw(name)
        try:
            items = self.core.list_namespaced_event(
                self.namespace,
                field_selector=f"involvedObject.name={name},involvedObject.kind=TrainingJob",
            ).items
        except ApiException as exc:
            raise self._fail(exc) from exc
        out = [
            Event(
                e.type or "",
                e.reason or "",
                e.message or "",
                int(e.count or 1),
                str(e.last_timestamp or e.event_time or e.first_timestamp or ""),
            )
            for e in items
        ]
        return sorted(out, key=lambda e: e.time)

    def explain(self, name: str) -> str:
        """What `trainop explain` prints: queue position, quota, the failing constraint,
        placement, pods and events."""
        from trainop.explain import explain_text
        from trainop.kube.reads import job_context

        try:
            ctx = job_context(self.namespace, name, api_client=self.api)
        except ApiException as exc:
            raise self._fail(exc, name) from exc
        if ctx is None:
            raise JobNotFoundError(name, self.namespace)
        return explain_text(ctx["job"], ctx["pods"], ctx["events"], ctx["queue"], ctx["ancestors"])

    # --- write -------------------------------------------------------------------------------
    def _patch(self, name: str, body: Mapping[str, Any]) -> None:
        try:
            self.custom.patch_namespaced_custom_object(
                c.GROUP, c.VERSION, self.namespace, JOBS, name, dict(body)
            )
        except ApiException as exc:
            raise self._fail(exc, name) from exc

    def suspend(self, name: str) -> None:
        """spec.runPolicy.suspend: true (its pods are deleted; it keeps its place)."""
        self._patch(name, {"spec": {"runPolicy": {"suspend": True}}})

    def resume(self, name: str) -> None:
        self._patch(name, {"spec": {"runPolicy": {"suspend": False}}})

    def delete(self, name: str) -> None:
        try:
            self.custom.delete_namespaced_custom_object(
                c.GROUP, c.VERSION, self.namespace, JOBS, name, propagation_policy="Background"
            )
        except ApiException as exc:
            raise self._fail(exc, name) from exc

    # --- wait and logs -----------------------------------------------------------------------
    def wait(
        self,
        name: str,
        until: str | Iterable[str] = "Succeeded",
        timeout: float = 3600,
        callback: Callable[[Job], Any] | None = None,
    ) -> Job:
        """Poll until the job is in one of `until`'s phases and return it. `callback(job)` is
        called at each change of phase or step. JobFailedError when it ends elsewhere
        (Failed, Invalid, or Succeeded when Running was asked for), WaitTimeoutError with
        the phase it is in after `timeout` seconds."""
        phases = jobs.until_phases(until)
        deadline = time.monotonic() + timeout
        seen: tuple[str, Any] | None = None
        while True:
            job = self.get(name)
            mark = (job.phase, ((job.raw.get("status") or {}).get("progress") or {}).get("step"))
            if callback is not None and mark != seen:
                callback(job)
            seen = mark
            verdict = jobs.wait_verdict(job.raw, phases)
            if verdict == "done":
                return job
            if verdict == "ended":
                raise JobFailedError(name, job.phase, jobs.failure_message(job.raw))
            if time.monotonic() >= deadline:
                raise WaitTimeoutError(name, phases, job.phase, timeout)
            time.sleep(min(self.poll_seconds, max(0.0, deadline - time.monotonic())))

    def _rank_pod(self, name: str, rank: int) -> Mapping[str, Any] | None:
        try:
            pods = self.core.list_namespaced_pod(
                self.namespace, label_selector=f"{c.LABEL_JOB_NAME}={name}"
            ).items
        except ApiException as exc:
            raise self._fail(exc) from exc
        plain = [self.api.sanitize_for_serialization(p) for p in pods]
        return jobs.rank_pod(plain, rank)

    def _stream(self, pod: str, container: str, follow: bool) -> Iterator[str]:
        try:
            resp: Any = self.core.read_namespaced_pod_log(
                pod, self.namespace, container=container, follow=follow, _preload_content=False
            )
        except ApiException as exc:
            if exc.status in (400, 404):  # gone or not started after all: the caller looks again
                return
            raise self._fail(exc) from exc
        pending = b""
        try:
            for chunk in resp.stream(4096):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode(errors="replace")
            if pending:
                yield pending.decode(errors="replace")
        finally:
            resp.release_conn()

    def logs(self, name: str, rank: int = 0, follow: bool = True) -> Iterator[str]:
        """The trainer container's lines of the pod of `rank` (torchrun node rank). With
        `follow`, lines as they come until the job ends, following the rank to its new pod
        across a gang restart (a line `--- trainop: ...` marks the change); without, what
        the current pod has logged so far."""
        current: str | None = None
        container = jobs.job_container(self._raw(name))
        while True:
            job = self._raw(name)
            pod = self._rank_pod(name, rank)
            uid = str(((pod or {}).get("metadata") or {}).get("uid") or "")
            ended = jobs.phase_of(job) in ("Succeeded", "Failed", "Invalid")
            if pod is not None and uid != current and jobs.log_ready(pod, container):
                pod_name = pod["metadata"]["name"]
                if current is not None:
                    yield f"--- trainop: rank {rank} is now pod {pod_name} (the gang was recreated) ---"
                current = uid
                yield from self._stream(pod_name, container, follow)
                if not follow:
                    return
                continue
            if not follow or ended:
                return
            time.sleep(self.poll_seconds)

"""The one place tests build trainop's objects: a fluent builder per object.

    job("bert").workers(2, 8).placement("rack").run_policy(restartPolicy="Never").build()
    queue("nlp").quota("h100", 16, H100).cohort("pool").state()
    workload("nlp/x", "nlp", 16).prio(10).running_on("h0", "h1").build()
    fabric_profile("roce").fabric("RoCE").selector(**{GFD_PRODUCT: H100}).model()
    runtime("pytorch").framework("pytorch", "2.4").role("Worker", gpus=8).env(X="1").build()
    node("n1").product(H100).rack("r1").build();  grid(blocks=1, racks=2, nodes=4)
    pod("bert-worker-0").on("a100-01").failed(137).build();  gpu_pod("p").gpus(8).bound("n1")

Unit and integration tests share this module. Every builder ends in `.build()`, a fresh deep
copy, so one builder can feed a whole table. A TrainingJob built for the unit tests carries
what the API server would have set (uid, generation, resourceVersion); `.manifest()` gives
the body a user would `kubectl apply` instead. The default job is the one
`examples/pytorch-ddp.yaml` describes: PyTorch 2.4 on CUDA 12.4, two Workers of 8 GPUs.
Times are relative to the fixed `NOW`; `ago(s)` is the ISO stamp `s` seconds before it.

Neighbours: tests/unit/manifest_helpers.py reads what the operator rendered;
tests/unit/queueing_harness.py runs admission over workloads built here.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from trainop.api import constants as c
from trainop.api.fabricprofile import FabricProfile
from trainop.cluster.fleet import load_fleet, node_manifests
from trainop.inventory import Snapshot, build_snapshot
from trainop.queueing import QueuedJob, QueueState
from trainop.reconcile import iso

NOW = datetime(2025, 6, 1, 12, 0, 0)
JOB = "bert"
NAMESPACE = "team-a"

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
V100 = "Tesla-V100-SXM2-32GB"
T4 = "Tesla-T4"


def ago(seconds: float) -> str:
    """The status timestamp `seconds` before NOW."""
    return iso(NOW - timedelta(seconds=seconds))


def uid_of(name: str) -> str:
    return f"uid-{name}"


# --- TrainingJob ---


class JobBuilder:
    """A TrainingJob body; spec fields are set with the API's camelCase names."""

    def __init__(self, name: str, namespace: str) -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": c.API_VERSION,
            "kind": "TrainingJob",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": uid_of(name),
                "generation": 1,
                "resourceVersion": "100",
            },
            "spec": {"framework": {"name": "pytorch"}, "replicaSpecs": {}},
        }

    @property
    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self._obj["spec"]
        return spec

    @property
    def metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = self._obj["metadata"]
        return meta

    # --- spec ---
    def framework(self, name: str, version: str | None = None) -> JobBuilder:
        self.spec["framework"] = {"name": name, **({"version": version} if version else {})}
        return self

    def cuda(self, cuda: str | None) -> JobBuilder:
        """spec.cuda (None removes it: the job takes the framework's default)."""
        if cuda is None:
            self.spec.pop("cuda", None)
        else:
            self.spec["cuda"] = cuda
        return self

    def role(
        self, role: str, replicas: int, gpus: int = 0, template: Mapping[str, Any] | None = None
    ) -> JobBuilder:
        rs: dict[str, Any] = {"replicas": replicas, "gpus": gpus}
        if template is not None:
            rs["template"] = copy.deepcopy(dict(template))
        self.spec["replicaSpecs"][role] = rs
        return self

    def workers(
        self, replicas: int = 2, gpus: int = 8, template: Mapping[str, Any] | None = None
    ) -> JobBuilder:
        return self.role("Worker", replicas, gpus, template)

    def elastic(self, lo: int, hi: int) -> JobBuilder:
        """spec.elastic {minReplicas: lo, maxReplicas: hi}; Worker replicas set to hi."""
        self.spec["elastic"] = {"minReplicas": lo, "maxReplicas": hi}
        self.spec["replicaSpecs"].setdefault("Worker", {"replicas": hi, "gpus": 8})
        self.spec["replicaSpecs"]["Worker"]["replicas"] = hi
        return self

    def no_roles(self) -> JobBuilder:
        self.spec["replicaSpecs"] = {}
        return self

    def template(self, role: str = "Worker", **pod_spec: Any) -> JobBuilder:
        """Merge these fields into the role's pod template spec (a trainer container added)."""
        tpl = self.spec["replicaSpecs"][role].setdefault("template", {})
        spec = tpl.setdefault("spec", {"containers": [{"name": "trainer"}]})
        spec.update(copy.deepcopy(pod_spec))
        return self

    def checkpoint(
        self,
        volume: str = "checkpoints",
        mount: str = "/checkpoints",
        path: str = "",
        roles: tuple[str, ...] = ("Worker",),
        **fields: Any,
    ) -> JobBuilder:
        """spec.checkpoint naming `volume` (an emptyDir in each of `roles`' templates,
        mounted at `mount` in each container) and `path` under it; `fields` add the rest
        (gracePeriodSeconds, signal, ranks)."""
        self.spec["checkpoint"] = {"volume": volume, **({"path": path} if path else {}), **fields}
        for role in roles:
            tpl = self.spec["replicaSpecs"][role].setdefault("template", {})
            spec = tpl.setdefault("spec", {"containers": [{"name": "trainer"}]})
            spec.setdefault("volumes", []).append({"name": volume, "emptyDir": {}})
            for ctr in spec.get("containers") or []:
                ctr.setdefault("volumeMounts", []).append({"name": volume, "mountPath": mount})
        return self

    def pod_annotations(self, role: str = "Worker", **annotations: str) -> JobBuilder:
        """Annotations on the role's pods (e.g. the fake-kubelet's trainop.dev/fake-*)."""
        tpl = self.spec["replicaSpecs"][role].setdefault("template", {})
        tpl.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
        return self

    def fake_run(
        self, duration: str = "3s", exit_code: int = 0, role: str = "Worker"
    ) -> JobBuilder:
        """On the fake fleet, the role's pods run `duration` and exit with `exit_code`."""
        return self.pod_annotations(
            role,
            **{
                c.ANNOTATION_FAKE_EXIT_CODE: str(exit_code),
                c.ANNOTATION_FAKE_RUN_DURATION: duration,
            },
        )

    def placement(
        self, topology: str | None = None, mode: str | None = None, products: Sequence[str] = ()
    ) -> JobBuilder:
        """spec.placement; fields left None are left out (the API's defaults apply)."""
        placement = self.spec.setdefault("placement", {})
        if topology is not None:
            placement["topology"] = topology
            placement.setdefault("mode", "Required")
        if mode is not None:
            placement["mode"] = mode
        if products:
            placement["gpuProducts"] = list(products)
        return self

    def products(self, *products: str) -> JobBuilder:
        return self.placement(products=products)

    def run_policy(self, **fields: Any) -> JobBuilder:
        """run_policy(restartPolicy="ExitCode", backoffLimit=2): merged into spec.runPolicy."""
        self.spec.setdefault("runPolicy", {}).update(copy.deepcopy(fields))
        return self

    def suspend(self, flag: bool = True) -> JobBuilder:
        return self.run_policy(suspend=flag)

    def queue(self, name: str) -> JobBuilder:
        return self.set("queue", name)

    def runtime_ref(self, name: str, kind: str = "ClusterTrainingRuntime") -> JobBuilder:
        """spec.runtimeRef {kind, name}."""
        return self.set("runtimeRef", {"kind": kind, "name": name})

    def unset(self, *keys: str) -> JobBuilder:
        """Remove spec fields (e.g. unset("framework") for a job that takes it from its
        runtime)."""
        for key in keys:
            self.spec.pop(key, None)
        return self

    def priority(self, priority_class: str) -> JobBuilder:
        return self.set("priorityClassName", priority_class)

    def set(self, key: str, value: Any) -> JobBuilder:
        self.spec[key] = copy.deepcopy(value)
        return self

    # --- metadata ---
    def annotate(self, **annotations: str) -> JobBuilder:
        self.metadata.setdefault("annotations", {}).update(annotations)
        return self

    def generation(self, generation: int) -> JobBuilder:
        self.metadata["generation"] = generation
        return self

    def meta(self, **fields: Any) -> JobBuilder:
        """Other metadata fields, e.g. meta(uid="u", creationTimestamp="...")."""
        self.metadata.update(copy.deepcopy(fields))
        return self

    # --- status ---
    @property
    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = self._obj.setdefault("status", {})
        return status

    def with_status(self, status: Mapping[str, Any] | None = None, **fields: Any) -> JobBuilder:
        """Replace the status with `status` (e.g. a previous reconcile's), then set `fields`."""
        if status is not None:
            self._obj["status"] = copy.deepcopy(dict(status))
        self.status.update(copy.deepcopy(fields))
        return self

    def condition(
        self, ctype: str, status: bool, reason: str = "", message: str = "", since: float = 600
    ) -> JobBuilder:
        """Upsert a condition whose last transition was `since` seconds before NOW."""
        conds = self.status.setdefault("conditions", [])
        conds[:] = [x for x in conds if x.get("type") != ctype]
        conds.append(
            {
                "type": ctype,
                "status": "True" if status else "False",
                "reason": reason,
                "message": message,
                "lastTransitionTime": ago(since),
                "observedGeneration": self.metadata["generation"],
            }
        )
        return self

    def phase(
        self, phase: str, reason: str = "", message: str = "", since: float = 600
    ) -> JobBuilder:
        """status.phase plus its True condition, the previous phase's condition turned False,
        as reconcile would have left them (Created stays as it is)."""
        for cond in self.status.get("conditions") or []:
            if cond["type"] not in ("Created", phase) and cond["status"] == "True":
                cond.update(
                    status="False", reason=reason, message="", lastTransitionTime=ago(since)
                )
        self.status["phase"] = phase
        if phase not in ("Queued", "Invalid", "Suspended"):
            self.condition("Created", True, "PodsCreated", "", since)
        return self.condition(phase, True, reason, message, since)

    # --- out ---
    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)

    def manifest(self) -> dict[str, Any]:
        """The body as a user writes it: no server-set metadata, no status."""
        body = self.build()
        body.pop("status", None)
        for key in ("uid", "generation", "resourceVersion"):
            body["metadata"].pop(key, None)
        return body


def job(
    name: str = JOB,
    framework: str = "pytorch",
    version: str | None = "2.4",
    cuda: str | None = "12.4",
    *,
    namespace: str = NAMESPACE,
    workers: int | None = 2,
    gpus: int = 8,
) -> JobBuilder:
    """The default job; `workers=None` leaves replicaSpecs empty for other role layouts,
    `version=None` / `cuda=None` leave those fields to the API's defaults."""
    b = JobBuilder(name, namespace).framework(framework, version).cuda(cuda)
    if workers is not None:
        b.workers(workers, gpus)
    return b


# --- TrainingQueue ---


class QueueBuilder:
    """A cluster-scoped TrainingQueue; `.state()` is admission's view of it, read by the
    same function the operator uses (QueueState.from_resource)."""

    def __init__(self, name: str) -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": c.API_VERSION,
            "kind": "TrainingQueue",
            "metadata": {"name": name},
            "spec": {},
        }

    @property
    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self._obj["spec"]
        return spec

    def quota(
        self, group: str, gpus: int, *products: str, limit: int | None = None
    ) -> QueueBuilder:
        entry: dict[str, Any] = {"name": group, "gpus": gpus, "products": list(products)}
        if limit is not None:
            entry["borrowingLimit"] = limit
        self.spec.setdefault("quotas", []).append(entry)
        return self

    def cohort(self, name: str) -> QueueBuilder:
        return self.set("cohort", name)

    def parent(self, name: str) -> QueueBuilder:
        """Nest this queue under TrainingQueue `name` (spec.parent)."""
        return self.set("parent", name)

    def weight(self, weight: float) -> QueueBuilder:
        return self.set("weight", weight)

    def backfill(self, seconds: int) -> QueueBuilder:
        return self.set("backfillWaitSeconds", seconds)

    def half_life(self, seconds: int) -> QueueBuilder:
        """Fair share over time: spec.fairSharing.usageHalfLifeSeconds."""
        return self.set("fairSharing", {"usageHalfLifeSeconds": seconds})

    def used_recently(self, updated: str, holding: int = 0, **average_gpus: float) -> QueueBuilder:
        """status.fairSharing as the operator left it: `updated` (e.g.
        "2026-01-01T00:00:00Z"), each group's decayed average of GPUs used and the GPUs it
        held since (`holding`, the same for every group named)."""
        half_life = (self.spec.get("fairSharing") or {}).get("usageHalfLifeSeconds", 0)
        self._obj.setdefault("status", {})["fairSharing"] = {
            "usageHalfLifeSeconds": half_life,
            "updated": updated,
            "usage": [
                {"name": k, "averageGpus": v, "holding": holding} for k, v in average_gpus.items()
            ],
        }
        return self

    def preemption(self, **fields: Any) -> QueueBuilder:
        """preemption(withinQueue="Never", reclaimWithinCohort=False)"""
        self.spec.setdefault("preemption", {}).update(fields)
        return self

    def policy(self, **fields: Any) -> QueueBuilder:
        """policy(maxRunningJobs=1, allowedFrameworks=["pytorch"])"""
        self.spec.setdefault("policy", {}).update(copy.deepcopy(fields))
        return self

    def serves(self, *namespaces: str, default: bool = False) -> QueueBuilder:
        self.spec["namespaces"] = list(namespaces)
        if default:
            self.spec["default"] = True
        return self

    def selector(self, **match_labels: str) -> QueueBuilder:
        return self.set("namespaceSelector", {"matchLabels": match_labels})

    def default(self) -> QueueBuilder:
        return self.set("default", True)

    def set(self, key: str, value: Any) -> QueueBuilder:
        self.spec[key] = copy.deepcopy(value)
        return self

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)

    def state(self) -> QueueState:
        return QueueState.from_resource(self._obj)


def queue(name: str) -> QueueBuilder:
    return QueueBuilder(name)


# --- a TrainingJob as admission queues it ---


class WorkloadBuilder:
    """workload("nlp/x", "nlp", 16).prio(10).created(5).running_on("h0", "h1").build()"""

    def __init__(self, key: str, queue: str, gpus: int) -> None:
        self._job = QueuedJob(key=key, queue=queue, gpus=gpus, created=0.0)

    def set(self, **fields: Any) -> WorkloadBuilder:
        self._job = replace(self._job, **fields)
        return self

    def prio(self, value: int) -> WorkloadBuilder:
        return self.set(priority=value)

    def created(self, t: float) -> WorkloadBuilder:
        return self.set(created=t)

    def products(self, *products: str) -> WorkloadBuilder:
        return self.set(products=tuple(products))

    def running_on(
        self, *node_names: str, started: float = 0.0, product: str = H100
    ) -> WorkloadBuilder:
        """Admitted, its GPUs spread evenly over these nodes."""
        per = self._job.gpus // len(node_names)
        return self.set(
            admitted=True,
            product=product,
            nodes=tuple((n, per) for n in node_names),
            started=started,
        )

    def elastic(self, lo: int, hi: int, per: int = 8) -> WorkloadBuilder:
        """An elastic job of lo..hi Workers of `per` GPUs (pending: asks for hi)."""
        return self.set(elastic=(lo, hi), replica_gpus=per, gpus=per * hi)

    def running_workers(self, *node_names: str, started: float = 0.0) -> WorkloadBuilder:
        """An elastic job admitted with one Worker per named node, in index order."""
        per = self._job.replica_gpus
        held: dict[str, int] = {}
        for n in node_names:
            held[n] = held.get(n, 0) + per
        return self.set(
            admitted=True,
            product=H100,
            size=len(node_names),
            workers=tuple((n, per) for n in node_names),
            nodes=tuple(sorted(held.items())),
            gpus=per * len(node_names),
            started=started,
        )

    def build(self) -> QueuedJob:
        return self._job


def workload(key: str, queue: str, gpus: int) -> WorkloadBuilder:
    return WorkloadBuilder(key, queue, gpus)


# --- FabricProfile ---


class FabricProfileBuilder:
    """A cluster-scoped FabricProfile; `.model()` is the validated API model."""

    def __init__(self, name: str) -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": c.API_VERSION,
            "kind": "FabricProfile",
            "metadata": {"name": name},
            "spec": {"nodeSelector": {}, "fabric": "InfiniBand"},
        }

    @property
    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self._obj["spec"]
        return spec

    def fabric(self, fabric: str) -> FabricProfileBuilder:
        return self.set("fabric", fabric)

    def selector(self, **labels: str) -> FabricProfileBuilder:
        return self.set("nodeSelector", labels)

    def bandwidth(self, **gbps: float) -> FabricProfileBuilder:
        return self.set("bandwidth", gbps)

    def priority(self, priority: int) -> FabricProfileBuilder:
        return self.set("priority", priority)

    def set(self, key: str, value: Any) -> FabricProfileBuilder:
        self.spec[key] = copy.deepcopy(value)
        return self

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)

    def model(self) -> FabricProfile:
        return FabricProfile.model_validate(
            {"name": self._obj["metadata"]["name"], "spec": self.spec}
        )


def fabric_profile(name: str) -> FabricProfileBuilder:
    return FabricProfileBuilder(name)


# --- ClusterTrainingRuntime / TrainingRuntime ---


class RuntimeBuilder:
    """A ClusterTrainingRuntime (or, with `namespace`, a TrainingRuntime); spec fields are
    set with the API's camelCase names, like JobBuilder's."""

    def __init__(self, name: str, namespace: str | None = None) -> None:
        meta: dict[str, Any] = {"name": name, "generation": 1}
        if namespace is not None:
            meta["namespace"] = namespace
        self._obj: dict[str, Any] = {
            "apiVersion": c.API_VERSION,
            "kind": "TrainingRuntime" if namespace is not None else "ClusterTrainingRuntime",
            "metadata": meta,
            "spec": {},
        }

    @property
    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self._obj["spec"]
        return spec

    def framework(self, name: str, version: str | None = None) -> RuntimeBuilder:
        return self.set("framework", {"name": name, **({"version": version} if version else {})})

    def role(
        self,
        role: str = "Worker",
        replicas: int | None = None,
        gpus: int | None = None,
        template: Mapping[str, Any] | None = None,
    ) -> RuntimeBuilder:
        rs = self.spec.setdefault("replicaSpecs", {}).setdefault(role, {})
        if replicas is not None:
            rs["replicas"] = replicas
        if gpus is not None:
            rs["gpus"] = gpus
        if template is not None:
            rs["template"] = copy.deepcopy(dict(template))
        return self

    def pod(self, role: str = "Worker", **pod_spec: Any) -> RuntimeBuilder:
        """Merge these fields into the role's template spec (a `trainer` container added)."""
        rs = self.spec.setdefault("replicaSpecs", {}).setdefault(role, {})
        spec = rs.setdefault("template", {}).setdefault(
            "spec", {"containers": [{"name": "trainer"}]}
        )
        spec.update(copy.deepcopy(pod_spec))
        return self

    def trainer(self, role: str = "Worker", **container: Any) -> RuntimeBuilder:
        """Merge these fields into the role's `trainer` container."""
        self.pod(role)
        spec = self.spec["replicaSpecs"][role]["template"]["spec"]
        spec["containers"][0].update(copy.deepcopy(container))
        return self

    def env(self, role: str = "Worker", **env: str) -> RuntimeBuilder:
        """Env vars on the role's trainer container."""
        self.pod(role)
        main = self.spec["replicaSpecs"][role]["template"]["spec"]["containers"][0]
        main.setdefault("env", []).extend({"name": k, "value": v} for k, v in env.items())
        return self

    def lock(self, *fields: str) -> RuntimeBuilder:
        return self.set("lockedFields", list(fields))

    def generation(self, generation: int) -> RuntimeBuilder:
        self._obj["metadata"]["generation"] = generation
        return self

    def set(self, key: str, value: Any) -> RuntimeBuilder:
        self.spec[key] = copy.deepcopy(value)
        return self

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)

    def manifest(self) -> dict[str, Any]:
        """The body as a platform team applies it: no generation."""
        body = self.build()
        body["metadata"].pop("generation", None)
        return body


def runtime(name: str = "pytorch", namespace: str | None = None) -> RuntimeBuilder:
    return RuntimeBuilder(name, namespace)


# --- Node ---


class NodeBuilder:
    """node("n1").gpus(8).rack("r1").block("b1").build() -> a Ready H100 node dict."""

    def __init__(self, name: str) -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {c.LABEL_HOSTNAME: name, c.GFD_PRODUCT: H100}},
            "spec": {},
            "status": {
                "allocatable": {"cpu": "96", "memory": "1Ti", c.RESOURCE_GPU: "8"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                "images": [],
            },
        }

    def label(self, key: str, value: str | None) -> NodeBuilder:
        labels = self._obj["metadata"]["labels"]
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
        return self

    def labels(self, labels: Mapping[str, str]) -> NodeBuilder:
        self._obj["metadata"]["labels"].update(labels)
        return self

    def gpus(self, count: int | str | None) -> NodeBuilder:
        """Allocatable nvidia.com/gpu; None drops it and the product label (a CPU node)."""
        alloc = self._obj["status"]["allocatable"]
        if count is None:
            alloc.pop(c.RESOURCE_GPU, None)
            self._obj["metadata"]["labels"].pop(c.GFD_PRODUCT, None)
        else:
            alloc[c.RESOURCE_GPU] = count if isinstance(count, str) else str(count)
        return self

    def product(self, product: str | None) -> NodeBuilder:
        return self.label(c.GFD_PRODUCT, product)

    def driver(self, version: str) -> NodeBuilder:
        return self.label(c.GFD_DRIVER_FULL, version)

    def gfd(self, product: str, driver: str, compute: tuple[str, str]) -> NodeBuilder:
        """The GPU feature discovery labels of a node with this GPU and driver."""
        return self.labels(
            {
                c.GFD_PRODUCT: product,
                c.GFD_COMPUTE_MAJOR: compute[0],
                c.GFD_COMPUTE_MINOR: compute[1],
                c.GFD_DRIVER_MAJOR: driver.split(".")[0],
                c.GFD_DRIVER_FULL: driver,
            }
        )

    def rack(self, rack: str | None) -> NodeBuilder:
        return self.label(c.LABEL_RACK, rack)

    def block(self, block: str | None) -> NodeBuilder:
        return self.label(c.LABEL_BLOCK, block)

    def clique(self, clique: str | None) -> NodeBuilder:
        return self.label(c.LABEL_GPU_CLIQUE, clique)

    def allocatable(self, resource: str, amount: Any) -> NodeBuilder:
        self._obj["status"]["allocatable"][resource] = amount
        return self

    def ready(self, status: str = "True", reason: str = "KubeletReady") -> NodeBuilder:
        self._obj["status"]["conditions"] = [{"type": "Ready", "status": status, "reason": reason}]
        return self

    def not_ready(self) -> NodeBuilder:
        return self.ready("False", "KubeletNotReady")

    def no_conditions(self) -> NodeBuilder:
        self._obj["status"].pop("conditions", None)
        return self

    def cordoned(self) -> NodeBuilder:
        self._obj["spec"]["unschedulable"] = True
        return self

    def taint(self, key: str, effect: str = "NoSchedule", value: str = "") -> NodeBuilder:
        taint = {"key": key, "effect": effect}
        if value:
            taint["value"] = value
        self._obj["spec"].setdefault("taints", []).append(taint)
        return self

    def image(self, *names: str) -> NodeBuilder:
        self._obj["status"]["images"].append({"names": list(names), "sizeBytes": 1 << 30})
        return self

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)


def node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def grid(
    blocks: int = 1,
    racks: int = 1,
    nodes: int = 4,
    *,
    gpus: int = 8,
    product: str = H100,
    prefix: str = "n",
    cliques: bool = False,
) -> list[dict[str, Any]]:
    """blocks x racks x nodes identical nodes named n-b{i}-r{j}-{k}; racks r{i}-{j}, blocks b{i}."""
    out = []
    for b in range(blocks):
        for r in range(racks):
            for n in range(nodes):
                builder = (
                    node(f"{prefix}-b{b}-r{r}-{n}")
                    .gpus(gpus)
                    .product(product)
                    .block(f"b{b}")
                    .rack(f"r{b}-{r}")
                )
                if cliques:
                    builder.clique(f"uuid-b{b}-r{r}.{n // 2}")
                out.append(builder.build())
    return out


def small_fleet(h100: int = 4, a100: int = 0, gpus: int = 8) -> list[dict[str, Any]]:
    """h100 nodes h0..h{n-1} and a100 nodes a0..; one rack per product, one block."""
    out = [
        node(f"h{i}").gpus(gpus).product(H100).rack("rh").block("b").build() for i in range(h100)
    ]
    out += [
        node(f"a{i}").gpus(gpus).product(A100).rack("ra").block("b").build() for i in range(a100)
    ]
    return out


@cache
def _fleet_nodes() -> tuple[dict[str, Any], ...]:
    return tuple(node_manifests(load_fleet()))


def fleet_nodes() -> list[dict[str, Any]]:
    """The default fake fleet's Node dicts (fresh copies)."""
    return copy.deepcopy(list(_fleet_nodes()))


def fleet_node_names() -> list[str]:
    return [n["metadata"]["name"] for n in _fleet_nodes()]


def node_product(node_name: str) -> str:
    for n in _fleet_nodes():
        if n["metadata"]["name"] == node_name:
            product: str = n["metadata"]["labels"][c.GFD_PRODUCT]
            return product
    raise KeyError(node_name)


@cache
def _empty_fleet() -> Snapshot:
    return build_snapshot(fleet_nodes(), [])


def fleet_snapshot(pods: Sequence[Mapping[str, Any]] = ()) -> Snapshot:
    """The default fake fleet with these pods (none: empty, what a new job is planned against)."""
    return build_snapshot(fleet_nodes(), pods) if pods else _empty_fleet()


def snap(
    nodes: Sequence[Mapping[str, Any]],
    used: Mapping[str, int] | None = None,
    pods: Iterable[Mapping[str, Any]] = (),
) -> Snapshot:
    """Snapshot of `nodes` with `used` GPUs taken by Running pods (node -> GPUs)."""
    all_pods = list(pods) + [busy(n, g) for n, g in (used or {}).items() if g]
    return build_snapshot(nodes, all_pods)


# --- Pod ---


class PodBuilder:
    """A pod dict. `pod(name)` is one of a job's pods, named `<job>-<role>-<index>` (labels,
    rank and owner follow from the name; Pending); `gpu_pod(name)` is another workload's
    pod (Running, no owner), for capacity."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self._obj = obj

    @classmethod
    def of_job(cls, name: str, namespace: str = NAMESPACE) -> PodBuilder:
        job_name, role, index = name.rsplit("-", 2)
        builder = cls(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": f"uid-{name}",
                    "labels": {
                        c.LABEL_JOB_NAME: job_name,
                        c.LABEL_MANAGED_BY: c.MANAGED_BY,
                        c.LABEL_REPLICA_TYPE: role,
                        c.LABEL_REPLICA_INDEX: index,
                    },
                    # No gang generation unless a test sets one (.generation(n)): such pods
                    # count as the current gang, whatever the job's restartCount.
                    "annotations": {},
                    "ownerReferences": [
                        {
                            "apiVersion": c.API_VERSION,
                            "kind": "TrainingJob",
                            "name": job_name,
                            "uid": uid_of(job_name),
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {"containers": [{"name": "trainer"}], "restartPolicy": "Never"},
                "status": {"phase": "Pending"},
            }
        )
        if role == "worker":
            builder.rank(int(index))
        return builder

    @classmethod
    def other(cls, name: str, namespace: str = "default") -> PodBuilder:
        return cls(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "labels": {}},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]},
                "status": {"phase": "Running"},
            }
        )

    @classmethod
    def wrap(cls, obj: Mapping[str, Any]) -> PodBuilder:
        """Continue from an existing pod dict (e.g. one reconcile planned); copies it."""
        builder = cls(copy.deepcopy(dict(obj)))
        builder._obj.setdefault("status", {"phase": "Pending"})
        return builder

    @property
    def name(self) -> str:
        name: str = self._obj["metadata"]["name"]
        return name

    # --- metadata ---
    def rank(self, rank: int | None) -> PodBuilder:
        """The trainop.dev/rank annotation (None removes it: an unranked role)."""
        ann = self._obj["metadata"].setdefault("annotations", {})
        if rank is None:
            ann.pop(c.ANNOTATION_RANK, None)
        else:
            ann[c.ANNOTATION_RANK] = str(rank)
        return self

    def generation(self, gang_generation: int) -> PodBuilder:
        """The gang generation (trainop.dev/restart-count) the pod was created for."""
        self._obj["metadata"]["annotations"][c.ANNOTATION_RESTART_COUNT] = str(gang_generation)
        return self

    def label(self, key: str, value: str) -> PodBuilder:
        self._obj["metadata"].setdefault("labels", {})[key] = value
        return self

    def deleting(self) -> PodBuilder:
        self._obj["metadata"]["deletionTimestamp"] = ago(1)
        return self

    # --- resources ---
    def gpus(self, count: Any, *, part: str = "limits", container: int = 0) -> PodBuilder:
        containers = self._obj["spec"]["containers"]
        while len(containers) <= container:
            containers.append({"name": f"c{len(containers)}", "image": "busybox"})
        resources = containers[container].setdefault("resources", {})
        resources.setdefault(part, {})[c.RESOURCE_GPU] = count
        return self

    def init(self, gpus: Any, *, sidecar: bool = False) -> PodBuilder:
        init: dict[str, Any] = {
            "name": f"init{len(self._obj['spec'].get('initContainers', []))}",
            "image": "busybox",
            "resources": {"limits": {c.RESOURCE_GPU: gpus}},
        }
        if sidecar:
            init["restartPolicy"] = "Always"
        self._obj["spec"].setdefault("initContainers", []).append(init)
        return self

    def overhead(self, gpus: Any) -> PodBuilder:
        self._obj["spec"]["overhead"] = {c.RESOURCE_GPU: gpus}
        return self

    # --- where ---
    def _pin(self, hostnames: Sequence[str], terms: int) -> PodBuilder:
        expr = {"key": c.LABEL_HOSTNAME, "operator": "In", "values": list(hostnames)}
        self._obj["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [copy.deepcopy(expr)]} for _ in range(terms)
                    ]
                }
            }
        }
        return self

    def on(self, node_name: str) -> PodBuilder:
        """Pinned to `node_name` by required node affinity on kubernetes.io/hostname, as
        trainop plans its pods (the kube-scheduler binds it there)."""
        return self._pin([node_name], 1)

    def pinned(self, *hostnames: str, terms: int = 1) -> PodBuilder:
        """Created, not yet released: gated and Pending, required affinity on hostname In
        `hostnames` (the expression repeated in `terms` OR-ed terms)."""
        self._pin(hostnames, terms).gated()
        self._obj["status"] = {"phase": "Pending"}
        return self

    def bound(self, node_name: str) -> PodBuilder:
        """spec.nodeName: bound to the node."""
        self._obj["spec"]["nodeName"] = node_name
        return self

    def node_selector(self, hostname: str) -> PodBuilder:
        self._obj["spec"]["nodeSelector"] = {c.LABEL_HOSTNAME: hostname}
        self._obj["status"] = {"phase": "Pending"}
        return self

    def gate(self, name: str) -> PodBuilder:
        gates = self._obj["spec"].setdefault("schedulingGates", [])
        if not any(g["name"] == name for g in gates):
            gates.append({"name": name})
        return self

    def gated(self) -> PodBuilder:
        """Held behind trainop's scheduling gate (created, not yet released)."""
        return self.gate(c.SCHEDULING_GATE)

    # --- status ---
    def phase(self, phase: str) -> PodBuilder:
        """Only status.phase (see running() and friends for a kubelet-like status)."""
        self._obj["status"]["phase"] = phase
        return self

    def _state(self, phase: str, state: dict[str, Any] | None) -> PodBuilder:
        self._obj["spec"].pop("schedulingGates", None)
        status: dict[str, Any] = {"phase": phase}
        if state is not None:
            status["containerStatuses"] = [{"name": "trainer", "state": state}]
        self._obj["status"] = status
        return self

    def pending(self) -> PodBuilder:
        """Released and unscheduled (or starting): no gate, phase Pending."""
        return self._state("Pending", None)

    def running(self) -> PodBuilder:
        return self._state("Running", {"running": {"startedAt": ago(300)}})

    def succeeded(self) -> PodBuilder:
        return self._state("Succeeded", {"terminated": {"exitCode": 0, "reason": "Completed"}})

    def failed(self, code: int | None = 1) -> PodBuilder:
        """Phase Failed; `code` None means no container ever terminated (e.g. evicted)."""
        if code is None:
            return self._state("Failed", None)
        return self._state("Failed", {"terminated": {"exitCode": code, "reason": "Error"}})

    def terminated(self, code: int, reason: str = "Error", message: str = "") -> PodBuilder:
        """Phase Failed with this exit code, container reason and termination message."""
        term: dict[str, Any] = {"exitCode": code, "reason": reason}
        if message:
            term["message"] = message
        return self._state("Failed", {"terminated": term})

    def oom_killed(self) -> PodBuilder:
        return self.terminated(137, "OOMKilled")

    def evicted(self, message: str = "The node was low on resource: memory.") -> PodBuilder:
        """Failed by the kubelet's node-pressure eviction: pod reason Evicted, no exit code."""
        self._state("Failed", None)
        self._obj["status"].update(reason="Evicted", message=message)
        return self

    def node_lost(self) -> PodBuilder:
        """Failed because its node went away (the DisruptionTarget condition says so)."""
        self._state("Failed", None)
        self._obj["status"]["conditions"] = [
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "DeletionByPodGC",
                "message": "PodGC: node no longer exists",
            }
        ]
        return self

    def image_pull(
        self, reason: str = "ImagePullBackOff", image: str = "nvcr.io/x:1"
    ) -> PodBuilder:
        """Pending, its container waiting on an image it cannot pull."""
        waiting = {"reason": reason, "message": f'Back-off pulling image "{image}"'}
        self._state("Pending", {"waiting": waiting})
        self._obj["status"]["containerStatuses"][0]["image"] = image
        return self

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)


def pod(name: str, namespace: str = NAMESPACE) -> PodBuilder:
    """One of a job's pods, `<job>-<role>-<index>`."""
    return PodBuilder.of_job(name, namespace)


def gpu_pod(name: str, namespace: str = "default") -> PodBuilder:
    """Another workload's Running pod."""
    return PodBuilder.other(name, namespace)


def busy(node_name: str, gpus: int, name: str | None = None) -> dict[str, Any]:
    """A Running pod holding `gpus` GPUs on `node_name`."""
    return gpu_pod(name or f"busy-{node_name}-{gpus}").gpus(gpus).bound(node_name).build()


def build_all(builders: Iterable[PodBuilder]) -> list[dict[str, Any]]:
    return [b.build() for b in builders]


# --- Kueue (externalQueue: kueue; kueue.x-k8s.io/v1beta2) ---


class KueueBuilder:
    """One of Kueue's own objects, as the Kueue tests apply them:

    kueue("ResourceFlavor", "h100").set(nodeLabels={GFD_PRODUCT: H100}).build()
    kueue("ClusterQueue", "cq").gpu_quota("h100", 16).preempt_lower().build()
    kueue("LocalQueue", "lq", namespace="team-a").set(clusterQueue="cq").build()
    kueue("WorkloadPriorityClass", "high").value(1000).build()
    """

    def __init__(self, kind: str, name: str, namespace: str | None = None) -> None:
        meta: dict[str, Any] = {"name": name}
        if namespace:
            meta["namespace"] = namespace
        self._obj: dict[str, Any] = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": kind,
            "metadata": meta,
        }
        if kind != "WorkloadPriorityClass":
            self._obj["spec"] = {}

    def set(self, **fields: Any) -> KueueBuilder:
        self._obj["spec"].update(copy.deepcopy(fields))
        return self

    def value(self, value: int) -> KueueBuilder:
        """A WorkloadPriorityClass's value."""
        self._obj["value"] = value
        return self

    def gpu_quota(self, flavor: str, gpus: int, *, cpu: str = "1000") -> KueueBuilder:
        """A ClusterQueue resource group covering cpu and nvidia.com/gpu with one flavor
        (namespaces: all)."""
        spec = self._obj["spec"]
        spec.setdefault("namespaceSelector", {})
        group = spec.setdefault(
            "resourceGroups", [{"coveredResources": ["cpu", "nvidia.com/gpu"], "flavors": []}]
        )[0]
        group["flavors"].append(
            {
                "name": flavor,
                "resources": [
                    {"name": "cpu", "nominalQuota": cpu},
                    {"name": "nvidia.com/gpu", "nominalQuota": gpus},
                ],
            }
        )
        return self

    def preempt_lower(self) -> KueueBuilder:
        """ClusterQueue preemption: lower-priority Workloads of the same queue may go."""
        return self.set(preemption={"withinClusterQueue": "LowerPriority"})

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)


def kueue(kind: str, name: str, namespace: str | None = None) -> KueueBuilder:
    return KueueBuilder(kind, name, namespace)


class KueueWorkloadBuilder:
    """A Workload trainop created for a job, with the status Kueue would have written:

    kueue_workload(wl).quota_reserved("cq", worker="h100").admitted().build()
    kueue_workload(wl).pending("Pending", "insufficient quota").build()
    kueue_workload(wl).evicted("Preempted", "Preempted to accommodate a workload").build()
    """

    def __init__(self, wl: Mapping[str, Any]) -> None:
        self._obj: dict[str, Any] = copy.deepcopy(dict(wl))
        self._obj["metadata"].setdefault("resourceVersion", "7")
        self._obj["metadata"].setdefault("generation", 1)
        self._obj.setdefault("status", {"conditions": []})

    def _cond(self, ctype: str, status: bool, reason: str, message: str = "") -> None:
        conds = self._obj["status"].setdefault("conditions", [])
        conds[:] = [x for x in conds if x["type"] != ctype]
        conds.append(
            {
                "type": ctype,
                "status": "True" if status else "False",
                "reason": reason,
                "message": message,
                "lastTransitionTime": ago(60),
                "observedGeneration": 1,
            }
        )

    def quota_reserved(self, cluster_queue: str, **flavor_of_podset: str) -> KueueWorkloadBuilder:
        """status.admission: each named PodSet gets its flavor for nvidia.com/gpu."""
        self._obj["status"]["admission"] = {
            "clusterQueue": cluster_queue,
            "podSetAssignments": [
                {"name": ps, "flavors": {"nvidia.com/gpu": fl}}
                for ps, fl in flavor_of_podset.items()
            ],
        }
        self._cond("QuotaReserved", True, "QuotaReserved", f"Quota reserved in {cluster_queue}")
        self._cond("Evicted", False, "QuotaReserved", "Previously: evicted")
        return self

    def admitted(self) -> KueueWorkloadBuilder:
        self._cond("Admitted", True, "Admitted", "The workload is admitted")
        return self

    def pending(self, reason: str, message: str) -> KueueWorkloadBuilder:
        self._obj["status"].pop("admission", None)
        self._cond("QuotaReserved", False, reason, message)
        return self

    def evicted(self, reason: str, message: str) -> KueueWorkloadBuilder:
        self._cond("Evicted", True, reason, message)
        return self

    def finished(self) -> KueueWorkloadBuilder:
        self._cond("Finished", True, "Succeeded", "done")
        return self

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)


def kueue_workload(wl: Mapping[str, Any]) -> KueueWorkloadBuilder:
    return KueueWorkloadBuilder(wl)

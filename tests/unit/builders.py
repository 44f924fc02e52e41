"""Fluent builders of TrainingJob bodies and their pods, as the operator's indexes hold them.

    job().run_policy(restartPolicy="Never").phase("Running", "AllPodsRunning", "2 pods running")
    pod("bert-worker-0").on("a100-01").failed(137)

Both build plain dicts (`.build()`, a fresh deep copy each time), so one builder can feed a
whole table. Times are relative to the fixed `NOW`; `ago(s)` gives the ISO stamp `s` seconds
before it. The default job is the one `examples/pytorch-ddp.yaml` describes: PyTorch 2.4 on
CUDA 12.4, two Workers of 8 GPUs, which lands on a100-01/a100-02 of the default fleet.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from trainop.api import constants as c
from trainop.cluster.fleet import load_fleet, node_manifests
from trainop.inventory import Snapshot, build_snapshot
from trainop.reconcile import iso

NOW = datetime(2025, 6, 1, 12, 0, 0)
JOB = "bert"
NAMESPACE = "team-a"


def ago(seconds: float) -> str:
    """The status timestamp `seconds` before NOW."""
    return iso(NOW - timedelta(seconds=seconds))


def uid_of(job_name: str) -> str:
    return f"uid-{job_name}"


@cache
def _fleet_nodes() -> tuple[dict[str, Any], ...]:
    return tuple(node_manifests(load_fleet()))


@cache
def fleet_snapshot() -> Snapshot:
    """The default fake fleet, empty (no pods): what a new job is planned against."""
    return build_snapshot(copy.deepcopy(list(_fleet_nodes())), [])


def fleet_node_names() -> list[str]:
    return [n["metadata"]["name"] for n in _fleet_nodes()]


class JobBuilder:
    """A TrainingJob body; spec fields are set with the API's camelCase names."""

    def __init__(
        self,
        name: str = JOB,
        framework: str = "pytorch",
        version: str | None = "2.4",
        cuda: str | None = "12.4",
        namespace: str = NAMESPACE,
    ) -> None:
        spec: dict[str, Any] = {"framework": {"name": framework}, "replicaSpecs": {}}
        if version:
            spec["framework"]["version"] = version
        if cuda:
            spec["cuda"] = cuda
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
            "spec": spec,
        }

    # --- spec ---
    @property
    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self._obj["spec"]
        return spec

    def role(
        self, role: str, replicas: int, gpus: int = 0, template: Mapping[str, Any] | None = None
    ) -> JobBuilder:
        rs: dict[str, Any] = {"replicas": replicas, "gpus": gpus}
        if template is not None:
            rs["template"] = copy.deepcopy(dict(template))
        self.spec["replicaSpecs"][role] = rs
        return self

    def workers(self, replicas: int = 2, gpus: int = 8) -> JobBuilder:
        return self.role("Worker", replicas, gpus)

    def placement(
        self, topology: str, mode: str = "Required", products: Sequence[str] = ()
    ) -> JobBuilder:
        self.spec["placement"] = {"topology": topology, "mode": mode}
        if products:
            self.spec["placement"]["gpuProducts"] = list(products)
        return self

    def run_policy(self, **fields: Any) -> JobBuilder:
        """run_policy(restartPolicy="ExitCode", backoffLimit=2): merged into spec.runPolicy."""
        self.spec.setdefault("runPolicy", {}).update(fields)
        return self

    def suspend(self, flag: bool = True) -> JobBuilder:
        return self.run_policy(suspend=flag)

    def set(self, key: str, value: Any) -> JobBuilder:
        self.spec[key] = copy.deepcopy(value)
        return self

    def generation(self, generation: int) -> JobBuilder:
        self._obj["metadata"]["generation"] = generation
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
                "observedGeneration": self._obj["metadata"]["generation"],
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

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)


def job(
    name: str = JOB,
    framework: str = "pytorch",
    version: str | None = "2.4",
    cuda: str | None = "12.4",
    *,
    workers: int | None = 2,
    gpus: int = 8,
) -> JobBuilder:
    """The default job; `workers=None` leaves replicaSpecs empty for other role layouts."""
    b = JobBuilder(name, framework, version, cuda)
    if workers is not None:
        b.workers(workers, gpus)
    return b


class PodBuilder:
    """A pod of a job, named `<job>-<role>-<index>`; labels and owner follow from the name."""

    def __init__(self, name: str, namespace: str = NAMESPACE) -> None:
        job_name, role, index = name.rsplit("-", 2)
        self._obj: dict[str, Any] = {
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
                # No gang generation unless a test sets one (.generation(n)): such pods count
                # as the current gang, whatever the job's restartCount.
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
        if role == "worker":
            self.rank(int(index))

    @classmethod
    def wrap(cls, obj: Mapping[str, Any]) -> PodBuilder:
        """Continue from an existing pod dict (e.g. one reconcile planned); copies it."""
        builder = cls.__new__(cls)
        builder._obj = copy.deepcopy(dict(obj))
        builder._obj.setdefault("status", {"phase": "Pending"})
        return builder

    @property
    def name(self) -> str:
        name: str = self._obj["metadata"]["name"]
        return name

    def rank(self, rank: int | None) -> PodBuilder:
        """The trainop.dev/rank annotation (None removes it: an unranked role)."""
        ann = self._obj["metadata"]["annotations"]
        if rank is None:
            ann.pop(c.ANNOTATION_RANK, None)
        else:
            ann[c.ANNOTATION_RANK] = str(rank)
        return self

    def generation(self, gang_generation: int) -> PodBuilder:
        """The gang generation (trainop.dev/restart-count) the pod was created for."""
        self._obj["metadata"]["annotations"][c.ANNOTATION_RESTART_COUNT] = str(gang_generation)
        return self

    def on(self, node: str) -> PodBuilder:
        """Pinned to `node` by required node affinity on kubernetes.io/hostname, as planned."""
        expr = {"key": c.LABEL_HOSTNAME, "operator": "In", "values": [node]}
        self._obj["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [expr]}]
                }
            }
        }
        return self

    def gate(self, name: str) -> PodBuilder:
        gates = self._obj["spec"].setdefault("schedulingGates", [])
        if not any(g["name"] == name for g in gates):
            gates.append({"name": name})
        return self

    def gated(self) -> PodBuilder:
        """Held behind trainop's scheduling gate (created, not yet released)."""
        return self.gate(c.SCHEDULING_GATE)

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

    def deleting(self) -> PodBuilder:
        self._obj["metadata"]["deletionTimestamp"] = ago(1)
        return self

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)


def pod(name: str) -> PodBuilder:
    return PodBuilder(name)


def build_all(pods: Sequence[PodBuilder]) -> list[dict[str, Any]]:
    return [p.build() for p in pods]

"""A small Kubernetes client shared by every scenario of `bench.scale` (one thread pool, the
same for trainop and the baselines), with the API server's metrics for `controlplane`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench import kubeflow_baseline
from bench.scale import controlplane
from bench.scale.workload import Gang, bare_pod


# --- a small client --------------------------------------------------------------------------
class Client:
    """kubernetes' Python client with a thread pool: the same for both policies."""

    def __init__(self, kubeconfig: str, workers: int = 16) -> None:
        from kubernetes import client, config

        config.load_kube_config(kubeconfig)
        cfg = client.Configuration.get_default_copy()
        cfg.connection_pool_maxsize = workers
        api = client.ApiClient(cfg)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.pool = ThreadPoolExecutor(workers)
        self.kubeconfig = kubeconfig

    def ensure_namespace(self, ns: str) -> None:
        """A fresh, empty namespace: one left by an earlier run is deleted first."""
        from kubernetes.client.rest import ApiException

        self.delete_namespace(ns, wait=True)
        deadline = time.monotonic() + 120
        while True:
            try:
                self.core.create_namespace({"metadata": {"name": ns}})
                break
            except ApiException as exc:
                if exc.status != 409 or time.monotonic() > deadline:
                    raise
                time.sleep(1)  # still terminating
        while time.monotonic() < deadline:  # the ServiceAccount admission needs it
            if self.core.list_namespaced_service_account(ns).items:
                return
            time.sleep(0.2)

    def delete_namespace(self, ns: str, wait: bool = True) -> None:
        from kubernetes.client.rest import ApiException

        try:
            self.core.delete_namespace(ns)
        except ApiException as exc:
            if exc.status != 404:
                raise
        while wait:
            try:
                self.core.read_namespace(ns)
            except ApiException:
                return
            time.sleep(1)

    def pods(self, ns: str) -> list[Any]:
        return list(self.core.list_namespaced_pod(ns).items)

    def jobs(self, ns: str) -> list[dict[str, Any]]:
        out = self.custom.list_namespaced_custom_object(
            "trainop.dev", "v1alpha1", ns, "trainingjobs"
        )
        return list(out["items"])

    def create_jobs(self, bodies: Iterable[dict[str, Any]], ns: str) -> None:
        def one(body: dict[str, Any]) -> None:
            self.custom.create_namespaced_custom_object(
                "trainop.dev", "v1alpha1", ns, "trainingjobs", body
            )

        list(self.pool.map(one, bodies))

    def create_pytorchjobs(self, gangs: list[Gang], ns: str) -> None:
        def one(g: Gang) -> None:
            body = kubeflow_baseline.pytorch_job(g.name, ns, g.replicas, g.gpus)
            self._retry(
                lambda: self.custom.create_namespaced_custom_object(
                    "kubeflow.org", "v1", ns, "pytorchjobs", body
                )
            )

        list(self.pool.map(one, gangs))

    def create_bare_gangs(self, gangs: list[Gang], ns: str) -> None:
        def one(g: Gang) -> None:
            for i in range(g.replicas):
                self._retry(lambda i=i: self.core.create_namespaced_pod(ns, bare_pod(g, i, ns)))
            for i in range(g.replicas):  # the whole gang exists: release it
                self.core.patch_namespaced_pod(
                    f"{g.name}-{i}",
                    ns,
                    [{"op": "replace", "path": "/spec/schedulingGates", "value": []}],
                )

        list(self.pool.map(one, gangs))

    @staticmethod
    def _retry(call: Callable[[], Any], seconds: float = 30.0) -> Any:
        """A new namespace refuses pods until its default ServiceAccount exists."""
        from kubernetes.client.rest import ApiException

        deadline = time.monotonic() + seconds
        while True:
            try:
                return call()
            except ApiException as exc:
                if exc.status != 403 or "service account" not in str(exc.body):
                    raise
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def apiserver_metrics(self) -> str:
        """The API server's /metrics text."""
        api = self.core.api_client
        method, url, headers, _, _ = api.param_serialize(
            "GET", "/metrics", auth_settings=["BearerToken"]
        )
        resp = api.call_api(method, url, headers, _request_timeout=60)
        resp.read()
        return str(resp.data.decode())

    def cost_meter(self, operator_pid: int | None = None) -> controlplane.CostMeter:
        return controlplane.CostMeter(self.apiserver_metrics, self.kubeconfig, operator_pid)

    def apiserver_counts(self) -> dict[str, float]:
        """Requests the apiserver served that only trainop's process makes (kopf's part)."""
        raw = self.apiserver_metrics()
        out = {"trainingjob_patch": 0.0, "event_post": 0.0}
        for line in raw.splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels, value = line.rsplit(" ", 1)
            if (
                'resource="trainingjobs"' in labels
                and 'subresource=""' in labels
                and 'verb="PATCH"' in labels
            ):
                out["trainingjob_patch"] += float(value)
            if 'resource="events"' in labels and 'group=""' in labels and 'verb="POST"' in labels:
                out["event_post"] += float(value)
        return out

"""Idempotent writes to the API server for the operator: create, delete, ungate, status, jobs."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from trainop.api import constants as c

log = logging.getLogger("trainop.kube")

PLURAL = "trainingjobs"


def load_kube_config(kubeconfig: str | None = None) -> None:
    """In-cluster credentials when running in a pod, else the kubeconfig (KUBECONFIG/default)."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config(config_file=kubeconfig)


class KubeApi:
    """The only writer: every call tolerates the object already being in the wanted state."""

    def __init__(self) -> None:
        self.core = client.CoreV1Api()
        self.custom = client.CustomObjectsApi()

    def create(self, obj: Mapping[str, Any]) -> bool | None:
        """Create; False when it already exists (409), so replays never duplicate; None when
        it was not created at all (its namespace is being deleted)."""
        kind = obj["kind"]
        ns = obj["metadata"]["namespace"]
        if kind == "ResourceClaimTemplate":  # DRA mode: resource.k8s.io/v1, by URL
            group, version = obj["apiVersion"].split("/")
            try:
                self.custom.create_namespaced_custom_object(
                    group, version, ns, "resourceclaimtemplates", dict(obj)
                )
                return True
            except ApiException as exc:
                if exc.status == 409:
                    return False
                raise
        creator: Any = {
            "Pod": self.core.create_namespaced_pod,
            "Service": self.core.create_namespaced_service,
            "ConfigMap": self.core.create_namespaced_config_map,
            "Secret": self.core.create_namespaced_secret,
        }[kind]
        try:
            creator(ns, dict(obj))
            return True
        except ApiException as exc:
            if exc.status == 409:
                return False
            if exc.status == 403 and "being terminated" in str(exc.body):
                # The namespace is going away with the job in it: nothing to create.
                log.info(
                    "not creating %s %s/%s: namespace is terminating",
                    kind,
                    ns,
                    obj["metadata"]["name"],
                )
                return None
            raise

    def delete_pod(self, namespace: str, name: str) -> None:
        try:
            # Fake (and real) kubelets get a short grace: a broken gang must free its GPUs.
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=5)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def ungate_pod(self, namespace: str, name: str, remaining_gates: list[dict[str, Any]]) -> None:
        """Remove trainop's scheduling gate (other controllers' gates stay)."""
        try:
            # JSON patch: a strategic merge of an empty list would keep the merged-in gates.
            patch = [{"op": "replace", "path": "/spec/schedulingGates", "value": remaining_gates}]
            self.core.patch_namespaced_pod(name, namespace, patch)
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise

    def patch_job_status(
        self, namespace: str, name: str, status: Mapping[str, Any], old: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Merge-patch the status subresource; keys dropped since `old` are nulled out."""
        body = dict(status)
        for key in old:
            if key not in body:
                body[key] = None
        try:
            out = self.custom.patch_namespaced_custom_object_status(
                c.GROUP, c.VERSION, namespace, PLURAL, name, {"status": body}
            )
            return cast(dict[str, Any], out)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch_queue_status(self, name: str, status: Mapping[str, Any]) -> None:
        try:
            self.custom.patch_cluster_custom_object_status(
                c.GROUP, c.VERSION, "trainingqueues", name, {"status": dict(status)}
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def delete_job(self, namespace: str, name: str) -> None:
        try:
            self.custom.delete_namespaced_custom_object(
                c.GROUP, c.VERSION, namespace, PLURAL, name, propagation_policy="Background"
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def list_job_pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """Used only on deletion (cold path): the pods labelled for this job."""
        pods = self.core.list_namespaced_pod(namespace, label_selector=f"{c.LABEL_JOB_NAME}={name}")
        return [client.ApiClient().sanitize_for_serialization(p) for p in pods.items]

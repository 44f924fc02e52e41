"""Writes to Kueue's Workloads (kueue.x-k8s.io/v1beta2) for `externalQueue: kueue`.

Neighbours: `queueing.kueue` builds the objects and patches (pure); `handlers.kueue`
decides when to write; `kube.client.KubeApi` owns the API client used here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes.client.rest import ApiException

from trainop import metrics
from trainop.kube.client import KubeApi

GROUP, VERSION, PLURAL = "kueue.x-k8s.io", "v1beta2", "workloads"


def create_workload(api: KubeApi, obj: Mapping[str, Any]) -> bool:
    """Create; False when it exists already (409)."""
    metrics.API_WRITES.labels("create", "Workload").inc()
    try:
        api.custom.create_namespaced_custom_object(
            GROUP, VERSION, obj["metadata"]["namespace"], PLURAL, dict(obj)
        )
        return True
    except ApiException as exc:
        if exc.status == 409:
            return False
        raise


def delete_workload(api: KubeApi, namespace: str, name: str) -> None:
    """Delete (a Workload already gone is no error)."""
    metrics.API_WRITES.labels("delete", "Workload").inc()
    try:
        api.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    except ApiException as exc:
        if exc.status != 404:
            raise


def patch_workload(api: KubeApi, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
    """Merge-patch the Workload itself (spec.active); a Workload gone is no error."""
    metrics.API_WRITES.labels("patch", "Workload").inc()
    try:
        api.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, dict(patch)
        )
    except ApiException as exc:
        if exc.status != 404:
            raise


def patch_workload_status(
    api: KubeApi, namespace: str, name: str, patch: Mapping[str, Any]
) -> bool:
    """Merge-patch the status subresource; False on a conflict (Kueue wrote first: the
    next reconcile looks again) or when the Workload is gone."""
    metrics.API_WRITES.labels("patch", "Workload").inc()
    try:
        api.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, dict(patch)
        )
        return True
    except ApiException as exc:
        if exc.status in (404, 409):
            return False
        raise

"""Read-only API calls for the CLI (`trainop explain`): a job, its pods, events and queue."""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client
from kubernetes.client.rest import ApiException

from trainop.api import constants as c


def _plain(obj: Any) -> dict[str, Any]:
    return cast(dict[str, Any], client.ApiClient().sanitize_for_serialization(obj))


def job_context(
    namespace: str, name: str, api_client: client.ApiClient | None = None
) -> dict[str, Any] | None:
    """The job, its pods, its events and its queue (None when the job does not exist).
    `api_client`: the SDK's own (trainop.sdk.client); the default configuration otherwise."""
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    try:
        job = cast(
            dict[str, Any],
            custom.get_namespaced_custom_object(
                c.GROUP, c.VERSION, namespace, "trainingjobs", name
            ),
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    pods = core.list_namespaced_pod(namespace, label_selector=f"{c.LABEL_JOB_NAME}={name}").items
    events = core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}"
    ).items
    queue = None
    queue_name = (job.get("status") or {}).get("queue") or (job.get("spec") or {}).get("queue")
    if queue_name and not queue_name.startswith("("):  # "(built-in)" is no object
        try:
            queue = custom.get_cluster_custom_object(
                c.GROUP, c.VERSION, "trainingqueues", queue_name
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
    return {
        "job": job,
        "pods": [_plain(p) for p in pods],
        "events": [_plain(e) for e in events],
        "queue": queue,
        "ancestors": _ancestors(custom, queue),
        "priority_class": _priority_class(job, api_client),
    }


def _priority_class(job: dict[str, Any], api_client: client.ApiClient | None) -> Any:
    """The job's PriorityClass (its guaranteed minimum run); None when it names none, the
    class is gone or the caller may not read it (RBAC: get priorityclasses)."""
    name = (job.get("spec") or {}).get("priorityClassName")
    if not name:
        return None
    try:
        found = client.SchedulingV1Api(api_client).read_priority_class(name)
    except ApiException as exc:
        if exc.status in (403, 404):
            return None
        raise
    return _plain(found)


def _ancestors(custom: client.CustomObjectsApi, queue: Any) -> list[dict[str, Any]]:
    """The queue's parent, its parent, ... (a missing one or a cycle ends the walk)."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    parent = ((queue or {}).get("spec") or {}).get("parent")
    while isinstance(parent, str) and parent and parent not in seen and len(out) < 32:
        seen.add(parent)
        try:
            obj = cast(
                dict[str, Any],
                custom.get_cluster_custom_object(c.GROUP, c.VERSION, "trainingqueues", parent),
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            break
        out.append(obj)
        parent = (obj.get("spec") or {}).get("parent")
    return out

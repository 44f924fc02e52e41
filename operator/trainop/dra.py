"""Optional DRA wiring: a ResourceClaimTemplate pairing each GPU with a NIC under the same PCIe root.

Where the cluster serves `resource.k8s.io/v1` (Kubernetes >= 1.34) and runs DRA drivers for
GPUs and RDMA NICs, a pod can ask for "N GPUs, each with a NIC on its PCIe root" instead of
N anonymous `nvidia.com/gpu` and a shared RDMA resource. One request pair per GPU, each
pair constrained by `matchAttribute: resource.kubernetes.io/pcieRoot`: a single constraint
over all N GPUs and N NICs would demand one root for all of them, which no DGX has.
"""

from __future__ import annotations

from copy import deepcopy
from dataclasses import dataclass
from typing import Any

from trainop.api import constants as c
from trainop.manifests import JobRef, job_labels

CLAIM_NAME = "gpu-nic"


@dataclass(frozen=True)
class DraConfig:
    """Operator config `dra:`; off unless enabled."""

    enabled: bool = False
    gpu_device_class: str = "gpu.nvidia.com"
    nic_device_class: str = "rdma.nvidia.com"


def template_name(job: str, role: str) -> str:
    return f"{job}-{role.lower()}-{CLAIM_NAME}"


def claim_template(job: JobRef, role: str, gpus: int, config: DraConfig) -> dict[str, Any]:
    requests: list[dict[str, Any]] = []
    constraints: list[dict[str, Any]] = []
    for i in range(gpus):
        for kind, device_class in (
            ("gpu", config.gpu_device_class),
            ("nic", config.nic_device_class),
        ):
            requests.append(
                {
                    "name": f"{kind}-{i}",
                    "exactly": {
                        "deviceClassName": device_class,
                        "allocationMode": "ExactCount",
                        "count": 1,
                    },
                }
            )
        constraints.append(
            {"requests": [f"gpu-{i}", f"nic-{i}"], "matchAttribute": c.DRA_PCIE_ROOT_ATTRIBUTE}
        )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": template_name(job.name, role),
            "namespace": job.namespace,
            "labels": job_labels(job.name),
            "ownerReferences": [job.owner_reference()],
        },
        "spec": {"spec": {"devices": {"requests": requests, "constraints": constraints}}},
    }


def use_claim(pod: dict[str, Any], job: str, role: str, gpus: int) -> dict[str, Any]:
    """The pod with its GPUs and RDMA NICs taken from the claim instead of extended resources."""
    out = deepcopy(pod)
    spec = out["spec"]
    spec["resourceClaims"] = [
        *(spec.get("resourceClaims") or []),
        {"name": CLAIM_NAME, "resourceClaimTemplateName": template_name(job, role)},
    ]
    main = spec["containers"][0]
    res = main.get("resources") or {}
    for section in ("limits", "requests"):
        bucket = res.get(section) or {}
        for key in [k for k in bucket if k == c.RESOURCE_GPU or k.startswith("rdma/")]:
            del bucket[key]
        if section in res and not bucket:
            del res[section]
    res["claims"] = [*(res.get("claims") or []), {"name": CLAIM_NAME}]
    main["resources"] = res
    out["metadata"]["annotations"][c.ANNOTATION_DRA_GPUS] = str(gpus)
    return out

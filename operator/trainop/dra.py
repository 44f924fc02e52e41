"""Optional DRA wiring: a ResourceClaimTemplate pairing each GPU with a NIC under the same PCIe root.

Where the cluster serves `resource.k8s.io/v1` (Kubernetes >= 1.34) and runs DRA drivers for
GPUs and RDMA NICs, a pod can ask for "N GPUs, each with a NIC on its PCIe root" instead of
N anonymous `nvidia.com/gpu` and a shared RDMA resource. One request pair per GPU, each
pair constrained by `matchAttribute: resource.kubernetes.io/pcieRoot`: a single constraint
over all N GPUs and N NICs would demand one root for all of them, which no DGX has.

Multi-node NVLink (issue 36, docs/mnnvl.md): with `dra.computeDomains` (NVIDIA's DRA driver for
GPUs installed, https://github.com/NVIDIA/k8s-dra-driver-gpu), a GPU gang whose pods span the
trays of one NVLink clique (`nvidia.com/gpu.clique`, placement level clique) gets a
`ComputeDomain` (resource.nvidia.com/v1beta1; CRD vendored in crds/vendor/) owned by the job.
The driver generates the ResourceClaimTemplate named in its spec.channel; each GPU pod claims
its IMEX channel through it (pod resourceClaims + the trainer's resources.claims, as the
driver's demo does: demo/specs/imex/nvbandwidth-test-job-1.yaml at v25.12.0) and gets NCCL's
multi-node NVLink env. The planner (trainop.planner) decides when; the shell (kube.client)
creates the object with the gang's others.
"""

from __future__ import annotations

from copy import deepcopy
from dataclasses import dataclass
from typing import Any

from trainop.api import constants as c
from trainop.manifests import JobRef, job_labels

CLAIM_NAME = "gpu-nic"
CHANNEL_CLAIM = "imex-channel"
COMPUTE_DOMAIN_API = "resource.nvidia.com/v1beta1"
# Multi-node NVLink in NCCL (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html):
# NCCL_MNNVL_ENABLE (since 2.21) 1 = use MNNVL (default 2 = auto-detect, which quietly falls
# back to the network when the IMEX channel is missing: forcing it makes a broken channel an
# error at init, not a slow job); NCCL_CUMEM_ENABLE=1: MNNVL shares memory through cuMem
# fabric handles (default 1 since NCCL 2.19, set for images that turned it off). GB200 MNNVL
# needs NCCL >= 2.25.2 (https://docs.nvidia.com/multi-node-nvlink-systems/multi-node-tuning-guide/nccl.html).
# A job's own ncclEnv or container env wins (the names are only added where absent).
MNNVL_ENV = (("NCCL_MNNVL_ENABLE", "1"), ("NCCL_CUMEM_ENABLE", "1"))
# PlacementStatus.imex: a gang across trays of one clique; IMEX set up, or not (no DRA driver).
IMEX_COMPUTE_DOMAIN = "ComputeDomain"
IMEX_NOT_SET_UP = "NotSetUp"


@dataclass(frozen=True)
class DraConfig:
    """Operator config `dra:`; off unless enabled."""

    enabled: bool = False
    gpu_device_class: str = "gpu.nvidia.com"
    nic_device_class: str = "rdma.nvidia.com"
    # NVIDIA's DRA driver for GPUs is installed: a ComputeDomain per gang inside one clique.
    compute_domains: bool = False


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


def compute_domain_name(job: str) -> str:
    """The gang's ComputeDomain (one per job: a job has one gang at a time)."""
    return f"{job}-imex"


def channel_template_name(job: str) -> str:
    """The ResourceClaimTemplate the DRA driver generates for the ComputeDomain's channel."""
    return f"{job}-imex-channel"


def compute_domain(job: JobRef, num_nodes: int) -> dict[str, Any]:
    """The gang's ComputeDomain, owned by the job (garbage collection deletes it with the job).

    numNodes: the gang's distinct nodes. With the driver's default IMEXDaemonsWithDNSNames it
    only drives the domain's status; without it, pods wait until that many IMEX daemons
    joined (spec.numNodes in the CRD, v25.12.0). One channel per pod (allocationMode Single).
    """
    return {
        "apiVersion": COMPUTE_DOMAIN_API,
        "kind": "ComputeDomain",
        "metadata": {
            "name": compute_domain_name(job.name),
            "namespace": job.namespace,
            "labels": job_labels(job.name),
            "ownerReferences": [job.owner_reference()],
        },
        "spec": {
            "numNodes": num_nodes,
            "channel": {
                "resourceClaimTemplate": {"name": channel_template_name(job.name)},
                "allocationMode": "Single",
            },
        },
    }


def use_channel(pod: dict[str, Any], job: str) -> dict[str, Any]:
    """The GPU pod claiming its IMEX channel, with NCCL's multi-node NVLink env."""
    out = deepcopy(pod)
    spec = out["spec"]
    spec["resourceClaims"] = [
        *(spec.get("resourceClaims") or []),
        {"name": CHANNEL_CLAIM, "resourceClaimTemplateName": channel_template_name(job)},
    ]
    main = spec["containers"][0]
    res = main.get("resources") or {}
    res["claims"] = [*(res.get("claims") or []), {"name": CHANNEL_CLAIM}]
    main["resources"] = res
    env = main.get("env") or []
    have = {e.get("name") for e in env}
    main["env"] = [*env, *({"name": n, "value": v} for n, v in MNNVL_ENV if n not in have)]
    return out

"""DRA mode: GPU+NIC request pairs per GPU, pods claim them, the inventory still counts GPUs."""

from __future__ import annotations

import pytest

from trainop.dra import DraConfig, claim_template, use_claim
from trainop.inventory.pods import pod_request
from trainop.manifests import JobRef

JOB = JobRef("bert", "nlp", "uid-1")


@pytest.mark.parametrize("gpus", [1, 4, 8], ids=["1-gpu", "4-gpus", "8-gpus"])
def test_one_pcie_root_constraint_per_gpu(gpus: int) -> None:
    t = claim_template(JOB, "Worker", gpus, DraConfig(enabled=True))
    devices = t["spec"]["spec"]["devices"]
    assert len(devices["requests"]) == 2 * gpus
    assert [c["requests"] for c in devices["constraints"]] == [
        [f"gpu-{i}", f"nic-{i}"] for i in range(gpus)
    ]
    assert {r["exactly"]["deviceClassName"] for r in devices["requests"]} == {
        "gpu.nvidia.com",
        "rdma.nvidia.com",
    }
    assert t["metadata"]["name"] == "bert-worker-gpu-nic"
    assert t["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_pod_claims_instead_of_extended_resources_and_keeps_cpu() -> None:
    pod = {
        "metadata": {"name": "bert-worker-0", "annotations": {}},
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "resources": {
                        "limits": {
                            "nvidia.com/gpu": "8",
                            "rdma/rdma_shared_device_a": "1",
                            "cpu": "8",
                        },
                        "requests": {"nvidia.com/gpu": "8"},
                    },
                }
            ]
        },
    }
    out = use_claim(pod, "bert", "Worker", 8)
    res = out["spec"]["containers"][0]["resources"]
    assert res["limits"] == {"cpu": "8"} and "requests" not in res
    assert res["claims"] == [{"name": "gpu-nic"}]
    assert out["spec"]["resourceClaims"] == [
        {"name": "gpu-nic", "resourceClaimTemplateName": "bert-worker-gpu-nic"}
    ]
    assert pod_request(out) == 8, "the inventory counts DRA-held GPUs from the annotation"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8", (
        "input untouched"
    )

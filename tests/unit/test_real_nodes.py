"""Image choice and eligibility over GFD-labelled nodes modelled on public docs and reports.

The fixture (data/gfd_nodes.yaml) cites the source of every node. Tables: what each node
is parsed as, and which nodes a whole-GPU job, a MIG job and a shared-GPU job may use.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import job, node
from trainop.api import constants as c
from trainop.inventory import Snapshot, build_snapshot
from trainop.planner import InvalidJob, OperatorConfig, Plan, Wait, plan_job

DATA = Path(__file__).parent / "data" / "gfd_nodes.yaml"
CONFIG = OperatorConfig(topology_levels=(c.LABEL_RACK, c.LABEL_HOSTNAME))


@cache
def _fixture() -> tuple[dict[str, Any], ...]:
    return tuple(yaml.safe_load(DATA.read_text())["nodes"])


def _node(entry: dict[str, Any]) -> dict[str, Any]:
    """A node of the fixture: its real labels and allocatable, nothing of the builder's."""
    builder = node(entry["name"]).gpus(None).labels(entry["labels"])
    for resource, amount in (entry.get("allocatable") or {}).items():
        builder.allocatable(resource, amount)
    for t in entry.get("taints") or []:
        builder.taint(t["key"], t["effect"], t.get("value", ""))
    return builder.build()


def snapshot(*names: str) -> Snapshot:
    entries = [e for e in _fixture() if not names or e["name"] in names]
    return build_snapshot([_node(e) for e in entries], levels=CONFIG.topology_levels)


def test_every_node_cites_a_source() -> None:
    for e in _fixture():
        assert e.get("source"), e["name"]


@pytest.mark.parametrize(
    ("name", "sharing", "memory", "driver", "profile"),
    [
        pytest.param("dgx-h100-r550", None, 81559, (550, 54, 15), None, id="h100"),
        pytest.param("a100-mig-single", "mig", 4864, (470, 57, 2), "1g.5gb", id="mig-single"),
        pytest.param("a100-mig-mixed", None, 40960, (535, 104, 5), None, id="mig-mixed"),
        pytest.param("t4-time-sliced", "time-slicing", 15360, (535, 104, 12), None, id="shared"),
        pytest.param("t400-replicas-only", "time-slicing", None, (550, 54), None, id="replicas"),
        pytest.param("v100-old-labels", None, 16160, (535, 86, 10), None, id="old-labels"),
        pytest.param("a100-no-driver-label", None, None, None, None, id="no-driver"),
        pytest.param("a100-memory-in-bytes", None, 40960, (550, 54, 15), None, id="bytes"),
    ],
)
def test_parsed_facts(
    name: str, sharing: str | None, memory: int | None, driver: Any, profile: str | None
) -> None:
    g = snapshot().node(name).gpu
    assert (g.sharing, g.memory_mib, g.driver, g.mig_profile) == (sharing, memory, driver, profile)


def _job(workers: int, gpus: int, **spec: Any) -> dict[str, Any]:
    """A job of `workers` x `gpus`, topology none; `spec` sets further fields as they are."""
    builder = job("j", version=None, cuda=None, namespace="ns", workers=workers, gpus=gpus)
    builder.set("placement", {"topology": "none"})
    for key, value in spec.items():
        builder.set(key, value)
    return builder.build()


def _nodes(result: Plan | Wait) -> set[str]:
    assert isinstance(result, Plan), result
    return set(result.placement.nodes)


@pytest.mark.parametrize(
    ("spec", "nodes", "expect"),
    [
        # whole GPUs never come from sliced nodes, even when the slices would "fit"
        pytest.param(
            {},
            ("t4-time-sliced", "a100-mig-single", "t400-replicas-only"),
            "Incompatible",
            id="whole-gpu-job-on-sliced-nodes",
        ),
        pytest.param({}, ("a100-mig-mixed",), "Incompatible", id="mig-mixed-has-no-whole-gpus"),
        pytest.param({}, ("a100-no-driver-label",), "Incompatible", id="missing-driver-label"),
        pytest.param({}, ("cpu-only",), "Incompatible", id="cpu-only"),
        pytest.param({}, ("v100-old-labels",), "v100-old-labels", id="old-labels-run"),
        pytest.param(
            {"placement": {"topology": "none", "gpuProducts": ["NVIDIA-H100-80GB-HBM3"]}},
            None,
            "dgx-h100-r550",
            id="whole-fleet-h100-only",
        ),
        # MIG single on R470: no NGC PyTorch image runs natively on R470 (CUDA >= 12.1), and
        # forward compatibility is not taken on "-MIG-" products (fail closed, see compat)
        pytest.param(
            {"gpuSharing": {"mode": "MIG", "migProfile": "1g.5gb"}},
            ("a100-mig-single", "dgx-h100-r550"),
            "Incompatible",
            id="mig-single-on-r470",
        ),
        pytest.param(
            {"gpuSharing": {"mode": "MIG", "migProfile": "1g.5gb"}},
            ("a100-mig-mixed", "dgx-h100-r550"),
            "a100-mig-mixed",
            id="mig-mixed-slice",
        ),
        pytest.param(
            {"gpuSharing": {"mode": "Shared"}},
            ("t4-time-sliced", "dgx-h100-r550"),
            "t4-time-sliced",
            id="time-sliced",
        ),
        pytest.param(
            {"gpuSharing": {"mode": "MIG", "migProfile": "2g.10gb"}},
            ("a100-mig-single", "a100-mig-mixed"),
            "Incompatible",
            id="mig-profile-absent",
        ),
    ],
)
def test_single_gpu_job_over_real_nodes(
    spec: dict[str, Any], nodes: tuple[str, ...] | None, expect: str
) -> None:
    snap = snapshot(*(nodes or ()))
    result = plan_job(_job(1, 1, **spec), snap, CONFIG)
    if expect in ("Incompatible", "NoFit"):
        assert isinstance(result, Wait) and result.reason == expect, result
        return
    assert _nodes(result) == {expect}


def test_mig_mixed_pod_requests_the_mig_resource() -> None:
    body = _job(1, 1, gpuSharing={"mode": "MIG", "migProfile": "1g.5gb"})
    plan = plan_job(body, snapshot("a100-mig-mixed"), CONFIG)
    assert isinstance(plan, Plan)
    limits = plan.pods[0]["spec"]["containers"][0]["resources"]["limits"]
    assert str(limits.get("nvidia.com/mig-1g.5gb")) == "1" and c.RESOURCE_GPU not in limits


def test_eight_ranks_never_land_on_one_sliced_t4() -> None:
    result = plan_job(_job(8, 1), snapshot("t4-time-sliced"), CONFIG)
    assert isinstance(result, Wait) and result.reason == "Incompatible"
    assert "slices of GPUs" in result.message


def test_shared_capacity_is_not_counted_as_whole_gpus() -> None:
    snap = snapshot()
    # H100 8 + V100 8 + A100 (no driver label) 8 + A100 (bytes) 8; slices of T4/T400/MIG not
    by_product = snap.free_gpus_by_product()
    assert "Tesla-T4-SHARED" not in by_product and "NVIDIA-T400" not in by_product
    assert sum(by_product.values()) == 32 == snap.gpus_free


def test_sharing_is_single_replica_only() -> None:
    with pytest.raises(InvalidJob, match=r"spec\.gpuSharing"):
        plan_job(_job(2, 1, gpuSharing={"mode": "Shared"}), snapshot(), CONFIG)
    with pytest.raises(InvalidJob, match="migProfile"):
        plan_job(_job(1, 1, gpuSharing={"mode": "MIG"}), snapshot(), CONFIG)


def test_slices_are_charged_to_their_own_quota_group() -> None:
    from trainop.queueing import fit_of
    from trainop.queueing.model import group_key

    body = _job(1, 1, gpuSharing={"mode": "MIG", "migProfile": "1g.5gb"})
    snap = snapshot("a100-mig-mixed")
    plan = plan_job(body, snap, CONFIG)
    assert isinstance(plan, Plan)
    fit = fit_of(plan, snap)
    assert fit.product == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    assert group_key(None, (fit.product,)) == "a100-sxm4-40gb-mig-1g.5gb"
    assert group_key(None, ("Tesla-T4-SHARED",)) == "tesla-t4-shared"
    assert group_key(None, ("NVIDIA-A100-SXM4-40GB",)) == "a100-sxm4-40gb"

"""Gang-aware image choice, ranked compatibility modes and the pod template's node constraints."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import job as make_job
from tests.builders import node as make_node
from trainop.api import constants as c
from trainop.catalog import load_catalog
from trainop.catalog.compat import MODE_FORWARD, MODE_MINOR, MODE_NATIVE
from trainop.inventory import Snapshot, build_snapshot
from trainop.planner import (
    InvalidJob,
    OperatorConfig,
    Plan,
    Wait,
    check_semantics,
    parse_spec,
    plan_job,
)

LEVELS = (c.LABEL_RACK, c.LABEL_HOSTNAME)
CONFIG = OperatorConfig(topology_levels=LEVELS)
H100, V100, A100, T4 = (
    "NVIDIA-H100-80GB-HBM3",
    "Tesla-V100-SXM2-32GB",
    "NVIDIA-A100-SXM4-80GB",
    "Tesla-T4",
)
CC = {H100: ("9", "0"), V100: ("7", "0"), A100: ("8", "0"), T4: ("7", "5")}


def node(
    name: str,
    product: str,
    driver: str,
    rack: str,
    *,
    gpus: int = 8,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    builder = make_node(name).gfd(product, driver, CC[product]).rack(rack).gpus(gpus)
    builder.labels(labels or {})
    for t in taints or []:
        builder.taint(t["key"], t["effect"], t.get("value", ""))
    return builder.build()


def snap(*nodes: dict[str, Any]) -> Snapshot:
    return build_snapshot(list(nodes), levels=LEVELS)


def job(
    workers: int = 2,
    gpus: int = 8,
    *,
    cuda: str | None = None,
    framework: str = "pytorch",
    topology: str = "rack",
    mode: str = "Required",
    template: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A job with no framework version: the catalog's choice is what these tests watch."""
    builder = make_job("j", framework, None, cuda, namespace="ns", workers=None)
    return builder.workers(workers, gpus, template or {}).placement(topology, mode).build()


def planned(result: Plan | Wait) -> Plan:
    assert isinstance(result, Plan), result
    return result


# ------------------------------------------------------------------ gang-aware choice


def test_gang_aware_choice_takes_the_rack_where_the_gang_fits() -> None:
    """The issue's case: one H100 (runs the newest image) and a rack of two V100 on R535.
    A 2x8 CUDA 12.4 job fits only on the V100 rack, where 24.x runs (forward compat)."""
    fleet = snap(
        node("h100", H100, "580.65.06", "r-h100"),
        node("v1", V100, "535.104.05", "r-v100"),
        node("v2", V100, "535.104.05", "r-v100"),
    )
    plan = planned(plan_job(job(cuda="12.4"), fleet, CONFIG))
    assert set(plan.placement.nodes) == {"v1", "v2"}
    assert plan.image.release is not None and plan.image.release.key < (25, 1)
    assert plan.compatibility == MODE_FORWARD
    assert any("NoFit" in t for t in plan.image_tried)  # newer releases were refused
    assert plan.image_tried[-1].endswith("placed")


def test_native_is_preferred_over_newer_minor_version_compat() -> None:
    """R580 nodes: 26.07 (driver 610) would run only by minor-version compatibility; the
    newest release they run natively (25.10, driver 580) wins."""
    fleet = snap(node("a", H100, "580.65.06", "r1"), node("b", H100, "580.65.06", "r1"))
    plan = planned(plan_job(job(), fleet, CONFIG))
    assert plan.image.release is not None
    assert plan.image.release.min_driver <= (580, 65, 6)
    assert plan.compatibility == MODE_NATIVE


def test_minor_version_compat_is_a_reported_fallback() -> None:
    # GeForce-free, FC-free case: an A100 on R525.60 runs CUDA 12.x only by minor-version compat
    fleet = snap(node("a", A100, "525.60.13", "r1"), node("b", A100, "525.60.13", "r1"))
    only_minor_and_native = OperatorConfig(
        topology_levels=LEVELS, compatibility_modes=frozenset({MODE_NATIVE, MODE_MINOR})
    )
    plan = planned(plan_job(job(cuda="12.1"), fleet, only_minor_and_native))
    assert plan.compatibility == MODE_MINOR


def test_disabled_modes_make_the_job_wait_with_the_reason() -> None:
    fleet = snap(node("a", A100, "525.60.13", "r1"), node("b", A100, "525.60.13", "r1"))
    native_only = OperatorConfig(
        topology_levels=LEVELS, compatibility_modes=frozenset({MODE_NATIVE})
    )
    result = plan_job(job(cuda="12.1"), fleet, native_only)
    assert isinstance(result, Wait) and result.reason == "Incompatible"
    assert "minor-version compatibility not allowed" in result.message


def test_confirmed_releases_are_tried_before_unconfirmed_ones() -> None:
    cat = load_catalog()
    fleet = snap(node("a", H100, "560.35.03", "r1"), node("b", H100, "560.35.03", "r1"))
    plan = planned(plan_job(job(), fleet, CONFIG))
    rel = plan.image.release
    assert rel is not None and not rel.unconfirmed_node_facts("pytorch")
    newer_unconfirmed = [
        r for r in cat.releases_for("pytorch") if r.key > rel.key and r.min_driver <= (560,)
    ]
    assert all(r.unconfirmed_node_facts("pytorch") for r in newer_unconfirmed)


def test_forbidding_unconfirmed_releases_can_make_a_spec_invalid() -> None:
    strict = OperatorConfig(topology_levels=LEVELS, allow_unconfirmed_releases=False)
    spec = parse_spec(job(framework="tensorflow", cuda="12.9"))
    with pytest.raises(InvalidJob, match="catalogOverrides"):
        check_semantics(spec, strict)


def test_unsatisfiable_spec_is_invalid_and_points_at_the_catalog_override() -> None:
    spec = parse_spec(job(framework="tensorflow", cuda="13.0"))
    check_semantics(spec)  # without a config: schema-level rules only
    with pytest.raises(InvalidJob) as err:
        check_semantics(spec, CONFIG)
    assert err.value.field == "spec.cuda"
    assert "catalogOverrides" in err.value.detail


def test_architecture_ceiling_keeps_old_cuda_off_new_gpus() -> None:
    """pytorch 1.5 exists only as NGC 20.03 (CUDA 10.2): it cannot run on A100 (needs 11.0)."""
    body = job(workers=1, gpus=8)
    body["spec"]["framework"]["version"] = "1.5"
    result = plan_job(body, snap(node("a", A100, "550.54.15", "r1")), CONFIG)
    assert isinstance(result, Wait) and result.reason == "Incompatible"
    assert "CUDA 10.2 targets compute capability up to 7.5" in result.message
    assert "needs CUDA >= 11.0" in result.message


def test_identical_eligible_sets_are_not_placed_twice() -> None:
    fleet = snap(node("a", H100, "580.65.06", "r1"))  # 8 GPUs, the job needs 16
    result = plan_job(job(), fleet, CONFIG)
    assert isinstance(result, Wait) and result.reason == "NoFit"
    same = [d for d in result.details if "same nodes as" in d]
    assert same  # every older release sees the same single node: refused without placing


# ------------------------------------------------------------------ template constraints


def _two_racks() -> Snapshot:
    return snap(
        node("a1", A100, "550.54.15", "r1", labels={"pool": "train"}),
        node("a2", A100, "550.54.15", "r1", labels={"pool": "train"}),
        node("b1", A100, "550.54.15", "r2", labels={"pool": "batch", "tier": "3"}),
        node("b2", A100, "550.54.15", "r2", labels={"pool": "batch", "tier": "5"}),
        node(
            "t1",
            A100,
            "550.54.15",
            "r3",
            taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
        ),
        node(
            "t2",
            A100,
            "550.54.15",
            "r3",
            taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
        ),
    )


def _affinity(*exprs: dict[str, Any]) -> dict[str, Any]:
    term = {"matchExpressions": list(exprs)}
    return {
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
                }
            }
        }
    }


def _expr(key: str, op: str, *values: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out


@pytest.mark.parametrize(
    ("template", "nodes"),
    [
        pytest.param({}, {"a1", "a2"}, id="no-constraints"),
        pytest.param({"spec": {"nodeSelector": {"pool": "batch"}}}, {"b1", "b2"}, id="selector"),
        pytest.param(_affinity(_expr("pool", "In", "batch")), {"b1", "b2"}, id="In"),
        pytest.param(_affinity(_expr("pool", "NotIn", "train")), {"b1", "b2"}, id="NotIn"),
        pytest.param(_affinity(_expr("tier", "Exists")), {"b1", "b2"}, id="Exists"),
        pytest.param(
            _affinity(_expr("pool", "DoesNotExist"), _expr("tier", "DoesNotExist")),
            None,
            id="DoesNotExist-only-tainted-left",
        ),
        pytest.param(
            {
                "spec": {
                    "tolerations": [
                        {
                            "key": "dedicated",
                            "operator": "Equal",
                            "value": "ml",
                            "effect": "NoSchedule",
                        }
                    ],
                    "nodeSelector": {c.LABEL_RACK: "r3"},
                }
            },
            {"t1", "t2"},
            id="tolerated-taint",
        ),
        pytest.param(
            {
                "spec": {
                    "tolerations": [{"operator": "Exists"}],
                    "nodeSelector": {c.LABEL_RACK: "r3"},
                }
            },
            {"t1", "t2"},
            id="tolerate-everything",
        ),
    ],
)
def test_template_constraints_shape_eligibility(
    template: dict[str, Any], nodes: set[str] | None
) -> None:
    result = plan_job(job(template=template), _two_racks(), CONFIG)
    if nodes is None:
        assert isinstance(result, Wait), result
        return
    assert set(planned(result).placement.nodes) == nodes


def test_gt_lt_operators() -> None:
    one = job(workers=1, template=_affinity(_expr("tier", "Gt", "4")))
    assert planned(plan_job(one, _two_racks(), CONFIG)).placement.nodes == ("b2",)
    low = job(workers=1, template=_affinity(_expr("tier", "Lt", "4")))
    assert planned(plan_job(low, _two_racks(), CONFIG)).placement.nodes == ("b1",)


def test_untolerated_taint_and_selector_are_explained() -> None:
    body = job(template={"spec": {"nodeSelector": {"pool": "gpu-xl"}}})
    result = plan_job(body, _two_racks(), CONFIG)
    assert isinstance(result, Wait) and result.reason == "Incompatible"
    assert "excluded by the Worker template's nodeSelector pool=gpu-xl" in result.message


def test_tainted_nodes_stay_excluded_without_a_toleration() -> None:
    body = job(template={"spec": {"nodeSelector": {c.LABEL_RACK: "r3"}}})
    result = plan_job(body, _two_racks(), CONFIG)
    assert isinstance(result, Wait) and result.reason == "NoFit"
    assert "dedicated=ml:NoSchedule" in " ".join((result.message, *result.details))


# ------------------------------------------------------------------ config and queue modes


def test_config_keys_for_modes_and_unconfirmed() -> None:
    from trainop.config import ConfigError, operator_config_from_data

    cfg = operator_config_from_data(
        {"compatibilityModes": ["Native", "ForwardCompat"], "allowUnconfirmedReleases": False}
    )
    assert cfg.compatibility_modes == {MODE_NATIVE, MODE_FORWARD}
    assert cfg.allow_unconfirmed_releases is False
    with pytest.raises(ConfigError, match=r"^compatibilityModes\[0\]: 'Sideways'"):
        operator_config_from_data({"compatibilityModes": ["Sideways"]})
    with pytest.raises(ConfigError, match=r"^compatibilityModes: must be a non-empty list"):
        operator_config_from_data({"compatibilityModes": []})
    with pytest.raises(ConfigError, match=r"^allowUnconfirmedReleases: must be true or false"):
        operator_config_from_data({"allowUnconfirmedReleases": "no"})


def test_queue_policy_narrows_the_modes() -> None:
    from trainop.api.trainingqueue import TenantPolicy
    from trainop.queueing import PlannerPlacer
    from trainop.queueing.model import QueuedJob, QueueState

    fleet = snap(node("a", A100, "525.60.13", "r1"), node("b", A100, "525.60.13", "r1"))
    body = job(cuda="12.1")
    strict = QueueState("strict", policy=TenantPolicy(compatibility_modes=["Native"]))
    placer = PlannerPlacer({"ns/j": body}, CONFIG, {"strict": strict})
    queued = QueuedJob(key="ns/j", queue="strict", gpus=16, created=0.0)
    assert type(placer(queued, fleet, None)).__name__ == "Unfit"
    lenient = PlannerPlacer({"ns/j": body}, CONFIG)
    assert type(lenient(queued, fleet, None)).__name__ == "Fit"


def test_brief_keeps_the_first_lines_and_the_outcome() -> None:
    from trainop.eligibility import brief

    lines = [f"r{i}" for i in range(30)]
    out = brief(lines, limit=5)
    assert out == ("r0", "r1", "r2", "... 26 more", "r29")
    assert brief(lines[:3]) == ("r0", "r1", "r2")

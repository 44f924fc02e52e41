"""Architecture-aware image choice (issue #36): an image runs on a node only if it is
published for the node's kubernetes.io/arch, and a gang never mixes amd64 and arm64 nodes.
The catalog's arm64 windows are unconfirmed, so by default NGC images are amd64 only."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import job as make_job
from tests.builders import node as make_node
from trainop.api import constants as c
from trainop.catalog import CatalogError, gpu_facts_from_labels, load_catalog
from trainop.catalog.compat import KIND_ARCH, check_node, summarize_incompatible
from trainop.catalog.gfd import LABEL_ARCH
from trainop.catalog.model import ImageArchs
from trainop.inventory import Snapshot, build_snapshot
from trainop.planner import OperatorConfig, Plan, Wait, plan_job

LEVELS = (c.LABEL_RACK, c.LABEL_HOSTNAME)
CAT = load_catalog()
# The operator confirmed the PyTorch image's arm64 window for its registry.
ARM_OK = {"images": {"pytorch": {"unconfirmed": []}, "mpi": {"unconfirmed": ["horovod"]}}}
CAT_ARM = load_catalog(overrides=ARM_OK)
H100 = ("NVIDIA-H100-80GB-HBM3", ("9", "0"))
GH200 = ("NVIDIA-GH200-480GB", ("9", "0"))
AMD, ARM = frozenset({"amd64"}), frozenset({"amd64", "arm64"})

# ------------------------------------------------------------------ the catalog's windows

WINDOWS = [
    # name, overrides, framework, release, known, unconfirmed
    pytest.param("default-pytorch", None, "pytorch", "25.10", AMD, {"arm64"}, id="default"),
    pytest.param("before-window", None, "pytorch", "23.12", AMD, set(), id="before-window"),
    pytest.param("confirmed", ARM_OK, "pytorch", "25.10", ARM, set(), id="confirmed"),
    pytest.param("confirmed-old", ARM_OK, "pytorch", "23.12", AMD, set(), id="confirmed-old"),
    pytest.param("mpi-confirmed", ARM_OK, "mpi", "26.07", ARM, set(), id="mpi-confirmed"),
    pytest.param("no-window", ARM_OK, "jax", "24.03", AMD, set(), id="jax-no-arm64"),
    pytest.param(
        "closed-window",
        {"images": {"jax": {"arm64": {"since": "24.02", "until": "24.03"}}}},
        "jax",
        "24.04",
        AMD,
        set(),
        id="after-until",
    ),
    pytest.param(
        "open-window",
        {"images": {"jax": {"arm64": {"until": "24.03"}}}},
        "jax",
        "24.03",
        ARM,
        set(),
        id="open-since",
    ),
]


@pytest.mark.parametrize(("name", "over", "framework", "release", "known", "unconfirmed"), WINDOWS)
def test_arm64_windows(
    name: str, over: Any, framework: str, release: str, known: Any, unconfirmed: set[str]
) -> None:
    cat = load_catalog(overrides=over) if over else CAT
    spec = cat.image_spec(framework)
    rel = cat.release(release)
    assert spec is not None and rel is not None, name
    assert spec.archs_for(rel) == ImageArchs(known, frozenset(unconfirmed))


@pytest.mark.parametrize(
    ("arm64", "message"),
    [
        pytest.param({"since": 24.02}, "quoted 'YY.MM'", id="unquoted"),
        pytest.param({"from": "24.02"}, "unknown key 'from'", id="unknown-key"),
        pytest.param("24.02", "expected a mapping", id="not-a-mapping"),
    ],
)
def test_bad_arm64_windows_are_refused(arm64: Any, message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        load_catalog(overrides={"images": {"jax": {"arm64": arm64}}})


def test_check_lists_the_unconfirmed_arm64_windows() -> None:
    from trainop.catalog.table import unconfirmed_facts

    assert (
        "image pytorch (nvcr.io/nvidia/pytorch): the releases published for arm64 "
        "(24.02..; not used: amd64 only until confirmed)"
    ) in unconfirmed_facts(CAT)


# ------------------------------------------------------------------ check_node


def facts(arch: str | None, product: tuple[str, tuple[str, str]] = GH200) -> Any:
    labels = {
        c.GFD_PRODUCT: product[0],
        c.GFD_COMPUTE_MAJOR: product[1][0],
        c.GFD_COMPUTE_MINOR: product[1][1],
        c.GFD_DRIVER_FULL: "580.95.05",
        c.GFD_DRIVER_MAJOR: "580",
    }
    if arch is not None:
        labels[LABEL_ARCH] = arch
    return gpu_facts_from_labels(labels)


NODE_CASES = [
    # node arch, image archs, ok, words in the reason
    pytest.param("arm64", ImageArchs(AMD), False, "has no arm64 image (amd64 only)", id="arm-amd"),
    pytest.param(
        "arm64",
        ImageArchs(AMD, frozenset({"arm64"})),
        False,
        "its arm64 image is unconfirmed",
        id="arm-unconfirmed",
    ),
    pytest.param("arm64", ImageArchs(ARM), True, None, id="arm-multiarch"),
    pytest.param("arm64", None, True, None, id="arm-unknown-image-trusted"),
    pytest.param("amd64", ImageArchs(AMD), True, None, id="amd-amd"),
    pytest.param(None, ImageArchs(AMD), True, None, id="unlabelled-is-amd64"),
    pytest.param("s390x", ImageArchs(ARM), False, "has no s390x image", id="other-arch"),
]


@pytest.mark.parametrize(("arch", "archs", "ok", "words"), NODE_CASES)
def test_check_node_architecture(arch: str | None, archs: Any, ok: bool, words: str | None) -> None:
    verdict = check_node(CAT, facts(arch), (12, 4), None, archs=archs)
    assert verdict.ok is ok, verdict.reason
    if not ok:
        assert verdict.kind == KIND_ARCH
        assert words is not None and words in (verdict.reason or "")
        assert (verdict.reason or "").startswith(f"{LABEL_ARCH}={arch}")


def test_arch_refusals_group_by_architecture() -> None:
    f = facts("arm64")
    results = [
        (f"n{i}", f, check_node(CAT, f, (12, 4), None, archs=ImageArchs(AMD))) for i in (1, 2)
    ]
    assert summarize_incompatible(results) == (
        "it has no arm64 image (amd64 only), but nodes have NVIDIA-GH200-480GB (arm64) x2."
    )


# ------------------------------------------------------------------ the gang

CONFIG = OperatorConfig(topology_levels=LEVELS)
CONFIG_ARM = OperatorConfig(topology_levels=LEVELS, catalog=CAT_ARM)


def node(name: str, kind: tuple[str, tuple[str, str]], arch: str, rack: str, gpus: int = 4) -> Any:
    b = make_node(name).gfd(kind[0], "580.95.05", kind[1]).rack(rack).gpus(gpus)
    return b.labels({LABEL_ARCH: arch}).build()


def snap(*nodes: Any) -> Snapshot:
    return build_snapshot(list(nodes), levels=LEVELS)


def job(
    workers: int, gpus: int, *, framework: str = "pytorch", image: str | None = None
) -> dict[str, Any]:
    b = make_job("j", framework, None, None, namespace="ns", workers=None)
    b = b.workers(workers, gpus, {}).placement("none", "Required")
    out = b.build()
    if image:
        out["spec"]["image"] = image
    return out


GH200_RACK = (node("g1", GH200, "arm64", "r-g"), node("g2", GH200, "arm64", "r-g"))
MIXED = (node("h1", H100, "amd64", "r-h"), node("g1", GH200, "arm64", "r-g"))

GANGS = [
    # name, fleet, job, config, placed on (None: waits), words of the wait or the choice
    pytest.param(
        GH200_RACK,
        job(2, 4),
        CONFIG,
        None,
        "its arm64 image is unconfirmed, so it runs on amd64 only",
        id="gh200-default-catalog-waits-naming-arm64",
    ),
    pytest.param(GH200_RACK, job(2, 4), CONFIG_ARM, {"g1", "g2"}, "", id="gh200-confirmed"),
    pytest.param(
        GH200_RACK,
        job(2, 4, framework="jax"),
        CONFIG_ARM,
        None,
        "has no arm64 image (amd64 only)",
        id="gh200-jax-has-no-arm64",
    ),
    pytest.param(
        GH200_RACK,
        job(2, 4, image="registry.local/team/trainer:1"),
        CONFIG,
        {"g1", "g2"},
        "trusted on amd64 and arm64",
        id="own-image-trusted",
    ),
    pytest.param(
        MIXED,
        job(2, 4),
        CONFIG_ARM,
        None,
        "on arm64 nodes",
        id="mixed-never-splits-a-gang",
    ),
    pytest.param(
        MIXED,
        job(2, 4, image="registry.local/team/trainer:1"),
        CONFIG,
        None,
        "a gang's pods share one architecture",
        id="mixed-own-image-never-splits",
    ),
    pytest.param(MIXED, job(1, 4), CONFIG, {"h1"}, "", id="mixed-default-amd64-only"),
    pytest.param(
        (*MIXED, node("g2", GH200, "arm64", "r-g")),
        job(2, 4),
        CONFIG_ARM,
        {"g1", "g2"},
        "",
        id="mixed-takes-the-arch-that-holds-it",
    ),
]


@pytest.mark.parametrize(("fleet", "spec", "config", "nodes", "words"), GANGS)
def test_gang_architecture(
    fleet: tuple[Any, ...], spec: Any, config: OperatorConfig, nodes: Any, words: str
) -> None:
    result = plan_job(spec, snap(*fleet), config)
    if nodes is None:
        assert isinstance(result, Wait), result
        text = " ".join([result.message, *result.details])
        assert words in text, text
        return
    assert isinstance(result, Plan), result
    assert set(result.placement.nodes) == nodes
    assert words in result.image.reason


# ------------------------------------------------------------------ the example Grace fleet


def grace_fleet() -> Snapshot:
    from pathlib import Path

    from trainop.cluster.fleet import load_fleet, node_manifests

    path = Path(__file__).resolve().parents[2] / "examples" / "fleet-grace.yaml"
    return build_snapshot(node_manifests(load_fleet(path)), levels=LEVELS)


def test_grace_fleet_nodes_carry_arch_and_clique() -> None:
    fleet = grace_fleet()
    gb = [n for n in fleet.nodes if n.name.startswith("gb200-")]
    assert len(gb) == 18 and {n.gpu.arch for n in gb} == {"arm64"}
    assert {n.gpu.clique for n in gb} == {"rack-nvl72-a.0"}
    assert {n.gpu.arch for n in fleet.nodes if n.name.startswith("b200-")} == {"amd64"}


@pytest.mark.parametrize(
    ("config", "prefix"),
    [
        pytest.param(CONFIG, "b200-", id="default-catalog-amd64-B200"),
        pytest.param(CONFIG_ARM, "gb200-", id="arm64-confirmed-GB200-rack"),
    ],
)
def test_grace_fleet_gang_lands_on_one_architecture(config: OperatorConfig, prefix: str) -> None:
    plan = plan_job(job(2, 8 if prefix == "b200-" else 4), grace_fleet(), config)
    assert isinstance(plan, Plan), plan
    assert all(n.startswith(prefix) for n in plan.placement.nodes), plan.placement.nodes


@pytest.mark.parametrize(
    ("cat", "cell"),
    [
        pytest.param(CAT, "none", id="default-catalog"),
        pytest.param(CAT_ARM, "NVIDIA-GH200-480GB x1", id="arm64-confirmed"),
    ],
)
def test_catalog_table_nodes_respect_the_architecture(cat: Any, cell: str) -> None:
    from trainop.catalog import catalog_table

    text = catalog_table(cat, "pytorch", nodes=[("g1", facts("arm64"))])
    row = next(line for line in text.splitlines() if " 25.10 " in line)
    assert row.endswith(cell), row


def _launcher_arch(result: Any) -> Any:
    assert isinstance(result, Plan), result
    pod = next(p for p in result.pods if "launcher" in p["metadata"]["name"])
    terms = (
        pod["spec"]
        .get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms", [])
    )
    return [e["values"] for t in terms for e in t["matchExpressions"] if e["key"] == LABEL_ARCH]


@pytest.mark.parametrize(
    ("fleet", "config", "expected"),
    [
        pytest.param(
            (*MIXED, node("g2", GH200, "arm64", "r-g")), CONFIG_ARM, [["arm64"]], id="mixed-arm64"
        ),
        pytest.param(MIXED, CONFIG, [["amd64"]], id="mixed-amd64"),
        pytest.param(GH200_RACK, CONFIG_ARM, [], id="one-arch-fleet-unchanged"),
    ],
)
def test_pods_without_gpus_follow_the_gang_architecture(
    fleet: tuple[Any, ...], config: OperatorConfig, expected: Any
) -> None:
    b = make_job("j", "mpi", None, None, namespace="ns", workers=None)
    b = b.workers(2 if len(fleet) > 2 else 1, 4, {}).role("Launcher", 1)
    spec = b.placement("none", "Required").build()
    assert _launcher_arch(plan_job(spec, snap(*fleet), config)) == expected


def test_a_gb200_gang_stays_in_its_nvl72_clique_at_nvlink_speed() -> None:
    """16 GPUs on the Grace fleet: one clique of the NVL72 rack, priced at NVLink 5 (740 GB/s
    per GPU between trays), not at the 50 GB/s network."""
    plan = plan_job(job(4, 4), grace_fleet(), CONFIG_ARM)
    assert isinstance(plan, Plan), plan
    p = plan.placement
    assert p.level == "clique" and all(n.startswith("gb200-") for n in p.nodes)
    assert p.allreduce is not None and p.allreduce.level == "clique"
    # ring over 16 GPUs at 740 GB/s: 2 * 15/16 * 1 GiB / 740 GB/s
    assert p.allreduce.seconds == pytest.approx(2 * 15 / 16 * (1 << 30) / 740e9, rel=0.01)

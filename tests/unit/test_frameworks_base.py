"""Registry, role validation and rank handling shared by every framework's wiring."""

from __future__ import annotations

import pytest

from trainop import frameworks as fw
from trainop.frameworks import Member, WiringInput, member_host
from trainop.frameworks.base import ranked_members


def gang(*members: tuple[str, int, int | None, int], job: str = "bert") -> WiringInput:
    """(role, index, rank, gpus) tuples -> WiringInput in namespace team."""
    return WiringInput(
        job=job,
        namespace="team",
        members=tuple(
            Member(r, i, k, g, member_host(job, "team", r, i, served=True))
            for r, i, k, g in members
        ),
    )


# --- names -----------------------------------------------------------------------------


def test_names_follow_design_contract() -> None:
    assert fw.pod_name("bert", "Worker", 3) == "bert-worker-3"
    assert fw.member_host("bert", "team", "PS", 0, served=True) == "bert-ps-0.bert.team.svc"
    assert fw.config_map_name("bert") == "bert-config"
    assert fw.ssh_secret_name("bert", "u1") == "bert-ssh-bb82030d"  # sha256 of the uid
    assert fw.ssh_secret_name("bert", "u1") != fw.ssh_secret_name("bert", "u2")
    assert fw.CONFIG_MOUNT_PATH == "/etc/trainop"


def test_registry_lists_every_framework_sorted() -> None:
    assert list(fw.FRAMEWORKS) == ["jax", "mpi", "mxnet", "paddle", "pytorch", "tensorflow"]
    for name, spec in fw.FRAMEWORKS.items():
        assert spec.name == name
        assert set(spec.required) <= set(spec.roles)
        assert set(spec.ranked) <= set(spec.roles)
        assert "Worker" in spec.required  # DESIGN.md: Worker always


# --- validate() ------------------------------------------------------------------------

VALIDATE_CASES = [
    pytest.param("pytorch", {"Worker": 2}, [], id="pytorch-ok"),
    pytest.param("tensorflow", {"Chief": 1, "Worker": 2, "PS": 1, "Evaluator": 1}, [], id="tf-ok"),
    pytest.param("tensorflow", {"Worker": 2, "PS": 0}, [], id="tf-optional-role-zero-ok"),
    pytest.param("mpi", {"Launcher": 1, "Worker": 2}, [], id="mpi-ok"),
    pytest.param("mxnet", {"Scheduler": 1, "Server": 2, "Worker": 2}, [], id="mxnet-ok"),
    pytest.param(
        "pytorch",
        {},
        [
            "spec.replicaSpecs.Worker: pytorch requires a Worker (the pods torchrun starts "
            "the training processes in); add spec.replicaSpecs.Worker with replicas >= 1."
        ],
        id="missing-worker",
    ),
    pytest.param(
        "jax",
        {"Worker": 0},
        [
            "spec.replicaSpecs.Worker.replicas: jax needs at least 1 Worker, got 0; "
            "set replicas: 1 or more."
        ],
        id="zero-workers",
    ),
    pytest.param(
        "tensorflow",
        {"Chief": 2, "Worker": 1},
        [
            "spec.replicaSpecs.Chief.replicas: tensorflow allows at most 1 Chief, got 2; "
            "set replicas: 1 and put the other replicas under spec.replicaSpecs.Worker."
        ],
        id="two-chiefs",
    ),
    pytest.param(
        "tensorflow",
        {"Evaluator": 2, "Worker": 1},
        [
            "spec.replicaSpecs.Evaluator.replicas: tensorflow allows at most 1 Evaluator, "
            "got 2; set replicas: 1."
        ],
        id="two-evaluators",
    ),
    pytest.param(
        "mpi",
        {"Worker": 2},
        [
            "spec.replicaSpecs.Launcher: mpi requires exactly one Launcher (the pod that "
            "runs mpirun); add spec.replicaSpecs.Launcher with replicas: 1."
        ],
        id="no-launcher",
    ),
    pytest.param(
        "mpi",
        {"Launcher": 2, "Worker": 2},
        [
            "spec.replicaSpecs.Launcher.replicas: mpi allows exactly 1 Launcher, got 2; "
            "set replicas: 1."
        ],
        id="two-launchers",
    ),
    pytest.param(
        "mpi",
        {"Launcher": 0, "Worker": 2},
        [
            "spec.replicaSpecs.Launcher.replicas: mpi needs exactly 1 Launcher, got 0; "
            "set replicas: 1."
        ],
        id="zero-launchers",
    ),
    pytest.param(
        "mxnet",
        {"Scheduler": 1, "Server": 0, "Worker": 1},
        [
            "spec.replicaSpecs.Server.replicas: mxnet needs at least 1 Server, got 0; "
            "set replicas: 1 or more."
        ],
        id="mxnet-no-servers",
    ),
    pytest.param(
        "mxnet",
        {"Server": 1, "Worker": 1},
        [
            "spec.replicaSpecs.Scheduler: mxnet requires exactly one Scheduler (the ps-lite "
            "rendezvous every server and worker connects to); add "
            "spec.replicaSpecs.Scheduler with replicas: 1."
        ],
        id="mxnet-no-scheduler",
    ),
    pytest.param(
        "pytorch",
        {"Worker": 2, "Chief": 1},
        [
            "spec.replicaSpecs.Chief: 'Chief' is not a role of pytorch; remove it or use "
            "one of Worker."
        ],
        id="unknown-role-for-framework",
    ),
    pytest.param(
        "tensorflow",
        {"worker": 2},
        [
            "spec.replicaSpecs.worker: 'worker' is not a role of tensorflow; rename it to "
            "Worker (role names are case-sensitive).",
            "spec.replicaSpecs.Worker: tensorflow requires a Worker (the pods that train); "
            "add spec.replicaSpecs.Worker with replicas >= 1.",
        ],
        id="lower-case-role",
    ),
    pytest.param(
        "mxnet",
        {"Scheduler": 1, "Servers": 1, "Server": 1, "Worker": 1},
        [
            "spec.replicaSpecs.Servers: 'Servers' is not a role of mxnet; did you mean "
            "Server? mxnet roles are Scheduler, Server, Worker."
        ],
        id="near-miss-role",
    ),
    pytest.param(
        "paddle",
        {"Worker": -1},
        ["spec.replicaSpecs.Worker.replicas: must not be negative, got -1; set it to 1 or more."],
        id="negative-replicas",
    ),
    pytest.param(
        "tf",
        {"Worker": 1},
        [
            "spec.framework.name: unknown framework 'tf'; use one of jax, mpi, mxnet, "
            "paddle, pytorch, tensorflow."
        ],
        id="unknown-framework",
    ),
    pytest.param(
        "PyTorch",
        {"Worker": 1},
        ["spec.framework.name: unknown framework 'PyTorch'; write it in lower case: pytorch."],
        id="framework-case",
    ),
]


@pytest.mark.parametrize(("framework", "roles", "errors"), VALIDATE_CASES)
def test_validate(framework: str, roles: dict[str, int], errors: list[str]) -> None:
    assert fw.validate(framework, roles) == errors


def test_every_error_names_a_spec_field() -> None:
    for spec in fw.FRAMEWORKS.values():
        for err in spec.validate({"Nope": 1, "Worker": 0}):
            assert err.startswith("spec.replicaSpecs.")
            assert err.endswith(".")


def test_get_unknown_framework_raises_value_error() -> None:
    with pytest.raises(ValueError, match=r"spec\.framework\.name: unknown framework 'torch'"):
        fw.get("torch")
    with pytest.raises(fw.UnknownFrameworkError):
        fw.wire("torch", gang(("Worker", 0, 0, 8)))


# --- ranks -----------------------------------------------------------------------------

RANK_CASES = [
    pytest.param(
        [("Worker", 0, 2, 8), ("Worker", 1, 0, 8), ("Worker", 2, 1, 8)],
        [("Worker", 1, 0), ("Worker", 2, 1), ("Worker", 0, 2)],
        id="topology-order-not-index",
    ),
    pytest.param(
        [("Chief", 0, 1, 8), ("Evaluator", 0, 2, 1), ("Worker", 0, 3, 8), ("Worker", 1, 0, 8)],
        [("Worker", 1, 0), ("Chief", 0, 1), ("Worker", 0, 2)],
        id="gaps-from-other-roles-renumbered",
    ),
    pytest.param(
        [("Worker", 1, None, 8), ("Worker", 0, None, 8)],
        [("Worker", 0, 0), ("Worker", 1, 1)],
        id="unplaced-falls-back-to-index",
    ),
    pytest.param(
        [("Worker", 0, None, 8), ("Chief", 0, None, 8)],
        [("Chief", 0, 0), ("Worker", 0, 1)],
        id="unplaced-role-order-then-index",
    ),
]


@pytest.mark.parametrize(("members", "order"), RANK_CASES)
def test_ranked_members(
    members: list[tuple[str, int, int | None, int]], order: list[tuple[str, int, int]]
) -> None:
    got = ranked_members(gang(*members), ("Chief", "Worker"))
    assert [(m.role, m.index, m.rank) for m in got] == order


@pytest.mark.parametrize(
    ("members", "message"),
    [
        pytest.param(
            [("Worker", 0, 0, 8), ("Worker", 1, None, 8)], "have no rank", id="mixed-none"
        ),
        pytest.param(
            [("Worker", 0, 0, 8), ("Worker", 1, 0, 8)], r"share rank \[0\]", id="duplicate-rank"
        ),
    ],
)
def test_ranked_members_rejects_bad_ranks(
    members: list[tuple[str, int, int | None, int]], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ranked_members(gang(*members), ("Worker",))


def test_wire_rejects_roles_of_another_framework() -> None:
    with pytest.raises(ValueError, match="pytorch has no role Launcher"):
        fw.wire("pytorch", gang(("Launcher", 0, None, 0), ("Worker", 0, 0, 8)))


def test_wire_rejects_duplicate_members() -> None:
    with pytest.raises(ValueError, match="duplicate members Worker-0"):
        fw.wire("pytorch", gang(("Worker", 0, 0, 8), ("Worker", 0, 1, 8)))


@pytest.mark.parametrize(
    ("framework", "members"),
    [
        ("pytorch", [("Worker", 0, 0, 8), ("Worker", 1, 1, 8)]),
        ("jax", [("Worker", 0, 0, 8), ("Worker", 1, 1, 8)]),
        ("paddle", [("Worker", 0, 0, 8), ("Worker", 1, 1, 8)]),
        ("tensorflow", [("Chief", 0, 0, 4), ("Worker", 0, 1, 4), ("PS", 0, None, 0)]),
        ("mpi", [("Launcher", 0, None, 0), ("Worker", 0, 0, 8)]),
        ("mxnet", [("Scheduler", 0, None, 0), ("Server", 0, None, 0), ("Worker", 0, 0, 8)]),
    ],
)
def test_wiring_is_deterministic_and_covers_every_member(
    framework: str, members: list[tuple[str, int, int | None, int]]
) -> None:
    inp = gang(*members)
    shuffled = WiringInput(inp.job, inp.namespace, tuple(reversed(inp.members)), inp.port)
    a, b = fw.wire(framework, inp), fw.wire(framework, shuffled)
    assert a == b
    assert list(a.env) == sorted(m.key for m in inp.members)
    for env in a.env.values():
        assert list(env) == sorted(env)
        assert all(isinstance(v, str) for v in env.values())
    assert list(a.container_ports) == sorted({m.role for m in inp.members})

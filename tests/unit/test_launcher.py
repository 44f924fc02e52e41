"""trainop-launch: PCIe distance classes, NIC choice and env on fake DGX A100/H100/PCIe trees."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.unit import fake_sysfs
from trainop.launcher import discover, main, topology
from trainop.launcher.topology import PciDevice
from trainop.nccl.profiles import DGX_A100_HCAS, DGX_H100_HCAS


def machine(tmp_path: Path, name: str, gpus: set[int] | None = None) -> Path:
    return fake_sysfs.build(fake_sysfs.MACHINES[name](), tmp_path, gpus_in_container=gpus)


def found(root: Path) -> tuple[discover.Gpus, tuple[PciDevice, ...]]:
    return discover.discover_gpus(root), discover.discover_nics(root)


# --- switches(): which upstream ports a device hangs below -----------------------------

SWITCH_CASES = [
    ("root-port-only", ("pci0000:00", "0000:00:01.0", "0000:01:00.0"), ()),
    ("on-root-bus", ("pci0000:00", "0000:00:02.0"), ()),
    ("one-switch", ("pci0000:00", "r", "up", "down", "dev"), ("up",)),
    ("two-switches", ("pci0000:00", "r", "up1", "d1", "up2", "d2", "dev"), ("up1", "up2")),
]


@pytest.mark.parametrize(("name", "path", "want"), SWITCH_CASES, ids=[c[0] for c in SWITCH_CASES])
def test_switches(name: str, path: tuple[str, ...], want: tuple[str, ...]) -> None:
    assert topology.switches(path) == want


# --- distance classes as `nvidia-smi topo -m` prints them -------------------------------

DISTANCE_CASES = [
    ("a100-gpu0-own-nics", "dgx-a100", "GPU0", {"mlx5_0": "PXB", "mlx5_1": "PXB"}),
    ("a100-gpu0-other-complex", "dgx-a100", "GPU0", {"mlx5_2": "SYS", "mlx5_9": "SYS"}),
    ("a100-gpu0-storage", "dgx-a100", "GPU0", {"mlx5_4": "SYS", "mlx5_10": "SYS"}),
    ("a100-gpu5", "dgx-a100", "GPU5", {"mlx5_6": "PXB", "mlx5_7": "PXB", "mlx5_8": "SYS"}),
    ("h100-gpu0", "dgx-h100", "GPU0", {"mlx5_0": "PIX", "mlx5_3": "NODE", "mlx5_6": "SYS"}),
    ("h100-gpu0-inband", "dgx-h100", "GPU0", {"mlx5_1": "NODE", "mlx5_7": "SYS"}),
    ("h100-gpu7", "dgx-h100", "GPU7", {"mlx5_11": "PIX", "mlx5_10": "NODE", "mlx5_5": "SYS"}),
    ("pcie-gpu0", "pcie-box", "GPU0", {"mlx5_0": "PHB", "mlx5_1": "SYS"}),
    ("pcie-gpu1", "pcie-box", "GPU1", {"mlx5_0": "NODE", "mlx5_1": "SYS"}),
    ("pcie-gpu3", "pcie-box", "GPU3", {"mlx5_0": "SYS", "mlx5_1": "PHB"}),
]


@pytest.mark.parametrize(
    ("name", "box", "gpu", "want"), DISTANCE_CASES, ids=[c[0] for c in DISTANCE_CASES]
)
def test_distance_classes(
    tmp_path: Path, name: str, box: str, gpu: str, want: dict[str, str]
) -> None:
    gpus, nics = found(machine(tmp_path, box))
    row = topology.matrix(gpus.devices, nics)[gpu]
    assert {nic: row[nic] for nic in want} == want


def test_gpus_are_in_bus_order_with_model(tmp_path: Path) -> None:
    gpus, nics = found(machine(tmp_path, "dgx-h100"))
    assert gpus.source == "procfs"
    assert [g.bdf for g in gpus.devices][:2] == ["0000:1b:00.0", "0000:43:00.0"]
    assert {g.model for g in gpus.devices} == {fake_sysfs.H100_MODEL}
    assert [g.numa for g in gpus.devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert len(nics) == 12


def test_whole_node_choice_matches_the_operator_profiles(tmp_path: Path) -> None:
    """Full nodes: the launcher's nearest NICs are exactly the built-in profiles' HCAs."""
    for box, hcas in (("dgx-a100", DGX_A100_HCAS), ("dgx-h100", DGX_H100_HCAS)):
        gpus, nics = found(machine(tmp_path / box, box))
        assert topology.union_in_order(topology.choose(gpus.devices, nics)) == hcas


# --- the environment plan ----------------------------------------------------------------


@dataclass
class PlanCase:
    name: str
    box: str
    want: dict[str, str]
    gpus: set[int] | None = None
    env: dict[str, str] = field(default_factory=dict)
    says: tuple[str, ...] = ()


A100_ALL = "=" + ",".join(DGX_A100_HCAS)
PLAN_CASES = [
    PlanCase(
        "a100-whole-node",
        "dgx-a100",
        {"NCCL_IB_HCA": A100_ALL, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "NCCL_SOCKET_IFNAME": "=eth0"},
        says=("8 GPU(s) via procfs (NVIDIA A100-SXM4-80GB)", "GPU0->mlx5_0+mlx5_1 PXB"),
    ),
    PlanCase(
        "a100-one-gpu-container",
        "dgx-a100",
        {"NCCL_IB_HCA": "=mlx5_6,mlx5_7"},
        gpus={5},
        env={"NCCL_IB_HCA": A100_ALL},
        says=(f"within NCCL_IB_HCA={A100_ALL}",),
    ),
    PlanCase(
        "h100-cuda-visible-devices",
        "dgx-h100",
        {"NCCL_IB_HCA": "=mlx5_4,mlx5_5"},
        env={"CUDA_VISIBLE_DEVICES": "2,3"},
        says=("2 GPU(s)", "CUDA_VISIBLE_DEVICES=2,3", "GPU2->mlx5_4 PIX"),
    ),
    PlanCase(
        "h100-bound-by-operator-env",
        "dgx-h100",
        {"NCCL_IB_HCA": "=mlx5_0,mlx5_3"},
        gpus={2},
        env={"NCCL_IB_HCA": "=mlx5_0,mlx5_3"},
        says=("GPU0->mlx5_0+mlx5_3 NODE",),
    ),
    PlanCase(
        "h100-exclusion-list",
        "dgx-h100",
        {"NCCL_IB_HCA": "=mlx5_3,mlx5_4,mlx5_5"},
        gpus={0},
        env={"NCCL_IB_HCA": "^mlx5_0,mlx5_1,mlx5_2"},
        says=("GPU0->mlx5_3+mlx5_4+mlx5_5 NODE",),
    ),
    PlanCase(
        "h100-uuid-visible-devices-ignored",
        "dgx-h100",
        {"NCCL_IB_HCA": "=" + ",".join(DGX_H100_HCAS)},
        env={"CUDA_VISIBLE_DEVICES": "GPU-1234"},
        says=("is not indices",),
    ),
    PlanCase(
        "nothing-allowed",
        "dgx-h100",
        {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
        env={"NCCL_IB_HCA": "=mlx4_0"},
        says=("no RDMA NIC allowed by NCCL_IB_HCA==mlx4_0",),
    ),
    PlanCase(
        "socket-ifname-kept",
        "pcie-box",
        {"NCCL_IB_HCA": "=mlx5_0,mlx5_1"},
        env={"NCCL_SOCKET_IFNAME": "bond0"},
        says=("NCCL_SOCKET_IFNAME=bond0 kept", "GPU1->mlx5_0 NODE", "GPU2->mlx5_1 NODE"),
    ),
]


@pytest.mark.parametrize("case", PLAN_CASES, ids=[c.name for c in PLAN_CASES])
def test_plan(tmp_path: Path, case: PlanCase) -> None:
    root = machine(tmp_path, case.box, case.gpus)
    gpus, nics = found(root)
    plan = main.make_plan(case.env, gpus, nics, discover.default_route_interface(root))
    assert {k: plan.env.get(k) for k in case.want} == case.want
    if "NCCL_SOCKET_IFNAME" in case.env:
        assert "NCCL_SOCKET_IFNAME" not in plan.env
    line = plan.line(["torchrun", "train.py"])
    assert line.endswith("exec torchrun train.py") and "\n" not in line
    for text in case.says:
        assert text in line


def test_no_gpu_passes_through(tmp_path: Path) -> None:
    gpus, nics = found(tmp_path)
    plan = main.make_plan({}, gpus, nics, "eth0")
    assert plan.env == {}
    assert "no NVIDIA GPU found" in plan.line(["python", "x.py"])


def test_no_nic_leaves_hca_alone(tmp_path: Path) -> None:
    devs = [d for d in fake_sysfs.pcie_box() if d.kind == fake_sysfs.GPU]
    root = fake_sysfs.build(devs, tmp_path)
    plan = main.make_plan({}, *found(root), "eth0")
    assert "NCCL_IB_HCA" not in plan.env
    assert "no RDMA NIC" in plan.line(["x"])


def test_topo_file(tmp_path: Path) -> None:
    root = machine(tmp_path / "m", "pcie-box")
    topo = tmp_path / "topo.xml"
    topo.write_text("<system/>")
    plan = main.make_plan({}, *found(root), "", str(topo))
    assert plan.env["NCCL_TOPO_FILE"] == str(topo)
    missing = main.make_plan({}, *found(root), "", str(tmp_path / "nope.xml"))
    assert "NCCL_TOPO_FILE" not in missing.env
    assert "not found" in missing.line(["x"])


def test_soft_rdma_device_is_skipped(tmp_path: Path) -> None:
    root = machine(tmp_path, "pcie-box")
    soft = root / "sys/devices/virtual/infiniband/rxe0"
    soft.mkdir(parents=True)
    (root / "sys/class/infiniband/rxe0").symlink_to(soft)
    assert [n.name for n in discover.discover_nics(root)] == ["mlx5_0", "mlx5_1"]


# --- NVML ------------------------------------------------------------------------------


def fake_nvml(bus_ids: list[str], fail: bool = False) -> Any:
    def init() -> None:
        if fail:
            raise RuntimeError("NVML Shared Library Not Found")

    return SimpleNamespace(
        nvmlInit=init,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: len(bus_ids),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetPciInfo=lambda h: SimpleNamespace(busId=bus_ids[h].encode()),
        nvmlDeviceGetName=lambda h: "NVIDIA H100 80GB HBM3",
    )


def test_nvml_is_preferred_and_normalized(tmp_path: Path) -> None:
    root = machine(tmp_path, "dgx-h100", gpus=set())  # procfs shows no GPU at all
    gpus = discover.discover_gpus(root, fake_nvml(["00000000:C3:00.0", "00000000:1B:00.0"]))
    assert gpus.source == "NVML"
    assert [g.bdf for g in gpus.devices] == ["0000:1b:00.0", "0000:c3:00.0"]
    plan = main.make_plan({}, gpus, discover.discover_nics(root), "eth0")
    assert plan.env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_9"


def test_nvml_failure_falls_back_to_procfs(tmp_path: Path) -> None:
    root = machine(tmp_path, "dgx-h100", gpus={0})
    gpus = discover.discover_gpus(root, fake_nvml([], fail=True))
    assert gpus.source == "procfs" and len(gpus.devices) == 1
    assert "NVML failed" in gpus.note


@pytest.mark.parametrize(
    ("raw", "want"),
    [("00000000:1B:00.0", "0000:1b:00.0"), ("0000:07:00.0", "0000:07:00.0"), ("junk", "junk")],
)
def test_normalize_bdf(raw: str, want: str) -> None:
    assert discover.normalize_bdf(raw) == want


# --- the command ------------------------------------------------------------------------


def test_main_dry_run_prints_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(main.ROOT_ENV, str(machine(tmp_path, "dgx-h100", gpus={7})))
    monkeypatch.delenv("NCCL_IB_HCA", raising=False)
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    main.main(["--dry-run", "--", "torchrun", "t.py"])
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "CUDA_DEVICE_ORDER=PCI_BUS_ID",
        "NCCL_IB_HCA==mlx5_11",
        "NCCL_SOCKET_IFNAME==eth0",
    ]
    assert err.startswith("trainop-launch: 1 GPU(s) via procfs") and err.count("\n") == 1


def test_main_execs_with_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(main.ROOT_ENV, str(machine(tmp_path, "pcie-box", gpus={3})))
    monkeypatch.delenv("NCCL_IB_HCA", raising=False)
    calls: list[tuple[str, list[str], str]] = []
    monkeypatch.setattr(
        main.os, "execvp", lambda f, a: calls.append((f, a, main.os.environ["NCCL_IB_HCA"]))
    )
    main.main(["python", "-c", "pass"])
    assert calls == [("python", ["python", "-c", "pass"], "=mlx5_1")]


def test_main_without_gpu_execs_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(main.ROOT_ENV, str(tmp_path))
    monkeypatch.setattr(main, "_load_nvml", lambda: None)
    before = dict(main.os.environ)
    calls: list[list[str]] = []
    monkeypatch.setattr(main.os, "execvp", lambda f, a: calls.append(a))
    main.main(["--", "echo", "hi"])
    assert calls == [["echo", "hi"]]
    assert dict(main.os.environ) == before
    assert "no NVIDIA GPU found" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param([], "a COMMAND to run is required", id="no-command"),
        pytest.param(["--bogus", "x"], "unrecognized arguments: --bogus", id="unknown-option"),
        pytest.param(["--topo-file"], "--topo-file: expected one argument", id="missing-value"),
    ],
)
def test_main_bad_arguments(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.startswith("usage: trainop-launch") and message in err, err


def test_main_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main.main(["--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    assert out.startswith("usage: trainop-launch [-h] [--dry-run] [--topo-file PATH]")
    assert main.TOPO_FILE_ENV in out


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        pytest.param(["python", "-c", "pass"], (False, "", ["python", "-c", "pass"]), id="bare"),
        pytest.param(["--", "echo", "hi"], (False, "", ["echo", "hi"]), id="separator"),
        pytest.param(["--dry-run"], (True, "", []), id="dry-run-alone"),
        pytest.param(["--topo-file", "t.xml", "a"], (False, "t.xml", ["a"]), id="topo-file"),
        pytest.param(["--topo-file=t.xml", "--", "a"], (False, "t.xml", ["a"]), id="topo-file="),
        pytest.param(
            ["torchrun", "--dry-run", "--", "t.py"],
            (False, "", ["torchrun", "--dry-run", "--", "t.py"]),
            id="trainer-options-untouched",
        ),
    ],
)
def test_arguments(
    argv: list[str], want: tuple[bool, str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(main.TOPO_FILE_ENV, raising=False)
    assert main._parse(argv) == want


def test_exec_failure_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(main.ROOT_ENV, str(tmp_path))
    with pytest.raises(SystemExit) as exc:
        main.main(["/no/such/trainer"])
    assert "cannot exec /no/such/trainer" in str(exc.value.code)


def test_ssh_keys_installed_with_strict_modes(tmp_path: Path) -> None:
    src, home = tmp_path / "secret", tmp_path / "home"
    src.mkdir()
    for name in main.SSH_FILES:
        (src / name).write_text(name)
        (src / name).chmod(0o644)
    said = main.install_ssh_keys(src, home)
    assert "installed" in said
    assert (home / ".ssh").stat().st_mode & 0o777 == 0o700
    for name in main.SSH_FILES:
        assert (home / ".ssh" / name).stat().st_mode & 0o777 == 0o600
    assert main.install_ssh_keys(tmp_path / "none", home) == ""

"""Fake sysfs/procfs trees of GPU machines, built from data, for the trainop-launch tests.

A machine is a list of `Dev` rows: a GPU or RDMA NIC, its chain of PCI bridges from the
root complex down, and its NUMA node. `build(machine, root)` lays out what the kernel
and the NVIDIA driver would show: /sys/devices/pci.../<bridges>/<device>/numa_node,
/sys/bus/pci/devices/<bdf> links, /sys/class/infiniband/<nic> links with `device`,
/proc/driver/nvidia/gpus/<bdf>/information and /proc/net/route.

The shapes follow public facts:
- DGX A100: 8 A100 GPUs, 8 single-port ConnectX-6 compute NICs and 2 dual-port
  storage NICs, 2 CPUs (DGX A100 User Guide,
  https://docs.nvidia.com/dgx/dgxa100-user-guide/introduction-to-dgxa100.html). Each GPU
  pair sits in a PCIe switch complex with two compute NICs, and `nvidia-smi topo -m`
  on the machine shows PXB between a GPU and both NICs of its complex: modelled as a
  level-1 switch whose downstream ports lead to one level-2 switch per GPU and to the
  two NICs directly.
- DGX H100: 8 H100 GPUs, each paired with one ConnectX-7 through a PCIe switch; GPU0..3
  on CPU 0 with mlx5_0,3,4,5 and GPU4..7 on CPU 1 with mlx5_6,9,10,11; NIC bus numbers
  from the port table (ibp24s0 = bus 0x18 ...) of the DGX H100 User Guide, "Network
  Modules" (https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html).
  The in-band/storage NICs (mlx5_1,2,7,8) are modelled on their own root complexes.
- A PCIe box: 2 sockets, 4 PCIe GPUs on CPU root ports (no switch), one NIC per socket;
  it exercises PHB, NODE and SYS.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

GPU, NIC = "gpu", "nic"


@dataclass(frozen=True)
class Dev:
    kind: str
    name: str  # GPU model for GPUs, RDMA device name for NICs
    chain: tuple[str, ...]  # root complex, bridges..., device BDF
    numa: int

    @property
    def bdf(self) -> str:
        return self.chain[-1]


def bdf(bus: int, dev: int = 0, fn: int = 0) -> str:
    return f"0000:{bus:02x}:{dev:02x}.{fn}"


def rc(bus: int) -> str:
    return f"pci0000:{bus:02x}"


A100_MODEL = "NVIDIA A100-SXM4-80GB"
H100_MODEL = "NVIDIA H100 80GB HBM3"
L40S_MODEL = "NVIDIA L40S"


def _a100_complex(
    base: int, gpus: tuple[int, int], nics: tuple[tuple[str, int], ...], numa: int
) -> list[Dev]:
    """One switch complex: root port -> L1 switch -> (L2 switch -> GPU) x2 and NIC x2."""
    root, port = rc(base), bdf(base, 1, 1)
    l1_up = bdf(base + 1)
    out = []
    for i, gpu_bus in enumerate(gpus):
        down = bdf(base + 2, 0x10 + i)
        l2_up, l2_down = bdf(gpu_bus - 2), bdf(gpu_bus - 1)
        out.append(
            Dev(GPU, A100_MODEL, (root, port, l1_up, down, l2_up, l2_down, bdf(gpu_bus)), numa)
        )
    for i, (name, nic_bus) in enumerate(nics):
        down = bdf(base + 2, i)
        out.append(Dev(NIC, name, (root, port, l1_up, down, bdf(nic_bus)), numa))
    return out


def dgx_a100() -> list[Dev]:
    devs = [
        *_a100_complex(0x00, (0x07, 0x0F), (("mlx5_0", 0x0C), ("mlx5_1", 0x12)), 3),
        *_a100_complex(0x40, (0x47, 0x4E), (("mlx5_2", 0x4B), ("mlx5_3", 0x54)), 1),
        *_a100_complex(0x80, (0x87, 0x90), (("mlx5_6", 0x8D), ("mlx5_7", 0x94)), 7),
        *_a100_complex(0xB0, (0xB7, 0xBD), (("mlx5_8", 0xBA), ("mlx5_9", 0xCC)), 5),
    ]
    # Storage NICs: two dual-port cards (one RDMA device per port) on their own root ports.
    for name, bus, fn, numa in (
        ("mlx5_4", 0x61, 0, 2),
        ("mlx5_5", 0x61, 1, 2),
        ("mlx5_10", 0xE1, 0, 6),
        ("mlx5_11", 0xE1, 1, 6),
    ):
        devs.append(Dev(NIC, name, (rc(bus - 1), bdf(bus - 1, 3, 1), bdf(bus, 0, fn)), numa))
    return devs


H100_PAIRS = (  # GPU bus, NIC name, NIC bus, NUMA
    (0x1B, "mlx5_0", 0x18, 0),
    (0x43, "mlx5_3", 0x40, 0),
    (0x52, "mlx5_4", 0x4F, 0),
    (0x61, "mlx5_5", 0x5E, 0),
    (0x9D, "mlx5_6", 0x9A, 1),
    (0xC3, "mlx5_9", 0xC0, 1),
    (0xD1, "mlx5_10", 0xCE, 1),
    (0xDF, "mlx5_11", 0xDC, 1),
)


def dgx_h100() -> list[Dev]:
    devs = []
    for gpu_bus, nic, nic_bus, numa in H100_PAIRS:
        root_bus = nic_bus - 3
        root, port, up = rc(root_bus), bdf(root_bus, 1, 1), bdf(root_bus + 1)
        devs.append(
            Dev(GPU, H100_MODEL, (root, port, up, bdf(root_bus + 2, 1), bdf(gpu_bus)), numa)
        )
        devs.append(Dev(NIC, nic, (root, port, up, bdf(root_bus + 2, 0), bdf(nic_bus)), numa))
    for name, bus, numa in (
        ("mlx5_1", 0x29, 0),
        ("mlx5_2", 0x2A, 0),
        ("mlx5_7", 0xA9, 1),
        ("mlx5_8", 0xAA, 1),
    ):
        devs.append(
            Dev(NIC, name, (rc(bus & 0xF0), bdf(bus & 0xF0, bus & 0x0F, 1), bdf(bus)), numa)
        )
    return devs


def pcie_box() -> list[Dev]:
    """Socket 0: root complexes 00 (GPU0 + mlx5_0 on two root ports) and 40 (GPU1);
    socket 1: 80 (GPU2), c0 (GPU3 + mlx5_1)."""
    return [
        Dev(GPU, L40S_MODEL, (rc(0x00), bdf(0x00, 1, 1), bdf(0x01)), 0),
        Dev(NIC, "mlx5_0", (rc(0x00), bdf(0x00, 3, 1), bdf(0x02)), 0),
        Dev(GPU, L40S_MODEL, (rc(0x40), bdf(0x40, 1, 1), bdf(0x41)), 0),
        Dev(GPU, L40S_MODEL, (rc(0x80), bdf(0x80, 1, 1), bdf(0x81)), 1),
        Dev(GPU, L40S_MODEL, (rc(0xC0), bdf(0xC0, 1, 1), bdf(0xC1)), 1),
        Dev(NIC, "mlx5_1", (rc(0xC0), bdf(0xC0, 3, 1), bdf(0xC2)), 1),
    ]


MACHINES = {"dgx-a100": dgx_a100, "dgx-h100": dgx_h100, "pcie-box": pcie_box}

ROUTE = (
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    "eth0\t00000000\t0101A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
    "eth0\t0001A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
)


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


def build(machine: list[Dev], root: Path, *, gpus_in_container: set[int] | None = None) -> Path:
    """Lay the machine out under `root`; `gpus_in_container` limits the procfs GPU list
    (bus order indices) the way the NVIDIA container runtime does."""
    gpu_order = sorted(d.bdf for d in machine if d.kind == GPU)
    for dev in machine:
        path = root / "sys/devices" / Path(*dev.chain)
        path.mkdir(parents=True, exist_ok=True)
        (path / "numa_node").write_text(f"{dev.numa}\n")
        _link(root / "sys/bus/pci/devices" / dev.bdf, path)
        if dev.kind == NIC:
            ib = path / "infiniband" / dev.name
            ib.mkdir(parents=True)
            _link(ib / "device", path)
            _link(root / "sys/class/infiniband" / dev.name, ib)
        elif gpus_in_container is None or gpu_order.index(dev.bdf) in gpus_in_container:
            info = root / "proc/driver/nvidia/gpus" / dev.bdf
            info.mkdir(parents=True)
            (info / "information").write_text(f"Model: \t\t {dev.name}\nIRQ:   \t\t 42\n")
    (root / "proc/net").mkdir(parents=True, exist_ok=True)
    (root / "proc/net/route").write_text(ROUTE)
    return root

"""PCIe distance classes between a GPU and a NIC, and the nearest NICs of a set of GPUs.

Pure functions over `PciDevice` records; `trainop.launcher.discover` builds those records
from sysfs, `trainop.launcher.main` turns the choice into NCCL environment variables.
Standard library only: this package runs inside arbitrary (NGC) training images.

Classes, nearest first, as `nvidia-smi topo -m` names them in its legend
(https://docs.nvidia.com/deploy/nvidia-smi/index.html, "topo"; the same levels are
NVML's nvmlGpuTopologyLevel_t, https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceEnumvs.html):

- PIX: the path crosses one PCIe switch;
- PXB: it crosses several switches but not the host bridge;
- PHB: it crosses a PCIe host bridge (the two sit under different root ports of one root
  complex);
- NODE: it crosses the interconnect between host bridges of one NUMA node;
- SYS: it crosses the link between NUMA nodes (UPI, Infinity Fabric).

How switches are recognised in a sysfs path. A device's canonical path is
`/sys/devices/pciDDDD:BB/<root port>/.../<device>`: one directory per bridge on the way
down. A PCIe switch shows as two bridge levels, its upstream port and then one of its
downstream ports (PCIe Base Specification, "Switch" topology: a switch is a set of
virtual PCI-to-PCI bridges, one upstream and several downstream). Counting from the
device upward, the bridges therefore alternate downstream port, upstream port, ..., root
port, and the upstream port names the switch. Two devices share a switch when they share
its upstream port.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

CLASSES = ("PIX", "PXB", "PHB", "NODE", "SYS")
_RANK = {name: i for i, name in enumerate(CLASSES)}


@dataclass(frozen=True)
class PciDevice:
    """A GPU or an RDMA NIC as sysfs places it.

    `path` is the chain under /sys/devices, root complex first and the device's own
    address last, e.g. ("pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0",
    "0000:03:00.0"). `numa` is -1 when the kernel does not know.
    """

    name: str
    bdf: str
    path: tuple[str, ...]
    numa: int = -1
    model: str = ""


def switches(path: Sequence[str]) -> tuple[str, ...]:
    """The upstream ports (one per switch) above a device, root side first."""
    bridges = list(path[1:-1])
    upward = list(reversed(bridges))
    return tuple(reversed(upward[1::2]))


def distance(a: PciDevice, b: PciDevice) -> str:
    """The `nvidia-smi topo -m` class of the PCIe path between two devices."""
    if not a.path or not b.path or a.path[0] != b.path[0]:
        return "NODE" if a.numa == b.numa else "SYS"
    sa, sb = switches(a.path), switches(b.path)
    common = 0
    for x, y in zip(sa, sb, strict=False):
        if x != y:
            break
        common += 1
    if common == 0:
        return "PHB"
    crossed = len(sa) + len(sb) - 2 * common + 1
    return "PIX" if crossed == 1 else "PXB"


def _natural(name: str) -> tuple[object, ...]:
    """Sort key so that mlx5_10 comes after mlx5_9."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


@dataclass(frozen=True)
class GpuChoice:
    """The NICs nearest to one GPU and their class."""

    gpu: PciDevice
    klass: str
    nics: tuple[str, ...]


def nearest_nics(gpu: PciDevice, nics: Iterable[PciDevice]) -> GpuChoice:
    """All NICs at the smallest distance class from `gpu` (ties are all kept)."""
    by_class: dict[str, list[str]] = {}
    for nic in nics:
        by_class.setdefault(distance(gpu, nic), []).append(nic.name)
    if not by_class:
        return GpuChoice(gpu, "", ())
    best = min(by_class, key=_RANK.__getitem__)
    return GpuChoice(gpu, best, tuple(sorted(by_class[best], key=_natural)))


def choose(gpus: Sequence[PciDevice], nics: Sequence[PciDevice]) -> tuple[GpuChoice, ...]:
    """Per GPU (in the given order) the nearest NICs."""
    return tuple(nearest_nics(g, nics) for g in gpus)


def union_in_order(choices: Iterable[GpuChoice]) -> tuple[str, ...]:
    """Every chosen NIC once, in GPU order: the value NCCL_IB_HCA lists."""
    out: list[str] = []
    for ch in choices:
        out.extend(n for n in ch.nics if n not in out)
    return tuple(out)


def matrix(gpus: Sequence[PciDevice], nics: Sequence[PciDevice]) -> dict[str, dict[str, str]]:
    """GPU name -> NIC name -> class, like the GPU rows x NIC columns of `nvidia-smi topo -m`."""
    return {g.name: {n.name: distance(g, n) for n in nics} for g in gpus}

"""Reads the GPUs, RDMA NICs and default-route interface of the machine trainop-launch runs on.

Every path is taken under an injectable `root` (normally "/"), so unit tests hand in fake
sysfs/procfs trees. Produces `trainop.launcher.topology.PciDevice` records; the distance
maths lives there, the environment it leads to in `trainop.launcher.main`.
Standard library only (NVML through `pynvml` when the image happens to ship it).

Sources:
- GPUs, first choice NVML (`nvidia-ml-py` provides the `pynvml` module,
  https://pypi.org/project/nvidia-ml-py/): nvmlDeviceGetCount, nvmlDeviceGetPciInfo(.busId)
  and nvmlDeviceGetName, https://docs.nvidia.com/deploy/nvml-api/. NVML sees only the
  GPUs given to the container.
- GPUs without NVML: the driver's /proc/driver/nvidia/gpus/<bus id>/ directories (the
  NVIDIA container runtime exposes only the container's GPUs there) and their
  "information" file for the model name.
- RDMA NICs: /sys/class/infiniband/<name>/device, a link to the NIC's PCI device
  (https://www.kernel.org/doc/Documentation/ABI/stable/sysfs-class-infiniband).
- Placement of any PCI device: the link /sys/bus/pci/devices/<bdf> resolves to its path
  under /sys/devices; its numa_node file gives the NUMA node
  (https://www.kernel.org/doc/Documentation/ABI/testing/sysfs-bus-pci).
- Default-route interface: /proc/net/route, the row whose destination is 00000000.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainop.launcher.topology import PciDevice


@dataclass(frozen=True)
class Gpus:
    """The GPUs found and how: source is "NVML", "procfs" or "" (none found)."""

    devices: tuple[PciDevice, ...]
    source: str
    note: str = ""


def normalize_bdf(bus_id: str) -> str:
    """NVML's "00000000:07:00.0" (8-digit domain, upper case) as sysfs spells it: 0000:07:00.0."""
    bus_id = bus_id.strip().lower()
    domain, _, rest = bus_id.partition(":")
    if not rest:
        return bus_id
    return f"{int(domain, 16):04x}:{rest}"


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def pci_path(root: Path, bdf: str) -> tuple[str, ...]:
    """The chain under /sys/devices for a PCI address; () when sysfs does not know it."""
    link = root / "sys/bus/pci/devices" / bdf
    return _chain(root, link)


def _chain(root: Path, link: Path) -> tuple[str, ...]:
    if not link.exists():
        return ()
    real = Path(os.path.realpath(link))
    devices = Path(os.path.realpath(root / "sys/devices"))
    try:
        rel = real.relative_to(devices)
    except ValueError:
        return ()
    return tuple(rel.parts)


def numa_node(root: Path, bdf: str) -> int:
    text = _read(root / "sys/bus/pci/devices" / bdf / "numa_node")
    try:
        return int(text)
    except ValueError:
        return -1


def _device(root: Path, name: str, bdf: str, model: str = "") -> PciDevice:
    return PciDevice(name, bdf, pci_path(root, bdf), numa_node(root, bdf), model)


def _nvml_gpus(root: Path, nvml: Any) -> tuple[PciDevice, ...]:
    nvml.nvmlInit()
    try:
        out = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            bus = nvml.nvmlDeviceGetPciInfo(handle).busId
            name = nvml.nvmlDeviceGetName(handle)
            bus = bus.decode() if isinstance(bus, bytes) else str(bus)
            name = name.decode() if isinstance(name, bytes) else str(name)
            out.append((normalize_bdf(bus), name))
    finally:
        nvml.nvmlShutdown()
    out.sort()
    return tuple(_device(root, f"GPU{i}", bdf, model) for i, (bdf, model) in enumerate(out))


def _procfs_model(info: str) -> str:
    for line in info.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Model":
            return value.strip()
    return ""


def _procfs_gpus(root: Path) -> tuple[PciDevice, ...]:
    base = root / "proc/driver/nvidia/gpus"
    if not base.is_dir():
        return ()
    bdfs = sorted(normalize_bdf(p.name) for p in base.iterdir())
    return tuple(
        _device(root, f"GPU{i}", bdf, _procfs_model(_read(base / bdf / "information")))
        for i, bdf in enumerate(bdfs)
    )


def discover_gpus(root: Path, nvml: Any = None) -> Gpus:
    """GPUs in PCI bus order (the order CUDA_DEVICE_ORDER=PCI_BUS_ID gives them)."""
    note = ""
    if nvml is not None:
        try:
            found = _nvml_gpus(root, nvml)
        except Exception as err:  # any NVML failure (no driver, no device): fall back
            note = f"NVML failed ({type(err).__name__}: {err}), read procfs instead"
        else:
            if found:
                return Gpus(found, "NVML")
    found = _procfs_gpus(root)
    if found:
        return Gpus(found, "procfs", note)
    return Gpus((), "", note)


def discover_nics(root: Path) -> tuple[PciDevice, ...]:
    """RDMA devices (/sys/class/infiniband/*) placed on the PCI tree, by name."""
    base = root / "sys/class/infiniband"
    if not base.is_dir():
        return ()
    out = []
    for entry in sorted(base.iterdir()):
        chain = _chain(root, entry / "device")
        if not chain:
            continue  # a soft RDMA device (rxe, siw) has no PCI function: NCCL cannot use it
        bdf = chain[-1]
        out.append(PciDevice(entry.name, bdf, chain, numa_node(root, bdf)))
    return tuple(out)


def default_route_interface(root: Path) -> str:
    """The interface of the IPv4 default route, or "" (then NCCL picks on its own)."""
    lines = _read(root / "proc/net/route").splitlines()[1:]
    for line in lines:
        fields = line.split()
        if len(fields) > 2 and fields[1] == "00000000" and fields[0] != "lo":
            return fields[0]
    return ""

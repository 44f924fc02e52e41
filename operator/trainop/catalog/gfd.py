"""Reads NVIDIA GPU Feature Discovery node labels (both label generations) into typed GPU facts.

Also the node's CPU architecture (`kubernetes.io/arch`), which decides which images it
can run at all.

Also reads how the node shares its GPUs, from the labels GFD and the GPU operator write
(https://github.com/NVIDIA/k8s-device-plugin#shared-access-to-gpus,
https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-sharing.html,
https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-mig.html):
time-slicing or MPS (`nvidia.com/gpu.replicas` > 1, `nvidia.com/gpu.sharing-strategy`, a
"-SHARED" product suffix) and MIG (`nvidia.com/mig.strategy`; under the single strategy the
product ends in "-MIG-<profile>"). Neighbours: `compat` judges nodes on these facts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from trainop.api import constants as c

# A per-GPU memory above this many "MiB" (16 TiB) can only be bytes: some GFD builds and
# hand-written labels give bytes.
_BYTES_THRESHOLD = 1 << 24
_MIB = 1 << 20

SHARING_TIME_SLICING = "time-slicing"
SHARING_MPS = "mps"
SHARING_MIG = "mig"

# "-MIG-1g.5gb", "-MIG-1g.10gb+me": the product suffix of the MIG single strategy.
MIG_SUFFIX = re.compile(r"-MIG-(?P<profile>\d+g\.\d+gb(?:\+[a-z]+)?)$")

_INT = re.compile(r"^\s*(\d+)\s*$")

# The node's CPU architecture, as the kubelet labels every node
# (https://kubernetes.io/docs/reference/labels-annotations-taints/#kubernetes-io-arch): an
# image runs on a node only if it is published for that architecture (Grace nodes, GH200
# and GB200/GB300 trays, are arm64).
LABEL_ARCH = "kubernetes.io/arch"
ARCH_AMD64 = "amd64"
ARCH_ARM64 = "arm64"


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    m = _INT.match(value)
    return int(m.group(1)) if m else None


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """'550.54.14' -> (550, 54, 14); malformed or empty -> None (never raises)."""
    if not text:
        return None
    parts = text.strip().split(".")
    out: list[int] = []
    for p in parts:
        m = _INT.match(p)
        if not m:
            return None
        out.append(int(m.group(1)))
    return tuple(out)


@dataclass(frozen=True)
class GpuFacts:
    """What GFD tells about a node's GPUs.

    Every field is None when its label is missing or malformed."""

    product: str | None = None
    count: int | None = None
    memory_mib: int | None = None
    family: str | None = None
    compute_capability: tuple[int, int] | None = None
    driver: tuple[int, ...] | None = None  # e.g. (550, 54, 14)
    cuda_runtime: tuple[int, int] | None = None  # highest CUDA the driver supports, e.g. (12, 4)
    clique: str | None = None
    # the driver version as the labels spell it ("470.57.02"), for messages: `driver` drops
    # leading zeros of the revision
    driver_label: str | None = None
    replicas: int | None = None  # nvidia.com/gpu.replicas: slices per physical GPU
    sharing: str | None = None  # time-slicing | mps | mig (MIG single strategy), None: whole GPUs
    mig_strategy: str | None = None  # nvidia.com/mig.strategy: single | mixed | none
    mig_profile: str | None = None  # from a "-MIG-<profile>" product (single strategy)
    arch: str | None = None  # kubernetes.io/arch: amd64 | arm64 | ...; None when unlabelled

    @property
    def cpu_arch(self) -> str:
        """The node's architecture; an unlabelled node is taken as amd64 (the kubelet labels
        every node; only hand-written fleets lack it, and those are x86)."""
        return self.arch or ARCH_AMD64

    @property
    def shared(self) -> bool:
        """nvidia.com/gpu on this node is a slice of a GPU, not a whole one."""
        return self.sharing is not None

    @property
    def driver_text(self) -> str | None:
        return ".".join(str(p) for p in self.driver) if self.driver else None

    @property
    def compute_capability_text(self) -> str | None:
        cc = self.compute_capability
        return f"{cc[0]}.{cc[1]}" if cc else None


def _first(labels: Mapping[str, str], *keys: str) -> str | None:
    for k in keys:
        v = labels.get(k)
        if v not in (None, ""):
            return v
    return None


def gpu_facts_from_labels(labels: Mapping[str, str] | None) -> GpuFacts:
    """Parse GFD labels.

    The newer `cuda.driver-version.*` names win over the deprecated `cuda.driver.*`."""
    # Label values are strings on the API; YAML fleets (trainop simulate) may hold numbers.
    labels = {str(k): str(v) for k, v in (labels or {}).items() if v is not None}
    product = _first(labels, c.GFD_PRODUCT)
    cmaj, cmin = _int(labels.get(c.GFD_COMPUTE_MAJOR)), _int(labels.get(c.GFD_COMPUTE_MINOR))
    cc = (cmaj, cmin if cmin is not None else 0) if cmaj is not None else None

    driver = parse_version(labels.get(c.GFD_DRIVER_FULL))
    driver_label = labels.get(c.GFD_DRIVER_FULL, "").strip() if driver is not None else None
    if driver is None:
        dmaj = _int(_first(labels, c.GFD_DRIVER_MAJOR, c.GFD_DRIVER_MAJOR_OLD))
        if dmaj is not None:
            parts = [dmaj]
            texts = [str(dmaj)]
            dmin_s = _first(labels, c.GFD_DRIVER_MINOR, c.GFD_DRIVER_MINOR_OLD)
            drev_s = _first(labels, c.GFD_DRIVER_REVISION, c.GFD_DRIVER_REV_OLD)
            dmin, drev = _int(dmin_s), _int(drev_s)
            if dmin is not None and dmin_s is not None:
                parts.append(dmin)
                texts.append(dmin_s.strip())
                if drev is not None and drev_s is not None:
                    parts.append(drev)
                    texts.append(drev_s.strip())
            driver = tuple(parts)
            driver_label = ".".join(texts)

    rmaj = _int(_first(labels, c.GFD_RUNTIME_MAJOR, c.GFD_RUNTIME_MAJOR_OLD))
    rmin = _int(_first(labels, c.GFD_RUNTIME_MINOR, c.GFD_RUNTIME_MINOR_OLD))
    runtime = (rmaj, rmin if rmin is not None else 0) if rmaj is not None else None

    replicas = _int(labels.get(c.GFD_REPLICAS))
    profile = mig_profile(product)
    return GpuFacts(
        product=product,
        count=_int(labels.get(c.GFD_COUNT)),
        memory_mib=_memory_mib(labels.get(c.GFD_MEMORY)),
        family=_first(labels, c.GFD_FAMILY),
        compute_capability=cc,
        driver=driver,
        cuda_runtime=runtime,
        clique=_first(labels, c.LABEL_GPU_CLIQUE),
        driver_label=driver_label,
        replicas=replicas,
        sharing=_sharing(labels, product, replicas, profile),
        mig_strategy=_first(labels, c.GFD_MIG_STRATEGY),
        mig_profile=profile,
        arch=_first(labels, LABEL_ARCH),
    )


def mig_profile(label: str | None) -> str | None:
    """'NVIDIA-A100-SXM4-40GB-MIG-1g.5gb' -> '1g.5gb' (MIG single strategy); else None."""
    m = MIG_SUFFIX.search(label or "")
    return m.group("profile") if m else None


def _memory_mib(value: str | None) -> int | None:
    """nvidia.com/gpu.memory is MiB; a value too large to be MiB is read as bytes."""
    n = _int(value)
    if n is None:
        return None
    return n // _MIB if n >= _BYTES_THRESHOLD else n


def _sharing(
    labels: Mapping[str, str], product: str | None, replicas: int | None, profile: str | None
) -> str | None:
    if profile is not None:
        return SHARING_MIG
    strategy = (labels.get(c.GFD_SHARING_STRATEGY) or "").strip().lower()
    if strategy in (SHARING_TIME_SLICING, SHARING_MPS):
        return strategy
    if (replicas is not None and replicas > 1) or (product or "").endswith("-SHARED"):
        return SHARING_TIME_SLICING
    return None

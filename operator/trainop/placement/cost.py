"""Fabric cost model: per-GPU bandwidth per topology level and the allreduce time of a placement.

Neighbours: `placement.engine` ranks candidate domains with it and stamps each Placement with
its estimate; the planner shows it in status.placement.estimatedAllreduceSeconds; admission's
topology-aware waiting (`queueing.topowait`) compares a placement with the gang's ideal one;
`bench/placement` reports it per policy. Pure: FabricProfiles in, seconds out.

Levels. A gang's traffic crosses, at worst, one of these links (per GPU, GB/s):
  node     NVLink/NVSwitch (or PCIe without NVLink) inside one node: `nvlink`;
  clique   an NVLink domain spanning nodes (nvidia.com/gpu.clique, e.g. GB200 NVL72): `nvlink`;
  rack     IB/RoCE through one leaf switch: `network` (the node's NIC bandwidth per GPU);
  block    through the spine: `network / spine_oversubscription`;
  cluster  across blocks: `network / block_oversubscription`.
The level is the smallest domain holding every node of the gang.

Allreduce of S bytes over n GPUs on N nodes with g GPUs on the emptiest node (NCCL runs one
ring channel per NIC rail, so between nodes a ring moves at the g GPUs' combined NIC share):
  ring          2(n-1)/n * S / B,  B = min(nvlink if any node holds 2+ GPUs, g * net)
  hierarchical  max_i 2(g_i-1)/g_i * S / nvlink_i + 2(N-1)/N * S / (g * net)
                (reduce-scatter and all-gather inside each node, whose slowest node counts,
                and a ring across nodes on each GPU's shard)
and the estimate is the faster of the two, as NCCL's tuner picks the faster algorithm.
Latency terms are left out: at the 1 GiB reference size they are below 1%. Formulas:
https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md (bus bandwidth) and
https://developer.nvidia.com/blog/massively-scale-deep-learning-training-with-nccl-2-4/ (rings
and trees across nodes).

Defaults per GPU class (a FabricProfile's spec.bandwidth overrides any of them):
  H100/H200 SXM   nvlink 370 (8x H100 ring busbw in nccl-tests; NVLink 4 is 900 GB/s per GPU,
                  https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html),
                  network 50 (one 400 Gb/s NDR port per GPU, same guide);
  H800            nvlink 160 (NVLink limited to 400 GB/s per GPU, about 0.4x of H100's), 50;
  B200, GB200     nvlink 740 (NVLink 5, 1.8 TB/s per GPU), network 50; in a GB200 NVL72
                  rack the 740 also holds between its 18 trays (one nvidia.com/gpu.clique);
  B300, GB300     the same NVLink 5 (GB200 and GB300 both use it,
                  https://docs.nvidia.com/base-command-manager/product-manuals/nvidia-mission-control/nvlinkinfo),
                  network 50 (not raised for ConnectX-8: unconfirmed per system);
  A100 SXM        nvlink 230 (600 GB/s NVSwitch,
                  https://docs.nvidia.com/dgx/dgxa100-user-guide/introduction-to-dgxa100.html),
                  network 25 (one 200 Gb/s HDR port per GPU, same guide);
  A800 SXM        nvlink 150 (NVLink limited to 400 GB/s), network 25;
  V100 SXM2       nvlink 130 (DGX-1 hybrid cube-mesh), network 6.25 (4x 100 Gb/s EDR for 8
                  GPUs, https://docs.nvidia.com/dgx/dgx1-user-guide/introduction-to-dgx1.html);
  anything else   nvlink 12 (PCIe gen3/gen4 x16 peer-to-peer), network 3.125 (one 100 Gb/s
                  port shared by 4 GPUs).
On a node whose FabricProfile is TCP the network share is one 100 Gb/s port (12.5 GB/s) at an
assumed 60% socket efficiency, divided by its GPUs. Spine and cross-block oversubscription
default to 2 and 4: assumptions for a typical shared cluster, not facts of any fabric; a
non-blocking fat tree (e.g. NVIDIA's DGX SuperPOD reference architecture) sets them to 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from trainop.api.constants import LABEL_GPU_CLIQUE
from trainop.api.fabricprofile import FabricProfile
from trainop.inventory import FrozenMap, NodeInfo
from trainop.nccl.profiles import select_profile

GIB = 1 << 30
GB = 1e9
SPINE_OVERSUBSCRIPTION = 2.0
BLOCK_OVERSUBSCRIPTION = 4.0
TCP_NODE_GBPS = 12.5 * 0.6

NODE, CLIQUE, RACK, BLOCK, CLUSTER = "node", "clique", "rack", "block", "cluster"

# (product substring, nvlink GB/s, network GB/s per GPU); first match wins, so the more
# specific names come first.
_CLASSES: tuple[tuple[str, float, float], ...] = (
    ("H800", 160.0, 50.0),
    ("H100", 370.0, 50.0),
    ("H200", 370.0, 50.0),
    ("B200", 740.0, 50.0),  # also GB200
    ("B300", 740.0, 50.0),  # also GB300
    ("A800", 150.0, 25.0),
    ("A100", 230.0, 25.0),
    ("V100-SXM2", 130.0, 6.25),
)
_PCIE = (12.0, 3.125)


@dataclass(frozen=True)
class LinkSpeeds:
    """Per-GPU bandwidth of one node, GB/s, and its fabric's oversubscription factors."""

    nvlink: float
    network: float
    spine_oversubscription: float = SPINE_OVERSUBSCRIPTION
    block_oversubscription: float = BLOCK_OVERSUBSCRIPTION

    def between_nodes(self, level: str) -> float:
        """Per-GPU bandwidth between two nodes whose smallest common domain is `level`."""
        if level == CLIQUE:
            return self.nvlink
        if level == BLOCK:
            return self.network / self.spine_oversubscription
        if level == CLUSTER:
            return self.network / self.block_oversubscription
        return self.network


@dataclass(frozen=True)
class AllreduceEstimate:
    """Seconds per allreduce of `size_bytes`: the faster of ring and hierarchical."""

    seconds: float
    ring_seconds: float
    hierarchical_seconds: float
    level: str  # the widest link crossed: node | clique | rack | block | cluster
    gpus: int
    nodes: int
    size_bytes: int = GIB

    @property
    def algorithm(self) -> str:
        return "ring" if self.ring_seconds <= self.hierarchical_seconds else "hierarchical"


def class_defaults(product: str | None) -> tuple[float, float]:
    """(nvlink, network per GPU) GB/s for a GPU product label value (see the module doc)."""
    name = (product or "").upper()
    for key, nvlink, network in _CLASSES:
        if key in name:
            return nvlink, network
    return _PCIE


def speeds_for(node: NodeInfo, profile: FabricProfile | None) -> LinkSpeeds:
    """The node's LinkSpeeds: its profile's spec.bandwidth over the GPU class defaults."""
    nvlink, network = class_defaults(node.gpu.product)
    spine, block = SPINE_OVERSUBSCRIPTION, BLOCK_OVERSUBSCRIPTION
    if profile is not None and profile.spec.fabric == "TCP":
        network = min(network, TCP_NODE_GBPS / max(1, node.gpus_allocatable))
    bw = profile.spec.bandwidth if profile is not None else None
    if bw is not None:
        nvlink = bw.nvlink_gbps or nvlink
        network = bw.network_gbps_per_gpu or network
        spine = bw.spine_oversubscription or spine
        block = bw.block_oversubscription or block
    return LinkSpeeds(nvlink, network, spine, block)


def common_level(nodes: Sequence[NodeInfo], names: dict[str, str]) -> str:
    """The smallest level one of whose domains holds all `nodes` (`names`: label key ->
    level name, as placement.engine.level_names gives)."""
    if len({n.name for n in nodes}) <= 1:
        return NODE
    paths = [n.topology[:-1] for n in nodes]
    depth = min(len(p) for p in paths)
    common = 0
    while common < depth and all(p[common] == paths[0][common] for p in paths):
        common += 1
    if common == 0:
        return CLUSTER
    key = paths[0][common - 1][0]
    if key == LABEL_GPU_CLIQUE:
        return CLIQUE
    level = names.get(key, key)
    return level if level in (RACK, BLOCK) else CLUSTER


def allreduce_time(
    members: Sequence[tuple[NodeInfo, int, LinkSpeeds]], level: str, size_bytes: int = GIB
) -> AllreduceEstimate:
    """Estimated allreduce of `size_bytes` over the GPUs of `members` ((node, GPUs of the gang
    on it, its speeds)), whose nodes share at best a domain of `level` (see common_level)."""
    used = [(node, g, s) for node, g, s in members if g > 0]
    n = sum(g for _, g, _ in used)
    count = len(used)
    if n <= 1:
        return AllreduceEstimate(0.0, 0.0, 0.0, NODE, n, count, size_bytes)
    size = size_bytes / GB
    g = min(gpus for _, gpus, _ in used)
    nvlink = min(s.nvlink for _, _, s in used)
    if count == 1:
        t = 2 * (n - 1) / n * size / nvlink
        return AllreduceEstimate(t, t, t, NODE, n, 1, size_bytes)
    net = min(s.between_nodes(level) for _, _, s in used)
    multi = any(gpus > 1 for _, gpus, _ in used)
    ring_bw = min(nvlink, g * net) if multi else g * net
    ring = 2 * (n - 1) / n * size / ring_bw
    inside = max(2 * (gpus - 1) / gpus * size / s.nvlink for _, gpus, s in used)
    hier = inside + 2 * (count - 1) / count * size / (g * net)
    return AllreduceEstimate(min(ring, hier), ring, hier, level, n, count, size_bytes)


class FabricCost:
    """LinkSpeeds per node from the cluster's FabricProfiles (and the built-ins), cached by
    node name and labels; `estimate` prices a placement. Pure apart from the cache."""

    def __init__(self, profiles: Sequence[FabricProfile] = ()) -> None:
        self.profiles = tuple(profiles)
        self._cache: dict[str, tuple[FrozenMap[str, str], str | None, int, LinkSpeeds]] = {}

    def speeds(self, node: NodeInfo) -> LinkSpeeds:
        hit = self._cache.get(node.name)
        if (
            hit is not None
            and hit[2] == node.gpus_allocatable
            and (hit[0] is node.labels or hit[0] == node.labels)
        ):
            return hit[3]
        try:
            profile: FabricProfile | None = select_profile(node.labels, self.profiles)
        except LookupError:
            profile = None
        speeds = speeds_for(node, profile)
        self._cache[node.name] = (node.labels, node.gpu.product, node.gpus_allocatable, speeds)
        return speeds

    def estimate(
        self,
        gpus_on: Iterable[tuple[NodeInfo, int]],
        names: dict[str, str],
        size_bytes: int = GIB,
    ) -> AllreduceEstimate:
        """The allreduce estimate of a gang holding `gpus_on` ((node, GPUs)); `names` maps
        topology label keys to level names (placement.engine.level_names)."""
        members = [(node, g, self.speeds(node)) for node, g in gpus_on if g > 0]
        level = common_level([m[0] for m in members], names)
        return allreduce_time(members, level, size_bytes)


DEFAULT_COST = FabricCost()

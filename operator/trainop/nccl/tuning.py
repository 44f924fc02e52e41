"""Turns a FabricProfile and a gang's shape into NCCL env, RDMA resources, IPC_LOCK and /dev/shm.

Neighbours: `trainop.nccl.profiles` picks the profile for the node a pod lands on; the planner
puts the resulting `NcclSettings` into the pod (env, resources.limits, securityContext
capabilities, an emptyDir at /dev/shm, annotations); `trainop-launch` may narrow NCCL_IB_HCA
once the container knows its GPUs (`hcas_for_gpus`). Pure and deterministic.

Decisions (facts from https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html):

* Tuned vs debug knobs. trainop derives only what the fabric needs (NCCL_IB_HCA, RoCE GID/TC,
  NCCL_COLLNET_ENABLE, NCCL_IB_DISABLE on TCP). NVIDIA's debug-only knobs (NCCL_P2P_LEVEL,
  NCCL_NET_GDR_LEVEL, NCCL_ALGO, NCCL_NVLS_ENABLE, NCCL_IB_DISABLE on RDMA) appear only when the
  profile sets them (debugEnv, gdrLevel, nvls=false), never by inference.
* Precedence: derived and explicit profile fields < profile extraEnv < profile debugEnv < the
  job's ncclEnv. `sources` records who set each variable.
* Single-pod gangs need no network: all ranks share the pod's NVLink/PCIe and /dev/shm, so no
  RDMA resource, no IPC_LOCK, no Multus network and no network env. A gang of several pods on
  ONE node is not single-pod: NCCL tells hosts apart by a hash of the hostname (NCCL_HOSTID
  overrides) and every pod has its own hostname, /dev/shm and GPU set, so pods talk through the
  net transport even on one node. RDMA there still beats sockets over the pod network (HCA
  loopback), so such gangs keep the RDMA setup, only without SHARP (no switch to reduce in).
* /dev/shm: mounted (profile shmSize) whenever the pod has more than one GPU, on any fabric,
  because NCCL's intra-node SHM transport lives there and the container runtime's 64Mi default
  is too small for it; and in RDMA pods of multi-pod gangs, as the Network Operator
  conventions say. A one-GPU pod on TCP has no intra-pod peer and gets none from here
  (frameworks may still want one for data loaders; that is their call).
* NCCL_IB_HCA lists every compute HCA of the node, whole node or not: which GPUs the kubelet
  hands a partial-node pod is unknown until the container starts, and NCCL already picks the
  nearest listed NIC per GPU from the PCI topology. The `=` prefix makes names exact, because
  `mlx5_1` would otherwise also match mlx5_10..19.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from trainop.api.fabricprofile import FabricProfile, FabricProfileSpec
from trainop.nccl.names import (
    ANNOTATION_MULTUS_NETWORKS,
    CAP_IPC_LOCK,
    NCCL_COLLNET_ENABLE,
    NCCL_IB_DISABLE,
    NCCL_IB_GID_INDEX,
    NCCL_IB_HCA,
    NCCL_IB_TC,
    NCCL_NET_GDR_LEVEL,
    NCCL_NVLS_ENABLE,
    NCCL_SOCKET_IFNAME,
)

Source = Literal["profile", "derived", "user"]

_NO_ENV: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class NcclSettings:
    """What a pod needs for NCCL on its fabric; the planner copies these into the pod spec."""

    env: dict[str, str]
    """NCCL env, in a fixed order (same inputs -> same order)."""
    rdma_resources: dict[str, int]
    """Extended resources to request per pod (resource name -> count); empty without RDMA."""
    capabilities: tuple[str, ...]
    """Linux capabilities to add to the training container: ("IPC_LOCK",) with RDMA."""
    shm_size: str | None
    """Size of a memory-backed emptyDir at /dev/shm, or None for no such volume."""
    annotations: dict[str, str]
    """Pod annotations, e.g. the Multus networks of the profile."""
    sources: dict[str, Source]
    """For each env name: "profile" (a profile field or its extraEnv/debugEnv), "derived"
    (computed by trainop from the profile and the gang) or "user" (the job's ncclEnv)."""
    profile_name: str
    """The FabricProfile these settings came from."""
    notes: tuple[str, ...] = ()
    """Sentences explaining choices that left something out, for `trainop explain`."""

    def env_list(self) -> list[dict[str, str]]:
        """The env as Kubernetes container `env` entries."""
        return [{"name": k, "value": v} for k, v in self.env.items()]

    def explain(self) -> list[str]:
        """One line per env var with its source, then the notes."""
        lines = [f"{k}={v} ({self.sources[k]})" for k, v in self.env.items()]
        return lines + list(self.notes)


def ib_hca_value(hcas: Sequence[str]) -> str:
    """NCCL_IB_HCA for exactly these HCAs: `=` makes NCCL match whole names (fabrics.md)."""
    return "=" + ",".join(hcas)


def hca_for_gpu(hcas: Sequence[str], gpu_index: int, gpus_on_node: int) -> str:
    """The HCA GPU `gpu_index` uses: hcas[i * len(hcas) // gpus] (GPU pairs share on DGX-1)."""
    if not hcas:
        raise ValueError("no HCAs listed")
    if gpus_on_node < 1 or not 0 <= gpu_index < gpus_on_node:
        raise ValueError(f"GPU {gpu_index} out of range for a node with {gpus_on_node} GPUs")
    return hcas[gpu_index * len(hcas) // gpus_on_node]


def hcas_for_gpus(
    hcas: Sequence[str], gpu_indices: Iterable[int], gpus_on_node: int
) -> tuple[str, ...]:
    """The HCAs serving these GPUs, in GPU order, each once: what trainop-launch narrows to."""
    out: list[str] = []
    for i in sorted(set(gpu_indices)):
        hca = hca_for_gpu(hcas, i, gpus_on_node)
        if hca not in out:
            out.append(hca)
    return tuple(out)


class _Env:
    """Ordered env with the source of each value; a later set() replaces value and source."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.sources: dict[str, Source] = {}

    def set(self, name: str, value: str, source: Source) -> None:
        self.values[name] = value
        self.sources[name] = source

    def update(self, env: Mapping[str, str], source: Source) -> None:
        # Sorted so the result never depends on the caller's mapping order.
        for name in sorted(env):
            self.set(name, str(env[name]), source)


def _check_shape(
    gpus_per_pod: int, pods_in_gang: int, nodes_in_gang: int, gpus_on_node: int | None
) -> None:
    if gpus_per_pod < 0:
        raise ValueError(f"gpus_per_pod must be >= 0, got {gpus_per_pod}")
    if pods_in_gang < 1:
        raise ValueError(f"pods_in_gang must be >= 1, got {pods_in_gang}")
    if not 1 <= nodes_in_gang <= pods_in_gang:
        raise ValueError(
            f"nodes_in_gang must be in 1..pods_in_gang ({pods_in_gang}), got {nodes_in_gang}"
        )
    if gpus_on_node is not None and gpus_on_node < gpus_per_pod:
        raise ValueError(f"gpus_per_pod {gpus_per_pod} exceeds gpus_on_node {gpus_on_node}")


def nccl_settings(
    profile: FabricProfile,
    *,
    gpus_per_pod: int,
    pods_in_gang: int,
    nodes_in_gang: int,
    whole_node: bool,
    gpus_on_node: int | None,
    user_env: Mapping[str, str] = _NO_ENV,
) -> NcclSettings:
    """NCCL settings for one pod of a gang on a node covered by `profile` (rules: module doc).

    `gpus_per_pod` 0 (a parameter server, an MPI launcher) means the pod runs no NCCL rank and
    gets only the job's ncclEnv. `whole_node`/`gpus_on_node` describe the pod's share of its
    node; they are checked and explained but do not narrow NCCL_IB_HCA (module doc).
    """
    _check_shape(gpus_per_pod, pods_in_gang, nodes_in_gang, gpus_on_node)
    spec = profile.spec
    env = _Env()
    rdma_resources: dict[str, int] = {}
    capabilities: tuple[str, ...] = ()
    annotations: dict[str, str] = {}
    shm_size: str | None = None

    runs_nccl = gpus_per_pod > 0
    networked = runs_nccl and pods_in_gang > 1
    rdma = networked and spec.is_rdma
    notes = _shape_notes(runs_nccl, networked)

    if rdma:
        notes += _set_rdma_env(
            spec,
            env,
            gpus_per_pod=gpus_per_pod,
            nodes_in_gang=nodes_in_gang,
            whole_node=whole_node,
            gpus_on_node=gpus_on_node,
        )
        if spec.rdma_resource:
            rdma_resources[spec.rdma_resource] = spec.rdma_resource_per_pod
        capabilities = (CAP_IPC_LOCK,)
    elif networked:
        _set_tcp_env(spec, env)

    if networked and spec.multus_networks:
        annotations[ANNOTATION_MULTUS_NETWORKS] = spec.multus_networks

    if runs_nccl:
        _set_profile_env(spec, env)
        if gpus_per_pod > 1 or rdma:
            shm_size = spec.shm_size

    env.update(user_env, "user")

    return NcclSettings(
        env=env.values,
        rdma_resources=rdma_resources,
        capabilities=capabilities,
        shm_size=shm_size,
        annotations=annotations,
        sources=env.sources,
        profile_name=profile.name,
        notes=tuple(notes),
    )


def _shape_notes(runs_nccl: bool, networked: bool) -> list[str]:
    """Why a pod without a GPU, or alone in its gang, gets little or no NCCL setup."""
    if not runs_nccl:
        return ["pod has no GPU: no NCCL rank, only the job's ncclEnv applies"]
    if not networked:
        return [
            "single-pod gang: NCCL stays on NVLink/PCIe and /dev/shm, so no network env, "
            "RDMA resource or IPC_LOCK"
        ]
    return []


def _set_rdma_env(
    spec: FabricProfileSpec,
    env: _Env,
    *,
    gpus_per_pod: int,
    nodes_in_gang: int,
    whole_node: bool,
    gpus_on_node: int | None,
) -> list[str]:
    """Set the env of a pod that talks to its gang over RDMA; return the notes it explains."""
    notes: list[str] = []
    if spec.hcas:
        env.set(NCCL_IB_HCA, ib_hca_value(spec.hcas), "derived")
        if not whole_node:
            share = f"{gpus_per_pod} of {gpus_on_node}" if gpus_on_node else f"{gpus_per_pod}"
            notes.append(
                f"pod gets {share} GPUs: NCCL_IB_HCA lists every compute HCA since the "
                "kubelet picks the GPUs; trainop-launch may narrow it in the container"
            )
    if spec.socket_ifname:
        env.set(NCCL_SOCKET_IFNAME, spec.socket_ifname, "profile")
    if spec.fabric == "RoCE":
        if spec.gid_index is not None:
            env.set(NCCL_IB_GID_INDEX, str(spec.gid_index), "profile")
        if spec.traffic_class is not None:
            env.set(NCCL_IB_TC, str(spec.traffic_class), "profile")
    if spec.gdr_level is not None:
        env.set(NCCL_NET_GDR_LEVEL, spec.gdr_level, "profile")
    if spec.sharp:
        if nodes_in_gang > 1:
            env.set(NCCL_COLLNET_ENABLE, "1", "derived")
        else:
            notes.append("SHARP not enabled: the gang's pods share one node")
    return notes


def _set_tcp_env(spec: FabricProfileSpec, env: _Env) -> None:
    """Set the env of a pod that talks to its gang over TCP sockets."""
    # TCP: the fabric itself requires disabling IB (the one case fabrics.md allows
    # NCCL_IB_DISABLE outside debugging), so NCCL does not probe verbs devices.
    env.set(NCCL_IB_DISABLE, "1", "derived")
    if spec.socket_ifname:
        env.set(NCCL_SOCKET_IFNAME, spec.socket_ifname, "profile")


def _set_profile_env(spec: FabricProfileSpec, env: _Env) -> None:
    """Set what the profile asks of every NCCL rank: nvls=false, then extraEnv, then debugEnv."""
    if spec.nvls is False:
        env.set(NCCL_NVLS_ENABLE, "0", "profile")
    env.update(spec.extra_env, "profile")
    env.update(spec.debug_env, "profile")

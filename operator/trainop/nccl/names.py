"""NCCL environment variable names and pod-level names trainop.nccl writes, defined once.

Meanings and defaults: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html ("NCCL environment variables", from the
NCCL user guide). Names shared with other packages live in trainop.api.constants instead.
"""

from __future__ import annotations

from trainop.api.fabricprofile import DEBUG_ONLY_KNOBS

NCCL_IB_HCA = "NCCL_IB_HCA"  # "=" prefix: exact names (mlx5_1 would also match mlx5_10..19)
NCCL_SOCKET_IFNAME = "NCCL_SOCKET_IFNAME"
NCCL_IB_GID_INDEX = "NCCL_IB_GID_INDEX"  # RoCE; -1 = auto since NCCL 2.21
NCCL_IB_TC = "NCCL_IB_TC"
NCCL_COLLNET_ENABLE = "NCCL_COLLNET_ENABLE"  # SHARP through the CollNet plugin
# Debug-only knobs (NVIDIA: do not force in production); see DEBUG_ONLY_KNOBS.
NCCL_IB_DISABLE = "NCCL_IB_DISABLE"
NCCL_NVLS_ENABLE = "NCCL_NVLS_ENABLE"
NCCL_NET_GDR_LEVEL = "NCCL_NET_GDR_LEVEL"
NCCL_P2P_LEVEL = "NCCL_P2P_LEVEL"
NCCL_ALGO = "NCCL_ALGO"

# Multus secondary networks (NVIDIA Network Operator conventions, fabrics.md).
ANNOTATION_MULTUS_NETWORKS = "k8s.v1.cni.cncf.io/networks"
# RDMA verbs pin (mlock) registered memory; without IPC_LOCK registration fails in the pod.
CAP_IPC_LOCK = "IPC_LOCK"
# A pod's primary CNI interface is eth0 in its own network namespace, whatever the host calls
# its NICs, so TCP profiles and forced-TCP variants point NCCL's sockets at it.
POD_PRIMARY_IFNAME = "eth0"

__all__ = [
    "ANNOTATION_MULTUS_NETWORKS",
    "CAP_IPC_LOCK",
    "DEBUG_ONLY_KNOBS",
    "NCCL_ALGO",
    "NCCL_COLLNET_ENABLE",
    "NCCL_IB_DISABLE",
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_HCA",
    "NCCL_IB_TC",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_NVLS_ENABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_SOCKET_IFNAME",
    "POD_PRIMARY_IFNAME",
]

"""NCCL wiring: a node's FabricProfile plus a gang's shape -> NCCL_* env, RDMA resources, /dev/shm.

Pure: no API calls. `select_profile` picks the profile for the node a pod lands on (built-ins
for DGX-1/A100/H100 and TCP, overridable by FabricProfile resources); `nccl_settings` computes
what the pod needs. Neighbours: trainop.api.fabricprofile (the model), the planner (consumer),
trainop.launcher (narrows NCCL_IB_HCA in the container with `hcas_for_gpus`).
"""

from trainop.nccl.profiles import (
    BUILTIN_PROFILES,
    EXAMPLE_ROCE_PROFILE,
    FabricMismatch,
    ForcedFabric,
    select_profile,
    selector_matches,
    tcp_variant,
)
from trainop.nccl.tuning import (
    NcclSettings,
    Source,
    hca_for_gpu,
    hcas_for_gpus,
    ib_hca_value,
    nccl_settings,
)

__all__ = [
    "BUILTIN_PROFILES",
    "EXAMPLE_ROCE_PROFILE",
    "FabricMismatch",
    "ForcedFabric",
    "NcclSettings",
    "Source",
    "hca_for_gpu",
    "hcas_for_gpus",
    "ib_hca_value",
    "nccl_settings",
    "select_profile",
    "selector_matches",
    "tcp_variant",
]

"""Every label, annotation, resource name and env name trainop reads or writes, defined once."""

from __future__ import annotations

GROUP = "trainop.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# --- labels on every generated object (fixed by DESIGN.md) ---
LABEL_JOB_NAME = "trainop.dev/job-name"
LABEL_REPLICA_TYPE = "trainop.dev/replica-type"  # lower-case role, e.g. "worker"
LABEL_REPLICA_INDEX = "trainop.dev/replica-index"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "trainop"

# --- topology labels (defaults; configurable) ---
LABEL_BLOCK = "trainop.dev/block"
LABEL_RACK = "trainop.dev/rack"
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_GPU_CLIQUE = "nvidia.com/gpu.clique"
DEFAULT_TOPOLOGY_LEVELS = (LABEL_BLOCK, LABEL_RACK, LABEL_HOSTNAME)

# --- NVIDIA GPU Feature Discovery labels (https://github.com/NVIDIA/gpu-feature-discovery) ---
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_COUNT = "nvidia.com/gpu.count"
GFD_MEMORY = "nvidia.com/gpu.memory"
GFD_FAMILY = "nvidia.com/gpu.family"
GFD_COMPUTE_MAJOR = "nvidia.com/gpu.compute.major"
GFD_COMPUTE_MINOR = "nvidia.com/gpu.compute.minor"
GFD_DRIVER_MAJOR = "nvidia.com/cuda.driver-version.major"
GFD_DRIVER_MINOR = "nvidia.com/cuda.driver-version.minor"
GFD_DRIVER_REVISION = "nvidia.com/cuda.driver-version.revision"
GFD_DRIVER_FULL = "nvidia.com/cuda.driver-version.full"
GFD_RUNTIME_MAJOR = "nvidia.com/cuda.runtime-version.major"
GFD_RUNTIME_MINOR = "nvidia.com/cuda.runtime-version.minor"
# deprecated twins, still written by older GFD releases
GFD_DRIVER_MAJOR_OLD = "nvidia.com/cuda.driver.major"
GFD_DRIVER_MINOR_OLD = "nvidia.com/cuda.driver.minor"
GFD_DRIVER_REV_OLD = "nvidia.com/cuda.driver.rev"
GFD_RUNTIME_MAJOR_OLD = "nvidia.com/cuda.runtime.major"
GFD_RUNTIME_MINOR_OLD = "nvidia.com/cuda.runtime.minor"
GFD_MIG_CAPABLE = "nvidia.com/mig.capable"
GFD_MIG_STRATEGY = "nvidia.com/mig.strategy"  # single | mixed | none
GFD_REPLICAS = "nvidia.com/gpu.replicas"  # time-slicing / MPS replicas per GPU
GFD_SHARING_STRATEGY = "nvidia.com/gpu.sharing-strategy"  # time-slicing | mps | none
RESOURCE_MIG_PREFIX = "nvidia.com/mig-"  # MIG mixed strategy: nvidia.com/mig-1g.5gb

# --- extended resources ---
RESOURCE_GPU = "nvidia.com/gpu"
DEFAULT_RDMA_RESOURCE = "rdma/rdma_shared_device_a"

# --- annotations ---
ANNOTATION_PREFIX = "trainop.dev"
FINALIZER = "trainop.dev/finalizer"
SCHEDULING_GATE = "trainop.dev/admission"
ANNOTATION_RESTART_COUNT = (
    "trainop.dev/restart-count"  # on pods: the gang generation they belong to
)
ANNOTATION_SPEC_HASH = "trainop.dev/spec-hash"
# On a PriorityClass: its jobs are no preemption or migration victim before their gang ran
# this many seconds (as a TrainingQueue's spec.preemption.minRunSeconds; the stricter applies).
ANNOTATION_MIN_RUN = "trainop.dev/min-run-seconds"
# Fake-node lifecycle (local cluster only, honoured by the KWOK stages trainop ships):
ANNOTATION_FAKE_EXIT_CODE = (
    "trainop.dev/fake-exit-code"  # "0" succeeds, other values fail with that code
)
ANNOTATION_FAKE_RUN_DURATION = "trainop.dev/fake-run-duration"  # Go duration, e.g. "5s"; default 1s
# Simulation inputs (trainop simulate)
ANNOTATION_SIM_SUBMIT = "trainop.dev/sim-submit-seconds"
ANNOTATION_SIM_DURATION = "trainop.dev/sim-duration-seconds"

# --- torchrun environment (DESIGN.md) ---
ENV_PET_NNODES = "PET_NNODES"
ENV_PET_NPROC_PER_NODE = "PET_NPROC_PER_NODE"
ENV_PET_NODE_RANK = "PET_NODE_RANK"
ENV_PET_MASTER_ADDR = "PET_MASTER_ADDR"
ENV_PET_MASTER_PORT = "PET_MASTER_PORT"

DEFAULT_MASTER_PORT = 29500

# The gang's host names that the wiring wrote into a pod's env and config files (MASTER_ADDR,
# TF_CONFIG, the MPI hostfile, ...), comma-separated: `trainop-launch` waits until each
# resolves, and fails the pod with a named reason when one never does (issue 38).
ENV_PEER_HOSTS = "TRAINOP_PEER_HOSTS"

# Pods carry their rank (placement order) for `kubectl get pods -L`, explain and tests.
ANNOTATION_RANK = "trainop.dev/rank"
# Where the `<job>-config` ConfigMap (framework files such as the MPI hostfile) is mounted.
CONFIG_MOUNT_PATH = "/etc/trainop"
ANNOTATION_FABRIC_PROFILE = "trainop.dev/fabric-profile"  # the FabricProfile that tuned the pod
# DRA mode: GPUs a pod holds through its ResourceClaims (the inventory counts these).
ANNOTATION_DRA_GPUS = "trainop.dev/dra-gpus"
# DRA attribute that ties a GPU to the NIC under the same PCIe root (KEP-4381 standard attribute).
DRA_PCIE_ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"

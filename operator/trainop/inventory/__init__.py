"""Nodes and Pods -> frozen cluster snapshot (GPUs, free capacity, topology path, health); pure."""

from trainop.inventory.frozen import FrozenMap
from trainop.inventory.pods import is_terminated, pod_binding, pod_request
from trainop.inventory.quantity import parse_count, parse_quantity
from trainop.inventory.snapshot import (
    DEFAULT_TOLERATED_TAINT_KEYS,
    UNLABELLED,
    NodeInfo,
    Reservation,
    Snapshot,
    Taint,
    TopologyPath,
    build_snapshot,
    gpus_in_use,
    node_info,
)

__all__ = [
    "DEFAULT_TOLERATED_TAINT_KEYS",
    "UNLABELLED",
    "FrozenMap",
    "NodeInfo",
    "Reservation",
    "Snapshot",
    "Taint",
    "TopologyPath",
    "build_snapshot",
    "gpus_in_use",
    "is_terminated",
    "node_info",
    "parse_count",
    "parse_quantity",
    "pod_binding",
    "pod_request",
]

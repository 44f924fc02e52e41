"""Gang placement over the topology tree, rank order and span/fragmentation scoring; pure."""

from trainop.placement.engine import BLOCK, CLIQUE, CLUSTER, NODE, RACK, level_names, place
from trainop.placement.types import (
    MODES,
    TOPOLOGIES,
    Assignment,
    GangRequest,
    GroupRequest,
    Mode,
    NodeFilter,
    NoFit,
    Placement,
    Topology,
)

__all__ = [
    "BLOCK",
    "CLIQUE",
    "CLUSTER",
    "MODES",
    "NODE",
    "RACK",
    "TOPOLOGIES",
    "Assignment",
    "GangRequest",
    "GroupRequest",
    "Mode",
    "NoFit",
    "NodeFilter",
    "Placement",
    "Topology",
    "level_names",
    "place",
]

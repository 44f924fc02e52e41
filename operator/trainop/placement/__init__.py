"""Gang placement over the topology tree, rank order and span/fragmentation scoring; pure."""

from trainop.placement.cost import (
    DEFAULT_COST,
    GIB,
    AllreduceEstimate,
    FabricCost,
    LinkSpeeds,
    allreduce_time,
)
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
    "DEFAULT_COST",
    "GIB",
    "MODES",
    "NODE",
    "RACK",
    "TOPOLOGIES",
    "AllreduceEstimate",
    "Assignment",
    "FabricCost",
    "GangRequest",
    "GroupRequest",
    "LinkSpeeds",
    "Mode",
    "NoFit",
    "NodeFilter",
    "Placement",
    "Topology",
    "allreduce_time",
    "level_names",
    "place",
]

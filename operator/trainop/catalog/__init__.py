"""Framework x NGC release x CUDA x driver x GPU architecture facts, image choice and node compatibility."""

from trainop.catalog.affinity import node_affinity_terms
from trainop.catalog.compat import Compat, check_node, is_gpu_node, summarize_incompatible
from trainop.catalog.gfd import GpuFacts, gpu_facts_from_labels, parse_version
from trainop.catalog.images import ImageChoice, ResolutionError, resolve_image, version_matches
from trainop.catalog.model import (
    Catalog,
    CatalogError,
    GpuProduct,
    ImageSpec,
    Release,
    catalog_from_data,
    load_catalog,
)
from trainop.catalog.table import catalog_table

__all__ = [
    "Catalog",
    "CatalogError",
    "Compat",
    "GpuFacts",
    "GpuProduct",
    "ImageChoice",
    "ImageSpec",
    "Release",
    "ResolutionError",
    "catalog_from_data",
    "catalog_table",
    "check_node",
    "gpu_facts_from_labels",
    "is_gpu_node",
    "load_catalog",
    "node_affinity_terms",
    "parse_version",
    "resolve_image",
    "summarize_incompatible",
    "version_matches",
]

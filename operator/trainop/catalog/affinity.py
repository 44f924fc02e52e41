"""Renders the node-compatibility rule of `compat.check_node` as Kubernetes nodeSelectorTerms.

The operator pins every pod to a node it checked with `check_node` (exact, down to
driver minor numbers). These terms go into the pod's required node affinity as a
safety net, so that the scheduler enforces the same rule at the level GFD labels can
express: driver *branch* (major) and compute capability. Two properties hold:

- never stricter than `check_node`: a node `check_node` accepts matches some term
  (assuming a node's GFD labels agree with each other, as GFD writes them);
- as strict at branch level: a node rejected for compute capability, product,
  driver branch or a non-data-center GPU on a forward-compatibility branch matches no
  term. It is coarser only on driver minor numbers (R550 at 550.40 passes a
  "driver >= 550.54.14" term), on GPU memory (not expressed), on a product's own CUDA
  floor (catalog `gpus.*.min_cuda`: a B300 passes the compute-capability terms of a CUDA
  12.8 image, `check_node` refuses it) and on labels present but malformed.

Terms are ORed, expressions inside a term ANDed. Equality on numbers is written as
Gt N-1 plus Lt N+1 rather than In, so that "08" and "8" compare alike, as they do in
`gfd`. Both label generations (cuda.driver-version.* and the deprecated
cuda.driver.*) get their own terms.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from trainop.api import constants as c
from trainop.catalog.compat import (
    ALL_MODES,
    MODE_FORWARD,
    MODE_MINOR,
    MODE_NATIVE,
    driver_rule,
    effective_cuda,
    required_cc,
)
from trainop.catalog.model import Catalog, CudaVersion, Release

Expr = dict[str, Any]

_DRIVER_KEYS = (c.GFD_DRIVER_MAJOR, c.GFD_DRIVER_MAJOR_OLD)
_RUNTIME_KEYS = (
    (c.GFD_RUNTIME_MAJOR, c.GFD_RUNTIME_MINOR),
    (c.GFD_RUNTIME_MAJOR_OLD, c.GFD_RUNTIME_MINOR_OLD),
)


def _gt(key: str, n: int) -> Expr:
    """`key > n`. A label value cannot start with "-" (the API server refuses "Gt -1" with
    422: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set),
    and a label that is a number is never negative, so `> n` for n < 0 is "the label is
    there": Exists."""
    if n < 0:
        return {"key": key, "operator": "Exists"}
    return {"key": key, "operator": "Gt", "values": [str(n)]}


def _lt(key: str, n: int) -> Expr:
    """`key < n`, for n >= 1 (nothing is below 0: callers never ask for that)."""
    if n < 1:
        raise ValueError(f"no label value is below {n} ({key})")
    return {"key": key, "operator": "Lt", "values": [str(n)]}


def _eq(key: str, n: int) -> list[Expr]:
    return [_gt(key, n - 1), _lt(key, n + 1)]


def _at_least(major_key: str, minor_key: str, floor: CudaVersion) -> list[list[Expr]]:
    """Alternatives meaning (major, minor) >= floor. A missing minor label reads as 0 in
    `gfd`, which only a floor of X.0 accepts: that case needs no minor expression."""
    major, minor = floor
    if minor <= 0:
        return [[_gt(major_key, major - 1)]]
    return [[_gt(major_key, major)], [*_eq(major_key, major), _gt(minor_key, minor - 1)]]


def node_affinity_terms(
    catalog: Catalog,
    need_cuda: CudaVersion | None,
    release: Release | None,
    gpu_products: Sequence[str] = (),
    modes: Collection[str] = ALL_MODES,
) -> list[dict[str, Any]]:
    """nodeSelectorTerms admitting the nodes that can run an image needing `need_cuda`
    (default: the release's CUDA) from `release` (None for a non-NGC image) by one of
    `modes` (the compatibility modes the job may use)."""
    products = sorted(set(gpu_products))
    need = effective_cuda(need_cuda, release)

    cc = required_cc(catalog, need, release)
    cc_alts = _at_least(c.GFD_COMPUTE_MAJOR, c.GFD_COMPUTE_MINOR, cc[0]) if cc else [[]]
    ceiling = catalog.max_cc_for_cuda(need) if need is not None else None
    if ceiling is not None:  # the architecture ceiling: major <= the ceiling's major
        cc_alts = [[*alt, _lt(c.GFD_COMPUTE_MAJOR, ceiling[0] + 1)] for alt in cc_alts]

    driver_alts: list[list[Expr]] = []
    if need is None:
        # No driver floor (an image of the user's own, no `cuda`): no bound on the driver,
        # only its label, which check_node wants readable on every GPU node (Exists: the
        # "Gt -1" this once was is not a valid label value, and the API server refused it).
        driver_alts = [[_gt(k, -1)] for k in _DRIVER_KEYS]
    else:
        rule = driver_rule(catalog, need, release)
        floors = [
            d[0]
            for d, mode in ((rule.direct, MODE_NATIVE), (rule.minor_compat, MODE_MINOR))
            if d is not None and mode in modes
        ]
        base = min(floors) if floors else None
        if base is not None:
            driver_alts += [[_gt(k, base - 1)] for k in _DRIVER_KEYS]
        if release is None and MODE_NATIVE in modes:  # check_node's runtime-label path
            for major_key, minor_key in _RUNTIME_KEYS:
                driver_alts += _at_least(major_key, minor_key, need)
        # Forward compatibility: only branches below the base add anything, and only on
        # data-center products (intersected with the job's allow-list).
        fc_all = rule.fc_branches if MODE_FORWARD in modes else ()
        fc_majors = sorted({b[0] for b in fc_all if base is None or b[0] < base})
        dc = [p for p in catalog.data_center_labels() if not products or p in products]
        if fc_majors and dc:
            for major in fc_majors:
                for k in _DRIVER_KEYS:
                    driver_alts.append(
                        [*_eq(k, major), {"key": c.GFD_PRODUCT, "operator": "In", "values": dc}]
                    )

    product_expr = (
        [{"key": c.GFD_PRODUCT, "operator": "In", "values": products}] if products else []
    )
    terms: list[dict[str, Any]] = []
    seen: set[str] = set()
    for d in driver_alts:
        for cc_exprs in cc_alts:
            exprs = [*product_expr, *d, *cc_exprs]
            sig = repr(exprs)
            if sig not in seen:
                seen.add(sig)
                terms.append({"matchExpressions": exprs})
    return terms

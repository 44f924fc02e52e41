"""The one predicate that says whether a node can run an image: driver, compute capability, product.

`check_node` is used by image choice (`images`), by placement (which nodes are
eligible), by `trainop explain` and by the catalog table; `affinity` renders the same
rule as Kubernetes node-affinity terms. Facts come from GFD labels (`gfd`), rules
from the catalog (`model`); see shared/reference/cuda-and-gpus.yaml for the sources.

A node runs an image that needs CUDA X.Y iff
  (a) its driver is new enough, by any one of:
      - directly: driver >= the toolkit/driver table's minimum for X.Y, or the node's
        `cuda.runtime-version` label (the newest CUDA its driver runs) >= X.Y;
      - minor-version compatibility: driver >= the minimum of CUDA major X (any X.y
        runs there, with a limited feature set);
      - forward compatibility: the driver is on one of the release's listed
        branches (R470 >= 470.57, ...) AND the GPU is a data-center part (the
        compat package does not work on GeForce);
  (b) its compute capability >= the release's min_cc and >= what CUDA major X still
      builds for (12 -> 5.0, 13 -> 7.5);
  (c) its product is in the job's allow-list (if any) and its GPU memory is enough.
A GPU node whose driver label is missing is never ok: its GPUs cannot be trusted to
work. Missing or malformed labels never raise.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from trainop.api import constants as c
from trainop.catalog.gfd import GpuFacts
from trainop.catalog.model import Catalog, CudaVersion, Release, version_text

# Compat.kind values (stable, used for grouping and by callers that branch on them)
KIND_NOT_GPU = "not-gpu"
KIND_PRODUCT = "product"
KIND_MEMORY = "memory"
KIND_LABELS = "labels"
KIND_COMPUTE = "compute-capability"
KIND_DRIVER = "driver"

# Compat.via values: which path made the driver acceptable
VIA_NO_REQUIREMENT = "no-cuda-requirement"
VIA_DRIVER = "driver"
VIA_RUNTIME = "cuda-runtime"
VIA_MINOR_COMPAT = "minor-version-compatibility"
VIA_FORWARD_COMPAT = "forward-compatibility"


@dataclass(frozen=True)
class Compat:
    """The verdict for one node. `reason` is a full sentence when not ok; `requirement` (what
    the image needs, node-independent) and `observed` (what this node has) split it for
    grouping many nodes into one message."""

    ok: bool
    reason: str | None = None
    kind: str | None = None
    requirement: str | None = None
    observed: str | None = None
    via: str | None = None  # when ok

    def __bool__(self) -> bool:
        return self.ok


def _fail(kind: str, reason: str, requirement: str, observed: str) -> Compat:
    return Compat(False, reason, kind, requirement, observed)


def is_gpu_node(facts: GpuFacts) -> bool:
    """Any GFD GPU fact at all (product, count, memory, family, cc, driver or runtime)."""
    return any(
        v is not None
        for v in (
            facts.product,
            facts.count,
            facts.memory_mib,
            facts.family,
            facts.compute_capability,
            facts.driver,
            facts.cuda_runtime,
        )
    )


def cuda_text(cuda: CudaVersion) -> str:
    return f"{cuda[0]}.{cuda[1]}"


def effective_cuda(need_cuda: CudaVersion | None, release: Release | None) -> CudaVersion | None:
    """The CUDA a node must run: what the caller says, else the release's."""
    if need_cuda is not None:
        return need_cuda
    return release.cuda_mm if release is not None else None


def required_cc(
    catalog: Catalog, need: CudaVersion | None, release: Release | None
) -> tuple[CudaVersion, str] | None:
    """(minimum compute capability, who asks for it) or None when nothing is required.

    The CUDA major's floor is named when it is the binding one (it is the harder fact:
    no driver fixes it); otherwise the release's own floor."""
    by_cuda = catalog.min_cc_for_cuda(need[0]) if need is not None else None
    by_release = release.min_cc if release is not None else None
    if by_cuda is not None and need is not None and (by_release is None or by_cuda >= by_release):
        return by_cuda, f"CUDA {cuda_text(need)}"
    if by_release is not None and release is not None:
        return by_release, f"NGC {release.name}"
    return None


@dataclass(frozen=True)
class DriverRule:
    """The acceptable driver paths for one (CUDA, release); shared with `affinity`."""

    need: CudaVersion
    direct: tuple[int, ...] | None  # toolkit/driver table minimum
    minor_compat: tuple[int, ...] | None  # minimum of the CUDA major
    fc_branches: tuple[tuple[int, ...], ...]  # forward-compatible branches of the release
    release: str | None

    def requirement(self) -> str:
        alts: list[str] = []
        if self.minor_compat is not None and (
            self.direct is None or self.minor_compat < self.direct
        ):
            alts.append(f"{version_text(self.minor_compat)} (minor-version compatibility)")
        if self.direct is not None:
            alts.append(version_text(self.direct))
        need = cuda_text(self.need)
        if not alts:
            return f"CUDA {need} needs a driver whose nvidia.com/cuda.runtime-version is >= {need}"
        return f"CUDA {need} needs driver >= {' or '.join(alts)}"

    def fc_text(self) -> str:
        return ", ".join(f"R{b[0]} >= {version_text(b)}" for b in self.fc_branches)


def driver_rule(catalog: Catalog, need: CudaVersion, release: Release | None) -> DriverRule:
    return DriverRule(
        need=need,
        direct=catalog.min_driver_for_cuda(need),
        minor_compat=catalog.minor_compat_driver(need[0]),
        fc_branches=release.fc_branches if release is not None else (),
        release=release.name if release is not None else None,
    )


def _on_branch(driver: tuple[int, ...], branch: tuple[int, ...]) -> bool:
    """'470.57' admits R470 at 470.57 or later (not R471); '396' admits any R396."""
    return driver[0] == branch[0] and driver >= branch


def check_node(
    catalog: Catalog,
    facts: GpuFacts,
    need_cuda: CudaVersion | None,
    release: Release | None,
    *,
    gpu_products: Sequence[str] = (),
    min_memory_mib: int | None = None,
) -> Compat:
    """Can a node with these GFD facts run an image that needs `need_cuda` (default: the
    release's CUDA) from `release` (None for a non-NGC image)? Never raises on bad labels."""
    if not is_gpu_node(facts):
        return _fail(
            KIND_NOT_GPU,
            "not a GPU node (no nvidia.com/gpu.* or nvidia.com/cuda.* labels)",
            "not a GPU node",
            "",
        )
    product = facts.product or "GPU without a nvidia.com/gpu.product label"

    if gpu_products and facts.product not in gpu_products:
        allowed = ", ".join(gpu_products)
        req = f"spec.placement.gpuProducts allows only {allowed}"
        return _fail(
            KIND_PRODUCT,
            f"{product} is not in spec.placement.gpuProducts ({allowed})",
            req,
            product,
        )

    if min_memory_mib is not None:
        req = f"the job needs >= {min_memory_mib} MiB of GPU memory"
        if facts.memory_mib is None:
            return _fail(
                KIND_MEMORY,
                f"label {c.GFD_MEMORY} is missing or not a number; {req}",
                req,
                f"{product} (no memory label)",
            )
        if facts.memory_mib < min_memory_mib:
            return _fail(
                KIND_MEMORY,
                f"{req}; {product} has {facts.memory_mib} MiB",
                req,
                f"{product} ({facts.memory_mib} MiB)",
            )

    need = effective_cuda(need_cuda, release)
    cc_req = required_cc(catalog, need, release)
    if cc_req is not None:
        floor, who = cc_req
        req = f"{who} needs compute capability >= {version_text(floor)}"
        cc = facts.compute_capability
        if cc is None:
            return _fail(
                KIND_LABELS,
                f"label {c.GFD_COMPUTE_MAJOR} is missing or not a number; {req}",
                f"{who} needs label {c.GFD_COMPUTE_MAJOR} "
                f"(compute capability >= {version_text(floor)})",
                product,
            )
        if cc < floor:
            return _fail(
                KIND_COMPUTE,
                f"{req}; {product} is {facts.compute_capability_text}",
                req,
                f"{product} ({facts.compute_capability_text})",
            )

    driver = facts.driver
    if driver is None:
        req = (
            f"GPU nodes need label {c.GFD_DRIVER_MAJOR} "
            f"(or the deprecated {c.GFD_DRIVER_MAJOR_OLD})"
        )
        return _fail(
            KIND_LABELS,
            f"label {c.GFD_DRIVER_MAJOR} (or the deprecated {c.GFD_DRIVER_MAJOR_OLD}) is missing "
            f"or not a number on this GPU node, so its driver is unknown",
            req,
            product,
        )
    if need is None:
        return Compat(True, via=VIA_NO_REQUIREMENT)

    rule = driver_rule(catalog, need, release)
    if rule.direct is not None and driver >= rule.direct:
        return Compat(True, via=VIA_DRIVER)
    if facts.cuda_runtime is not None and facts.cuda_runtime >= need:
        return Compat(True, via=VIA_RUNTIME)
    if rule.minor_compat is not None and driver >= rule.minor_compat:
        return Compat(True, via=VIA_MINOR_COMPAT)
    data_center = catalog.is_data_center(facts.product)
    on_fc = any(_on_branch(driver, b) for b in rule.fc_branches)
    if on_fc and data_center:
        return Compat(True, via=VIA_FORWARD_COMPAT)

    supports = facts.cuda_runtime or catalog.max_cuda_for_driver(driver)
    drv = facts.driver_label or facts.driver_text or "?"
    have = (
        f"driver {drv} supports CUDA up to {cuda_text(supports)}" if supports else f"driver {drv}"
    )
    reason = f"{have}; {rule.requirement()}"
    if rule.fc_branches:
        if on_fc:
            reason += (
                f"; forward compatibility ({rule.fc_text()}) works only on data-center GPUs "
                f"and {product} is not one"
            )
        else:
            reason += (
                f", or on a data-center GPU a forward-compatible branch of NGC {rule.release} "
                f"({rule.fc_text()})"
            )
    return _fail(KIND_DRIVER, reason, rule.requirement(), f"{product} (driver {drv})")


def summarize_incompatible(results: Sequence[tuple[str, GpuFacts, Compat]]) -> str:
    """One sentence for "no node can run this": not-ok results grouped by requirement, each
    listing the products seen with counts, biggest group first. Ok results are ignored."""
    groups: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for _node, _facts, compat in results:
        if compat.ok:
            continue
        key = (compat.kind or "", compat.requirement or compat.reason or "incompatible")
        groups[key][compat.observed or ""] += 1
    if not groups:
        return "no node was rejected."
    parts: list[str] = []
    for (kind, req), seen in sorted(groups.items(), key=lambda kv: (-sum(kv[1].values()), kv[0])):
        n = sum(seen.values())
        if kind == KIND_NOT_GPU:
            parts.append("1 node is not a GPU node" if n == 1 else f"{n} nodes are not GPU nodes")
            continue
        items = ", ".join(
            f"{obs or 'unlabelled GPU'} x{k}"
            for obs, k in sorted(seen.items(), key=lambda kv: (-kv[1], kv[0]))
        )
        parts.append(
            f"{req}; missing on {items}"
            if kind == KIND_LABELS
            else f"{req}, but nodes have {items}"
        )
    return "; ".join(parts) + "."

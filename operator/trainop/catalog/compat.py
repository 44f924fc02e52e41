"""The one predicate that says whether a node can run an image: driver, compute capability, product.

`check_node` is used by image choice (`trainop.eligibility`), by placement (which nodes are
eligible), by `trainop explain` and by the catalog table; `affinity` renders the same
rule as Kubernetes node-affinity terms. Facts come from GFD labels (`gfd`), rules
from the catalog (`model`, whose data file cites NVIDIA's notes for every figure).

A node runs an image that needs CUDA X.Y iff the image is published for the node's
architecture (`kubernetes.io/arch`; an unlabelled node is amd64; an image whose
architectures are unknown, a user's own, is trusted on any), and
  (a) its driver is new enough, by one of three modes, in this order of preference:
      - native: driver >= the release's own min_driver (NGC images; the release
        notes' "requires NVIDIA Driver release N or later"), or for an image the
        catalog does not know, driver >= the toolkit/driver table's minimum for X.Y
        or the node's `cuda.runtime-version` label >= X.Y;
      - forward compatibility: the driver is on one of the release's listed
        branches (R470 >= 470.57, ...) AND the GPU is a data-center part (the
        compat package does not work on GeForce);
      - minor-version compatibility: driver >= the minimum of CUDA major X (any X.y
        runs there, with a limited feature set);
      a caller may allow only some modes (queue / operator config);
  (b) its compute capability is inside what CUDA X.Y can target: >= the release's
      min_cc and >= what CUDA major X still builds for (12 -> 5.0, 13 -> 7.5), and its
      major <= the major of the newest architecture X.Y knows (Ampere needs 11.0,
      Hopper 11.8, Blackwell 12.8), and at least the product's own CUDA floor where the
      catalog records one (B300/GB300: 12.9);
  (c) its product is in the job's allow-list (if any) and its GPU memory is enough.
A GPU node whose driver label is missing is never ok: its GPUs cannot be trusted to
work. Missing or malformed labels never raise.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from trainop.api import constants as c
from trainop.catalog.gfd import LABEL_ARCH, GpuFacts
from trainop.catalog.model import Catalog, CudaVersion, ImageArchs, Release, version_text

# Compat.kind values (stable, used for grouping and by callers that branch on them)
KIND_NOT_GPU = "not-gpu"
KIND_PRODUCT = "product"
KIND_MEMORY = "memory"
KIND_LABELS = "labels"
KIND_COMPUTE = "compute-capability"
KIND_DRIVER = "driver"
KIND_ARCH = "architecture"  # no image for the node's kubernetes.io/arch

# Compat.via values: which path made the driver acceptable
VIA_NO_REQUIREMENT = "no-cuda-requirement"
VIA_DRIVER = "driver"
VIA_RUNTIME = "cuda-runtime"
VIA_MINOR_COMPAT = "minor-version-compatibility"
VIA_FORWARD_COMPAT = "forward-compatibility"

# Compatibility modes (status.compatibility), best first.
MODE_NATIVE = "Native"
MODE_FORWARD = "ForwardCompat"
MODE_MINOR = "MinorVersionCompat"
MODES: tuple[str, ...] = (MODE_NATIVE, MODE_FORWARD, MODE_MINOR)
ALL_MODES = frozenset(MODES)
_MODE_OF = {
    VIA_NO_REQUIREMENT: MODE_NATIVE,
    VIA_DRIVER: MODE_NATIVE,
    VIA_RUNTIME: MODE_NATIVE,
    VIA_FORWARD_COMPAT: MODE_FORWARD,
    VIA_MINOR_COMPAT: MODE_MINOR,
}
_MODE_TEXT = {
    MODE_FORWARD: "forward compatibility",
    MODE_MINOR: "minor-version compatibility",
}


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

    @property
    def mode(self) -> str | None:
        """Native | ForwardCompat | MinorVersionCompat when ok, else None."""
        return _MODE_OF.get(self.via or "") if self.ok else None

    @property
    def rank(self) -> int:
        """0 native, 1 forward, 2 minor-version; len(MODES) when not ok."""
        mode = self.mode
        return MODES.index(mode) if mode is not None else len(MODES)


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
    direct: tuple[int, ...] | None  # native minimum: the release's min_driver, else the table's
    minor_compat: tuple[int, ...] | None  # minimum of the CUDA major
    fc_branches: tuple[tuple[int, ...], ...]  # forward-compatible branches of the release
    release: str | None

    def requirement(self, modes: Collection[str] = ALL_MODES) -> str:
        """What the image needs from the driver, by the allowed modes (node-independent)."""
        alts: list[str] = []
        if (
            MODE_MINOR in modes
            and self.minor_compat is not None
            and (self.direct is None or self.minor_compat < self.direct)
        ):
            alts.append(f"{version_text(self.minor_compat)} (minor-version compatibility)")
        if self.direct is not None:
            alts.append(version_text(self.direct))
        need = cuda_text(self.need)
        off = [_MODE_TEXT[m] for m in (MODE_FORWARD, MODE_MINOR) if m not in modes]
        tail = f" ({' and '.join(off)} not allowed)" if off else ""
        if not alts:
            return (
                f"CUDA {need} needs a driver whose nvidia.com/cuda.runtime-version is >= {need}"
                + tail
            )
        return f"CUDA {need} needs driver >= {' or '.join(alts)}{tail}"

    def fc_text(self) -> str:
        return ", ".join(f"R{b[0]} >= {version_text(b)}" for b in self.fc_branches)


def driver_rule(catalog: Catalog, need: CudaVersion, release: Release | None) -> DriverRule:
    native = release.min_driver if release is not None else catalog.min_driver_for_cuda(need)
    return DriverRule(
        need=need,
        direct=native,
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
    modes: Collection[str] = ALL_MODES,
    archs: ImageArchs | None = None,
) -> Compat:
    """Can a node with these GFD facts run an image that needs `need_cuda` (default: the
    release's CUDA) from `release` (None for a non-NGC image), published for `archs` (None:
    unknown, trusted on any architecture), by one of `modes`? The best mode wins
    (`Compat.mode`). Never raises on bad labels."""
    if not is_gpu_node(facts):
        return _fail(
            KIND_NOT_GPU,
            "not a GPU node (no nvidia.com/gpu.* or nvidia.com/cuda.* labels)",
            "not a GPU node",
            "",
        )
    product = facts.product or "GPU without a nvidia.com/gpu.product label"
    if archs is not None and facts.cpu_arch not in archs.known:
        return _arch_fail(facts, product, archs)
    early = _check_product_memory(facts, product, gpu_products, min_memory_mib)
    if early is not None:
        return early
    need = effective_cuda(need_cuda, release)
    arch = _check_arch(catalog, facts, product, need, release)
    if arch is not None:
        return arch
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
    return _check_driver(catalog, facts, product, driver, need, release, modes)


def _arch_fail(facts: GpuFacts, product: str, archs: ImageArchs) -> Compat:
    arch = facts.cpu_arch
    if arch in archs.unconfirmed:
        req = (
            f"its {arch} image is unconfirmed, so it runs on {archs.text()} only (confirm "
            "it through catalogOverrides, docs/catalog.md)"
        )
    else:
        req = f"it has no {arch} image ({archs.text()} only)"
    return _fail(KIND_ARCH, f"{LABEL_ARCH}={arch}: {req}", req, f"{product} ({arch})")


def _check_product_memory(
    facts: GpuFacts, product: str, gpu_products: Sequence[str], min_memory_mib: int | None
) -> Compat | None:
    if gpu_products and facts.product not in gpu_products:
        allowed = ", ".join(gpu_products)
        req = f"spec.placement.gpuProducts allows only {allowed}"
        return _fail(
            KIND_PRODUCT,
            f"{product} is not in spec.placement.gpuProducts ({allowed})",
            req,
            product,
        )
    if min_memory_mib is None:
        return None
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
    return None


def _check_arch(
    catalog: Catalog,
    facts: GpuFacts,
    product: str,
    need: CudaVersion | None,
    release: Release | None,
) -> Compat | None:
    """The compute-capability range: floor (release, CUDA major) and ceiling (CUDA X.Y)."""
    cc_req = required_cc(catalog, need, release)
    ceiling = catalog.max_cc_for_cuda(need) if need is not None else None
    if cc_req is None and ceiling is None:
        return None
    cc = facts.compute_capability
    if cc is None:
        floor_text = f"compute capability >= {version_text(cc_req[0])}" if cc_req else ""
        who = cc_req[1] if cc_req else f"CUDA {cuda_text(need or (0, 0))}"
        return _fail(
            KIND_LABELS,
            f"label {c.GFD_COMPUTE_MAJOR} is missing or not a number; {who} needs "
            f"{floor_text or 'a known compute capability'}",
            f"{who} needs label {c.GFD_COMPUTE_MAJOR}" + (f" ({floor_text})" if floor_text else ""),
            product,
        )
    if cc_req is not None and cc < cc_req[0]:
        floor, who = cc_req
        req = f"{who} needs compute capability >= {version_text(floor)}"
        return _fail(
            KIND_COMPUTE,
            f"{req}; {product} is {facts.compute_capability_text}",
            req,
            f"{product} ({facts.compute_capability_text})",
        )
    if ceiling is not None and need is not None and cc[0] > ceiling[0]:
        first = catalog.first_cuda_for_cc(cc)
        req = f"CUDA {cuda_text(need)} targets compute capability up to {cuda_text(ceiling)}"
        since = f" (compute capability {cc[0]}.x needs CUDA >= {cuda_text(first)})" if first else ""
        need_text = f", needs CUDA >= {cuda_text(first)}" if first else ""
        return _fail(
            KIND_COMPUTE,
            f"{req}; {product} is {facts.compute_capability_text}{since}",
            req,
            f"{product} ({facts.compute_capability_text}{need_text})",
        )
    return _check_product_cuda(catalog, facts, product, need)


def _check_product_cuda(
    catalog: Catalog, facts: GpuFacts, product: str, need: CudaVersion | None
) -> Compat | None:
    """The product's own CUDA floor (catalog `gpus.*.min_cuda`): B300 (10.3) needs images
    built with CUDA >= 12.9 although 12.8 already targets compute capability 10.0."""
    gpu = catalog.gpu(facts.product)
    if gpu is None or gpu.min_cuda is None or need is None or need >= gpu.min_cuda:
        return None
    req = f"{gpu.label} needs images built with CUDA >= {cuda_text(gpu.min_cuda)}"
    return _fail(
        KIND_COMPUTE,
        f"{req}; the image has CUDA {cuda_text(need)}",
        f"the image is built with CUDA {cuda_text(need)}",
        f"{product} (needs CUDA >= {cuda_text(gpu.min_cuda)})",
    )


def _driver_modes(
    catalog: Catalog,
    facts: GpuFacts,
    driver: tuple[int, ...],
    rule: DriverRule,
) -> list[str]:
    """Every via (best first) that admits this driver, ignoring which modes are allowed."""
    vias: list[str] = []
    if rule.direct is not None and driver >= rule.direct:
        vias.append(VIA_DRIVER)
    elif (
        rule.release is None and facts.cuda_runtime is not None and facts.cuda_runtime >= rule.need
    ):
        vias.append(VIA_RUNTIME)
    if catalog.is_data_center(facts.product) and any(
        _on_branch(driver, b) for b in rule.fc_branches
    ):
        vias.append(VIA_FORWARD_COMPAT)
    if rule.minor_compat is not None and driver >= rule.minor_compat:
        vias.append(VIA_MINOR_COMPAT)
    return vias


def _check_driver(
    catalog: Catalog,
    facts: GpuFacts,
    product: str,
    driver: tuple[int, ...],
    need: CudaVersion,
    release: Release | None,
    modes: Collection[str],
) -> Compat:
    rule = driver_rule(catalog, need, release)
    vias = _driver_modes(catalog, facts, driver, rule)
    for via in vias:
        if _MODE_OF[via] in modes:
            return Compat(True, via=via)

    supports = facts.cuda_runtime or catalog.max_cuda_for_driver(driver)
    drv = facts.driver_label or facts.driver_text or "?"
    have = (
        f"driver {drv} supports CUDA up to {cuda_text(supports)}" if supports else f"driver {drv}"
    )
    reason = f"{have}; {rule.requirement(modes)}"
    on_fc = any(_on_branch(driver, b) for b in rule.fc_branches)
    if rule.fc_branches and MODE_FORWARD in modes:
        if on_fc and not catalog.is_data_center(facts.product):
            reason += (
                f"; forward compatibility ({rule.fc_text()}) works only on data-center GPUs "
                f"and {product} is not one"
            )
        elif not on_fc:
            reason += (
                f", or on a data-center GPU a forward-compatible branch of NGC {rule.release} "
                f"({rule.fc_text()})"
            )
    disabled = sorted({_MODE_OF[v] for v in vias} - set(modes), key=MODES.index)
    if disabled:
        names = " and ".join(_MODE_TEXT.get(m, m) for m in disabled)
        reason += f"; {names} would run it but is not allowed for this job"
    return _fail(KIND_DRIVER, reason, rule.requirement(modes), f"{product} (driver {drv})")


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

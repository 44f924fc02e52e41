"""The catalog's typed model: NGC releases, CUDA/driver tables, GPU products, image patterns.

`load_catalog` reads the packaged `data/catalog.yaml` (or a given file), deep-merges
overrides from Helm values / a ConfigMap on top, validates everything and returns a
frozen `Catalog`. Neighbours: `images` (which tag to run), `compat` (can a node run
it), `affinity` (the same rule for the scheduler), `table` (`trainop catalog`).
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any

from trainop.catalog.gfd import ARCH_AMD64, ARCH_ARM64, MIG_SUFFIX, parse_version
from trainop.yamlio import YamlInputError, load_yaml

Version = tuple[int, ...]
CudaVersion = tuple[int, int]

_RELEASE_NAME = re.compile(r"^\d{2}\.\d{2}$")
_TOP_KEYS = frozenset(
    {
        "schema",
        "releases",
        "cuda_min_driver",
        "minor_version_compat",
        "cuda_min_cc",
        "cuda_max_cc",
        "gpus",
        "images",
    }
)
_RELEASE_FIELDS = frozenset(
    {
        "cuda",
        "cudnn",
        "nccl",
        "python",
        "min_driver",
        "fc_branches",
        "min_cc",
        "frameworks",
        "by_framework",
        "unconfirmed",
    }
)
_BY_FRAMEWORK_FIELDS = frozenset({"cuda", "min_driver", "fc_branches"})
# Release facts that decide whether a node can run an image: an unconfirmed one makes the
# release "unconfirmed" for image choice (confirmed releases are preferred).
NODE_FACTS = ("cuda", "min_driver", "min_cc")
_GPU_FIELDS = frozenset(
    {"cc", "family", "memory_mib", "data_center", "min_cuda", "min_driver", "unconfirmed"}
)
# GPU facts a product entry may mark unconfirmed (`trainop catalog --check` lists them).
_GPU_UNCONFIRMABLE = frozenset({"label", "cc", "family", "memory_mib", "min_cuda", "min_driver"})
_IMAGE_FIELDS = frozenset({"ships", "repository", "tag", "since", "until", "unconfirmed", "arm64"})
# Image facts an image entry may mark unconfirmed: whether it bundles Horovod, and the
# releases its arm64 image exists for (an unconfirmed arm64 window is not used).
_IMAGE_UNCONFIRMABLE = frozenset({"horovod", "arm64"})
_ARM64_FIELDS = frozenset({"since", "until"})
# Every NGC framework image is published for amd64 (x86_64); arm64 only where `arm64:` says.

# GFD writes the product with spaces turned into '-'; older drivers omit the "NVIDIA-"
# prefix, time-slicing appends "-SHARED" and the MIG single strategy "-MIG-<profile>"
# (https://github.com/NVIDIA/gpu-feature-discovery#generated-labels and
# https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-sharing.html).
_PREFIX = "NVIDIA-"
_SHARED = "-SHARED"
_MIG = MIG_SUFFIX


class DottedVersion(tuple[int, ...]):
    """A version that compares as its numbers but prints as written: '580.65.06' stays
    '580.65.06' in messages although it compares as (580, 65, 6)."""

    text: str

    def __new__(cls, parts: Iterable[int], text: str) -> DottedVersion:
        obj = super().__new__(cls, parts)
        obj.text = text
        return obj

    def __str__(self) -> str:
        return self.text


class CatalogError(ValueError):
    """The catalog data (packaged file, a given file or the overrides) is invalid."""


def version_text(v: Iterable[int]) -> str:
    """As written in the catalog when known ('580.65.06'), else the numbers joined."""
    if isinstance(v, DottedVersion):
        return v.text
    return ".".join(str(p) for p in v)


def base_product(label: str) -> str:
    """'NVIDIA-H100-80GB-HBM3-SHARED' -> 'H100-80GB-HBM3', 'A100-SXM4-40GB-MIG-1g.5gb' ->
    'A100-SXM4-40GB': the form products are compared in."""
    if label.endswith(_SHARED):
        label = label[: -len(_SHARED)]
    label = _MIG.sub("", label)
    if label.startswith(_PREFIX):
        label = label[len(_PREFIX) :]
    return label


def quota_product(label: str) -> str:
    """'NVIDIA-A100-SXM4-40GB-MIG-1g.5gb' -> 'A100-SXM4-40GB-MIG-1g.5gb': the prefix older
    drivers omit goes, the sharing suffixes stay (a slice is not a whole GPU)."""
    return label[len(_PREFIX) :] if label.startswith(_PREFIX) else label


@dataclass(frozen=True)
class Release:
    """One NGC release YY.MM: what its images contain and what they need from a node."""

    name: str  # "24.05"
    cuda: Version  # (12, 4, 1)
    min_driver: Version  # the branch the release notes ask for, e.g. (545,)
    min_cc: CudaVersion  # lowest compute capability the release supports
    fc_branches: tuple[Version, ...] = ()  # forward-compatible data-center branches, e.g. (470, 57)
    frameworks: tuple[tuple[str, str], ...] = ()  # (("pytorch", "2.4.0a0"), ...)
    cudnn: str | None = None
    nccl: str | None = None
    python: str | None = None
    unconfirmed: frozenset[str] = frozenset()
    # framework -> (cuda, min_driver, fc_branches) where that image differs (24.06 MXNet)
    by_framework: tuple[tuple[str, Version, Version, tuple[Version, ...]], ...] = ()

    def for_framework(self, ships: str) -> Release:
        """This release as the image of `ships` sees it (its own CUDA/driver when listed)."""
        for name, cuda, driver, fc in self.by_framework:
            if name == ships:
                return replace(self, cuda=cuda, min_driver=driver, fc_branches=fc, by_framework=())
        return self

    @functools.cached_property
    def key(self) -> tuple[int, int]:
        """(24, 5) for '24.05': releases sort by this (worked out once per release: image
        choice asks it for every candidate of every job in a cycle)."""
        yy, mm = self.name.split(".")
        return int(yy), int(mm)

    @property
    def cuda_mm(self) -> CudaVersion:
        """The CUDA major.minor the images are built with (what a node has to run)."""
        return self.cuda[0], self.cuda[1] if len(self.cuda) > 1 else 0

    @property
    def cuda_text(self) -> str:
        return version_text(self.cuda)

    @property
    def min_driver_text(self) -> str:
        return version_text(self.min_driver)

    @property
    def min_cc_text(self) -> str:
        return version_text(self.min_cc)

    def version_of(self, framework_key: str) -> str | None:
        """Version of a framework (a `ships` key such as 'paddlepaddle') inside this release."""
        for name, version in self.frameworks:
            if name == framework_key:
                return version
        return None

    def is_unconfirmed(self, what: str) -> bool:
        return what in self.unconfirmed

    def unconfirmed_node_facts(self, ships: str | None = None) -> tuple[str, ...]:
        """The unconfirmed facts image choice relies on: CUDA, driver, compute capability and
        the framework version of the image (`ships`)."""
        wanted = (*NODE_FACTS, ships) if ships else NODE_FACTS
        return tuple(f for f in wanted if f in self.unconfirmed)


@dataclass(frozen=True)
class GpuProduct:
    """A GPU model as GFD labels it."""

    label: str
    cc: CudaVersion
    family: str | None = None
    memory_mib: int | None = None
    data_center: bool = False
    # The oldest CUDA whose images run on this product (the first toolkit that targets its
    # architecture) and the oldest driver known to drive it; None when not recorded.
    min_cuda: CudaVersion | None = None
    min_driver: Version | None = None
    unconfirmed: frozenset[str] = frozenset()

    def is_unconfirmed(self, what: str) -> bool:
        return what in self.unconfirmed


@dataclass(frozen=True)
class ImageArchs:
    """The CPU architectures (kubernetes.io/arch values) an image is published for, and
    those it may be published for that the catalog has not confirmed (not used)."""

    known: frozenset[str]
    unconfirmed: frozenset[str] = frozenset()

    def text(self) -> str:
        return "/".join(sorted(self.known))


# The three answers of ImageSpec.archs_for, made once (it is asked for every candidate
# release of every job in an admission cycle).
_MULTI_ARCH = ImageArchs(frozenset({ARCH_AMD64, ARCH_ARM64}))
_AMD64_ONLY = ImageArchs(frozenset({ARCH_AMD64}))
_AMD64_ARM64_UNCONFIRMED = ImageArchs(frozenset({ARCH_AMD64}), frozenset({ARCH_ARM64}))


@dataclass(frozen=True)
class ImageSpec:
    """How one spec.framework.name maps to an NGC image repository and tag."""

    framework: str  # spec.framework.name: pytorch|tensorflow|jax|mpi|paddle|mxnet
    ships: str  # key of Release.frameworks whose version the image carries
    repository: str  # nvcr.io/nvidia/pytorch
    tag: str  # "{release}-py3"
    since: tuple[int, int] | None = None
    until: tuple[int, int] | None = None
    unconfirmed: frozenset[str] = frozenset()
    # The releases whose image is also published for arm64 (a multi-arch tag), as
    # (since, until) release keys, either open; None: amd64 only.
    arm64: tuple[tuple[int, int] | None, tuple[int, int] | None] | None = None

    def archs_for(self, release: Release) -> ImageArchs:
        """The architectures this image of `release` exists for. An arm64 window marked
        unconfirmed is not used (fail closed: amd64 only) but is named in messages."""
        in_window = False
        if self.arm64 is not None:
            since, until = self.arm64
            in_window = (since is None or release.key >= since) and (
                until is None or release.key <= until
            )
        if in_window and ARCH_ARM64 not in self.unconfirmed:
            return _MULTI_ARCH
        return _AMD64_ARM64_UNCONFIRMED if in_window else _AMD64_ONLY

    def image_for(self, release: Release) -> str:
        return f"{self.repository}:{self.tag.format(release=release.name)}"

    def available_in(self, release: Release) -> bool:
        if release.version_of(self.ships) is None:
            return False
        if self.since is not None and release.key < self.since:
            return False
        return not (self.until is not None and release.key > self.until)


@dataclass(frozen=True)
class Catalog:
    """Everything trainop knows about NGC images, CUDA, drivers and GPUs. Immutable."""

    releases: tuple[Release, ...]  # oldest first
    cuda_min_driver: tuple[tuple[CudaVersion, Version], ...]  # sorted by CUDA
    minor_version_compat: tuple[tuple[int, Version], ...]  # CUDA major -> min driver
    cuda_min_cc: tuple[tuple[int, CudaVersion], ...]  # CUDA major -> min compute capability
    gpus: tuple[GpuProduct, ...]
    images: tuple[ImageSpec, ...]
    cuda_max_cc: tuple[tuple[CudaVersion, CudaVersion], ...] = ()  # CUDA X.Y -> ceiling

    @functools.cached_property
    def _by_base(self) -> Mapping[str, GpuProduct]:
        return {base_product(g.label): g for g in self.gpus}

    # --- releases and images ---
    def release(self, name: str) -> Release | None:
        for r in self.releases:
            if r.name == name:
                return r
        return None

    def frameworks(self) -> tuple[str, ...]:
        return tuple(i.framework for i in self.images)

    def image_spec(self, framework: str) -> ImageSpec | None:
        """By spec.framework.name; the shipped name ('paddlepaddle') is accepted too."""
        for i in self.images:
            if i.framework == framework:
                return i
        for i in self.images:
            if i.ships == framework:
                return i
        return None

    def releases_for(self, framework: str) -> tuple[Release, ...]:
        """Releases with an image for this framework, oldest first, each with the image's own
        CUDA/driver figures where they differ (`Release.for_framework`)."""
        spec = self.image_spec(framework)
        if spec is None:
            return ()
        return tuple(r.for_framework(spec.ships) for r in self.releases if spec.available_in(r))

    # --- CUDA / driver tables ---
    def min_driver_for_cuda(self, cuda: CudaVersion) -> Version | None:
        """Driver that runs CUDA major.minor natively; a missing minor (12.7) takes the next one
        of the same major, since a driver that runs 12.8 runs 12.7. None beyond the table."""
        for c, d in self.cuda_min_driver:
            if c[0] == cuda[0] and c >= cuda:
                return d
        return None

    def minor_compat_driver(self, cuda_major: int) -> Version | None:
        for major, d in self.minor_version_compat:
            if major == cuda_major:
                return d
        return None

    def max_cuda_for_driver(self, driver: Version) -> CudaVersion | None:
        """Newest CUDA a driver runs natively, from the toolkit/driver table."""
        best: CudaVersion | None = None
        for c, d in self.cuda_min_driver:
            if driver >= d:
                best = c
        return best

    def min_cc_for_cuda(self, cuda_major: int) -> CudaVersion | None:
        """Lowest compute capability a CUDA major builds for; a major past the table inherits
        the newest entry below it (architectures are only ever dropped)."""
        best: CudaVersion | None = None
        for major, cc in self.cuda_min_cc:
            if major <= cuda_major:
                best = cc
        return best

    def max_cc_for_cuda(self, cuda: CudaVersion) -> CudaVersion | None:
        """Newest compute capability CUDA X.Y can target (the entry at or below X.Y); None
        when the table has nothing at or below it (no ceiling known)."""
        best: CudaVersion | None = None
        for c, cc in self.cuda_max_cc:
            if c <= cuda:
                best = cc
        return best

    def first_cuda_for_cc(self, cc: CudaVersion) -> CudaVersion | None:
        """Oldest CUDA whose ceiling reaches a GPU of compute capability `cc` (same major)."""
        for c, ceiling in self.cuda_max_cc:
            if ceiling[0] >= cc[0]:
                return c
        return None

    # --- GPU products ---
    def gpu(self, product: str | None) -> GpuProduct | None:
        if not product:
            return None
        return self._by_base.get(base_product(product))

    def is_data_center(self, product: str | None) -> bool:
        """A data-center part (forward compatibility works on it). A MIG-single product name
        ("-MIG-1g.5gb") is not accepted: node affinity could not list every such name, and
        the rule it renders must stay as strict as this one."""
        if product and _MIG.search(product):
            return False
        g = self.gpu(product)
        return bool(g and g.data_center)

    def data_center_labels(self) -> tuple[str, ...]:
        """Every nvidia.com/gpu.product value `is_data_center` accepts (for node affinity)."""
        out: set[str] = set()
        for g in self.gpus:
            if not g.data_center:
                continue
            base = base_product(g.label)
            for name in (base, _PREFIX + base):
                out.update((name, name + _SHARED))
        return tuple(sorted(out))


# ---------------------------------------------------------------- loading


def _merge(base: Any, over: Any) -> Any:
    """Deep merge: mappings merge per key, a None value removes the key, anything else replaces."""
    if isinstance(base, Mapping) and isinstance(over, Mapping):
        out = dict(base)
        for k, v in over.items():
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = _merge(out[k], v)
            else:
                out[k] = _drop_nones(v)
        return out
    return _drop_nones(over)


def _drop_nones(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {k: _drop_nones(x) for k, x in v.items() if x is not None}
    return copy.deepcopy(v)


def _version(where: str, value: Any, *, parts: int | None = None) -> Version:
    if not isinstance(value, str):
        raise CatalogError(
            f"{where}: expected a quoted version string, got {value!r} "
            f"(unquoted YAML numbers lose digits: 12.10 reads as 12.1)"
        )
    v = parse_version(value)
    if v is None or (parts is not None and len(v) != parts):
        shape = "X.Y" if parts == 2 else "a dotted version such as 550.54.14"
        raise CatalogError(f"{where}: expected {shape}, got {value!r}")
    return DottedVersion(v, value.strip())


def _cc(where: str, value: Any) -> CudaVersion:
    v = _version(where, value, parts=2)
    return v[0], v[1]


def _mapping(where: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise CatalogError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _str(where: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise CatalogError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def _unknown(where: str, data: Mapping[str, Any], allowed: frozenset[str]) -> None:
    extra = sorted(str(k) for k in data if k not in allowed)
    if extra:
        raise CatalogError(
            f"{where}: unknown key {extra[0]!r} (allowed: {', '.join(sorted(allowed))})"
        )


def _release_name(where: str, key: Any) -> str:
    if not isinstance(key, str) or not _RELEASE_NAME.match(key):
        raise CatalogError(f"{where}: release {key!r} must be a quoted 'YY.MM' string")
    return key


def _major_key(where: str, key: Any) -> int:
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    if isinstance(key, str) and key.isdigit():
        return int(key)
    raise CatalogError(f"{where}: key {key!r} must be a CUDA major version such as '12'")


def _release(name: str, data: Any) -> Release:
    where = f"releases[{name!r}]"
    d = _mapping(where, data)
    _unknown(where, d, _RELEASE_FIELDS)
    for req in ("cuda", "min_driver", "min_cc", "frameworks"):
        if req not in d:
            raise CatalogError(f"{where}.{req}: required")
    cuda = _version(f"{where}.cuda", d["cuda"])
    if len(cuda) < 2:
        raise CatalogError(f"{where}.cuda: expected major.minor[.patch], got {d['cuda']!r}")
    fc_raw = d.get("fc_branches", [])
    if not isinstance(fc_raw, list):
        raise CatalogError(
            f"{where}.fc_branches: expected a list of driver branches, got {fc_raw!r}"
        )
    fc = tuple(_version(f"{where}.fc_branches[{i}]", b) for i, b in enumerate(fc_raw))
    fws = _mapping(f"{where}.frameworks", d["frameworks"])
    if not fws:
        raise CatalogError(f"{where}.frameworks: at least one framework is required")
    frameworks = tuple(sorted((str(k), _str(f"{where}.frameworks.{k}", v)) for k, v in fws.items()))
    unc_raw = d.get("unconfirmed", [])
    if not isinstance(unc_raw, list):
        raise CatalogError(f"{where}.unconfirmed: expected a list of field names, got {unc_raw!r}")
    allowed_unc = (_RELEASE_FIELDS - {"unconfirmed", "frameworks"}) | {k for k, _ in frameworks}
    for u in unc_raw:
        if not isinstance(u, str) or u not in allowed_unc:
            raise CatalogError(
                f"{where}.unconfirmed: {u!r} is neither a release field "
                f"nor a framework of this release"
            )
    by_fw = _by_framework(where, d.get("by_framework", {}), {k for k, _ in frameworks}, fc)
    opt = {}
    for k in ("cudnn", "nccl", "python"):
        if k in d:
            opt[k] = _str(f"{where}.{k}", d[k])
    return Release(
        name=name,
        cuda=cuda,
        min_driver=_version(f"{where}.min_driver", d["min_driver"]),
        min_cc=_cc(f"{where}.min_cc", d["min_cc"]),
        fc_branches=fc,
        frameworks=frameworks,
        unconfirmed=frozenset(unc_raw),
        by_framework=by_fw,
        **opt,
    )


def _by_framework(
    where: str, raw: Any, shipped: set[str], release_fc: tuple[Version, ...]
) -> tuple[tuple[str, Version, Version, tuple[Version, ...]], ...]:
    """releases[X].by_framework: an image of the release with its own CUDA/driver figures
    (fc_branches default to the release's)."""
    out = []
    for fw, entry in _mapping(f"{where}.by_framework", raw).items():
        at = f"{where}.by_framework.{fw}"
        if fw not in shipped:
            raise CatalogError(f"{at}: {fw!r} is not in this release's frameworks")
        e = _mapping(at, entry)
        _unknown(at, e, _BY_FRAMEWORK_FIELDS)
        for req in ("cuda", "min_driver"):
            if req not in e:
                raise CatalogError(f"{at}.{req}: required")
        fc_raw = e.get("fc_branches")
        if fc_raw is not None and not isinstance(fc_raw, list):
            raise CatalogError(f"{at}.fc_branches: expected a list of driver branches")
        fc = (
            tuple(_version(f"{at}.fc_branches[{i}]", b) for i, b in enumerate(fc_raw))
            if fc_raw is not None
            else release_fc
        )
        cuda = _version(f"{at}.cuda", e["cuda"])
        if len(cuda) < 2:
            raise CatalogError(f"{at}.cuda: expected major.minor[.patch], got {e['cuda']!r}")
        out.append((str(fw), cuda, _version(f"{at}.min_driver", e["min_driver"]), fc))
    return tuple(sorted(out))


def _gpu(label: Any, data: Any) -> GpuProduct:
    where = f"gpus[{label!r}]"
    label = _str("gpus", label)
    d = _mapping(where, data)
    _unknown(where, d, _GPU_FIELDS)
    if "cc" not in d:
        raise CatalogError(f"{where}.cc: required")
    mem = d.get("memory_mib")
    if mem is not None and (not isinstance(mem, int) or isinstance(mem, bool) or mem <= 0):
        raise CatalogError(f"{where}.memory_mib: expected a positive integer, got {mem!r}")
    dc = d.get("data_center", False)
    if not isinstance(dc, bool):
        raise CatalogError(f"{where}.data_center: expected true or false, got {dc!r}")
    fam = d.get("family")
    unc = d.get("unconfirmed", [])
    if not isinstance(unc, list) or any(u not in _GPU_UNCONFIRMABLE for u in unc):
        raise CatalogError(
            f"{where}.unconfirmed: expected a list of {', '.join(sorted(_GPU_UNCONFIRMABLE))}, "
            f"got {unc!r}"
        )
    return GpuProduct(
        label=label,
        cc=_cc(f"{where}.cc", d["cc"]),
        family=_str(f"{where}.family", fam) if fam is not None else None,
        memory_mib=mem,
        data_center=dc,
        min_cuda=_cc(f"{where}.min_cuda", d["min_cuda"]) if "min_cuda" in d else None,
        min_driver=_version(f"{where}.min_driver", d["min_driver"]) if "min_driver" in d else None,
        unconfirmed=frozenset(unc),
    )


def _image(framework: Any, data: Any, shipped: set[str]) -> ImageSpec:
    where = f"images[{framework!r}]"
    framework = _str("images", framework)
    d = _mapping(where, data)
    _unknown(where, d, _IMAGE_FIELDS)
    for req in ("ships", "repository", "tag"):
        if req not in d:
            raise CatalogError(f"{where}.{req}: required")
    ships = _str(f"{where}.ships", d["ships"])
    if ships not in shipped:
        raise CatalogError(f"{where}.ships: no release lists framework {ships!r}")
    tag = _str(f"{where}.tag", d["tag"])
    if "{release}" not in tag:
        raise CatalogError(f"{where}.tag: must contain '{{release}}', got {tag!r}")
    try:
        tag.format(release="00.00")
    except (KeyError, IndexError, ValueError) as e:
        raise CatalogError(f"{where}.tag: only '{{release}}' may be substituted ({e})") from None
    bounds: dict[str, tuple[int, int]] = {}
    for k in ("since", "until"):
        if k in d:
            rn = _release_name(f"{where}.{k}", d[k])
            yy, mm = rn.split(".")
            bounds[k] = (int(yy), int(mm))
    unc = d.get("unconfirmed", [])
    if not isinstance(unc, list) or any(u not in _IMAGE_UNCONFIRMABLE for u in unc):
        raise CatalogError(
            f"{where}.unconfirmed: expected a list of {', '.join(sorted(_IMAGE_UNCONFIRMABLE))}, "
            f"got {unc!r}"
        )
    return ImageSpec(
        framework=framework,
        ships=ships,
        repository=_str(f"{where}.repository", d["repository"]),
        tag=tag,
        since=bounds.get("since"),
        until=bounds.get("until"),
        unconfirmed=frozenset(unc),
        arm64=_arm64(where, d["arm64"]) if "arm64" in d else None,
    )


def _arm64(where: str, raw: Any) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """images.X.arm64: {since, until} (either may be left out: open)."""
    at = f"{where}.arm64"
    d = _mapping(at, raw)
    _unknown(at, d, _ARM64_FIELDS)
    out: dict[str, tuple[int, int]] = {}
    for k in ("since", "until"):
        if k in d:
            yy, mm = _release_name(f"{at}.{k}", d[k]).split(".")
            out[k] = (int(yy), int(mm))
    return out.get("since"), out.get("until")


def catalog_from_data(data: Any) -> Catalog:  # noqa: C901, PLR0912 - one check per section of the catalog file, in file order
    """Validate a catalog document (already merged) into a `Catalog`; raises `CatalogError`."""
    d = _mapping("catalog", data)
    _unknown("catalog", d, _TOP_KEYS)
    for req in ("releases", "cuda_min_driver", "images"):
        if req not in d:
            raise CatalogError(f"catalog.{req}: required")

    rel_map = _mapping("releases", d["releases"])
    if not rel_map:
        raise CatalogError("releases: at least one release is required")
    releases = sorted(
        (_release(_release_name("releases", k), v) for k, v in rel_map.items()), key=lambda r: r.key
    )

    cmd: list[tuple[CudaVersion, Version]] = []
    for k, v in _mapping("cuda_min_driver", d["cuda_min_driver"]).items():
        if not isinstance(k, str):
            raise CatalogError(f"cuda_min_driver: key {k!r} must be a quoted 'X.Y' string")
        cmd.append(
            (_cc(f"cuda_min_driver[{k!r}] (key)", k), _version(f"cuda_min_driver[{k!r}]", v))
        )
    cmd.sort()

    mvc: list[tuple[int, Version]] = []
    for k, v in _mapping("minor_version_compat", d.get("minor_version_compat", {})).items():
        major = _major_key("minor_version_compat", k)
        entry = _mapping(f"minor_version_compat[{k!r}]", v)
        _unknown(f"minor_version_compat[{k!r}]", entry, frozenset({"min_driver"}))
        if "min_driver" not in entry:
            raise CatalogError(f"minor_version_compat[{k!r}].min_driver: required")
        mvc.append(
            (major, _version(f"minor_version_compat[{k!r}].min_driver", entry["min_driver"]))
        )
    mvc.sort()

    mcc: list[tuple[int, CudaVersion]] = []
    for k, v in _mapping("cuda_min_cc", d.get("cuda_min_cc", {})).items():
        mcc.append((_major_key("cuda_min_cc", k), _cc(f"cuda_min_cc[{k!r}]", v)))
    mcc.sort()

    mxc: list[tuple[CudaVersion, CudaVersion]] = []
    for k, v in _mapping("cuda_max_cc", d.get("cuda_max_cc", {})).items():
        if not isinstance(k, str):
            raise CatalogError(f"cuda_max_cc: key {k!r} must be a quoted 'X.Y' string")
        mxc.append((_cc(f"cuda_max_cc[{k!r}] (key)", k), _cc(f"cuda_max_cc[{k!r}]", v)))
    mxc.sort()

    gpus = tuple(_gpu(k, v) for k, v in _mapping("gpus", d.get("gpus", {})).items())
    seen: dict[str, str] = {}
    for g in gpus:
        b = base_product(g.label)
        if b in seen:
            raise CatalogError(f"gpus[{g.label!r}]: same product as {seen[b]!r}")
        seen[b] = g.label

    shipped = {k for r in releases for k, _ in r.frameworks}
    images = tuple(_image(k, v, shipped) for k, v in _mapping("images", d["images"]).items())
    if not images:
        raise CatalogError("images: at least one framework image is required")
    known = {i.ships for i in images}
    for r in releases:
        for k, _ in r.frameworks:
            if k not in known:
                raise CatalogError(
                    f"releases[{r.name!r}].frameworks.{k}: no image in `images` ships {k!r}"
                )

    return Catalog(
        releases=tuple(releases),
        cuda_min_driver=tuple(cmd),
        minor_version_compat=tuple(mvc),
        cuda_min_cc=tuple(mcc),
        cuda_max_cc=tuple(mxc),
        gpus=gpus,
        images=images,
    )


_PACKAGED = "trainop/catalog/data/catalog.yaml"


def _read(path: str | None) -> Any:
    try:
        if path is None:
            text = (resources.files("trainop.catalog") / "data" / "catalog.yaml").read_text("utf-8")
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        # libyaml's safe loader, bounded in size, depth and alias expansion (trainop.yamlio)
        return load_yaml(text, source=f"catalog {path or _PACKAGED}")
    except OSError as e:
        raise CatalogError(f"cannot read catalog {path or _PACKAGED}: {e}") from None
    except YamlInputError as e:
        raise CatalogError(str(e)) from None


@functools.lru_cache(maxsize=1)
def _packaged_data() -> Any:
    # shared between loads: neither _merge nor catalog_from_data mutates its input
    return _read(None)


@functools.lru_cache(maxsize=1)
def _packaged() -> Catalog:
    return catalog_from_data(_packaged_data())


def load_catalog(path: str | None = None, overrides: Mapping[str, Any] | None = None) -> Catalog:
    """Load the catalog (the packaged file by default) with `overrides` deep-merged on top.

    Overrides have the file's shape; mappings merge key by key, lists and scalars
    replace, and a null removes a key. Raises `CatalogError` naming the bad key.
    """
    if path is None and not overrides:
        return _packaged()  # immutable, so the parsed default is shared
    data = _packaged_data() if path is None else _read(path)
    if overrides:
        data = _merge(_mapping("catalog", data), _mapping("overrides", overrides))
    return catalog_from_data(data)

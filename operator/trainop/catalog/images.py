"""Chooses the container image of a TrainingJob from spec.framework, spec.cuda and spec.image.

The rule: among the NGC releases that ship the framework, whose framework version
matches the requested one by prefix ("2.4" matches "2.4.0a0") and whose CUDA is at
least the requested minimum, take the newest one that at least one node of the
fleet can run (`compat.check_node`); with no fleet, or when no node can run any of
them, the newest. An explicit spec.image is always used as given: when it is an NGC
tag the catalog knows (nvcr.io/nvidia/<fw>:YY.MM-..., or the same tag under a mirror
repository set through overrides) the release's CUDA is what a node must run;
otherwise spec.cuda says it (None when not given). An explicit image that contradicts
spec.cuda or spec.framework.version is an error rather than a silent pick. Each choice
carries the CPU architectures its image is published for (`ImageChoice.archs`, from the
catalog's per-image `arm64:` window; None for an image the catalog does not know, which is
trusted on any architecture).
Neighbours: the planner calls this, then filters nodes with `compat.check_node` on
the result.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from trainop.catalog.compat import check_node, cuda_text, is_gpu_node
from trainop.catalog.gfd import GpuFacts, parse_version
from trainop.catalog.model import Catalog, CudaVersion, ImageArchs, ImageSpec, Release

FIELD_NAME = "spec.framework.name"
FIELD_VERSION = "spec.framework.version"
FIELD_CUDA = "spec.cuda"
FIELD_IMAGE = "spec.image"

# The tag of an image the catalog knows: <repository>:<YY.MM>[-suffix][@digest]. The
# repository is any one of `images` (nvcr.io/nvidia/<fw>, or a mirror set by overrides).
_RELEASE_TAG = re.compile(r"^(?P<release>\d{2}\.\d{2})(?:-[A-Za-z0-9._-]+)?$")
_VERSION = re.compile(r"^\d+(\.[0-9A-Za-z+_-]+)*$")
_NUMERIC_HEAD = re.compile(r"^(\d+)")


class ResolutionError(ValueError):
    """No image satisfies the job; `field` names the spec field to change."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.detail = message


@dataclass(frozen=True)
class ImageChoice:
    """The image to run and what it needs from a node."""

    image: str
    release: Release | None  # None for an image the catalog does not know
    cuda: CudaVersion | None  # the CUDA the image needs; None when unknown
    framework_version: str | None  # version inside the image (requested one for unknown images)
    reason: str  # one sentence on why this tag
    # The CPU architectures the image is published for; None: unknown (an image the
    # catalog does not know), trusted on any node architecture.
    archs: ImageArchs | None = None


def version_matches(requested: str, actual: str) -> bool:
    """Component-wise prefix match: '2.4' and '2.4.0' match '2.4.0a0'; '2.1' does not match
    '2.10.0a0'. The last requested component may stop before a pre-release suffix."""
    req = requested.strip().lstrip("vV").split(".")
    act = actual.strip().split(".")
    if len(req) > len(act):
        return False
    last = len(req) - 1
    for i, r in enumerate(req):
        a = act[i]
        if r == a:
            continue
        if i == last and r.isdigit() and a.startswith(r) and not a[len(r)].isdigit():
            continue
        return False
    return True


def _numeric(v: str) -> tuple[int, ...]:
    """'2.10.0a0' -> (2, 10, 0): for sorting and display."""
    out: list[int] = []
    for part in v.split("."):
        m = _NUMERIC_HEAD.match(part)
        if not m:
            break
        out.append(int(m.group(1)))
    return tuple(out)


def available_versions(versions: Sequence[str]) -> str:
    """'1.5, 2.0 .. 2.11, 2.13': distinct major.minor (major.minor.patch when they all share
    one major.minor), runs of three or more consecutive minors collapsed."""
    nums = [_numeric(v) for v in versions if _numeric(v)]
    width = 2 if len({n[:2] for n in nums}) > 1 else 3
    uniq = sorted({n[:width] for n in nums})
    runs: list[list[tuple[int, ...]]] = []
    for n in uniq:
        if runs and runs[-1][-1][:-1] == n[:-1] and runs[-1][-1][-1] + 1 == n[-1]:
            runs[-1].append(n)
        else:
            runs.append([n])

    def t(n: tuple[int, ...]) -> str:
        return ".".join(str(p) for p in n)

    out: list[str] = []
    for run in runs:
        if len(run) >= 3:
            out.append(f"{t(run[0])} .. {t(run[-1])}")
        else:
            out.extend(t(n) for n in run)
    return ", ".join(out)


def parse_cuda(cuda: str | None) -> tuple[int, ...] | None:
    """spec.cuda '12.4' -> (12, 4); '' / None -> None; malformed -> ResolutionError."""
    if cuda is None:
        return None
    text = str(cuda).strip()
    if not text:
        return None
    v = parse_version(text)
    if v is None or len(v) > 3:
        raise ResolutionError(FIELD_CUDA, f"expected a CUDA version such as 12.4, got {cuda!r}")
    return v


def _pad(v: tuple[int, ...]) -> tuple[int, ...]:
    return (*v, 0, 0, 0)[:3]


def _mm(v: tuple[int, ...]) -> CudaVersion:
    return v[0], v[1] if len(v) > 1 else 0


def _explicit(
    catalog: Catalog,
    spec: ImageSpec | None,
    image: str,
    version: str | None,
    want: tuple[int, ...] | None,
) -> ImageChoice:
    name = image.split("@", 1)[0]
    specs: list[ImageSpec] = []
    tag_release: str | None = None
    for i in catalog.images:
        if name.startswith(i.repository + ":"):
            m = _RELEASE_TAG.match(name[len(i.repository) + 1 :])
            if m:
                specs.append(i)
                tag_release = m.group("release")
    release = catalog.release(tag_release) if tag_release else None
    if release is None:
        why = (
            f"NGC release {tag_release} is not in the catalog"
            if tag_release
            else "it is not an NGC image the catalog knows"
        )
        need = f"spec.cuda {cuda_text(_mm(want))}" if want else "nothing (no spec.cuda)"
        return ImageChoice(
            image=image,
            release=None,
            cuda=_mm(want) if want else None,
            framework_version=version,
            reason=(
                f"spec.image is used as given; {why}, so nodes are checked against {need}; "
                "its architectures are unknown, so it is trusted on amd64 and arm64 nodes "
                "alike (a gang still shares one architecture)."
            ),
        )

    # The same repository may serve several frameworks (mpi uses the pytorch image).
    img = next((i for i in specs if spec is not None and i.framework == spec.framework), specs[0])
    release = release.for_framework(img.ships)  # e.g. 24.06 MXNet's own CUDA 12.4.1
    shipped = release.version_of(img.ships)
    if want is not None and _pad(release.cuda) < _pad(want):
        raise ResolutionError(
            FIELD_CUDA,
            f"spec.image {image} is NGC {release.name} with CUDA {release.cuda_text}, "
            f"older than the requested {'.'.join(map(str, want))}",
        )
    if version and shipped and not version_matches(version, shipped):
        raise ResolutionError(
            FIELD_VERSION,
            f"{img.ships} {version} does not match spec.image {image}, which ships "
            f"{img.ships} {shipped} (NGC {release.name})",
        )
    return ImageChoice(
        image=image,
        release=release,
        cuda=release.cuda_mm,
        framework_version=shipped or version,
        reason=(
            f"spec.image is used as given; it is NGC {release.name}, so nodes must run "
            f"CUDA {release.cuda_text}."
        ),
        archs=img.archs_for(release),
    )


OVERRIDE_HINT = (
    "; if NVIDIA has published a release that satisfies it, add it to the catalog through "
    "the operator config's catalogOverrides (docs/catalog.md)"
)


@dataclass(frozen=True)
class Candidates:
    """The releases a job's framework/version/CUDA allow, oldest first, or an explicit image."""

    spec: ImageSpec | None
    releases: tuple[Release, ...]
    condition: str  # "shipping pytorch 2.4 with CUDA >= 12.4"
    explicit: ImageChoice | None = None

    def choice(self, release: Release, reason: str) -> ImageChoice:
        assert self.spec is not None
        fw = self.spec.ships
        return ImageChoice(
            image=self.spec.image_for(release),
            release=release,
            cuda=release.cuda_mm,
            framework_version=release.version_of(fw),
            reason=reason,
            archs=self.spec.archs_for(release),
        )

    def head(self, release: Release) -> str:
        fw = self.spec.ships if self.spec else "?"
        return f"NGC {release.name} ({fw} {release.version_of(fw)}, CUDA {release.cuda_text})"


def candidate_releases(
    catalog: Catalog,
    framework: str,
    framework_version: str | None,
    cuda: str | None,
    *,
    image: str | None = None,
    allow_unconfirmed: bool = True,
) -> Candidates:
    """Every release the spec allows (or the explicit image). Raises `ResolutionError` naming
    the field when none can ever satisfy it; the message points at the catalog override."""
    version = (framework_version or "").strip() or None
    if version is not None and not _VERSION.match(version.lstrip("vV")):
        raise ResolutionError(
            FIELD_VERSION, f"expected a version such as 2.4, got {framework_version!r}"
        )
    want = parse_cuda(cuda)
    spec = catalog.image_spec(framework)
    if image and image.strip():
        explicit = _explicit(catalog, spec, image.strip(), version, want)
        rels = (explicit.release,) if explicit.release is not None else ()
        return Candidates(spec, rels, "given as spec.image", explicit)
    if spec is None:
        raise ResolutionError(
            FIELD_NAME,
            f"no NGC image for framework {framework!r} in the catalog; "
            f"known: {', '.join(catalog.frameworks())}",
        )
    fw = spec.ships
    shipping = catalog.releases_for(spec.framework)
    if not shipping:
        raise ResolutionError(FIELD_NAME, f"no NGC release in the catalog has a {fw} image")

    def shipped(r: Release) -> str:
        return r.version_of(fw) or ""

    matching = [r for r in shipping if version is None or version_matches(version, shipped(r))]
    if not matching:
        raise ResolutionError(
            FIELD_VERSION,
            f"{fw} {version} is in no NGC release in the catalog; available: "
            f"{available_versions([shipped(r) for r in shipping])}{OVERRIDE_HINT}",
        )
    what = f"{fw} {version}" if version else fw
    candidates = [r for r in matching if want is None or _pad(r.cuda) >= _pad(want)]
    if not candidates:
        assert want is not None
        newest = matching[-1]
        raise ResolutionError(
            FIELD_CUDA,
            f"no NGC release ships {what} with CUDA >= {'.'.join(map(str, want))}; "
            f"{what} comes with CUDA {matching[0].cuda_text} .. {newest.cuda_text} "
            f"(NGC {matching[0].name} .. {newest.name}){OVERRIDE_HINT}",
        )
    if not allow_unconfirmed:
        confirmed = [r for r in candidates if not r.unconfirmed_node_facts(fw)]
        if not confirmed:
            facts = ", ".join(
                f"{r.name}: {'/'.join(r.unconfirmed_node_facts(fw))}" for r in candidates
            )
            raise ResolutionError(
                FIELD_NAME,
                f"every NGC release shipping {what} has unconfirmed facts ({facts}) and the "
                "operator forbids unconfirmed releases (allowUnconfirmedReleases: false); "
                "confirm them against NVIDIA's release notes through catalogOverrides "
                "(docs/catalog.md)",
            )
        candidates = confirmed
    cond = f"shipping {what}" + (f" with CUDA >= {'.'.join(map(str, want))}" if want else "")
    return Candidates(spec, tuple(candidates), cond)


def resolve_image(
    catalog: Catalog,
    framework: str,
    framework_version: str | None,
    cuda: str | None,
    *,
    image: str | None = None,
    fleet: Sequence[GpuFacts] = (),
) -> ImageChoice:
    """Pick the image for a job without placing it: the newest candidate release at least
    one node of `fleet` runs natively or otherwise (`trainop.eligibility` does the gang-aware
    choice the planner uses; this one serves tenant policy and tools).

    Raises `ResolutionError` whose message names the field (spec.framework.name,
    spec.framework.version, spec.cuda) and says what is available."""
    cands = candidate_releases(catalog, framework, framework_version, cuda, image=image)
    if cands.explicit is not None:
        return cands.explicit
    candidates = list(cands.releases)
    cond = cands.condition
    newest_first = list(reversed(candidates))
    chosen = newest_first[0]
    which = "newest"
    tail = "."
    if fleet:
        nodes = set(fleet)  # GpuFacts is frozen: identical nodes are checked once
        runnable = next(
            (
                r
                for r in newest_first
                if any(
                    check_node(catalog, f, r.cuda_mm, r, archs=cands.choice(r, "").archs).ok
                    for f in nodes
                )
            ),
            None,
        )
        if runnable is None and not any(is_gpu_node(f) for f in nodes):
            tail = ", though no node of the fleet can run it or any older match."
        elif runnable is None:
            # Nothing runs anywhere: report against the oldest match, whose needs are the
            # lowest, so the wait message names the real obstacle (e.g. an old driver)
            # rather than a newer release's extra requirements.
            chosen, which = candidates[0], "oldest"
            tail = "; no node of the fleet can run it or any newer match."
        elif runnable is not chosen:
            tail = f" that a node of the fleet can run; newer {chosen.name} runs on none."
            chosen = runnable
        else:
            tail = " and a node of the fleet can run it."
    return cands.choice(chosen, f"{cands.head(chosen)} is the {which} release {cond}{tail}")

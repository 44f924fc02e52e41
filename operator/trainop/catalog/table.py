"""Renders the catalog as fixed-width text tables for `trainop catalog`.

`catalog_table`: one row per (framework, NGC release): framework version, CUDA, minimum
driver, compute capability and CPU architectures (arm64 where the catalog's window
says; an unconfirmed one is marked and not used); with nodes, which of them (counted per product) can run
the image, by the same `compat.check_node` the operator uses. A '*' marks a value the
catalog lists as unconfirmed. `node_class_table`: per node class (nodes with identical
GPU facts), which releases run natively and which only through forward or minor-version
compatibility. `unconfirmed_facts`: every fact still marked unconfirmed (`--check`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from trainop.catalog.compat import MODE_FORWARD, MODE_MINOR, MODE_NATIVE, check_node
from trainop.catalog.gfd import GpuFacts
from trainop.catalog.images import ResolutionError, parse_cuda
from trainop.catalog.model import Catalog, ImageArchs, Release, version_text

_MARK = "*"


def _cell(value: str | None, release: Release, *fields: str) -> str:
    if value is None:
        return "-"
    return value + (_MARK if any(release.is_unconfirmed(f) for f in fields) else "")


def _arch_cell(archs: ImageArchs) -> str:
    """'amd64', 'amd64,arm64', or 'amd64,arm64*' for an unconfirmed (unused) arm64."""
    names = sorted(archs.known) + [f"{a}{_MARK}" for a in sorted(archs.unconfirmed)]
    return ",".join(names)


def _nodes_cell(
    catalog: Catalog,
    release: Release,
    nodes: Sequence[tuple[str, GpuFacts]],
    archs: ImageArchs | None = None,
) -> str:
    counts: Counter[str] = Counter()
    for _name, facts in nodes:
        if check_node(catalog, facts, release.cuda_mm, release, archs=archs).ok:
            counts[facts.product or "unlabelled GPU"] += 1
    if not counts:
        return "none"
    return ", ".join(f"{p} x{n}" for p, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def catalog_table(
    catalog: Catalog,
    framework: str | None = None,
    cuda: str | None = None,
    nodes: Sequence[tuple[str, GpuFacts]] = (),
) -> str:
    """The images of `framework` (all by default) with CUDA >= `cuda`, newest first per
    framework; a NODES column when `nodes` (name, facts) are given."""
    if framework is not None and catalog.image_spec(framework) is None:
        raise ResolutionError(
            "framework",
            f"unknown framework {framework!r}; known: {', '.join(catalog.frameworks())}",
        )
    try:
        want = parse_cuda(cuda)
    except ResolutionError as e:  # name the command-line flag, not the spec field
        raise ResolutionError("--cuda", e.detail) from None
    specs = [catalog.image_spec(framework)] if framework is not None else list(catalog.images)

    header = ["FRAMEWORK", "VERSION", "RELEASE", "CUDA", "MIN DRIVER", "MIN CC", "ARCH", "IMAGE"]
    if nodes:
        header.append("NODES")
    rows: list[list[str]] = []
    any_unconfirmed = False
    for spec in specs:
        assert spec is not None
        for r in reversed(catalog.releases_for(spec.framework)):
            if want is not None and (*r.cuda, 0, 0)[:3] < (*want, 0, 0)[:3]:
                continue
            archs = spec.archs_for(r)
            row = [
                spec.framework,
                _cell(r.version_of(spec.ships), r, spec.ships),
                r.name,
                _cell(r.cuda_text, r, "cuda"),
                _cell(r.min_driver_text, r, "min_driver"),
                _cell(r.min_cc_text, r, "min_cc"),
                _arch_cell(archs),
                spec.image_for(r),
            ]
            any_unconfirmed |= any(_MARK in cell for cell in row)
            if nodes:
                row.append(_nodes_cell(catalog, r, nodes, archs))
            rows.append(row)
    if not rows:
        return "no image in the catalog matches"
    widths = [max(len(x[i]) for x in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    if any_unconfirmed:
        lines.append(
            f"{_MARK} unconfirmed: inferred, check the NGC release notes (catalog.yaml); "
            f"an unconfirmed architecture is not used"
        )
    return "\n".join(lines)


def unconfirmed_facts(catalog: Catalog) -> list[str]:
    """One line per catalog entry with unconfirmed facts: releases ('NGC 24.01: cuda 12.3.2;
    ...'), GPU products ('GPU NVIDIA-H20: cc 9.0; ...') and images ('image mpi (...): which
    releases still bundle Horovod')."""
    out = []
    for r in reversed(catalog.releases):
        if not r.unconfirmed:
            continue
        values = {
            "cuda": r.cuda_text,
            "min_driver": r.min_driver_text,
            "min_cc": r.min_cc_text,
            "fc_branches": ", ".join(str(b) for b in r.fc_branches) or "none listed",
            "cudnn": r.cudnn,
            "nccl": r.nccl,
            "python": r.python,
            **dict(r.frameworks),
        }
        facts = "; ".join(f"{f} {values.get(f) or '-'}" for f in sorted(r.unconfirmed))
        out.append(f"NGC {r.name}: {facts}")
    for g in catalog.gpus:
        if not g.unconfirmed:
            continue
        gv = {
            "label": g.label,
            "cc": version_text(g.cc),
            "family": g.family,
            "memory_mib": str(g.memory_mib) if g.memory_mib else None,
            "min_cuda": version_text(g.min_cuda) if g.min_cuda else None,
            "min_driver": version_text(g.min_driver) if g.min_driver else None,
        }
        facts = "; ".join(f"{f} {gv.get(f) or '-'}" for f in sorted(g.unconfirmed))
        out.append(f"GPU {g.label}: {facts}")
    for i in catalog.images:
        for f in sorted(i.unconfirmed):
            what = _IMAGE_FACTS.get(f, f)
            if f == "arm64" and i.arm64 is not None:
                since, until = (f"{k[0]:02d}.{k[1]:02d}" if k else "" for k in i.arm64)
                what += f" ({since or 'any'}..{until}; not used: amd64 only until confirmed)"
            out.append(f"image {i.framework} ({i.repository}): {what}")
    return out


_IMAGE_FACTS = {
    "horovod": "which releases still bundle Horovod",
    "arm64": "the releases published for arm64",
}


def _runs(names: list[str], order: list[str]) -> str:
    """Release names as ranges of consecutive catalog releases: '23.03..24.05, 25.08'."""
    if not names:
        return "-"
    idx = sorted(order.index(n) for n in names)
    parts: list[str] = []
    start = prev = idx[0]
    for i in [*idx[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(order[start] if start == prev else f"{order[start]}..{order[prev]}")
        if i is not None:
            start = prev = i
    return ", ".join(parts)


def _class_name(facts: GpuFacts) -> str:
    drv = facts.driver_label or facts.driver_text or "no driver label"
    cc = facts.compute_capability_text or "?"
    share = f", {facts.sharing}" if facts.sharing else ""
    arch = f", {facts.arch}" if facts.arch and facts.arch != "amd64" else ""
    return f"{facts.product or 'unlabelled GPU'} (driver {drv}, cc {cc}{share}{arch})"


def node_class_table(catalog: Catalog, nodes: Sequence[tuple[str, GpuFacts]]) -> str:
    """Per node class: the releases it runs natively, through forward compatibility only,
    and through minor-version compatibility only (checked like the operator checks)."""
    classes: dict[GpuFacts, int] = Counter(replace(f, clique=None) for _, f in nodes)
    order = [r.name for r in catalog.releases]
    header = ["NODE CLASS", "NODES", "NATIVE", "FORWARD COMPAT ONLY", "MINOR-VERSION ONLY"]
    rows = []
    for facts, count in sorted(classes.items(), key=lambda kv: _class_name(kv[0])):
        if not any((facts.product, facts.driver, facts.compute_capability)):
            continue
        by_mode: dict[str, list[str]] = {MODE_NATIVE: [], MODE_FORWARD: [], MODE_MINOR: []}
        for r in catalog.releases:
            verdict = check_node(catalog, facts, r.cuda_mm, r)
            if verdict.mode is not None:
                by_mode[verdict.mode].append(r.name)
        rows.append([_class_name(facts), str(count)] + [_runs(by_mode[m], order) for m in by_mode])
    if not rows:
        return "no GPU node classes"
    widths = [max(len(x[i]) for x in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    )

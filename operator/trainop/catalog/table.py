"""Renders the catalog as a fixed-width text table for `trainop catalog`.

One row per (framework, NGC release): framework version, CUDA, minimum driver and
compute capability; with nodes, which of them (counted per product) can run the
image, by the same `compat.check_node` the operator uses. A '*' marks a value the
catalog lists as unconfirmed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from trainop.catalog.compat import check_node
from trainop.catalog.gfd import GpuFacts
from trainop.catalog.images import ResolutionError, parse_cuda
from trainop.catalog.model import Catalog, Release

_MARK = "*"


def _cell(value: str | None, release: Release, *fields: str) -> str:
    if value is None:
        return "-"
    return value + (_MARK if any(release.is_unconfirmed(f) for f in fields) else "")


def _nodes_cell(catalog: Catalog, release: Release, nodes: Sequence[tuple[str, GpuFacts]]) -> str:
    counts: Counter[str] = Counter()
    for _name, facts in nodes:
        if check_node(catalog, facts, release.cuda_mm, release).ok:
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

    header = ["FRAMEWORK", "VERSION", "RELEASE", "CUDA", "MIN DRIVER", "MIN CC", "IMAGE"]
    if nodes:
        header.append("NODES")
    rows: list[list[str]] = []
    any_unconfirmed = False
    for spec in specs:
        assert spec is not None
        for r in reversed(catalog.releases_for(spec.framework)):
            if want is not None and (*r.cuda, 0, 0)[:3] < (*want, 0, 0)[:3]:
                continue
            row = [
                spec.framework,
                _cell(r.version_of(spec.ships), r, spec.ships),
                r.name,
                _cell(r.cuda_text, r, "cuda"),
                _cell(r.min_driver_text, r, "min_driver"),
                _cell(r.min_cc_text, r, "min_cc"),
                spec.image_for(r),
            ]
            any_unconfirmed |= any(_MARK in cell for cell in row)
            if nodes:
                row.append(_nodes_cell(catalog, r, nodes))
            rows.append(row)
    if not rows:
        return "no image in the catalog matches"
    widths = [max(len(x[i]) for x in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    if any_unconfirmed:
        lines.append(f"{_MARK} unconfirmed: inferred, check the NGC release notes (catalog.yaml)")
    return "\n".join(lines)

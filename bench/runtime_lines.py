"""Lines of YAML per example, written inline and as a runtime-based twin (issue 34).

For each TrainingJob example in examples/, the lines a user writes (neither blank nor a
comment) in the inlined example and in its twin under examples/runtimes/, which names one of
the ClusterTrainingRuntimes the chart ships (charts/trainop/runtimes/; written once by the
platform team, their lines are listed apart). tests/unit/test_runtime_examples.py checks
that each twin renders to the same objects as its inlined example, and the same table in
docs/runtimes.md. Writes bench/results/runtime-lines.{json,md}. Numbers, never assertions.

    .venv/bin/python bench/runtime_lines.py
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TWINS = EXAMPLES / "runtimes"
RUNTIMES = ROOT / "charts" / "trainop" / "runtimes"
OUT = ROOT / "bench" / "results"


def yaml_lines(path: Path) -> int:
    """Lines a user writes: neither blank nor a comment."""
    lines = path.read_text().splitlines()
    return sum(1 for line in lines if line.strip() and not line.lstrip().startswith("#"))


def main() -> None:
    rows = []
    for twin in sorted(TWINS.glob("*.yaml")):
        runtime = yaml.safe_load(twin.read_text())["spec"]["runtimeRef"]["name"]
        inline = yaml_lines(EXAMPLES / twin.name)
        short = yaml_lines(twin)
        rows.append(
            {
                "example": twin.name,
                "runtime": runtime,
                "inline": inline,
                "with_runtime": short,
                "runtime_lines": yaml_lines(RUNTIMES / f"{runtime}.yaml"),
            }
        )
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "runtime-lines.json").write_text(json.dumps(rows, indent=2) + "\n")
    total_in, total_rt = sum(r["inline"] for r in rows), sum(r["with_runtime"] for r in rows)
    md = [
        "# Lines of YAML per example, with and without a runtime",
        "",
        "Made by `bench/runtime_lines.py` (its docstring says what is counted). The twin of "
        "each example names a ClusterTrainingRuntime the Helm chart ships; it renders to the "
        "same objects (tests/unit/test_runtime_examples.py).",
        "",
        "| example | inline | with a runtime | saved | runtime (written once) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        saved = 1 - r["with_runtime"] / r["inline"]
        md.append(
            f"| `{r['example']}` | {r['inline']} | {r['with_runtime']} | {saved:.0%} | "
            f"`{r['runtime']}`, {r['runtime_lines']} lines |"
        )
    md.append(f"| all six | {total_in} | {total_rt} | {1 - total_rt / total_in:.0%} | |")
    (OUT / "runtime-lines.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()

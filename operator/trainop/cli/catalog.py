"""`trainop catalog`: the framework images trainop can run, and which nodes can run each.

Prints `catalog.catalog_table`: one row per (framework, NGC release) with framework version,
CUDA, minimum driver and compute capability; `--nodes` (`kubectl get nodes -o yaml` output)
adds the nodes able to run each image, checked exactly as the planner checks them, and a
second table per node class (identical GPU facts): the releases it runs natively and those
it runs only through forward or minor-version compatibility. `--check` lists the catalog
facts still marked unconfirmed (exit 0; 1 when there are any, for CI). Filters that match
no image exit 3 with the newest CUDA the catalog has, so a script never reads an empty
answer as success.
"""

from __future__ import annotations

import click

from trainop.catalog import (
    Catalog,
    GpuFacts,
    ResolutionError,
    catalog_table,
    gpu_facts_from_labels,
)
from trainop.catalog.images import parse_cuda
from trainop.catalog.table import node_class_table, unconfirmed_facts
from trainop.cli.inputs import InputError, exit_invalid, object_name, read_objects
from trainop.config import ConfigError, load_operator_config
from trainop.planner import OperatorConfig

EXIT_NO_MATCH = 3  # the flags are valid, but no image in the catalog matches them


def _no_match(catalog: Catalog, framework: str | None, cuda: str | None) -> str:
    """Why the filters select nothing, naming what exists; "" when some image matches. The
    flags are already checked (catalog_table raised on bad ones)."""
    want = parse_cuda(cuda)
    names = [framework] if framework else list(catalog.frameworks())
    releases = [r for name in names for r in catalog.releases_for(name)]
    what = f"{framework} image" if framework else "image"
    if not releases:
        return f"no {what} in the catalog"
    if want is None or any((*r.cuda, 0, 0)[:3] >= (*want, 0, 0)[:3] for r in releases):
        return ""
    newest = max(releases, key=lambda r: r.cuda)
    return (
        f"--cuda {cuda}: no {what} in the catalog has CUDA {cuda} or newer; the newest has "
        f"CUDA {newest.cuda_text} (NGC {newest.name}): lower --cuda or leave it out"
    )


@click.command("catalog")
@click.option("--framework", metavar="NAME", help="Only this framework (pytorch, tensorflow, ...).")
@click.option("--cuda", metavar="X.Y", help="Only images with at least this CUDA version.")
@click.option(
    "--nodes",
    "nodes_file",
    metavar="NODES.yaml",
    type=click.Path(dir_okay=False, exists=True, allow_dash=True),
    help="Nodes (`kubectl get nodes -o yaml`): add which of them can run each image.",
)
@click.option(
    "--config",
    "config_file",
    metavar="CONFIG.yaml",
    type=click.Path(dir_okay=False, exists=True),
    help="Operator config whose catalogOverrides apply.",
)
@click.option(
    "--check",
    is_flag=True,
    help="List the facts still marked unconfirmed; exit 1 when there are any.",
)
def catalog(
    framework: str | None,
    cuda: str | None,
    nodes_file: str | None,
    config_file: str | None,
    check: bool,
) -> None:
    """Show the catalog: framework x NGC release x CUDA x minimum driver x compute capability."""
    try:
        config = load_operator_config(config_file) if config_file else OperatorConfig()
        nodes: list[tuple[str, GpuFacts]] = []
        if nodes_file:
            for node in read_objects(nodes_file, "Node", "--nodes"):
                labels = (node.get("metadata") or {}).get("labels") or {}
                nodes.append((object_name(node), gpu_facts_from_labels(labels)))
    except ConfigError as exc:
        exit_invalid(f"--config: {exc}")
    except InputError as exc:
        exit_invalid(str(exc))
    try:
        table = catalog_table(config.catalog, framework=framework, cuda=cuda, nodes=nodes)
    except ResolutionError as exc:
        flag = "--framework" if exc.field == "framework" else exc.field
        exit_invalid(f"{flag}: {exc.detail}")
    if check:
        lines = unconfirmed_facts(config.catalog)
        for line in lines:
            click.echo(line)
        click.echo(
            f"{len(lines)} catalog entries (releases, GPUs, images) with unconfirmed facts; "
            "confirm them against NVIDIA's release notes and set them through catalogOverrides"
            if lines
            else "every catalog fact is confirmed"
        )
        raise SystemExit(1 if lines else 0)
    why = _no_match(config.catalog, framework, cuda)
    if why:
        click.echo(f"error: {why}", err=True)
        raise SystemExit(EXIT_NO_MATCH)
    click.echo(table)
    if nodes:
        click.echo("")
        click.echo(node_class_table(config.catalog, nodes))

"""Entry point of the `trainop` command: wires the subcommands together."""

from __future__ import annotations

import click

from trainop import __version__
from trainop.cli.catalog import catalog
from trainop.cli.cluster import cluster
from trainop.cli.convert import convert
from trainop.cli.explain import explain
from trainop.cli.generate import generate
from trainop.cli.images import images
from trainop.cli.render import render
from trainop.cli.run import run
from trainop.cli.simulate import simulate_cmd


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trainop")
def cli() -> None:
    """trainop: topology-aware, multi-tenant distributed GPU training on Kubernetes."""


cli.add_command(cluster)
cli.add_command(images)
cli.add_command(generate)
cli.add_command(render)
cli.add_command(catalog)
cli.add_command(run)
cli.add_command(simulate_cmd)
cli.add_command(explain)
cli.add_command(convert)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()

"""`trainop images build|list|push`: the OCI images of the real nodes (trainop.cluster.images)."""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click

from trainop.cluster import binaries
from trainop.cluster import images as img
from trainop.cluster.local import ClusterError, LocalCluster
from trainop.cluster.realnode import RealNodeError


def _say(msg: str) -> None:
    click.echo(f"[trainop] {msg}", err=True)


@click.group("images")
def images() -> None:
    """Images built from Debian packages with no Docker and no registry (pause,
    pytorch-cpu, mpi-cpu, operator, tensorflow-cpu, jax-cpu, paddle-cpu, mxnet-cpu), cached
    by content; `push` sends one to a registry."""


@images.command("list")
def list_cmd() -> None:
    """Print `NAME REF` per image (REF is what a pod's `image:` names)."""
    for name, ref, _built in img.list_images():
        click.echo(f"{name} {ref}")


@images.command("build")
@click.argument("names", nargs=-1, type=click.Choice(img.ALL_IMAGES))
@click.option("--name", "cluster", default="trainop", show_default=True, help="Cluster name.")
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=lambda: max(2, (os.cpu_count() or 1) // 2),
    show_default="half the CPUs, at least 2",
    help="Images built at once (builds mostly download, unpack and install: I/O-bound).",
)
def build(names: tuple[str, ...], cluster: str, jobs: int) -> None:
    """Build the images (all by default) and import them into the cluster's real nodes."""
    wanted = list(dict.fromkeys(names or img.ALL_IMAGES))
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            archives = list(pool.map(lambda n: img.build_image(n, _say), wanted))
        built = dict(zip(wanted, archives, strict=True))
        lc = LocalCluster(name=cluster)
        rn = lc.real_nodes() if lc.exists() else None
        for node in rn.existing() if rn else []:
            for name, archive in built.items():
                _say(f"importing {name} into {node.name}")
                rn.import_image(node, archive, img.image_ref(name))  # type: ignore[union-attr]
    except (img.ImageError, ClusterError, RealNodeError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    for name in built:
        click.echo(f"{name} {img.image_ref(name)}")


@images.command("push")
@click.argument("image", metavar="IMAGE")
@click.argument("dest", metavar="REGISTRY/REPO:TAG")
@click.option(
    "--docker-config",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Docker config file with the registry's credentials (`docker login` / "
    "`crane auth login` write it)  [default: $DOCKER_CONFIG/config.json, ~/.docker/config.json]",
)
@click.option(
    "--insecure",
    is_flag=True,
    help="Plain HTTP (or TLS without verification): a local registry, never a shared one.",
)
def push(image: str, dest: str, docker_config: Path | None, insecure: bool) -> None:
    """Push IMAGE (a built image of `trainop images list`, or an OCI image archive file) to an
    OCI registry with go-containerregistry's crane (built once from the Go module proxy),
    over TLS unless --insecure. Prints REPO@DIGEST."""
    try:
        img.check_destination(dest)
        if docker_config is not None and not docker_config.is_file():
            raise img.ImageError(f"--docker-config {docker_config}: no such file (or not a file)")
        archive = img.image_archive(image)  # before building crane: say what is missing first
        crane = binaries.resolve_binaries(components=(binaries.CRANE,), progress=_say)["crane"]
        pushed = img.push_image(
            archive, dest, crane=crane, docker_config=docker_config, insecure=insecure, say=_say
        )
    except (img.ImageError, binaries.BuildError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    click.echo(pushed)

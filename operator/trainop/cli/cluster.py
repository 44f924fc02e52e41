"""`trainop cluster up|down|status|kubeconfig|build|env`: the local control plane with a fake GPU fleet."""

from __future__ import annotations

import json
import sys

import click

from trainop.cluster import binaries
from trainop.cluster.fleet import FleetError, load_fleet, summarize
from trainop.cluster.images import ImageError
from trainop.cluster.local import ClusterError, LocalCluster
from trainop.cluster.realnode import RealNodeError

_name = click.option("--name", default="trainop", show_default=True, help="Cluster name.")
_bin_dir = click.option(
    "--bin-dir",
    type=click.Path(file_okay=False),
    envvar="TRAINOP_BIN_DIR",
    help="Directory with prebuilt kube-apiserver, etcd, kwok, ... (else PATH, else built and cached).",
)


_kubernetes = click.option(
    "--kubernetes",
    type=click.Choice(binaries.KUBERNETES_MINORS),
    default="1.36",
    show_default=True,
    help="Kubernetes minor of the control plane: 1.37 (v1.37.2, built on first use) runs the "
    "upstream gang API (GenericWorkload, scheduling.k8s.io/v1beta1) for gangScheduling: "
    "kubernetes.",
)


def _fail(exc: Exception) -> None:
    click.echo(f"error: {exc}", err=True)
    sys.exit(1)


@click.group("cluster")
def cluster() -> None:
    """A local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
    with KWOK fake GPU nodes that carry NVIDIA GPU Feature Discovery labels."""


@cluster.command("build")
@click.option(
    "--real-nodes",
    is_flag=True,
    help="Also the binaries of real nodes (kubelet, containerd + shim + ctr, CoreDNS) and of "
    "images push (crane, a local registry).",
)
@_kubernetes
def build(real_nodes: bool, kubernetes: str) -> None:
    """Build (once) and cache every binary the local cluster and the tests need (Kueue's
    controller manager included, for the `externalQueue: kueue` tests)."""
    try:
        found = binaries.resolve_binaries(components=binaries.control_plane(kubernetes))
        kueue = (binaries.KUEUE, binaries.KUBE_APISERVER_STAMPED)
        for component in kueue:  # listed under their cache entries' names
            for name, path in binaries.resolve_binaries(components=(component,)).items():
                found[f"{name} ({component.name})" if name in found else name] = path
        if real_nodes:
            found.update(binaries.resolve_binaries(components=binaries.NODE_COMPONENTS))
            found.update(binaries.resolve_binaries(components=binaries.REGISTRY_COMPONENTS))
        for name, path in sorted(found.items()):
            click.echo(f"{name:25} {path}")
    except binaries.BuildError as exc:
        _fail(exc)


@cluster.command("up")
@_name
@_bin_dir
@click.option(
    "--fleet",
    "fleet_path",
    type=click.Path(dir_okay=False, exists=True),
    help="Fleet file (node classes x count x rack/block); default: the packaged one.",
)
@click.option(
    "--real-nodes",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Also run N real nodes (kubelet + containerd + runc on this machine; needs root).",
)
@_kubernetes
def up(
    name: str, bin_dir: str | None, fleet_path: str | None, real_nodes: int, kubernetes: str
) -> None:
    """Create (or repair) the cluster and its fleet; safe to run again."""
    lc = LocalCluster(name=name, bin_dir=bin_dir, kubernetes=kubernetes)
    try:
        lc.up(fleet_path, real_nodes=real_nodes)
        if real_nodes:  # images built before (any cluster) run here without a rebuild
            lc.import_built_images()
    except (ClusterError, FleetError, binaries.BuildError, RealNodeError, ImageError) as exc:
        _fail(exc)
    click.echo(f"export KUBECONFIG={lc.kubeconfig}")


@cluster.command("down")
@_name
@_bin_dir
def down(name: str, bin_dir: str | None) -> None:
    """Delete the cluster; no process or port is left behind."""
    lc = LocalCluster(name=name, bin_dir=bin_dir)
    try:
        lc.down()
    except (ClusterError, binaries.BuildError, RealNodeError) as exc:
        _fail(exc)
    click.echo(f"cluster {name!r} deleted")


@cluster.command("status")
@_name
@_bin_dir
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
def status(name: str, bin_dir: str | None, output: str) -> None:
    """Show whether the cluster runs, its processes and its nodes."""
    lc = LocalCluster(name=name, bin_dir=bin_dir)
    info = lc.status()
    if output == "json":
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(f"cluster     {info['name']} ({'serving' if info['apiReady'] else 'not serving'})")
    click.echo(f"kubeconfig  {info['kubeconfig']}")
    for comp, pid in sorted(info["processes"].items()):
        click.echo(f"  {comp:25} pid {pid}")
    if info.get("nodes") is not None:
        click.echo(f"nodes       {info['readyNodes']}/{info['nodes']} Ready")
    sys.exit(0 if info["apiReady"] else 1)


@cluster.command("kubeconfig")
@_name
def kubeconfig(name: str) -> None:
    """Print the path of the cluster's kubeconfig (use: export KUBECONFIG=$(trainop cluster kubeconfig))."""
    click.echo(str(LocalCluster(name=name).kubeconfig))


@cluster.command("env")
@_name
@_bin_dir
def env(name: str, bin_dir: str | None) -> None:
    """Print shell exports: KUBECONFIG and a PATH with the cached kubectl and helm first."""
    lc = LocalCluster(name=name, bin_dir=bin_dir)
    try:
        bins = lc.binaries(build=False)
    except binaries.BuildError as exc:
        _fail(exc)
    dirs = []
    for tool in ("kubectl", "helm"):
        d = str(bins[tool].parent)
        if d not in dirs:
            dirs.append(d)
    click.echo(f"export KUBECONFIG={lc.kubeconfig}")
    click.echo(f"export PATH={':'.join(dirs)}:$PATH")


@cluster.command("fleet")
@click.option("--fleet", "fleet_path", type=click.Path(dir_okay=False, exists=True))
@click.option("-o", "--output", type=click.Choice(["text", "json", "yaml"]), default="text")
def show_fleet(fleet_path: str | None, output: str) -> None:
    """Print the fleet (or, with -o json|yaml, the Node List it makes: a `--nodes` file for
    `trainop render` and `trainop catalog`)."""
    from trainop.cluster.fleet import node_manifests
    from trainop.yamlio import dump_yaml

    try:
        f = load_fleet(fleet_path)
    except FleetError as exc:
        _fail(exc)
    if output == "json":
        click.echo(json.dumps({"apiVersion": "v1", "kind": "List", "items": node_manifests(f)}))
        return
    if output == "yaml":
        # The header names the command, so examples/fleet-nodes.yaml says how to regenerate it.
        if fleet_path:
            header = (
                f"# Nodes of the fake GPU fleet {fleet_path}, as `kubectl get nodes -o yaml` "
                f"prints them.\n# Generated by: trainop cluster fleet --fleet {fleet_path} "
                "-o yaml"
            )
        else:
            header = (
                "# Nodes of the default fake GPU fleet, as `kubectl get nodes -o yaml` "
                "prints them: a --nodes file for `trainop render` and `trainop catalog`."
                "\n# Generated; regenerate with: "
                "trainop cluster fleet -o yaml > examples/fleet-nodes.yaml"
            )
        click.echo(header)
        click.echo(
            dump_yaml({"apiVersion": "v1", "kind": "List", "items": node_manifests(f)}), nl=False
        )
        return
    for row in summarize(f):
        click.echo(f"{row.group:28} {row.node_class:12} x{row.count:<3} {row.product}")

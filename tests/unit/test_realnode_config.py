"""Pure parts of the real-node tier: names/addresses, rendered configs, OCI archives, image keys."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from trainop.cluster import images, oci, realnode
from trainop.cluster.realnode import ClusterNet, NodeLayout


@pytest.mark.parametrize("cluster", ["trainop", "it-issue-13-real", "x" * 60])
def test_interface_names_fit_the_kernel_limit(cluster: str) -> None:
    for i in (0, 9):
        node = NodeLayout(cluster, i, Path("/tmp/x"))
        assert len(node.bridge) <= 15
    assert len(ClusterNet(cluster).dns_link) <= 15


def test_nodes_of_a_cluster_get_distinct_subnets_ports_and_names() -> None:
    nodes = [NodeLayout("c", i, Path("/s")) for i in range(3)]
    for attr in ("name", "bridge", "subnet", "gateway", "kubelet_port", "cgroup_root", "dir"):
        assert len({getattr(n, attr) for n in nodes}) == 3, attr
    assert nodes[1].gateway.endswith(".1.1") and nodes[1].subnet.endswith(".1.0/24")
    assert ClusterNet("c").dns_ip.startswith(f"10.{ClusterNet('c').octet}.255.")


def test_kubelet_config_runs_on_cgroup_v1_with_its_own_runtime() -> None:
    node = NodeLayout("c", 0, Path("/s"))
    cfg = realnode.kubelet_config(node)
    assert cfg["failCgroupV1"] is False
    assert cfg["cgroupDriver"] == "cgroupfs" and cfg["cgroupRoot"] == node.cgroup_root
    assert cfg["containerRuntimeEndpoint"] == f"unix://{node.sock}"
    assert cfg["clusterDNS"] == [ClusterNet("c").dns_ip]


def test_each_node_keeps_its_pod_logs_apart() -> None:
    """Kubelets that shared /var/log/pods removed each other's pods' logs (their log GC
    keeps only the directories of their own pods): each node has its own."""
    dirs = {realnode.kubelet_config(NodeLayout(c, i, Path(f"/s/real/{c}")))["podLogsDir"]
            for c in ("a", "b") for i in (0, 1)}  # fmt: skip
    assert len(dirs) == 4 and not any(d.startswith("/var/log") for d in dirs), dirs


@pytest.mark.parametrize("restrict", [True, False])
def test_containerd_config(restrict: bool) -> None:
    node = NodeLayout("c", 1, Path("/s"))
    text = realnode.containerd_config(
        node, "trainop.local/pause:1", "/usr/sbin/runc", "/cni", restrict
    )
    assert text.startswith("version = 3\n")
    assert f'address = "{node.sock}"' in text
    assert 'sandbox = "trainop.local/pause:1"' in text
    assert f"restrict_oom_score_adj = {'true' if restrict else 'false'}" in text
    assert '"io.containerd.nri.v1.nri"' in text  # disabled: its socket path is global


def test_cni_config_uses_the_node_bridge_and_subnet() -> None:
    node = NodeLayout("c", 2, Path("/s"))
    plugin = realnode.cni_config(node)["plugins"][0]
    assert plugin["type"] == "bridge" and plugin["bridge"] == node.bridge
    assert plugin["ipam"]["ranges"] == [[{"subnet": node.subnet, "gateway": node.gateway}]]


def test_corefile_serves_cluster_local_on_the_dns_address(tmp_path: Path) -> None:
    text = realnode.corefile(ClusterNet("c"), tmp_path / "kc")
    assert f"bind {ClusterNet('c').dns_ip}" in text
    assert "kubernetes cluster.local" in text and str(tmp_path / "kc") in text


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_oci_archive_is_a_valid_layout(tmp_path: Path) -> None:
    layer = oci.files_layer({"usr/bin/hello": (b"#!/bin/sh\necho hi\n", 0o755)}, tmp_path / "l.tar")
    cfg = oci.ImageConfig(entrypoint=("hello",), env={"A": "1"}, user="65532:65532")
    digest = oci.write_archive([layer], cfg, "trainop.local/x:1", tmp_path / "img.tar")
    with tarfile.open(tmp_path / "img.tar") as tar:
        blobs = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    index = json.loads(blobs["index.json"])
    (desc,) = index["manifests"]
    assert desc["digest"] == digest
    assert desc["annotations"]["io.containerd.image.name"] == "trainop.local/x:1"
    manifest = json.loads(blobs[f"blobs/sha256/{digest.split(':')[1]}"])
    for d in [manifest["config"], *manifest["layers"]]:
        data = blobs[f"blobs/sha256/{d['digest'].split(':')[1]}"]
        assert _sha(data) == d["digest"] and len(data) == d["size"]
    config = json.loads(blobs[f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}"])
    assert config["config"]["Entrypoint"] == ["hello"] and config["config"]["Env"] == ["A=1"]
    assert config["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]


def test_files_layer_depends_on_content_only(tmp_path: Path) -> None:
    files = {"a/b/c.txt": (b"x", 0o644)}
    one = oci.files_layer(files, tmp_path / "1.tar")
    two = oci.files_layer(files, tmp_path / "2.tar")
    assert oci.file_digest(one) == oci.file_digest(two)
    with tarfile.open(one) as tar:
        assert tar.getnames() == ["a", "a/b", "a/b/c.txt"]


def test_image_refs_are_stable_and_follow_content(monkeypatch: pytest.MonkeyPatch) -> None:
    refs = {name: images.image_ref(name) for name in images.ALL_IMAGES}
    assert refs == {name: images.image_ref(name) for name in images.ALL_IMAGES}
    assert all(r.startswith(f"trainop.local/{n}:") for n, r in refs.items())
    monkeypatch.setattr(images, "TORCHRUN", images.TORCHRUN + "# changed\n")
    assert images.image_ref("pytorch-cpu") != refs["pytorch-cpu"]
    assert images.image_ref("mpi-cpu") == refs["mpi-cpu"]


def test_images_list_prints_name_and_ref_per_line() -> None:
    from click.testing import CliRunner

    from trainop.cli.main import cli

    out = CliRunner().invoke(cli, ["images", "list"])
    assert out.exit_code == 0, out.output
    rows = [line.split(" ") for line in out.output.splitlines()]
    assert [r[0] for r in rows] == list(images.ALL_IMAGES)
    assert all(len(r) == 2 and r[1] == images.image_ref(r[0]) for r in rows)


def test_real_nodes_count_must_not_be_negative() -> None:
    from click.testing import CliRunner

    from trainop.cli.main import cli

    out = CliRunner().invoke(cli, ["cluster", "up", "--real-nodes", "-1"])
    assert out.exit_code == 2 and "--real-nodes" in out.output


def test_preflight_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(realnode.os, "geteuid", lambda: 1000)
    assert "root" in realnode.preflight()
    monkeypatch.setattr(realnode.os, "geteuid", lambda: 0)
    monkeypatch.setattr(realnode, "RUNC_PATHS", ("/nonexistent/runc",))
    monkeypatch.setattr(realnode, "CNI_BIN_DIRS", ("/nonexistent/cni",))
    reason = realnode.preflight()
    assert "runc (Debian package runc)" in reason and "containernetworking-plugins" in reason
    assert "make real-deps" in reason

"""`trainop images push`: what it accepts as a destination and a docker config, the crane
command it runs, the OCI image layout it unpacks for crane, and the Go recipes of crane and
the registry (built by `make build-node-binaries`, never by `make build-binaries`).

The push itself, through crane to a real registry and on to containerd, is the real-node
tier's (tests/real/test_2_helm.py).
"""

from __future__ import annotations

import json
import tarfile
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from trainop.cli.main import cli
from trainop.cluster import binaries, images, oci, realnode


@pytest.mark.parametrize(
    "dest",
    [
        pytest.param("registry.example.com/ml/trainop-operator:0.1.0", id="host-and-path"),
        pytest.param("127.0.0.1:5000/trainop/operator:3f2a9c", id="loopback-port"),
        pytest.param("localhost/operator:dev", id="localhost"),
        pytest.param("[::1]:5000/operator:v1", id="ipv6"),
        pytest.param("docker.io/someone/trainop:0.1", id="docker-hub"),
        pytest.param("ghcr.io/org/sub/trainop__op-x:v1.2_rc.3", id="separators"),
    ],
)
def test_destination_accepted(dest: str) -> None:
    assert images.check_destination(dest) == dest


@pytest.mark.parametrize(
    ("dest", "says"),
    [
        pytest.param("registry.example.com/ml/op", "is not REGISTRY/REPO:TAG", id="no-tag"),
        pytest.param("registry.example.com/ML/op:1", "lowercase repository", id="uppercase"),
        pytest.param("someone/trainop:0.1", "docker.io/someone/trainop:0.1", id="no-host"),
        pytest.param("trainop:0.1", "is not REGISTRY/REPO:TAG", id="no-repo"),
        pytest.param("registry.example.com/:1", "is not REGISTRY/REPO:TAG", id="empty-repo"),
        pytest.param("registry.example.com/op:1:2", "is not REGISTRY/REPO:TAG", id="two-tags"),
        pytest.param("https://registry.example.com/op:1", "REGISTRY/REPO:TAG", id="scheme"),
    ],
)
def test_destination_refused_with_the_fix(dest: str, says: str) -> None:
    with pytest.raises(images.ImageError, match="destination") as err:
        images.check_destination(dest)
    assert says in str(err.value)


@pytest.mark.parametrize(
    ("insecure", "expected"),
    [
        pytest.param(False, ["/b/crane", "push", "/l", "r.io/a:1"], id="tls"),
        pytest.param(True, ["/b/crane", "push", "--insecure", "/l", "r.io/a:1"], id="insecure"),
    ],
)
def test_crane_push_command(insecure: bool, expected: list[str]) -> None:
    assert images.crane_push_command(Path("/b/crane"), Path("/l"), "r.io/a:1", insecure) == (
        expected
    )


def test_docker_config_named_config_json_is_used_in_place(tmp_path: Path) -> None:
    conf = tmp_path / "config.json"
    conf.write_text('{"auths": {"r.io": {"auth": "dTpw"}}}')
    assert images.docker_config_dir(conf, tmp_path / "work") == tmp_path


def test_docker_config_of_another_name_is_copied_as_config_json(tmp_path: Path) -> None:
    conf = tmp_path / "ci-auth.json"
    conf.write_text('{"credHelpers": {"r.io": "gcloud"}}')
    (tmp_path / "work").mkdir()
    found = images.docker_config_dir(conf, tmp_path / "work")
    assert json.loads((found / "config.json").read_text()) == {"credHelpers": {"r.io": "gcloud"}}


@pytest.mark.parametrize(
    ("content", "says"),
    [
        pytest.param("{not json", "not a readable JSON file", id="not-json"),
        pytest.param('["auths"]', "expected a JSON object", id="not-object"),
    ],
)
def test_docker_config_refused(tmp_path: Path, content: str, says: str) -> None:
    conf = tmp_path / "config.json"
    conf.write_text(content)
    with pytest.raises(images.ImageError, match="--docker-config") as err:
        images.docker_config_dir(conf, tmp_path)
    assert says in str(err.value)


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


@pytest.mark.parametrize(
    ("args", "exit_code", "says"),
    [
        pytest.param(
            ["nope", "r.io/a:1"],
            1,
            "IMAGE 'nope' is neither an image of `trainop images list` (pause, ",
            id="unknown-image",
        ),
        pytest.param(
            [__file__, "r.io/a:1"],
            1,
            f"IMAGE '{__file__}': {__file__} has no readable index.json",
            id="not-an-oci-archive",
        ),
        pytest.param(["operator"], 2, "Missing argument 'REGISTRY/REPO:TAG'", id="no-dest"),
        pytest.param(["operator", "r.io/a"], 1, "is not REGISTRY/REPO:TAG", id="no-tag"),
        pytest.param(["operator", "me/a:1"], 1, "names no registry host", id="no-host"),
        pytest.param(
            ["operator", "r.io/a:1", "--docker-config", "/nonexistent/config.json"],
            1,
            "--docker-config /nonexistent/config.json: no such file",
            id="missing-docker-config",
        ),
        pytest.param(
            ["pause", "r.io/a:1"],
            1,
            "image pause is not built; run `trainop images build pause` first",
            id="not-built",
        ),
    ],
)
def test_push_cli_refuses_bad_arguments(
    empty_cache: Path, args: list[str], exit_code: int, says: str
) -> None:
    result = CliRunner().invoke(cli, ["images", "push", *args])
    assert result.exit_code == exit_code, result.output
    assert says in result.output
    assert "Traceback" not in result.output


def _archive(tmp_path: Path) -> tuple[Path, str]:
    layer = oci.files_layer({"bin/hello": (b"#!/bin/sh\necho hi\n", 0o755)}, tmp_path / "l.tar")
    out = tmp_path / "img.oci.tar"
    digest = oci.write_archive([layer], oci.ImageConfig(entrypoint=("/bin/hello",)), "r/x:1", out)
    return out, digest


def test_unpacked_layout_is_the_archive_image(tmp_path: Path) -> None:
    archive, digest = _archive(tmp_path)
    layout = tmp_path / "layout"
    assert oci.unpack_layout(archive, layout) == digest == oci.manifest_digest(archive)
    assert json.loads((layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    manifest_blob = layout / "blobs" / "sha256" / digest.split(":")[1]
    assert oci.file_digest(manifest_blob) == digest
    manifest = json.loads(manifest_blob.read_text())
    assert manifest["mediaType"] == oci.MANIFEST and len(manifest["layers"]) == 1


def test_unpack_refuses_a_tar_that_is_no_oci_image(tmp_path: Path) -> None:
    tar_path = tmp_path / "docker-save.tar"
    (tmp_path / "manifest.json").write_text("[]")
    with tarfile.open(tar_path, "w") as tar:
        tar.add(tmp_path / "manifest.json", arcname="manifest.json")
    with pytest.raises(oci.LayoutError, match="is not an OCI image archive"):
        oci.unpack_layout(tar_path, tmp_path / "layout")


def test_unpack_refuses_an_archive_with_a_missing_blob(tmp_path: Path) -> None:
    archive, _ = _archive(tmp_path)
    partial = tmp_path / "partial.tar"
    with tarfile.open(archive) as src, tarfile.open(partial, "w") as dst:
        members = src.getmembers()
        for m in members[:-1]:  # the manifest blob is written last
            dst.addfile(m, src.extractfile(m))
    with pytest.raises(oci.LayoutError, match="lacks blob"):
        oci.unpack_layout(partial, tmp_path / "layout")


def test_crane_is_go_installed_at_its_pinned_version() -> None:
    (cmd,) = binaries.go_install_commands(binaries.CRANE)
    assert cmd[:2] == ["go", "install"]
    assert cmd[-1] == f"github.com/google/go-containerregistry/cmd/crane@{binaries.CRANE_VERSION}"
    assert binaries.component_dir(binaries.CRANE).name == f"crane-{binaries.CRANE_VERSION}"


def test_registry_is_built_with_the_filesystem_driver_only() -> None:
    module, main_go = binaries.OWN_MAIN["distribution"]
    assert module == "github.com/distribution/distribution/v3"
    drivers = [line for line in main_go.splitlines() if "/storage/driver/" in line]
    assert drivers == [
        '\t_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"'
    ]
    assert binaries.DISTRIBUTION.binaries == ("registry",)


def test_registry_binaries_stay_out_of_the_default_build() -> None:
    """`make build-binaries` (cold CI's `make test`) builds COMPONENTS only."""
    default = {c.name for c in binaries.COMPONENTS}
    assert {c.name for c in binaries.REGISTRY_COMPONENTS}.isdisjoint(default)
    assert "distribution" in binaries.VERSION_PINNED  # a `registry` on PATH could be anything


def test_real_node_containerd_pulls_from_a_plain_http_registry(tmp_path: Path) -> None:
    node = realnode.NodeLayout("c", 0, tmp_path)
    config = tomllib.loads(realnode.containerd_config(node, "pause:1", "/runc", "/cni", False))
    images_plugin = config["plugins"]["io.containerd.cri.v1.images"]
    assert images_plugin["registry"]["config_path"] == str(node.registry_hosts_dir)
    hosts = tomllib.loads(realnode.registry_hosts_toml("127.0.0.1:5000"))
    assert hosts["server"] == "http://127.0.0.1:5000"
    assert hosts["host"]["http://127.0.0.1:5000"]["capabilities"] == ["pull", "resolve"]

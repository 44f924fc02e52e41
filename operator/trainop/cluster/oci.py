"""Writes OCI image archives (an image layout in a tar) from layer tarballs, with no registry,
and unpacks them back into an image layout directory.

Used by `trainop.cluster.images`, which makes the layers (a Debian root filesystem from
mmdebstrap, a static binary, trainop's own files), imports the archive into a real node's
containerd with `ctr images import`, and pushes the unpacked layout directory to a registry
with crane (`crane push DIR REF` reads an OCI image layout directory; skopeo's `oci:` and
`oci-archive:` transports read the directory and the archive alike).

Format (OCI Image Layout and Image specs, https://github.com/opencontainers/image-spec/blob/main/image-layout.md,
https://github.com/opencontainers/image-spec/blob/main/config.md): the archive holds
`oci-layout`, `index.json` and `blobs/sha256/<digest>` for each layer (uncompressed tar:
media type `application/vnd.oci.image.layer.v1.tar`, so a layer's digest is also its
diff_id), the image config and the manifest. The index names the image in the
`org.opencontainers.image.ref.name` annotation and in `io.containerd.image.name`, the one
`ctr images import` reads as the full image name.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
CONFIG = "application/vnd.oci.image.config.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
_CHUNK = 1 << 20
# Fixed timestamps keep the archive's digests a function of its contents only.
EPOCH = "1970-01-01T00:00:00Z"


@dataclass(frozen=True)
class ImageConfig:
    """The runtime part of an image config (what a Dockerfile's ENV/USER/ENTRYPOINT set)."""

    entrypoint: Sequence[str] = ()
    cmd: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    user: str = ""
    workdir: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    exposed_ports: Sequence[int] = ()


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def _json_blob(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _descriptor(media_type: str, data_digest: str, size: int) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": data_digest, "size": size}


def config_document(config: ImageConfig, diff_ids: Sequence[str]) -> dict[str, Any]:
    runtime: dict[str, Any] = {"Env": [f"{k}={v}" for k, v in config.env.items()]}
    if config.entrypoint:
        runtime["Entrypoint"] = list(config.entrypoint)
    if config.cmd:
        runtime["Cmd"] = list(config.cmd)
    if config.user:
        runtime["User"] = config.user
    if config.workdir:
        runtime["WorkingDir"] = config.workdir
    if config.labels:
        runtime["Labels"] = dict(config.labels)
    if config.exposed_ports:
        runtime["ExposedPorts"] = {f"{p}/tcp": {} for p in config.exposed_ports}
    return {
        "architecture": "amd64",
        "os": "linux",
        "created": EPOCH,
        "config": runtime,
        "rootfs": {"type": "layers", "diff_ids": list(diff_ids)},
        "history": [{"created": EPOCH, "created_by": "trainop images build"} for _ in diff_ids],
    }


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def write_archive(layers: Sequence[Path], config: ImageConfig, ref: str, out: Path) -> str:
    """Write the OCI archive of an image made of `layers` (bottom first); return its
    manifest digest, which names the image's content."""
    layer_descs = [_descriptor(LAYER_TAR, file_digest(p), p.stat().st_size) for p in layers]
    config_blob = _json_blob(config_document(config, [d["digest"] for d in layer_descs]))
    config_digest = "sha256:" + hashlib.sha256(config_blob).hexdigest()
    manifest_blob = _json_blob(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": _descriptor(CONFIG, config_digest, len(config_blob)),
            "layers": layer_descs,
        }
    )
    manifest_digest = "sha256:" + hashlib.sha256(manifest_blob).hexdigest()
    manifest_desc = _descriptor(MANIFEST, manifest_digest, len(manifest_blob))
    manifest_desc["annotations"] = {
        "org.opencontainers.image.ref.name": ref,
        "io.containerd.image.name": ref,
    }
    index = {"schemaVersion": 2, "mediaType": INDEX, "manifests": [manifest_desc]}
    tmp = out.with_name(out.name + ".partial")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        _add_bytes(tar, "oci-layout", _json_blob({"imageLayoutVersion": "1.0.0"}))
        _add_bytes(tar, "index.json", _json_blob(index))
        seen = set()
        for path, desc in zip(layers, layer_descs, strict=True):
            if desc["digest"] in seen:
                continue
            seen.add(desc["digest"])
            tar.add(path, arcname=f"blobs/sha256/{desc['digest'].split(':', 1)[1]}")
        _add_bytes(tar, f"blobs/sha256/{config_digest.split(':', 1)[1]}", config_blob)
        _add_bytes(tar, f"blobs/sha256/{manifest_digest.split(':', 1)[1]}", manifest_blob)
    tmp.rename(out)
    return manifest_digest


def files_layer(files: Mapping[str, tuple[bytes, int]], out: Path) -> Path:
    """A layer tarball of the given files (path in the image -> (content, mode)), parent
    directories included, owned by root, with fixed times: its digest depends on content only."""
    dirs: set[str] = set()
    for name in files:
        parts = name.strip("/").split("/")[:-1]
        dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for d in sorted(dirs):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
        for name in sorted(files):
            data, mode = files[name]
            info = tarfile.TarInfo(name.strip("/"))
            info.size = len(data)
            info.mode = mode
            tar.addfile(info, io.BytesIO(data))
    return out


class LayoutError(ValueError):
    """A file is not an OCI image archive of one image; the message says what is wrong."""


def unpack_layout(archive: Path, dest: Path) -> str:
    """Unpack an OCI image archive into the image layout directory `dest`, check that it
    holds one image whose blobs are all there, and return that image's manifest digest."""
    try:
        with tarfile.open(archive) as tar:
            names = set(tar.getnames())
            if "oci-layout" not in names or "index.json" not in names:
                raise LayoutError(
                    f"{archive} is not an OCI image archive (no oci-layout/index.json)"
                )
            # `data` refuses absolute paths, `..`, links out of dest and device files.
            tar.extractall(dest, filter="data")
    except (OSError, tarfile.TarError) as exc:
        raise LayoutError(f"{archive} could not be read as a tar: {exc}") from exc
    index = json.loads((dest / "index.json").read_text())
    manifests = index.get("manifests") or []
    if len(manifests) != 1 or manifests[0].get("mediaType") != MANIFEST:
        raise LayoutError(f"{archive} must hold exactly one image manifest, found {manifests}")
    digest = str(manifests[0]["digest"])
    manifest = json.loads(_blob(dest, digest).read_text())
    for desc in [manifest["config"], *manifest["layers"]]:
        blob = _blob(dest, desc["digest"])
        if blob.stat().st_size != desc["size"]:
            raise LayoutError(f"{archive}: blob {desc['digest']} is truncated; rebuild the image")
    return digest


def _blob(layout: Path, digest: str) -> Path:
    algorithm, _, hexdigest = digest.partition(":")
    path = layout / "blobs" / algorithm / hexdigest
    if not path.is_file():
        raise LayoutError(f"{layout} lacks blob {digest}; rebuild the image")
    return path


def manifest_digest(archive: Path) -> str:
    """The manifest digest of the one image in an OCI image archive (what a registry and
    the kubelet's imageID name it by once pushed)."""
    try:
        with tarfile.open(archive) as tar:
            member = tar.extractfile("index.json")
            index = json.loads(member.read()) if member is not None else {}
    except (OSError, KeyError, tarfile.TarError, ValueError) as exc:
        raise LayoutError(f"{archive} has no readable index.json: {exc}") from exc
    manifests = index.get("manifests") or []
    if len(manifests) != 1:
        raise LayoutError(f"{archive} must hold exactly one image manifest, found {manifests}")
    return str(manifests[0]["digest"])

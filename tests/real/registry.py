"""A real private OCI registry on loopback for the real-node tier: CNCF Distribution's
`registry` (https://distribution.github.io/distribution/, built once from the Go module proxy
by trainop.cluster.binaries), plain HTTP, htpasswd auth, filesystem storage in a temporary
directory.

The tier pushes the operator image into it with `trainop images push --docker-config` and
the real node's containerd pulls from it with an imagePullSecret holding the same docker
config (trainop.cluster.realnode.RealNodes.trust_plain_http_registry lets it use HTTP), as
on a cluster; tests/real/conftest.py owns its lifetime.
"""

from __future__ import annotations

import base64
import json
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path
from typing import Any

from trainop.cluster import binaries, oci
from trainop.cluster.realnode import kill_and_wait


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def registry_config(root: Path, address: str, htpasswd: Path) -> str:
    """Distribution's configuration (https://distribution.github.io/distribution/about/configuration/)."""
    return f"""version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {root}
http:
  addr: {address}
auth:
  htpasswd:
    realm: trainop-real-tier
    path: {htpasswd}
"""


def htpasswd_line(user: str, password: str) -> str:
    """`user:<bcrypt hash>`, the only hash Distribution's htpasswd accepts; glibc's crypt
    (libxcrypt on Debian) makes it. `crypt` is in the standard library up to 3.12."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt

    return f"{user}:{crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))}\n"


class LocalRegistry:
    """`registry serve` on 127.0.0.1:<free port>, storing under `workdir`, open to one user
    whose credentials are in the docker config file `docker_config`."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.address = f"127.0.0.1:{_free_port()}"
        self.user, self.password = "trainop", secrets.token_hex(12)
        # Not named config.json: `--docker-config` takes any file name.
        self.docker_config = workdir / "registry-auth.json"
        self.proc: subprocess.Popen[bytes] | None = None
        self.pushed: dict[str, str] = {}  # ref -> REPO@DIGEST, as `trainop images push` says

    def docker_config_json(self) -> dict[str, Any]:
        """What `docker login` writes (https://docs.docker.com/reference/cli/docker/login/)."""
        auth = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        return {"auths": {self.address: {"auth": auth}}}

    def start(self, timeout: float = 30) -> None:
        binary = binaries.resolve_binaries(components=(binaries.DISTRIBUTION,))["registry"]
        htpasswd = self.workdir / "htpasswd"
        htpasswd.write_text(htpasswd_line(self.user, self.password))
        self.docker_config.write_text(json.dumps(self.docker_config_json()))
        config = self.workdir / "config.yml"
        config.write_text(registry_config(self.workdir / "storage", self.address, htpasswd))
        log = open(self.workdir / "registry.log", "ab")  # noqa: SIM115 - the child's
        self.proc = subprocess.Popen(
            [str(binary), "serve", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.anonymous_status("/v2/") == 401:  # up, and asking for credentials
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"the registry did not start: {self.log_tail()}")

    def anonymous_status(self, path: str) -> int:
        """The HTTP status of GET `path` with no credentials (0: no answer)."""
        try:
            with urllib.request.urlopen(f"http://{self.address}{path}", timeout=2) as r:
                return int(r.status)
        except urllib.error.HTTPError as exc:
            return exc.code
        except (urllib.error.URLError, OSError):
            return 0

    def push(self, archive: Path, repository: str) -> str:
        """`trainop images push ARCHIVE <registry>/REPOSITORY:TAG --docker-config ...
        --insecure`, tagged with the start of the image's manifest digest; returns the ref
        and records what the command printed (REPO@DIGEST) in `pushed`."""
        digest = oci.manifest_digest(archive)
        ref = f"{self.address}/{repository}:{digest.split(':')[1][:12]}"
        cmd = [sys.executable, "-m", "trainop.cli.main", "images", "push", str(archive), ref]
        cmd += ["--docker-config", str(self.docker_config), "--insecure"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr[-3000:]}")
        self.pushed[ref] = proc.stdout.strip()
        return ref

    def log_tail(self) -> str:
        path = self.workdir / "registry.log"
        return path.read_text(errors="replace")[-3000:] if path.is_file() else ""

    def stop(self) -> None:
        if self.proc is not None:
            kill_and_wait([self.proc.pid], 10)
            self.proc.wait()

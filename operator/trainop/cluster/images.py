"""`trainop images build|list|push`: OCI images for the real nodes, built without Docker or a
registry, and pushed to any OCI registry with crane.

Each image is layers written by trainop.cluster.oci:
- a Debian bookworm root filesystem made by `mmdebstrap` (Debian package) from the
  packages the image lists; operator-only: a venv with trainop and its PyPI dependencies;
  the framework images (tensorflow-cpu, jax-cpu, paddle-cpu, mxnet-cpu): a venv at
  /opt/venv with the framework's wheels, pinned in trainop.cluster.wheels;
- a layer of trainop's own files: `trainop-launch` (standard library only, see
  trainop.launcher), small entrypoint scripts and the example training scripts.
`pause` (the pod sandbox image) is one static binary, trainop's own few lines of Go.

Caching is by content: an image's tag is a hash of its recipe (suite, packages, hooks)
and of the bytes of every file it copies in, so a changed file gives a new tag and an
unchanged recipe is never rebuilt. Archives (an OCI image layout in a tar, trainop.cluster.oci)
live in ~/.cache/trainop/images/.
Importing into real nodes: trainop.cluster.realnode.RealNodes.import_image. Pushing:
`push_image` unpacks the archive into a layout directory and runs go-containerregistry's
`crane push` (trainop.cluster.binaries builds it once), with a docker config's credentials.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from trainop.cluster import oci, wheels

REGISTRY = "trainop.local"
SUITE = "bookworm"
MIRROR = os.environ.get("TRAINOP_DEBIAN_MIRROR", "http://deb.debian.org/debian")
Say = Callable[[str], None]


class ImageError(RuntimeError):
    """An image could not be built; the message says which step and how to fix it."""


@dataclass(frozen=True)
class Recipe:
    """One image: Debian packages, trainop files to add, runtime config."""

    name: str
    packages: tuple[str, ...] = ()
    files: tuple[str, ...] = ()  # keys of _trainop_files()
    config: oci.ImageConfig = field(default_factory=oci.ImageConfig)
    pip_trainop: bool = False  # a venv at /opt/trainop: trainop's PyPI deps (base), trainop (layer)
    wheels: tuple[str, ...] = ()  # pinned PyPI wheels for a venv at /opt/venv (base layer)
    suite: str = SUITE  # the Debian release of the root filesystem
    python: str = "3.11"  # that release's CPython, for which the wheels are downloaded
    glibc: int = 36  # that release's glibc minor (2.<glibc>): the newest manylinux tag taken
    hooks: tuple[str, ...] = ()  # Python run in the root filesystem after the packages


PAUSE_GO = """package main

// trainop's pod sandbox: hold the pod's namespaces, reap children, exit on INT/TERM.
import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
"""

TRAINOP_LAUNCH = "#!/usr/bin/python3\nfrom trainop.launcher.main import main\n\nmain()\n"
TRAINOP_CLI = "#!/opt/trainop/bin/python3\nfrom trainop.cli.main import main\n\nmain()\n"
# Debian's python3-torch ships the module, not the `torchrun` console script. And its
# torch 1.13 predates Python 3.11, where iterating an IntFlag skips the zero member: its
# Std.from_str("0") (the default of --redirects and --tee) then returns None and torchrun
# fails in to_map(). The wrapper maps that None back to Std.NONE (fixed upstream in 2.0).
TORCHRUN = """#!/usr/bin/python3
import sys

from torch.distributed.elastic.multiprocessing import api

_from_str = api.Std.from_str.__func__


def _fixed(cls, vm):
    out = _from_str(cls, vm)
    if isinstance(out, dict):
        return {k: cls.NONE if v is None else v for k, v in out.items()}
    return cls.NONE if out is None else out


api.Std.from_str = classmethod(_fixed)

from torch.distributed.run import main  # noqa: E402

sys.exit(main())
"""
# hf-cpu's torchrun: the same, run by the venv's python (the workers it starts must import
# transformers and lightning).
TORCHRUN_VENV = TORCHRUN.replace("#!/usr/bin/python3", "#!/opt/venv/bin/python3", 1)
# Debian builds torch 2.6 without libuv, and TCPStore asks for libuv by default since 2.4
# ("use_libuv was requested but PyTorch was build without libuv support"). USE_LIBUV=0 (the
# image's env) turns it off where torch.distributed reads it, but not in the two stores
# torchrun's static rendezvous makes (the agent's, and each worker's client of it): a hook
# of the hf-cpu base passes use_libuv=False there (each edit asserts its text is found once).
NO_LIBUV = (
    "import pathlib\n"
    "d = pathlib.Path('/usr/lib/python3/dist-packages/torch/distributed')\n"
    "for rel, old in (\n"
    "    ('rendezvous.py', '            is_master=False,\\n            timeout=timeout,\\n'),\n"
    "    ('elastic/rendezvous/static_tcp_rendezvous.py', '                multi_tenant=True,\\n'),\n"
    "):\n"
    "    p = d / rel\n"
    "    s = p.read_text()\n"
    "    assert s.count(old) == 1, (rel, old)\n"
    "    last = old.rstrip('\\n').rsplit('\\n', 1)[-1]\n"
    "    indent = last[: len(last) - len(last.lstrip())]\n"
    "    p.write_text(s.replace(old, old + indent + 'use_libuv=False,\\n'))\n"
)
# Workers of an MPI job: install the job's keys (trainop-launch does), run sshd in front.
MPI_WORKER = """#!/bin/sh
set -e
mkdir -p /run/sshd
[ -f /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
exec trainop-launch -- /usr/sbin/sshd -D -e -o PermitRootLogin=prohibit-password -o HostKey=/etc/ssh/ssh_host_ed25519_key
"""
SITE = "usr/lib/python3/dist-packages"
PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

RECIPES = {
    "pytorch-cpu": Recipe(
        "pytorch-cpu",
        packages=("python3", "python3-torch", "python3-numpy", "procps", "iproute2"),
        files=("launcher", "torchrun", "examples"),
        config=oci.ImageConfig(env={"PATH": PATH_ENV, "PYTHONUNBUFFERED": "1"}, workdir="/"),
    ),
    "mpi-cpu": Recipe(
        "mpi-cpu",
        packages=(
            "python3",
            "python3-mpi4py",
            "python3-numpy",
            "openmpi-bin",
            "openssh-server",
            "openssh-client",
            "procps",
            "iproute2",
        ),
        files=("launcher", "mpi-worker", "examples"),
        config=oci.ImageConfig(env={"PATH": PATH_ENV, "PYTHONUNBUFFERED": "1"}, workdir="/"),
    ),
    "operator": Recipe(
        "operator",
        packages=("python3", "python3-venv", "ca-certificates"),
        pip_trainop=True,
        files=("operator",),
        config=oci.ImageConfig(
            entrypoint=("trainop", "run"),
            env={
                "PATH": "/opt/trainop/bin:" + PATH_ENV,
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONUNBUFFERED": "1",
                "HOME": "/tmp",
                # uid 65532 has no /etc/passwd entry; kopf names its identity after the
                # user (getpass.getuser(), which reads these first).
                "USER": "trainop",
                "LOGNAME": "trainop",
            },
            user="65532:65532",
            exposed_ports=(8080, 8081),
            labels={"org.opencontainers.image.title": "trainop-operator"},
        ),
    ),
}
# The framework images: Debian's python3 and a venv (seeing Debian's site-packages, where
# trainop-launch lives) with the framework's wheels; /opt/venv/bin comes first on PATH.
VENV = "/opt/venv"
# libstdc++6: every framework's compiled modules link it (mmdebstrap's essential variant
# has no C++ runtime); the rest of what they link (libc, libgcc_s, libz) is essential.
FRAMEWORK_PACKAGES = ("python3", "python3-venv", "libstdc++6", "procps", "iproute2")
FRAMEWORK_CONFIG = oci.ImageConfig(
    env={"PATH": f"{VENV}/bin:{PATH_ENV}", "PYTHONUNBUFFERED": "1"}, workdir="/"
)
RECIPES.update(
    {
        name: Recipe(
            name,
            packages=FRAMEWORK_PACKAGES + extra,
            files=("launcher", "examples"),
            config=FRAMEWORK_CONFIG,
            wheels=pins,
        )
        for name, pins, extra in (
            ("tensorflow-cpu", wheels.TENSORFLOW, ()),
            ("jax-cpu", wheels.JAX, ()),
            ("paddle-cpu", wheels.PADDLE, ("libgomp1",)),
            # libmxnet.so links libgomp, and its bundled libgfortran.so.3 libquadmath.
            ("mxnet-cpu", wheels.MXNET, ("libgomp1", "libquadmath0")),
        )
    }
)
# hf-cpu: Hugging Face transformers and Lightning on Debian trixie's PyTorch (2.6, CPU;
# bookworm's 1.13 is older than transformers 5 accepts, 2.6). PyPI's torch would pull
# gigabytes of CUDA wheels. Trixie's CPython is 3.13 and its glibc 2.41; torch and what it
# depends on (numpy, sympy, networkx, jinja2, filelock, fsspec, pyyaml, packaging,
# typing-extensions) come from Debian and the venv sees them (--system-site-packages).
# Debian ships no `torchrun` script: the wrapper runs torch.distributed.run with the venv's
# python, so the workers it starts import transformers and lightning.
TRIXIE = "trixie"
RECIPES["hf-cpu"] = Recipe(
    "hf-cpu",
    packages=(*FRAMEWORK_PACKAGES, "python3-torch"),
    files=("launcher", "torchrun-venv", "examples"),
    config=oci.ImageConfig(env={**FRAMEWORK_CONFIG.env, "USE_LIBUV": "0"}, workdir="/"),
    wheels=wheels.HF,
    hooks=(NO_LIBUV,),
    suite=TRIXIE,
    python="3.13",
    glibc=41,
)
FRAMEWORK_IMAGES = ("tensorflow-cpu", "jax-cpu", "paddle-cpu", "mxnet-cpu")
ALL_IMAGES = ("pause", *RECIPES)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trainop" / "images"


def repo_root() -> Path | None:
    """The source checkout (for the examples and the operator wheel), when installed from one."""
    here = Path(str(resources.files("trainop"))).resolve()
    root = here.parents[1]
    return root if (root / "pyproject.toml").is_file() else None


def _trainop_files() -> dict[str, dict[str, tuple[bytes, int]]]:
    """Groups of files (path in image -> content, mode) that recipes pick by key."""
    pkg = Path(str(resources.files("trainop")))
    launcher = {
        f"{SITE}/trainop/__init__.py": ((pkg / "__init__.py").read_bytes(), 0o644),
        "usr/local/bin/trainop-launch": (TRAINOP_LAUNCH.encode(), 0o755),
    }
    # trainop-launch, the Reporter and the SDK's runner (trainop.launcher.sdkrun), and the
    # trainer callbacks sdkrun installs for train() jobs: standard library only, both.
    for sub in ("launcher", "integrations"):
        for p in sorted((pkg / sub).glob("*.py")):
            launcher[f"{SITE}/trainop/{sub}/{p.name}"] = (p.read_bytes(), 0o644)
    examples: dict[str, tuple[bytes, int]] = {}
    root = repo_root()
    if root is not None:
        for p in sorted((root / "examples" / "scripts").glob("*.py")):
            examples[f"opt/trainop/examples/{p.name}"] = (p.read_bytes(), 0o644)
    venv_site = "opt/trainop/lib/python3.11/site-packages"
    operator = {"opt/trainop/bin/trainop": (TRAINOP_CLI.encode(), 0o755)}
    for p in sorted(pkg.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            operator[f"{venv_site}/trainop/{p.relative_to(pkg)}"] = (p.read_bytes(), 0o644)
    return {
        "operator": operator,
        "launcher": launcher,
        "torchrun": {"usr/local/bin/torchrun": (TORCHRUN.encode(), 0o755)},
        "torchrun-venv": {"usr/local/bin/torchrun": (TORCHRUN_VENV.encode(), 0o755)},
        "mpi-worker": {"usr/local/bin/trainop-mpi-worker": (MPI_WORKER.encode(), 0o755)},
        "examples": examples,
    }


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _files_of(recipe: Recipe) -> dict[str, tuple[bytes, int]]:
    groups = _trainop_files()
    out: dict[str, tuple[bytes, int]] = {}
    for key in recipe.files:
        out.update(groups[key])
    return out


def _base_key(recipe: Recipe) -> str:
    deps = trainop_dependencies() if recipe.pip_trainop else []
    parts: list[object] = [recipe.suite, MIRROR, sorted(recipe.packages), recipe.pip_trainop, deps]
    if recipe.wheels:  # only then, so the keys of the older images stay as they were
        parts.append(sorted(recipe.wheels))
    if recipe.hooks:
        parts.append(list(recipe.hooks))
    return _digest(parts)[:16]


RUNTIME_LOCK = "requirements.lock"  # `make lock`: pip-compile's pins of pyproject's dependencies


def _project_name(requirement: str) -> str:
    """PEP 503 normalized name of a requirement string ("PyYAML>=6" -> "pyyaml")."""
    name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
    return re.sub(r"[-_.]+", "-", name.group(0)).lower() if name else ""


def trainop_dependencies() -> list[str]:
    """The operator image's venv: every runtime package pinned by requirements.lock
    ("kopf==1.45.2", dependencies of dependencies included), so two builds install the same
    versions; the pins are part of the image key. pip-compile's hashes and comments are
    dropped (the download and the offline install take requirement strings). A lock missing
    one of pyproject.toml's dependencies is stale: an ImageError says to run `make lock`."""
    root = repo_root()
    if root is None:
        raise ImageError(f"the operator image needs trainop's source checkout ({RUNTIME_LOCK})")
    path = root / RUNTIME_LOCK
    try:
        text = path.read_text(encoding="utf-8")
        with (root / "pyproject.toml").open("rb") as f:
            wanted = tomllib.load(f)["project"]["dependencies"]
    except OSError as exc:
        raise ImageError(f"cannot read {exc.filename}: {exc.strerror}; run `make lock`") from None
    pins = []
    for line in text.replace("\\\n", " ").splitlines():
        requirement = line.split("#", 1)[0].split(" --hash", 1)[0].strip()
        if requirement and not requirement.startswith("-"):
            pins.append(requirement)
    missing = {_project_name(w) for w in wanted} - {_project_name(p) for p in pins}
    if missing:
        raise ImageError(
            f"{path} lacks {', '.join(sorted(missing))} (pyproject.toml dependencies); "
            "run `make lock`"
        )
    return pins


def image_key(name: str) -> str:
    if name == "pause":
        return _digest(["pause", PAUSE_GO])[:12]
    recipe = RECIPES[name]
    files = {k: [hashlib.sha256(v[0]).hexdigest(), v[1]] for k, v in _files_of(recipe).items()}
    return _digest([_base_key(recipe), files, recipe.config])[:12]


def image_ref(name: str) -> str:
    return f"{REGISTRY}/{name}:{image_key(name)}"


def archive_path(name: str) -> Path:
    return cache_dir() / f"{name}-{image_key(name)}.oci.tar"


def list_images() -> list[tuple[str, str, bool]]:
    """(name, ref, built) for every image, in a fixed order."""
    return [(n, image_ref(n), archive_path(n).is_file()) for n in ALL_IMAGES]


def _run(
    cmd: list[str], what: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip()[-3000:]
        raise ImageError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd[:6])} ...\n{tail}")


def _build_pause(work: Path) -> Path:
    if shutil.which("go") is None:
        raise ImageError("building the pause image needs `go` on PATH (Go >= 1.22)")
    (work / "go.mod").write_text("module trainop.dev/pause\n\ngo 1.22\n")
    (work / "main.go").write_text(PAUSE_GO)
    env = dict(os.environ, CGO_ENABLED="0")
    _run(
        ["go", "build", "-trimpath", "-ldflags=-s -w", "-o", "pause", "."],
        "go build pause",
        work,
        env,
    )
    return oci.files_layer({"pause": ((work / "pause").read_bytes(), 0o755)}, work / "layer.tar")


def _mmdebstrap(recipe: Recipe, out: Path, work: Path) -> None:
    if shutil.which("mmdebstrap") is None:
        raise ImageError(
            "`mmdebstrap` is not installed; install the Debian package (`make real-deps`)"
        )
    cmd = [
        "mmdebstrap",
        "--variant=essential",
        "--mode=root",
        "--format=tar",
        "--include=" + ",".join(recipe.packages),
        # No apt lists or caches in the image; docs and man pages are dead weight.
        '--customize-hook=rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/usr/share/doc/* "$1"/usr/share/man/*',
    ]
    if recipe.pip_trainop:
        # The dependencies' wheels are fetched here, with this machine's pip settings
        # (index, proxy, CA), and installed in the chroot offline; both are CPython 3.11
        # on x86_64 Linux. trainop itself goes into a layer of its own (files "operator").
        wheels, deps = work / "wheels", trainop_dependencies()
        _run(
            [sys.executable, "-m", "pip", "download", "-q", "-d", str(wheels), *deps],
            "pip download",
        )
        cmd += [
            f"--customize-hook=copy-in {wheels} /tmp",
            '--customize-hook=chroot "$1" python3 -m venv /opt/trainop',
            '--customize-hook=chroot "$1" /opt/trainop/bin/pip install -q --no-index '
            "--no-cache-dir --find-links /tmp/wheels " + " ".join(shlex.quote(d) for d in deps),
            '--customize-hook=rm -rf "$1"/tmp/wheels',
        ]
    for code in recipe.hooks:
        cmd.append(f'--customize-hook=chroot "$1" python3 -c {shlex.quote(code)}')
    if recipe.wheels:
        cmd += _wheel_hooks(recipe.wheels, work / "wheels", recipe.python, recipe.glibc)
    cmd += [recipe.suite, str(out), MIRROR]
    _run(cmd, f"mmdebstrap of {recipe.name}")


# Bookworm's glibc is 2.36 (trixie's 2.41): every manylinux tag up to it. pip 23 takes
# --platform literally (no expansion to older tags), so each is named.
def _platforms(glibc: int = 36) -> tuple[str, ...]:
    return (
        "manylinux1_x86_64",
        "manylinux2010_x86_64",
        "manylinux2014_x86_64",
        *(f"manylinux_2_{minor}_x86_64" for minor in range(5, glibc + 1)),
    )


_PLATFORMS = _platforms()


def _wheel_hooks(
    pins: tuple[str, ...], wheels_dir: Path, python: str = "3.11", glibc: int = 36
) -> list[str]:
    """Download the pinned wheels here (this machine's pip settings: index, proxy, CA) for
    the image's CPython (bookworm's 3.11 unless the recipe says otherwise), and mmdebstrap
    hooks that install them offline into VENV.

    The download takes exactly the pins (--no-deps); the install resolves dependencies
    against them, so a pin list missing a dependency fails the build, naming it.
    """
    platforms = [arg for p in _platforms(glibc) for arg in ("--platform", p)]
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    _run(
        [*pip, "--python-version", python, *platforms, "-d", str(wheels_dir), *pins],
        "pip download of the pinned wheels (trainop.cluster.wheels)",
    )
    return [
        f"--customize-hook=copy-in {wheels_dir} /tmp",
        f'--customize-hook=chroot "$1" python3 -m venv --system-site-packages {VENV}',
        f'--customize-hook=chroot "$1" {VENV}/bin/pip install -q --no-index --no-cache-dir '
        "--find-links /tmp/wheels " + " ".join(shlex.quote(p) for p in pins),
        '--customize-hook=rm -rf "$1"/tmp/wheels',
    ]


def build_image(name: str, say: Say) -> Path:
    """Build (unless cached) the image's OCI archive and return its path."""
    out = archive_path(name)
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"trainop-image-{name}-") as tmp:
        work = Path(tmp)
        if name == "pause":
            layers = [_build_pause(work)]
            config = oci.ImageConfig(entrypoint=("/pause",), user="65535:65535")
        else:
            recipe = RECIPES[name]
            base = cache_dir() / f"base-{name}-{_base_key(recipe)}.tar"
            if not base.is_file():
                say(
                    f"image {name}: mmdebstrap {recipe.suite} with {len(recipe.packages)} packages (once; cached)"
                )
                _mmdebstrap(recipe, work / "rootfs.tar", work)
                shutil.move(str(work / "rootfs.tar"), base)
                for stale in base.parent.glob(f"base-{name}-*.tar"):  # older recipes
                    if stale != base:
                        stale.unlink(missing_ok=True)
            layers = [base]
            files = _files_of(recipe)
            if files:
                layers.append(oci.files_layer(files, work / "trainop.tar"))
            config = recipe.config
        oci.write_archive(layers, config, image_ref(name), out)
    for stale in out.parent.glob(f"{name}-*.oci.tar"):  # older builds of this image
        if stale != out:
            stale.unlink(missing_ok=True)
    say(f"image {name}: {image_ref(name)} built in {time.monotonic() - started:.0f} s")
    return out


# --- pushing to a registry -----------------------------------------------------------

# The grammar of github.com/distribution/reference (reference.go): a registry host (a dot,
# a port or `localhost` tells it from a Docker Hub user name), lowercase path components,
# a tag. https://github.com/distribution/reference/blob/main/reference.go
_HOST = (
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
)
_DOMAIN = rf"(?:{_HOST}|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DESTINATION = re.compile(
    rf"(?P<domain>{_DOMAIN})/(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    r":(?P<tag>[\w][\w.-]{0,127})"
)


def check_destination(dest: str) -> str:
    """`dest` if it is REGISTRY/REPO:TAG, else an ImageError that says how to write it."""
    m = _DESTINATION.fullmatch(dest)
    if m is None:
        raise ImageError(
            f"destination {dest!r} is not REGISTRY/REPO:TAG: write e.g. "
            "registry.example.com/ml/trainop-operator:0.1.0 (lowercase repository, a tag; "
            "Docker Hub is docker.io/USER/REPO:TAG)"
        )
    domain = m["domain"]
    if "." not in domain and ":" not in domain and domain != "localhost":
        raise ImageError(
            f"destination {dest!r} names no registry host: {domain!r} has no dot or port "
            f"(write docker.io/{dest} for Docker Hub)"
        )
    return dest


def docker_config_dir(config_file: Path, tmp: Path) -> Path:
    """The directory to pass crane as DOCKER_CONFIG (it reads `config.json` there, as docker
    does: https://docs.docker.com/reference/cli/docker/#configuration-files), copying the
    file under that name when it is called otherwise."""
    try:
        doc = json.loads(config_file.read_text())
    except (OSError, ValueError) as exc:
        raise ImageError(
            f"--docker-config {config_file}: not a readable JSON file ({exc})"
        ) from exc
    if not isinstance(doc, dict):
        raise ImageError(f"--docker-config {config_file}: expected a JSON object with `auths`")
    if config_file.name == "config.json":
        return config_file.parent
    (tmp / "docker").mkdir(exist_ok=True)
    shutil.copyfile(config_file, tmp / "docker" / "config.json")
    return tmp / "docker"


def built_archive(name: str) -> Path:
    """The image's archive, or an ImageError saying how to build it."""
    archive = archive_path(name)
    if not archive.is_file():
        raise ImageError(f"image {name} is not built; run `trainop images build {name}` first")
    return archive


def crane_push_command(crane: Path, layout: Path, dest: str, insecure: bool) -> list[str]:
    """`crane push LAYOUT_DIR DEST`; --insecure allows plain HTTP (and unverified TLS)."""
    return [str(crane), "push", *(["--insecure"] if insecure else []), str(layout), dest]


def image_archive(image: str) -> Path:
    """The OCI image archive `image` names: a built image of ALL_IMAGES, or an archive file
    (what `build_image` returns: the fixed bytes of one build, even if the tree moves on)."""
    if image in ALL_IMAGES:
        archive = built_archive(image)
    elif Path(image).is_file():
        archive = Path(image)
    else:
        raise ImageError(
            f"IMAGE {image!r} is neither an image of `trainop images list` "
            f"({', '.join(ALL_IMAGES)}) nor an OCI image archive file"
        )
    try:
        oci.manifest_digest(archive)
    except oci.LayoutError as exc:
        raise ImageError(f"IMAGE {image!r}: {exc}") from exc
    return archive


def push_image(
    archive: Path,
    dest: str,
    *,
    crane: Path,
    docker_config: Path | None,
    insecure: bool,
    say: Say,
) -> str:
    """Push the image of an OCI image archive to `dest` (REGISTRY/REPO:TAG); return
    `REPO@DIGEST`, the digest being the archive's manifest digest."""
    check_destination(dest)
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="trainop-push-", dir=archive.parent) as tmp:
        work = Path(tmp)
        if docker_config is not None:
            env["DOCKER_CONFIG"] = str(docker_config_dir(docker_config, work))
        try:
            digest = oci.unpack_layout(archive, work / "layout")
        except oci.LayoutError as exc:
            raise ImageError(str(exc)) from exc
        say(f"pushing {archive.name} ({digest[:19]}) to {dest}")
        cmd = crane_push_command(crane, work / "layout", dest, insecure)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        plain_http = "server gave HTTP response to HTTPS client" in proc.stderr
        hint = " (a plain-HTTP registry needs --insecure)" if plain_http else ""
        raise ImageError(f"crane push to {dest} failed{hint}: {proc.stderr.strip()[-2000:]}")
    return proc.stdout.strip() or f"{dest.rsplit(':', 1)[0]}@{digest}"

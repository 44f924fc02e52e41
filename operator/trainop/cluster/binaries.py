"""Finds or builds (once, from the Go module proxy) the real binaries the local control plane runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

# Pinned releases. Each must build with the Go on the machine (Go 1.26 here; all four
# declare `go 1.26.0`). Kubernetes >= 1.34 is needed for DRA `resource.k8s.io/v1`.
KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"  # a release Kubernetes 1.36 supports (etcd 3.5 / 3.6)
KWOK_VERSION = "v0.8.0"
HELM_VERSION = "v3.22.0"
# Real nodes (`trainop cluster up --real-nodes N`) only. Kubernetes 1.36 needs containerd
# >= 2.0: 1.35 was the last release supporting 1.x (Kubernetes support matrix on
# https://containerd.io/releases/); Debian bookworm ships 1.6.
CONTAINERD_VERSION = "v2.2.9"
COREDNS_VERSION = "v1.14.7"
# Images: `trainop images push` runs go-containerregistry's crane
# (https://github.com/google/go-containerregistry/tree/main/cmd/crane); the real-node tier
# pushes to a local CNCF Distribution registry (https://distribution.github.io/distribution/).
CRANE_VERSION = "v0.22.1"
DISTRIBUTION_VERSION = "v3.1.2"
# Kueue's controller manager for `externalQueue: kueue` (trainop.cluster.kueue, docs/kueue.md).
# Its go.mod declares `go 1.25.0` and has no replace directives: a plain `go install`.
KUEUE_VERSION = "v0.17.0"

# Staging modules of k8s.io/kubernetes: its go.mod replaces each with ./staging/src/...,
# which `go build` outside that tree cannot follow, so our module pins every one to the
# published v0.<minor>.<patch>. The list mirrors the `replace` block of the release's
# go.mod; sample-* modules are not published and nothing we build imports them.
KUBERNETES_STAGING = (
    "api",
    "apiextensions-apiserver",
    "apimachinery",
    "apiserver",
    "cli-runtime",
    "client-go",
    "cloud-provider",
    "cluster-bootstrap",
    "code-generator",
    "component-base",
    "component-helpers",
    "controller-manager",
    "cri-api",
    "cri-client",
    "cri-streaming",
    "csi-translation-lib",
    "dynamic-resource-allocation",
    "endpointslice",
    "externaljwt",
    "kms",
    "kube-aggregator",
    "kube-controller-manager",
    "kube-proxy",
    "kube-scheduler",
    "kubectl",
    "kubelet",
    "metrics",
    "mount-utils",
    "pod-security-admission",
    "streaming",
)

KUBERNETES_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")


class BuildError(RuntimeError):
    """A binary could not be found or built; the message says which and why."""


@dataclass(frozen=True)
class Component:
    """One cache entry: a named group of binaries built together at one version."""

    name: str
    version: str
    binaries: tuple[str, ...]


COMPONENTS = (
    Component("kubernetes", KUBERNETES_VERSION, KUBERNETES_COMMANDS),
    Component("etcd", ETCD_VERSION, ("etcd",)),
    Component("kwok", KWOK_VERSION, ("kwok", "kwokctl")),
    Component("helm", HELM_VERSION, ("helm",)),
)
ALL_BINARIES = tuple(b for c in COMPONENTS for b in c.binaries)

# `trainop cluster up --kubernetes 1.37`: Kubernetes 1.37's control plane, for the upstream
# gang API (`gangScheduling: kubernetes`, trainop.workload). Its go.mod declares `go 1.26.0`
# (no newer toolchain needed) and replaces the same staging modules as 1.36's. Only what
# that mode runs is built; kubectl stays 1.36's (one minor apart: within the skew policy,
# https://kubernetes.io/releases/version-skew-policy/#kubectl). A cache entry of its own,
# built on first use, never by `make build-binaries` (see docs/gang-kubernetes.md).
KUBERNETES_137 = Component(
    "kubernetes", "v1.37.2", ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
)
KUBERNETES_MINORS = ("1.36", "1.37")


def control_plane(kubernetes: str = "1.36") -> tuple[Component, ...]:
    """The components `cluster up` runs for a Kubernetes minor (1.36: the default)."""
    if kubernetes not in KUBERNETES_MINORS:
        raise BuildError(
            f"--kubernetes: {kubernetes!r} is not one of {', '.join(KUBERNETES_MINORS)}"
        )
    # Later components win in resolve_binaries: 1.37's three commands replace 1.36's.
    return COMPONENTS if kubernetes == "1.36" else (*COMPONENTS, KUBERNETES_137)


# What a real node runs, built only when real nodes are asked for (the default `make test`
# path never builds them). The kubelet is its own cache entry so that adding it did not
# invalidate the control-plane build of the same Kubernetes version.
NODE_COMPONENTS = (
    Component("kubelet", KUBERNETES_VERSION, ("kubelet",)),
    Component("containerd", CONTAINERD_VERSION, ("containerd", "containerd-shim-runc-v2", "ctr")),
    Component("coredns-k8s", COREDNS_VERSION, ("coredns",)),
)

# CoreDNS with just the plugins realnode.corefile uses. The stock binary links every
# plugin (cloud DNS providers included: about 15 minutes to compile here); choosing
# plugins by importing them from an own main package is CoreDNS's documented way to
# customise a build (https://coredns.io/2017/07/25/compile-time-enabling-or-disabling-plugins/).
COREDNS_MAIN = """package main

import (
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
)

func main() { coremain.Run() }
"""
NODE_BINARIES = tuple(b for c in NODE_COMPONENTS for b in c.binaries)
# The registry with the filesystem storage driver and htpasswd auth only: upstream's
# cmd/registry also links the Azure, GCS and S3 drivers and their SDKs. Like CoreDNS, a
# main package of our own picks the drivers it imports (they register themselves in init);
# the command is upstream's registry.RootCmd (https://github.com/distribution/distribution/blob/main/cmd/registry/main.go).
DISTRIBUTION_MAIN = """package main

import (
	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() { registry.RootCmd.Execute() }
"""
# Pushing images: crane for `trainop images push` (built on its first use), a registry for
# the real-node tier. Built with the node binaries, never by `make build-binaries`.
CRANE = Component("crane", CRANE_VERSION, ("crane",))
DISTRIBUTION = Component("distribution", DISTRIBUTION_VERSION, ("registry",))
REGISTRY_COMPONENTS = (CRANE, DISTRIBUTION)
# Built by `trainop cluster build` (so `make build-binaries` and CI have it), but not needed
# by `cluster up`: only the Kueue integration tests and `make bench-scale` (bench.scale) start it.
KUEUE = Component("kueue", KUEUE_VERSION, ("kueue",))
# Kueue refuses to start against an API server whose /version is not a semantic version
# (setupServerVersionFetcher in cmd/kueue/main.go, v0.17.0); a plain `go build` of
# kube-apiserver reports v0.0.0-master+$Format:%H$. The Kueue tests' cluster runs this one:
# the same release with the version stamps Kubernetes' own build sets (hack/lib/version.sh,
# https://github.com/kubernetes/kubernetes/blob/master/hack/lib/version.sh), a relink of
# the kubernetes component's cached compile.
KUBE_APISERVER_STAMPED = Component(
    "kube-apiserver-stamped", KUBERNETES_VERSION, ("kube-apiserver",)
)


def stamped_ldflags(version: str) -> str:
    """-ldflags that stamp a Kubernetes build with its release (what /version reports)."""
    major, minor = version.lstrip("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    stamps = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    return " ".join([LDFLAGS, *(f"-X {pkg}.{k}={v}" for k, v in stamps.items())])


# Never taken from PATH: a distro kubectl or containerd 1.x of another version would not
# do, and `registry` is too generic a name to trust.
VERSION_PINNED = ("kubernetes", "kubelet", "containerd", "coredns-k8s", "distribution", "kueue")

# Modules without replace directives: plain `go install <module>/<binary>@<version>`.
# containerd's build tag drops the btrfs snapshotter, the one part that needs cgo (https://github.com/containerd/containerd/blob/main/BUILDING.md).
GO_INSTALL = {
    "kwok": ("sigs.k8s.io/kwok/cmd/{binary}", ()),
    "helm": ("helm.sh/helm/v3/cmd/{binary}", ()),
    "containerd": ("github.com/containerd/containerd/v2/cmd/{binary}", ("no_btrfs",)),
    "crane": ("github.com/google/go-containerregistry/cmd/{binary}", ()),
    "kueue": ("sigs.k8s.io/kueue/cmd/{binary}", ()),
}


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trainop" / "bin"


def component_dir(component: Component) -> Path:
    return cache_root() / f"{component.name}-{component.version}"


Progress = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(f"[trainop] {msg}", file=sys.stderr, flush=True)


def _run(cmd: list[str], cwd: Path, env: dict[str, str], progress: Progress, label: str) -> None:
    """Run a go command, streaming a heartbeat so a 5-minute compile does not look hung."""
    started = time.monotonic()
    progress(f"{label}: {' '.join(cmd[:3])} ...")
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        last = started
        while proc.poll() is None:
            time.sleep(1)
            if time.monotonic() - last >= 30:
                last = time.monotonic()
                progress(f"{label}: still building ({int(last - started)} s)")
        if proc.returncode != 0:
            log.seek(0)
            tail = log.read()[-4000:]
            raise BuildError(
                f"{label} failed (exit {proc.returncode}) running {' '.join(cmd)}:\n{tail}"
            )
    progress(f"{label}: done in {time.monotonic() - started:.0f} s")


def _go_env(gobin: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"
    env["GOFLAGS"] = "-mod=mod -buildvcs=false"
    if gobin is not None:
        env["GOBIN"] = str(gobin)
    return env


LDFLAGS = "-s -w"


def _kubernetes_go_mod(version: str) -> str:
    minor_patch = "v0." + version.lstrip("v").split(".", 1)[1]
    replaces = "\n".join(f"\tk8s.io/{m} => k8s.io/{m} {minor_patch}" for m in KUBERNETES_STAGING)
    return (
        "module trainop.dev/localcluster/kubernetes\n\ngo 1.26.0\n\n"
        f"require k8s.io/kubernetes {version}\n\nreplace (\n{replaces}\n)\n"
    )


def _tools_go(packages: Iterable[str]) -> str:
    imports = "\n".join(f'\t_ "{p}"' for p in packages)
    return f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n"


def _build_module(
    workdir: Path,
    go_mod: str,
    packages: list[str],
    out: Path,
    progress: Progress,
    label: str,
    ldflags: str = LDFLAGS,
) -> None:
    """Build main packages of a module that refuses `go install` (it has replace directives)
    by requiring it from a throwaway module of our own."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "go.mod").write_text(go_mod)
    (workdir / "tools.go").write_text(_tools_go(packages))
    env = _go_env()
    _run(["go", "mod", "tidy"], workdir, env, progress, f"{label} (resolve modules)")
    out.parent.mkdir(parents=True, exist_ok=True)
    # `-o dir/` names each binary after its package; `-o file` for a single package.
    target = str(out) + "/" if len(packages) > 1 else str(out)
    if len(packages) > 1:
        out.mkdir(parents=True, exist_ok=True)
    cmd = ["go", "build", "-trimpath", f"-ldflags={ldflags}", "-o", target, *packages]
    _run(cmd, workdir, env, progress, f"{label} (compile)")


def go_install_commands(component: Component) -> list[list[str]]:
    """One `go install <package>@<version>` per binary of a GO_INSTALL component."""
    pattern, tags = GO_INSTALL[component.name]
    cmds = []
    for binary in component.binaries:
        cmd = ["go", "install", "-trimpath", f"-ldflags={LDFLAGS}"]
        if tags:
            cmd.append("-tags=" + ",".join(tags))
        cmds.append([*cmd, f"{pattern.format(binary=binary)}@{component.version}"])
    return cmds


def _go_install(component: Component, dest: Path, work: Path, progress: Progress) -> None:
    env = _go_env(gobin=dest)
    dest.mkdir(parents=True, exist_ok=True)
    for binary, cmd in zip(component.binaries, go_install_commands(component), strict=True):
        _run(cmd, work, env, progress, f"{binary} {component.version}")


# Components built from a main package of our own: (module required, main.go).
OWN_MAIN = {
    "coredns-k8s": ("github.com/coredns/coredns", COREDNS_MAIN),
    "distribution": ("github.com/distribution/distribution/v3", DISTRIBUTION_MAIN),
}


def _build_own_main(component: Component, work: Path, dest: Path, progress: Progress) -> None:
    module, main_go = OWN_MAIN[component.name]
    (work / "go.mod").write_text(
        f"module trainop.dev/localcluster/{component.name}\n\ngo 1.26.0\n\n"
        f"require {module} {component.version}\n"
    )
    (work / "main.go").write_text(main_go)
    env = _go_env()
    label = f"{component.name} {component.version}"
    _run(["go", "mod", "tidy"], work, env, progress, f"{label} (resolve modules)")
    dest.mkdir(parents=True, exist_ok=True)
    (binary,) = component.binaries
    cmd = ["go", "build", "-trimpath", f"-ldflags={LDFLAGS}", "-o", str(dest / binary), "."]
    _run(cmd, work, env, progress, f"{label} (compile)")


def _build(component: Component, dest: Path, progress: Progress) -> None:
    with tempfile.TemporaryDirectory(prefix=f"trainop-build-{component.name}-") as tmp:
        work = Path(tmp)
        if component.name in ("kubernetes", "kubelet", KUBE_APISERVER_STAMPED.name):
            pkgs = [f"k8s.io/kubernetes/cmd/{c}" for c in component.binaries]
            stamped = component.name == KUBE_APISERVER_STAMPED.name
            # One `go build` for all commands so they share one compile of the common code.
            _build_module(
                work,
                _kubernetes_go_mod(component.version),
                pkgs,
                dest / pkgs[0].rsplit("/", 1)[1] if len(pkgs) == 1 else dest,
                progress,
                f"{component.name} {component.version}",
                stamped_ldflags(component.version) if stamped else LDFLAGS,
            )
        elif component.name == "etcd":
            go_mod = (
                "module trainop.dev/localcluster/etcd\n\ngo 1.26.0\n\n"
                f"require go.etcd.io/etcd/server/v3 {component.version}\n"
            )
            _build_module(
                work,
                go_mod,
                ["go.etcd.io/etcd/server/v3"],
                dest / "etcd",
                progress,
                f"etcd {component.version}",
            )
        elif component.name in OWN_MAIN:
            _build_own_main(component, work, dest, progress)
        elif component.name in GO_INSTALL:
            _go_install(component, dest, work, progress)
        else:  # pragma: no cover - COMPONENTS is closed
            raise BuildError(f"unknown component {component.name}")


def ensure_component(component: Component, progress: Progress = _stderr) -> Path:
    """Return the cache dir holding the component's binaries, building it if absent."""
    dest = component_dir(component)
    if all((dest / b).is_file() for b in component.binaries):
        return dest
    if shutil.which("go") is None:
        raise BuildError(
            f"{component.name} {component.version} is not cached in {dest} and `go` is not on "
            "PATH; install Go >= 1.26 or pass --bin-dir with prebuilt binaries"
        )
    progress(f"building {component.name} {component.version} into {dest} (once; cached after)")
    staging = dest.with_name(dest.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    _build(component, staging, progress)
    missing = [b for b in component.binaries if not (staging / b).is_file()]
    if missing:
        raise BuildError(f"{component.name} build produced no {', '.join(missing)} in {staging}")
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)  # atomic: a half-built cache entry is never mistaken for a full one
    return dest


def resolve_binaries(
    bin_dir: str | Path | None = None,
    *,
    build: bool = True,
    progress: Progress = _stderr,
    components: tuple[Component, ...] = COMPONENTS,
) -> dict[str, Path]:
    """Map every binary name to a path: --bin-dir first, then PATH, then the build cache.

    PATH is consulted only for a component whose binaries are all there, so a distro
    `kubectl` shim is never mixed with our own apiserver of another version.
    """
    found: dict[str, Path] = {}
    for component in components:
        paths: dict[str, Path] = {}
        if bin_dir is not None:
            for b in component.binaries:
                p = Path(bin_dir) / b
                if p.is_file() and os.access(p, os.X_OK):
                    paths[b] = p
        if len(paths) < len(component.binaries) and component.name not in VERSION_PINNED:
            on_path = {b: shutil.which(b) for b in component.binaries}
            if all(on_path.values()):
                paths = {b: Path(str(p)) for b, p in on_path.items()}
        if len(paths) < len(component.binaries):
            cached = component_dir(component)
            if not all((cached / b).is_file() for b in component.binaries):
                if not build:
                    raise BuildError(
                        f"{component.name} {component.version} binaries are not built; "
                        "run `trainop cluster build` (or `trainop cluster up`) first"
                    )
                cached = ensure_component(component, progress)
            paths = {b: cached / b for b in component.binaries}
        found.update(paths)
    return found

"""Real nodes of the local cluster: a kubelet on containerd + runc + CNI, as processes here.

`trainop cluster up --real-nodes N` (trainop.cluster.local) starts, per node, a containerd
2.x (built from the Go module proxy, trainop.cluster.binaries) with runc and the CNI
bridge/host-local/loopback plugins from Debian, and a kubelet registered as
`<cluster>-real-<i>`; once per cluster a CoreDNS answering for cluster.local, and the
sandbox ("pause") image. Images come from trainop.cluster.images.

Everything a node makes lives under its directory (state dir/real/<cluster>/<node>:
containerd root and state, kubelet root, network namespaces, logs, pids) plus a cgroup
root `/trainop-<cluster>-<node>`, a bridge and, per cluster, one port-less bridge carrying
the DNS address. `stop_all` removes all of it: processes, mounts, netns, cgroups, links.

Choices, and why:
- Nodes share the host network namespace; each has its own bridge and /24, so pods of
  different nodes reach each other through the host's routing. No kube-proxy: the jobs
  reach each other by pod DNS names of headless Services, which CoreDNS answers.
- CoreDNS runs as a host process on an address of its own (a port-less bridge): a
  ClusterIP would need kube-proxy.
- kubelet: cgroupfs driver, `failCgroupV1: false` (kubelet >= 1.35 refuses cgroup v1
  otherwise: https://kubernetes.io/docs/reference/config-api/kubelet-config.v1beta1/),
  an anonymous API on the node's bridge address so that the apiserver can fetch logs, eviction
  thresholds near zero since the disk is shared with the rest of the machine.
- containerd: its own socket, root and state; NRI off (its socket path is global);
  network namespaces under its state dir (`netns_mounts_under_state_dir`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainop.api import constants as c

CNI_BIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
RUNC_PATHS = ("/usr/sbin/runc", "/usr/bin/runc")
REAL_NODE_LABEL = "trainop.dev/real-node"
# The machine real nodes pretend to be (a class of the packaged fleet): PCIe T4s, TCP
# fabric, so the catalog, placement and NCCL profile accept them without special cases.
REAL_NODE_CLASS = "pcie-t4"
CLUSTER_DOMAIN = "cluster.local"

Say = Callable[[str], None]


class RealNodeError(RuntimeError):
    """A real node could not be started or cleaned; the message says what and how to fix."""


def _h(text: str, n: int = 4) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


@dataclass(frozen=True)
class ClusterNet:
    """Addresses of one cluster's real nodes: 10.<octet>.<node>.0/24, DNS on .255.53."""

    cluster: str

    @property
    def octet(self) -> int:
        return 100 + int(_h(self.cluster, 6), 16) % 100

    @property
    def dns_ip(self) -> str:
        return f"10.{self.octet}.255.53"

    @property
    def dns_link(self) -> str:
        return f"tro{_h(self.cluster)}dns"


@dataclass(frozen=True)
class NodeLayout:
    """Names, paths, addresses and ports of real node `index` of `cluster` (pure)."""

    cluster: str
    index: int
    base: Path

    @property
    def name(self) -> str:
        return f"{self.cluster}-real-{self.index}"

    @property
    def dir(self) -> Path:
        return self.base / f"real-{self.index}"

    @property
    def sock(self) -> Path:
        return self.dir / "containerd.sock"

    @property
    def bridge(self) -> str:
        return f"tro{_h(self.cluster)}b{self.index}"

    @property
    def subnet(self) -> str:
        return f"10.{ClusterNet(self.cluster).octet}.{self.index}.0/24"

    @property
    def gateway(self) -> str:
        return f"10.{ClusterNet(self.cluster).octet}.{self.index}.1"

    @property
    def kubelet_port(self) -> int:
        return 20000 + (int(_h(self.cluster, 6), 16) % 400) * 100 + self.index * 2

    @property
    def cgroup_root(self) -> str:
        return f"/trainop-{self.cluster}-real-{self.index}"

    @property
    def registry_hosts_dir(self) -> Path:
        """containerd's per-registry host configs: <dir>/<host:port>/hosts.toml."""
        return self.dir / "certs.d"


def containerd_config(
    node: NodeLayout, sandbox_image: str, runc: str, cni_bin: str, restrict_oom: bool
) -> str:
    """containerd 2.x config (version 3: https://github.com/containerd/containerd/blob/main/docs/cri/config.md).

    `restrict_oom`: without CAP_SYS_RESOURCE (a container or a sandboxed VM) no process may
    lower its oom_score_adj, and runc fails on the kubelet's -998 for sandboxes; containerd
    then clamps the value to its own.
    """
    d = node.dir
    return f"""version = 3
root = "{d}/containerd/root"
state = "{d}/containerd/state"
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
                    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{node.sock}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "{node.registry_hosts_dir}"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{sandbox_image}"

[plugins."io.containerd.cri.v1.runtime"]
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = {"true" if restrict_oom else "false"}
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{cni_bin}"]
    conf_dir = "{d}/cni"
"""


def registry_hosts_toml(address: str) -> str:
    """containerd's hosts.toml for a plain-HTTP registry at `address` (host:port): pull and
    resolve over http, which containerd otherwise tries over https first
    (https://github.com/containerd/containerd/blob/main/docs/hosts.md)."""
    return f"""server = "http://{address}"

[host."http://{address}"]
  capabilities = ["pull", "resolve"]
"""


def cni_config(node: NodeLayout) -> dict[str, Any]:
    """bridge + host-local + loopback (https://www.cni.dev/plugins/current/main/bridge/)."""
    return {
        "cniVersion": "1.0.0",
        "name": f"trainop-{node.index}",
        "plugins": [
            {
                "type": "bridge",
                "bridge": node.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.subnet, "gateway": node.gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(node.dir / "cni-ipam"),
                },
            },
        ],
    }


def kubelet_config(node: NodeLayout) -> dict[str, Any]:
    """KubeletConfiguration (https://kubernetes.io/docs/reference/config-api/kubelet-config.v1beta1/)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # The node IP (its bridge's address): the apiserver connects here for logs and exec.
        "address": node.gateway,
        "port": node.kubelet_port,
        "healthzPort": node.kubelet_port + 1,
        "healthzBindAddress": "127.0.0.1",
        "readOnlyPort": 0,
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{node.sock}",
        # Each node's own pod log directory: with the default /var/log/pods, shared by every
        # real node (and cluster) on this machine, each kubelet's log GC removed the others'
        # pods' logs, and `kubectl logs` read a file that was started again.
        "podLogsDir": str(node.dir / "pod-logs"),
        "clusterDNS": [ClusterNet(node.cluster).dns_ip],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": "/etc/resolv.conf",
        "evictionHard": {
            "memory.available": "50Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "rotateCertificates": False,
        "registerNode": True,
        "maxPods": 110,
        "nodeStatusReportFrequency": "10s",
        "localStorageCapacityIsolation": False,
    }


def node_labels(node: NodeLayout, gfd: dict[str, str]) -> dict[str, str]:
    return {
        REAL_NODE_LABEL: "true",
        c.LABEL_BLOCK: "real",
        c.LABEL_RACK: f"real-{node.index}",
        "trainop.dev/node-class": REAL_NODE_CLASS,
        **gfd,
    }


def corefile(net: ClusterNet, kubeconfig: Path) -> str:
    """CoreDNS: the kubernetes plugin (https://coredns.io/plugins/kubernetes/) on the DNS address."""
    return f""".:53 {{
    bind {net.dns_ip}
    errors
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
}}
"""


# --- host plumbing ------------------------------------------------------------------


def find_host_tool(candidates: Iterable[str], what: str, package: str) -> str:
    for p in candidates:
        if Path(p).exists():
            return p
    raise RealNodeError(
        f"{what} not found (looked in {', '.join(candidates)}); install the Debian package "
        f"`{package}` (`make real-deps` does)"
    )


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RealNodeError(f"ip {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


def link_exists(name: str) -> bool:
    return _ip("link", "show", name, check=False).returncode == 0


def ensure_dns_link(net: ClusterNet) -> None:
    if not link_exists(net.dns_link):
        # A port-less bridge, not a `dummy` link: some kernels (this VM's) lack that module,
        # and a bridge's own address is local all the same.
        _ip("link", "add", net.dns_link, "type", "bridge")
    _ip("addr", "replace", f"{net.dns_ip}/32", "dev", net.dns_link)
    _ip("link", "set", net.dns_link, "up")


def add_address(link: str, ip: str) -> None:
    """Make `ip` an address of this host (on `link`) unless it already is."""
    if ip not in _ip("-o", "addr", "show").stdout.replace("/", " ").split():
        _ip("addr", "add", f"{ip}/32", "dev", link)


def delete_link(name: str) -> None:
    if link_exists(name):
        _ip("link", "delete", name, check=False)


def enable_forwarding() -> None:
    """Pods of two nodes talk through the host: it must route between the bridges."""
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1")


def start_process(
    cmd: list[str], log: Path, pidfile: Path, env: dict[str, str] | None = None
) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    pidfile.write_text(str(proc.pid))
    return proc.pid


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop_pidfile(pidfile: Path, timeout: float = 10) -> None:
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return
    kill_and_wait([pid], timeout)
    pidfile.unlink(missing_ok=True)


def kill_and_wait(pids: Iterable[int], timeout: float = 10) -> None:
    pids = [p for p in pids if pid_alive(p)]
    for p in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.1)
    for p in pids:
        if pid_alive(p):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains `text` (the containerd shims of a node)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            out.append(int(entry.name))
    return out


def has_cap_sys_resource() -> bool:
    """CAP_SYS_RESOURCE (capability 24) in this process's effective set."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> 24 & 1)
    return False


def _cgroup_dirs(root: str) -> list[Path]:
    """Every cgroup directory under `root`, in every v1 hierarchy and in v2, deepest first."""
    found: list[Path] = []
    base = Path("/sys/fs/cgroup")
    for hierarchy in [base, *[p for p in base.iterdir() if p.is_dir()]]:
        top = hierarchy / root.lstrip("/")
        if top.is_dir():
            found.extend(p for p in top.rglob("*") if p.is_dir())
            found.append(top)
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def cgroup_pids(root: str) -> list[int]:
    pids: set[int] = set()
    for d in _cgroup_dirs(root):
        with contextlib.suppress(OSError):
            pids.update(int(x) for x in (d / "cgroup.procs").read_text().split())
    return sorted(pids)


def create_cgroups(root: str) -> None:
    """The kubelet's cgroupRoot in every v1 hierarchy (it refuses to start without them);
    a new cpuset cgroup starts with no CPUs, so it gets its parent's."""
    base = Path("/sys/fs/cgroup")
    for hierarchy in sorted(p for p in base.iterdir() if p.is_dir() and p.name != "unified"):
        top = hierarchy / root.lstrip("/")
        top.mkdir(exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):
            parent = hierarchy / knob
            if parent.is_file() and not (top / knob).read_text().strip():
                (top / knob).write_text(parent.read_text().strip())


def remove_cgroups(root: str) -> None:
    for d in _cgroup_dirs(root):
        with contextlib.suppress(OSError):
            d.rmdir()


def mounts_under(prefix: Path) -> list[str]:
    """Mount points at or below `prefix`, deepest first (from /proc/self/mountinfo)."""
    out = []
    p = str(prefix)
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == p or point.startswith(p + "/"):
            out.append(point)
    return sorted(set(out), key=len, reverse=True)


def unmount_all(prefix: Path) -> None:
    for _ in range(3):  # a mount may hide another mounted at the same point
        points = mounts_under(prefix)
        if not points:
            return
        for point in points:
            subprocess.run(["umount", "-l", point], capture_output=True)


def write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, sort_keys=True))


def rm_tree(path: Path) -> None:
    unmount_all(path)
    shutil.rmtree(path, ignore_errors=True)


# --- lifecycle ----------------------------------------------------------------------


@dataclass
class RealNodes:
    """Starts and stops the real nodes (and CoreDNS) of one local cluster."""

    cluster: str
    base: Path  # state dir/real/<cluster>
    kubeconfig: Path
    bins: dict[str, Path]
    say: Say

    def layout(self, index: int) -> NodeLayout:
        return NodeLayout(self.cluster, index, self.base)

    def existing(self) -> list[NodeLayout]:
        if not self.base.is_dir():
            return []
        idx = sorted(int(p.name.split("-")[1]) for p in self.base.glob("real-*") if p.is_dir())
        return [self.layout(i) for i in idx]

    # --- start ----------------------------------------------------------------------

    def start_dns(self) -> None:
        net = ClusterNet(self.cluster)
        pidfile = self.base / "coredns.pid"
        if _pidfile_alive(pidfile):
            return
        ensure_dns_link(net)
        self.base.mkdir(parents=True, exist_ok=True)
        (self.base / "Corefile").write_text(corefile(net, self.kubeconfig))
        cmd = [str(self.bins["coredns"]), "-conf", str(self.base / "Corefile")]
        start_process(cmd, self.base / "coredns.log", pidfile)

    def start_node(self, node: NodeLayout, sandbox_image: str) -> None:
        """The node's bridge, cgroups and containerd (left alone if already running)."""
        runc = find_host_tool(RUNC_PATHS, "runc", "runc")
        cni = str(
            Path(
                find_host_tool(
                    [f"{d}/bridge" for d in CNI_BIN_DIRS],
                    "CNI bridge plugin",
                    "containernetworking-plugins",
                )
            ).parent
        )
        node.dir.mkdir(parents=True, exist_ok=True)
        write_json(node.dir / "cni" / "10-trainop.conflist", cni_config(node))
        if not link_exists(node.bridge):
            _ip("link", "add", node.bridge, "type", "bridge")
        _ip("addr", "replace", f"{node.gateway}/24", "dev", node.bridge)
        _ip("link", "set", node.bridge, "up")
        create_cgroups(node.cgroup_root)
        conf = node.dir / "containerd.toml"
        conf.write_text(
            containerd_config(node, sandbox_image, runc, cni, not has_cap_sys_resource())
        )
        if not _pidfile_alive(node.dir / "containerd.pid"):
            path = f"{self.bins['containerd'].parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
            env = dict(os.environ, PATH=path)
            cmd = [str(self.bins["containerd"]), "--config", str(conf)]
            start_process(cmd, node.dir / "containerd.log", node.dir / "containerd.pid", env)
            _wait_for(node.sock.exists, 30, f"containerd of {node.name} did not open {node.sock}")

    def start_kubelet(self, node: NodeLayout, labels: dict[str, str]) -> None:
        if _pidfile_alive(node.dir / "kubelet.pid"):
            return
        write_json(node.dir / "kubelet.json", kubelet_config(node))
        cmd = [
            str(self.bins["kubelet"]),
            "--config",
            str(node.dir / "kubelet.json"),
            "--kubeconfig",
            str(self.kubeconfig),
            "--root-dir",
            str(node.dir / "kubelet"),
            "--cert-dir",
            str(node.dir / "kubelet-pki"),
            "--hostname-override",
            node.name,
            "--node-ip",
            node.gateway,
            "--node-labels",
            ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
        ]
        start_process(cmd, node.dir / "kubelet.log", node.dir / "kubelet.pid")

    def ctr(self, node: NodeLayout, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bins["ctr"]), "-a", str(node.sock), "-n", "k8s.io", *args]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RealNodeError(
                f"ctr {' '.join(args)} on {node.name} failed: {proc.stderr.strip()[-1500:]}"
            )
        return proc

    def import_image(self, node: NodeLayout, archive: Path, ref: str) -> None:
        """`ctr images import` unless the node already has `ref` (refs carry a content hash),
        then point the `:current` alias at it."""
        listed = self.ctr(node, "images", "ls", "-q").stdout.split()
        if ref not in listed:
            self.ctr(node, "images", "import", str(archive))
        # A stable alias for examples: <registry>/<name>:current is the newest build.
        alias = ref.rsplit(":", 1)[0] + ":current"
        self.ctr(node, "images", "tag", "--force", ref, alias)

    def trust_plain_http_registry(self, node: NodeLayout, address: str) -> None:
        """Let the node's containerd pull from the plain-HTTP registry at `address`
        (host:port); containerd reads the hosts directory on every pull, no restart."""
        hosts = node.registry_hosts_dir / address / "hosts.toml"
        hosts.parent.mkdir(parents=True, exist_ok=True)
        hosts.write_text(registry_hosts_toml(address))

    # --- stop -----------------------------------------------------------------------

    def stop_node(self, node: NodeLayout) -> None:
        stop_pidfile(node.dir / "kubelet.pid")
        # Containers, then their shims (they outlive containerd by design), then containerd.
        kill_and_wait(cgroup_pids(node.cgroup_root), 5)
        kill_and_wait(processes_mentioning(str(node.dir)), 5)
        stop_pidfile(node.dir / "containerd.pid")
        kill_and_wait(processes_mentioning(str(node.dir)), 5)
        rm_tree(node.dir)  # unmounts rootfs overlays, tmpfs volumes and netns files first
        remove_cgroups(node.cgroup_root)
        delete_link(node.bridge)

    def stop_all(self) -> None:
        for node in self.existing():
            self.say(f"stopping real node {node.name}")
            self.stop_node(node)
        stop_pidfile(self.base / "coredns.pid")
        delete_link(ClusterNet(self.cluster).dns_link)
        rm_tree(self.base)


def _pidfile_alive(pidfile: Path) -> bool:
    try:
        return pid_alive(int(pidfile.read_text().strip()))
    except (OSError, ValueError):
        return False


def _wait_for(check: Callable[[], bool], timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise RealNodeError(message)


def preflight() -> str:
    """Why real nodes cannot run here ("" when they can): root, cgroups, runc, CNI, tools."""
    if os.geteuid() != 0:
        return "real nodes need root (a kubelet and containerd manage mounts and cgroups)"
    if not os.access("/sys/fs/cgroup", os.W_OK) and not any(
        os.access(p, os.W_OK) for p in Path("/sys/fs/cgroup").iterdir()
    ):
        return "/sys/fs/cgroup is not writable"
    missing = []
    if not any(Path(p).exists() for p in RUNC_PATHS):
        missing.append("runc (Debian package runc)")
    if not any(Path(d, "bridge").exists() for d in CNI_BIN_DIRS):
        missing.append("CNI plugins (Debian package containernetworking-plugins)")
    for tool, package in (("mmdebstrap", "mmdebstrap"), ("ip", "iproute2")):
        if shutil.which(tool) is None:
            missing.append(f"{tool} (Debian package {package})")
    if missing:
        return "missing: " + ", ".join(missing) + " (`make real-deps` installs them)"
    return ""

"""Brings the local control plane up and down: kwokctl's binary runtime over our own built binaries."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from trainop.cluster import binaries, fleet, images, realnode

DEFAULT_NAME = "trainop"


class ClusterError(RuntimeError):
    """The local cluster could not be brought to the asked state; the message says why."""


# The node lifecycle controller puts this taint (NoSchedule) on every new node and takes it
# off once the node is Ready: until then the node is Ready but nothing schedules there.
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def node_schedulable(node: dict[str, Any]) -> bool:
    """A Node object that is Ready and no longer carries the not-ready taint."""
    status = node.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    taints = (node.get("spec") or {}).get("taints") or []
    return ready and not any(t.get("key") == NOT_READY_TAINT for t in taints)


def state_root() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "trainop"


@contextlib.contextmanager
def _creating() -> Iterator[None]:
    """One `kwokctl create cluster` at a time on this machine: kwokctl gives a new cluster's
    components the first free ports below 32768, found by trying them, so two clusters
    created at once (make test's workers, a bench beside them) can be given the same ports.
    Held until the components listen (kwokctl's --wait)."""
    import fcntl

    state_root().mkdir(parents=True, exist_ok=True)
    with open(state_root() / "create.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def stages_path() -> Path:
    return Path(str(resources.files("trainop.cluster") / "data" / "stages.yaml"))


def _say(msg: str) -> None:
    print(f"[trainop] {msg}", file=sys.stderr, flush=True)


@dataclass
class LocalCluster:
    """One named local cluster; its files live under the state dir, binaries in the build cache."""

    name: str = DEFAULT_NAME
    bin_dir: str | None = None
    kubernetes: str = "1.36"  # the minor to run: 1.36, or 1.37 for the upstream gang API

    @property
    def workdir(self) -> Path:
        return state_root() / "kwok"

    @property
    def cluster_dir(self) -> Path:
        return self.workdir / "clusters" / self.name

    @property
    def kubeconfig(self) -> Path:
        return state_root() / f"{self.name}.kubeconfig"

    def binaries(self, build: bool = True) -> dict[str, Path]:
        return binaries.resolve_binaries(
            self.bin_dir,
            build=build,
            progress=_say,
            components=binaries.control_plane(self.kubernetes),
        )

    @property
    def _version_file(self) -> Path:
        return self.cluster_dir / "trainop-kubernetes"

    def running_minor(self) -> str:
        """The Kubernetes minor the existing cluster was created with (1.36 if unrecorded)."""
        try:
            return self._version_file.read_text().strip() or "1.36"
        except OSError:
            return "1.36"

    # --- commands -----------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KWOK_WORKDIR"] = str(self.workdir)
        return env

    def kwokctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        bins = self.binaries(build=False)
        cmd = [str(bins["kwokctl"]), "--name", self.name, *args]
        proc = subprocess.run(cmd, env=self._env(), capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise ClusterError(f"kwokctl {' '.join(args)} failed: {proc.stderr.strip()[-2000:]}")
        return proc

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        bins = self.binaries(build=False)
        cmd = [str(bins["kubectl"]), "--kubeconfig", str(self.kubeconfig), *args]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()[-2000:]}")
        return proc

    # --- state --------------------------------------------------------------------

    def exists(self) -> bool:
        return (self.cluster_dir / "kwok.yaml").is_file()

    def api_ready(self) -> bool:
        if not self.kubeconfig.is_file():
            return False
        try:
            proc = self.kubectl("get", "--raw", "/readyz", check=False, timeout=10)
        except (subprocess.TimeoutExpired, ClusterError, binaries.BuildError):
            return False
        return proc.returncode == 0 and proc.stdout.strip() == "ok"

    def _pids(self) -> dict[str, int]:
        out = {}
        for pidfile in sorted((self.cluster_dir / "pids").glob("*.pid")):
            try:
                out[pidfile.stem] = int(pidfile.read_text().strip())
            except (OSError, ValueError):
                continue
        return out

    @staticmethod
    def _alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        # A zombie still answers kill(0). But a Go program whose main thread has exited
        # shows as a zombie while its other threads still hold sockets, so a process is
        # gone only when it is a zombie with a single task left.
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] != "Z":
                return True
            return len(list(Path(f"/proc/{pid}/task").iterdir())) > 1
        except OSError:
            return False

    def processes(self) -> dict[str, int]:
        return {name: pid for name, pid in self._pids().items() if self._alive(pid)}

    # --- lifecycle ----------------------------------------------------------------

    def up(
        self, fleet_path: str | None = None, wait_seconds: float = 120, real_nodes: int = 0
    ) -> float:
        """Create or restart the cluster and apply the fleet; idempotent. Returns seconds taken.

        `real_nodes` > 0 also starts that many real nodes (trainop.cluster.realnode).
        """
        started = time.monotonic()
        the_fleet = fleet.load_fleet(fleet_path)  # fail on a bad fleet before starting anything
        if real_nodes < 0:
            raise ClusterError(f"--real-nodes must be >= 0, got {real_nodes}")
        bins = self.binaries(build=True)
        if self.exists() and self.running_minor() != self.kubernetes:
            raise ClusterError(
                f"cluster {self.name!r} runs Kubernetes {self.running_minor()}, not "
                f"{self.kubernetes}; delete it first (trainop cluster down --name {self.name})"
            )
        if self.exists() and not self.api_ready():
            _say(f"cluster {self.name!r} exists but is not serving; starting it")
            if self.kwokctl("start", "cluster", "--wait", "60s", check=False).returncode != 0:
                _say("start failed; recreating the cluster")
                self.down()
        if not self.exists():
            _say(
                f"creating cluster {self.name!r} (etcd, kube-apiserver, kube-controller-manager, "
                "kube-scheduler, kwok)"
            )
            self.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
            with _creating():
                self._create(bins)
            self._version_file.write_text(self.kubernetes + "\n")
        applying = time.monotonic()
        self.apply_fleet(the_fleet)
        applied = time.monotonic()
        self.wait_ready(the_fleet, wait_seconds)
        _say(
            f"fleet applied in {applied - applying:.1f} s; every node Ready and without "
            f"{NOT_READY_TAINT} {time.monotonic() - applied:.1f} s later"
        )
        if real_nodes:
            self.start_real_nodes(real_nodes, the_fleet, wait_seconds)
        took = time.monotonic() - started
        _say(f"cluster {self.name!r} ready in {took:.1f} s; KUBECONFIG={self.kubeconfig}")
        return took

    def _create(self, bins: dict[str, Path]) -> None:
        self.kwokctl(
            "create",
            "cluster",
            "--runtime",
            "binary",
            "--kube-apiserver-binary",
            str(bins["kube-apiserver"]),
            "--kube-controller-manager-binary",
            str(bins["kube-controller-manager"]),
            "--kube-scheduler-binary",
            str(bins["kube-scheduler"]),
            "--etcd-binary",
            str(bins["etcd"]),
            "--kwok-controller-binary",
            str(bins["kwok"]),
            "--kubeconfig",
            str(self.kubeconfig),
            "--config",
            str(stages_path()),
            "--wait",
            "90s",
            *gate_flags(self.kubernetes),
        )

    # --- real nodes -----------------------------------------------------------------

    def real_nodes(self) -> realnode.RealNodes:
        node_bins = binaries.resolve_binaries(
            self.bin_dir, build=True, progress=_say, components=binaries.NODE_COMPONENTS
        )
        base = state_root() / "real" / self.name
        return realnode.RealNodes(self.name, base, self.kubeconfig, node_bins, _say)

    def start_real_nodes(
        self, count: int, the_fleet: fleet.Fleet, timeout: float, first: int = 0
    ) -> None:
        """Start `count` real nodes, numbered from `first` (a cluster that runs nodes 0..k-1
        takes another with first=k), with the GFD labels and GPU count of the fleet's class
        realnode.REAL_NODE_CLASS (or the packaged fleet's, when this one lacks it). Each
        real node is a rack of its own (realnode.node_labels)."""
        cls = (
            the_fleet.classes.get(realnode.REAL_NODE_CLASS)
            or fleet.load_fleet().classes[realnode.REAL_NODE_CLASS]
        )
        gpus = cls.gpu.count if cls.gpu else 0
        rn = self.real_nodes()
        pause = images.build_image("pause", _say)
        pause_ref = images.image_ref("pause")
        realnode.enable_forwarding()
        rn.start_dns()
        host, _port = self.apiserver_for_pods()
        realnode.add_address(realnode.ClusterNet(self.name).dns_link, host)
        nodes = [rn.layout(i) for i in range(first, first + count)]
        for node in nodes:
            labels = realnode.node_labels(node, fleet.gfd_labels(cls))
            _say(f"starting real node {node.name} (containerd, kubelet)")
            rn.start_node(node, pause_ref)
            rn.import_image(node, pause, pause_ref)
            rn.start_kubelet(node, labels)
        for node in nodes:
            self._wait_registered(node.name, timeout)
            patch = {"status": {"capacity": {"nvidia.com/gpu": str(gpus)}}}
            self.kubectl(
                "patch",
                "node",
                node.name,
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps(patch),
            )
        self._wait_nodes_ready([n.name for n in nodes], timeout)

    def import_built_images(self) -> list[str]:
        """Import every image `trainop images build` already built (cached archives) into
        each real node's containerd, so a fresh cluster runs them without building again.
        Returns the image refs imported."""
        rn = self.real_nodes()
        done = []
        for name, ref, built in images.list_images():
            if not built or name == "pause":
                continue
            for node in rn.existing():
                _say(f"importing {ref} into {node.name}")
                rn.import_image(node, images.archive_path(name), ref)
            done.append(ref)
        return done

    def apiserver_for_pods(self) -> tuple[str, int]:
        """The address and port the `kubernetes` Service's endpoints name.

        Real nodes have no kube-proxy, so a pod cannot use the Service's ClusterIP; the
        apiserver listens on all addresses, and start_real_nodes makes this one (kwokctl
        advertises a TEST-NET address that its serving certificate names) local to the
        host, so that pods given KUBERNETES_SERVICE_HOST/PORT reach it.
        """
        items = self.get_json(
            "endpointslices", "-n", "default", "-l", "kubernetes.io/service-name=kubernetes"
        )["items"]
        for eps in items:
            for ep in eps.get("endpoints") or []:
                for port in eps.get("ports") or []:
                    return str(ep["addresses"][0]), int(port["port"])
        raise ClusterError("the kubernetes Service has no endpoints yet")

    def _wait_registered(self, name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.kubectl("get", "node", name, check=False).returncode == 0:
                return
            time.sleep(0.5)
        raise ClusterError(
            f"real node {name} did not register in {timeout:.0f} s; see its kubelet.log"
        )

    def _wait_nodes_ready(self, names: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = set(names)
        while time.monotonic() < deadline:
            items = [self.get_json("node", n) for n in sorted(pending)]
            pending = {
                n["metadata"]["name"]
                for n in items
                if not _is_ready(n)
                or n["status"].get("allocatable", {}).get("nvidia.com/gpu") in (None, "0")
            }
            if not pending:
                return
            time.sleep(0.5)
        raise ClusterError(f"real nodes not Ready with GPU capacity: {', '.join(sorted(pending))}")

    def apply_fleet(self, the_fleet: fleet.Fleet) -> None:
        nodes = fleet.node_manifests(the_fleet)
        if not nodes:
            return  # a fleet of real nodes only
        # JSON, not YAML: a label such as "08" must stay a string whatever parser reads it.
        doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes})
        # A large fleet (bench-scale's 1,000-2,000 nodes) takes a while on a busy apiserver.
        self.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            "-",
            input=doc,
            timeout=max(60.0, 0.3 * len(nodes)),
        )
        # allocatable/capacity live in status, which apply of a Node does not write on update.
        wanted = {n["metadata"]["name"] for n in nodes}
        existing = self.get_json("nodes")["items"]
        for n in existing:
            name = n["metadata"]["name"]
            if n["metadata"].get("annotations", {}).get(fleet.KWOK_NODE_ANNOTATION) == "fake" and (
                name not in wanted
            ):
                self.kubectl("delete", "node", name, "--wait=false")

    def get_json(self, *args: str) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.kubectl("get", *args, "-o", "json").stdout)
        return out

    def wait_ready(self, the_fleet: fleet.Fleet, timeout: float) -> None:
        """Until every fleet node is Ready and schedulable: the node lifecycle controller
        has taken its node.kubernetes.io/not-ready taint off (a Ready node keeps it until
        then, and pods wait on it), and the default ServiceAccount exists."""
        wanted = {n["metadata"]["name"] for n in fleet.node_manifests(the_fleet)}
        # A cluster made before its controller manager's client rate was raised (the
        # stages file's KwokctlConfiguration) untaints about 4 nodes a second.
        timeout = max(timeout, 0.25 * len(wanted))
        deadline = time.monotonic() + timeout
        not_ready: set[str] = set(wanted)
        while time.monotonic() < deadline:
            items = self.get_json("nodes")["items"]
            not_ready = wanted - {n["metadata"]["name"] for n in items if node_schedulable(n)}
            sa = self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False)
            if not not_ready and sa.returncode == 0:
                return
            time.sleep(0.5 if len(wanted) <= 100 else 2.0)  # a big list is megabytes
        raise ClusterError(
            f"{len(not_ready)} nodes not Ready or still tainted {NOT_READY_TAINT} after "
            f"{timeout:.0f} s: {', '.join(sorted(not_ready)[:5])}"
        )

    def down(self) -> None:
        """Delete the cluster and make sure no component process is left behind."""
        pids = self._pids()
        real_base = state_root() / "real" / self.name
        if real_base.exists():
            rn = realnode.RealNodes(self.name, real_base, self.kubeconfig, {}, _say)
            rn.stop_all()
        if self.exists():
            self.kwokctl("delete", "cluster", check=False)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(self._alive(p) for p in pids.values()):
            time.sleep(0.2)
        for name, pid in pids.items():
            if self._alive(pid):
                _say(f"{name} (pid {pid}) outlived kwokctl delete; killing it")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.kubeconfig.unlink(missing_ok=True)

    def status(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "name": self.name,
            "exists": self.exists(),
            "kubeconfig": str(self.kubeconfig),
            "processes": self.processes(),
            "apiReady": self.api_ready(),
        }
        if info["apiReady"]:
            nodes = self.get_json("nodes")["items"]
            info["nodes"] = len(nodes)
            info["readyNodes"] = sum(
                1
                for n in nodes
                if any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in n.get("status", {}).get("conditions", [])
                )
            )
        return info


# Kubernetes 1.37: the upstream gang API is beta but off by default (GenericWorkload gate,
# scheduling.k8s.io/v1beta1); KEP-5732's topology-aware workload scheduling is alpha
# (TopologyAwareWorkloadScheduling, pkg/features/kube_features.go in v1.37.2:
# https://github.com/kubernetes/kubernetes/blob/v1.37.2/pkg/features/kube_features.go).
# kwokctl hands both flags to the apiserver, controller manager and scheduler alike.
GANG_FEATURE_GATES = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true"
GANG_RUNTIME_CONFIG = "scheduling.k8s.io/v1beta1=true"


def gate_flags(kubernetes: str) -> list[str]:
    """kwokctl create flags that turn on the upstream gang API (1.37 only)."""
    if kubernetes == "1.36":
        return []
    return [
        "--kube-feature-gates",
        GANG_FEATURE_GATES,
        "--kube-runtime-config",
        GANG_RUNTIME_CONFIG,
    ]


def _is_ready(node: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in node.get("status", {}).get("conditions", [])
    )

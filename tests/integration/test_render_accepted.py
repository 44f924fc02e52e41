"""Everything `trainop render` produces, the API server accepts (issue #27).

Hypothesis writes TrainingJobs with tests/builders.py's JobBuilder: every framework with
the role mixes it allows, the optional fields present and absent (framework.version,
cuda, an image of the user's own or an NGC tag, placement topology/mode/products,
network.fabric, gpuSharing, ncclEnv, priorityClassName) and user pod templates with the
usual constraints (nodeSelector, tolerations, affinity, env, volumes and mounts, ports,
sidecars, init containers, scheduling gates, host networking). Each job is rendered as
`trainop render` renders it (cli.render.render_job, the operator's own planner) on three
fleets: examples/fleet-nodes.yaml, the real-node tier's fleet (tests/real/fleet-real.yaml),
a small one with MIG and time-sliced nodes, and examples/fleet-grace.yaml (a GB200 NVL72
rack and GH200 nodes, arm64, beside amd64 B200: a mixed-architecture fleet; issue 36), its
GB200 NVL72 rack alone (18 trays, one NVLink clique) and its GH200 partition alone, with and
without DRA claim templates, with the catalog's arm64 windows confirmed, with the multi-node
NVLink switch on (dra.computeDomains: a ComputeDomain per gang across trays of one clique,
IMEX channel claims; NVIDIA's ComputeDomain CRD, crds/vendor/, is installed into the API
server for it), and with pods wired for progress reports over
TLS as the operator wires them (issue 35: URL, token and CA projected volume, CA annotation).
Every object a placed job produces (Service, ConfigMap, ResourceClaimTemplates,
ComputeDomains, Pods, and
the SSH Secret the operator makes for MPI) goes to the real API server with server-side
dry-run and strict field validation
(https://kubernetes.io/docs/reference/using-api/api-concepts/#dry-run,
https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation).

The property: render refuses the job (exit 2, the message naming the field), waits (exit
3), or every object it printed is accepted, and every host name it wrote into a pod
resolves inside that pod (tests/unit/manifest_helpers.unresolvable_hosts, issue 38). An internal error (exit 1) fails too.

`make test` checks a fixed, derandomized budget (EXAMPLES); TRAINOP_DRYRUN_EXAMPLES=2000
runs a larger, random one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.builders import A100, H100, T4, V100, JobBuilder, fabric_profile, node
from tests.integration.conftest import CLUSTER_NAME, Kube, repo_root
from tests.unit.manifest_helpers import unresolvable_hosts
from trainop.api import constants as c
from trainop.catalog import load_catalog
from trainop.cli.inputs import read_objects
from trainop.cli.render import EXIT_INVALID, EXIT_NEVER, EXIT_PLACED, EXIT_WAIT, render_job
from trainop.cluster.fleet import Group, load_fleet, node_manifests
from trainop.dra import DraConfig
from trainop.frameworks import FRAMEWORKS
from trainop.kube import certs
from trainop.kube.secrets import ssh_secret
from trainop.planner import OperatorConfig, job_ref

_LARGE = os.environ.get("TRAINOP_DRYRUN_EXAMPLES")
EXAMPLES = int(_LARGE or "40")
RENDER = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=_LARGE is None,  # `make test`: the same jobs every run
    database=None,
    suppress_health_check=list(HealthCheck),
)
PRIORITY_CLASS = f"{CLUSTER_NAME}-render-high"

# --- fleets and configs -----------------------------------------------------------------


def _real_fleet() -> list[dict[str, Any]]:
    """tests/real/fleet-real.yaml's node class, two nodes as `trainop cluster up
    --real-nodes 2` labels them (its file lists classes only: real nodes join by kubelet)."""
    fleet = load_fleet(repo_root() / "tests" / "real" / "fleet-real.yaml")
    group = Group.model_validate(
        {"class": "pcie-t4", "count": 2, "block": "real", "rack": "real-0", "prefix": "real"}
    )
    return node_manifests(fleet.model_copy(update={"groups": [group]}))


def _sharing_fleet() -> list[dict[str, Any]]:
    """MIG single and mixed strategy nodes and a time-sliced T4, for spec.gpuSharing."""
    a100 = ("550.127.08", ("8", "0"))
    return [
        node("mig-single")
        .gfd(f"{A100}-MIG-1g.10gb", *a100)
        .label(c.GFD_MIG_STRATEGY, "single")
        .gpus(7)
        .build(),
        node("mig-mixed")
        .gfd(A100, *a100)
        .label(c.GFD_MIG_STRATEGY, "mixed")
        .gpus(0)
        .allocatable(c.RESOURCE_MIG_PREFIX + "1g.10gb", "7")
        .build(),
        node("shared-t4")
        .gfd(T4, "535.183.01", ("7", "5"))
        .label(c.GFD_REPLICAS, "4")
        .label(c.GFD_SHARING_STRATEGY, "time-slicing")
        .gpus(16)
        .build(),
    ]


def _grace_fleet(*classes: str) -> list[dict[str, Any]]:
    """examples/fleet-grace.yaml with only the groups of `classes` (all: the whole fleet)."""
    fleet = load_fleet(repo_root() / "examples" / "fleet-grace.yaml")
    groups = [g for g in fleet.groups if not classes or g.node_class in classes]
    return node_manifests(fleet.model_copy(update={"groups": groups}))


FLEETS = {
    "examples/fleet-nodes.yaml": read_objects(
        str(repo_root() / "examples" / "fleet-nodes.yaml"), "Node", "--nodes"
    ),
    "tests/real/fleet-real.yaml": _real_fleet(),
    "sharing": _sharing_fleet(),
    # issue 36: a GB200 NVL72 rack (arm64, one clique), GH200 (arm64) and B200 (amd64): the
    # mixed-architecture fleet; then the NVL72 rack alone and the GH200 partition alone
    "examples/fleet-grace.yaml": _grace_fleet(),
    "gb200-nvl72": _grace_fleet("gb200-tray"),
    "gh200": _grace_fleet("gh200"),
}
# FabricProfiles with every field that reaches a pod: Multus annotation, RDMA resource,
# /dev/shm size, NCCL env.
FABRIC_PROFILES = (
    fabric_profile("roce-h100")
    .fabric("RoCE")
    .selector(**{c.GFD_PRODUCT: H100})
    .set("rdmaResource", "nvidia.com/hostdev")
    .set("rdmaResourcePerPod", 2)
    .set("hcas", ["mlx5_0", "mlx5_1"])
    .set("gidIndex", 3)
    .set("trafficClass", 106)
    .set("socketIfname", "net1")
    .set("multusNetworks", "default/roce-a,default/roce-b")
    .set("shmSize", "32Gi")
    .set("extraEnv", {"NCCL_IB_TIMEOUT": "22"})
    .priority(10)
    .model(),
    fabric_profile("ib-a100")
    .selector(**{c.GFD_PRODUCT: A100})
    .set("rdmaResource", "rdma/rdma_shared_device_a")
    .set("sharp", True)
    .set("debugEnv", {"NCCL_ALGO": "Ring"})
    .model(),
)
ARM64_CATALOG = load_catalog(
    overrides={"images": {"pytorch": {"unconfirmed": []}, "mpi": {"unconfirmed": ["horovod"]}}}
)
CONFIGS = {
    "default": OperatorConfig(),
    # the PyTorch/MPI images' arm64 window confirmed: jobs land on arm64 nodes, and pods
    # without GPUs on a mixed fleet get the gang's kubernetes.io/arch (issue 36)
    "arm64": OperatorConfig(catalog=ARM64_CATALOG),
    # and NVIDIA's DRA driver installed: a gang across trays of the NVL72 clique gets a
    # ComputeDomain and IMEX channel claims (issue 36, docs/mnnvl.md)
    "mnnvl": OperatorConfig(catalog=ARM64_CATALOG, dra=DraConfig(compute_domains=True)),
    "dra": OperatorConfig(dra=DraConfig(enabled=True)),
    "kueue": OperatorConfig(external_queue="kueue"),  # pods as under Kueue (docs/kueue.md)
    "fabrics": OperatorConfig(fabric_profiles=FABRIC_PROFILES),
    # pods wired for progress reports over TLS, as the operator wires them (issue 35):
    # URL, token and CA projected volume, the CA annotation, KUBEFLOW_TRAINER_SERVER_*
    "progress": OperatorConfig(
        progress_url="https://trainop-progress.trainop-system.svc:8082/v1/progress",
        progress_ca=certs.new_ca(datetime(2026, 11, 27))[0],
    ),
}

# --- the jobs -----------------------------------------------------------------------------


def _versions() -> dict[str, list[str]]:
    """framework -> the versions the catalog knows ("2.4"), plus one it does not."""
    catalog = load_catalog()
    out: dict[str, set[str]] = {fw: {"99.1"} for fw in FRAMEWORKS}
    for spec in catalog.images:
        for release in catalog.releases:
            for ships, version in release.frameworks:
                if ships == spec.ships:
                    out[spec.framework].add(".".join(version.split(".")[:2]))
    return {
        fw: sorted(v for v in vs if re.fullmatch(r"\d+(\.\d+){0,2}", v)) for fw, vs in out.items()
    }


VERSIONS = _versions()
CUDAS = ["10.2", "11.8", "12.0", "12.2", "12.4", "12.6", "12.8", "13.0", "13.3"]
OWN_IMAGE = "registry.example.com/team/trainer:1.0"
IMAGES = [OWN_IMAGE, "nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io/nvidia/tensorflow:25.01-tf2-py3"]
NCCL_ENVS = [
    {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0"},
    {"NCCL_IB_HCA": "=mlx5_0", "NCCL_IB_DISABLE": "0"},
    {"my.setting": "1", "NCCL_ALGO": ""},
]
# spec.queue is a DNS subdomain of up to 253 characters (a TrainingQueue name)
QUEUES = ["nlp", "team.nlp", "q" * 63, "q" * 64, "q" * 120]
PRODUCTS = [H100, A100, V100, T4, f"{A100}-MIG-1g.10gb", "NVIDIA-GB200", "NVIDIA-GH200-480GB"]

names = st.one_of(
    st.from_regex(r"\A[a-z][a-z0-9]{0,6}(-[a-z0-9]{1,6}){0,3}\Z"),
    st.integers(30, 60).map(lambda n: "j" * n),
)
env_names = st.sampled_from(
    ["STEPS", "LR", "NCCL_DEBUG", "MASTER_PORT", "WORLD_SIZE", "TF_CONFIG", "my.var", "1ST"]
)
env_entries = st.lists(
    st.tuples(env_names, st.sampled_from(["1", "", "INFO", "08", "fieldRef"])),
    max_size=4,
    unique_by=lambda e: e[0],
).map(
    lambda pairs: [
        {"name": n, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
        if v == "fieldRef"
        else {"name": n, "value": v}
        for n, v in pairs
    ]
)
# (volume, where the trainer mounts it): the usual things users bring, /dev/shm included.
USER_VOLUMES = {
    "data": ({"emptyDir": {}}, "/data"),
    "dshm": ({"emptyDir": {"medium": "Memory"}}, "/dev/shm"),
    "shm": ({"emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}, "/dev/shm"),
    "ckpt": ({"persistentVolumeClaim": {"claimName": "ckpt"}}, "/ckpt"),
    "cfg": ({"configMap": {"name": "train-config"}}, "/etc/train"),
    "cache": ({"hostPath": {"path": "/var/cache/train", "type": "DirectoryOrCreate"}}, "/cache"),
}
TOLERATIONS = [
    {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
    {"key": c.RESOURCE_GPU, "operator": "Exists", "effect": "NoSchedule"},
    {"operator": "Exists"},
]
AFFINITIES = [
    {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {
                        "matchExpressions": [
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
                        ]
                    },
                }
            ]
        }
    },
    {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "Exists"}]}
                ]
            }
        }
    },
    {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 1,
                    "podAffinityTerm": {
                        "topologyKey": c.LABEL_HOSTNAME,
                        "labelSelector": {"matchLabels": {"app": "other"}},
                    },
                }
            ]
        }
    },
]


def _trainer(draw: st.DrawFn) -> dict[str, Any]:
    """The trainer container as a user writes it (each part present or absent)."""
    trainer: dict[str, Any] = {}
    if draw(st.booleans()):
        trainer["name"] = draw(st.sampled_from(["trainer", "main"]))
    if draw(st.booleans()):
        trainer["image"] = OWN_IMAGE
    if draw(st.booleans()):
        trainer["command"] = ["python", "train.py"]
    env = draw(env_entries)
    if env:
        trainer["env"] = env
    if draw(st.booleans()):
        trainer["resources"] = {"limits": {"cpu": "8", "memory": "32Gi"}, "requests": {"cpu": "4"}}
    if draw(st.booleans()):
        port = draw(st.sampled_from([8080, 29500, 2222, 2379, 9091, 8000]))
        trainer["ports"] = [{"containerPort": port, "name": "metrics"}]
    if draw(st.booleans()):
        trainer["securityContext"] = {"capabilities": {"add": ["SYS_PTRACE"]}}
    return trainer


def _volumes(draw: st.DrawFn, trainer: dict[str, Any]) -> list[dict[str, Any]]:
    """The user's volumes (unique names), each mounted in the trainer or not (unique paths)."""
    volumes, mounts, paths = [], [], set()
    for name in draw(st.lists(st.sampled_from(sorted(USER_VOLUMES)), max_size=3, unique=True)):
        source, path = USER_VOLUMES[name]
        volumes.append({"name": name, **source})
        if path not in paths and draw(st.booleans()):
            paths.add(path)
            mounts.append({"name": name, "mountPath": path})
    if mounts:
        trainer["volumeMounts"] = mounts
    return volumes


# Optional pod-spec fields: name -> the values a user might give it.
SPEC_EXTRAS: dict[str, list[Any]] = {
    "initContainers": [[{"name": "fetch", "image": "busybox:1.36", "command": ["true"]}]],
    "nodeSelector": [{"kubernetes.io/os": "linux"}, {c.GFD_PRODUCT: H100}],
    "tolerations": [TOLERATIONS[:1], TOLERATIONS[1:], TOLERATIONS],
    "affinity": AFFINITIES,
    "schedulingGates": [[{"name": "example.com/gate"}]],
    "hostNetwork": [True],
}


@st.composite
def pod_templates(draw: st.DrawFn) -> dict[str, Any]:
    """A valid PodTemplateSpec as a user writes one (each part present or absent)."""
    trainer = _trainer(draw)
    spec: dict[str, Any] = {}
    volumes = _volumes(draw, trainer)
    if volumes:
        spec["volumes"] = volumes
    spec["containers"] = [trainer]
    if draw(st.booleans()):
        sidecar = {"name": "sidecar", "image": "busybox:1.36", "command": ["sleep", "1"]}
        spec["containers"].append(sidecar)
    for key in draw(st.lists(st.sampled_from(sorted(SPEC_EXTRAS)), unique=True)):
        spec[key] = draw(st.sampled_from(SPEC_EXTRAS[key]))
    if spec.get("hostNetwork"):
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    template: dict[str, Any] = {"spec": spec}
    if draw(st.booleans()):
        template["metadata"] = {"labels": {"app": "train"}, "annotations": {"team": "nlp"}}
    return template


def _roles(draw: st.DrawFn, fw: str) -> dict[str, tuple[int, int]]:
    """role -> (replicas, gpus): a mix the framework allows, optional roles present or not."""
    roles = {"Worker": (draw(st.integers(1, 3)), draw(st.sampled_from([1, 2, 4, 8])))}
    if fw == "mpi":
        roles["Launcher"] = (1, draw(st.sampled_from([0, 0, 1])))
    if fw == "mxnet":
        roles["Scheduler"] = (1, 0)
        roles["Server"] = (draw(st.integers(1, 2)), 0)
    if fw == "tensorflow":
        if draw(st.booleans()):
            roles["Chief"] = (1, draw(st.sampled_from([0, 1, 8])))
        if draw(st.booleans()):
            roles["PS"] = (draw(st.integers(1, 2)), 0)
        if draw(st.booleans()):
            roles["Evaluator"] = (1, draw(st.sampled_from([0, 1])))
    if draw(st.integers(0, 3)) == 0:  # one 1-GPU pod: what gpuSharing needs
        roles = {r: (1, 1) if r == "Worker" else (n, 0) for r, (n, _) in roles.items()}
    return roles


def _maybe(draw: st.DrawFn, values: list[Any]) -> Any:
    return draw(st.none() | st.sampled_from(values))


@st.composite
def training_jobs(draw: st.DrawFn, namespace: str) -> dict[str, Any]:
    fw = draw(st.sampled_from(sorted(FRAMEWORKS)))
    b = JobBuilder(draw(names), namespace).framework(fw, _maybe(draw, VERSIONS[fw]))
    b.cuda(_maybe(draw, CUDAS))
    image = _maybe(draw, IMAGES)
    if image:
        b.set("image", image)
    roles = _roles(draw, fw)
    for role, (replicas, gpus) in roles.items():
        tpl = draw(st.none() | pod_templates())
        b.role(role, replicas, gpus, tpl)
    one_gpu = sorted(n * g for n, g in roles.values() if g) == [1]
    topology, mode = _maybe(draw, ["none", "node", "clique", "rack", "block"]), None
    if topology is not None or draw(st.booleans()):
        mode = _maybe(draw, ["Required", "Preferred"])
    products = draw(st.lists(st.sampled_from(PRODUCTS), max_size=2, unique=True))
    if topology or mode or products:
        b.placement(topology, mode, products)
    fabric = _maybe(draw, ["Auto", "InfiniBand", "RoCE", "TCP"])
    if fabric:
        b.set("network", {"fabric": fabric})
    sharing = _maybe(draw, [{"mode": "MIG", "migProfile": "1g.10gb"}, {"mode": "Shared"}])
    if sharing and (one_gpu or draw(st.integers(0, 9)) == 0):  # else render refuses it
        b.set("gpuSharing", sharing)
    if draw(st.booleans()):
        b.set("ncclEnv", draw(st.sampled_from(NCCL_ENVS)))
    queue = _maybe(draw, QUEUES)
    if queue:
        b.queue(queue)
    if draw(st.booleans()):
        b.priority(PRIORITY_CLASS)
    return b.build()


# --- the API server -----------------------------------------------------------------------


BY_URL = {"ResourceClaimTemplate": "resourceclaimtemplates", "ComputeDomain": "computedomains"}
CD_CRD = "computedomains.resource.nvidia.com"
COMPUTE_DOMAIN_CRD = repo_root() / "crds" / "vendor" / "resource.nvidia.com_computedomains.yaml"


class DryRun:
    """Server-side dry-run creates with strict field validation; returns the refusals."""

    def __init__(self, kube: Kube) -> None:
        api = config.new_client_from_config(config_file=kube.kubeconfig)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.checked = 0

    def refusal(self, obj: dict[str, Any]) -> str | None:
        ns, kind = obj["metadata"]["namespace"], obj["kind"]
        opts = {"dry_run": "All", "field_validation": "Strict"}
        self.checked += 1
        try:
            if kind in BY_URL:
                group, version = obj["apiVersion"].split("/")
                self.custom.create_namespaced_custom_object(
                    group, version, ns, BY_URL[kind], obj, **opts
                )
            else:
                create = {
                    "Pod": self.core.create_namespaced_pod,
                    "Service": self.core.create_namespaced_service,
                    "ConfigMap": self.core.create_namespaced_config_map,
                    "Secret": self.core.create_namespaced_secret,
                }[kind]
                create(ns, obj, **opts)
        except ApiException as exc:
            return f"{kind} {obj['metadata']['name']}: {exc.status} {exc.body}"
        return None


@pytest.fixture(scope="module")
def dry_run(kube: Kube) -> Iterator[tuple[DryRun, str]]:
    ns = f"{CLUSTER_NAME}-render"[:63]
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    kube.apply(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": PRIORITY_CLASS},
            "value": 1000,
        }
    )
    # NVIDIA's ComputeDomain CRD (vendored from k8s-dra-driver-gpu v25.12.0), as the DRA
    # driver's chart installs it
    kube.run("apply", "--server-side", "--force-conflicts", "-f", str(COMPUTE_DOMAIN_CRD))
    kube.run("wait", "--for=condition=Established", "--timeout=60s", "crd/" + CD_CRD)
    kube.wait_for(
        f"default ServiceAccount in {ns}",
        lambda: kube.maybe_get("serviceaccount", "default", "-n", ns),
    )
    yield DryRun(kube), ns
    kube.run("delete", "namespace", ns, "--wait=false", check=False)
    kube.run("delete", "priorityclass", PRIORITY_CLASS, check=False)
    kube.run("delete", "crd", CD_CRD, "--wait=false", check=False)


TALLY: dict[str, int] = {"jobs": 0, "placed": 0, "invalid": 0, "wait": 0, "computeDomains": 0}
_FIELD = re.compile(r"^error: (spec\.|metadata\.name)")


def check_job(body: dict[str, Any], dry: DryRun) -> list[str]:
    """Render `body` on every fleet and config; what went wrong, one line each."""
    problems = []
    for fleet, nodes in FLEETS.items():
        for cname, cfg in CONFIGS.items():
            r = render_job(body, nodes, [], cfg)
            where = f"{fleet} ({cname})"
            if r.code == EXIT_INVALID:
                TALLY["invalid"] += 1
                if not _FIELD.match(r.errors[0]):
                    problems.append(f"{where}: exit 2 without a field: {r.errors}")
                continue
            if r.code in (EXIT_WAIT, EXIT_NEVER):  # nothing to submit: waits, or never fits
                TALLY["wait"] += 1
                continue
            if r.code != EXIT_PLACED or r.plan is None:
                problems.append(f"{where}: exit {r.code}: {r.errors}")
                continue
            TALLY["placed"] += 1
            objs = list(r.objects)  # as render prints them: wired for progress with a URL
            TALLY["computeDomains"] += sum(o["kind"] == "ComputeDomain" for o in objs)
            if r.plan.secret_name:  # made by the operator, not printed by render
                objs.insert(0, ssh_secret(job_ref(body), r.plan.secret_name))
            problems += [f"{where}: {p}" for p in map(dry.refusal, objs) if p]
            # issue 38: every host name written into a pod resolves inside that pod
            problems += [f"{where}: {p}" for p in unresolvable_hosts(objs)]
    return problems


def test_every_rendered_object_is_accepted(dry_run: tuple[DryRun, str]) -> None:
    dry, ns = dry_run

    @RENDER
    @given(training_jobs(ns))
    def prop(body: dict[str, Any]) -> None:
        TALLY["jobs"] += 1
        problems = check_job(body, dry)
        assert not problems, "\n".join(problems)

    prop()
    print(f"render vs API server: {TALLY}, {dry.checked} objects dry-run created")
    assert TALLY["placed"] > 0, TALLY


# Gangs the random jobs seldom make: several pods across the trays of the NVL72 clique, each
# with its ComputeDomain and IMEX channel claims (dra.computeDomains), on the rack alone and
# on the mixed fleet. (framework, workers, GPUs per worker, topology)
CLIQUE_GANGS = [
    pytest.param("pytorch", 2, 4, "clique", id="pytorch-2-trays"),
    pytest.param("pytorch", 18, 4, "clique", id="pytorch-whole-nvl72"),
    pytest.param("pytorch", 3, 4, None, id="pytorch-no-topology"),
    pytest.param("mpi", 4, 4, "clique", id="mpi-with-launcher"),
]


@pytest.mark.parametrize(("fw", "workers", "gpus", "topology"), CLIQUE_GANGS)
def test_clique_gangs_get_an_accepted_compute_domain(
    dry_run: tuple[DryRun, str], fw: str, workers: int, gpus: int, topology: str | None
) -> None:
    dry, ns = dry_run
    b = JobBuilder(f"nvl-{fw}-{workers}", ns).framework(fw, None).role("Worker", workers, gpus)
    if fw == "mpi":
        b.role("Launcher", 1, 0)
    if topology:
        b.placement(topology, "Required", [])
    body = b.build()
    for fleet in ("gb200-nvl72", "examples/fleet-grace.yaml"):
        r = render_job(body, FLEETS[fleet], [], CONFIGS["mnnvl"])
        assert r.code == EXIT_PLACED and r.plan is not None, (fleet, r.errors)
        assert r.plan.placement_status()["imex"] == "ComputeDomain", fleet
        objs = list(r.objects)
        assert [o["kind"] for o in objs].count("ComputeDomain") == 1, fleet
        if r.plan.secret_name:
            objs.insert(0, ssh_secret(job_ref(body), r.plan.secret_name))
        assert not [p for p in map(dry.refusal, objs) if p], fleet
        assert not unresolvable_hosts(objs), fleet

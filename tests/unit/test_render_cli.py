"""`trainop render` (and the `cluster fleet -o yaml` NODES file it reads) through click's CliRunner."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from tests.builders import busy, fleet_nodes, job, node_product
from tests.unit.manifest_helpers import (
    EXAMPLES,
    FLEET_NODES,
    env_of,
    example,
    job_examples,
    pinned_node,
    pods_of,
)
from trainop.api import constants as c
from trainop.cli.inputs import InputError, read_text
from trainop.cli.main import cli
from trainop.yamlio import dump_yaml_all

H100 = "NVIDIA-H100-80GB-HBM3"
V100 = "Tesla-V100-SXM2-32GB"


def run(*args: str, stdin: str | None = None) -> Result:
    result = CliRunner().invoke(cli, list(args), input=stdin)
    # Never a traceback: every outcome is a deliberate exit.
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    return result


def render(job: Path | str, *extra: str) -> Result:
    return run("render", str(job), "--nodes", str(FLEET_NODES), *extra)


def write_jobs(tmp_path: Path, *bodies: dict[str, Any], name: str = "job.yaml") -> Path:
    p = tmp_path / name
    p.write_text(dump_yaml_all(bodies))
    return p


def objects(result: Result) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(result.stdout) if d]


# --- every example, against the default fleet ---------------------------------------------


@pytest.mark.parametrize("name", job_examples())
def test_example_renders(name: str) -> None:
    body = example(name)
    job, ns = body["metadata"]["name"], body["metadata"]["namespace"]
    result = render(EXAMPLES / name)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("# placement: ")
    objs = objects(result)
    assert objs[0]["kind"] == "Service" and objs[0]["metadata"]["name"] == job
    assert objs[0]["spec"]["clusterIP"] == "None"
    pods = pods_of(objs)
    expected = {
        f"{job}-{role.lower()}-{i}"
        for role, rs in body["spec"]["replicaSpecs"].items()
        for i in range(rs["replicas"])
    }
    assert {p["metadata"]["name"] for p in pods} == expected
    header_nodes = result.stdout.splitlines()[0].split("nodes=")[1].split(",")
    for obj in objs:
        meta = obj["metadata"]
        assert meta["namespace"] == ns
        assert meta["labels"][c.LABEL_JOB_NAME] == job
        (owner,) = meta["ownerReferences"]
        assert owner["kind"] == "TrainingJob" and owner["name"] == job and owner["controller"]
    for pod in pods:
        labels = pod["metadata"]["labels"]
        role = labels[c.LABEL_REPLICA_TYPE]
        index = labels[c.LABEL_REPLICA_INDEX]
        assert role == role.lower() and isinstance(index, str)
        assert pod["metadata"]["name"] == f"{job}-{role}-{index}"
        # Gated only where a pod is left to kube-scheduler (planner.needs_gate).
        gated = {"name": c.SCHEDULING_GATE} in (pod["spec"].get("schedulingGates") or [])
        assert gated == (len(pods) > 1 and any(pinned_node(p) is None for p in pods))
        gpus = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
        if gpus.get(c.RESOURCE_GPU):
            assert pinned_node(pod) in header_nodes


@pytest.mark.parametrize("name", job_examples())
def test_example_json_is_a_v1_list_of_the_same_objects(name: str) -> None:
    as_yaml = render(EXAMPLES / name)
    as_json = render(EXAMPLES / name, "-o", "json")
    assert as_json.exit_code == 0
    doc = json.loads(as_json.stdout)
    assert doc["apiVersion"] == "v1" and doc["kind"] == "List"
    assert doc["items"] == objects(as_yaml)


@pytest.mark.parametrize("name", job_examples())
def test_render_is_deterministic(name: str) -> None:
    assert render(EXAMPLES / name).stdout == render(EXAMPLES / name).stdout


def test_pytorch_example_wiring() -> None:
    pods = pods_of(objects(render(EXAMPLES / "pytorch-ddp.yaml")))
    envs = [env_of(p) for p in pods]
    assert sorted(e[c.ENV_PET_NODE_RANK] for e in envs) == ["0", "1"]
    rank0 = next(p for p, e in zip(pods, envs, strict=True) if e[c.ENV_PET_NODE_RANK] == "0")
    addr = f"{rank0['metadata']['name']}.bert.team-nlp.svc"
    assert {e[c.ENV_PET_MASTER_ADDR] for e in envs} == {addr}
    for p in pods:
        ctr = p["spec"]["containers"][0]
        assert ctr["resources"]["limits"][c.DEFAULT_RDMA_RESOURCE] == "1"
        assert "IPC_LOCK" in ctr["securityContext"]["capabilities"]["add"]
        assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in p["spec"][
            "volumes"
        ]


def test_tensorflow_example_tf_config() -> None:
    pods = pods_of(objects(render(EXAMPLES / "tensorflow-multiworker.yaml")))
    clusters = {json.dumps(json.loads(env_of(p)["TF_CONFIG"])["cluster"]) for p in pods}
    assert len(clusters) == 1


def test_mpi_example_hostfile_and_secret_note() -> None:
    result = render(EXAMPLES / "mpi-horovod.yaml")
    assert "# not rendered: Secret bert-horovod-ssh-" in result.stdout
    objs = objects(result)
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap"]
    hostfile = next(v for k, v in cm["data"].items() if "hostfile" in k)
    for i in (0, 1):
        assert f"bert-horovod-worker-{i}.bert-horovod.team-nlp.svc" in hostfile


# --- jobs written for the tests -------------------------------------------------------------


def test_user_template_merged(tmp_path: Path) -> None:
    template = {
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "command": ["torchrun", "t.py"],
                    "env": [
                        {"name": "NCCL_IB_HCA", "value": "=mlx5_0"},
                        {"name": "STEPS", "value": "08"},
                    ],
                    "resources": {
                        "limits": {"cpu": "32", "memory": "256Gi"},
                        "requests": {"cpu": "30", "memory": "200Gi"},
                    },
                },
                {
                    "name": "sidecar",
                    "image": "busybox:1.36",
                    "command": ["sleep", "infinity"],
                    "resources": {"limits": {"cpu": "100m"}},
                },
            ]
        }
    }
    body = job("merge").workers(2, 8, template)
    result = render(write_jobs(tmp_path, body.placement("rack").build()))
    assert result.exit_code == 0, result.stderr
    for pod in pods_of(objects(result)):
        main, side = pod["spec"]["containers"]
        env = env_of(pod)
        assert env["NCCL_IB_HCA"] == "=mlx5_0", "the user's env var wins"
        assert env["STEPS"] == "08", "stays a string through YAML"
        res = main["resources"]
        assert res["limits"]["cpu"] == "32" and res["limits"]["memory"] == "256Gi"
        assert res["requests"]["cpu"] == "30" and res["requests"][c.RESOURCE_GPU] == "8"
        assert res["limits"][c.RESOURCE_GPU] == "8"
        assert side == template["spec"]["containers"][1]
    assert "value: '08'" in result.stdout


def test_t4_job_disables_ib(tmp_path: Path) -> None:
    body = (
        job("t4", version=None, cuda="12.0").workers(2, 4).placement("rack", products=["Tesla-T4"])
    )
    result = render(write_jobs(tmp_path, body.build()))
    assert result.exit_code == 0, result.stderr
    for pod in pods_of(objects(result)):
        assert node_product(pinned_node(pod) or "") == "Tesla-T4"
        assert env_of(pod)["NCCL_IB_DISABLE"] == "1"


def test_cuda_13_job_lands_on_h100(tmp_path: Path) -> None:
    body = job("c13", version=None, cuda="13.0").workers(4, 8).placement("rack", "Preferred")
    result = render(write_jobs(tmp_path, body.build()))
    assert result.exit_code == 0, result.stderr
    nodes = {pinned_node(p) for p in pods_of(objects(result))}
    assert {node_product(n or "") for n in nodes} == {H100}
    assert not any(n and n.startswith(("v100", "a100")) for n in nodes)


def test_rack_required_larger_than_any_rack_never_fits(tmp_path: Path) -> None:
    body = example("pytorch-ddp.yaml")
    body["spec"]["replicaSpecs"]["Worker"]["replicas"] = 20
    result = render(write_jobs(tmp_path, body))
    assert result.exit_code == 4
    assert result.stdout == ""
    never, first = result.stderr.splitlines()[:2]
    assert never.startswith("never fits this fleet: needs 160 GPUs in one rack (Required)")
    assert "the largest rack has" in never
    assert first.startswith("NoFit: needs 20 x 8 GPUs in one rack (Required)")
    assert "largest rack" in first and "rack-h100-" in first
    assert any(line.startswith("  rack rack-") for line in result.stderr.splitlines()[1:])


def test_v100_only_job_exits_3(tmp_path: Path) -> None:
    body = job("v", version=None, cuda="12.4").workers(1, 8).placement("node", products=[V100])
    result = render(write_jobs(tmp_path, body.build()))
    assert result.exit_code == 3
    assert result.stderr.startswith("Incompatible: ")
    assert V100 in result.stderr


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        pytest.param(
            lambda j: j.workers(2, -1), "error: spec.replicaSpecs.Worker.gpus: ", id="gpus"
        ),
        pytest.param(
            lambda j: j.role("Sidekick", 1, 0), "error: spec.replicaSpecs: unknown role", id="role"
        ),
        pytest.param(lambda j: j.role("PS", 1, 0), "error: spec.replicaSpecs", id="framework-role"),
    ],
)
def test_invalid_job_exits_2_naming_the_field(tmp_path: Path, mutate: Any, message: str) -> None:
    bad = job("bad", version=None, cuda=None).workers(2, 8)
    mutate(bad)
    result = render(write_jobs(tmp_path, bad.build()))
    assert result.exit_code == 2
    assert result.stderr.startswith(message), result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(
            {"metadata": {"namespace": "x"}}, "error: metadata.name: required", id="no-name"
        ),
        pytest.param({"metadata": None}, "error: metadata.name: required", id="no-metadata"),
        pytest.param(
            {"metadata": {"name": "Bert_1"}}, "error: metadata.name: 'Bert_1' is not", id="bad-name"
        ),
        pytest.param({"metadata": {"name": "a" * 60}}, "error: metadata.name: too long", id="long"),
        pytest.param({"apiVersion": "trainop.dev/v1"}, "error: apiVersion: expected", id="version"),
    ],
)
def test_identity_errors_exit_2(tmp_path: Path, body: dict[str, Any], message: str) -> None:
    doc = job("ok", version=None, cuda=None).workers(1, 8).build()
    doc.update(body)
    result = render(write_jobs(tmp_path, doc))
    assert result.exit_code == 2
    assert result.stderr.startswith(message), result.stderr


# --- several jobs in one file ---------------------------------------------------------------


def test_several_jobs_render_each(tmp_path: Path) -> None:
    a = example("pytorch-ddp.yaml")
    b = example("jax.yaml")
    result = render(write_jobs(tmp_path, a, b))
    assert result.exit_code == 0
    assert result.stdout.count("# placement: ") == 2
    names = {o["metadata"]["name"] for o in objects(result) if o["kind"] == "Service"}
    assert names == {"bert", "t5x-base"}
    as_json = json.loads(render(write_jobs(tmp_path, a, b), "-o", "json").stdout)
    assert {o["metadata"]["name"] for o in as_json["items"] if o["kind"] == "Service"} == names


def test_several_jobs_exit_code_is_the_max(tmp_path: Path) -> None:
    ok = example("pytorch-ddp.yaml")
    invalid = job("bad", version=None, cuda=None).workers(2, -1).build()
    big = example("pytorch-ddp.yaml")
    big["metadata"]["name"] = "big"
    big["spec"]["replicaSpecs"]["Worker"]["replicas"] = 20
    result = render(write_jobs(tmp_path, ok, invalid))
    assert result.exit_code == 2
    assert "team-a/bad: error: spec.replicaSpecs.Worker.gpus" in result.stderr
    assert [o["metadata"]["name"] for o in objects(result) if o["kind"] == "Service"] == ["bert"]
    result = render(write_jobs(tmp_path, ok, invalid, big))
    assert result.exit_code == 4  # a Required rack larger than any: never fits
    assert "team-nlp/big: never fits this fleet: " in result.stderr


def test_other_kinds_are_skipped_with_a_note(tmp_path: Path) -> None:
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-nlp"}}
    result = render(write_jobs(tmp_path, ns, example("pytorch-ddp.yaml")))
    assert result.exit_code == 0
    assert "note: skipping Namespace team-nlp: not a TrainingJob" in result.stderr


# --- inputs -----------------------------------------------------------------------------------


def test_nodes_as_a_plain_stream_or_list_render_the_same(tmp_path: Path) -> None:
    stream = tmp_path / "nodes.yaml"
    stream.write_text(dump_yaml_all(fleet_nodes()))
    as_json = tmp_path / "nodes.json"
    as_json.write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": fleet_nodes()}))
    job = str(EXAMPLES / "pytorch-ddp.yaml")
    expected = render(job).stdout
    assert run("render", job, "--nodes", str(stream)).stdout == expected
    assert run("render", job, "--nodes", str(as_json)).stdout == expected


def test_job_from_stdin() -> None:
    text = (EXAMPLES / "pytorch-ddp.yaml").read_text()
    result = run("render", "-", "--nodes", str(FLEET_NODES), stdin=text)
    assert result.exit_code == 0
    assert result.stdout == render(EXAMPLES / "pytorch-ddp.yaml").stdout


def test_pods_mark_gpus_used(tmp_path: Path) -> None:
    taken = [busy(f"a100-0{i}", 8, f"other-{i}") for i in range(1, 5)]
    pods = tmp_path / "pods.yaml"
    pods.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": taken}))
    job = EXAMPLES / "pytorch-ddp.yaml"
    assert "nodes=a100-" in render(job).stdout.splitlines()[0]
    moved = render(job, "--pods", str(pods))
    assert moved.exit_code == 0
    assert "nodes=h100-" in moved.stdout.splitlines()[0]


def test_the_jobs_own_pods_do_not_block_it(tmp_path: Path) -> None:
    """Rendering a running job against `kubectl get pods -A` (which holds its pods) gives the
    same objects: its own pods do not count against it."""
    first = render(EXAMPLES / "pytorch-ddp.yaml")
    own = [dict(p, spec={**p["spec"], "nodeName": pinned_node(p)}) for p in pods_of(objects(first))]
    pods = tmp_path / "pods.yaml"
    pods.write_text(dump_yaml_all(own))
    again = render(EXAMPLES / "pytorch-ddp.yaml", "--pods", str(pods))
    assert again.stdout == first.stdout


def test_config_applies(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "fabricProfiles": [
                    {
                        "name": "t4-tcp",
                        "spec": {
                            "nodeSelector": {c.GFD_PRODUCT: "Tesla-T4"},
                            "fabric": "TCP",
                            "socketIfname": "ens5",
                        },
                    }
                ],
                "catalogOverrides": {
                    "images": {"pytorch": {"repository": "registry.local/nvidia/pytorch"}}
                },
                "compatAffinity": False,
            }
        )
    )
    body = (
        job("t4", version=None, cuda="12.0").workers(2, 4).placement("rack", products=["Tesla-T4"])
    )
    result = render(write_jobs(tmp_path, body.build()), "--config", str(config))
    assert result.exit_code == 0, result.stderr
    for pod in pods_of(objects(result)):
        assert env_of(pod)["NCCL_SOCKET_IFNAME"] == "ens5"
        assert pod["metadata"]["annotations"][c.ANNOTATION_FABRIC_PROFILE] == "t4-tcp"
        assert pod["spec"]["containers"][0]["image"].startswith("registry.local/nvidia/pytorch:")
        terms = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        node = pinned_node(pod)
        assert terms == [
            {
                "matchExpressions": [{"key": c.LABEL_HOSTNAME, "operator": "In", "values": [node]}],
                "matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}],
            }
        ]


def test_config_topology_levels(tmp_path: Path) -> None:
    """Without the rack level, 'rack' packing falls back to the level above the node (block
    becomes the 'rack' level), so the render follows the operator's configured levels."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"topologyLevels": [c.LABEL_BLOCK, c.LABEL_HOSTNAME]}))
    result = render(EXAMPLES / "pytorch-ddp.yaml", "--config", str(config))
    assert result.exit_code == 0, result.stderr
    assert "rack-" not in result.stdout.splitlines()[0]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param("kind: TrainingJob\nmetadata: {name: a\n", "not valid YAML (line", id="yaml"),
        pytest.param("- 1\n- 2\n", "expected an object", id="list"),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n",
            "no TrainingJob document",
            id="no-job",
        ),
        pytest.param("metadata: {name: a}\nspec: {}\n", "kind: required", id="no-kind"),
        pytest.param("", "no TrainingJob document (found nothing)", id="empty"),
    ],
)
def test_bad_job_file_exits_2(tmp_path: Path, content: str, message: str) -> None:
    p = tmp_path / "job.yaml"
    p.write_text(content)
    result = render(p)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr


def test_binary_job_file_exits_2(tmp_path: Path) -> None:
    p = tmp_path / "job.yaml"
    p.write_bytes(b"\xff\xfe\x00garbage")
    result = render(p)
    assert result.exit_code == 2 and "not a text file" in result.stderr


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        pytest.param(
            "kind: Pod\nmetadata: {name: p}\n", "object 1 is a Pod, expected Node", id="pod"
        ),
        pytest.param("kind: Node\nmetadata: {}\n", "Node 1 has no metadata.name", id="no-name"),
        pytest.param(
            "kind: Node\nmetadata: {name: n, labels: {nvidia.com/gpu.count: 8}}\n",
            "metadata.labels.nvidia.com/gpu.count: label values must be strings",
            id="int-label",
        ),
        pytest.param(
            "kind: List\nitems:\n- {kind: Node, metadata: {name: n}}\n"
            "- {kind: Node, metadata: {name: n}}\n",
            "--nodes",
            id="duplicate",
        ),
        pytest.param("kind: Node\nmetadata: {name: [\n", "not valid YAML", id="yaml"),
    ],
)
def test_bad_nodes_file_exits_2(tmp_path: Path, nodes: str, message: str) -> None:
    p = tmp_path / "nodes.yaml"
    p.write_text(nodes)
    result = run("render", str(EXAMPLES / "pytorch-ddp.yaml"), "--nodes", str(p))
    assert result.exit_code == 2
    assert message in result.stderr, result.stderr


def test_no_nodes_never_fits(tmp_path: Path) -> None:
    p = tmp_path / "nodes.yaml"
    p.write_text("apiVersion: v1\nkind: List\nitems: []\n")
    result = run("render", str(EXAMPLES / "pytorch-ddp.yaml"), "--nodes", str(p))
    assert result.exit_code == 4
    assert "no nodes" in result.stderr


def test_bad_pods_and_config_files_exit_2(tmp_path: Path) -> None:
    nodes_as_pods = run(
        "render",
        str(EXAMPLES / "pytorch-ddp.yaml"),
        "--nodes",
        str(FLEET_NODES),
        "--pods",
        str(FLEET_NODES),
    )
    assert nodes_as_pods.exit_code == 2 and "--pods" in nodes_as_pods.stderr
    config = tmp_path / "config.yaml"
    config.write_text("topologyLevel: []\n")
    bad = render(EXAMPLES / "pytorch-ddp.yaml", "--config", str(config))
    assert bad.exit_code == 2
    assert bad.stderr.startswith("error: --config: topologyLevel: unknown key")


def test_missing_files_exit_2_without_traceback(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yaml")
    for args in (
        ("render", missing, "--nodes", str(FLEET_NODES)),
        ("render", str(EXAMPLES / "jax.yaml"), "--nodes", missing),
        ("render", str(EXAMPLES / "jax.yaml")),
    ):
        result = run(*args)
        assert result.exit_code == 2, args
        assert "Error" in result.stderr


def test_two_stdin_inputs_refused() -> None:
    result = run("render", "-", "--nodes", "-", stdin="")
    assert result.exit_code == 2 and "standard input" in result.stderr


# --- the NODES file of the examples -----------------------------------------------------------


def test_fleet_nodes_example_is_generated() -> None:
    result = run("cluster", "fleet", "-o", "yaml")
    assert result.exit_code == 0
    assert result.stdout == FLEET_NODES.read_text(), (
        "examples/fleet-nodes.yaml is stale: trainop cluster fleet -o yaml > "
        "examples/fleet-nodes.yaml"
    )
    assert "trainop cluster fleet -o yaml > examples/fleet-nodes.yaml" in result.stdout


def test_fleet_yaml_matches_fleet_json() -> None:
    as_yaml = yaml.safe_load(run("cluster", "fleet", "-o", "yaml").stdout)
    as_json = json.loads(run("cluster", "fleet", "-o", "json").stdout)
    assert as_yaml == as_json
    assert as_yaml["items"] == fleet_nodes()


def test_render_shows_compatibility_and_releases_tried(tmp_path: Path) -> None:
    body = job("c13", version=None, cuda="13.0").workers(4, 8).placement("rack", "Preferred")
    result = render(write_jobs(tmp_path, body.build()))
    assert result.exit_code == 0, result.stderr
    assert "# image: nvcr.io/nvidia/pytorch:" in result.stdout
    assert "(Native)" in result.stdout or "(MinorVersionCompat)" in result.stdout


def test_template_node_selector_is_explained_on_wait(tmp_path: Path) -> None:
    body = example("pytorch-ddp.yaml")
    body["spec"]["replicaSpecs"]["Worker"]["template"] = {
        "spec": {"nodeSelector": {"pool": "nowhere"}}
    }
    result = render(write_jobs(tmp_path, body))
    assert result.exit_code == 3
    assert "excluded by the Worker template's nodeSelector pool=nowhere" in result.stderr


def test_alias_bomb_in_template_spec_exits_2_fast(tmp_path: Path) -> None:
    # A 1 KB "billion laughs" in a pod template once ran `render` for a minute into MemoryError.
    lines = ["          l0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"          l{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    text = (EXAMPLES / "pytorch-ddp.yaml").read_text()
    anchor = "        spec:\n"
    assert anchor in text
    p = tmp_path / "bomb.yaml"
    p.write_text(text.replace(anchor, anchor + "\n".join(lines) + "\n", 1))
    start = time.perf_counter()
    result = render(p)
    assert time.perf_counter() - start < 1.0
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {p}: document 1: aliases expand it by ")
    assert result.stderr.count("\n") == 1, result.stderr


def test_input_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    p = tmp_path / "big.yaml"
    p.write_text("a: " + "x" * 100 + "\n")
    with pytest.raises(InputError, match=r"big\.yaml: more than 64 bytes, over the limit"):
        read_text(str(p), max_bytes=64)
    assert read_text(str(p), max_bytes=1000).startswith("a: x")


def test_required_rack_on_nodes_without_rack_labels_exits_3_naming_the_label(
    tmp_path: Path,
) -> None:
    nodes = fleet_nodes()
    for n in nodes:
        del n["metadata"]["labels"][c.LABEL_RACK]
    p = tmp_path / "nodes.yaml"
    p.write_text(dump_yaml_all(nodes))
    result = run("render", str(EXAMPLES / "pytorch-ddp.yaml"), "--nodes", str(p))
    assert result.exit_code == 3
    assert (
        f"no eligible node carries label {c.LABEL_RACK}; label racks with it or set "
        "topologyLevels" in result.stderr.splitlines()[0]
    ), result.stderr


# --- render wires progress as the operator does (issue 35) -------------------------------------
PROGRESS_URL = "https://trainop-progress.trainop-system.svc:8082/v1/progress"


def test_render_wires_progress_exactly_as_the_operator_does(tmp_path: Path) -> None:
    from datetime import datetime

    from trainop.cli.render import CA_PLACEHOLDER
    from trainop.config import load_operator_config
    from trainop.inventory import build_snapshot
    from trainop.reconcile import reconcile

    config_file = tmp_path / "config.yaml"
    config_file.write_text(
        yaml.safe_dump({"progress": {"url": PROGRESS_URL, "intervalSeconds": 5}})
    )
    body = job("bert", workers=2, gpus=8).checkpoint(gracePeriodSeconds=60, signal="SIGUSR2")
    result = render(write_jobs(tmp_path, body.manifest()), "--config", str(config_file))
    assert result.exit_code == 0, result.output
    rendered = {o["metadata"]["name"]: o for o in objects(result) if o["kind"] == "Pod"}
    env = {
        e["name"]: e.get("value") for e in rendered["bert-worker-0"]["spec"]["containers"][0]["env"]
    }
    assert env["TRAINOP_PROGRESS_URL"] == PROGRESS_URL and env["TRAINOP_PROGRESS_INTERVAL"] == "5.0"
    assert env["TRAINOP_CHECKPOINT_SIGNAL"] == "SIGUSR2"
    assert env["TRAINOP_PROGRESS_CA_FILE"] == "/var/run/secrets/trainop.dev/progress/ca.crt"
    assert env["KUBEFLOW_TRAINER_SERVER_URL"].endswith("/v1/trainer-status")
    meta = rendered["bert-worker-0"]["metadata"]
    assert meta["annotations"]["trainop.dev/progress-ca"] == CA_PLACEHOLDER

    # The operator's reconcile, with the same config (and its CA), creates the same wiring.
    import dataclasses

    config = dataclasses.replace(load_operator_config(str(config_file)), progress_ca=CA_PLACEHOLDER)
    nodes = yaml.safe_load(FLEET_NODES.read_text())["items"]
    snapshot = build_snapshot(nodes, [], levels=config.topology_levels)
    acts = reconcile(body.build(), [], lambda: snapshot, config, datetime(2026, 11, 27, 3, 0))
    created = {o["metadata"]["name"]: o for o in acts.create if o["kind"] == "Pod"}
    assert set(created) == set(rendered)
    for name, pod in created.items():
        mine = rendered[name]
        for key in ("containers", "volumes"):
            assert json.loads(json.dumps(pod["spec"][key])) == mine["spec"][key], (name, key)
        assert pod["metadata"]["annotations"] == mine["metadata"]["annotations"], name


def test_without_a_progress_url_render_wires_nothing(tmp_path: Path) -> None:
    result = render(write_jobs(tmp_path, job("bert", workers=2, gpus=8).manifest()))
    pods = [o for o in objects(result) if o["kind"] == "Pod"]
    names = {e["name"] for e in pods[0]["spec"]["containers"][0].get("env") or []}
    assert "TRAINOP_PROGRESS_URL" not in names


@pytest.mark.parametrize(
    ("progress", "words"),
    [
        ({"url": "ftp://x"}, "progress.url: must be an https://"),
        ({"url": PROGRESS_URL, "intervalSeconds": 0.5}, "progress.intervalSeconds: must be >= 1"),
        ({"url": PROGRESS_URL, "caBundle": "not pem"}, "progress.caBundle: must be PEM"),
        ({"uri": PROGRESS_URL}, "progress.uri: unknown key"),
    ],
    ids=["scheme", "interval", "ca", "unknown"],
)
def test_a_bad_progress_config_names_the_key(
    tmp_path: Path, progress: dict[str, Any], words: str
) -> None:
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump({"progress": progress}))
    result = render(write_jobs(tmp_path, job("bert").manifest()), "--config", str(config_file))
    assert result.exit_code != 0 and words in result.output, result.output

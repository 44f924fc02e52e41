"""`trainop convert`: Kubeflow jobs in, TrainingJobs out, each one valid and renderable.

The inputs in tests/unit/data/convert/ are written field by field from the Kubeflow CRD types
(each file cites its source). Every case checks the exact set of field paths reported on
stderr, so a field can neither vanish silently nor be reported twice; then the TrainingJob
goes through trainop's validation and `trainop render` on the example fleet, and the pods
it renders still carry the Kubeflow job's images, commands, env, volumes, tolerations and
node selectors.
"""

from __future__ import annotations

import copy
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from pydantic import BaseModel

from tests.unit.manifest_helpers import FLEET_NODES, env_of, pods_of
from trainop.api.trainingjob import TrainingJobSpec
from trainop.cli.main import cli
from trainop.convert import NOT_CONVERTED, check, convert_documents
from trainop.convert.coverage import SPEC_FIELDS
from trainop.runtimes import Resolved, resolve, runtime_index
from trainop.yamlio import dump_yaml_all

DATA = Path(__file__).parent / "data" / "convert"


def run(*args: str, stdin: str | None = None) -> Result:
    result = CliRunner().invoke(cli, list(args), input=stdin)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    return result


def docs(result: Result) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def noted_paths(result: Result) -> set[str]:
    """The field path of every note line (`<Kind> <ns>/<name>: <path>: <message>`)."""
    out = set()
    for line in result.stderr.splitlines():
        if not line.startswith("error:"):
            out.add(line.split(": ", 2)[1])
    return out


def load(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DATA / name).read_text()) if d]


# --- every kind: field by field, valid, renderable -------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    files: tuple[str, ...]
    spec: dict[str, Any]  # expected values of the TrainingJob spec (a subset)
    notes: frozenset[str]  # exactly the field paths reported on stderr
    runtime: tuple[str, ...] = ()
    roles: dict[str, dict[str, Any]] = field(default_factory=dict)  # role -> replicas/gpus


CASES = [
    Case(
        "pytorchjob: Master + Worker merge into Worker, queue and priority mapped",
        ("pytorchjob.yaml",),
        {
            "framework": {"name": "pytorch"},
            "image": "ghcr.io/example/bert:1.0",
            "queue": "nlp",
            "priorityClassName": "high",
            "runPolicy": {
                "backoffLimit": 4,
                "activeDeadlineSeconds": 86400,
                "ttlSecondsAfterFinished": 600,
                "suspend": False,
                "restartPolicy": "OnFailure",
                "successPolicy": "RankZero",
            },
            "elastic": {"minReplicas": 1, "maxReplicas": 4},
        },
        frozenset(
            {
                "spec.elasticPolicy.maxReplicas",
                "spec.elasticPolicy.maxRestarts",
                "spec.runPolicy.schedulingPolicy.queue",
                "spec.runPolicy.schedulingPolicy.minResources",
                "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds",
            }
        ),
        roles={"Worker": {"replicas": 4, "gpus": 8}},
    ),
    Case(
        "tfjob: Master becomes Chief, CPU parameter servers, an Evaluator with its own image",
        ("tfjob.yaml",),
        {
            "framework": {"name": "tensorflow"},
            "image": "nvcr.io/nvidia/tensorflow:24.03-tf2-py3",
            "runPolicy": {
                "backoffLimit": 2,
                "suspend": True,
                "restartPolicy": "ExitCode",
                "successPolicy": "AllWorkers",
            },
        },
        frozenset(
            {
                "spec.tfReplicaSpecs.Worker.template.spec.restartPolicy",
                "spec.runPolicy.cleanPodPolicy",
                "spec.tfReplicaSpecs.Master.restartPolicy",
                "spec.tfReplicaSpecs.PS.restartPolicy",
                "spec.tfReplicaSpecs.Evaluator.restartPolicy",
                "spec.enableDynamicWorker",
            }
        ),
        roles={
            "Chief": {"replicas": 1, "gpus": 4},
            "PS": {"replicas": 2},
            "Worker": {"replicas": 2, "gpus": 8},
            "Evaluator": {"replicas": 1, "gpus": 1},
        },
    ),
    Case(
        "mpijob v2beta1: slotsPerWorker equal to the GPUs, Open MPI, WaitForWorkersReady",
        ("mpijob.yaml",),
        {
            "framework": {"name": "mpi"},
            "image": "horovod/horovod:0.28.1",
            "runPolicy": {
                "backoffLimit": 0,
                "ttlSecondsAfterFinished": 60,
                "restartPolicy": "Never",
                "successPolicy": "AllWorkers",
            },
        },
        frozenset({"spec.sshAuthMountPath", "spec.runPolicy.managedBy"}),
        roles={"Launcher": {"replicas": 1}, "Worker": {"replicas": 2, "gpus": 8}},
    ),
    Case(
        "mpijob v1: mainContainer, spec-level cleanPodPolicy, slots unlike the GPUs",
        ("mpijob-v1.yaml",),
        {"framework": {"name": "mpi"}, "image": "ghcr.io/example/nccl-tests:2.13"},
        frozenset({"spec.slotsPerWorker", "spec.cleanPodPolicy"}),
        roles={"Launcher": {"replicas": 1}, "Worker": {"replicas": 2, "gpus": 4}},
    ),
    Case(
        "paddlejob: collective mode, elastic policy listed",
        ("paddlejob.yaml",),
        {
            "framework": {"name": "paddle"},
            "runPolicy": {
                "activeDeadlineSeconds": 3600,
                "restartPolicy": "OnFailure",
                "successPolicy": "AllWorkers",
            },
        },
        frozenset(
            {
                "spec.elasticPolicy.minReplicas",
                "spec.elasticPolicy.maxReplicas",
                "spec.elasticPolicy.maxRestarts",
                "spec.runPolicy.cleanPodPolicy",
            }
        ),
        roles={"Worker": {"replicas": 2, "gpus": 8}},
    ),
    Case(
        "xgboostjob: framework pytorch (said), Master merged, rank 0 decides success",
        ("xgboostjob.yaml",),
        {
            "framework": {"name": "pytorch"},
            "image": "docker.io/kubeflow/xgboost-dist-iris:latest",
            "runPolicy": {"restartPolicy": "ExitCode", "successPolicy": "RankZero"},
        },
        frozenset(
            {
                "kind",
                "spec.xgbReplicaSpecs.Master.restartPolicy",
                "spec.runPolicy.cleanPodPolicy",
            }
        ),
        roles={"Worker": {"replicas": 3, "gpus": 1}},
    ),
    Case(
        "jaxjob: one Worker role, Kubeflow's jax container, restart policy mapped",
        ("jaxjob.yaml",),
        {
            "framework": {"name": "jax"},
            "image": "docker.io/kubeflow/jaxjob-simple:latest",
            "runPolicy": {
                "backoffLimit": 2,
                "restartPolicy": "OnFailure",
                "successPolicy": "AllWorkers",
            },
        },
        frozenset(),
        roles={"Worker": {"replicas": 2, "gpus": 8}},
    ),
    Case(
        "trainjob v2.1 + ClusterTrainingRuntime in the same file: trainer, overrides, maxRestarts",
        ("trainjob-torch.yaml",),
        {
            "framework": {"name": "pytorch"},
            "image": "ghcr.io/example/llama-ft:0.3",
            "runPolicy": {
                "suspend": False,
                "restartPolicy": "OnFailure",
                "backoffLimit": 3,
                "successPolicy": "AllWorkers",
            },
        },
        frozenset(
            {
                "spec.initializer.dataset",
                "spec.labels",
                # the runtime's own, now that it converts to a trainop runtime
                "spec.template.spec.replicatedJobs[0]",
                "spec.podGroupPolicy.coscheduling.scheduleTimeoutSeconds",
            }
        ),
        roles={"Worker": {"replicas": 2, "gpus": 8}},
    ),
    Case(
        "trainjob v2.3 + TrainingRuntime via --runtime: MPI launcher, runtimePatches",
        ("trainjob-mpi.yaml",),
        {
            "framework": {"name": "mpi"},
            "image": "ghcr.io/kubeflow/trainer/deepspeed-runtime",
            "runPolicy": {
                "activeDeadlineSeconds": 7200,
                "restartPolicy": "Never",
                "successPolicy": "AllWorkers",
            },
        },
        frozenset(
            {
                "spec.managedBy",  # the --runtime runtime is not converted: no notes of its own
            }
        ),
        runtime=("runtime-deepspeed.yaml",),
        roles={"Launcher": {"replicas": 1}, "Worker": {"replicas": 2, "gpus": 4}},
    ),
]


def convert(case: Case) -> Result:
    extra = [a for f in case.runtime for a in ("--runtime", str(DATA / f))]
    return run("convert", *(str(DATA / f) for f in case.files), *extra)


def split(objs: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The one TrainingJob among the converted objects, and the runtimes."""
    (job,) = [o for o in objs if o["kind"] == "TrainingJob"]
    return job, [o for o in objs if o["kind"] != "TrainingJob"]


def runtimes_of(case: Case) -> list[dict[str, Any]]:
    """The --runtime files of a case converted on their own, as a platform team would."""
    if not case.runtime:
        return []
    result = run("convert", *(str(DATA / f) for f in case.runtime))
    assert result.exit_code == 0, result.stderr
    return docs(result)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_converts_with_every_unmapped_field_named(case: Case) -> None:
    result = convert(case)
    assert result.exit_code == 0, result.stderr
    job, runtimes = split(docs(result))
    assert job["apiVersion"] == "trainop.dev/v1alpha1"
    index = runtime_index([*runtimes, *runtimes_of(case)])
    merged = resolve(job, index)
    assert isinstance(merged, Resolved), merged
    for key, value in case.spec.items():
        assert merged.body["spec"][key] == value, key
    got_roles = {
        role: {k: v for k, v in rs.items() if k in ("replicas", "gpus")}
        for role, rs in merged.body["spec"]["replicaSpecs"].items()
    }
    assert got_roles == case.roles
    assert noted_paths(result) == case.notes, result.stderr
    assert check(job, index) == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_converted_job_renders_on_the_example_fleet(case: Case, tmp_path: Path) -> None:
    out = tmp_path / "jobs.yaml"
    extra = [a for f in case.runtime for a in ("--runtime", str(DATA / f))]
    assert (
        run("convert", *(str(DATA / f) for f in case.files), *extra, "-o", str(out)).exit_code == 0
    )
    rts = tmp_path / "runtimes.yaml"
    rts.write_text(dump_yaml_all(runtimes_of(case)))
    with_rts = ["--runtimes", str(rts)] if case.runtime else []
    result = run("render", str(out), "--nodes", str(FLEET_NODES), *with_rts)
    assert result.exit_code == 0, result.stderr
    job, runtimes = split([d for d in yaml.safe_load_all(out.read_text()) if d])
    merged = resolve(job, runtime_index([*runtimes, *runtimes_of(case)]))
    assert isinstance(merged, Resolved)
    roles = merged.body["spec"]["replicaSpecs"].values()
    assert len(pods_of(docs(result))) == sum(rs.get("replicas", 1) for rs in roles)


# --- what the pods keep: the Kubeflow job's own fields, through render -----------------------


def rendered_pods(tmp: Path, files: list[str], *extra: str) -> dict[str, dict[str, Any]]:
    """The pods `trainop render` makes of the converted files, by name (`extra`: --runtime
    files, converted on their own and given to render)."""
    p = tmp / "converted.yaml"
    result = run("convert", *(str(DATA / f) for f in files), *extra, "-o", str(p))
    assert result.exit_code == 0, result.stderr
    with_rts: list[str] = []
    if extra:
        rts = tmp / "runtimes.yaml"
        assert run("convert", *extra[1::2], "-o", str(rts)).exit_code == 0
        with_rts = ["--runtimes", str(rts)]
    rendered = run("render", str(p), "--nodes", str(FLEET_NODES), *with_rts)
    assert rendered.exit_code == 0, rendered.stderr
    return {pod["metadata"]["name"]: pod for pod in pods_of(docs(rendered))}


def test_pytorchjob_pod_fields_survive_conversion_and_render(tmp_path: Path) -> None:
    pods = rendered_pods(tmp_path, ["pytorchjob.yaml"])
    source = load("pytorchjob.yaml")[0]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    assert sorted(pods) == [f"bert-worker-{i}" for i in range(4)]  # elastic, at maxReplicas
    for pod in pods.values():
        main, logger = pod["spec"]["containers"]
        assert main["name"] == "pytorch" and logger["name"] == "logger"  # trainer first
        assert main["image"] == "ghcr.io/example/bert:1.0" and logger["image"] == "busybox:1.36"
        assert main["command"] == ["torchrun"]
        assert main["args"] == ["/workspace/train.py", "--epochs", "3"]
        assert env_of(pod)["NCCL_DEBUG"] == "INFO"
        assert {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}},
        } in (main["env"])
        assert main["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert main["resources"]["limits"]["memory"] == "512Gi"
        assert main["volumeMounts"][0] == {"name": "data", "mountPath": "/data"}
        assert source["spec"]["volumes"][0] in pod["spec"]["volumes"]
        assert source["spec"]["tolerations"][0] in pod["spec"]["tolerations"]
        assert pod["spec"]["nodeSelector"] == source["spec"]["nodeSelector"]
        assert pod["metadata"]["labels"]["app"] == "bert"
        assert pod["spec"]["priorityClassName"] == "high"


def test_tfjob_roles_keep_their_own_images_and_commands(tmp_path: Path) -> None:
    pods = rendered_pods(tmp_path, ["tfjob.yaml"])
    assert sorted(pods) == [
        "resnet-chief-0",
        "resnet-evaluator-0",
        "resnet-ps-0",
        "resnet-ps-1",
        "resnet-worker-0",
        "resnet-worker-1",
    ]
    evaluator = pods["resnet-evaluator-0"]["spec"]["containers"][0]
    assert evaluator["image"] == "example.com/resnet-eval:2"
    assert evaluator["command"] == ["python", "/opt/eval.py"]
    worker = pods["resnet-worker-0"]["spec"]
    assert worker["containers"][0]["image"] == "nvcr.io/nvidia/tensorflow:24.03-tf2-py3"
    assert worker["nodeSelector"] == {"trainop.dev/rack": "rack-a100"}
    assert worker["restartPolicy"] == "Never"
    ps = pods["resnet-ps-0"]["spec"]["containers"][0]
    assert ps["resources"]["requests"] == {"cpu": "8", "memory": "32Gi"}


def test_trainjob_trainer_and_overrides_reach_the_pods(tmp_path: Path) -> None:
    pods = rendered_pods(tmp_path, ["trainjob-torch.yaml"])
    pod = pods["llama-worker-0"]
    main = pod["spec"]["containers"][0]
    assert main["image"] == "ghcr.io/example/llama-ft:0.3"
    assert main["command"] == ["torchrun", "/workspace/ft.py"]
    assert main["args"] == ["--lr", "2e-5"]
    assert env_of(pod)["WANDB_MODE"] == "offline" and env_of(pod)["CKPT_DIR"] == "/ckpt"
    limits = main["resources"]["limits"]
    assert limits["memory"] == "900Gi" and limits["nvidia.com/gpu"] == "8"
    assert {"name": "ckpt", "mountPath": "/ckpt"} in main["volumeMounts"]
    assert pod["spec"]["serviceAccountName"] == "trainer"
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pod["metadata"]["labels"]["app"] == "llama"


def test_trainjob_mpi_command_goes_to_the_launcher_resources_to_the_workers(tmp_path: Path) -> None:
    pods = rendered_pods(
        tmp_path, ["trainjob-mpi.yaml"], "--runtime", str(DATA / "runtime-deepspeed.yaml")
    )
    launcher = pods["ds-t5-launcher-0"]["spec"]["containers"][0]
    assert launcher["command"][-4:] == [
        "mpirun",
        "--allow-run-as-root",
        "python",
        "/workspace/ds.py",
    ]
    worker = pods["ds-t5-worker-0"]
    assert worker["spec"]["containers"][0]["command"] == ["/usr/sbin/sshd"]
    assert worker["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert worker["spec"]["nodeSelector"] == {"trainop.dev/rack": "rack-t4"}
    assert worker["metadata"]["annotations"]["example.com/tuned"] == "true"


# --- mappings, one field at a time -----------------------------------------------------------


def pytorchjob(**changes: Any) -> dict[str, Any]:
    """The data file's PyTorchJob with dotted-path changes (None deletes the field)."""
    body = copy.deepcopy(load("pytorchjob.yaml")[0])
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = body
        for p in parents:
            node = node.setdefault(p, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return body


def converted(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    (out,) = convert_documents([body])
    assert out.errors == [] and out.job is not None
    return out.job, {n.path: n.message for n in out.notes}


RESTART_CASES = [
    ("OnFailure", "OnFailure", False),
    ("Never", "Never", False),
    ("ExitCode", "ExitCode", False),
    ("Always", "OnFailure", True),
]


@pytest.mark.parametrize(("kubeflow", "trainop", "noted"), RESTART_CASES, ids=lambda v: str(v))
def test_restart_policy(kubeflow: str, trainop: str, noted: bool) -> None:
    job, notes = converted(
        pytorchjob(
            spec__pytorchReplicaSpecs__Worker__restartPolicy=kubeflow,
            spec__pytorchReplicaSpecs__Master__restartPolicy=kubeflow,
        )
    )
    assert job["spec"]["runPolicy"]["restartPolicy"] == trainop
    assert ("spec.pytorchReplicaSpecs.Worker.restartPolicy" in notes) is noted


CLEAN_POD_CASES = [("Running", False), ("All", True), ("None", True)]


@pytest.mark.parametrize(("policy", "noted"), CLEAN_POD_CASES, ids=lambda v: str(v))
def test_clean_pod_policy(policy: str, noted: bool) -> None:
    _, notes = converted(pytorchjob(spec__runPolicy__cleanPodPolicy=policy))
    assert ("spec.runPolicy.cleanPodPolicy" in notes) is noted


NPROC_CASES = [("auto", False), ("gpu", False), ("8", False), ("cpu", True), ("4", True)]


@pytest.mark.parametrize(("nproc", "noted"), NPROC_CASES, ids=lambda v: str(v))
def test_nproc_per_node(nproc: str, noted: bool) -> None:
    _, notes = converted(pytorchjob(spec__nprocPerNode=nproc))
    assert ("spec.nprocPerNode" in notes) is noted


def test_min_available_below_the_gang_is_listed() -> None:
    _, notes = converted(pytorchjob(spec__runPolicy__schedulingPolicy={"minAvailable": 1}))
    assert "spec.runPolicy.schedulingPolicy.minAvailable" in notes


def test_master_template_unlike_the_workers_is_listed() -> None:
    body = pytorchjob()
    master = body["spec"]["pytorchReplicaSpecs"]["Master"]
    master["template"] = copy.deepcopy(master["template"])
    master["template"]["spec"]["containers"][1]["args"] = ["--rank0-extra"]
    job, notes = converted(body)
    assert "spec.pytorchReplicaSpecs.Master.template" in notes
    main = job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert main["args"] == ["/workspace/train.py", "--epochs", "3"]  # the Worker's


def test_worker_only_pytorchjob_succeeds_when_all_workers_do() -> None:
    job, _ = converted(pytorchjob(spec__pytorchReplicaSpecs__Master=None, spec__elasticPolicy=None))
    assert job["spec"]["runPolicy"]["successPolicy"] == "AllWorkers"
    assert job["spec"]["replicaSpecs"]["Worker"]["replicas"] == 1


UNKNOWN_FIELD_CASES = [
    "spec.futureField",
    "spec.runPolicy.futurePolicy",
    "spec.runPolicy.schedulingPolicy.futureKnob",
    "spec.pytorchReplicaSpecs.Worker.futureThing",
    "metadata.futureMeta",
]


@pytest.mark.parametrize("path", UNKNOWN_FIELD_CASES)
def test_a_field_no_converter_knows_is_reported_not_dropped(path: str) -> None:
    _, notes = converted(pytorchjob(**{path.replace(".", "__"): "x"}))
    assert notes[path] == NOT_CONVERTED


def test_server_set_metadata_and_status_are_listed() -> None:
    body = pytorchjob(
        metadata__uid="1234",
        metadata__resourceVersion="99",
        status={"conditions": []},
    )
    body["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = "{}"
    job, notes = converted(body)
    assert {"metadata.uid", "metadata.resourceVersion"} <= set(notes)
    assert "metadata.annotations.kubectl.kubernetes.io/last-applied-configuration" in notes
    assert job["metadata"]["annotations"] == {"owner": "alice"}
    assert "status" in notes and "status" not in job


# --- errors: exit 2, one line naming the field --------------------------------------------


def _text(*bodies: dict[str, Any]) -> str:
    return dump_yaml_all(bodies)


def _paddle_ps() -> str:
    body = load("paddlejob.yaml")[0]
    body["spec"]["paddleReplicaSpecs"]["Master"] = body["spec"]["paddleReplicaSpecs"]["Worker"]
    return _text(body)


def _cpu_only() -> str:
    body = pytorchjob()
    for rs in body["spec"]["pytorchReplicaSpecs"].values():
        rs["template"] = copy.deepcopy(rs["template"])
        rs["template"]["spec"]["containers"][1]["resources"] = {}
    return _text(body)


ERROR_CASES = [
    ("not YAML", "a: [b", "not valid YAML"),
    (
        "unknown kind",
        _text({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}}),
        "batch/v1 Job is not a kind trainop converts",
    ),
    (
        "old apiVersion",
        _text({**pytorchjob(), "apiVersion": "kubeflow.org/v1beta2"}),
        "kubeflow.org/v1beta2 PyTorchJob is not a kind trainop converts",
    ),
    (
        "already a TrainingJob",
        _text(
            {"apiVersion": "trainop.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "t"}}
        ),
        "already a trainop TrainingJob",
    ),
    (
        "runtime missing",
        (DATA / "trainjob-mpi.yaml").read_text(),
        "needs TrainingRuntime deepspeed in namespace team-a",
    ),
    (
        "paddle parameter-server mode",
        _paddle_ps(),
        "spec.paddleReplicaSpecs.Master: parameter-server mode has no trainop equivalent",
    ),
    (
        "unknown replica type",
        _text(pytorchjob(spec__pytorchReplicaSpecs__Launcher={})),
        "spec.pytorchReplicaSpecs.Launcher: not a PyTorchJob replica type",
    ),
    (
        "GPU count not a number",
        _text(
            pytorchjob(
                spec__pytorchReplicaSpecs__Worker={
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "pytorch",
                                    "resources": {"limits": {"nvidia.com/gpu": "lots"}},
                                }
                            ]
                        }
                    }
                }
            )
        ),
        "must be an integer >= 0, got 'lots'",
    ),
    (
        "no GPUs: trainop would refuse it",
        _cpu_only(),
        "the TrainingJob would be Invalid: spec.replicaSpecs.Worker.gpus",
    ),
]


@pytest.mark.parametrize(("name", "text", "message"), ERROR_CASES, ids=lambda v: str(v)[:40])
def test_bad_input_exits_2_naming_the_field(name: str, text: str, message: str) -> None:
    result = run("convert", "-", stdin=text)
    assert result.exit_code == 2, result.output
    assert message in result.stderr, result.stderr


def test_missing_file_exits_2() -> None:
    assert run("convert", str(DATA / "absent.yaml")).exit_code == 2


def test_several_files_one_stream_and_output_file(tmp_path: Path) -> None:
    out = tmp_path / "out.yaml"
    result = run(
        "convert", str(DATA / "pytorchjob.yaml"), str(DATA / "paddlejob.yaml"), "-o", str(out)
    )
    assert result.exit_code == 0 and result.stdout == ""
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(out.read_text())]
    assert names == ["bert", "ernie"]


def test_a_runtime_alone_converts_to_a_trainop_runtime() -> None:
    result = run("convert", str(DATA / "runtime-deepspeed.yaml"))
    assert result.exit_code == 0, result.stderr
    (rt,) = docs(result)
    assert (rt["apiVersion"], rt["kind"]) == ("trainop.dev/v1alpha1", "TrainingRuntime")
    assert rt["metadata"] == {"name": "deepspeed", "namespace": "team-a"}
    assert rt["spec"]["framework"] == {"name": "mpi"}
    assert sorted(rt["spec"]["replicaSpecs"]) == ["Launcher", "Worker"]


def test_nothing_to_convert_is_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("---\n")
    result = run("convert", str(empty))
    assert result.exit_code == 2 and "no Kubeflow job or runtime" in result.stderr


MALFORMED_CASES = [
    ("spec a list", {"spec": []}),
    ("replica specs a string", {"spec": {"pytorchReplicaSpecs": "Worker"}}),
    (
        "container a string",
        {
            "spec": {
                "pytorchReplicaSpecs": {
                    "Worker": {"template": {"spec": {"containers": ["pytorch"]}}}
                }
            }
        },
    ),
    ("replicas a word", {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": "two"}}}}),
    (
        "runPolicy a number",
        {
            "spec": {
                "runPolicy": 3,
                "pytorchReplicaSpecs": {
                    "Worker": {"template": {"spec": {"containers": [{"name": "pytorch"}]}}}
                },
            }
        },
    ),
    ("no name", {"metadata": {}}),
]


@pytest.mark.parametrize(("name", "patch"), MALFORMED_CASES, ids=lambda v: str(v)[:30])
def test_malformed_input_is_one_error_line(name: str, patch: dict[str, Any]) -> None:
    body = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "x"}}
    result = run("convert", "-", stdin=_text({**body, **patch}))
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: PyTorchJob"), result.stderr


def test_runtime_option_takes_runtimes_only() -> None:
    result = run(
        "convert", str(DATA / "trainjob-mpi.yaml"), "--runtime", str(DATA / "paddlejob.yaml")
    )
    assert result.exit_code == 2
    assert "--runtime: object 1 is a kubeflow.org/v1 PaddleJob" in result.stderr


def test_a_v1_list_on_stdin_converts_every_item() -> None:
    listing = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [*load("pytorchjob.yaml"), *load("xgboostjob.yaml")],
    }
    result = run("convert", "-", stdin=_text(listing))
    assert result.exit_code == 0, result.stderr
    assert [d["metadata"]["name"] for d in docs(result)] == ["bert", "xgb-iris"]


def test_one_bad_job_exits_2_and_the_good_ones_are_still_written() -> None:
    bad = {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": "m"}}
    result = run("convert", "-", stdin=_text(*load("paddlejob.yaml"), bad))
    assert result.exit_code == 2
    assert "error: MXJob default/m: apiVersion/kind: kubeflow.org/v1 MXJob" in result.stderr
    assert [d["metadata"]["name"] for d in docs(result)] == ["ernie"]


# --- PyTorchJob elasticPolicy -> spec.elastic (issue 34) ---------------------------------

ELASTIC_CASES = [
    # (id, elasticPolicy, Worker replicas, spec.elastic wanted, paths noted)
    (
        "min-and-max",
        {"minReplicas": 1, "maxReplicas": 2},
        2,
        {"minReplicas": 1, "maxReplicas": 2},
        set(),
    ),
    ("max-only-min-is-max", {"maxReplicas": 2}, 2, {"minReplicas": 2, "maxReplicas": 2}, set()),
    (
        "min-only-max-is-the-workers",
        {"minReplicas": 1},
        2,
        {"minReplicas": 1, "maxReplicas": 2},
        set(),
    ),
    (
        "max-above-the-workers-resizes-them",
        {"minReplicas": 1, "maxReplicas": 3},
        3,
        {"minReplicas": 1, "maxReplicas": 3},
        {"spec.elasticPolicy.maxReplicas"},
    ),
    (
        "etcd-rendezvous-is-noted",
        {"maxReplicas": 2, "rdzvBackend": "etcd", "rdzvHost": "etcd", "rdzvPort": 2379},
        2,
        {"minReplicas": 2, "maxReplicas": 2},
        {
            "spec.elasticPolicy.rdzvBackend",
            "spec.elasticPolicy.rdzvHost",
            "spec.elasticPolicy.rdzvPort",
        },
    ),
    (
        "last-call-timeout-is-mapped",
        {
            "maxReplicas": 2,
            "rdzvConf": [
                {"key": "last_call_timeout", "value": "5"},
                {"key": "join_timeout", "value": "9"},
            ],
        },
        2,
        {"minReplicas": 2, "maxReplicas": 2, "rendezvousLastCallSeconds": 5},
        {"spec.elasticPolicy.rdzvConf[1]"},
    ),
    (
        "hpa-metrics-and-restarts-are-noted",
        {"maxReplicas": 2, "maxRestarts": 3, "metrics": [{"type": "Resource"}], "standalone": True},
        2,
        {"minReplicas": 2, "maxReplicas": 2},
        {
            "spec.elasticPolicy.maxRestarts",
            "spec.elasticPolicy.metrics",
            "spec.elasticPolicy.standalone",
        },
    ),
]


@pytest.mark.parametrize(
    ("policy", "workers", "want", "noted"), [pytest.param(*c[1:], id=c[0]) for c in ELASTIC_CASES]
)
def test_elastic_policy(
    policy: dict[str, Any], workers: int, want: dict[str, Any], noted: set[str]
) -> None:
    body = pytorchjob(spec__elasticPolicy=policy, spec__pytorchReplicaSpecs__Master=None)
    body["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 2
    job, notes = converted(body)
    assert job["spec"]["elastic"] == want
    assert job["spec"]["replicaSpecs"]["Worker"]["replicas"] == workers
    assert {p for p in notes if p.startswith("spec.elasticPolicy")} == noted
    assert check(job) == []


def test_a_min_above_max_is_refused_naming_the_field() -> None:
    (out,) = convert_documents(
        [pytorchjob(spec__elasticPolicy={"minReplicas": 4, "maxReplicas": 2})]
    )
    assert out.errors == ["spec.elasticPolicy.minReplicas: 4 exceeds maxReplicas (2)"]


def test_a_trainer_runtime_with_a_torch_elastic_policy() -> None:
    (out,) = convert_documents(load("runtime-torch-elastic.yaml"))
    assert out.errors == [] and out.job is not None
    spec = out.job["spec"]
    assert spec["elastic"] == {"minReplicas": 2, "maxReplicas": 4}
    assert spec["replicaSpecs"]["Worker"] == {
        "replicas": 4,
        "gpus": 8,
        "template": {"spec": {"containers": [{"name": "node"}]}},
    }
    assert spec["image"] == "nvcr.io/nvidia/pytorch:24.05-py3"
    assert {n.path for n in out.notes} == {"spec.mlPolicy.torch.elasticPolicy.maxRestarts"}


def test_a_trainjob_names_its_runtime_and_keeps_only_its_own_fields() -> None:
    out = convert_documents(load("trainjob-torch.yaml"))
    runtime, job = (o.job for o in out)
    assert runtime is not None and job is not None
    assert (
        runtime["kind"] == "ClusterTrainingRuntime"
        and runtime["metadata"]["name"] == "torch-distributed"
    )
    assert job["spec"]["runtimeRef"] == {
        "kind": "ClusterTrainingRuntime",
        "name": "torch-distributed",
    }
    assert "framework" not in job["spec"]  # the runtime's, not inlined
    (container,) = job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert container["name"] == "node"  # merges by name onto the runtime's trainer container


# --- every TrainingJob spec field has a decided conversion --------------------------------


def _model_of(ann: Any) -> tuple[Any, str]:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann, ""
    args = typing.get_args(ann)
    if typing.get_origin(ann) is dict:
        model, _ = _model_of(args[1])
        return (model, ".*") if model else (None, "")
    for a in args:
        model, suffix = _model_of(a)
        if model:
            return model, suffix
    return None, ""


def spec_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every field path of a spec model, nested models included ("*" for a map's values)."""
    out = []
    for name, f in model.model_fields.items():
        path = prefix + (f.alias or name)
        out.append(path)
        sub, suffix = _model_of(f.annotation)
        if sub is not None:
            out += spec_paths(sub, f"{path}{suffix}.")
    return out


def test_every_trainingjob_field_has_a_conversion_decided() -> None:
    fields = set(spec_paths(TrainingJobSpec))
    unknown = sorted(fields - set(SPEC_FIELDS))
    assert not unknown, (
        f"TrainingJob spec fields no converter knows about: {unknown}; say in "
        "trainop/convert/coverage.py SPEC_FIELDS which Kubeflow field fills each, or why none"
    )
    assert not sorted(set(SPEC_FIELDS) - fields), "coverage.py lists fields the API no longer has"

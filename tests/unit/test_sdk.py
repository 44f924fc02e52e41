"""The SDK's pure parts as named-case tables: a function packed into the TRAINOP_SDK_FUNC
payload and run back by trainop.launcher.sdkrun (trainop.sdk.functions), trainer
detection, the TrainingJob train() submits, a submitted job checked (trainop.sdk.jobs),
wait()'s verdicts and logs()'s choice of pod."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

import pytest

from tests.builders import job, pod, runtime
from trainop.api.trainingjob import TrainingJobSpec
from trainop.launcher import sdkrun
from trainop.sdk import jobs
from trainop.sdk.errors import FunctionError, InvalidJobError
from trainop.sdk.functions import LIGHTNING, TRANSFORMERS, detect_integrations, pack

# --- functions that travel (module level: inspect reads their source) ----------------------
GLOBAL_STEPS = 10


def plain(steps: int = 3, lr: float = 0.1) -> dict[str, Any]:
    import os

    return {"steps": steps, "lr": lr, "rank": os.environ.get("RANK", "")}


def decorated_target(x: int) -> int:
    return x * 2


def _identity(f: Any) -> Any:
    return f


@_identity
def decorated(x: int) -> int:
    return x + 1


def reads_global() -> int:
    return GLOBAL_STEPS


def with_kwargs(**options: Any) -> dict[str, Any]:
    return options


def nested_ok() -> int:
    def inner(v: int) -> int:
        return v + 1

    try:
        total = sum(inner(i) for i in range(3))
    except ValueError as err:
        raise RuntimeError(err) from err
    return total


def make_closure() -> Any:
    captured = 3

    def closure() -> int:
        return captured

    return closure


async def coroutine() -> None:
    return None


def hf_trainer() -> None:
    from transformers import Trainer, TrainingArguments

    Trainer(args=TrainingArguments("out")).train()


def trl_trainer() -> None:
    from trl import SFTTrainer

    SFTTrainer().train()


def hf_module_attr() -> None:
    import transformers

    transformers.Trainer().train()


def hf_without_trainer() -> None:
    from transformers import AutoModel

    AutoModel.from_pretrained("x")


def pl_trainer() -> None:
    import lightning as L

    L.Trainer(max_steps=10).fit(None)


def pl_old_trainer() -> None:
    from pytorch_lightning import Trainer

    Trainer().fit(None)


def both_trainers() -> None:
    from lightning.pytorch import Trainer as PLTrainer
    from transformers import Trainer

    PLTrainer(), Trainer()


# --- pack: what cannot travel, refused with the field named ---------------------------------
@dataclass(frozen=True)
class BadFunction:
    name: str
    func: Any
    args: dict[str, Any] | None
    field: str
    message: str


BAD_FUNCTIONS = [
    BadFunction("a lambda", lambda: 1, None, "func", "must be a function defined with def"),
    BadFunction("a builtin", print, None, "func", "must be a function defined with def"),
    BadFunction("a closure", make_closure(), None, "func", "enclosing function (captured)"),
    BadFunction("an async def", coroutine, None, "func", "is async"),
    BadFunction("a module global", reads_global, None, "func", "outside it (GLOBAL_STEPS)"),
    BadFunction("args not JSON", plain, {"steps": object()}, "args.steps", "must be JSON"),
    BadFunction(
        "an argument it lacks", plain, {"epochs": 1}, "args.epochs", "no argument 'epochs'"
    ),
    BadFunction(
        "too big for the env",
        with_kwargs,
        {"blob": os.urandom(80_000).hex()},
        "func",
        "over the 98304",
    ),
]


@pytest.mark.parametrize("case", BAD_FUNCTIONS, ids=[c.name for c in BAD_FUNCTIONS])
def test_what_cannot_travel_is_refused_naming_it(case: BadFunction) -> None:
    with pytest.raises(FunctionError, match=re.escape(case.message)) as err:
        pack(case.func, case.args)
    assert err.value.field == case.field


GOOD_FUNCTIONS = [
    ("defaults", plain, None, {"steps": 3, "lr": 0.1, "rank": "7"}),
    ("arguments", plain, {"steps": 5}, {"steps": 5, "lr": 0.1, "rank": "7"}),
    ("a decorator is dropped", decorated, {"x": 1}, 2),
    ("**kwargs takes any argument", with_kwargs, {"a": [1, 2]}, {"a": [1, 2]}),
    ("nested defs, comprehensions, except names", nested_ok, None, 6),
]


@pytest.mark.parametrize(
    ("name", "func", "args", "want"), GOOD_FUNCTIONS, ids=[c[0] for c in GOOD_FUNCTIONS]
)
def test_a_packed_function_runs_back_in_the_runner(
    name: str, func: Any, args: Any, want: Any
) -> None:
    packed = pack(func, args)
    os.environ["RANK"] = "7"
    try:
        assert sdkrun.run({sdkrun.PAYLOAD_ENV: packed.payload}) == want
    finally:
        del os.environ["RANK"]


def test_the_runner_refuses_what_is_not_a_payload() -> None:
    with pytest.raises(sdkrun.PayloadError, match="is empty"):
        sdkrun.decode_payload("")
    with pytest.raises(sdkrun.PayloadError, match="not a train\\(\\) payload"):
        sdkrun.decode_payload("%%%")
    body = sdkrun.decode_payload(sdkrun.encode_payload("f", "def g(): pass", {}))
    with pytest.raises(sdkrun.PayloadError, match="defines no function 'f'"):
        sdkrun.load_function(body)


def test_an_integration_missing_in_the_image_costs_a_line_not_the_run() -> None:
    said: list[str] = []
    assert sdkrun.install_integrations(["nosuchtrainer"], say=said.append) == []
    assert "nosuchtrainer integration not installed" in said[0]


# --- trainer detection ------------------------------------------------------------------------
DETECTIONS = [
    ("no trainer", plain, ()),
    ("transformers' Trainer", hf_trainer, (TRANSFORMERS,)),
    ("trl's SFTTrainer subclasses it", trl_trainer, (TRANSFORMERS,)),
    ("transformers.Trainer as an attribute", hf_module_attr, (TRANSFORMERS,)),
    ("transformers without a Trainer", hf_without_trainer, ()),
    ("lightning's Trainer", pl_trainer, (LIGHTNING,)),
    ("pytorch_lightning's Trainer", pl_old_trainer, (LIGHTNING,)),
    ("both", both_trainers, (TRANSFORMERS, LIGHTNING)),
]


@pytest.mark.parametrize(("name", "func", "want"), DETECTIONS, ids=[c[0] for c in DETECTIONS])
def test_train_detects_the_trainer_from_the_source(
    name: str, func: Any, want: tuple[str, ...]
) -> None:
    assert pack(func).integrations == want
    assert detect_integrations(pack(func).source) == want


# --- the TrainingJob train() submits ----------------------------------------------------------
def _container(body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = body["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][
        0
    ]
    return out


def _env(body: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in _container(body)["env"]}


def _train(func: Any = plain, **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "name": "mnist",
        "namespace": "team",
        "runtime": None,
        "num_nodes": 2,
        "gpus_per_node": 8,
    }
    args.update(kw)
    return jobs.train_job(pack(func), **args)


@dataclass(frozen=True)
class BodyCase:
    name: str
    kwargs: dict[str, Any]
    check: Any
    want: Any


BODY_CASES = [
    BodyCase(
        "no runtime: a pytorch job of its own",
        {},
        lambda b: (b["spec"]["framework"], "runtimeRef" in b["spec"]),
        ({"name": "pytorch"}, False),
    ),
    BodyCase(
        "the gang's shape",
        {},
        lambda b: {k: v for k, v in b["spec"]["replicaSpecs"]["Worker"].items() if k != "template"},
        {"replicas": 2, "gpus": 8},
    ),
    BodyCase(
        "the runner under trainop-launch and torchrun",
        {},
        lambda b: _container(b)["command"],
        ["trainop-launch", "--", "torchrun", "-m", "trainop.launcher.sdkrun"],
    ),
    BodyCase(
        "packages are installed first",
        {"packages": ["datasets>=3", "x y"]},
        lambda b: _container(b)["command"][-1],
        "python3 -m pip install --quiet --no-warn-script-location 'datasets>=3' 'x y' && exec trainop-launch -- torchrun -m trainop.launcher.sdkrun",
    ),
    BodyCase(
        "a cluster runtime giving the framework",
        {
            "runtime": {"kind": "ClusterTrainingRuntime", "name": "torch"},
            "runtime_spec": runtime("torch").framework("pytorch", "2.4").build()["spec"],
        },
        lambda b: (b["spec"]["runtimeRef"], "framework" in b["spec"]),
        ({"kind": "ClusterTrainingRuntime", "name": "torch"}, False),
    ),
    BodyCase(
        "a runtime without a framework: the job says pytorch",
        {"runtime": {"kind": "TrainingRuntime", "name": "r"}, "runtime_spec": {}},
        lambda b: b["spec"]["framework"],
        {"name": "pytorch"},
    ),
    BodyCase(
        "the runtime's container name, so the merge lays over it",
        {
            "runtime": {"kind": "ClusterTrainingRuntime", "name": "torch"},
            "runtime_spec": runtime("torch")
            .role("Worker", template={"spec": {"containers": [{"name": "pytorch", "image": "x"}]}})
            .build()["spec"],
        },
        lambda b: _container(b)["name"],
        "pytorch",
    ),
    BodyCase("queue", {"queue": "nlp"}, lambda b: b["spec"]["queue"], "nlp"),
    BodyCase(
        "env, unbuffered output, the payload last",
        {"env": {"HF_HOME": "/cache"}},
        lambda b: list(_env(b))[:2] + list(_env(b))[-1:],
        ["PYTHONUNBUFFERED", "HF_HOME", "TRAINOP_SDK_FUNC"],
    ),
    BodyCase(
        "a Hugging Face function silences KubeflowCallback",
        {"func": hf_trainer},
        lambda b: _env(b).get("DISABLE_KUBEFLOW_INTEGRATION"),
        "true",
    ),
    BodyCase(
        "other functions leave it alone",
        {},
        lambda b: _env(b).get("DISABLE_KUBEFLOW_INTEGRATION"),
        None,
    ),
    BodyCase(
        "the function is named on the job",
        {},
        lambda b: b["metadata"]["annotations"],
        {"trainop.dev/sdk-function": "plain"},
    ),
]


@pytest.mark.parametrize("case", BODY_CASES, ids=[c.name for c in BODY_CASES])
def test_the_job_train_submits(case: BodyCase) -> None:
    kwargs = dict(case.kwargs)
    body = _train(kwargs.pop("func", plain), **kwargs)
    assert case.check(body) == case.want
    jobs.check_spec(body["spec"])  # every body is a valid TrainingJob spec


BAD_TRAIN = [
    ("no nodes", {"num_nodes": 0}, "num_nodes"),
    ("negative gpus", {"gpus_per_node": -1}, "gpus_per_node"),
    ("bool nodes", {"num_nodes": True}, "num_nodes"),
    ("a name that is no DNS label", {"name": "My_Job"}, "name"),
    ("the payload's variable", {"env": {"TRAINOP_SDK_FUNC": "x"}}, "env.TRAINOP_SDK_FUNC"),
    ("an env value not a string", {"env": {"N": 1}}, "env.N"),
    ("an env name", {"env": {"1BAD": "x"}}, "env.1BAD"),
    ("an option as a package", {"packages": ["--index-url=http://x"]}, "packages"),
    (
        "a jax runtime",
        {
            "runtime": {"kind": "ClusterTrainingRuntime", "name": "jx"},
            "runtime_spec": {"framework": {"name": "jax"}},
        },
        "runtime",
    ),
]


@pytest.mark.parametrize(("name", "kwargs", "field"), BAD_TRAIN, ids=[c[0] for c in BAD_TRAIN])
def test_bad_train_arguments_name_the_argument(
    name: str, kwargs: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidJobError) as err:
        _train(**kwargs)
    assert err.value.field == field


RUNTIME_REFS = [
    (
        "a bare name is a ClusterTrainingRuntime",
        "torch",
        {"kind": "ClusterTrainingRuntime", "name": "torch"},
    ),
    ("Kind/name", "TrainingRuntime/mine", {"kind": "TrainingRuntime", "name": "mine"}),
    ("an unknown kind", "Runtime/x", "the kind must be one of"),
    ("no name", "TrainingRuntime/", "must name a runtime"),
]


@pytest.mark.parametrize(("name", "text", "want"), RUNTIME_REFS, ids=[c[0] for c in RUNTIME_REFS])
def test_runtime_refs(name: str, text: str, want: Any) -> None:
    if isinstance(want, dict):
        assert jobs.runtime_ref(text) == want
    else:
        with pytest.raises(InvalidJobError, match=want):
            jobs.runtime_ref(text)


def test_generated_names_are_dns_labels_short_enough_for_pod_hostnames() -> None:
    for fn in ("train", "Train_MNIST", "9lives", "x" * 80, "___"):
        name = jobs.job_name(fn, "ab1c2")
        assert jobs.check_name(name) == name and len(name) <= jobs.MAX_NAME


# --- submit(): a model, a dict or YAML, checked ----------------------------------------------
EXAMPLE = job("bert", namespace="team", workers=2, gpus=8).build()
YAML_JOB = """
apiVersion: trainop.dev/v1alpha1
kind: TrainingJob
metadata: {name: y}
spec:
  framework: {name: pytorch}
  replicaSpecs: {Worker: {replicas: 1, gpus: 1}}
"""

SUBMITTED = [
    ("a dict", EXAMPLE, ("team", "bert")),
    ("YAML text, namespace from the client", YAML_JOB, ("default", "y")),
    (
        "no apiVersion or kind: filled in",
        {"metadata": {"name": "z"}, "spec": EXAMPLE["spec"]},
        ("default", "z"),
    ),
    (
        "a runtime gives the framework",
        {"metadata": {"name": "r"}, "spec": {"runtimeRef": {"name": "torch"}}},
        ("default", "r"),
    ),
    (
        "a job read back: server fields and status dropped",
        {
            **EXAMPLE,
            "metadata": {**EXAMPLE["metadata"], "resourceVersion": "7", "uid": "u"},
            "status": {"phase": "Running"},
        },
        ("team", "bert"),
    ),
]


@pytest.mark.parametrize(("name", "given", "want"), SUBMITTED, ids=[c[0] for c in SUBMITTED])
def test_submit_takes_dicts_and_yaml(name: str, given: Any, want: tuple[str, str]) -> None:
    body = jobs.coerce_job(given, "default")
    assert (body["metadata"]["namespace"], body["metadata"]["name"]) == want
    assert not set(body["metadata"]) & set(jobs.SERVER_SET) and "status" not in body


BAD_SUBMITTED = [
    ("not a job", 42, "job"),
    ("YAML that is not", "a: [", "job"),
    ("no name", {"spec": EXAMPLE["spec"]}, "metadata.name"),
    ("another kind", {"kind": "PyTorchJob", "metadata": {"name": "p"}, "spec": {}}, "apiVersion"),
    ("no spec", {"metadata": {"name": "p"}}, "spec"),
    (
        "a bad field",
        {
            "metadata": {"name": "p"},
            "spec": {**EXAMPLE["spec"], "replicaSpecs": {"Worker": {"replicas": 0}}},
        },
        "spec.replicaSpecs.Worker.replicas",
    ),
    (
        "a misspelt key",
        {"metadata": {"name": "p"}, "spec": {**EXAMPLE["spec"], "queu": "x"}},
        "spec.queu",
    ),
    ("a spec model has no name", TrainingJobSpec.model_validate(EXAMPLE["spec"]), "metadata.name"),
]


@pytest.mark.parametrize(
    ("name", "given", "field"), BAD_SUBMITTED, ids=[c[0] for c in BAD_SUBMITTED]
)
def test_submit_refuses_naming_the_field(name: str, given: Any, field: str) -> None:
    with pytest.raises(InvalidJobError) as err:
        jobs.coerce_job(given, "default")
    assert err.value.field == field


# --- wait() and logs() decisions ----------------------------------------------------------------
def _phase(phase: str | None, **status: Any) -> dict[str, Any]:
    return {"status": {"phase": phase, **status}} if phase else {}


WAITS = [
    ("not yet seen", _phase(None), ("Succeeded",), None),
    ("queued", _phase("Queued"), ("Succeeded",), None),
    ("there", _phase("Succeeded"), ("Succeeded",), "done"),
    ("one of several", _phase("Running"), ("Running", "Succeeded"), "done"),
    ("failed", _phase("Failed"), ("Succeeded",), "ended"),
    ("invalid never runs", _phase("Invalid"), ("Running",), "ended"),
    ("succeeded when Running was asked", _phase("Succeeded"), ("Running",), "ended"),
]


@pytest.mark.parametrize(("name", "body", "until", "want"), WAITS, ids=[c[0] for c in WAITS])
def test_wait_verdicts(
    name: str, body: dict[str, Any], until: tuple[str, ...], want: str | None
) -> None:
    assert jobs.wait_verdict(body, until) == want


def test_until_names_phases_only() -> None:
    assert jobs.until_phases("Running") == ("Running",)
    with pytest.raises(InvalidJobError, match="'Done' is not a phase"):
        jobs.until_phases(["Done"])


def test_a_failure_message_comes_from_the_condition_or_last_failure() -> None:
    cond = {
        "type": "Failed",
        "status": "True",
        "reason": "BackoffLimitExceeded",
        "message": "3 restarts",
    }
    assert (
        jobs.failure_message(_phase("Failed", conditions=[cond]))
        == "BackoffLimitExceeded: 3 restarts"
    )
    assert jobs.failure_message(_phase("Failed", lastFailure={"message": "OOM"})) == "OOM"


def _worker(
    name: str, index: int, created: str, uid: str, deleting: bool = False
) -> dict[str, Any]:
    b = pod(name)
    if deleting:
        b.deleting()
    out = b.build()
    out["metadata"].update(creationTimestamp=created, uid=uid)
    return out


RANK_PODS = [
    (
        "rank 1 is worker 1",
        [_worker("j-worker-0", 0, "t1", "a"), _worker("j-worker-1", 1, "t1", "b")],
        1,
        "b",
    ),
    (
        "after a gang restart: the new pod",
        [
            _worker("j-worker-0", 0, "t1", "old", deleting=True),
            _worker("j-worker-0", 0, "t2", "new"),
        ],
        0,
        "new",
    ),
    (
        "two live pods of one rank: the newest",
        [_worker("j-worker-0", 0, "t1", "a"), _worker("j-worker-0", 0, "t3", "c")],
        0,
        "c",
    ),
    ("no pod of that rank", [_worker("j-worker-0", 0, "t1", "a")], 3, None),
]


@pytest.mark.parametrize(("name", "pods", "rank", "uid"), RANK_PODS, ids=[c[0] for c in RANK_PODS])
def test_logs_follow_the_rank_to_its_current_pod(
    name: str, pods: list[dict[str, Any]], rank: int, uid: str | None
) -> None:
    got = jobs.rank_pod(pods, rank)
    assert (got["metadata"]["uid"] if got else None) == uid


def test_the_rank_annotation_wins_over_the_index() -> None:
    p = pod("j-worker-0").rank(1).build()
    assert jobs.pod_rank(p) == 1
    p["metadata"]["annotations"].pop("trainop.dev/rank")
    assert jobs.pod_rank(p) == 0  # the worker's index when no rank is written

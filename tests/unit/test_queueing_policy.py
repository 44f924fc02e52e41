"""Tenant policy rules, queue resolution (explicit, default, built-in) and product groups."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.builders import A100, H100, JobBuilder, fleet_snapshot, job, queue
from trainop.api.trainingjob import TrainingJobSpec
from trainop.api.trainingqueue import TenantPolicy
from trainop.planner import OperatorConfig
from trainop.queueing import (
    BUILTIN_QUEUE,
    UNGROUPED,
    QueueConfigError,
    QueueError,
    QueueState,
    check_policy,
    group_key,
    group_of,
    job_policy,
    resolve_queue,
)

NGC = "nvcr.io/nvidia/pytorch:24.05-py3"
POD = "spec.replicaSpecs.Worker.template.spec"


def spec_of(job: JobBuilder) -> TrainingJobSpec:
    return TrainingJobSpec.model_validate(job.build()["spec"])


def template(pod_spec: dict[str, Any]) -> dict[str, Any]:
    return {"spec": pod_spec}


def container(**fields: Any) -> dict[str, Any]:
    return {"name": "trainer", **fields}


@dataclass
class PolicyCase:
    policy: dict[str, Any]
    job: JobBuilder
    fields: list[str]  # the fields the violations name, in order
    says: str = ""
    image: str | None = NGC
    cuda: tuple[int, ...] | None = (12, 4)
    extra: dict[str, Any] = field(default_factory=dict)


def base(replicas: int = 2, gpus: int = 8, tmpl: dict[str, Any] | None = None) -> JobBuilder:
    return job("j", namespace="team-a").workers(replicas, gpus, tmpl)


POLICY_CASES = {
    "nothing-to-say": PolicyCase({}, base(tmpl=template({"hostNetwork": False})), []),
    "image-prefix-of-resolved-image": PolicyCase(
        {"allowedImagePrefixes": ["registry.corp/"]},
        base(),
        ["spec.framework"],
        says="image nvcr.io/nvidia/pytorch:24.05-py3 (the image trainop chose for the "
        "framework) is not allowed by queue q: images must start with registry.corp/ "
        "(policy.allowedImagePrefixes)",
    ),
    "image-prefix-of-explicit-image": PolicyCase(
        {"allowedImagePrefixes": ["nvcr.io/nvidia/"]},
        base().set("image", "evil.io/x:1"),
        ["spec.image"],
        image="evil.io/x:1",
    ),
    "image-prefix-allowed": PolicyCase({"allowedImagePrefixes": ["nvcr.io/nvidia/"]}, base(), []),
    "image-in-pod-template": PolicyCase(
        {"allowedImagePrefixes": ["nvcr.io/nvidia/"]},
        base(tmpl=template({"containers": [container(image="evil.io/x:1")]})),
        [f"{POD}.containers[0].image"],
    ),
    "framework": PolicyCase(
        {"allowedFrameworks": ["jax"]},
        base(),
        ["spec.framework.name"],
        says="framework pytorch is not allowed by queue q: allowed are jax",
    ),
    "cuda-below-minimum": PolicyCase(
        {"cuda": {"min": "12.6"}},
        base(),
        ["spec.cuda"],
        says="CUDA 12.4 is below queue q's minimum 12.6",
    ),
    "cuda-above-maximum": PolicyCase(
        {"cuda": {"max": "12.2"}},
        base(),
        ["spec.cuda"],
        says="CUDA 12.4 is above queue q's maximum 12.2",
    ),
    "cuda-in-range": PolicyCase({"cuda": {"min": "12.0", "max": "12.4"}}, base(), []),
    "cuda-unknown": PolicyCase(
        {"cuda": {"min": "12.0"}},
        job("j", version=None, cuda=None).workers(1, 8),
        ["spec.cuda"],
        cuda=None,
        says="unknown",
    ),
    "max-gpus-per-job": PolicyCase(
        {"maxGpusPerJob": 8},
        base(),
        ["spec.replicaSpecs"],
        says="the job asks for 16 GPUs (Worker: 2 x 8); queue q allows at most 8 per job "
        "(policy.maxGpusPerJob)",
    ),
    "privileged": PolicyCase(
        {},
        base(tmpl=template({"containers": [container(securityContext={"privileged": True})]})),
        [f"{POD}.containers[0].securityContext.privileged"],
        says="queue q does not allow privileged containers (policy.allowPrivileged is false)",
    ),
    "privileged-init-container": PolicyCase(
        {},
        base(tmpl=template({"initContainers": [container(securityContext={"privileged": True})]})),
        [f"{POD}.initContainers[0].securityContext.privileged"],
    ),
    "privileged-allowed": PolicyCase(
        {"allowPrivileged": True},
        base(tmpl=template({"containers": [container(securityContext={"privileged": True})]})),
        [],
    ),
    "host-network": PolicyCase(
        {},
        base(tmpl=template({"hostNetwork": True})),
        [f"{POD}.hostNetwork"],
        says="policy.allowHostNetwork",
    ),
    "host-pid": PolicyCase({}, base(tmpl=template({"hostPID": True})), [f"{POD}.hostPID"]),
    "host-path": PolicyCase(
        {},
        base(
            tmpl=template(
                {
                    "volumes": [
                        {"name": "a", "emptyDir": {}},
                        {"name": "b", "hostPath": {"path": "/"}},
                    ]
                }
            )
        ),
        [f"{POD}.volumes[1].hostPath"],
        says="policy.allowHostPath",
    ),
    "host-path-allowed": PolicyCase(
        {"allowHostPath": True},
        base(tmpl=template({"volumes": [{"name": "b", "hostPath": {"path": "/"}}]})),
        [],
    ),
    "capability-beyond-allowed": PolicyCase(
        {"allowedCapabilities": ["SYS_PTRACE"]},
        base(
            tmpl=template(
                {
                    "containers": [
                        container(
                            securityContext={
                                "capabilities": {"add": ["IPC_LOCK", "CAP_SYS_PTRACE", "SYS_ADMIN"]}
                            }
                        )
                    ]
                }
            )
        ),
        [f"{POD}.containers[0].securityContext.capabilities.add"],
        says="does not allow adding SYS_ADMIN: allowed are IPC_LOCK, SYS_PTRACE",
    ),
    "ipc-lock-always-allowed": PolicyCase(
        {},
        base(
            tmpl=template(
                {"containers": [container(securityContext={"capabilities": {"add": ["IPC_LOCK"]}})]}
            )
        ),
        [],
    ),
    "every-rule-reported": PolicyCase(
        {"allowedFrameworks": ["jax"], "maxGpusPerJob": 8},
        base(tmpl=template({"hostNetwork": True, "hostPID": True})),
        ["spec.framework.name", "spec.replicaSpecs", f"{POD}.hostNetwork", f"{POD}.hostPID"],
    ),
    # issue 12: the remaining escalations, and registry boundaries
    "host-ipc": PolicyCase(
        {},
        base(tmpl=template({"hostIPC": True})),
        [f"{POD}.hostIPC"],
        says="policy.allowHostIPC is false",
    ),
    "host-ipc-allowed": PolicyCase(
        {"allowHostIPC": True}, base(tmpl=template({"hostIPC": True})), []
    ),
    "run-as-root-pod": PolicyCase(
        {},
        base(tmpl=template({"securityContext": {"runAsUser": 0}})),
        [f"{POD}.securityContext.runAsUser"],
        says="policy.allowRunAsRoot is false",
    ),
    "run-as-root-container": PolicyCase(
        {},
        base(tmpl=template({"containers": [container(securityContext={"runAsUser": 0})]})),
        [f"{POD}.containers[0].securityContext.runAsUser"],
    ),
    "run-as-root-allowed": PolicyCase(
        {"allowRunAsRoot": True},
        base(tmpl=template({"securityContext": {"runAsUser": 0}})),
        [],
    ),
    "run-as-non-root-fine": PolicyCase(
        {},
        base(
            tmpl=template(
                {
                    "securityContext": {"runAsUser": 1000},
                    "containers": [container(securityContext={"runAsUser": 1})],
                }
            )
        ),
        [],
    ),
    "registry-prefix-stops-at-the-host": PolicyCase(
        {"allowedImagePrefixes": ["nvcr.io"]},
        base().set("image", "nvcr.io.evil.com/x:1"),
        ["spec.image"],
        image="nvcr.io.evil.com/x:1",
    ),
    "registry-prefix-without-slash-still-matches-its-host": PolicyCase(
        {"allowedImagePrefixes": ["nvcr.io"]},
        base(),
        [],
    ),
    "repository-prefix-stops-at-the-name": PolicyCase(
        {"allowedImagePrefixes": ["nvcr.io/nvidia/pytorch"]},
        base(tmpl=template({"containers": [container(image="nvcr.io/nvidia/pytorch-evil:1")]})),
        [f"{POD}.containers[0].image"],
    ),
    "docker-hub-short-name-matches-its-full-form": PolicyCase(
        {"allowedImagePrefixes": ["docker.io/library/"]},
        base().set("image", "ubuntu:22.04"),
        [],
        image="ubuntu:22.04",
    ),
    "docker-hub-short-name-refused-elsewhere": PolicyCase(
        {"allowedImagePrefixes": ["nvcr.io/"]},
        base(tmpl=template({"containers": [container(image="ubuntu")]})),
        [f"{POD}.containers[0].image"],
    ),
    "every-escalation-at-once": PolicyCase(
        {},
        base(
            tmpl=template(
                {
                    "hostNetwork": True,
                    "hostPID": True,
                    "hostIPC": True,
                    "securityContext": {"runAsUser": 0},
                    "volumes": [{"name": "h", "hostPath": {"path": "/dev"}}],
                    "containers": [
                        container(
                            securityContext={
                                "privileged": True,
                                "capabilities": {"add": ["SYS_ADMIN"]},
                            }
                        )
                    ],
                }
            )
        ),
        [
            f"{POD}.hostNetwork",
            f"{POD}.hostPID",
            f"{POD}.hostIPC",
            f"{POD}.securityContext.runAsUser",
            f"{POD}.volumes[0].hostPath",
            f"{POD}.containers[0].securityContext.privileged",
            f"{POD}.containers[0].securityContext.capabilities.add",
        ],
    ),
    "runtime-any-when-no-list": PolicyCase({}, base().runtime_ref("pytorch"), []),
    "runtime-bare-name-is-a-cluster-runtime": PolicyCase(
        {"allowedRuntimes": ["pytorch"]}, base().runtime_ref("pytorch"), []
    ),
    "runtime-kind-and-name": PolicyCase(
        {"allowedRuntimes": ["TrainingRuntime/team"]},
        base().runtime_ref("team", "TrainingRuntime"),
        [],
    ),
    "runtime-bare-name-is-not-a-namespaced-runtime": PolicyCase(
        {"allowedRuntimes": ["team"]},
        base().runtime_ref("team", "TrainingRuntime"),
        ["spec.runtimeRef"],
        says="TrainingRuntime team is not allowed by queue q: allowed are team",
    ),
    "runtime-not-on-the-list": PolicyCase(
        {"allowedRuntimes": ["ClusterTrainingRuntime/pytorch"]},
        base().runtime_ref("jax"),
        ["spec.runtimeRef"],
        says="(policy.allowedRuntimes)",
    ),
    "runtime-list-allows-jobs-without-one": PolicyCase(
        {"allowedRuntimes": ["pytorch"]}, base(), []
    ),
    "runtime-required": PolicyCase(
        {"requireRuntime": True},
        base(),
        ["spec.runtimeRef"],
        says="requires jobs to name a runtime (policy.requireRuntime)",
    ),
    "runtime-required-and-named": PolicyCase(
        {"requireRuntime": True, "allowedRuntimes": ["pytorch"]},
        base().runtime_ref("pytorch"),
        [],
    ),
}


@pytest.mark.parametrize("case", list(POLICY_CASES.values()), ids=list(POLICY_CASES))
def test_policy(case: PolicyCase) -> None:
    policy = TenantPolicy.model_validate(case.policy)
    got = check_policy(spec_of(case.job), policy, queue="q", image=case.image, cuda=case.cuda)
    assert [v.field for v in got] == case.fields
    if case.says:
        assert case.says in " ".join(str(v) for v in got)
    for v in got:
        assert str(v).startswith(f"{v.field}: ")


def test_max_running_jobs_is_not_a_violation() -> None:
    policy = TenantPolicy.model_validate({"maxRunningJobs": 1})
    assert check_policy(spec_of(base()), policy, queue="q", image=NGC) == ()


def test_job_policy_checks_the_image_the_planner_picks() -> None:
    queue = QueueState.from_resource(
        {
            "metadata": {"name": "nlp"},
            "spec": {"quotas": [{"gpus": 8}], "policy": {"allowedImagePrefixes": ["docker.io/"]}},
        }
    )
    got = job_policy(spec_of(base()), queue, fleet_snapshot(), OperatorConfig())
    assert [v.field for v in got] == ["spec.framework"]
    assert "nvcr.io/nvidia/pytorch:" in got[0].message
    assert job_policy(spec_of(base()), BUILTIN_QUEUE, fleet_snapshot(), OperatorConfig()) == ()


# --- queue resolution ----------------------------------------------------------------------------
NLP = queue("nlp").serves("team-nlp", default=True).state()
NLP_EXTRA = queue("nlp-extra").serves("team-nlp").state()
ZED = queue("zed").serves("team-nlp", default=True).state()
BY_LABEL = queue("labelled").selector(tier="gold").default().state()


@dataclass
class ResolveCase:
    queues: list[QueueState]
    namespace: str
    requested: str | None
    want: str | None  # the queue name, or None for QueueError
    labels: dict[str, str] = field(default_factory=dict)
    says: str = ""


RESOLVE_CASES = {
    "explicit-queue-serving-namespace": ResolveCase(
        [NLP, NLP_EXTRA], "team-nlp", "nlp-extra", "nlp-extra"
    ),
    "explicit-queue-not-serving": ResolveCase(
        [NLP],
        "team-cv",
        "nlp",
        None,
        says="spec.queue: TrainingQueue nlp does not serve namespace team-cv",
    ),
    "explicit-queue-missing": ResolveCase(
        [NLP], "team-nlp", "gone", None, says="'gone' does not exist (queues serving team-nlp: nlp)"
    ),
    "namespace-default": ResolveCase([NLP_EXTRA, NLP], "team-nlp", None, "nlp"),
    "first-default-by-name": ResolveCase([ZED, NLP], "team-nlp", None, "nlp"),
    "default-of-other-namespace-ignored": ResolveCase([NLP], "team-cv", None, "(built-in)"),
    "no-queues-at-all": ResolveCase([], "team-cv", None, "(built-in)"),
    "selector-matches-labels": ResolveCase(
        [BY_LABEL], "team-x", None, "labelled", labels={"tier": "gold", "x": "y"}
    ),
    "selector-does-not-match": ResolveCase(
        [BY_LABEL], "team-x", None, "(built-in)", labels={"tier": "silver"}
    ),
    "explicit-queue-by-selector": ResolveCase(
        [BY_LABEL], "team-x", "labelled", "labelled", labels={"tier": "gold"}
    ),
}


@pytest.mark.parametrize("case", list(RESOLVE_CASES.values()), ids=list(RESOLVE_CASES))
def test_resolve_queue(case: ResolveCase) -> None:
    if case.want is None:
        with pytest.raises(QueueError) as err:
            resolve_queue(case.namespace, case.requested, case.queues, case.labels)
        assert err.value.field == "spec.queue" and err.value.reason == "Policy"
        assert case.says in str(err.value)
    else:
        got = resolve_queue(case.namespace, case.requested, case.queues, case.labels)
        assert got.name == case.want


def test_builtin_queue_admits_on_fit_only() -> None:
    assert BUILTIN_QUEUE.unlimited and BUILTIN_QUEUE.within_queue == "Never"
    assert not BUILTIN_QUEUE.reclaim_within_cohort and BUILTIN_QUEUE.policy == TenantPolicy()


# --- product groups and TrainingQueue parsing -----------------------------------------------------
def test_group_key_defaults() -> None:
    assert group_key("h100", (H100,)) == "h100"
    assert group_key(None, (H100,)) == "h100-80gb-hbm3"
    assert group_key(None, (H100, A100)) == "h100-80gb-hbm3+a100-sxm4-80gb"
    assert group_key(None, ()) == "any"


@pytest.mark.parametrize(
    ("queue", "product", "group"),
    [
        (queue("q").quota("h100", 8, H100).quota("rest", 8).state(), H100, "h100"),
        (queue("q").quota("h100", 8, H100).quota("rest", 8).state(), A100, "rest"),
        (queue("q").quota("h100", 8, H100).state(), A100, UNGROUPED),
        (queue("q").quota("gpus", 8, H100, A100).state(), A100, "gpus"),
    ],
    ids=["named-product", "any-group", "no-group", "multi-product-group"],
)
def test_group_of(queue: QueueState, product: str, group: str) -> None:
    assert group_of(queue, product) == group


def queue_obj(**spec: Any) -> dict[str, Any]:
    """TrainingQueue q with these spec fields, as they are (valid or not)."""
    builder = queue("q")
    for key, value in spec.items():
        builder.set(key, value)
    return builder.build()


def test_queue_state_from_resource() -> None:
    q = QueueState.from_resource(
        queue_obj(
            namespaces=["a"],
            namespaceSelector={"matchLabels": {"t": "1"}},
            default=True,
            cohort="pool",
            weight=2,
            backfillWaitSeconds=60,
            preemption={"reclaimWithinCohort": False, "withinQueue": "Never"},
            quotas=[
                {"name": "h100", "products": [H100], "gpus": 16, "borrowingLimit": 4},
                {"gpus": 8},
            ],
            policy={"maxRunningJobs": 3},
        )
    )
    assert [(g.name, g.products, g.nominal, g.borrowing_limit) for g in q.groups] == [
        ("h100", (H100,), 16, 4),
        ("any", (), 8, None),
    ]
    assert (q.cohort, q.weight, q.backfill_wait_seconds, q.max_running_jobs) == ("pool", 2, 60, 3)
    assert (q.reclaim_within_cohort, q.within_queue, q.unlimited) == (False, "Never", False)
    assert (q.namespaces, q.namespace_selector, q.default) == (("a",), (("t", "1"),), True)
    assert QueueState.from_resource(queue_obj()).unlimited


@pytest.mark.parametrize(
    ("spec", "field", "says"),
    [
        (
            {"quotas": [{"name": "x", "gpus": 1}, {"name": "x", "gpus": 1}]},
            "spec.quotas[1].name",
            "two quotas are called 'x'",
        ),
        (
            {"quotas": [{"gpus": 1}, {"name": "y", "gpus": 1}]},
            "spec.quotas[1].products",
            "only one quota may leave products empty",
        ),
        (
            {
                "quotas": [
                    {"products": [H100], "gpus": 1},
                    {"name": "b", "products": [H100], "gpus": 1},
                ]
            },
            "spec.quotas[1].products",
            "already in spec.quotas[0]",
        ),
        ({"weight": 0}, "spec.weight", "greater than 0"),
        ({"quotas": [{"gpus": -1}]}, "spec.quotas.0.gpus", "greater than or equal to 0"),
    ],
    ids=["duplicate-name", "two-any-groups", "product-in-two-groups", "weight", "negative-gpus"],
)
def test_queue_state_errors(spec: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(QueueConfigError) as err:
        QueueState.from_resource(queue_obj(**spec))
    assert err.value.field == field
    assert says in err.value.detail

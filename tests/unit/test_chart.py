"""The Helm chart's values schema, rendered templates, operator config, dashboard and alerts,
checked without a cluster (templates are rendered by the helm binary `make build-binaries`
builds; those tests skip, saying so, where it is not built yet)."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from tests.observability import (
    dashboard_queries,
    dashboard_variables,
    exposed_names,
    grafana_expr,
    metric_names,
)
from trainop import metrics
from trainop.cluster.binaries import COMPONENTS, BuildError, resolve_binaries
from trainop.config import operator_config_from_data

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "trainop"
DASHBOARD = CHART / "dashboards" / "trainop.json"
RULES_TEMPLATE = CHART / "templates" / "prometheusrule.yaml"
ALL_VALUES = ROOT / "tests" / "integration" / "chart-values-all.yaml"


def _load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Helm's coalescing of user values over the chart's: maps merge, the rest replaces."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return dict(json.loads((CHART / "values.schema.json").read_text()))


@pytest.fixture(scope="module")
def defaults() -> dict[str, Any]:
    return dict(_load_yaml(CHART / "values.yaml"))


@pytest.fixture(scope="module")
def exposed() -> set[str]:
    """Every series name trainop's /metrics can show, from the metric objects themselves."""
    families = [
        (fam.name, fam.type)
        for obj in vars(metrics).values()
        if isinstance(obj, MetricWrapperBase | metrics.JobsCollector)
        for fam in obj.describe()
    ]
    assert len(families) >= 9, families
    return exposed_names(families)


# --- values.schema.json -------------------------------------------------------------------


def test_values_schema_is_valid_draft7(schema: dict[str, Any]) -> None:
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(schema)


def test_default_values_validate(schema: dict[str, Any], defaults: dict[str, Any]) -> None:
    errors = [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(defaults)]
    assert errors == []


def test_all_features_values_validate(schema: dict[str, Any], defaults: dict[str, Any]) -> None:
    values = _merged(defaults, _load_yaml(ALL_VALUES))
    errors = [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(values)]
    assert errors == []


def _schema_paths(node: dict[str, Any], path: str = "") -> set[str]:
    out = {path} if path else set()
    for key, sub in (node.get("properties") or {}).items():
        out |= _schema_paths(sub, f"{path}.{key}" if path else key)
    return out


def _value_paths(value: Any, path: str = "") -> set[str]:
    out = {path} if path else set()
    if isinstance(value, dict) and value:
        for key, sub in value.items():
            out |= _value_paths(sub, f"{path}.{key}" if path else key)
    return out


# Free-form maps whose keys are the user's (labels, resources of a catalog, ...).
_FREE_FORM = (
    "operator.config.catalogOverrides.",
    "dashboard.labels.",
    "resources.",
)


def test_schema_declares_every_default_value(
    schema: dict[str, Any], defaults: dict[str, Any]
) -> None:
    declared = _schema_paths(schema)
    undeclared = sorted(
        p for p in _value_paths(defaults) if p not in declared and not p.startswith(_FREE_FORM)
    )
    assert undeclared == []


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        pytest.param(
            ("operator", "metricsPort"), "http", "is not of type 'integer'", id="port-type"
        ),
        pytest.param(
            ("operator", "healthPort"), 70000, "is greater than the maximum", id="port-range"
        ),
        pytest.param(("image", "pullPolicy"), "Sometimes", "is not one of", id="pull-policy"),
        pytest.param(("image", "digest"), "latest", "does not match", id="digest"),
        pytest.param(
            ("operator", "config", "topologyLevels"), [], "should be non-empty", id="no-levels"
        ),
        pytest.param(
            ("operator", "config", "topologyLevel"),
            ["x"],
            "Additional properties",
            id="config-typo",
        ),
        pytest.param(
            ("operator", "config", "migration"),
            {"enabled": True, "maxInFlight": 0},
            "less than the minimum",
            id="migration-in-flight",
        ),
        pytest.param(
            ("operator", "config", "migration"),
            {"enable": True},
            "Additional properties",
            id="migration-typo",
        ),
        pytest.param(
            ("operator", "config", "restartBackoffSeconds"),
            5,
            "Additional properties",
            id="backoff-is-a-flag",
        ),
        pytest.param(
            ("operator", "config", "fabricProfiles"),
            [{"name": "p", "spec": {"fabric": "Ethernet"}}],
            "",
            id="bad-fabric",
        ),
        pytest.param(
            ("operator", "config", "fabricProfiles"),
            [{"name": "p", "spec": {}}],
            "",
            id="no-fabric",
        ),
        pytest.param(
            ("operator", "watchNamespaces"), ["Team_A"], "does not match", id="bad-namespace"
        ),
        pytest.param(
            ("metrics", "serviceMonitor", "interval"), "30 seconds", "does not match", id="duration"
        ),
        pytest.param(
            ("metrics", "prometheusRule", "reconcileErrors", "ratePerSecond"),
            -1,
            "less than the minimum",
            id="negative-rate",
        ),
        pytest.param(
            ("dashboard", "labels"),
            {"grafana_dashboard": 1},
            "is not of type 'string'",
            id="label-not-string",
        ),
        pytest.param(("replicaCount",), 2, "Additional properties", id="no-replicas"),
        pytest.param(("fleetSize",), "huge", "is not one of", id="fleet-size"),
        pytest.param(("fleetSize",), 3000, "is not one of", id="fleet-size-number"),
        pytest.param(("podAntiAffinity", "mode"), "maybe", "is not one of", id="anti-affinity"),
        pytest.param(
            ("operator", "leaderElection", "leaseDurationSeconds"),
            0,
            "less than the minimum",
            id="lease-duration",
        ),
        pytest.param(
            ("operator", "leaderElection", "retryPeriodSeconds"),
            0,
            "less than or equal to the minimum",
            id="retry-period",
        ),
        pytest.param(("operator", "kubeApi", "burst"), 0, "less than the minimum", id="burst"),
        pytest.param(("operator", "kubeApi", "qps"), "fast", "is not of type", id="qps"),
        pytest.param(("podDisruptionBudget", "minAvailable"), "half", "is not valid", id="pdb-min"),
        pytest.param(
            ("securityContext", "capabilities", "drop"), "ALL", "is not of type", id="caps"
        ),
    ],
)
def test_schema_rejects_bad_values(
    schema: dict[str, Any],
    defaults: dict[str, Any],
    path: tuple[str, ...],
    value: Any,
    message: str,
) -> None:
    values = copy.deepcopy(defaults)
    node = values
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    errors = [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(values)]
    assert errors, f"{'.'.join(path)}={value!r} should be rejected"
    assert any(message in e for e in errors), errors


# --- the operator config the chart renders --------------------------------------------------

# Operator config keys the chart sets from values of its own (flags and the progress block).
_FROM_OTHER_VALUES = {"restartBackoffSeconds", "restartBackoffMaxSeconds", "progress"}


def test_every_operator_config_key_can_be_set_through_the_chart(schema: dict[str, Any]) -> None:
    """A key trainop.config knows but the schema lacks could not be set with helm at all
    (the schema refuses additional properties): migration was such a key."""
    from trainop.config import _KEYS

    declared = set(schema["properties"]["operator"]["properties"]["config"]["properties"])
    assert set(_KEYS) - _FROM_OTHER_VALUES <= declared, set(_KEYS) - _FROM_OTHER_VALUES - declared
    assert declared <= set(_KEYS), declared - set(_KEYS)


@pytest.mark.parametrize("values_file", [None, ALL_VALUES], ids=["default", "all-features"])
def test_operator_config_values_load(defaults: dict[str, Any], values_file: Path | None) -> None:
    values = _merged(defaults, _load_yaml(values_file)) if values_file else defaults
    config = operator_config_from_data(values["operator"]["config"])
    assert config.topology_levels == tuple(values["operator"]["config"]["topologyLevels"])
    if values_file:
        assert [p.name for p in config.fabric_profiles] == ["t4-tcp", "h100-roce"]
        spec = config.catalog.image_spec("pytorch")
        assert spec is not None and spec.repository == "registry.example.com/nvidia/pytorch"
        assert config.kubeflow_trainer_status is False
        assert config.migration.enabled and config.migration.consolidate
        assert (config.migration.gain_multiple, config.migration.max_in_flight) == (3.0, 2)
    else:
        assert not config.migration.enabled and config.kubeflow_trainer_status


# --- dashboard and alerts -------------------------------------------------------------------


def test_dashboard_is_grafana_shaped() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "trainop" and dash["title"] == "trainop"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    names = [v["name"] for v in dash["templating"]["list"]]
    assert names[0] == "datasource"
    for panel in dash["panels"]:
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]


def test_every_dashboard_metric_exists(exposed: set[str]) -> None:
    queries = dashboard_queries(DASHBOARD)
    assert len(queries) >= 15
    for title, expr in queries:
        names = metric_names(expr)
        assert names or "up{" in expr, f"{title}: {expr} names no metric"
        assert names <= exposed, f"{title}: {sorted(names - exposed)} not in trainop.metrics"


def test_dashboard_variables_resolve(exposed: set[str]) -> None:
    for title, expr in dashboard_queries(DASHBOARD):
        resolved = grafana_expr(expr)
        assert "$" not in resolved, f"{title}: {resolved}"
    variables = dashboard_variables(DASHBOARD)
    assert [name for name, _ in variables] == ["queue"]
    for name, query in variables:
        m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", query)
        assert m, f"${name}: {query}"
        assert m.group(1) in exposed


@pytest.mark.parametrize(
    "metric",
    [
        "trainop_queue_gpus",
        "trainop_admission_wait_seconds_bucket",
        "trainop_jobs",
        "trainop_reconcile_duration_seconds_bucket",
        "trainop_reconcile_errors_total",
        "trainop_gang_restarts_total",
        "trainop_placement_span_bucket",
        "trainop_job_time_to_running_seconds_bucket",
        "trainop_preemptions_total",
        "trainop_leader",
        "trainop_job_step_seconds",
        "trainop_job_throughput",
        "trainop_job_degraded",
        "trainop_checkpoint_wait_seconds_bucket",
    ],
)
def test_dashboard_shows(metric: str) -> None:
    used = set().union(*(metric_names(e) for _, e in dashboard_queries(DASHBOARD)))
    assert metric in used


def test_every_alert_metric_exists(exposed: set[str]) -> None:
    text = RULES_TEMPLATE.read_text()
    alerts = re.findall(r"- alert: (\w+)", text)
    assert alerts == [
        "TrainOpJobsPendingTooLong",
        "TrainOpReconcileErrors",
        "TrainOpOperatorAbsent",
        "TrainOpNoLeader",
    ]
    names = metric_names(text)
    assert {
        "trainop_leader",
        "trainop_jobs",
        "trainop_admission_wait_seconds_count",
        "trainop_admission_wait_seconds_bucket",
        "trainop_reconcile_errors_total",
    } <= names
    assert names <= exposed, sorted(names - exposed)
    assert "absent(up{job=~" in text


def test_metric_names_and_exposed_names() -> None:
    assert metric_names('rate(trainop_x_total{a="trainop_not"}[5m]) / $trainop_var') == {
        "trainop_x_total"
    }
    assert exposed_names([("trainop_e", "counter"), ("trainop_h", "histogram")]) >= {
        "trainop_e_total",
        "trainop_h_bucket",
        "trainop_h_count",
        "trainop_h_sum",
    }
    assert grafana_expr('rate(x{q=~"$queue"}[$__rate_interval])', {"queue": "a|b"}) == (
        'rate(x{q=~"a|b"}[1m])'
    )
    with pytest.raises(KeyError, match="nope"):
        grafana_expr('x{a="${nope}"}')


# --- rendered templates (helm template) -----------------------------------------------------


@pytest.fixture(scope="module")
def helm() -> str:
    try:
        only_helm = tuple(c for c in COMPONENTS if c.name == "helm")
        return str(resolve_binaries(build=False, components=only_helm)["helm"])
    except BuildError as exc:
        pytest.skip(f"helm is not built ({exc}); `make build-binaries` builds it")


def _render(helm: str, *sets: str, values: Path | None = None) -> list[dict[str, Any]]:
    """`helm template` of the chart in namespace trainop-system; --set NAME=VALUE per `sets`."""
    args = [helm, "template", "trainop", str(CHART), "--namespace", "trainop-system"]
    if values is not None:
        args += ["--values", str(values)]
    for item in sets:
        args += ["--set", item]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _render_error(helm: str, *sets: str) -> str:
    args = [helm, "template", "trainop", str(CHART)]
    for item in sets:
        args += ["--set", item]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0, f"{sets} should not render"
    return proc.stderr


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    hits = [d for d in docs if d["kind"] == kind]
    assert len(hits) == 1, f"{len(hits)} {kind}"
    return hits[0]


def _pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    pod: dict[str, Any] = _one(docs, "Deployment")["spec"]["template"]["spec"]
    return pod


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What in a pod spec breaks the restricted Pod Security Standard (the controls that a
    controller's pod can get wrong), https://kubernetes.io/docs/concepts/security/pod-security-standards/#restricted."""
    out = []
    psc = pod.get("securityContext") or {}
    for c in pod["containers"]:
        sc = c.get("securityContext") or {}
        name = c["name"]
        if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
            out.append(f"{name}: runAsNonRoot must be true")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            out.append(f"{name}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{name}: seccompProfile {seccomp}")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation must be false")
        if sc.get("privileged"):
            out.append(f"{name}: privileged")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{name}: capabilities must drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"{name}: adds capabilities {caps['add']}")
    return out


def test_default_render_is_one_restricted_replica(helm: str) -> None:
    docs = _render(helm)
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert not [d for d in docs if d["kind"] == "ServiceMonitor"], "ServiceMonitor is opt-in"
    deploy = _one(docs, "Deployment")
    assert deploy["spec"]["replicas"] == 1
    pod = _pod(docs)
    assert restricted_violations(pod) == []
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "affinity" not in pod and "topologySpreadConstraints" not in pod
    assert container["resources"] == {
        "requests": {"cpu": "100m", "memory": "256Mi"},
        "limits": {"cpu": "1", "memory": "1Gi"},
    }
    args = container["args"]
    for flag in (
        "--leader-elect",
        "--lease-duration-seconds=15",
        "--renew-deadline-seconds=10",
        "--retry-period-seconds=2",
        "--kube-api-qps=200",
        "--kube-api-burst=400",
    ):
        assert flag in args, args


def test_two_replicas_get_a_pdb_and_soft_anti_affinity(helm: str) -> None:
    docs = _render(helm, "replicas=2")
    pdb = _one(docs, "PodDisruptionBudget")
    pod_labels = _one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (pref,) = _pod(docs)["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert pref["weight"] == 100
    assert pref["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert pref["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= pod_labels.items()


@pytest.mark.parametrize(
    ("sets", "want"),
    [
        pytest.param(
            ["podAntiAffinity.mode=hard"],
            {"requiredDuringSchedulingIgnoredDuringExecution"},
            id="hard",
        ),
        pytest.param(["podAntiAffinity.mode=none"], None, id="none"),
        pytest.param(["podDisruptionBudget.enabled=false"], "no-pdb", id="pdb-off"),
        pytest.param(
            [
                "affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
                ".topologyKey=topology.kubernetes.io/zone"
            ],
            {"requiredDuringSchedulingIgnoredDuringExecution"},
            id="user-affinity-wins",
        ),
    ],
)
def test_ha_options(helm: str, sets: list[str], want: Any) -> None:
    docs = _render(helm, "replicas=3", *sets)
    pod = _pod(docs)
    if want == "no-pdb":
        assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    elif want is None:
        assert "podAntiAffinity" not in (pod.get("affinity") or {})
    else:
        assert set(pod.get("affinity", {}).get("podAntiAffinity") or {}) == want


def test_topology_spread_selects_the_operator_pods(helm: str) -> None:
    docs = _render(
        helm,
        "topologySpreadConstraints[0].maxSkew=1",
        "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
        "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
    )
    (spread,) = _pod(docs)["topologySpreadConstraints"]
    labels = _one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert spread["labelSelector"]["matchLabels"].items() <= labels.items()


@pytest.mark.parametrize(
    ("size", "requests", "limits"),
    [
        pytest.param("small", ("100m", "256Mi"), ("1", "1Gi"), id="small"),
        pytest.param("1000", ("500m", "512Mi"), ("2", "1Gi"), id="1000-nodes"),
        pytest.param("2000", ("1", "1Gi"), ("2", "2Gi"), id="2000-nodes"),
        pytest.param("5000", ("2", "3Gi"), ("4", "4Gi"), id="5000-nodes"),
    ],
)
def test_fleet_size_picks_the_resources(
    helm: str, size: str, requests: tuple[str, str], limits: tuple[str, str]
) -> None:
    (container,) = _pod(_render(helm, f"fleetSize={size}"))["containers"]
    res = container["resources"]
    assert (res["requests"]["cpu"], res["requests"]["memory"]) == requests
    assert (res["limits"]["cpu"], res["limits"]["memory"]) == limits


def test_user_resources_and_security_contexts_win_key_by_key(helm: str) -> None:
    pod = _pod(
        _render(
            helm,
            "fleetSize=2000",
            "resources.limits.memory=3Gi",
            "podSecurityContext.runAsUser=1000",
            "securityContext.runAsUser=1000",
        )
    )
    (container,) = pod["containers"]
    assert container["resources"] == {
        "requests": {"cpu": "1", "memory": "1Gi"},
        "limits": {"cpu": "2", "memory": "3Gi"},
    }
    assert pod["securityContext"]["runAsUser"] == container["securityContext"]["runAsUser"] == 1000
    assert restricted_violations(pod) == []


def test_all_features_render(helm: str) -> None:
    docs = _render(helm, values=ALL_VALUES)
    kinds = {d["kind"] for d in docs}
    assert {"PodDisruptionBudget", "ServiceMonitor", "PrometheusRule"} <= kinds
    pod = _pod(docs)
    assert restricted_violations(pod) == []
    (container,) = pod["containers"]
    assert container["resources"]["limits"] == {"cpu": "2", "memory": "3Gi"}
    assert "--lease-duration-seconds=30" in container["args"]
    assert "--kube-api-qps=50" in container["args"]
    assert set(pod["affinity"]) == {"nodeAffinity", "podAntiAffinity"}
    endpoint = _one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["relabelings"] and endpoint["metricRelabelings"]


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        pytest.param(
            ["operator.leaderElection.leaseDurationSeconds=12"],
            "leaseDurationSeconds (12) must be greater than renewDeadlineSeconds + 2",
            id="lease-too-short",
        ),
        pytest.param(
            ["operator.leaderElection.renewDeadlineSeconds=2"],
            "renewDeadlineSeconds (2) must be greater than 1.2 x retryPeriodSeconds",
            id="deadline-too-short",
        ),
        pytest.param(["fleetSize=huge"], "fleetSize", id="fleet-size"),
    ],
)
def test_bad_values_do_not_render(helm: str, sets: list[str], message: str) -> None:
    assert message in _render_error(helm, *sets)


def _notes(helm: str, tmp_path: Path, *sets: str) -> str:
    """NOTES.txt as rendered on install. `helm install --dry-run` wants a cluster, so a copy
    of the chart renders it through `tpl` into a template of its own."""
    chart = tmp_path / "trainop"
    if not chart.exists():
        shutil.copytree(CHART, chart)
        shutil.copy(CHART / "templates" / "NOTES.txt", chart / "notes-under-test.txt")
        (chart / "templates" / "zz-notes.yaml").write_text(
            'kind: Notes\ntext: {{ tpl (.Files.Get "notes-under-test.txt") . | toJson }}\n'
        )
    args = [helm, "template", "trainop", str(chart), "-n", "trainop-system"]
    args += ["--show-only", "templates/zz-notes.yaml"]
    for item in sets:
        args += ["--set", item]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return str(yaml.safe_load(proc.stdout)["text"])


def test_notes_create_the_example_namespace_before_applying_it(helm: str, tmp_path: Path) -> None:
    example = yaml.safe_load((ROOT / "examples" / "pytorch-ddp.yaml").read_text())
    namespace = example["metadata"]["namespace"]
    notes = _notes(helm, tmp_path)
    create = notes.index(f"kubectl create namespace {namespace}\n")
    assert create < notes.index("kubectl apply -f examples/pytorch-ddp.yaml")
    assert f"trainop explain {example['metadata']['name']} -n {namespace}" in notes
    assert "get lease" not in notes  # one replica: nothing to elect
    ha = _notes(helm, tmp_path, "replicas=2", "operator.watchNamespaces={team-cv}")
    assert "get lease trainop -o jsonpath='{.spec.holderIdentity}" in ha
    assert "The operator watches only team-cv" in ha


# --- the ClusterTrainingRuntimes the chart ships (docs/runtimes.md) ------------------------

FRAMEWORKS = ["jax", "mpi", "mxnet", "paddle", "pytorch", "tensorflow"]


@pytest.mark.parametrize(
    ("sets", "want"),
    [
        pytest.param([], FRAMEWORKS, id="default-all-six"),
        pytest.param(["runtimes.enabled=false"], [], id="disabled"),
        pytest.param(["runtimes.only={pytorch,jax}"], ["jax", "pytorch"], id="only-some"),
    ],
)
def test_chart_ships_runtimes(helm: str, sets: list[str], want: list[str]) -> None:
    from trainop.runtimes import check_runtime

    runtimes = [d for d in _render(helm, *sets) if d["kind"] == "ClusterTrainingRuntime"]
    assert sorted(r["metadata"]["name"] for r in runtimes) == want
    for rt in runtimes:
        assert check_runtime(rt) is None, rt["metadata"]["name"]
        assert rt["spec"]["framework"]["name"] == rt["metadata"]["name"]
        assert rt["metadata"]["labels"]["app.kubernetes.io/name"] == "trainop"


def test_chart_refuses_an_unknown_runtime_name(helm: str) -> None:
    assert "only" in _render_error(helm, "runtimes.only={caffe}")


# --- the progress endpoint's TLS (issue 35) ---------------------------------------------------
def _args(docs: list[dict[str, Any]]) -> list[str]:
    deploy = _one(docs, "Deployment")
    return list(deploy["spec"]["template"]["spec"]["containers"][0]["args"])


def _tls_role(docs: list[dict[str, Any]]) -> dict[str, Any] | None:
    roles = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-tls")]
    return roles[0] if roles else None


# name, --set, --progress-tls, URL scheme, the Role's verbs on the Secret, a Certificate
TLS_MODES = [
    ("managed-by-default", (), "managed", "https", {"get", "update", "create"}, False),
    (
        "cert-manager",
        ("operator.progress.tls.mode=certManager", "operator.progress.tls.issuerRef.name=ca"),
        "secret",
        "https",
        {"get"},
        True,
    ),
    ("off", ("operator.progress.tls.mode=off",), "off", "http", set(), False),
]


@pytest.mark.parametrize(
    ("name", "sets", "flag", "scheme", "verbs", "certificate"),
    TLS_MODES,
    ids=[m[0] for m in TLS_MODES],
)
def test_the_progress_endpoint_is_tls_unless_turned_off(
    helm: str,
    name: str,
    sets: tuple[str, ...],
    flag: str,
    scheme: str,
    verbs: set[str],
    certificate: bool,
) -> None:
    docs = _render(helm, *sets)
    args = _args(docs)
    assert f"--progress-tls={flag}" in args
    url = next(a for a in args if a.startswith("--progress-url="))
    assert url.startswith(f"--progress-url={scheme}://trainop-progress.trainop-system.svc:")
    assert "--progress-tls-secret=trainop-progress-tls" in args
    role = _tls_role(docs)
    granted = {v for rule in (role or {}).get("rules", []) for v in rule["verbs"]}
    assert granted == verbs
    for rule in (role or {}).get("rules", []):
        if set(rule["verbs"]) & {"get", "update"}:
            assert rule["resourceNames"] == ["trainop-progress-tls"]  # that Secret only
    certs = [d for d in docs if d["kind"] == "Certificate"]
    assert bool(certs) == certificate
    if certs:
        assert certs[0]["spec"]["secretName"] == "trainop-progress-tls"
        assert certs[0]["spec"]["issuerRef"]["name"] == "ca"


def test_cert_manager_needs_an_issuer(helm: str) -> None:
    assert "issuerRef.name is required" in _render_error(
        helm, "operator.progress.tls.mode=certManager"
    )


# --- least privilege: docs/rbac.md is the contract (issue 35) -----------------------------------
RBAC_DOC = CHART.parent.parent / "docs" / "rbac.md"


def rbac_table() -> set[tuple[str, str, str, str, str]]:
    """(scope, group, resource, verb, when) of every row of docs/rbac.md's table."""
    rows = set()
    for line in RBAC_DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or cells[0] not in ("cluster", "release"):
            continue
        scope, group, resource, verbs, when, _why = cells
        for verb in verbs.split(", "):
            for each in when.split(", "):
                rows.add((scope, "" if group == "core" else group, resource, verb, each))
    return rows


def granted(docs: list[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    """(scope, group, resource, verb) of every rule of the chart's ClusterRole and Roles."""
    out = set()
    for d in docs:
        if d["kind"] not in ("ClusterRole", "Role"):
            continue
        scope = "cluster" if d["kind"] == "ClusterRole" else "release"
        for rule in d["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        out.add((scope, group, resource, verb))
    return out


# name, --set, the When values of docs/rbac.md that apply
RBAC_SETTINGS = [
    ("defaults", (), {"always", "progress", "tls-managed"}),
    ("progress-off", ("operator.progress.enabled=false",), {"always"}),
    ("tls-off", ("operator.progress.tls.mode=off",), {"always", "progress"}),
    (
        "cert-manager",
        ("operator.progress.tls.mode=certManager", "operator.progress.tls.issuerRef.name=ca"),
        {"always", "progress", "tls-cert-manager"},
    ),
    (
        "kueue",
        ("operator.config.externalQueue=kueue",),
        {"always", "progress", "tls-managed", "kueue"},
    ),
    ("dra", ("operator.config.dra.enabled=true",), {"always", "progress", "tls-managed", "dra"}),
    (
        "compute-domains",
        ("operator.config.dra.computeDomains=true",),
        {"always", "progress", "tls-managed", "compute-domains"},
    ),
    (
        "gang-kubernetes",
        ("operator.config.gangScheduling=kubernetes",),
        {"always", "progress", "tls-managed", "gang-kubernetes"},
    ),
]


@pytest.mark.parametrize(("name", "sets", "when"), RBAC_SETTINGS, ids=[s[0] for s in RBAC_SETTINGS])
def test_every_grant_is_in_the_least_privilege_table(
    helm: str, name: str, sets: tuple[str, ...], when: set[str]
) -> None:
    table = {row[:4] for row in rbac_table() if row[4] in when}
    chart = granted(_render(helm, *sets))
    assert chart - table == set(), "granted by the chart, missing from docs/rbac.md"
    assert table - chart == set(), "in docs/rbac.md, not granted by the chart"


def test_the_table_lists_every_setting() -> None:
    listed = {row[4] for row in rbac_table()}
    assert listed == set().union(*(w for _n, _s, w in RBAC_SETTINGS))


def test_the_network_policy_admits_only_job_pods_to_the_progress_port(helm: str) -> None:
    assert not [d for d in _render(helm) if d["kind"] == "NetworkPolicy"]  # off by default
    policy = _one(_render(helm, "networkPolicy.enabled=true"), "NetworkPolicy")
    progress, rest = policy["spec"]["ingress"]
    assert progress["ports"] == [{"port": 8082, "protocol": "TCP"}]
    [source] = progress["from"]
    assert source["namespaceSelector"] == {}
    assert source["podSelector"]["matchExpressions"] == [
        {"key": "trainop.dev/job-name", "operator": "Exists"}
    ]
    assert "from" not in rest and {p["port"] for p in rest["ports"]} == {8080, 8081}

"""The Helm chart's values schema, operator config, dashboard and alerts, checked without a cluster."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from trainop import metrics
from trainop.config import operator_config_from_data
from trainop.observability import (
    dashboard_queries,
    dashboard_variables,
    exposed_names,
    grafana_expr,
    metric_names,
)

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


@pytest.mark.parametrize("values_file", [None, ALL_VALUES], ids=["default", "all-features"])
def test_operator_config_values_load(defaults: dict[str, Any], values_file: Path | None) -> None:
    values = _merged(defaults, _load_yaml(values_file)) if values_file else defaults
    config = operator_config_from_data(values["operator"]["config"])
    assert config.topology_levels == tuple(values["operator"]["config"]["topologyLevels"])
    if values_file:
        assert [p.name for p in config.fabric_profiles] == ["t4-tcp", "h100-roce"]
        spec = config.catalog.image_spec("pytorch")
        assert spec is not None and spec.repository == "registry.example.com/nvidia/pytorch"


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
    ]
    names = metric_names(text)
    assert {
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

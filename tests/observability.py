"""The PromQL of the Helm chart's Grafana dashboard and alerts, read back for tests (pure).

Only tests use it (tests/unit/test_chart.py, tests/integration/test_chart.py and
test_prometheus_scrape.py), so it lives beside tests/builders.py, not in the product.

The chart (charts/trainop) ships `dashboards/trainop.json` and a PrometheusRule template;
both name metrics that `trainop.metrics` defines. This module reads the queries back out
(`dashboard_queries`, `alert_rules`), fills in Grafana's template variables so a query runs
on a plain Prometheus (`grafana_expr`), and lists the series names a metric family exposes
(`exposed_names`), so tests can check every name against the registry and run every query.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_VARIABLES",
    "alert_rules",
    "dashboard_queries",
    "dashboard_variables",
    "exposed_names",
    "grafana_expr",
    "metric_names",
]

# What Grafana substitutes for the dashboard's variables: "All" queues, and its built-in
# intervals at a 15 s scrape.
DEFAULT_VARIABLES: Mapping[str, str] = {
    "queue": ".*",
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "1h",
}

_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
    "stateset": ("",),
    "enum": ("",),
    "unknown": ("",),
}

# A series name in PromQL, not preceded by a word character, `$` (a variable) or `.`.
_NAME = re.compile(r"(?<![\w$.])(trainop_[a-zA-Z0-9_]+)")
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def _panels(panels: Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels") or ())  # collapsed rows nest their panels


def dashboard_queries(path: str | Path) -> list[tuple[str, str]]:
    """(panel title, PromQL expr) for every target of every panel, in dashboard order."""
    dash = json.loads(Path(path).read_text())
    out: list[tuple[str, str]] = []
    for panel in _panels(dash.get("panels") or ()):
        for target in panel.get("targets") or ():
            expr = target.get("expr")
            if expr:
                out.append((str(panel.get("title", "")), str(expr)))
    return out


def dashboard_variables(path: str | Path) -> list[tuple[str, str]]:
    """(variable name, query) of the dashboard's query variables, e.g. label_values(...)."""
    dash = json.loads(Path(path).read_text())
    out = []
    for var in (dash.get("templating") or {}).get("list") or ():
        if var.get("type") != "query":
            continue
        query = var.get("query")
        if isinstance(query, Mapping):
            query = query.get("query")
        out.append((str(var["name"]), str(query or var.get("definition", ""))))
    return out


def grafana_expr(expr: str, variables: Mapping[str, str] | None = None) -> str:
    """`expr` with $var / ${var} replaced as Grafana would; unknown variables raise KeyError."""
    values = {**DEFAULT_VARIABLES, **(variables or {})}

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in values:
            raise KeyError(f"dashboard variable ${name} has no value")
        return values[name]

    return _VARIABLE.sub(sub, expr)


def alert_rules(manifests: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(alert or record name, expr) of every rule in the PrometheusRule objects among `manifests`."""
    out: list[tuple[str, str]] = []
    for obj in manifests:
        if not obj or obj.get("kind") != "PrometheusRule":
            continue
        for group in (obj.get("spec") or {}).get("groups") or ():
            for rule in group.get("rules") or ():
                name = rule.get("alert") or rule.get("record") or ""
                out.append((str(name), str(rule["expr"]).strip()))
    return out


def metric_names(text: str) -> set[str]:
    """The trainop_* series names a PromQL expression (or any text holding some) refers to.

    Double-quoted strings (label values, regexes) are skipped.
    """
    return set(_NAME.findall(_STRING.sub('""', text)))


def exposed_names(families: Iterable[tuple[str, str]]) -> set[str]:
    """Series names Prometheus sees for metric families given as (name, type).

    prometheus_client names a counter family without `_total` and exposes `<name>_total`;
    a histogram exposes `_bucket`, `_count` and `_sum`.
    """
    out: set[str] = set()
    for name, kind in families:
        base = name.removesuffix("_total") if kind == "counter" else name
        out.update(base + suffix for suffix in _SUFFIXES.get(kind, ("",)))
    return out

"""A real Prometheus scrapes the running operator; the chart's dashboard and alert PromQL run on it.

Debian's `prometheus` (installed by .ci/run) is started on a free port with a 1 s scrape of the
session operator's /metrics and the chart's PrometheusRule loaded as a rule file. After a
PyTorch job runs to Succeeded, the HTTP API must show trainop series with the values the
operator itself reports, and every dashboard panel query and alert expression must evaluate.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.chart_helpers import ALL_VALUES, CHART, Helm, documents, find, free_port
from tests.integration.conftest import Kube, OperatorProcess, repo_root
from tests.observability import (
    alert_rules,
    dashboard_queries,
    dashboard_variables,
    grafana_expr,
)

pytestmark = pytest.mark.integration

JOB = "trainop"  # the scrape job name; the alerts' default operatorJobRegex is .*trainop.*
DASHBOARD = CHART / "dashboards" / "trainop.json"


class Prometheus:
    """A Prometheus server process and a small client of its HTTP API."""

    def __init__(
        self,
        binary: str,
        workdir: Path,
        target_port: int,
        rules: Path,
        scrape: dict[str, Any] | None = None,
    ) -> None:
        """Scrapes 127.0.0.1:`target_port`, or instead the target config `scrape` (e.g.
        kubernetes_sd_configs: the real-node tier scrapes through the chart's Service)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "prometheus.log"
        config = workdir / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(rules)],
                    "scrape_configs": [
                        {
                            "job_name": JOB,
                            "scrape_interval": "1s",
                            "scrape_timeout": "1s",
                            **(
                                scrape
                                or {"static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}]}
                            ),
                        }
                    ],
                }
            )
        )
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"prometheus exited:\n{self.log_tail()}"
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"prometheus not ready in {timeout} s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def log_tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])

    def api(self, path: str, **params: str) -> dict[str, Any]:
        """GET /api/v1/<path>; returns the JSON body whatever the HTTP status."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return dict(json.loads(r.read()))
        except urllib.error.HTTPError as e:  # 400/422 carry {"status": "error", ...}
            return dict(json.loads(e.read()))

    def query(self, expr: str) -> list[dict[str, Any]]:
        body = self.api("query", query=expr)
        assert body["status"] == "success", f"{expr}: {body.get('errorType')}: {body.get('error')}"
        return list(body["data"]["result"])

    def value(self, expr: str) -> float | None:
        """The value of a query that yields at most one series."""
        result = self.query(expr)
        assert len(result) <= 1, f"{expr}: {len(result)} series"
        return float(result[0]["value"][1]) if result else None


@pytest.fixture(scope="module")
def alert_rule_file(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart's PrometheusRule (all-features values) as a plain Prometheus rule file."""
    helm = Helm(kube, tmp_path_factory.mktemp("helm"))
    rule = find(documents(helm.template(values=ALL_VALUES)), "PrometheusRule")
    path = tmp_path_factory.mktemp("rules") / "trainop.rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    return path


@pytest.fixture(scope="module")
def prometheus(
    operator: OperatorProcess, alert_rule_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip(
            "the `prometheus` binary is not on PATH (Debian: apt-get install prometheus; "
            ".ci/run installs it)"
        )
    prom = Prometheus(
        binary, tmp_path_factory.mktemp("prometheus"), operator.metrics_port, alert_rule_file
    )
    try:
        prom.wait_ready()
        yield prom
    finally:
        prom.stop()
        assert prom.proc.poll() is not None, "prometheus is still running"


def _operator_sample(operator: OperatorProcess, name: str, **labels: str) -> float:
    """The sum over the operator's own /metrics samples `name` whose labels include `labels`."""
    total = 0.0
    for family in text_string_to_metric_families(operator.metrics()):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                total += sample.value
    return total


def _run_pytorch_job_to_succeeded(kube: Kube, namespace: str, name: str) -> None:
    job = dict(yaml.safe_load((repo_root() / "examples" / "pytorch-ddp.yaml").read_text()))
    job["metadata"] = {"name": name, "namespace": namespace}
    kube.apply(job)

    def phase() -> str | None:
        tj = kube.maybe_get("trainingjob", name, "-n", namespace)
        return None if tj is None else (tj.get("status") or {}).get("phase")

    kube.wait_for(f"{name} Running", lambda: phase() == "Running", timeout=90)
    pods = kube.get("pods", "-n", namespace, "-l", f"trainop.dev/job-name={name}")["items"]
    assert len(pods) == 2
    for pod in pods:
        kube.run(
            "annotate",
            "pod",
            pod["metadata"]["name"],
            "-n",
            namespace,
            "trainop.dev/fake-exit-code=0",
        )
    kube.wait_for(f"{name} Succeeded", lambda: phase() == "Succeeded", timeout=90)


def test_prometheus_scrapes_the_operator_and_every_query_runs(
    kube: Kube,
    namespace: str,
    operator: OperatorProcess,
    prometheus: Prometheus,
    alert_rule_file: Path,
) -> None:
    admitted_before = _operator_sample(operator, "trainop_admission_wait_seconds_count")
    _run_pytorch_job_to_succeeded(kube, namespace, "scraped")

    # Wait until a scrape after the job's end has landed: Prometheus agrees with /metrics.
    # (Read both each time: jobs of earlier modules may still be going away.)
    succeeded = 'sum(trainop_jobs{phase="Succeeded", framework="pytorch"})'

    def agreed() -> bool:
        want = _operator_sample(operator, "trainop_jobs", phase="Succeeded", framework="pytorch")
        return want >= 1 and prometheus.value(succeeded) == want

    kube.wait_for("Prometheus to scrape the succeeded job", agreed, timeout=30)
    assert prometheus.value(f'up{{job="{JOB}"}}') == 1
    assert (prometheus.value(succeeded) or 0) >= 1
    assert (
        prometheus.value('sum(trainop_reconcile_duration_seconds_count{handler="trainingjob"})')
        or 0
    ) > 0
    admitted = prometheus.value("sum(trainop_admission_wait_seconds_count)")
    assert admitted is not None and admitted >= admitted_before + 1 >= 1
    # The job was packed into one rack (placement Required on rack).
    assert (prometheus.value('sum(trainop_placement_span_count{level="rack"})') or 0) >= 1
    assert (
        prometheus.value('sum(trainop_job_time_to_running_seconds_count{framework="pytorch"})') or 0
    ) >= 1
    # The `trainop_` series Prometheus holds are exactly the families the operator exports.
    names = prometheus.api("label/__name__/values", **{"match[]": '{__name__=~"trainop_.*"}'})
    assert names["status"] == "success"
    assert {"trainop_jobs", "trainop_admission_wait_seconds_bucket"} <= set(names["data"])

    # rate() needs two samples inside the panels' 1m window: let a few more scrapes land.
    kube.wait_for(
        "five scrapes within a minute",
        lambda: (prometheus.value(f'count_over_time(up{{job="{JOB}"}}[1m])') or 0) >= 5,
        timeout=30,
    )

    # Every dashboard panel query, as Grafana would send it (instant and range).
    queries = dashboard_queries(DASHBOARD)
    assert len(queries) >= 15
    results: dict[str, int] = {}
    now = time.time()
    for title, expr in queries:
        promql = grafana_expr(expr)
        results[title] = results.get(title, 0) + len(prometheus.query(promql))
        body = prometheus.api(
            "query_range", query=promql, start=str(now - 60), end=str(now), step="5"
        )
        assert body["status"] == "success", f"{title}: {promql}: {body.get('error')}"
    for title in ("Jobs by phase", "Reconciles and errors per second", "Operator up"):
        assert results[title] > 0, f"panel {title!r} shows no data"
    for name, query in dashboard_variables(DASHBOARD):
        metric, label = query.removeprefix("label_values(").removesuffix(")").split(", ")
        body = prometheus.api(f"label/{label}/values", **{"match[]": metric})
        assert body["status"] == "success", f"${name}: {body}"

    # Every alert expression evaluates, and Prometheus loaded and evaluated each rule.
    spec = yaml.safe_load(alert_rule_file.read_text())
    rules = alert_rules([{"kind": "PrometheusRule", "spec": spec}])
    assert len(rules) == 4
    for name, expr in rules:
        assert isinstance(prometheus.query(expr), list), name

    def evaluated() -> dict[str, dict[str, Any]] | None:
        body = prometheus.api("rules")
        loaded = {
            r["name"]: r
            for g in body["data"]["groups"]
            for r in g["rules"]
            if r["type"] == "alerting"
        }
        # Before its first evaluation a rule reports lastEvaluation 0001-01-01T00:00:00Z.
        done = len(loaded) == 4 and all(
            not r.get("lastEvaluation", "0001").startswith("0001") for r in loaded.values()
        )
        return loaded if done else None

    loaded = kube.wait_for("the alert rules to be evaluated", evaluated, timeout=30)
    for name, rule in loaded.items():
        assert rule["health"] == "ok", f"{name}: {rule.get('lastError')}"
    # The operator is scraped, so the absent() alert sees it and stays quiet; it leads.
    assert loaded["TrainOpOperatorAbsent"]["state"] == "inactive"
    assert loaded["TrainOpNoLeader"]["state"] == "inactive"
    assert prometheus.value("sum(trainop_leader)") == 1

    # Delete the job while the operator runs, so its finalizer never holds the namespace.
    kube.run("delete", "trainingjob", "scraped", "-n", namespace, "--wait=false")
    kube.wait_for(
        "the job to be deleted",
        lambda: kube.maybe_get("trainingjob", "scraped", "-n", namespace) is None,
        timeout=60,
    )

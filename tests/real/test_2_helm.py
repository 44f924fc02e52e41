"""The Helm-installed operator on a real node: restricted Pod Security Standard, read-only
root filesystem, its own ServiceAccount, and /metrics scraped by a real Prometheus through
the chart's Service (kubernetes_sd endpoints discovery)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.integration.conftest import Kube
from tests.integration.test_prometheus_scrape import Prometheus
from tests.real.conftest import OPERATOR_NS, HelmOperator
from tests.real.scenarios import Target
from trainop.cluster import images


def test_operator_pod_runs_on_a_real_node_under_restricted_pss(
    real_operator: HelmOperator, real_kube: Kube
) -> None:
    pod = real_operator.pod()
    assert pod["status"]["phase"] == "Running"
    node = real_kube.get("node", pod["spec"]["nodeName"])
    assert node["metadata"]["labels"]["trainop.dev/real-node"] == "true"
    ns = real_kube.get("namespace", OPERATOR_NS)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    (container,) = pod["spec"]["containers"]
    assert container["image"] == images.image_ref("operator")
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["serviceAccountName"] not in ("", "default")
    assert all(s["ready"] for s in pod["status"]["containerStatuses"])


def test_prometheus_scrapes_the_operator_through_the_chart_service(
    target: Target, real_operator: HelmOperator, tmp_path: Path
) -> None:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("no `prometheus` binary (Debian package prometheus; .ci/run installs it)")
    service = real_operator.kube.get("services", "-n", OPERATOR_NS)["items"][0]["metadata"]["name"]
    scrape = {
        "kubernetes_sd_configs": [
            {
                "role": "endpoints",
                "kubeconfig_file": target.kube.kubeconfig,
                "namespaces": {"names": [OPERATOR_NS]},
            }
        ],
        "relabel_configs": [
            {
                "source_labels": ["__meta_kubernetes_service_name"],
                "regex": service,
                "action": "keep",
            },
            {
                "source_labels": ["__meta_kubernetes_endpoint_port_name"],
                "regex": "metrics",
                "action": "keep",
            },
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
        ],
    }
    rules = tmp_path / "rules.yaml"
    rules.write_text("groups: []\n")
    prom = Prometheus(binary, tmp_path, 0, rules, scrape=scrape)
    try:
        prom.wait_ready()
        deadline = time.monotonic() + 60
        up: list[dict[str, object]] = []
        while time.monotonic() < deadline and not up:
            up = prom.query('up{job="trainop"} == 1')
            time.sleep(1)
        assert up, prom.log_tail()
        labels = up[0]["metric"]
        assert isinstance(labels, dict) and labels["node"].startswith(real_operator.cluster.name)
        assert prom.query("trainop_reconcile_duration_seconds_count"), "no trainop series"
    finally:
        prom.stop()

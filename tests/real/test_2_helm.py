"""The Helm-installed operator on a real node, as on a cluster: its image pushed with
`trainop images push` to a real registry and pulled by the kubelet through containerd;
restricted Pod Security Standard, read-only root filesystem, its own ServiceAccount, a job
that trains through it, and /metrics scraped by a real Prometheus at the endpoints of the
chart's Service."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from tests.integration.conftest import Kube
from tests.integration.test_prometheus_scrape import Prometheus
from tests.real.helm_operator import OPERATOR_NS, OPERATOR_REPOSITORY, HelmOperator
from tests.real.registry import LocalRegistry
from tests.real.scenarios import DDP_LINE, Target, example, phase, run_ddp


def test_operator_image_is_pulled_from_the_registry(
    real_operator: HelmOperator, local_registry: LocalRegistry
) -> None:
    ((ref, pushed),) = local_registry.pushed.items()
    repository, tag = ref.rsplit(":", 1)
    assert repository == f"{local_registry.address}/{OPERATOR_REPOSITORY}"
    (container,) = real_operator.pod()["spec"]["containers"]
    assert container["image"] == ref
    # The kubelet pulled it by that name: the image's repo digest is the one the push
    # printed, the manifest digest of the archive `trainop images build` wrote.
    (status,) = real_operator.pod()["status"]["containerStatuses"]
    assert status["imageID"] == pushed
    assert pushed.split("@sha256:")[1].startswith(tag)
    # It is private: the push and the pull needed the docker config's credentials.
    assert local_registry.anonymous_status(f"/v2/{OPERATOR_REPOSITORY}/manifests/{tag}") == 401


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
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["serviceAccountName"] not in ("", "default")
    assert all(s["ready"] for s in pod["status"]["containerStatuses"])


def test_a_job_trains_through_the_pulled_operator(target: Target, namespace: str) -> None:
    log = run_ddp(target, namespace)
    assert DDP_LINE.search(log), log[-3000:]


def test_prometheus_scrapes_the_operator_through_the_chart_service(
    target: Target, real_operator: HelmOperator, namespace: str, tmp_path: Path
) -> None:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("no `prometheus` binary (Debian package prometheus; .ci/run installs it)")
    # Debian's Prometheus is built without kubernetes_sd, so the chart's Service is
    # resolved here, from its EndpointSlice, into file_sd targets (what endpoints
    # discovery would give): the pod IP and the Service's `metrics` target port.
    kube = real_operator.kube
    service = kube.get("services", "-n", OPERATOR_NS)["items"][0]["metadata"]["name"]
    slices = kube.get(
        "endpointslices", "-n", OPERATOR_NS, "-l", f"kubernetes.io/service-name={service}"
    )["items"]
    targets = [
        {
            "targets": [f"{ep['addresses'][0]}:{port['port']}"],
            "labels": {"node": ep.get("nodeName", ""), "service": service},
        }
        for sl in slices
        for ep in sl.get("endpoints") or []
        for port in sl.get("ports") or []
        if port.get("name") == "metrics"
    ]
    assert targets, f"the Service {service} has no metrics endpoint: {slices}"
    sd_file = tmp_path / "targets.json"
    sd_file.write_text(json.dumps(targets))
    scrape = {"file_sd_configs": [{"files": [str(sd_file)], "refresh_interval": "1s"}]}
    # A job the operator reconciles (to Invalid: no role asks for GPUs), so that the
    # reconcile metrics exist even when this test runs alone.
    job = example(target, "pytorch-ddp-cpu.yaml", namespace)
    job["spec"]["replicaSpecs"]["Worker"]["gpus"] = 0
    kube.apply(job)
    kube.wait_for("the job reconciled", lambda: phase(kube, namespace, "ddp-cpu") == "Invalid")
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
        kube.wait_for(
            "trainop series in Prometheus",
            lambda: prom.query("trainop_reconcile_duration_seconds_count"),
            timeout=30,
        )
    finally:
        prom.stop()

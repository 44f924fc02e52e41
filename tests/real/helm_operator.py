"""The operator as users install it: `helm install charts/trainop` from the operator image
(pulled from a registry on real nodes, loaded into the node on kind), in a namespace that
enforces the restricted Pod Security Standard. Shared by the real-node tier (tests/real) and
the kind e2e tier (tests/e2e)."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

from tests.integration.chart_helpers import CHART, Helm
from tests.integration.conftest import Kube
from trainop.cluster.local import LocalCluster

OPERATOR_NS = "trainop-system"
RELEASE = "trainop"
OPERATOR_REPOSITORY = "trainop/operator"  # in the tier's local registry
PULL_SECRET = "trainop-registry"


class HelmOperator:
    """The operator installed with `helm install charts/trainop` from the local operator
    image, running on a real node in a namespace that enforces the restricted Pod Security
    Standard, reaching the apiserver as its ServiceAccount."""

    def __init__(self, cluster: LocalCluster, kube: Kube, home: Path) -> None:
        self.kube = kube
        self.helm = Helm(kube, home)
        self.cluster = cluster
        self.values: dict[str, Any] = {}

    def install(
        self,
        image_ref: str,
        *,
        no_kube_proxy: bool = True,
        pull_policy: str = "Never",
        pull_secret: dict[str, Any] | None = None,
    ) -> None:
        """`no_kube_proxy`: point the operator at the apiserver's own address (real
        nodes); kind has kube-proxy, so the in-cluster default works there. `pull_policy`:
        Never for an image loaded into the node, IfNotPresent to pull from a registry;
        `pull_secret`: a docker config with the registry's credentials, given to the chart
        as an imagePullSecret (https://kubernetes.io/docs/tasks/configure-pod-container/pull-image-private-registry/)."""
        repo, tag = image_ref.rsplit(":", 1)
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NS}}
        ns["metadata"]["labels"] = {"pod-security.kubernetes.io/enforce": "restricted"}
        self.kube.apply(ns)
        values: dict[str, Any] = {
            "image": {"repository": repo, "tag": tag, "pullPolicy": pull_policy},
            "operator": {"restartBackoffSeconds": 1},
        }
        if pull_secret is not None:
            self.kube.apply(_docker_config_secret(PULL_SECRET, pull_secret))
            values["imagePullSecrets"] = [{"name": PULL_SECRET}]
        if no_kube_proxy:  # docs/real-nodes.md
            host, port = self.cluster.apiserver_for_pods()
            values["extraEnv"] = [
                {"name": "KUBERNETES_SERVICE_HOST", "value": host},
                {"name": "KUBERNETES_SERVICE_PORT", "value": str(port)},
            ]
        self.values = values
        # A release left by an earlier session (TRAINOP_KEEP_CLUSTER=1) may be stuck mid-install.
        self.helm.run("uninstall", RELEASE, "--namespace", OPERATOR_NS, "--wait", check=False)
        self.upgrade()

    def upgrade(self, config: dict[str, Any] | None = None) -> None:
        """`helm upgrade` with the values of install() and, over the chart's, these operator
        config keys (None: the chart's own config): the ConfigMap's checksum rolls the
        operator's pod, which reads the new config."""
        values = copy.deepcopy(self.values)
        if config is not None:  # helm merges it over the chart's operator.config
            values.setdefault("operator", {})["config"] = config
        values_file = Path(self.helm.env["HELM_CONFIG_HOME"]).parent / "values.json"
        values_file.parent.mkdir(parents=True, exist_ok=True)
        values_file.write_text(json.dumps(values))
        self.helm.run(
            "upgrade",
            "--install",
            RELEASE,
            str(CHART),
            "--namespace",
            OPERATOR_NS,
            "--values",
            str(values_file),
            "--wait",
            "--timeout",
            "300s",
        )

    def pod(self) -> dict[str, Any]:
        pods = self.kube.get("pods", "-n", OPERATOR_NS, "-l", "app.kubernetes.io/name=trainop")
        return dict(pods["items"][0])

    def log_tail(self) -> str:
        return self.kube.run(
            "logs", "-n", OPERATOR_NS, self.pod()["metadata"]["name"], check=False
        ).stdout[-5000:]


def _docker_config_secret(name: str, docker_config: dict[str, Any]) -> dict[str, Any]:
    data = base64.b64encode(json.dumps(docker_config).encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": OPERATOR_NS},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": data},
    }

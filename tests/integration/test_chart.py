"""The Helm chart on the local cluster: lint, server-validated templates, install, and RBAC proof.

The RBAC proof runs a second `trainop run` with the chart ServiceAccount's token (TokenRequest
-> kubeconfig) and takes a job end to end, then shows the same token is denied the rest. This
module must not use the session `operator` fixture: two operators would both act on the job.
pytest runs test_chart.py before the modules that start it, and the test checks that no other
operator touches its job before starting its own.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import job
from tests.integration.chart_helpers import ALL_VALUES, CHART, Helm, documents, find, free_port
from tests.integration.conftest import Kube
from tests.observability import alert_rules
from trainop.cluster.binaries import resolve_binaries
from trainop.config import load_operator_config

pytestmark = pytest.mark.integration

NS = "trainop-system"
RELEASE = "trainop"
SA = "trainop"  # the release fullname: the release name already holds the chart name

# Stand-ins for prometheus-operator's CRDs, so the apiserver accepts (and dry-runs) the
# chart's ServiceMonitor and PrometheusRule; the schema is left open on purpose.
MONITORING_CRDS = [
    {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    for plural, kind in (
        ("servicemonitors", "ServiceMonitor"),
        ("prometheusrules", "PrometheusRule"),
    )
]

# What `trainop run` does against the API (trainop.kube, trainop.handlers, kopf): each must be
# allowed to the chart's ServiceAccount. (verb, resource[, --all-namespaces or -n NS])
OPERATOR_NEEDS = [
    ("list", "nodes"),
    ("watch", "nodes"),
    ("list", "pods", "-A"),
    ("watch", "pods", "-A"),
    ("create", "pods", "-n", "any-team"),
    ("patch", "pods", "-n", "any-team"),
    ("delete", "pods", "-n", "any-team"),
    ("create", "services", "-n", "any-team"),
    ("create", "configmaps", "-n", "any-team"),
    ("create", "secrets", "-n", "any-team"),
    ("create", "events", "-n", "any-team"),
    ("list", "trainingjobs.trainop.dev", "-A"),
    ("watch", "trainingjobs.trainop.dev", "-A"),
    ("patch", "trainingjobs.trainop.dev", "-n", "any-team"),
    ("delete", "trainingjobs.trainop.dev", "-n", "any-team"),
    ("patch", "trainingjobs.trainop.dev", "--subresource=status", "-n", "any-team"),
    ("update", "trainingjobs.trainop.dev", "--subresource=finalizers", "-n", "any-team"),
    ("list", "trainingqueues.trainop.dev"),
    ("watch", "trainingqueues.trainop.dev"),
    ("patch", "trainingqueues.trainop.dev", "--subresource=status"),
    ("list", "fabricprofiles.trainop.dev"),
    ("watch", "fabricprofiles.trainop.dev"),
    ("list", "clustertrainingruntimes.trainop.dev"),
    ("watch", "clustertrainingruntimes.trainop.dev"),
    ("list", "trainingruntimes.trainop.dev", "-A"),
    ("watch", "trainingruntimes.trainop.dev", "-A"),
    ("list", "customresourcedefinitions.apiextensions.k8s.io"),
    ("watch", "customresourcedefinitions.apiextensions.k8s.io"),
    ("list", "namespaces"),
    ("watch", "namespaces"),
    ("list", "priorityclasses.scheduling.k8s.io"),
    ("watch", "priorityclasses.scheduling.k8s.io"),
    ("create", "tokenreviews.authentication.k8s.io"),  # progress reports (docs/progress.md)
    # drains that wait for the checkpoint (docs/progress.md)
    ("create", "poddisruptionbudgets.policy", "-n", "any-team"),
    ("delete", "poddisruptionbudgets.policy", "-n", "any-team"),
]

# ... and what it must not be able to do.
OPERATOR_MUST_NOT = [
    ("get", "secrets", "-n", "kube-system"),
    ("list", "secrets", "-A"),
    ("get", "configmaps", "-n", "kube-system"),
    ("update", "secrets", "-n", "any-team"),
    ("delete", "secrets", "-n", "any-team"),
    ("create", "pods", "--subresource=exec", "-n", "any-team"),
    ("update", "pods", "-n", "any-team"),
    ("delete", "nodes"),
    ("patch", "nodes"),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
    ("create", "roles.rbac.authorization.k8s.io", "-n", "any-team"),
    ("delete", "customresourcedefinitions.apiextensions.k8s.io"),
    ("create", "serviceaccounts", "--subresource=token", "-n", "kube-system"),
    ("create", "deployments.apps", "-n", "any-team"),
    ("patch", "poddisruptionbudgets.policy", "-n", "any-team"),  # make or delete, never edit
    ("create", "pods", "--subresource=eviction", "-n", "any-team"),
    ("patch", "clustertrainingruntimes.trainop.dev"),  # the platform team's, read only
    ("delete", "trainingruntimes.trainop.dev", "-n", "any-team"),
    ("impersonate", "users"),
    ("escalate", "clusterroles.rbac.authorization.k8s.io"),
]

# Not a 403 after a comma: the log's timestamps end in ",<milliseconds>" (",403" once failed CI).
FORBIDDEN_LOG = re.compile(r"(?<!,)\b403\b|[Ff]orbidden|Not enough permissions")


# --- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def helm(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(kube, tmp_path_factory.mktemp("helm"))


@pytest.fixture(scope="module")
def system_namespace(kube: Kube) -> Iterator[str]:
    """trainop-system, enforcing the `restricted` Pod Security Standard on the operator pod."""
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": NS,
                "labels": {
                    f"pod-security.kubernetes.io/{mode}": "restricted"
                    for mode in ("enforce", "warn", "audit")
                },
            },
        }
    )
    yield NS
    kube.run("delete", "namespace", NS, "--wait=false", "--ignore-not-found", check=False)


@pytest.fixture(scope="module")
def monitoring_crds(kube: Kube) -> Iterator[None]:
    kube.apply(MONITORING_CRDS)
    for crd in MONITORING_CRDS:
        name = crd["metadata"]["name"]
        kube.run("wait", "--for", "condition=established", f"crd/{name}", "--timeout=30s")
    # Left in place: deleting CRDs leaves kube-controller-manager's garbage collector failing
    # to watch them until its next discovery resync, which can slow the next tests down.
    yield


@pytest.fixture(scope="module")
def release(helm: Helm, kube: Kube, system_namespace: str) -> Iterator[str]:
    helm.run("uninstall", RELEASE, "-n", system_namespace, "--wait", check=False)  # a leftover
    helm.run("install", RELEASE, str(CHART), "-n", system_namespace, "--wait", "--timeout", "180s")
    yield RELEASE
    helm.run("uninstall", RELEASE, "-n", system_namespace, "--wait", "--timeout", "60s")


@pytest.fixture(scope="module")
def sa_kubeconfig(kube: Kube, release: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kubeconfig holding a TokenRequest token of the chart's ServiceAccount."""
    token = kube.run("create", "token", SA, "-n", NS, "--duration=1h").stdout.strip()
    admin = json.loads(kube.run("config", "view", "--raw", "--minify", "-o", "json").stdout)
    cluster = dict(admin["clusters"][0]["cluster"])
    ca_file = cluster.pop("certificate-authority", None)
    if ca_file and "certificate-authority-data" not in cluster:
        ca_path = Path(ca_file)
        if not ca_path.is_absolute():
            ca_path = Path(kube.kubeconfig).parent / ca_path
        cluster["certificate-authority-data"] = base64.b64encode(ca_path.read_bytes()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": SA, "user": {"token": token}}],
        "contexts": [{"name": SA, "context": {"cluster": "local", "user": SA}}],
        "current-context": SA,
    }
    path = tmp_path_factory.mktemp("sa") / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def _sa_kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    kubectl = str(resolve_binaries(build=False)["kubectl"])
    return subprocess.run(
        [kubectl, "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _dry_run(kube: Kube, manifests: str) -> subprocess.CompletedProcess[str]:
    proc = kube.run("apply", "--dry-run=server", "-f", "-", input=manifests, check=False)
    assert proc.returncode == 0, f"the apiserver rejected the chart:\n{proc.stderr}"
    return proc


# --- lint and templates ---------------------------------------------------------------------


@pytest.mark.parametrize("values", [None, ALL_VALUES], ids=["default", "all-features"])
def test_helm_lint(helm: Helm, values: Path | None) -> None:
    args = ["lint", "--strict", str(CHART)]
    if values is not None:
        args += ["--values", str(values)]
    out = helm.run(*args).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out


def test_schema_rejects_bad_values(helm: Helm) -> None:
    proc = helm.run(
        "template",
        RELEASE,
        str(CHART),
        "--set",
        "operator.metricsPort=http",
        check=False,
    )
    assert proc.returncode != 0
    assert "metricsPort" in proc.stderr and "schema" in proc.stderr.lower(), proc.stderr


def test_default_template_is_accepted_by_the_apiserver(
    helm: Helm, kube: Kube, system_namespace: str, crds_installed: None
) -> None:
    # crds_installed: a server dry run of the ClusterTrainingRuntimes needs their CRD there.
    text = helm.template("--include-crds")
    docs = documents(text)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        ["CustomResourceDefinition"] * len(list((CHART / "crds").glob("*.yaml")))
        + [
            "ServiceAccount",
            "ConfigMap",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",  # leader election: the Lease in the release namespace
            "RoleBinding",
            "Role",  # the progress endpoint's TLS Secret (docs/rbac.md)
            "RoleBinding",
            "Service",
            "Service",  # the headless <release>-progress (progress reports, docs/progress.md)
            "Deployment",
        ]
        + ["ClusterTrainingRuntime"] * 6  # one per framework (docs/runtimes.md)
    )
    proc = _dry_run(kube, text)
    assert proc.stdout.count("(server dry run)") == len(docs), proc.stdout
    # The namespace enforces the restricted Pod Security Standard and warns on violations.
    assert "PodSecurity" not in proc.stderr, proc.stderr
    _check_deployment(find(docs, "Deployment"), metrics_port=8080, health_port=8081)
    config = find(docs, "ConfigMap", f"{RELEASE}-config")["data"]["config.yaml"]
    assert load_operator_config_text(config).topology_levels == (
        "trainop.dev/block",
        "trainop.dev/rack",
        "kubernetes.io/hostname",
    )
    _check_cluster_role(find(docs, "ClusterRole"), namespaces=False)


def test_all_features_template_is_accepted_by_the_apiserver(
    helm: Helm,
    kube: Kube,
    system_namespace: str,
    monitoring_crds: None,
    crds_installed: None,
    tmp_path: Path,
) -> None:
    text = helm.template(values=ALL_VALUES)
    docs = documents(text)
    assert {d["kind"] for d in docs} >= {"ServiceMonitor", "PrometheusRule", "ConfigMap"}
    proc = _dry_run(kube, text)
    assert proc.stdout.count("(server dry run)") == len(docs), proc.stdout
    assert "PodSecurity" not in proc.stderr, proc.stderr

    deploy = find(docs, "Deployment")
    _check_deployment(deploy, metrics_port=9090, health_port=9091, replicas=2)
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=team-nlp" in args and "--namespace=team-vision" in args
    assert "--verbose" in args and "--restart-backoff-seconds=2.5" in args
    assert deploy["spec"]["template"]["spec"]["containers"][0]["image"].endswith(
        "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    )
    config = load_operator_config_text(
        find(docs, "ConfigMap", f"{RELEASE}-config")["data"]["config.yaml"]
    )
    assert [p.name for p in config.fabric_profiles] == ["t4-tcp", "h100-roce"]
    _check_cluster_role(find(docs, "ClusterRole"), namespaces=True)

    monitor = find(docs, "ServiceMonitor")
    (svc,) = [  # the metrics Service (the other one is the headless progress Service)
        d
        for d in docs
        if d["kind"] == "Service"
        and d["metadata"]["labels"].get("app.kubernetes.io/component") == "metrics"
    ]
    assert (
        not monitor["spec"]["selector"]["matchLabels"].items()
        <= find(docs, "Service", f"{svc['metadata']['name'].removesuffix('-metrics')}-progress")[
            "metadata"
        ]["labels"].items()
    )  # Prometheus does not scrape the report endpoint
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"] == "metrics"
    assert svc["spec"]["ports"][0]["port"] == 9090

    dashboard = find(docs, "ConfigMap", f"{RELEASE}-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["trainop.json"]) == json.loads(
        (CHART / "dashboards" / "trainop.json").read_text()
    )

    rules = alert_rules(docs)
    assert [name for name, _ in rules] == [
        "TrainOpJobsPendingTooLong",
        "TrainOpReconcileErrors",
        "TrainOpOperatorAbsent",
        "TrainOpNoLeader",
    ]
    assert "[20m]" in rules[0][1] and "> 900" in rules[0][1]
    assert "> 0.01" in rules[1][1]
    promtool = shutil.which("promtool")
    if promtool:  # Debian's prometheus package ships it
        rule_file = tmp_path / "rules.yaml"
        rule_file.write_text(yaml.safe_dump(find(docs, "PrometheusRule")["spec"]))
        check = subprocess.run(
            [promtool, "check", "rules", str(rule_file)], capture_output=True, text=True
        )
        assert check.returncode == 0, check.stdout + check.stderr
        assert "SUCCESS: 4 rules found" in check.stdout, check.stdout


def load_operator_config_text(text: str) -> Any:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(text)
        f.flush()
        return load_operator_config(f.name)


def _check_deployment(
    deploy: dict[str, Any], *, metrics_port: int, health_port: int, replicas: int = 1
) -> None:
    pod = deploy["spec"]["template"]["spec"]
    assert deploy["spec"]["replicas"] == replicas
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["requests"] and container["resources"]["limits"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": metrics_port, "health": health_port, "progress": 8082}
    args = container["args"]
    assert f"--metrics-port={metrics_port}" in args and f"--health-port={health_port}" in args
    assert "--config=/etc/trainop/config.yaml" in args
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/etc/trainop"]["readOnly"] is True and "/tmp" in mounts


def _check_cluster_role(role: dict[str, Any], *, namespaces: bool) -> None:
    for rule in role["rules"]:
        for key in ("apiGroups", "resources", "verbs"):
            assert rule[key] and "*" not in rule[key], f"wildcard or empty {key} in {rule}"
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule
    granted = {
        (verb, res) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]
    }
    # Always: TrainingQueues select namespaces by label (namespace index).
    assert ("list", "namespaces") in granted and ("watch", "namespaces") in granted
    for verb in ("escalate", "bind", "impersonate", "deletecollection"):
        assert not any(v == verb for v, _ in granted)
    assert {v for v, r in granted if r == "secrets"} == {"create"}


# --- install and RBAC -----------------------------------------------------------------------


def test_install_deploys_the_release(kube: Kube, helm: Helm, release: str) -> None:
    status = json.loads(helm.run("status", release, "-n", NS, "-o", "json").stdout)
    assert status["info"]["status"] == "deployed"
    for kind, name in [
        ("serviceaccount", SA),
        ("configmap", f"{release}-config"),
        ("service", f"{release}-metrics"),
        ("deployment", release),
    ]:
        assert kube.maybe_get(kind, name, "-n", NS), f"{kind}/{name} missing"
    for kind in ("clusterrole", "clusterrolebinding"):
        assert kube.maybe_get(kind, release), f"{kind}/{release} missing"
    for crd in (
        "trainingjobs",
        "trainingqueues",
        "fabricprofiles",
        "clustertrainingruntimes",
        "trainingruntimes",
    ):
        kube.run(
            "wait", "--for", "condition=established", f"crd/{crd}.trainop.dev", "--timeout=30s"
        )
    runtimes = kube.get(  # the chart ships one per framework
        "clustertrainingruntimes", "-l", f"app.kubernetes.io/instance={release}"
    )["items"]
    assert sorted(r["metadata"]["name"] for r in runtimes) == [
        "jax",
        "mpi",
        "mxnet",
        "paddle",
        "pytorch",
        "tensorflow",
    ]
    # --wait returned: KWOK ran the (fake) operator pod, admitted under PSS `restricted`.
    deploy = kube.get("deployment", release, "-n", NS)
    assert deploy["status"].get("availableReplicas") == 1, deploy["status"]
    pods = kube.get("pods", "-n", NS, "-l", f"app.kubernetes.io/instance={release}")["items"]
    assert [p["status"]["phase"] for p in pods] == ["Running"]
    assert pods[0]["spec"]["serviceAccountName"] == SA


@pytest.mark.parametrize(
    "need", OPERATOR_NEEDS, ids=lambda n: " ".join(x for x in n if not x.startswith("-"))
)
def test_service_account_is_allowed(kube: Kube, release: str, need: tuple[str, ...]) -> None:
    proc = kube.run("auth", "can-i", *need, f"--as=system:serviceaccount:{NS}:{SA}", check=False)
    assert proc.stdout.strip() == "yes", f"{need}: {proc.stdout} {proc.stderr}"


@pytest.mark.parametrize(
    "deny", OPERATOR_MUST_NOT, ids=lambda n: " ".join(x for x in n if not x.startswith("-"))
)
def test_service_account_is_denied(kube: Kube, release: str, deny: tuple[str, ...]) -> None:
    proc = kube.run("auth", "can-i", *deny, f"--as=system:serviceaccount:{NS}:{SA}", check=False)
    assert proc.stdout.strip() == "no", f"{deny}: {proc.stdout} {proc.stderr}"


# Granted to every authenticated user (system:basic-user, system:discovery): not the chart's.
EVERYONE = {
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
    ("authentication.k8s.io", "selfsubjectreviews"),
}


def _can_i_list(kube: Kube, namespace: str) -> set[tuple[str, str, str]]:
    """(group, resource, verb) of `kubectl auth can-i --list` for the ServiceAccount."""
    out = kube.run(
        "auth", "can-i", "--list", f"--as=system:serviceaccount:{NS}:{SA}", "-n", namespace
    ).stdout
    rows = set()
    for line in out.splitlines()[1:]:
        match = re.match(r"^(\S+)\s+\[(.*?)\]\s+\[(.*?)\]\s+\[(.*?)\]\s*$", line)
        if match is None:  # a Non-Resource URL row (no resource column)
            continue
        resource, verbs = match.group(1), match.group(4).split()
        name, _, sub = resource.partition("/")
        plural, _, group = name.partition(".")
        if (group, plural) in EVERYONE:
            continue
        rows |= {(group, plural + (f"/{sub}" if sub else ""), verb) for verb in verbs}
    return rows


def test_can_i_list_is_the_least_privilege_table(kube: Kube, release: str) -> None:
    """What the installed ServiceAccount may do, as the API server says, is docs/rbac.md's
    table for the chart's defaults: in a team namespace the cluster rows, in the release
    namespace the release rows too (issue 35)."""
    from tests.unit.test_chart import RBAC_SETTINGS, rbac_table

    when = RBAC_SETTINGS[0][2]  # the defaults: this release is installed with them
    table = [row for row in rbac_table() if row[4] in when]
    for namespace, scopes in (("any-team", {"cluster"}), (NS, {"cluster", "release"})):
        expected = {(g, r, v) for scope, g, r, v, _w in table if scope in scopes}
        got = _can_i_list(kube, namespace)
        assert got == expected, (namespace, sorted(got - expected), sorted(expected - got))


def _phase(kube: Kube, ns: str, name: str) -> str | None:
    tj = kube.maybe_get("trainingjob", name, "-n", ns)
    return None if tj is None else (tj.get("status") or {}).get("phase")


def _pytorch_job(namespace: str, name: str) -> dict[str, Any]:
    return job(name, namespace=namespace).placement("rack").manifest()


class _SaOperator:
    """`trainop run` as a child process, authenticated only by the ServiceAccount token."""

    def __init__(self, kubeconfig: Path, config: Path, log: Path) -> None:
        self.kubeconfig, self.config, self.log = kubeconfig, config, log
        self.metrics_port, self.health_port = free_port(), free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> _SaOperator:
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "trainop.cli.main",
                    "run",
                    "--kubeconfig",
                    str(self.kubeconfig),
                    "--config",
                    str(self.config),
                    "--metrics-port",
                    str(self.metrics_port),
                    "--health-port",
                    str(self.health_port),
                    "--restart-backoff-seconds",
                    "1",
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"operator exited:\n{self.log_text()}"
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.health_port}/healthz", timeout=1
                ):
                    return self
            except OSError:
                time.sleep(0.3)
        raise AssertionError(f"operator not healthy in 60 s:\n{self.log_text()}")

    def __exit__(self, *exc: object) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def metrics(self) -> str:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as r:
            return str(r.read().decode())


def _sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample `name` whose labels include `labels`, from /metrics text."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    return None


def test_operator_with_chart_credentials_runs_a_job_end_to_end(
    kube: Kube,
    release: str,
    sa_kubeconfig: Path,
    namespace: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    assert "operator" not in request.fixturenames
    # The operator config exactly as the chart mounts it.
    config = tmp_path / "config.yaml"
    config.write_text(kube.get("configmap", f"{release}-config", "-n", NS)["data"]["config.yaml"])
    # The same token works for kubectl and is who we think it is.
    who = _sa_kubectl(sa_kubeconfig, "auth", "whoami", "-o", "json")
    assert who.returncode == 0, who.stderr
    assert json.loads(who.stdout)["status"]["userInfo"]["username"] == (
        f"system:serviceaccount:{NS}:{SA}"
    )

    kube.apply(_pytorch_job(namespace, "rbac-proof"))
    # No other operator runs against this cluster (the session `operator` fixture is not up
    # yet): nothing gives the job a status or a finalizer.
    time.sleep(3)
    tj = kube.get("trainingjob", "rbac-proof", "-n", namespace)
    assert not tj.get("status") and not tj["metadata"].get("finalizers"), (
        "another trainop operator is running against the cluster; this test needs to be alone: "
        f"{tj.get('status')} {tj['metadata'].get('finalizers')}"
    )

    op = _SaOperator(sa_kubeconfig, config, tmp_path / "operator.log")
    with op:
        try:
            kube.wait_for(
                "rbac-proof Running",
                lambda: _phase(kube, namespace, "rbac-proof") == "Running",
                timeout=90,
            )
            tj = kube.get("trainingjob", "rbac-proof", "-n", namespace)
            assert not tj["metadata"].get("finalizers")  # a deletion never waits on trainop
            pods = kube.get("pods", "-n", namespace, "-l", "trainop.dev/job-name=rbac-proof")
            names = sorted(p["metadata"]["name"] for p in pods["items"])
            assert names == ["rbac-proof-worker-0", "rbac-proof-worker-1"]
            assert kube.maybe_get("service", "rbac-proof", "-n", namespace)
            for name in names:
                kube.run("annotate", "pod", name, "-n", namespace, "trainop.dev/fake-exit-code=0")
            kube.wait_for(
                "rbac-proof Succeeded",
                lambda: _phase(kube, namespace, "rbac-proof") == "Succeeded",
                timeout=90,
            )
            reasons = {e["reason"] for e in kube.events_for(namespace, "rbac-proof")}
            assert "JobSucceeded" in reasons, reasons  # the RBAC to post Events
            assert (
                _sample(op.metrics(), "trainop_jobs", phase="Succeeded", framework="pytorch") == 1
            )
            # Deleting the job while the operator runs lets kopf drop its finalizer.
            kube.run("delete", "trainingjob", "rbac-proof", "-n", namespace, "--wait=false")
            kube.wait_for(
                "rbac-proof deleted",
                lambda: kube.maybe_get("trainingjob", "rbac-proof", "-n", namespace) is None,
                timeout=60,
            )
        except AssertionError:
            print("---- RBAC-proof operator log ----\n" + op.log_text()[-6000:])
            raise
    denied = [line for line in op.log_text().splitlines() if FORBIDDEN_LOG.search(line)]
    assert denied == [], "the operator hit RBAC denials:\n" + "\n".join(denied[:20])


@pytest.mark.parametrize(
    "args",
    [
        ("get", "secrets", "-n", "kube-system"),
        ("get", "secrets", "--all-namespaces"),
        ("get", "configmaps", "-n", "kube-system"),
        ("delete", "nodes", "--all", "--dry-run=server"),
        ("label", "nodes", "--all", "pwned=true", "--dry-run=server"),
        (
            "create",
            "clusterrolebinding",
            "pwned",
            "--clusterrole=cluster-admin",
            f"--serviceaccount={NS}:{SA}",
            "--dry-run=server",
        ),
        ("create", "token", "default", "-n", "kube-system"),
        ("delete", "crd", "trainingjobs.trainop.dev", "--dry-run=server"),
        ("create", "deployment", "pwned", "-n", NS, "--image=busybox", "--dry-run=server"),
    ],
    ids=lambda a: " ".join(a[:3]),
)
def test_chart_credentials_are_denied(sa_kubeconfig: Path, args: tuple[str, ...]) -> None:
    # Mutations are server dry-runs: authorization is checked first, so a wrongly granted
    # permission would fail this test without changing the cluster.
    proc = _sa_kubectl(sa_kubeconfig, *args)
    assert proc.returncode != 0, f"kubectl {' '.join(args)} was allowed:\n{proc.stdout}"
    assert "forbidden" in proc.stderr.lower(), proc.stderr

"""`trainop run`: starts the operator (kopf) with metrics and health endpoints.

Wires the process together before kopf starts: the kube client's rate limit
(`trainop.kube.client`), the leader election timings (`trainop.kube.lease`, run by
`trainop.handlers.operator`) and which replica exports the cluster gauges (`trainop.metrics`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from trainop.kube.lease import Elector
    from trainop.planner import OperatorConfig


@click.command("run")
@click.option("--kubeconfig", envvar="KUBECONFIG", help="Kubeconfig (in-cluster credentials win).")
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    help="Watch only these namespaces (repeatable); default: cluster-wide.",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, exists=True),
    help="Operator config YAML (topology levels, fabric profiles, catalog overrides).",
)
@click.option("--metrics-port", type=int, default=8080, show_default=True, help="Port of /metrics.")
@click.option(
    "--health-port",
    type=int,
    default=8081,
    show_default=True,
    help="Port of the liveness endpoint /healthz.",
)
@click.option(
    "--restart-backoff-seconds",
    type=float,
    default=None,
    help="First gang-restart delay; doubles per restart. [default: config file, else 10]",
)
@click.option(
    "--restart-backoff-max-seconds",
    type=float,
    default=None,
    help="Cap of the restart delay. [default: config file, else 300]",
)
@click.option(
    "--leader-elect",
    is_flag=True,
    help="Run as one of several replicas: only the holder of a coordination.k8s.io Lease acts.",
)
@click.option(
    "--lease-name", default="trainop-operator", show_default=True, help="Name of that Lease."
)
@click.option(
    "--lease-namespace",
    envvar="POD_NAMESPACE",
    default="default",
    show_default=True,
    help="Namespace of that Lease (env POD_NAMESPACE).",
)
@click.option(
    "--lease-duration-seconds",
    type=click.IntRange(min=1),
    default=15,
    show_default=True,
    help="How long a Lease holds without renewal before a standby may take it over.",
)
@click.option(
    "--renew-deadline-seconds",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="A leader that cannot renew its Lease for this long stops acting.",
)
@click.option(
    "--retry-period-seconds",
    type=click.FloatRange(min=0, min_open=True),
    default=2.0,
    show_default=True,
    help="How often each replica tries to acquire or renew the Lease.",
)
@click.option(
    "--kube-api-qps",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Client-side limit of trainop's own API requests per second, after --kube-api-burst "
    "(0: no limit; kopf's watches are not counted).",
)
@click.option(
    "--kube-api-burst",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="Requests that may go at once before --kube-api-qps applies.",
)
@click.option(
    "--progress-port",
    type=click.IntRange(min=0, max=65535),
    default=0,
    show_default=True,
    help="Port of the progress report endpoint POST/GET /v1/progress (0: off; docs/progress.md).",
)
@click.option(
    "--progress-url",
    default="",
    help="The URL pods send progress reports to (e.g. the chart's headless Service, "
    "http://trainop-progress.trainop-system.svc:8082/v1/progress); empty: pods are not wired.",
)
@click.option(
    "--progress-interval",
    type=click.FloatRange(min=1),
    default=None,
    help="Seconds between a pod's reports, and between two status.progress writes of a job "
    "(default: the config file's progress.intervalSeconds, else 10).",
)
@click.option(
    "--progress-tls",
    type=click.Choice(["managed", "secret", "off"]),
    default="managed",
    show_default=True,
    help="TLS of the progress endpoint: managed (a CA and certificate trainop keeps in "
    "--progress-tls-secret, renewed before expiry), secret (serve that Secret's tls.crt/tls.key, "
    "e.g. cert-manager's; never written), off (plain HTTP, with a warning). docs/progress.md.",
)
@click.option(
    "--progress-tls-secret",
    default="trainop-progress-tls",
    show_default=True,
    help="The Secret (in --lease-namespace, the operator's own) holding the endpoint's TLS.",
)
@click.option(
    "--progress-tls-name",
    "progress_tls_names",
    multiple=True,
    help="More DNS names or IPs the managed certificate is valid for (repeated); the "
    "--progress-url host always is.",
)
@click.option("--verbose", is_flag=True, help="Debug logging.")
def run(
    kubeconfig: str | None,
    namespaces: tuple[str, ...],
    config_path: str | None,
    metrics_port: int,
    health_port: int,
    restart_backoff_seconds: float | None,
    restart_backoff_max_seconds: float | None,
    leader_elect: bool,
    lease_name: str,
    lease_namespace: str,
    lease_duration_seconds: int,
    renew_deadline_seconds: float,
    retry_period_seconds: float,
    kube_api_qps: float,
    kube_api_burst: int,
    progress_port: int,
    progress_url: str,
    progress_interval: float | None,
    progress_tls: str,
    progress_tls_secret: str,
    progress_tls_names: tuple[str, ...],
    verbose: bool,
) -> None:
    """Run the operator against the cluster in KUBECONFIG (or in-cluster)."""
    if kubeconfig:
        # Before kubernetes is imported (trainop.kube imports it): kubernetes.config reads
        # KUBECONFIG once, at import, and kopf's login (load_kube_config() without a path)
        # uses that value.
        os.environ["KUBECONFIG"] = kubeconfig
    if leader_elect:
        _check_lease_timing(lease_duration_seconds, renew_deadline_seconds, retry_period_seconds)

    import kopf
    from prometheus_client import start_http_server

    from trainop import metrics
    from trainop.handlers import heap
    from trainop.handlers import operator as handlers
    from trainop.handlers.shell import Shell
    from trainop.kube.client import load_kube_config, set_rate_limit

    _configure_logging(verbose)
    heap.limit_arenas()  # before the API client's threads: see trainop.handlers.heap
    load_kube_config(kubeconfig)
    set_rate_limit(kube_api_qps, kube_api_burst)
    progress = (progress_url, progress_interval)
    config = _operator_config(
        config_path, restart_backoff_seconds, restart_backoff_max_seconds, progress
    )
    tls = _tls(
        progress_tls, lease_namespace, progress_tls_secret, config.progress_url, progress_tls_names
    )
    shell = Shell.made(config, namespaces=list(namespaces), progress_port=progress_port, tls=tls)
    if leader_elect:
        shell.elector = _elector(
            lease_name,
            lease_namespace,
            lease_duration_seconds,
            renew_deadline_seconds,
            retry_period_seconds,
        )
        shell.renew_seconds = retry_period_seconds
    registry = kopf.OperatorRegistry()
    handlers.register(shell, registry)  # Kueue's kinds too, in that mode
    # Only the replica that acts (leads, and has listed the cluster) exports the gauges
    # that describe the cluster, so sum(trainop_jobs) over all replicas counts each job once.
    metrics.LEADERSHIP.probe = lambda: shell.state.synced and shell.state.leader
    start_http_server(metrics_port)
    asyncio.run(
        kopf.operator(
            clusterwide=not namespaces,
            namespaces=list(namespaces),
            liveness_endpoint=f"http://0.0.0.0:{health_port}/healthz",
            standalone=True,
            registry=registry,
        )
    )


def _tls(mode: str, namespace: str, secret: str, url: str, names: tuple[str, ...]) -> Any:
    """The endpoint's TlsKeeper (handlers.tls), None for --progress-tls off; a URL whose
    scheme disagrees with the mode is refused, naming both flags."""
    from urllib.parse import urlsplit

    from trainop.handlers.tls import TlsKeeper

    scheme = urlsplit(url).scheme
    if url and (scheme == "https") != (mode != "off"):
        raise click.BadParameter(
            f"--progress-url is {scheme}:// but --progress-tls is {mode}: use https:// with "
            "managed or secret, http:// only with off",
            param_hint="'--progress-url' / '--progress-tls'",
        )
    if mode == "off":
        return None
    host = urlsplit(url).hostname or ""
    return TlsKeeper(mode, namespace, secret, [n for n in (host, *names) if n] or ["localhost"])


def _check_lease_timing(duration: int, renew_deadline: float, retry_period: float) -> None:
    """Refuse Lease timings a leader could not keep, naming the three flags and an example."""
    from trainop.kube.lease import timing_error

    why = timing_error(duration, renew_deadline, retry_period)
    if why is not None:
        raise click.BadParameter(
            f"{why}; e.g. 15 / 10 / 2 (client-go's defaults)",
            param_hint="'--lease-duration-seconds' / '--renew-deadline-seconds' / "
            "'--retry-period-seconds'",
        )


def _configure_logging(verbose: bool) -> None:
    """INFO (DEBUG with --verbose) to stderr, with kopf's per-object success lines muted."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    if not verbose:
        # kopf logs "Handler ... succeeded." for every pod and job event: thousands of lines
        # a minute in a burst, and CPU. Its warnings and errors still show; --verbose shows all.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)


def _operator_config(
    config_path: str | None,
    restart_backoff_seconds: float | None,
    restart_backoff_max_seconds: float | None,
    progress: tuple[str, float | None] = ("", None),
) -> OperatorConfig:
    """The config file's settings (or the defaults), with the restart-backoff and progress
    flags on top."""
    import dataclasses

    from trainop.planner import OperatorConfig

    config = OperatorConfig()
    if config_path:
        from trainop.config import load_operator_config

        config = load_operator_config(config_path)
    return dataclasses.replace(
        config,
        # A flag wins; without one the config file's value (or the built-in default) stays.
        restart_backoff_seconds=config.restart_backoff_seconds
        if restart_backoff_seconds is None
        else restart_backoff_seconds,
        restart_backoff_max_seconds=config.restart_backoff_max_seconds
        if restart_backoff_max_seconds is None
        else restart_backoff_max_seconds,
        # The flags win; without them the config file's `progress:` (or nothing) stays.
        progress_url=progress[0] or config.progress_url,
        progress_interval=progress[1] if progress[1] is not None else config.progress_interval,
    )


def _elector(
    lease_name: str,
    lease_namespace: str,
    duration_seconds: int,
    renew_deadline_seconds: float,
    retry_period_seconds: float,
) -> Elector:
    """The Lease elector of this replica, named after its host and process."""
    import socket

    from trainop.kube.lease import Elector

    return Elector(
        lease_name,
        lease_namespace,
        f"{socket.gethostname()}-{os.getpid()}",
        duration_seconds=duration_seconds,
        renew_deadline_seconds=renew_deadline_seconds,
        retry_period_seconds=retry_period_seconds,
    )

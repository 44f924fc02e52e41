"""`trainop explain NAME -n NS`: why a TrainingJob is pending, or where it runs, on one screen.

It reads the job, its pods, events, queue (and the queue's ancestors) and its PriorityClass
through trainop.kube.reads; trainop.explain writes the screen."""

from __future__ import annotations

import sys

import click


@click.command("explain")
@click.argument("name")
@click.option("-n", "--namespace", default="default", show_default=True)
@click.option("--kubeconfig", envvar="KUBECONFIG", help="Kubeconfig to use.")
def explain(name: str, namespace: str, kubeconfig: str | None) -> None:
    """Queue position, quota numbers (each level of a queue tree), the failing constraint,
    placement, pods and events."""
    from trainop.explain import explain_text
    from trainop.kube.client import load_kube_config
    from trainop.kube.reads import job_context

    try:
        load_kube_config(kubeconfig)
        ctx = job_context(namespace, name)
    except Exception as exc:  # connection or auth problems: one line, no traceback
        click.echo(f"error: cannot read from the cluster: {exc}", err=True)
        sys.exit(1)
    if ctx is None:
        click.echo(f"error: TrainingJob {namespace}/{name} not found", err=True)
        sys.exit(1)
    click.echo(
        explain_text(
            ctx["job"],
            ctx["pods"],
            ctx["events"],
            ctx["queue"],
            ctx["ancestors"],
            ctx.get("priority_class"),
        )
    )

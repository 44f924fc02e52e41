"""`trainop convert FILE...`: Kubeflow jobs (PyTorchJob, TFJob, MPIJob, PaddleJob, XGBoostJob,
JAXJob, TrainJob) -> TrainingJobs, and Kubeflow Trainer runtimes -> trainop runtimes, as a
multi-document YAML stream on stdout (or -o FILE). A TrainJob becomes a TrainingJob that
names the converted runtime in spec.runtimeRef (docs/runtimes.md).

Every input field with no trainop equivalent is one stderr line, `<Kind> <ns>/<name>:
<field path>: <what to do>`. Exit codes: 0 converted; 2 an input is unreadable, of a kind
trainop does not convert, cannot be converted (e.g. a TrainJob whose runtime is missing:
the line names it), or converts to a job trainop would refuse (that job is still written,
so it can be fixed). The mapping lives in `trainop.convert`; docs/migrate-from-kubeflow.md.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from trainop.cli.inputs import EXIT_INVALID, InputError, exit_invalid, read_documents
from trainop.convert import Converted, convert_documents, is_runtime
from trainop.yamlio import dump_yaml_all

_file = click.Path(dir_okay=False, exists=True, allow_dash=True)


def _read(paths: tuple[str, ...]) -> list[dict[str, Any]]:
    if [p for p in paths if p == "-"][1:]:
        exit_invalid("only one input can be read from standard input ('-')")
    try:
        return [doc for p in paths for doc in read_documents(p)]
    except InputError as exc:
        exit_invalid(str(exc))


def report(results: list[Converted]) -> bool:
    """Print notes and errors to stderr; True when some result has an error."""
    failed = False
    for r in results:
        for note in r.notes:
            click.echo(f"{r.source}: {note.path}: {note.message}", err=True)
        for err in r.errors:
            click.echo(f"error: {r.source}: {err}", err=True)
            failed = True
    return failed


@click.command("convert")
@click.argument("files", nargs=-1, required=True, metavar="FILE...", type=_file)
@click.option(
    "--runtime",
    "runtime_files",
    multiple=True,
    metavar="FILE",
    type=_file,
    help="ClusterTrainingRuntime/TrainingRuntime objects the TrainJobs name (repeatable), "
    "used to check them, not converted; runtimes inside FILE... are converted too.",
)
@click.option(
    "-o",
    "--output",
    "output",
    metavar="FILE",
    type=click.Path(dir_okay=False, writable=True),
    help="Write the TrainingJobs here instead of standard output.",
)
def convert(files: tuple[str, ...], runtime_files: tuple[str, ...], output: str | None) -> None:
    """Convert Kubeflow training jobs and runtimes in FILE... ('-' for stdin) into
    TrainingJobs and trainop runtimes.

    Each field with no trainop equivalent is listed on stderr with what to do. Exit 0:
    converted. 2: unreadable input, unknown kind, missing runtime, or a result trainop
    would refuse (the message names the field)."""
    docs = _read(files)
    runtimes = _read(runtime_files) if runtime_files else []
    for i, doc in enumerate(runtimes):
        if not is_runtime(doc):
            exit_invalid(
                f"--runtime: object {i + 1} is a {doc.get('apiVersion')} {doc.get('kind')}, "
                "expected trainer.kubeflow.org/v1alpha1 ClusterTrainingRuntime or TrainingRuntime"
            )
    results = convert_documents(docs, runtimes)
    if not results:
        exit_invalid(f"no Kubeflow job or runtime in {', '.join(files)}")
    failed = report(results)
    text = dump_yaml_all([r.job for r in results if r.job is not None])
    if output:
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as exc:
            exit_invalid(f"-o {output}: cannot write: {exc.strerror or exc}")
    elif text:
        click.echo(text, nl=False)
    sys.exit(EXIT_INVALID if failed else 0)

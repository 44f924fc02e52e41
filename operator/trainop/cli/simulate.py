"""`trainop simulate --nodes N --queues Q --jobs J`: replay jobs through the real queueing code.

The engine is `trainop.queueing.simulate` (pure; tests and the benchmark call it too); this
module reads the files, runs it and prints per job: submitted, admitted (first time),
started (last run), finished, the nodes of its last run, preemptions and the reasons it
waited, as a table or JSON; the JSON also gives each job's `placements` over time
(`[{start, end, nodes}]`, one per run: a preempted or migrated job has several).
`--plot OUT.png` also draws the timeline (cli.timeline: a Gantt chart per rack or, with
`--plot-by queue`, per queue, and the GPUs held over time). QUEUES.yaml holds TrainingQueues and may add Namespaces (labels
for namespaceSelector) and PriorityClasses; JOBS.yaml holds TrainingJobs with the
trainop.dev/sim-submit-seconds / sim-duration-seconds annotations and may hold
PriorityClasses too.

Exit codes: 0 the simulation ran (jobs that never ran are shown as such); 2 invalid input.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

import click

from trainop.cli.inputs import InputError, exit_invalid, read_documents, read_objects
from trainop.cli.timeline import BY, PlotError, check_path, draw
from trainop.config import ConfigError, load_operator_config
from trainop.planner import OperatorConfig
from trainop.queueing.simulate import (
    JobResult,
    SimInputError,
    SimResult,
    class_min_runs,
    simulate,
    split_documents,
)

_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def compress_nodes(names: Iterable[str]) -> str:
    """h100-a-01,h100-a-02,h100-a-03,h100-b-01 -> h100-a-[01-03],h100-b-01."""
    out: list[str] = []
    run: list[tuple[str, str]] = []  # (prefix, digits) of consecutive numbers

    def flush() -> None:
        if not run:
            return
        prefix = run[0][0]
        if len(run) == 1:
            out.append(prefix + run[0][1])
        else:
            out.append(f"{prefix}[{run[0][1]}-{run[-1][1]}]")
        run.clear()

    for name in sorted(set(names)):
        m = _NUMBERED.match(name)
        if not m:
            flush()
            out.append(name)
            continue
        prefix, digits = m.group(1), m.group(2)
        if run and (
            run[-1][0] != prefix
            or len(run[-1][1]) != len(digits)
            or int(run[-1][1]) + 1 != int(digits)
        ):
            flush()
        run.append((prefix, digits))
    flush()
    return ",".join(out)


def _t(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def format_table(result: SimResult) -> str:
    """The human-readable report: one row per job, then why jobs waited, then queue peaks."""
    header = (
        "JOB",
        "QUEUE",
        "GPUS",
        "PRIO",
        "SUBMIT",
        "ADMIT",
        "START",
        "FINISH",
        "PREEMPT",
        "STATE",
        "NODES",
    )
    rows = [header]
    for j in result.jobs:
        rows.append(
            (
                j.key,
                j.queue or "-",
                str(j.gpus),
                str(j.priority),
                _t(j.submitted),
                _t(j.admitted),
                _t(j.started),
                _t(j.finished),
                str(j.preemptions),
                j.state,
                compress_nodes(j.nodes) or "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    numeric = {2, 3, 4, 5, 6, 7, 8}
    lines = []
    for r in rows:
        cells = [
            r[i].rjust(widths[i]) if i in numeric else r[i].ljust(widths[i])
            for i in range(len(header))
        ]
        lines.append("  ".join(cells).rstrip())
    notes = _notes(result.jobs)
    if notes:
        lines += ["", "waits and preemptions (time in seconds):", *notes]
    peaks = result.peak_usage()
    if peaks:
        lines += ["", "queue peaks (GPUs used / borrowed):"]
        for queue in sorted(peaks):
            parts = [f"{g} {u}/{b}" for g, (u, b) in sorted(peaks[queue].items())]
            lines.append(f"  {queue}: {', '.join(parts)}")
    lines.append(f"\nsimulated until t={_t(result.end)}s")
    return "\n".join(lines)


def _notes(jobs: Iterable[JobResult]) -> list[str]:
    entries: list[tuple[float, int, str]] = []
    for j in jobs:
        for w in j.waits:
            entries.append((w.time, 1, f"  {w.time:>7g}  {j.key} waits: {w.reason}: {w.message}"))
        for run in j.runs:
            if run.preempted_by and run.ended is not None:
                entries.append(
                    (
                        run.ended,
                        0,  # an eviction before the waits it causes at the same instant
                        f"  {run.ended:>7g}  {j.key} preempted ({run.preempt_reason}) by "
                        f"{run.preempted_by}",
                    )
                )
    entries.sort(key=lambda e: (e[0], e[1]))
    return [e[2] for e in entries]


def placements(job: JobResult) -> list[dict[str, Any]]:
    """The job's placements over time (issue 37): one per run, from its start to its end
    (None: still running at the end), its nodes, and why it ended early (Reclaim, Priority,
    Migration) when it did; a migrated job has one per placement it ran on."""
    return [
        {
            "start": r.started,
            "end": r.ended,
            "nodes": list(r.nodes),
            **({"endedBy": r.preempt_reason} if r.preempt_reason else {}),
        }
        for r in job.runs
    ]


def result_json(result: SimResult) -> dict[str, Any]:
    jobs = []
    for j in result.jobs:
        item = asdict(j)
        item["firstAdmitted"] = j.first_admitted
        item["waitReasons"] = list(j.wait_reasons)
        item["placements"] = placements(j)
        jobs.append(item)
    peaks = {
        q: {g: {"used": u, "borrowed": b} for g, (u, b) in groups.items()}
        for q, groups in result.peak_usage().items()
    }
    return {"jobs": jobs, "queuePeaks": peaks, "end": result.end}


_file = click.Path(dir_okay=False, exists=True, allow_dash=True)


@click.command("simulate")
@click.option(
    "--nodes",
    "nodes_file",
    required=True,
    metavar="NODES.yaml",
    type=_file,
    help="Nodes, as `kubectl get nodes -o yaml` prints them.",
)
@click.option(
    "--queues",
    "queues_file",
    required=True,
    metavar="QUEUES.yaml",
    type=_file,
    help="TrainingQueues (plus optional Namespaces and PriorityClasses).",
)
@click.option(
    "--jobs",
    "jobs_file",
    required=True,
    metavar="JOBS.yaml",
    type=_file,
    help="TrainingJobs with trainop.dev/sim-submit-seconds and "
    "trainop.dev/sim-duration-seconds annotations.",
)
@click.option(
    "--config",
    "config_file",
    metavar="CONFIG.yaml",
    type=_file,
    help="Operator config: topologyLevels, fabricProfiles, catalogOverrides.",
)
@click.option(
    "--startup-seconds",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds from admission to start (image pull, scheduling).",
)
@click.option(
    "-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@click.option(
    "--plot",
    "plot_file",
    metavar="OUT.png",
    help="Also draw the timeline to this PNG: a Gantt chart of the runs and the GPUs held "
    "over time (needs matplotlib).",
)
@click.option(
    "--plot-by",
    type=click.Choice(list(BY)),
    default="rack",
    show_default=True,
    help="The Gantt chart's lanes: one per rack (topology level above the node) or per queue.",
)
def simulate_cmd(
    nodes_file: str,
    queues_file: str,
    jobs_file: str,
    config_file: str | None,
    startup_seconds: float,
    output: str,
    plot_file: str | None,
    plot_by: str,
) -> None:
    """Replay JOBS through the real queueing and placement code on NODES and QUEUES and print
    when each job was admitted, started and finished, where, and why it waited.

    Exit 0: simulated. 2: invalid input."""
    given = [nodes_file, queues_file, jobs_file, config_file]
    if given.count("-") > 1:
        exit_invalid("only one input can be read from standard input ('-')")
    try:
        if plot_file is not None:
            check_path(plot_file)  # before the run: a bad name fails at once
        config = load_operator_config(config_file) if config_file else OperatorConfig()
        nodes = read_objects(nodes_file, "Node", "--nodes")
        docs = read_documents(queues_file) + read_documents(jobs_file)
        queues, jobs, namespaces, classes, default = split_documents(docs)
        min_runs = class_min_runs(docs)
        if not jobs:
            raise InputError(f"--jobs {jobs_file}: no TrainingJob document")
        result = simulate(
            nodes,
            queues,
            jobs,
            namespaces=namespaces,
            priority_classes=classes,
            default_priority=default,
            config=config,
            startup_seconds=startup_seconds,
            min_runs=min_runs,
        )
    except ConfigError as exc:
        exit_invalid(f"--config: {exc}")
    except (InputError, SimInputError, PlotError) as exc:
        exit_invalid(str(exc))
    if plot_file is not None:
        try:
            draw(result, nodes, plot_file, plot_by, config.topology_levels)
        except PlotError as exc:
            exit_invalid(str(exc))
    if output == "json":
        click.echo(json.dumps(result_json(result), indent=2))
    else:
        click.echo(format_table(result))

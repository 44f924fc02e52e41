"""`simulate` end to end: the real queueing and planner code over timed jobs, and the CLI."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from tests.builders import H100, fleet_nodes, job, queue
from tests.unit.manifest_helpers import EXAMPLES, FLEET_NODES
from trainop.api import constants as c
from trainop.cli.main import cli
from trainop.cli.simulate import compress_nodes
from trainop.planner import OperatorConfig
from trainop.queueing import SimInputError, SimResult, simulate

SIM = EXAMPLES / "sim"


def h100_nodes(count: int) -> list[dict[str, Any]]:
    """The first `count` DGX H100 nodes of the default fleet (rack h100-a, then h100-b)."""
    nodes = [n for n in fleet_nodes() if n["metadata"]["name"].startswith("h100-")]
    return nodes[:count]


def tj(
    key: str,
    submit: float,
    duration: float,
    gpus: int = 8,
    *,
    priority: str | None = None,
    queue: str | None = None,
    template: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A PyTorch job of gpus/8 pods x 8 H100 GPUs (or one pod of `gpus`)."""
    ns, name = key.split("/")
    replicas, per = (gpus // 8, 8) if gpus % 8 == 0 else (1, gpus)
    builder = job(name, namespace=ns).workers(replicas, per, template)
    builder.placement("rack", "Preferred", [H100])
    if priority:
        builder.priority(priority)
    if queue:
        builder.queue(queue)
    body = builder.build()
    body["metadata"]["annotations"] = {
        c.ANNOTATION_SIM_SUBMIT: str(submit),
        c.ANNOTATION_SIM_DURATION: str(duration),
    }
    return body


def tq(name: str, gpus: int, *, cohort: str | None = None, **spec: Any) -> dict[str, Any]:
    builder = queue(name).serves(*spec.pop("namespaces", [f"team-{name}"]), default=True)
    builder.quota("h100", gpus, H100)
    if cohort:
        builder.cohort(cohort)
    for key, value in spec.items():
        builder.set(key, value)
    return builder.build()


def times(result: SimResult, key: str) -> tuple[Any, ...]:
    j = result.job(key)
    return (j.admitted, j.started, j.finished, j.preemptions)


def test_quota_serializes_a_queue() -> None:
    got = simulate(
        h100_nodes(8),
        [tq("nlp", 16)],
        [tj("team-nlp/a", 0, 100, 16), tj("team-nlp/b", 10, 50, 16)],
    )
    assert times(got, "team-nlp/a") == (0, 0, 100, 0)
    assert times(got, "team-nlp/b") == (100, 100, 150, 0)
    assert got.job("team-nlp/b").wait_reasons == ("Quota",)
    assert got.job("team-nlp/b").waits[0].time == 10


def test_borrowing_then_reclaim() -> None:
    got = simulate(
        h100_nodes(16),
        [tq("nlp", 64, cohort="pool"), tq("vision", 64, cohort="pool")],
        [tj("team-vision/v1", 0, 1000, 96), tj("team-nlp/n1", 100, 200, 64)],
    )
    v1, n1 = got.job("team-vision/v1"), got.job("team-nlp/n1")
    assert times(got, "team-nlp/n1") == (100, 100, 300, 0)
    # v1 borrowed 32 of nlp's H100s, lost them to the reclaim, and ran again from scratch.
    assert times(got, "team-vision/v1") == (300, 300, 1300, 1)
    first = v1.runs[0]
    assert (first.admitted, first.ended, first.preempted_by, first.preempt_reason) == (
        0,
        100,
        "team-nlp/n1",
        "Reclaim",
    )
    assert "preempting 1 job (team-vision/v1) (Reclaim)" in n1.waits[0].message
    assert got.peak_usage()["vision"]["h100"] == (96, 32)


def test_priority_preemption_restarts_the_victim() -> None:
    got = simulate(
        h100_nodes(4),
        [tq("q", 16)],
        [tj("team-q/lo", 0, 500, 16), tj("team-q/hi", 100, 100, 16, priority="high")],
        priority_classes={"high": 100},
    )
    assert times(got, "team-q/hi") == (100, 100, 200, 0)
    assert times(got, "team-q/lo") == (200, 200, 700, 1)
    assert got.job("team-q/lo").runs[0].preempt_reason == "Priority"
    assert got.job("team-q/hi").priority == 100


def test_backfill_before_the_threshold() -> None:
    jobs = [
        tj("team-q/a", 0, 100, 16),
        tj("team-q/big", 10, 100, 32),
        tj("team-q/small", 20, 50, 16),
    ]
    got = simulate(h100_nodes(4), [tq("q", 64, backfillWaitSeconds=1000)], jobs)
    assert times(got, "team-q/small") == (20, 20, 70, 0)
    assert times(got, "team-q/big") == (100, 100, 200, 0)
    assert got.job("team-q/big").wait_reasons == ("NoFit",)


def test_head_holds_after_the_threshold() -> None:
    jobs = [
        tj("team-q/a", 0, 100, 16),
        tj("team-q/big", 10, 100, 32),
        tj("team-q/small", 20, 50, 16),
    ]
    got = simulate(h100_nodes(4), [tq("q", 64, backfillWaitSeconds=5)], jobs)
    assert times(got, "team-q/big") == (100, 100, 200, 0)
    assert times(got, "team-q/small") == (200, 200, 250, 0)
    assert "held for team-q/big" in got.job("team-q/small").waits[0].message


def test_fair_share_alternates_queues() -> None:
    jobs = [tj(f"team-a/a{i}", 0, 100) for i in range(4)]
    jobs += [tj(f"team-b/b{i}", 50, 100) for i in range(2)]
    got = simulate(h100_nodes(2), [tq("a", 64), tq("b", 64)], jobs)
    admitted = {j.key: j.admitted for j in got.jobs}
    assert admitted == {
        "team-a/a0": 0,
        "team-a/a1": 0,
        "team-a/a2": 100,
        "team-b/b0": 100,  # equal shares at 100: the older head, then b
        "team-a/a3": 200,
        "team-b/b1": 200,
    }


def test_startup_seconds_delay_the_start() -> None:
    got = simulate(h100_nodes(2), [tq("q", 16)], [tj("team-q/a", 5, 100)], startup_seconds=30)
    assert times(got, "team-q/a") == (5, 35, 135, 0)


def test_jobs_without_a_queue_use_the_builtin_queue() -> None:
    got = simulate(h100_nodes(2), [], [tj("lab/a", 0, 10, 16), tj("lab/b", 0, 10, 16)])
    assert [(j.queue, j.admitted, j.finished) for j in got.jobs] == [
        ("(built-in)", 0, 10),
        ("(built-in)", 10, 20),
    ]


def test_refused_and_invalid_jobs_never_run() -> None:
    privileged = {"spec": {"containers": [{"name": "t", "securityContext": {"privileged": True}}]}}
    got = simulate(
        h100_nodes(2),
        [tq("q", 16)],
        [
            tj("team-q/priv", 0, 10, template=privileged),
            tj("team-q/who", 0, 10, priority="nope"),
            tj("team-q/lost", 0, 10, queue="other"),
            tj("team-q/ok", 0, 10),
        ],
    )
    priv, who, lost = got.job("team-q/priv"), got.job("team-q/who"), got.job("team-q/lost")
    assert (priv.state, priv.wait_reasons, priv.admitted) == ("Refused", ("Policy",), None)
    assert "securityContext.privileged" in priv.waits[0].message
    assert (who.state, who.wait_reasons) == ("Invalid", ("Invalid",))
    assert (lost.state, lost.wait_reasons) == ("Refused", ("Policy",))
    assert "spec.queue" in lost.waits[0].message
    assert times(got, "team-q/ok") == (0, 0, 10, 0)


@pytest.mark.parametrize(
    ("mutate", "says"),
    [
        (lambda j: j["metadata"]["annotations"].pop(c.ANNOTATION_SIM_DURATION), "required"),
        (
            lambda j: j["metadata"]["annotations"].update({c.ANNOTATION_SIM_SUBMIT: "soon"}),
            "not a number of seconds",
        ),
    ],
    ids=["missing-duration", "bad-submit"],
)
def test_bad_annotations_are_input_errors(mutate: Any, says: str) -> None:
    job = tj("team-q/a", 0, 10)
    mutate(job)
    with pytest.raises(SimInputError, match=says):
        simulate(h100_nodes(1), [], [job])


def test_simulation_is_deterministic() -> None:
    jobs = [tj(f"team-a/a{i}", i, 100 + i, 8 * (1 + i % 3)) for i in range(8)]
    jobs += [tj(f"team-b/b{i}", i, 90, 16, priority="high" if i % 2 else None) for i in range(6)]
    queues = [tq("a", 24, cohort="p"), tq("b", 16, cohort="p")]
    one = simulate(h100_nodes(6), queues, jobs, priority_classes={"high": 10})
    two = simulate(h100_nodes(6), queues, list(reversed(jobs)), priority_classes={"high": 10})
    assert one.jobs == two.jobs
    assert all(j.finished is not None for j in one.jobs)


# --- the example scenario and the CLI ----------------------------------------------------------------
def example_result() -> SimResult:
    from trainop.queueing import split_documents

    docs = [
        d
        for f in ("queues.yaml", "jobs.yaml")
        for d in yaml.safe_load_all((SIM / f).read_text())
        if d
    ]
    queues, jobs, namespaces, classes, default = split_documents(docs)
    nodes = yaml.safe_load(FLEET_NODES.read_text())["items"]
    return simulate(
        nodes,
        queues,
        jobs,
        namespaces=namespaces,
        priority_classes=classes,
        default_priority=default,
    )


def test_example_scenario() -> None:
    got = example_result()
    expected = {
        "team-vision/resnet-a": (0, 0, 3000, 0),
        "team-vision/resnet-b": (3000, 3000, 6000, 1),  # borrowed, reclaimed at 600, re-run
        "team-vision/resnet-c": (3000, 3000, 4200, 0),  # over borrowingLimit, then held
        "team-nlp/gpt-pretrain": (600, 600, 3000, 0),  # reclaims its quota
        "team-vision/vit-tiny": (700, 700, 1000, 0),  # backfills past resnet-b
        "team-nlp/sweep": (3000, 3000, 4800, 1),  # preempted by urgent-eval, then held
        "team-nlp/urgent-eval": (1200, 1200, 1800, 0),
        "team-nlp/debug-shell": (None, None, None, 0),
    }
    assert {j.key: times(got, j.key) for j in got.jobs} == expected
    resnet_b, sweep = got.job("team-vision/resnet-b"), got.job("team-nlp/sweep")
    assert (resnet_b.runs[0].ended, resnet_b.runs[0].preempted_by) == (600, "team-nlp/gpt-pretrain")
    assert (sweep.runs[0].admitted, sweep.runs[0].preempt_reason) == (1000, "Priority")
    assert "borrowingLimit of 32" in got.job("team-vision/resnet-c").waits[0].message
    assert any("held for team-vision/resnet-b" in w.message for w in sweep.waits)
    assert got.job("team-nlp/debug-shell").state == "Refused"
    assert got.peak_usage()["vision"]["h100"] == (80, 16)


def run_cli(*args: str) -> Any:
    return CliRunner().invoke(cli, ["simulate", *args])


def test_cli_prints_the_table() -> None:
    res = run_cli(
        "--nodes",
        str(FLEET_NODES),
        "--queues",
        str(SIM / "queues.yaml"),
        "--jobs",
        str(SIM / "jobs.yaml"),
    )
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].split() == [
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
    ]
    row = next(line.split() for line in lines if line.startswith("team-nlp/gpt-pretrain"))
    assert row[:10] == [
        "team-nlp/gpt-pretrain",
        "nlp",
        "64",
        "100",
        "600",
        "600",
        "600",
        "3000",
        "0",
        "Finished",
    ]
    assert "team-vision/resnet-b preempted (Reclaim) by team-nlp/gpt-pretrain" in res.output
    assert "vision: a100 0/0, h100 80/16" in res.output


def test_cli_json() -> None:
    res = run_cli(
        "--nodes",
        str(FLEET_NODES),
        "--queues",
        str(SIM / "queues.yaml"),
        "--jobs",
        str(SIM / "jobs.yaml"),
        "-o",
        "json",
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    sweep = next(j for j in data["jobs"] if j["key"] == "team-nlp/sweep")
    assert (sweep["firstAdmitted"], sweep["admitted"], sweep["preemptions"]) == (1000, 3000, 1)
    assert sweep["waitReasons"] == ["Quota"]
    assert data["queuePeaks"]["nlp"]["h100"] == {"used": 80, "borrowed": 16}


def test_cli_input_errors_exit_2(tmp_path: Any) -> None:
    bad = tmp_path / "jobs.yaml"
    job = tj("team-q/a", 0, 10)
    del job["metadata"]["annotations"][c.ANNOTATION_SIM_DURATION]
    bad.write_text(yaml.safe_dump(job))
    res = run_cli(
        "--nodes", str(FLEET_NODES), "--queues", str(SIM / "queues.yaml"), "--jobs", str(bad)
    )
    assert res.exit_code == 2
    assert "trainop.dev/sim-duration-seconds: required" in res.output
    other = tmp_path / "queues.yaml"
    other.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    res = run_cli("--nodes", str(FLEET_NODES), "--queues", str(other), "--jobs", str(bad))
    assert res.exit_code == 2 and "expected TrainingQueue" in res.output


@pytest.mark.parametrize(
    ("names", "text"),
    [
        (["h100-a-01", "h100-a-02", "h100-a-03", "h100-b-01"], "h100-a-[01-03],h100-b-01"),
        (["n1", "n3"], "n1,n3"),
        (["x", "y"], "x,y"),
        ([], ""),
    ],
    ids=["ranges", "gaps", "unnumbered", "none"],
)
def test_compress_nodes(names: list[str], text: str) -> None:
    assert compress_nodes(names) == text


def test_template_node_selector_is_named_in_the_wait() -> None:
    """A job whose template selects no node waits, and the simulation says why."""
    job = tj("team-q/sel", 0, 10, template={"spec": {"nodeSelector": {"pool": "nowhere"}}})
    got = simulate(h100_nodes(2), [tq("q", 64)], [job])
    notes = got.job("team-q/sel").waits
    assert notes, "the job never ran, so it must have waited"
    assert any(
        "excluded by the Worker template's nodeSelector pool=nowhere" in w.message for w in notes
    ), notes


def test_spread_gang_waits_for_a_rack_then_takes_it() -> None:
    """a and b fill rack h100-a, c holds 2 nodes of h100-b until t=200. d (8 x 8) fits once
    a ends (t=100) but only across both racks (allreduce ~1.9x its one-rack ideal), so it
    waits (Topology) for rack h100-b, which frees up within its bound, and runs there."""
    jobs = [
        tj("ns/a", 0, 100, 32),
        tj("ns/b", 0, 1000, 32),
        tj("ns/c", 0, 200, 16),
        tj("ns/d", 10, 50, 64),
    ]
    result = simulate(h100_nodes(16), [], jobs)
    d = result.job("ns/d")
    assert "Topology" in d.wait_reasons, d.waits
    assert d.first_admitted == 200
    assert all(n.startswith("h100-b-") for n in d.nodes)
    run = d.runs[-1]
    assert run.allreduce_seconds == pytest.approx(run.ideal_allreduce_seconds)


def test_waiting_off_takes_the_spread_placement() -> None:
    jobs = [
        tj("ns/a", 0, 100, 32),
        tj("ns/b", 0, 1000, 32),
        tj("ns/c", 0, 200, 16),
        tj("ns/d", 10, 50, 64),
    ]
    config = OperatorConfig(topology_wait_seconds=0)
    d = simulate(h100_nodes(16), [], jobs, config=config).job("ns/d")
    assert d.first_admitted == 100  # as soon as it fits, across both racks
    run = d.runs[-1]
    assert run.allreduce_seconds is not None and run.ideal_allreduce_seconds is not None
    assert run.allreduce_seconds > 1.5 * run.ideal_allreduce_seconds


# --- migration (issue 37): a gang across two racks moves once one rack empties -----------------
def _spread_gang_scenario(enabled: bool, checkpoint: bool = True) -> SimResult:
    from trainop.planner import MigrationPolicy

    f1 = tj("team-q/f1", 0, 5000, 56)  # beyond topology-aware waiting: m starts spread
    f2 = tj("team-q/f2", 0, 100_000, 56)
    for f in (f1, f2):
        f["spec"]["placement"]["mode"] = "Required"
    ns, name = "team-q", "m"
    b = job(name, namespace=ns).workers(2, 8, None).placement("rack", "Preferred", [H100])
    if checkpoint:
        b.checkpoint()
    gang = b.build()
    gang["metadata"]["annotations"] = {
        c.ANNOTATION_SIM_SUBMIT: "1",
        c.ANNOTATION_SIM_DURATION: "20000",
    }
    config = OperatorConfig(migration=MigrationPolicy(enabled=enabled))
    return simulate(h100_nodes(16), [tq("q", 128)], [f1, f2, gang], config=config, comm_share=0.3)


@pytest.mark.parametrize(
    ("enabled", "checkpoint", "moves"),
    [
        pytest.param(False, True, 0, id="off-stays-spread"),
        pytest.param(True, False, 0, id="no-checkpoint-stays"),
        pytest.param(True, True, 1, id="moves-into-the-emptied-rack"),
    ],
)
def test_simulated_migration(enabled: bool, checkpoint: bool, moves: int) -> None:
    got = _spread_gang_scenario(enabled, checkpoint)
    m = got.job("team-q/m")
    assert sum(1 for r in m.runs if r.preempt_reason == "Migration") == moves
    racks = {n.split("-")[1] for n in m.nodes}  # h100-a-01 -> a
    assert len(racks) == (1 if moves else 2)
    if moves:
        first, second = m.runs
        assert first.ended == 5000 and second.started == 5000 + 300  # the move's cost
        assert second.allreduce_seconds < first.allreduce_seconds
        stays = _spread_gang_scenario(False)
        assert m.finished is not None and stays.job("team-q/m").finished is not None
        assert m.finished < stays.job("team-q/m").finished  # the gain paid for the cost
        assert any(e.kind == "migrate" for e in got.events)


def test_json_gives_each_jobs_placements_over_time() -> None:
    from trainop.cli.simulate import result_json

    out = result_json(_spread_gang_scenario(True))
    moved = next(j for j in out["jobs"] if j["key"] == "team-q/m")
    first, second = moved["placements"]
    assert (first["end"], first["endedBy"], len(first["nodes"])) == (5000, "Migration", 2)
    assert second["start"] == 5300 and "endedBy" not in second
    assert {n.split("-")[1] for n in second["nodes"]} == {"a"}  # one rack after the move
    assert second["nodes"] == list(moved["nodes"])  # `nodes`, as before: the last run's
    filler = next(j for j in out["jobs"] if j["key"] == "team-q/f1")
    assert [p["end"] for p in filler["placements"]] == [5000]

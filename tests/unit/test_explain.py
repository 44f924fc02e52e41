"""`trainop explain` formatting: pending jobs show the reason, running jobs their placement."""

from __future__ import annotations

import pytest

from trainop.explain import explain_text

JOB = {
    "metadata": {"name": "bert", "namespace": "nlp"},
    "spec": {
        "framework": {"name": "pytorch", "version": "2.4"},
        "queue": "nlp",
        "runPolicy": {"backoffLimit": 3},
    },
}
QUEUE = {
    "spec": {"cohort": "research", "weight": 2},
    "status": {"usage": [{"name": "h100", "quota": 64, "used": 48, "borrowed": 0, "pending": 32}]},
}


def test_pending_job_shows_reason_position_and_quota() -> None:
    job = {
        **JOB,
        "status": {
            "phase": "Queued",
            "pendingReason": "Quota",
            "queuePosition": 2,
            "pendingMessage": "needs 32 h100 GPUs; 16 of 64 free in queue nlp",
        },
    }
    text = explain_text(job, [], [], QUEUE)
    assert "Waiting:    Quota (position 2 in queue)" in text
    assert "needs 32 h100 GPUs" in text
    assert "h100" in text and "64" in text and "cohort=research" in text


def test_running_job_shows_placement_pods_and_events() -> None:
    job = {
        **JOB,
        "status": {
            "phase": "Running",
            "gpus": 16,
            "image": "nvcr.io/nvidia/pytorch:24.07-py3",
            "restartCount": 1,
            "placement": {
                "level": "rack",
                "domain": "block-a/rack-h100-a",
                "nodes": ["h100-a-01", "h100-a-02"],
                "span": {"rack": 1},
                "score": 1.0,
                "estimatedAllreduceSeconds": 0.005441,
                "allreduceBottleneck": "rack",
            },
            "conditions": [{"type": "Running", "status": "True", "reason": "AllPodsRunning"}],
        },
    }
    pods = [
        {
            "metadata": {"name": "bert-worker-0", "labels": {"trainop.dev/rank": "0"}},
            "spec": {"nodeName": "h100-a-01"},
            "status": {"phase": "Running"},
        }
    ]
    events = [
        {"type": "Normal", "reason": "GangPlaced", "message": "2 pods placed", "lastTimestamp": "t"}
    ]
    text = explain_text(job, pods, events, None)
    assert "rack block-a/rack-h100-a" in text
    assert "h100-a-01, h100-a-02" in text
    assert "bert-worker-0" in text and "rank=0" in text
    assert "GangPlaced" in text
    assert "Restarts:   1 (backoffLimit 3)" in text
    assert "Queue:      nlp (not found)" in text
    assert "est. allreduce of 1 GiB: 5.4 ms (widest link: rack)" in text


def test_the_admitting_queue_comes_from_status() -> None:
    job = {**JOB, "spec": {**JOB["spec"], "queue": None}, "status": {"queue": "team-default"}}
    text = explain_text(job, [], [], None)
    assert "Queue:      team-default (not found)" in text


def test_builtin_queue_is_explained() -> None:
    job = {**JOB, "spec": {**JOB["spec"], "queue": None}, "status": {"queue": "(built-in)"}}
    assert "(built-in): no TrainingQueue serves the namespace" in explain_text(job, [], [], None)


def test_invalid_queue_is_shouted() -> None:
    job = {
        **JOB,
        "status": {
            "phase": "Queued",
            "queue": "nlp",
            "pendingReason": "QueueInvalid",
            "pendingMessage": "queue nlp is invalid: spec.quotas[1].name: x",
        },
    }
    queue = {
        "spec": {},
        "status": {
            "conditions": [
                {"type": "Active", "status": "False", "message": "spec.quotas[1].name: x"}
            ]
        },
    }
    text = explain_text(job, [], [], queue)
    assert "Queue:      nlp (INVALID: spec.quotas[1].name: x)" in text
    assert "Waiting:    QueueInvalid" in text


def test_image_compatibility_and_releases_tried() -> None:
    tried = [
        "NGC 26.07 (nvcr.io/nvidia/pytorch:26.07-py3) [Native]: NoFit: needs 2 x 8 GPUs",
        "NGC 24.10 (nvcr.io/nvidia/pytorch:24.10-py3) [ForwardCompat]: placed",
    ]
    job = {
        **JOB,
        "status": {
            "phase": "Running",
            "image": "nvcr.io/nvidia/pytorch:24.10-py3",
            "compatibility": "ForwardCompat",
            "imageTried": tried,
        },
    }
    text = explain_text(job, [], [], None)
    assert "Image:      nvcr.io/nvidia/pytorch:24.10-py3  (ForwardCompat)" in text
    assert "releases tried: NGC 26.07" in text and "[ForwardCompat]: placed" in text


def _tq(name: str, parent: str | None, quota: int, used: int, limit: int | None = None) -> dict:
    q: dict = {"name": "h100", "gpus": quota}
    if limit is not None:
        q["borrowingLimit"] = limit
    spec: dict = {"quotas": [q], **({"parent": parent} if parent else {})}
    borrowed = max(0, used - quota)
    usage = [{"name": "h100", "quota": quota, "used": used, "borrowed": borrowed, "pending": 0}]
    return {"metadata": {"name": name}, "spec": spec, "status": {"usage": usage}}


def test_a_waiting_job_of_a_queue_tree_shows_each_level_and_the_one_that_holds_it() -> None:
    job = {
        **JOB,
        "status": {
            "phase": "Queued",
            "queue": "chat",
            "pendingReason": "Quota",
            "pendingMessage": "queue chat uses 20 of its 8 h100 GPUs and the job needs 4: held "
            "at nlp (level 2 of 3, root first): nlp would use 24 of its 16 h100 GPUs, "
            "borrowing 8, above its borrowingLimit of 4",
        },
    }
    chat = _tq("chat", "nlp", 8, 20)
    ancestors = [_tq("nlp", "org", 16, 20, limit=4), _tq("org", None, 32, 28)]
    lines = explain_text(job, [], [], chat, ancestors).splitlines()
    assert "Tree:       org > nlp > chat" in lines
    rows = [ln.split() for ln in lines if ln.startswith("  ") and ln.split()[0] in "123"]
    assert [r[:7] for r in rows] == [
        ["1", "org", "h100", "32", "28", "0", "-"],
        ["2", "nlp", "h100", "16", "20", "4", "4"],
        ["3", "chat", "h100", "8", "20", "12", "-"],
    ]
    assert next(ln for ln in lines if "<- holds the job" in ln).split()[1] == "nlp"


def test_progress_checkpoint_and_slowest_ranks_are_shown() -> None:
    job = {
        **JOB,
        "status": {
            "phase": "Running",
            "progress": {
                "step": 1200,
                "totalSteps": 5000,
                "summary": "1200/5000 (24%)",
                "stepSeconds": 0.5,
                "samplesPerSecond": 512.0,
                "eta": "2026-11-25T13:00:00Z",
                "phase": "train",
                "lastReportTime": "2026-11-25T12:28:20Z",
                "lastCheckpoint": {
                    "path": "/ckpt/1000.pt",
                    "step": 1000,
                    "time": "2026-11-25T12:26:40Z",
                },
                "bestStepSeconds": 0.45,
                "ranks": [
                    {"rank": 0, "node": "n1", "stepSeconds": 0.5},
                    {"rank": 3, "node": "n2", "stepSeconds": 1.4},
                ],
            },
            "checkpointRequest": {
                "requestedAt": "2026-11-25T12:28:21Z",
                "deadline": "2026-11-25T12:30:21Z",
                "step": 1200,
            },
        },
    }
    text = explain_text(job, [], [], QUEUE)
    assert (
        "Progress:   1200/5000 (24%)  0.5 s/step, 512 samples/s  ETA 2026-11-25T13:00:00Z" in text
    )
    assert "last checkpoint: step 1000 at /ckpt/1000.pt" in text
    assert "slowest ranks: rank 3 on n2 1.4 s, rank 0 on n1 0.5 s" in text
    assert "checkpoint asked for at 2026-11-25T12:28:21Z (step 1200)" in text


def test_the_runtime_and_its_generation_are_shown() -> None:
    spec = {k: v for k, v in JOB["spec"].items() if k != "framework"}
    spec["runtimeRef"] = {"kind": "ClusterTrainingRuntime", "name": "pytorch"}
    merged = {
        **JOB,
        "spec": spec,
        "status": {
            "runtime": {"kind": "ClusterTrainingRuntime", "name": "pytorch", "generation": 3}
        },
    }
    text = explain_text(merged, [], [], None)
    assert "Runtime:    ClusterTrainingRuntime pytorch (generation 3); framework" in text
    waiting = explain_text({**JOB, "spec": spec}, [], [], None)
    assert "Runtime:    ClusterTrainingRuntime pytorch (not merged yet)" in waiting


def test_running_job_says_when_it_may_be_preempted() -> None:
    queue = {**QUEUE, "spec": {**QUEUE["spec"], "preemption": {"minRunSeconds": 600}}}
    job = {**JOB, "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}}
    text = explain_text(job, [], [], queue)
    assert "no preemption or migration victim before 2026-01-01T00:10:00Z" in text
    assert "Protected" not in explain_text(job, [], [], QUEUE)


def test_fair_share_over_time_is_shown() -> None:
    status = {
        **QUEUE["status"],
        "fairSharing": {
            "usageHalfLifeSeconds": 3600,
            "updated": "2026-01-01T00:00:00Z",
            "usage": [{"name": "h100", "averageGpus": 17.5, "holding": 48}],
        },
    }
    text = explain_text({**JOB, "status": {"phase": "Queued"}}, [], [], {**QUEUE, "status": status})
    assert "fair share over time: half-life 3600 s; average GPUs used h100 17.5" in text


@pytest.mark.parametrize(
    ("imex", "words"),
    [
        pytest.param("ComputeDomain", "multi-node NVLink: IMEX channels from", id="set-up"),
        pytest.param("NotSetUp", "IMEX not set up (operator config dra.computeDomains", id="off"),
        pytest.param(None, None, id="not-a-clique-gang"),
    ],
)
def test_a_clique_gang_shows_its_clique_and_imex(imex: str | None, words: str | None) -> None:
    placement = {"level": "clique", "domain": "block-gb/rack-nvl72-a/c0.1", "nodes": ["a", "b"]}
    if imex:
        placement["imex"] = imex
    job = {**JOB, "status": {"phase": "Running", "placement": placement}}
    text = explain_text(job, [], [], None)
    assert "Placement:  clique block-gb/rack-nvl72-a/c0.1" in text
    assert (words in text) if words else ("multi-node NVLink" not in text)


MOVING = {
    "phase": "Moving",
    "source": ["h100-a-08", "h100-b-08"],
    "destination": ["h100-a-01", "h100-a-02"],
    "reserved": {"h100-a-01": 8, "h100-a-02": 8},
    "estimatedGainSeconds": 46247.4,
    "estimatedCostSeconds": 300.0,
    "requestedAt": "2026-11-27T04:32:29Z",
    "moves": 1,
}


@pytest.mark.parametrize(
    ("name", "migration", "want", "absent"),
    [
        ("none", None, [], ["Migration:"]),
        (
            "moving",
            MOVING,
            [
                "Migration:  Moving (move 1 of this job)",
                "from h100-a-08, h100-b-08 to h100-a-01, h100-a-02",
                "est. gain 46247 s for an est. cost of 300 s",
                "held: h100-a-01 8 GPUs, h100-a-02 8 GPUs",
            ],
            ["ran again"],
        ),
        (
            "moved-measured",
            {**MOVING, "phase": "Moved", "movedAt": "2026-11-27T04:33:40Z",
             "measuredCostSeconds": 71.2, "moves": 2},
            [
                "Migration:  Moved (move 2 of this job)",
                "ran again at 2026-11-27T04:33:40Z, measured cost 71 s",
            ],
            ["held:"],
        ),
        (
            "moved-unmeasured",
            {**MOVING, "phase": "Moved", "movedAt": "2026-11-27T04:33:40Z"},
            ["ran again at 2026-11-27T04:33:40Z"],
            ["measured cost"],
        ),
    ],
)  # fmt: skip
def test_a_move_is_explained(
    name: str, migration: dict[str, object] | None, want: list[str], absent: list[str]
) -> None:
    status: dict[str, object] = {"phase": "Running"}
    if migration is not None:
        status["migration"] = migration
    text = explain_text({**JOB, "status": status}, [], [], QUEUE)
    for line in want:
        assert line in text, (name, text)
    for line in absent:
        assert line not in text, (name, text)

"""`trainop explain` formatting: pending jobs show the reason, running jobs their placement."""

from __future__ import annotations

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

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
    job = {**JOB, "status": {"phase": "Queued", "pendingReason": "Quota", "queuePosition": 2,
                             "pendingMessage": "needs 32 h100 GPUs; 16 of 64 free in queue nlp"}}  # fmt: skip
    text = explain_text(job, [], [], QUEUE)
    assert "Waiting:    Quota (position 2 in queue)" in text
    assert "needs 32 h100 GPUs" in text
    assert "h100" in text and "64" in text and "cohort=research" in text


def test_running_job_shows_placement_pods_and_events() -> None:
    job = {**JOB, "status": {"phase": "Running", "gpus": 16, "image": "nvcr.io/nvidia/pytorch:24.07-py3",
                             "restartCount": 1,
                             "placement": {"level": "rack", "domain": "block-a/rack-h100-a",
                                           "nodes": ["h100-a-01", "h100-a-02"], "span": {"rack": 1}, "score": 1.0,
                                           "estimatedAllreduceSeconds": 0.005441,
                                           "allreduceBottleneck": "rack"},
                             "conditions": [{"type": "Running", "status": "True", "reason": "AllPodsRunning"}]}}  # fmt: skip
    pods = [{"metadata": {"name": "bert-worker-0", "labels": {"trainop.dev/rank": "0"}},
             "spec": {"nodeName": "h100-a-01"}, "status": {"phase": "Running"}}]  # fmt: skip
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

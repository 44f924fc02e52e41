"""Hugging Face, Lightning and the SDK on real nodes (issues 39 and 34, part 5), in the
hf-cpu image (Debian trixie's torch 2.6, transformers and Lightning from pinned wheels):

- an unmodified Hugging Face script (no trainop import, no callback) reports progress
  through the KUBEFLOW_TRAINER_SERVER_* variables trainop wires: `kubectl get tj` PROGRESS
  moves (issue 39);
- a Hugging Face Trainer job with trainop's callback (2 workers, DDP, gloo) is preempted,
  checkpoints through the callback, is evicted and resumes from the checkpoint; its loss
  goes on from where it stopped (issue 34);
- an SDK `train(func)` of a 2-node DDP function, its `logs(follow=True)` and `wait()`;
- the Lightning job of the second, with trainop's Lightning callback.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Kube
from tests.real.conftest import HF, IMAGES, import_images
from tests.real.scenarios import JOB_TIMEOUT, Target, diagnose, example, logs, wait_finished
from tests.real.test_4_lifecycle import _preempt, _status, preempt_queue  # noqa: F401
from trainop.cluster import images
from trainop.cluster.local import LocalCluster

STEP_LOSS = re.compile(r"(?:hf-trainop|lightning): step (\d+) loss ([0-9.e+-]+)")
RESUMED = re.compile(r"resume_from=(\S+)")


@pytest.fixture(scope="module")
def hf_target(real_cluster: LocalCluster, target: Target, background_imports: None) -> Target:
    """The tier's target, with the hf-cpu image imported into the real node (by the
    session's background imports, or now when this module runs alone)."""
    import_images(real_cluster, [HF])
    refs = {name: images.image_ref(name) for name in (*IMAGES, HF)}
    return Target(target.kube, refs)


def _progress_line(kube: Kube, ns: str, name: str) -> str:
    out = kube.run("get", "tj", name, "-n", ns, "--no-headers", check=False).stdout.strip()
    return out


def _column(kube: Kube, ns: str, name: str) -> str:
    """The PROGRESS column (status.progress.summary) as kubectl prints it."""
    out = kube.run(
        "get",
        "tj",
        name,
        "-n",
        ns,
        "-o",
        "custom-columns=P:.status.progress.summary",
        "--no-headers",
        check=False,
    ).stdout.strip()
    return "" if out in ("<none>", "") else out


def _preempt_logged(target: Target, ns: str, low: dict[str, Any]) -> dict[str, Any]:
    """test_4_lifecycle's preemption, keeping rank 0's log of the first run: read
    worker-0's log until its pods are gone (the checkpoint is saved in between)."""
    name = low["metadata"]["name"]
    first_log = [""]

    def read() -> None:
        proc = target.kube.run("logs", f"{name}-worker-0", "-n", ns, check=False)
        if proc.returncode == 0 and len(proc.stdout) >= len(first_log[0]):
            first_log[0] = proc.stdout

    run = _preempt(target, ns, low, checkpoint=True, watch=read)
    run["first"] = [(int(a), float(b)) for a, b in STEP_LOSS.findall(first_log[0])]
    return run


def test_unmodified_hf_script_reports_progress(hf_target: Target, namespace: str) -> None:
    """Issue 39: hf_plain.py, a plain Trainer(...).train(), moves `kubectl get tj` PROGRESS."""
    kube = hf_target.kube
    job = example(hf_target, "pytorch-hf-plain-cpu.yaml", namespace)
    kube.apply(job)
    started = time.monotonic()
    samples: list[tuple[float, str]] = []
    deadline = started + JOB_TIMEOUT
    while time.monotonic() < deadline:
        status = _status(kube, namespace, "hf-plain")
        shown = _column(kube, namespace, "hf-plain")
        if shown and (not samples or samples[-1][1] != shown):
            samples.append((time.monotonic() - started, shown))
            print(f"t={samples[-1][0]:5.1f}s  {_progress_line(kube, namespace, 'hf-plain')}")
        if status.get("phase") in ("Succeeded", "Failed"):
            break
        time.sleep(1.0)
    tj = wait_finished(hf_target, namespace, "hf-plain")
    # The final body (100%) may land just after the pod ends: one last look.
    kube.wait_for(
        "the last trainerStatus body in status",
        lambda: (
            (_status(kube, namespace, "hf-plain").get("progress") or {}).get("percentage") == 100
        ),
        30,
    )
    final = _column(kube, namespace, "hf-plain")
    if not samples or samples[-1][1] != final:
        samples.append((time.monotonic() - started, final))
    progress = _status(kube, namespace, "hf-plain").get("progress") or {}
    log = logs(kube, namespace, "hf-plain-worker-0")
    print("\nPROGRESS over time (kubectl get tj hf-plain):")
    for t, shown in samples:
        print(f"  t={t:5.1f}s  {shown}")
    print(f"status.progress: {json.dumps(progress, sort_keys=True)}")
    print("\n".join(line for line in log.splitlines() if "hf-plain" in line))
    assert "report_to=['kubeflow']" in log, log[-2000:]
    assert progress.get("source") == "kubeflow", diagnose(kube, namespace, tj)
    distinct = {shown for _, shown in samples}
    assert len(distinct) >= 3, samples  # moved: 0%, at least one value between, 100%
    assert progress.get("totalSteps") == 300, progress
    assert any(m.get("name") == "loss" for m in progress.get("metrics") or []), progress


def _report(name: str, run: dict[str, Any], after: list[tuple[int, float]], log: str) -> None:
    status = run["status"]
    request = status.get("checkpointRequest") or {}
    checkpoint = (status.get("progress") or {}).get("lastCheckpoint") or {}
    preempted = next(c for c in status["conditions"] if c["type"] == "Preempted")
    first = run["first"]
    print(
        f"{name}: asked at step {request.get('step')}, checkpoint {checkpoint.get('path')} "
        f"(step {checkpoint.get('step')}); Preempted: {preempted['message']}"
    )
    print("first run, rank 0 (until its pods went):")
    for s, v in [*first[:3], (-1, 0.0), *first[-4:]]:
        print("  ..." if s < 0 else f"  step {s} loss {v:.4f}")
    print("after the resume, rank 0:")
    for s, v in [*after[:4], (-1, 0.0), *after[-2:]]:
        print("  ..." if s < 0 else f"  step {s} loss {v:.4f}")
    lines = log.splitlines()
    print("\n".join([*lines[:3], "...", *lines[-2:]]))


def _check_resumed(
    kube: Kube, ns: str, run: dict[str, Any], after: list[tuple[int, float]], log: str, gap: int
) -> int:
    """The checkpoint was taken on request (step >= the step asked at >= 20), the next run
    resumed from its path at its step (+ `gap`: Lightning counts the saved step again, the
    Trainer the next), and its loss went on from the checkpoint's, not from step 1's."""
    status = run["status"]
    request = status.get("checkpointRequest") or {}
    checkpoint = (status.get("progress") or {}).get("lastCheckpoint") or {}
    preempted = next(c for c in status["conditions"] if c["type"] == "Preempted")
    assert "checkpointed at step" in preempted["message"], diagnose(kube, ns, {"status": status})
    step = int(checkpoint["step"])
    assert step >= request["step"] >= 20, (request, checkpoint)
    resumed = RESUMED.search(log)
    assert resumed and resumed.group(1) == checkpoint["path"], log[:2000]
    first = dict(run["first"])
    assert after and after[0][0] == step + gap, (after[:3], step)
    # The first run's last lines may not reach the log read before its pods went: the
    # checkpoint's loss is that of the last step logged up to it.
    last = max((s for s in first if s <= step), default=None)
    assert 1 in first and last is not None and last >= step - 10, sorted(first)[-3:]
    assert first[last] < 0.8 * first[1], (first[1], last, first[last])  # it had learned
    # The loss goes on from the checkpoint's: nearer it than the start's (two-step noise).
    window = [v for s, v in after[:5]]
    assert min(window) < 0.5 * (first[1] + first[last]), (first[1], first[last], window)
    return step


def _preempt_and_resume(target: Target, ns: str, example_file: str) -> dict[str, Any]:
    """Preempt the example's job after step 20 (its checkpoints on a hostPath of this
    machine), let the preempting job and then it finish, and check the resume: the step and
    loss go on from the checkpoint's, and the job trains to MAX_STEPS."""
    low = example(target, example_file, ns)
    name = low["metadata"]["name"]
    host = Path(f"/var/tmp/trainop-checkpoints/{ns}")
    volume = low["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["volumes"][0]
    volume["hostPath"]["path"] = str(host)
    run = _preempt_logged(target, ns, low)
    wait_finished(target, ns, run["high"])
    wait_finished(target, ns, name)
    log = logs(target.kube, ns, f"{name}-worker-0")
    after = [(int(s), float(v)) for s, v in STEP_LOSS.findall(log)]
    _report(name, run, after, log)
    step = _check_resumed(target.kube, ns, run, after, log, gap=1)
    assert after[-1][0] == int(_env(low, "MAX_STEPS")), after[-1]
    return {"step": step, "host": host, "path": run["status"]["progress"]["lastCheckpoint"]["path"]}


def test_hf_trainer_checkpoints_on_preemption_and_resumes(
    hf_target: Target,
    namespace: str,
    preempt_queue: str,  # noqa: F811
) -> None:
    """Issue 34: trainop's transformers callback saves on the checkpoint request, the gang is
    evicted, the next gang resumes at the checkpoint's step with its loss."""
    done = _preempt_and_resume(hf_target, namespace, "pytorch-hf-preempt-cpu.yaml")
    step = done["step"]
    assert done["path"] == f"/checkpoints/hf/checkpoint-{step}", done
    # The Trainer's own state in the checkpoint (a hostPath: a directory on this machine).
    state = json.loads(
        (done["host"] / "hf" / f"checkpoint-{step}" / "trainer_state.json").read_text()
    )
    assert state["global_step"] == step, state["global_step"]


def _env(job: dict[str, Any], name: str) -> str:
    env = job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]
    return str(next(e["value"] for e in env if e["name"] == name))


@pytest.fixture
def sdk_runtime(hf_target: Target, namespace: str) -> Iterator[str]:
    """A TrainingRuntime of the test's namespace: PyTorch in the pytorch-cpu image."""
    hf_target.kube.apply(
        {
            "apiVersion": "trainop.dev/v1alpha1",
            "kind": "TrainingRuntime",
            "metadata": {"name": "torch-cpu", "namespace": namespace},
            "spec": {
                "framework": {"name": "pytorch", "version": "1.13"},
                "cuda": "12.2",
                "image": hf_target.images["pytorch-cpu"],
            },
        }
    )
    yield "TrainingRuntime/torch-cpu"


def ddp_function(steps: int = 40) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(10, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 10)
    y = x.sum(dim=1, keepdim=True)
    for step in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if dist.get_rank() == 0 and step % 10 == 0:
            print(f"sdk: step {step} loss {loss.item():.4f} world {dist.get_world_size()}")
    if dist.get_rank() == 0:
        print(f"sdk: done world={dist.get_world_size()} loss {loss.item():.4f}")
    dist.destroy_process_group()


def test_sdk_train_function_logs_and_wait(
    hf_target: Target, namespace: str, sdk_runtime: str
) -> None:
    """Issue 34: TrainopClient.train(func) of a 2-node DDP function; logs(follow) and wait()."""
    from trainop.sdk import TrainopClient

    client = TrainopClient(namespace, kubeconfig=hf_target.kube.kubeconfig, poll_seconds=1.0)
    name = client.train(
        ddp_function, runtime=sdk_runtime, num_nodes=2, gpus_per_node=1, args={"steps": 40}
    )
    started = time.monotonic()
    lines = []
    for line in client.logs(name, follow=True):
        lines.append(line)
        if time.monotonic() - started > JOB_TIMEOUT:
            break
    job = client.wait(name, timeout=120)
    print(f"\nsdk job {name}: phase {job.phase}; rank 0's log (logs(follow=True)):")
    print("\n".join(lines[-15:]))
    assert job.phase == "Succeeded"
    assert any("sdk: done world=2" in line for line in lines), lines[-30:]
    losses = [
        float(m.group(1)) for m in map(re.compile(r"sdk: step \d+ loss (\S+)").search, lines) if m
    ]
    assert len(losses) == 4 and losses[-1] < losses[0], losses


def test_lightning_checkpoints_on_preemption_and_resumes(
    hf_target: Target,
    namespace: str,
    preempt_queue: str,  # noqa: F811
) -> None:
    """Issue 34: the same as the Hugging Face job, with trainop's Lightning callback."""
    done = _preempt_and_resume(hf_target, namespace, "pytorch-lightning-preempt-cpu.yaml")
    assert done["path"] == f"/checkpoints/lightning/step-{done['step']}.ckpt", done
    assert (done["host"] / "lightning" / f"step-{done['step']}.ckpt").is_file()

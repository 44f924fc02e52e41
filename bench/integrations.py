"""`make bench-integrations`: what trainop's trainer callbacks cost and how fast they answer a
checkpoint request (issue 34's measures), with the real libraries on CPU.

Needs the extras (`pip install trainop[transformers,lightning]`; not in the dev lock) and
says so when they are missing. Two runs, one per integration, each in one process:

  overhead  one training run whose callback is switched on and off in alternate blocks of
            steps (on: the callback reports every step to a real Reporter, whose thread
            POSTs to a local endpoint at its interval; off: it does nothing), so both halves
            share the warm-up, the allocator and the machine's load. The step time is the
            wall time between consecutive step ends; the overhead is the ratio of the
            medians, on over off (target: at most 1%).
  request   a timer thread raises the operator's request at a random moment inside a step
            (as the Reporter's answer arrives); the time until the trainer's own checkpoint
            is on disk and reported (HF: should_save then on_save; Lightning:
            trainer.save_checkpoint), median of several requests.

Models: a 2-layer GPT-2 from a config (no download) under transformers' Trainer, an MLP under
Lightning's Trainer; CPU, one process. Writes bench/results/integrations.{json,md}. Numbers,
never assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
BLOCK = 10  # steps per on/off block


class Endpoint:
    """A stand-in for the operator's /v1/progress: answers 200 and `requested`."""

    def __init__(self) -> None:
        self.posts = 0
        self.requested = False
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                outer.posts += 1
                body = json.dumps({"checkpointRequested": outer.requested}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/progress"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _reporter(endpoint: Endpoint, tmp: Path) -> Any:
    from trainop.launcher.progress import Reporter

    token = tmp / "token"
    token.write_text("t")
    env = {
        "TRAINOP_PROGRESS_URL": endpoint.url,
        "TRAINOP_PROGRESS_TOKEN_FILE": str(token),
        "TRAINOP_PROGRESS_INTERVAL": "1",
    }
    return Reporter(env=env)


class Switch:
    """The callback under test, on in odd blocks of BLOCK steps and off in even ones; it also
    times what runs inside trainop's hooks (`inside`), the direct cost, which the machine's
    other load inflates far less than the A/B step times (CPU time of the training thread)."""

    def __init__(self, always_on: bool = False) -> None:
        self.always_on = always_on
        self.on = always_on
        self.ends: list[tuple[bool, float]] = []
        self.inside = 0.0
        self.calls_on = 0

    def timed(self, fn: Any, *a: Any, **k: Any) -> Any:
        """CPU time of this thread inside `fn`: what the callback itself costs, without the
        waits for the GIL or for a core that the machine's other load adds to wall time."""
        t0 = time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            self.inside += time.thread_time() - t0

    def step_end(self, step: int) -> None:
        self.ends.append((self.on, time.perf_counter()))
        if self.on:
            self.calls_on += 1
        self.on = self.always_on or (step // BLOCK) % 2 == 1

    def blocks(self) -> list[tuple[bool, float]]:
        """(mode, median step seconds) per block, in order."""
        out: list[tuple[bool, list[float]]] = []
        for (was_on, t0), (now_on, t1) in zip(self.ends, self.ends[1:], strict=False):
            if was_on != now_on:
                continue  # a step that straddles a switch
            if not out or out[-1][0] != now_on:
                out.append((now_on, []))
            out[-1][1].append(t1 - t0)
        return [(mode, statistics.median(v)) for mode, v in out if v]

    def steady(self) -> dict[str, float]:
        """The callback on at every step: its CPU time per step, as a job would see it."""
        steps = [t1 - t0 for (_, t0), (_, t1) in zip(self.ends, self.ends[1:], strict=False)]
        step = statistics.median(steps)
        per_step = self.inside / max(1, self.calls_on)
        return {
            "step_ms": round(step * 1e3, 3),
            "hooks_us_per_step": round(1e6 * per_step, 1),
            "hooks_percent": round(100 * per_step / step, 3),
        }

    def overhead(self) -> dict[str, float]:
        blocks = self.blocks()
        # each on-block against the mean of its off neighbours: drifts of the load cancel
        ratios, noise = [], []
        for i, (mode, med) in enumerate(blocks):
            if mode and 0 < i < len(blocks) - 1:
                ratios.append(med / ((blocks[i - 1][1] + blocks[i + 1][1]) / 2) - 1)
            if not mode and i + 2 < len(blocks):
                noise.append(abs(blocks[i + 2][1] / med - 1))
        on = [m for mode, m in blocks if mode]
        off = [m for mode, m in blocks if not mode]
        step_off = statistics.median(off)
        return {
            "step_ms_on": round(statistics.median(on) * 1e3, 3),
            "step_ms_off": round(step_off * 1e3, 3),
            "overhead_percent": round(100 * statistics.median(ratios), 2),
            "noise_percent": round(100 * statistics.median(noise), 2),
            "hooks_us_per_step": round(1e6 * self.inside / max(1, self.calls_on), 1),
            "hooks_percent": round(100 * (self.inside / max(1, self.calls_on)) / step_off, 3),
            "blocks": len(blocks),
        }


def _request_later(endpoint_flag: Any, step_seconds: float) -> float:
    """Raise the request at a random moment of the coming step; its time."""
    delay = random.uniform(0, step_seconds)
    at = time.perf_counter() + delay
    threading.Timer(delay, endpoint_flag).start()
    return at


def bench_transformers(
    steps: int, requests: int, tmp: Path, always_on: bool = False
) -> dict[str, Any]:
    import torch
    import transformers

    from trainop.integrations.common import StepReports
    from trainop.integrations.transformers import TrainopCallback

    endpoint = Endpoint()
    reports = StepReports(_reporter(endpoint, tmp))
    inner = TrainopCallback(reports=reports, sync=lambda flag: flag)
    switch = Switch(always_on)
    saved: list[float] = []
    asked: list[float] = []

    class Measured(transformers.TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            if switch.on:
                switch.timed(inner.on_step_begin, *a, **k)

        def on_log(self, *a: Any, **k: Any) -> None:
            if switch.on:
                switch.timed(inner.on_log, *a, **k)

        def on_step_end(self, args: Any, state: Any, control: Any, **k: Any) -> None:
            if switch.on or reports.requested():
                switch.timed(inner.on_step_end, args, state, control, **k)
            switch.step_end(state.global_step)

        def on_save(self, args: Any, state: Any, control: Any, **k: Any) -> None:
            inner.on_save(args, state, control, **k)
            saved.append(time.perf_counter())
            endpoint.requested = False
            reports.reporter._requested = False  # the operator stops asking once it has one

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=128, vocab_size=1024, n_positions=64
    )
    model = transformers.GPT2LMHeadModel(config)
    data = [
        {"input_ids": (ids := torch.randint(0, 1024, (64,))), "labels": ids} for _ in range(512)
    ]
    args = transformers.TrainingArguments(
        str(tmp / "hf"), max_steps=steps + requests * 4, per_device_train_batch_size=8,
        logging_steps=1, report_to="none", save_strategy="no", use_cpu=True, disable_tqdm=True,
        log_level="error",
    )  # fmt: skip
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=data, callbacks=[Measured()]
    )

    def ask(step: int) -> None:
        if step >= steps and (step - steps) % 4 == 0 and len(asked) < requests:
            median = statistics.median(
                t1 - t0 for (_, t0), (_, t1) in zip(switch.ends, switch.ends[1:], strict=False)
            )
            asked.append(
                _request_later(lambda: setattr(reports.reporter, "_requested", True), median)
            )

    class Asker(transformers.TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **k: Any) -> None:
            ask(state.global_step)

    trainer.add_callback(Asker())
    trainer.train()
    waits = [1e3 * (s - a) for a, s in zip(asked, saved, strict=False)]
    if always_on:
        return switch.steady()
    return {
        **switch.overhead(),
        "request_to_saved_ms_median": round(statistics.median(waits), 1) if waits else None,
        "requests": len(waits),
        "reports_posted": endpoint.posts,
    }


def bench_lightning(
    steps: int, requests: int, tmp: Path, always_on: bool = False
) -> dict[str, Any]:
    import lightning as L
    import torch

    from trainop.integrations.common import StepReports
    from trainop.integrations.lightning import TrainopCallback

    endpoint = Endpoint()
    reports = StepReports(_reporter(endpoint, tmp))
    inner = TrainopCallback(dirpath=str(tmp / "pl"), reports=reports)
    switch = Switch(always_on)
    saved: list[float] = []
    asked: list[float] = []

    class Measured(L.Callback):  # type: ignore[misc]
        def on_train_batch_start(self, *a: Any) -> None:
            if switch.on:
                switch.timed(inner.on_train_batch_start, *a)

        def on_train_batch_end(self, trainer: Any, *a: Any) -> None:
            if switch.on or reports.requested():
                before = reports.saves
                switch.timed(inner.on_train_batch_end, trainer, *a)
                if reports.saves > before:
                    saved.append(time.perf_counter())
                    reports.reporter._requested = False
            switch.step_end(trainer.global_step)
            step = trainer.global_step
            if step >= steps and (step - steps) % 4 == 0 and len(asked) < requests:
                median = statistics.median(
                    t1 - t0 for (_, t0), (_, t1) in zip(switch.ends, switch.ends[1:], strict=False)
                )
                asked.append(
                    _request_later(lambda: setattr(reports.reporter, "_requested", True), median)
                )

    class MLP(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1)
            )

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    data = torch.utils.data.TensorDataset(torch.randn(8192, 256), torch.randn(8192, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=64)
    trainer = L.Trainer(
        max_steps=steps + requests * 4, accelerator="cpu", devices=1, callbacks=[Measured()],
        enable_progress_bar=False, enable_model_summary=False, logger=False,
        enable_checkpointing=False, default_root_dir=str(tmp / "pl"),
    )  # fmt: skip
    trainer.fit(MLP(), loader)
    waits = [1e3 * (s - a) for a, s in zip(asked, saved, strict=False)]
    if always_on:
        return switch.steady()
    return {
        **switch.overhead(),
        "request_to_saved_ms_median": round(statistics.median(waits), 1) if waits else None,
        "requests": len(waits),
        "reports_posted": endpoint.posts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=400, help="steps of the on/off run")
    parser.add_argument("--requests", type=int, default=5)
    opts = parser.parse_args()
    try:
        import lightning  # noqa: F401
        import torch
        import transformers
    except ImportError as err:
        sys.exit(
            f"bench-integrations needs the extras: pip install 'trainop[transformers,lightning]' ({err})"
        )
    torch.set_num_threads(1)
    random.seed(0)
    out: dict[str, Any] = {"torch": torch.__version__, "transformers": transformers.__version__}
    out["lightning"] = __import__("lightning").__version__
    with tempfile.TemporaryDirectory() as d:
        out["transformers_run"] = bench_transformers(opts.steps, opts.requests, Path(d))
        out["lightning_run"] = bench_lightning(opts.steps, opts.requests, Path(d))
        out["transformers_steady"] = bench_transformers(opts.steps // 4, 0, Path(d), always_on=True)
        out["lightning_steady"] = bench_lightning(opts.steps, 0, Path(d), always_on=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "integrations.json").write_text(json.dumps(out, indent=2) + "\n")
    rows = [
        "| integration | step, callback off | step, callback on (reports every step) | A/B overhead (noise) | request to saved checkpoint (median) | callback always on: its CPU a step |",
        "|---|---|---|---|---|---|",
    ]
    for key, label in (
        ("transformers", "Hugging Face Trainer (GPT-2, 2 layers)"),
        ("lightning", "Lightning Trainer (MLP)"),
    ):
        r, st = out[f"{key}_run"], out[f"{key}_steady"]
        rows.append(
            f"| {label} | {r['step_ms_off']} ms | {r['step_ms_on']} ms | {r['overhead_percent']}% "
            f"({r['noise_percent']}%) | {r['request_to_saved_ms_median']} ms ({r['requests']} "
            f"requests) | {st['hooks_us_per_step']} us, {st['hooks_percent']}% of a {st['step_ms']} ms step |"
        )
    versions = f"torch {out['torch']}, transformers {out['transformers']}, lightning {out['lightning']}; CPU, 1 thread"
    (RESULTS / "integrations.md").write_text(
        "# trainop's trainer callbacks: overhead and checkpoint latency\n\n"
        f"`make bench-integrations` ({versions}). One run per trainer, the callback on and off "
        f"in alternate {BLOCK}-step blocks: A/B overhead is the median of each on-block's median "
        "step against its two off neighbours (noise: the same between off-blocks two apart); "
        "'always on' is a second run with the callback at every step (as a job has it): the CPU "
        "time of the training thread inside the callback's hooks per step, against the step. The request latency includes finishing the step under way. Measured on "
        f"{os.cpu_count()} shared cores; load average {os.getloadavg()[0]:.1f} at the end.\n\n"
        + "\n".join(rows)
        + "\n"
    )
    print((RESULTS / "integrations.md").read_text())


if __name__ == "__main__":
    main()

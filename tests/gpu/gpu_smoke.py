"""GPU smoke test of trainop-launch: never run by CI (no GPU there); see tests/gpu/README.md.

Run on a machine with an NVIDIA GPU, its driver and PyTorch (CUDA build):

    python tests/gpu/gpu_smoke.py

It prints what trainop-launch chooses on this machine (`--dry-run`), then runs itself under
trainop-launch as rank 0 of a world of 1: a `torch.distributed` NCCL init and one
all_reduce, printing the NCCL environment the rank saw. Exit status 0 means all passed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

STAGE_ENV = "TRAINOP_GPU_SMOKE_RANK"


def launcher() -> list[str]:
    found = shutil.which("trainop-launch")
    return [found] if found else [sys.executable, "-m", "trainop.launcher"]


def outer() -> int:
    print("== trainop-launch --dry-run", flush=True)
    subprocess.run([*launcher(), "--dry-run"], check=True)
    print("== NCCL all_reduce at world size 1, under trainop-launch", flush=True)
    env = dict(os.environ, **{STAGE_ENV: "1"})
    return subprocess.run([*launcher(), "--", sys.executable, __file__], env=env).returncode


def rank() -> int:
    try:
        import torch
        import torch.distributed as dist
    except ImportError as err:
        print(f"FAIL: PyTorch is not importable ({err}); install a CUDA build of torch")
        return 1

    if not torch.cuda.is_available():
        print("FAIL: torch.cuda.is_available() is False (CPU-only PyTorch or no driver)")
        return 1
    for name in ("CUDA_DEVICE_ORDER", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "NCCL_TOPO_FILE"):
        print(f"{name}={os.environ.get(name, '(unset)')}")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)
    value = torch.full((4,), 3.0, device="cuda")
    dist.all_reduce(value)
    dist.destroy_process_group()
    ok = bool(torch.all(value == 3.0))
    print(
        f"{torch.cuda.get_device_name(0)}: all_reduce -> {value.tolist()} {'OK' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(rank() if os.environ.get(STAGE_ENV) else outer())

"""Entry point of `trainop-launch`, the in-container launcher (GPU/NIC discovery lands in a later issue)."""

from __future__ import annotations

import os
import sys


def main() -> None:
    """Exec the given command unchanged; the NCCL narrowing by PCIe locality comes later."""
    args = sys.argv[1:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: trainop-launch [--] COMMAND [ARGS...]", file=sys.stderr)
        sys.exit(2)
    os.execvp(args[0], args)

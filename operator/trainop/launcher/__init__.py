"""`trainop-launch`, the in-container entrypoint that discovers GPUs/NICs and execs the trainer."""

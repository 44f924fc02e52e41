"""The real tier's cluster, made ahead of its tests: `python -m tests.real.prepare`.

.ci/run starts this (after `make real-deps`, with the node binaries and the images built)
beside `make test`: the real tier's cluster comes up with its real node, and every image the
tier runs (IMAGES, the framework images, hf-cpu) is imported into it, about 3 minutes of
mostly disk that no longer delays the tier's first test. The session fixture of
tests/real/conftest.py then finds all of it done (LocalCluster.up, the real node's start and
import_images leave what is already there) and does the rest (the registry, the operator).
Without this, the fixtures do everything, as before. On failure the half-made cluster is
deleted, so the tier starts clean; the exit status says it failed. `--down` deletes it.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from tests.real.conftest import CLUSTER_NAME, HF, IMAGES, import_images
from trainop.cluster import images
from trainop.cluster.local import LocalCluster
from trainop.cluster.realnode import preflight


def main(argv: list[str]) -> int:
    lc = LocalCluster(name=CLUSTER_NAME, bin_dir=os.environ.get("TRAINOP_BIN_DIR"))
    if argv == ["--down"]:  # .ci/run, when make test failed and the tier will not run
        lc.down()
        return 0
    reason = preflight()
    if reason:
        print(f"real tier not prepared: {reason}")
        return 0
    started = time.monotonic()
    try:
        lc.up(str(Path(__file__).parent / "fleet-real.yaml"), real_nodes=1)
        import_images(lc, (*IMAGES, *images.FRAMEWORK_IMAGES, HF))
    except BaseException:
        lc.down()
        raise
    print(f"real tier's cluster {CLUSTER_NAME!r} prepared in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

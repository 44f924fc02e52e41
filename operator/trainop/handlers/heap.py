"""The operator process's C heap: fewer glibc malloc arenas, and freed memory handed back.

Why: in `make bench-scale`'s deep-queue run (2,000 nodes, 8,000 pods), tracemalloc counted
about 110 MB of live Python objects during the fill while the resident set was several times
that and peaked at 1,008 MB. Part of the gap is glibc's allocator: every thread that
allocates (the API client's pool decodes JSON responses in threads) gets its own malloc
arena, up to 8 per core, and memory freed inside an arena stays with the process. With two
arenas and a trim after each resync the peak was 831 MB: better, still far from what is in
use (pymalloc's own arenas and kopf's per-object state are the next places to look).

glibc documents both knobs: M_ARENA_MAX (mallopt, or MALLOC_ARENA_MAX in the environment)
https://www.gnu.org/software/libc/manual/html_node/Memory-Allocation-Tunables.html and
malloc_trim https://man7.org/linux/man-pages/man3/malloc_trim.3.html. Elsewhere (musl,
macOS) both are no-ops. Used by `cli/run.py` (at start) and `handlers/operator.py` (resync).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

M_ARENA_MAX = -8  # <malloc.h>
ARENAS = 2


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt  # noqa: B018 - glibc only: a libc without it is left alone
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def limit_arenas() -> bool:
    """At most ARENAS malloc arenas, unless MALLOC_ARENA_MAX says otherwise. Call it before
    the first threads start: arenas already made stay."""
    libc = _libc()
    if libc is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(libc.mallopt(M_ARENA_MAX, ARENAS))


def trim() -> bool:
    """Give freed heap pages back to the system (all arenas); True when some were."""
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None else False

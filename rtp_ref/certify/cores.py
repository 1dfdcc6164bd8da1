"""CPU threads for processes that run side by side: each gets its share of the cores.

torch's CPU operations use one OpenMP thread per core by default. Two processes doing so on two cores run
four spinning threads, and measured on a 2-core machine that more than doubled the CPU time of a
``certify --platform all`` (407 s against 148 s with one thread each). A user's own setting always wins.
"""

from __future__ import annotations

import os

#: the variable OpenMP (and with it torch's intra-op pool) reads at start-up
THREADS_VARIABLE = "OMP_NUM_THREADS"


def share_cores(environ: dict[str, str], processes: int) -> dict[str, str]:
    """``environ`` for one of ``processes`` processes running at once: OMP_NUM_THREADS set to this machine's
    cores divided among them (at least 1), unless ``environ`` sets it already, or only one process runs."""
    if processes <= 1 or THREADS_VARIABLE in environ:
        return environ
    return {**environ, THREADS_VARIABLE: str(max(1, (os.cpu_count() or 1) // processes))}

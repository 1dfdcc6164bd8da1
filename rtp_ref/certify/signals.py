"""Ctrl-C held while a command writes its files, so that what it writes is written whole. Used by the certify
runs (``--platform all`` starting a platform's process) and by every command that writes reports."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) while the block runs, so the files it writes are written whole.

    A SIGINT that arrives meanwhile is raised again once the block ends, to whatever handler was in
    place before (by default: KeyboardInterrupt right after the block). Main thread only.
    """
    held: list[int] = []

    def hold(signum: int, _frame: FrameType | None) -> None:
        held.append(signum)

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        signal.raise_signal(signal.SIGINT)

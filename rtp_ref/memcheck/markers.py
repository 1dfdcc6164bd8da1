"""The marker lines the driver prints around each case, and their parser.

The driver prints ``RTP_REF_CASE <key>`` (flushed) before it builds a case's inputs and calls the
kernel, and ``RTP_REF_END <key> ok`` or ``RTP_REF_END <key> raised <Type: message>`` after the call
and a device synchronise; ``RTP_REF_DEVICE_LOST <key>`` when the call left the CUDA context unusable
(the driver then exits, and the parent starts a new one for the remaining cases). Keys have no spaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CASE = "RTP_REF_CASE"
END = "RTP_REF_END"
DEVICE_LOST = "RTP_REF_DEVICE_LOST"
#: a raised exception's message is cut to one line of at most this many characters
RAISED_CHARS = 400

MarkerKind = Literal["case", "end", "device_lost"]


@dataclass(frozen=True)
class Marker:
    """One parsed marker line; ``raised`` is the kernel's exception (end markers only)."""

    kind: MarkerKind
    key: str
    raised: str | None = None


def case_line(key: str) -> str:
    """The line printed before case ``key`` runs."""
    return f"{CASE} {key}"


def end_line(key: str, error: BaseException | None) -> str:
    """The line printed after case ``key``'s call returned (``error``: what the kernel raised, if anything)."""
    if error is None:
        return f"{END} {key} ok"
    text = f"{type(error).__name__}: {error}".splitlines()[0][:RAISED_CHARS]
    return f"{END} {key} raised {text}"


def device_lost_line(key: str) -> str:
    """The line printed when case ``key`` left the CUDA context unusable."""
    return f"{DEVICE_LOST} {key}"


def parse_marker(line: str) -> Marker | None:
    """The marker on ``line`` (trailing newline allowed), or None when it is any other output."""
    tag, _, rest = line.rstrip("\r\n").partition(" ")
    key, _, tail = rest.partition(" ")
    if not key:
        return None
    if tag == CASE:
        return Marker("case", key)
    if tag == DEVICE_LOST:
        return Marker("device_lost", key)
    if tag == END:
        status, _, raised = tail.partition(" ")
        return Marker("end", key, raised if status == "raised" else None)
    return None

"""Calling a kernel under test once: what it raised, the device error it left, whether its own launch path ran.

Every device error lands on the call that caused it: one pending before the call belongs to the suite's own setup
(raised here: the suite's error, not the kernel's finding), one pending after it, or raised by it as a CUDA error,
is the kernel's ``device_error``. A context that stays unusable is recorded in ``DEVICE_FAULT``, so the process
that holds it can be replaced before it judges another case.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rtp_ref.certify.device_errors import describe_error, is_device_error, pending_device_error


@dataclass
class CallResult:
    """How one kernel call went: the exception it raised (if any), the device error it left, whether it ran."""

    error: BaseException | None
    #: a CUDA error the call left behind (a launch error left pending, an asynchronous fault), as text
    device_error: str | None
    launches_before: int | None
    launches_after: int | None

    @property
    def launched(self) -> bool | None:
        """Whether the kernel's own launch counter moved (None: the kernel has no counter)."""
        if self.launches_before is None or self.launches_after is None:
            return None
        return self.launches_after > self.launches_before


#: Set when a kernel left the device unusable (a sticky CUDA error): the case that did it.
DEVICE_FAULT: list[str] = []


def call_once(kernel: object, invoke: Callable[[], None], what: str, device: str) -> CallResult:
    """Run ``invoke`` (one call of ``kernel``), wait for ``device`` and report what happened (module doc).

    ``what`` names the case in ``DEVICE_FAULT`` (``kernel on layout``). A kernel may expose ``launch_count``
    (incremented by its real launch path): it proves the candidate itself ran rather than a fallback (FlagGems
    counts calls the same way).
    """
    earlier = pending_device_error(device)
    if earlier is not None:
        raise RuntimeError(f"a device error was pending before the kernel was called (the case setup): {earlier}")
    before = getattr(kernel, "launch_count", None)
    error: BaseException | None = None
    try:
        invoke()
    except Exception as exc:  # the kernel's failure is the finding, reported by the caller
        error = exc
    device_error = pending_device_error(device)
    if device_error is None and error is not None and is_device_error(error):
        device_error, error = describe_error(error), None
    if device_error is not None and pending_device_error(device) is not None:
        DEVICE_FAULT.append(f"{getattr(kernel, 'name', kernel)} on {what} ({device_error})")
    return CallResult(error, device_error, before, getattr(kernel, "launch_count", None))

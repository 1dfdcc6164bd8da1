"""Device errors, attributed to the call that caused them (the conformance suite and memcheck share this)."""

from __future__ import annotations

import torch


def describe_error(error: BaseException) -> str:
    """One line naming the exception type and message."""
    return f"{type(error).__name__}: {error}".splitlines()[0][:400]


def pending_device_error(device: str) -> str | None:
    """The CUDA/HIP error left pending on this thread, as text, or None; reading it clears a launch error.

    ``synchronize`` reports asynchronous faults, but a launch that failed (an empty grid, a bad
    configuration) only sets the runtime's last error, which the NEXT launch check reports: torch's own
    launch of a one-element fill is that check. Without it the error lands on the next case.
    """
    if device.split(":")[0] != "cuda":  # "cuda", or "cuda:1" (the stream tier's other device)
        return None
    try:
        torch.cuda.synchronize(device)
        torch.empty(1, device=device).fill_(1.0)
        torch.cuda.synchronize(device)
    except Exception as exc:  # the device's error is the finding
        return describe_error(exc)
    return None


def is_device_error(exc: BaseException) -> bool:
    """Whether an exception a kernel raised is a CUDA/HIP runtime error (not a refusal of its own)."""
    accelerator_error = getattr(torch, "AcceleratorError", ())
    return isinstance(exc, accelerator_error) or "CUDA error" in str(exc) or "HIP error" in str(exc)

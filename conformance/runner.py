"""Running a kernel under test on a case: call counting, device sync, and the case record."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rtp_ref.certify.cases import CaseInputs
from rtp_ref.kernels.protocol import KVCacheKernel


@dataclass
class CallResult:
    """How one kernel call went: the exception it raised (if any) and whether it really ran."""

    error: BaseException | None
    calls: int
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


def _device_is_dead(device: str) -> bool:
    if device != "cuda":
        return False
    try:
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").add_(1).item()
    except Exception:  # any error here means the context is gone: the worker must be replaced
        return True
    return False


def call_kernel(kernel: KVCacheKernel, inputs: CaseInputs, layout: str, device: str) -> CallResult:
    """Call ``kernel`` once on the case, wait for the device, and report what happened.

    A kernel may expose ``launch_count`` (incremented by its real launch path): it proves the
    candidate itself ran rather than a fallback (FlagGems counts calls the same way).
    """
    before = getattr(kernel, "launch_count", None)
    calls = 0
    error: BaseException | None = None
    try:
        calls += 1
        kernel(inputs.kv_c, inputs.k_pe, inputs.kv_cache, inputs.slot_mapping, layout, inputs.scale)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:  # the kernel's failure is the finding, reported by the caller
        error = exc
        if _device_is_dead(device):
            DEVICE_FAULT.append(f"{getattr(kernel, 'name', kernel)} on {layout}")
    return CallResult(error, calls, before, getattr(kernel, "launch_count", None))


def describe_error(error: BaseException) -> str:
    """One line naming the exception type and message."""
    return f"{type(error).__name__}: {error}".splitlines()[0][:400]

"""Running a kernel under test on a case: call counting, device sync, and the case record."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rtp_ref.certify.cases import CaseInputs
from rtp_ref.certify.device_errors import describe_error, is_device_error, pending_device_error
from rtp_ref.certify.family_cases import FamilyCase
from rtp_ref.certify.gather_cases import GatherCase
from rtp_ref.certify.large_cases import LargeCase
from rtp_ref.kernels.protocol import KVCacheKernel


@dataclass
class CallResult:
    """How one kernel call went: the exception it raised (if any), the device error it left, whether it ran."""

    error: BaseException | None
    #: a CUDA error the call left behind (a launch error left pending, an asynchronous fault), as text
    device_error: str | None
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


def call_kernel(kernel: KVCacheKernel, inputs: CaseInputs, layout: str, device: str) -> CallResult:
    """Call the MLA ``kernel`` once on the case, wait for the device, and report what happened.

    Every device error lands on this call: one pending before it belongs to the suite's own setup
    (an error, raised here, not the kernel's finding), one pending after it, or raised by it as a CUDA
    error, is the kernel's ``device_error``. A context that stays unusable marks ``DEVICE_FAULT``.
    A kernel may expose ``launch_count`` (incremented by its real launch path): it proves the
    candidate itself ran rather than a fallback (FlagGems counts calls the same way).
    """
    return _call(kernel, lambda: kernel(inputs.kv_c, inputs.k_pe, inputs.kv_cache, inputs.slot_mapping, layout,
                                        inputs.scale), layout, device)


def call_family_kernel(kernel: Callable[..., None], case: FamilyCase, device: str) -> CallResult:
    """Call a kernel of the MHA or indexer write once on ``case``, as ``call_kernel`` does."""
    return _call(kernel, lambda: case.call(kernel), case.spec.layout, device)


def call_gather_kernel(kernel: Callable[..., None], case: GatherCase, device: str) -> CallResult:
    """Call a reader of ``gather_and_maybe_dequant_cache`` once on ``case``, as ``call_kernel`` does."""
    return _call(kernel, lambda: case.call(kernel), case.spec.layout, device)


def call_large_kernel(kernel: Callable[..., None], case: LargeCase, device: str) -> CallResult:
    """Call a kernel of any op once on a large-address ``case``, as ``call_kernel`` does."""
    return _call(kernel, lambda: case.call(kernel), case.spec.layout, device)


def _call(kernel: object, invoke: Callable[[], None], layout: str, device: str) -> CallResult:
    earlier = pending_device_error(device)
    if earlier is not None:
        raise RuntimeError(f"a device error was pending before the kernel was called (the case setup): {earlier}")
    before = getattr(kernel, "launch_count", None)
    calls = 0
    error: BaseException | None = None
    try:
        calls += 1
        invoke()
    except Exception as exc:  # the kernel's failure is the finding, reported by the caller
        error = exc
    device_error = pending_device_error(device)
    if device_error is None and error is not None and is_device_error(error):
        device_error, error = describe_error(error), None
    if device_error is not None and pending_device_error(device) is not None:
        DEVICE_FAULT.append(f"{getattr(kernel, 'name', kernel)} on {layout} ({device_error})")
    return CallResult(error, device_error, calls, before, getattr(kernel, "launch_count", None))

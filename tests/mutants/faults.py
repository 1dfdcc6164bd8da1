"""Kernels that fail the way real kernels do: raise, hang, or kill their process.

Each of the first three behaves like the reference except on one trigger case (1 token, block size
16, bf16, layout ``auto``), so a test can show that the one bad case is reported failed with its
reason while every other case still runs and the report is still written. The ``always`` kernels
fault on every call, as a broken kernel does: the run must still end in bounded time.
"""

from __future__ import annotations

import ctypes
import time

import torch

from rtp_ref.kernels.reference import ReferenceKernel


def _is_trigger(kv_c: torch.Tensor, kv_cache: torch.Tensor, layout: str) -> bool:
    return layout == "auto" and kv_c.shape[0] == 1 and kv_cache.shape[1] == 16 and kv_c.dtype == torch.bfloat16


class _Fault(ReferenceKernel):
    #: fault on every call of a claimed layout, not only on the trigger case (an unclaimed layout is refused
    #: first, as the protocol asks: the faults under test are the write's)
    always = False

    def fault(self, device: torch.device) -> None:
        raise NotImplementedError

    def bind(self, contract):  # type: ignore[no-untyped-def]
        return type(self)(contract)

    def __call__(self, kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale):  # type: ignore[no-untyped-def]
        claimed = kv_cache_dtype in self.kv_cache_dtypes
        if (self.always and claimed) or _is_trigger(kv_c, kv_cache, kv_cache_dtype):
            self.fault(kv_c.device)
        super().__call__(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale)


class Raises(_Fault):
    name = "fault-raises"

    def fault(self, device: torch.device) -> None:
        raise RuntimeError("fault-raises: simulated kernel launch failure")


class Hangs(_Fault):
    name = "fault-hangs"

    def fault(self, device: torch.device) -> None:
        if device.type == "cuda":  # a device-side spin: the host blocks in synchronize, as with a deadlock
            torch.cuda._sleep(2**62)
            torch.cuda.synchronize()
        time.sleep(10**6)


class KillsProcess(_Fault):
    name = "fault-kills-process"

    def fault(self, device: torch.device) -> None:
        if device.type == "cuda":  # an out-of-bounds device access: the CUDA context is lost for good
            x = torch.zeros(4, device=device)
            x[torch.tensor([1 << 40], device=device)] = 1.0
            torch.cuda.synchronize()
        ctypes.string_at(0)  # segmentation fault on the CPU


class AlwaysRaises(Raises):
    name = "fault-always-raises"
    always = True
    kv_cache_dtypes = ("auto", "fp8")


class AlwaysHangs(Hangs):
    name = "fault-always-hangs"
    always = True
    kv_cache_dtypes = ("auto",)  # one layout: each hang costs a whole case timeout


class AlwaysKillsProcess(KillsProcess):
    name = "fault-always-kills-process"
    always = True
    kv_cache_dtypes = ("auto", "fp8")


class RaisesOnEdge(Raises):
    """Raises on every edge case (8 tokens): a kernel a bit_exact deviation for "edge" must not excuse."""

    name = "fault-raises-on-edge"
    kv_cache_dtypes = ("auto",)

    def __call__(self, kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale):  # type: ignore[no-untyped-def]
        if kv_c.shape[0] == 8:
            self.fault(kv_c.device)
        ReferenceKernel.__call__(self, kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale)


def kernels() -> list[ReferenceKernel]:
    """The entry point for ``RTP_REF_KERNELS``."""
    return [Raises(), Hangs(), KillsProcess(), AlwaysRaises(), AlwaysHangs(), AlwaysKillsProcess(), RaisesOnEdge()]

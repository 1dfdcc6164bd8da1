"""Kernels without ``bind(contract)``: they follow one platform's contract, fixed when they are built, so they can
be certified only where that platform is the machine's own (native). Loaded into a certify run through
``RTP_REF_KERNELS=tests.cli.unbindable_kernels:kernels``; tests/cli/test_certify_misuse.py selects them.
"""

from __future__ import annotations

from collections.abc import Collection

import torch

from rtp_ref.contract import WriteContract
from rtp_ref.kernels.protocol import UnsupportedLayoutError
from rtp_ref.kernels.reference import ReferenceKernel
from rtp_ref.platform import load_platform


class CpuOnlyWriter:
    """The reference writer fixed to the cpu table's contract, with no way to follow another."""

    name = "unbindable-cpu-writer"
    kv_cache_dtypes: Collection[str] = ("auto", "fp8")
    devices: Collection[str] = ("cpu",)

    def __init__(self) -> None:
        self._writer = ReferenceKernel(WriteContract.for_platform(load_platform("cpu")))

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        if kv_cache_dtype not in self.kv_cache_dtypes:
            raise UnsupportedLayoutError(f"{self.name} does not claim {kv_cache_dtype}")
        self._writer(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale)


class CpuOnlyNoWrite(CpuOnlyWriter):
    """Fixed to the cpu table like ``CpuOnlyWriter``, and broken: it writes nothing, so its certification fails."""

    name = "unbindable-cpu-no-write"

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        if kv_cache_dtype not in self.kv_cache_dtypes:
            raise UnsupportedLayoutError(f"{self.name} does not claim {kv_cache_dtype}")


def kernels() -> list[object]:
    """The entry point for ``RTP_REF_KERNELS``."""
    return [CpuOnlyWriter(), CpuOnlyNoWrite()]

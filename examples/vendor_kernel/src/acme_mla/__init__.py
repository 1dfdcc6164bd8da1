"""ACME's MLA cache writer: the smallest real kernel package rtp-ref can certify.

It claims two layouts, ``auto`` (a bf16/fp16 copy) and ``fp8`` (per-tensor scale, OCP e4m3,
saturating), on CPU and CUDA. For every other layout it raises, as the protocol requires.
"""

from __future__ import annotations

import torch

FP8_E4M3_MAX = 448.0


class AcmeMlaKernel:
    """``concat_and_cache_mla`` for the ``auto`` and ``fp8`` layouts, in plain torch."""

    name = "acme-mla"
    kv_cache_dtypes = ("auto", "fp8")
    devices = ("cpu", "cuda")

    def __call__(
        self,
        kv_c: torch.Tensor,
        k_pe: torch.Tensor,
        kv_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
        kv_cache_dtype: str,
        scale: torch.Tensor,
    ) -> None:
        if kv_cache_dtype not in self.kv_cache_dtypes:
            raise NotImplementedError(f"acme-mla does not support kv_cache_dtype={kv_cache_dtype!r}")
        if kv_cache_dtype == "auto" and kv_cache.dtype != kv_c.dtype:
            # auto stores the inputs' own type: writing bf16 rows into an fp16 cache is an engine's bug to report
            raise ValueError(f"acme-mla: kv_cache_dtype 'auto' needs a {kv_c.dtype} cache, got {kv_cache.dtype}")
        block_size = kv_cache.shape[1]
        capacity = kv_cache.shape[0] * block_size
        # Validate before touching the cache: a bad slot must not leave a half-written cache.
        if slot_mapping.numel() and int(slot_mapping.max()) >= capacity:
            raise ValueError(f"slot_mapping has slot {int(slot_mapping.max())}; valid: -1 (skip) or 0..{capacity - 1}")
        # only the first len(slot_mapping) rows are tokens: an engine may pad the inputs past them
        tokens = slot_mapping.numel()
        keep = slot_mapping >= 0
        slots = slot_mapping[keep]
        entries = torch.cat([kv_c[:tokens][keep], k_pe[:tokens][keep]], dim=-1)
        if kv_cache_dtype == "fp8":
            # Clamp first: torch's own cast does not saturate on every build. And write one canonical
            # NaN (0x7F): torch's cast keeps a NaN's sign, the contract does not.
            scaled = (entries.float() / scale.float()).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)
            scaled = torch.where(scaled.isnan(), torch.full_like(scaled, float("nan")), scaled)
            entries = scaled.to(torch.float8_e4m3fn).view(torch.uint8)
        kv_cache[slots // block_size, slots % block_size] = entries.to(kv_cache.dtype)


def kernels() -> list[AcmeMlaKernel]:
    """The entry point: every kernel this package provides."""
    return [AcmeMlaKernel()]

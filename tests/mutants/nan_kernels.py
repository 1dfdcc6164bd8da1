"""Kernels that store NaN as production kernels do, and kernels that get NaN wrong: the NaN policy's test subjects.

Each is the reference of its op with its NaNs rewritten after the call, certified through ``RTP_REF_KERNELS``
(``nan_kernels``) by tests/mutants/test_nan_policy.py. Which stored codes are NaN is read with torch's own float8
and 16-bit dtypes, not rtp-ref's encodings, so the kernels do not share the code under test:

* ``nan-mha-e5m2-hardware``: an MHA e5m2 writer storing every NaN as 0x7F, what an H200's
  ``cvt.rn.satfinite.e5m2x2.f32`` and vLLM's ``reshape_and_cache_flash`` store (the reference stores 0x7E);
* ``nan-gather-hardware``: an MLA reader storing every NaN as 0x7FFF (bf16, fp16) or 0x7FFFFFFF (fp32), what an
  NVIDIA GPU's conversion of a NaN product gives and vLLM's ``gather_and_maybe_dequant_cache`` stores (the reference
  stores 0x7FC0 / 0x7E00 / 0x7FC00000);
* ``nan-mha-e5m2-nan-for-number``, ``nan-mha-e5m2-number-for-nan``, ``nan-gather-nan-for-number``: a NaN code
  where the reference stores a number, a number where it stores a NaN: faults every table fails.
"""

from __future__ import annotations

import torch

from rtp_ref.kv.layouts import MlaLayout
from rtp_ref.kv.mha_paged import MhaPagedLayout, reference_reshape_and_cache_flash
from tests.mutants.gather_mutants import GatherMutant
from tests.mutants.mha_indexer_mutants import MhaMutant

#: the e5m2 NaN an H200's conversion writes, the largest finite e5m2 code (57344)
E5M2_HARDWARE_NAN, E5M2_MAX = 0x7F, 0x7B
#: the NaN an NVIDIA GPU's float conversion writes, by dst dtype, as the signed integer of the dtype's width
HARDWARE_NAN = {torch.bfloat16: 0x7FFF, torch.float16: 0x7FFF, torch.float32: 0x7FFFFFFF}
_INT = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}


def _e5m2_nan(codes: torch.Tensor) -> torch.Tensor:
    """Which uint8 codes are e5m2 NaNs, read by torch's float8_e5m2."""
    return torch.isnan(codes.view(torch.float8_e5m2).float())


class _E5m2Rewrite(MhaMutant):
    """The MHA e5m2 reference, then each written token's codes ([tokens, H, D] uint8) passed through ``rewrite``."""

    kv_cache_dtypes = ("fp8_e5m2",)

    def rewrite(self, codes: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def write(self, layout: MhaPagedLayout, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
              value_cache: torch.Tensor, slots: torch.Tensor, k_scale: torch.Tensor, v_scale: torch.Tensor) -> None:
        reference_reshape_and_cache_flash(layout, key, value, key_cache, value_cache, slots, k_scale, v_scale)
        keep = slots >= 0
        blocks, rows = slots[keep] // key_cache.shape[1], slots[keep] % key_cache.shape[1]
        for cache in (key_cache, value_cache):
            cache[blocks, rows] = self.rewrite(cache[blocks, rows].view(torch.uint8)).view(cache.dtype)


class E5m2HardwareNan(_E5m2Rewrite):
    """Every NaN as 0x7F."""

    name = "nan-mha-e5m2-hardware"

    def rewrite(self, codes: torch.Tensor) -> torch.Tensor:
        return torch.where(_e5m2_nan(codes), E5M2_HARDWARE_NAN, codes).to(torch.uint8)


class E5m2NanForNumber(_E5m2Rewrite):
    """The first code that is a number becomes the hardware's NaN."""

    name = "nan-mha-e5m2-nan-for-number"

    def rewrite(self, codes: torch.Tensor) -> torch.Tensor:
        out = codes.clone().flatten()
        numbers = torch.nonzero(~_e5m2_nan(out)).flatten()
        if numbers.numel():
            out[numbers[0]] = E5M2_HARDWARE_NAN
        return out.reshape(codes.shape)


class E5m2NumberForNan(_E5m2Rewrite):
    """Every NaN as the largest finite code."""

    name = "nan-mha-e5m2-number-for-nan"

    def rewrite(self, codes: torch.Tensor) -> torch.Tensor:
        return torch.where(_e5m2_nan(codes), E5M2_MAX, codes).to(torch.uint8)


class _GatherRewrite(GatherMutant):
    """The reference gather, then the rows it read ([rows, R + P] of dst) changed in place by ``rewrite``."""

    kv_cache_dtypes = ("auto", "fp8")

    def rewrite(self, rows: torch.Tensor) -> None:
        raise NotImplementedError

    def read(self, layout: MlaLayout, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
             cu_seq_lens: torch.Tensor, scale: torch.Tensor, seq_starts: torch.Tensor | None) -> None:
        super().read(layout, kv_cache, dst, block_table, cu_seq_lens, scale, seq_starts)
        self.rewrite(dst[: int(cu_seq_lens[-1])])


class GatherHardwareNan(_GatherRewrite):
    """Every NaN as the hardware's."""

    name = "nan-gather-hardware"

    def rewrite(self, rows: torch.Tensor) -> None:
        rows.view(_INT[rows.dtype])[torch.isnan(rows)] = HARDWARE_NAN[rows.dtype]


class GatherNanForNumber(_GatherRewrite):
    """The first value that is a number becomes the hardware's NaN."""

    name = "nan-gather-nan-for-number"

    def rewrite(self, rows: torch.Tensor) -> None:
        numbers = torch.nonzero(~torch.isnan(rows))
        if numbers.shape[0]:
            r, c = numbers[0].tolist()
            rows.view(_INT[rows.dtype])[r, c] = HARDWARE_NAN[rows.dtype]


#: the kernels storing NaN as hardware does (certified on every table that pins no NaN)
HARDWARE = (E5m2HardwareNan, GatherHardwareNan)
#: each faulty kernel and a check that must catch it on every table
FAULTY = {E5m2NanForNumber: "numerics.error_bound", E5m2NumberForNan: "numerics.nan",
          GatherNanForNumber: "read.values"}


def nan_kernels() -> list[object]:
    """The entry point for ``RTP_REF_KERNELS``: one instance of each kernel above."""
    return [cls() for cls in (*HARDWARE, *FAULTY)]

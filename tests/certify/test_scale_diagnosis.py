"""The indexer write's contract search (rtp_ref.cases.scale_diagnosis), run by the engine on real kernels: a kernel
that divides by AMD AITER's 240, or takes the amax of the raw 16-bit patterns, is named; a correct one and one
whose scales are right but values wrong are told apart from them; the raw-pattern alternative is checked against
numpy's own float32 arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rtp_ref.cases.mha_indexer_cases import indexer_specs
from rtp_ref.cases.scale_diagnosis import AMAX_SOURCES, diagnose_scales, scales_under
from rtp_ref.certify.engine import Subject, run_case
from rtp_ref.contract import WriteContract
from rtp_ref.kv.indexer import IndexerLayout, reference_indexer_k_quant_and_cache
from rtp_ref.platform import load_platform
from tests.mutants.mha_indexer_mutants import IndexerMutant

PLATFORM = load_platform("cpu")
CONTRACT = WriteContract.for_platform(PLATFORM)


class ScalesOf(IndexerMutant):
    """The reference writer whose stored scales are a kernel's own, written from its description (``amax``: how it
    takes a slice's amax; ``divisor``), not from the search under test."""

    name = "scales-of"
    divisor = 448.0

    @staticmethod
    def amax(x: torch.Tensor) -> torch.Tensor:
        """The magnitudes the kernel takes the amax of: the values."""
        return x.float().abs()

    def write(self, layout: IndexerLayout, k: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor,
              scale_fmt: str) -> None:
        keep = slots >= 0
        x = k[keep]
        amax = self.amax(x).reshape(x.shape[0], -1, layout.quant_block_size).amax(dim=-1)
        scales = torch.clamp(amax, min=1e-4) / torch.tensor(self.divisor)
        if scale_fmt == "ue8m0":  # the smallest power of two >= s: 2^e, or 2^(e-1) when s is one already
            mantissa, exponent = torch.frexp(scales)
            scales = torch.ldexp(torch.ones_like(scales), torch.where(mantissa == 0.5, exponent - 1, exponent))
        reference_indexer_k_quant_and_cache(layout, k, kv_cache, slots, scale_fmt)
        blocks, d, n = kv_cache.reshape(kv_cache.shape[0], -1), layout.head_dim, layout.scales_per_token
        for row, slot in enumerate(slots[keep].tolist()):
            block, token = divmod(slot, kv_cache.shape[1])
            at = kv_cache.shape[1] * d + token * 4 * n
            blocks[block, at: at + 4 * n] = scales[row].contiguous().view(torch.uint8)


class Aiter240(ScalesOf):
    divisor = 240.0


class RawPatterns(ScalesOf):
    @staticmethod
    def amax(x: torch.Tensor) -> torch.Tensor:
        """The 16-bit patterns taken as unsigned integers, as a kernel converting the bits (not the value) does."""
        return (x.view(torch.int16).to(torch.int32) & 0xFFFF).float()


def _diagnosis(kernel: object, variant: str, dtype: torch.dtype) -> str:
    key = next(s for s in indexer_specs(variant) if s.kind == "random" and s.tokens == 37 and s.input_dtype == dtype)
    result = run_case(Subject("k", kernel, "indexer_k_quant_and_cache", "cpu", "native"), key, CONTRACT, PLATFORM,
                      None)
    assert result.judgement.failed
    return str(result.record.get("diagnosis"))


@pytest.mark.parametrize("variant", ["none", "ue8m0"])
def test_a_kernel_dividing_by_aiters_240_is_named(variant: str) -> None:
    text = _diagnosis(Aiter240().bind(CONTRACT), variant, torch.bfloat16)
    assert text.startswith("the scales follow ") and "divisor 240: e4m3fnuz max, AITER gfx942" in text, text
    assert "amax of the values" in text and text.endswith("(divisor 448: OCP e4m3 max, vLLM CUDA)")


def test_a_kernel_taking_the_amax_of_raw_16bit_patterns_is_named() -> None:
    text = _diagnosis(RawPatterns().bind(CONTRACT), "none", torch.float16)
    assert text.startswith("the scales follow max(amax, 1e-4) / 448, amax of the raw 16-bit patterns"), text


def test_wrong_values_under_the_contracts_scales_are_said_so() -> None:
    x = torch.randn(5, 128).to(torch.bfloat16)
    stored = scales_under(x, 64, AMAX_SOURCES[0], 448.0, False)
    assert diagnose_scales(x, 64, stored, 448.0, False) == "the scales are the contract's: the values are wrong"


def test_the_raw_pattern_alternative_is_the_unsigned_bits_over_448() -> None:
    x = torch.tensor([[0.5, -2.0]], dtype=torch.float16)
    bits = np.array([0.5, -2.0], dtype=np.float16).view(np.uint16).astype(np.float32)
    want = np.float32(bits.max()) / np.float32(448.0)
    assert float(scales_under(x, 2, AMAX_SOURCES[2], 448.0, False)[0, 0]) == float(want)


def test_scales_no_rule_explains_are_said_so() -> None:
    x = torch.randn(3, 128).to(torch.bfloat16)
    stored = torch.full((3, 2), 0.123, dtype=torch.float32)
    assert diagnose_scales(x, 64, stored, 448.0, False).startswith("the scales match no known scale rule (tried 18)")

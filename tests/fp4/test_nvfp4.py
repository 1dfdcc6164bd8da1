"""NVFP4 with a global scale (rtp_ref.fp4.nvfp4) against an oracle written another way: numpy float32 arithmetic
(each operation one IEEE rounding) and ml_dtypes' e4m3fn and E2M1 conversions, block by block in a loop."""

from __future__ import annotations

import random
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest
import torch

from rtp_ref.cases.mha_indexer_cases import FP4_WITNESS
from rtp_ref.fp4.e2m1 import NO_CODE, NegativeZero
from rtp_ref.fp4.nvfp4 import NVFP4_BLOCK, NVFP4_VLLM, Nvfp4Conventions, nvfp4_quantize
from rtp_ref.fp4.quantize import PayloadDivision
from rtp_ref.fp4.scales import AmaxDivision

F32 = np.float32
#: every convention the fields can combine: the vLLM set and each fingerprint changed
CONVENTIONS = {
    "vllm": NVFP4_VLLM,
    "div-six": replace(NVFP4_VLLM, division=AmaxDivision.DIV_SIX),
    "ieee-div": replace(NVFP4_VLLM, payload=PayloadDivision.IEEE_DIV),
    "positive-zero": replace(NVFP4_VLLM, negative_zero=NegativeZero.POSITIVE),
}
K_SCALES = (1.0, 0.37, 3.1, 2.0**-4, 17.0)


def oracle_block(block: np.ndarray, k_scale: float, c: Nvfp4Conventions) -> tuple[int, list[int]]:
    """One block of 16 float32 values: (its e4m3 scale byte, its 16 E2M1 codes)."""
    g = F32(1) / F32(k_scale)
    amax = F32(np.max(np.abs(block)))
    q = amax / F32(6) if c.division is AmaxDivision.DIV_SIX else amax * F32(1 / 6)
    product = min(g * q, F32(448))  # the conversion saturates; ml_dtypes' would give NaN past 464
    scale = np.array([product], dtype=F32).astype(ml_dtypes.float8_e4m3fn)
    s = F32(scale.astype(F32)[0]) * (F32(1) / g)
    quotient: np.ndarray = (block * F32(0) if s == 0 else
                            block / s if c.payload is PayloadDivision.IEEE_DIV else block * (F32(1) / s))
    if c.negative_zero is NegativeZero.POSITIVE:
        quotient = quotient + F32(0)
    codes = quotient.astype(F32).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    return int(scale.view(np.uint8)[0]), [int(v) for v in codes]


def blocks(seed: int, count: int) -> np.ndarray:
    """float32 blocks of bf16 values over many binades, with zeros, -0.0, E2M1 ties times a power of two, and
    blocks whose scale underflows or saturates."""
    rng = random.Random(seed)
    out = np.zeros((count, NVFP4_BLOCK), dtype=F32)
    for i in range(count):
        scale = 2.0 ** rng.randint(-24, 14)
        row = [rng.choice((rng.uniform(-6, 6), rng.choice((0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -5.0, -0.0)),
                           0.0)) * scale for _ in range(NVFP4_BLOCK)]
        out[i] = row
    bf16 = torch.from_numpy(out).to(torch.bfloat16).to(torch.float32).numpy()
    return np.concatenate([bf16, FINGERPRINT_BLOCKS])


#: the conformance cases' witness (rtp_ref.cases.mha_indexer_cases.FP4_WITNESS), whose bytes each fingerprint decides
#: at k_scale 1, proven so here by the oracle: amax 1.40625 gives the scale 0.234375 (e4m3 0x27), and 0.5859375 /
#: 0.234375 is the tie 2.5 (code 0x4, to even) where 0.5859375 * (1 / 0.234375) is just above it (0x5); -0.0 is 0x8
#: or 0x0
FINGERPRINT_BLOCKS = np.array([FP4_WITNESS], dtype=F32)


@pytest.mark.parametrize("name", CONVENTIONS)
@pytest.mark.parametrize("k_scale", K_SCALES)
def test_bytes_equal_the_float32_and_ml_dtypes_oracle(name: str, k_scale: float) -> None:
    conventions = CONVENTIONS[name]
    x = blocks(seed=hash((name, k_scale)) % 1000, count=399)
    got = nvfp4_quantize(torch.from_numpy(x).reshape(-1, 2 * NVFP4_BLOCK), torch.tensor([k_scale]), conventions)
    scales = got.scales.reshape(-1, 1)
    codes = got.codes.reshape(-1, NVFP4_BLOCK)
    assert bool(got.defined.all())
    for i, block in enumerate(x):
        want_scale, want_codes = oracle_block(block, k_scale, conventions)
        assert (int(scales[i, 0]), codes[i].tolist()) == (want_scale, want_codes), (i, block.tolist())


def test_the_payload_and_negative_zero_fingerprints_change_bytes() -> None:
    """The oracle tells the payload division and the -0.0 rule apart (so that the comparison above can fail), and
    the quantizer's bytes differ where the oracle's do."""
    block = FINGERPRINT_BLOCKS[0]
    base = oracle_block(block, 1.0, NVFP4_VLLM)
    assert base == (0x27, [0x7, 0x5, 0xD, 0x8] + [0] * 12)
    assert oracle_block(block, 1.0, CONVENTIONS["ieee-div"])[1][1:3] == [0x4, 0xC]
    assert oracle_block(block, 1.0, CONVENTIONS["positive-zero"])[1][3] == 0x0
    quantized = {name: nvfp4_quantize(torch.from_numpy(block), torch.tensor([1.0]), c).codes.tolist()
                 for name, c in CONVENTIONS.items()}
    assert quantized["vllm"] != quantized["ieee-div"] and quantized["vllm"] != quantized["positive-zero"]


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
def test_amax_over_six_or_times_one_sixth_never_changes_a_scale_of_16_bit_inputs(dtype: type) -> None:
    """Every positive finite bf16 and fp16 amax at each k_scale, in the oracle's arithmetic (numpy float32 and
    ml_dtypes' e4m3fn, not the module's): the two ways of forming amax / 6 give the same scale byte (a 16-bit amax has
    too few significant bits to land the two quotients on either side of an e4m3 tie), so this fingerprint of the FP4
    MLA records cannot tell NVFP4 MHA writers apart, and no layout flag names it. The scales do move with the amax,
    so the comparison is not vacuous; and the module agrees with the oracle on each."""
    bits = np.arange(1, 0x7C00 if dtype is np.float16 else 0x7F80, dtype=np.uint16)  # up to +inf's bits
    amax = bits.view(dtype).astype(F32)
    for k_scale in K_SCALES:
        g = F32(1) / F32(k_scale)
        with np.errstate(over="ignore"):  # a product past float32's range is inf, which saturates to 448 as any other
            times, over = ((np.minimum(g * q, F32(448)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8))
                           for q in (amax * F32(1 / 6), amax / F32(6)))
        assert np.array_equal(times, over), k_scale
        assert len(np.unique(times)) > 100
        rows = torch.zeros(amax.size, NVFP4_BLOCK)
        rows[:, 0] = torch.from_numpy(amax)
        module = nvfp4_quantize(rows, torch.tensor([k_scale]), NVFP4_VLLM).scales.flatten().numpy()
        assert np.array_equal(module, times), k_scale


def test_a_zero_scale_stores_signed_zeros_and_non_finite_blocks_are_undefined() -> None:
    row = torch.tensor([0.0, -0.0, 2.0**-30, -(2.0**-30)] + [0.0] * 12)
    got = nvfp4_quantize(row, torch.tensor([1.0]), NVFP4_VLLM)
    assert int(got.scales) == 0 and got.codes[:4].tolist() == [0, 8, 0, 8]
    bad = torch.tensor([1.0, float("nan")] + [0.0] * 14 + [float("inf")] + [0.0] * 15)
    got = nvfp4_quantize(bad, torch.tensor([1.0]), NVFP4_VLLM)
    assert got.defined.tolist() == [False, False] and set(got.codes.tolist()) == {NO_CODE}


def test_a_head_size_not_a_multiple_of_16_is_refused() -> None:
    with pytest.raises(ValueError, match="multiple of 16"):
        nvfp4_quantize(torch.zeros(24), torch.tensor([1.0]), NVFP4_VLLM)

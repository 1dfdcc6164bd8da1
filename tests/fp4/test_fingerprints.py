"""Each pair of conventions the field splits on writes different bytes on a witness found by search, proven with
exact rationals, and elsewhere the same bytes (on every finite bf16), or, for bump, different bytes exactly where
the exact rationals say so: a conformance check that names the convention can tell the two apart.

Pairs: ``amax * (1/6)`` vs ``amax / 6`` and IEEE division vs a reciprocal multiply (sglang PR #39123), -0 as 0x8
vs 0x0 (the torch reference vs sglang's kernel), FlashMLA's bump vs plain RNE, float32 log2 vs the exact exponent
(vLLM's MXFP4 test quantizer).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from fractions import Fraction

import torch

from rtp_ref.fp4.e2m1 import pack
from rtp_ref.fp4.quantize import (
    MXFP4_FLOAT_LOG2,
    MXFP4_OCP,
    V41_FP4,
    V41_FP4_TORCH,
    Fp4Conventions,
    PayloadDivision,
    quantize_row,
)
from rtp_ref.fp4.scales import AmaxDivision, ScaleRounding, scale_codes
from tests.fp4.oracles import (
    all_finite_bf16,
    div_six,
    exact_e4m3_code,
    float32,
    float32_neighbours,
    floor_log2,
    log2_rounds_to,
    mul_one_sixth,
    rational_code,
    rn32,
)
from tests.fp8.oracles import positive_grid

V41_DIV_SIX = dataclasses.replace(V41_FP4, scale=dataclasses.replace(V41_FP4.scale, division=AmaxDivision.DIV_SIX))
V41_RECIPROCAL = dataclasses.replace(V41_FP4, payload=PayloadDivision.RECIPROCAL_MUL)
V41_BUMP = dataclasses.replace(V41_FP4, scale=dataclasses.replace(V41_FP4.scale, rounding=ScaleRounding.BUMP))
MX_CEIL_EXACT = dataclasses.replace(
    MXFP4_FLOAT_LOG2, scale=dataclasses.replace(MXFP4_FLOAT_LOG2.scale, rounding=ScaleRounding.CEIL_LOG2_EXACT)
)


def row_bytes(x: torch.Tensor, conventions: Fp4Conventions) -> list[bytes]:
    """Each row's bytes as a cache stores them: the packed codes, then the scales."""
    q = quantize_row(x, conventions)
    assert bool(q.defined.all())
    rows = torch.cat([pack(q.codes), q.scales], dim=-1)
    return [bytes(r) for r in rows.tolist()]


def bf16_rows(block: int) -> torch.Tensor:
    """Every finite bf16 but -0.0, in rows of ``block`` (the tail padded with zeros)."""
    x = all_finite_bf16()
    x = x[~((x == 0) & torch.signbit(x))].float()
    pad = (-x.numel()) % block
    return torch.cat([x, torch.zeros(pad)]).reshape(-1, block)


def witness_row(first: list[float], block: int) -> torch.Tensor:
    """A row of ``block`` values starting with ``first`` (whose first value is the amax), then 0 and that amax
    times 1/4 and -1/2 (exact), which change no scale."""
    a = abs(first[0])
    rest = [0.0, a * 0.25, -a * 0.5] * block
    return torch.tensor([first + rest[: block - len(first)]], dtype=torch.float32)


def e4m3_midpoint_neighbours() -> list[float]:
    """float32 amax values around 6 * m for every midpoint m between adjacent e4m3 values in the scale's clamp."""
    grid = [v for v, _ in positive_grid("e4m3fn")][:-1]
    mids = [(lo + hi) / 2 for lo, hi in itertools.pairwise(grid) if lo >= Fraction(1, 512)]
    return sorted({a for m in mids for a in float32_neighbours(float(6 * m), 8)})


def test_one_sixth_multiply_vs_division() -> None:
    candidates = e4m3_midpoint_neighbours()
    amax = torch.tensor(candidates)
    mul = scale_codes(amax, V41_FP4.scale).tolist()
    div = scale_codes(amax, V41_DIV_SIX.scale).tolist()
    found = [i for i in range(len(candidates)) if mul[i] != div[i]]
    assert found, "no witness among the candidates"
    # every difference, and only those, is where the exact float32 quotients round to different e4m3 codes
    for i, a in enumerate(candidates):
        want_mul = exact_e4m3_code(mul_one_sixth(a), bump=False)
        want_div = exact_e4m3_code(div_six(a), bump=False)
        assert (mul[i], div[i]) == (want_mul, want_div), a
    a = candidates[found[0]]
    assert mul_one_sixth(a) != div_six(a)
    x = witness_row([a], 16)
    assert row_bytes(x, V41_FP4) != row_bytes(x, V41_DIV_SIX)
    rows = bf16_rows(16)
    assert row_bytes(rows, V41_FP4) == row_bytes(rows, V41_DIV_SIX)


def test_ieee_division_vs_reciprocal_multiply() -> None:
    """Witness: a scale d that is not a power of two (amax = 6 d) and x beside m * d for an E2M1 midpoint m."""
    d = 1.75
    amax = 6 * d
    assert exact_e4m3_code(mul_one_sixth(amax), bump=False) == 0x3E  # 1.75 = 1.75 * 2**0: the scale is d itself
    mids = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    xs = sorted({x for m in mids for x in float32_neighbours(m * d, 4)})
    rows = torch.tensor([[amax, x] + [0.0] * 14 for x in xs])
    ieee = quantize_row(rows, V41_FP4).codes[:, 1].tolist()
    recip = quantize_row(rows, V41_RECIPROCAL).codes[:, 1].tolist()
    r = rn32(1 / Fraction(d))
    for x, got_ieee, got_recip in zip(xs, ieee, recip, strict=True):
        assert got_ieee == rational_code(float32(rn32(Fraction(x) / Fraction(d)))), x
        assert got_recip == rational_code(float32(rn32(Fraction(x) * r))), x
    witness = next(x for x, i, c in zip(xs, ieee, recip, strict=True) if i != c)
    assert rn32(Fraction(witness) / Fraction(d)) != rn32(Fraction(witness) * r)
    row = witness_row([amax, witness], 16)
    assert row_bytes(row, V41_FP4) != row_bytes(row, V41_RECIPROCAL)
    bf16 = bf16_rows(16)
    assert row_bytes(bf16, V41_FP4) == row_bytes(bf16, V41_RECIPROCAL)
    # for a power-of-two scale, 1/s is exact and the two are one number: every ue8m0 convention agrees everywhere
    for mx in (MXFP4_OCP, MXFP4_FLOAT_LOG2):
        bf16 = bf16_rows(32)
        assert row_bytes(bf16, mx) == row_bytes(bf16, dataclasses.replace(mx, payload=PayloadDivision.RECIPROCAL_MUL))


def test_negative_zero_kept_vs_positive() -> None:
    x = witness_row([3.0, -0.0], 16)
    assert math.copysign(1.0, float(x[0, 1])) < 0 and Fraction(float(x[0, 1])) == 0
    kept, positive = row_bytes(x, V41_FP4_TORCH)[0], row_bytes(x, V41_FP4)[0]
    assert kept[0] >> 4 == 0x8 and positive[0] >> 4 == 0x0
    assert kept[1:] == positive[1:]
    rows = bf16_rows(16)
    assert row_bytes(rows, V41_FP4_TORCH) == row_bytes(rows, V41_FP4)


def test_bump_vs_round_to_nearest_even() -> None:
    """Witness: amax 6.375, whose quotient 1.0625 is an e4m3 tie that rounds down to 1.0; bump takes 1.125."""
    a = 6.375
    q = mul_one_sixth(a)
    assert q == Fraction(17, 16)
    assert (exact_e4m3_code(q, bump=False), exact_e4m3_code(q, bump=True)) == (0x38, 0x39)
    x = witness_row([a], 16)
    assert row_bytes(x, V41_FP4) != row_bytes(x, V41_BUMP)
    # elsewhere: the two differ exactly where RNE's value lies below the quotient
    candidates = e4m3_midpoint_neighbours()
    rne = scale_codes(torch.tensor(candidates), V41_FP4.scale).tolist()
    bump = scale_codes(torch.tensor(candidates), V41_BUMP.scale).tolist()
    for a, got_rne, got_bump in zip(candidates, rne, bump, strict=True):
        want = exact_e4m3_code(mul_one_sixth(a), bump=True)
        assert got_bump == want and (got_bump != got_rne) == (want != exact_e4m3_code(mul_one_sixth(a), False)), a


def test_float_log2_vs_exact_exponent() -> None:
    """Witness: an amax just above 6 * 2**k whose quotient's float32 log2 rounds to k: a scale one binade low."""
    candidates = sorted({a for k in range(-120, 121) for a in float32_neighbours(6.0 * 2.0**k, 3)})
    amax = torch.tensor(candidates)
    low = scale_codes(amax, MXFP4_FLOAT_LOG2.scale).tolist()
    exact = scale_codes(amax, MX_CEIL_EXACT.scale).tolist()
    for a, got_low, got_exact in zip(candidates, low, exact, strict=True):
        y = div_six(max(a, 6 * 2.0**-126))
        k = floor_log2(y)
        lands_low = Fraction(2) ** k != y and log2_rounds_to(y, k)
        assert got_exact == (k if Fraction(2) ** k == y else k + 1) + 127, a
        assert got_low == got_exact - lands_low, a
    witness = next(a for a, lo, ex in zip(candidates, low, exact, strict=True) if lo != ex and a > 24)
    y = div_six(witness)
    k = floor_log2(y)
    assert y > Fraction(2) ** k and log2_rounds_to(y, k)
    x = witness_row([witness], 32)
    assert row_bytes(x, MXFP4_FLOAT_LOG2) != row_bytes(x, MX_CEIL_EXACT)
    # one binade low, the amax saturates to 6 (code 7); with the exact exponent it is 3 (code 5)
    assert quantize_row(x, MXFP4_FLOAT_LOG2).codes[0, 0] == 0x7 and quantize_row(x, MX_CEIL_EXACT).codes[0, 0] == 0x5
    rows = bf16_rows(32)
    assert row_bytes(rows, MXFP4_FLOAT_LOG2) == row_bytes(rows, MX_CEIL_EXACT)

"""The FP4 scale rules against exact rationals: every rule's code for every finite non-negative bf16 amax (and
float32 values bf16 cannot spell), the float32 log2 windows proven edge by edge, and the traits' validation."""

from __future__ import annotations

import dataclasses
import math
import random
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import torch

from rtp_ref.fp4.quantize import MXFP4_FLOAT_LOG2, MXFP4_OCP, V41_FP4
from rtp_ref.fp4.scales import (
    ONE_SIXTH_F32,
    AmaxDivision,
    ScaleElement,
    ScaleRounding,
    ScaleTraits,
    amax_quotient,
    decode_scales,
    quotient_scale_codes,
    scale_codes,
)
from tests.fp4.oracles import (
    all_finite_bf16,
    ceil_log2,
    div_six,
    exact_e4m3_code,
    float32,
    floor_log2,
    log2_rounds_to,
    mul_one_sixth,
    rn32,
)

E4M3_RNE = V41_FP4.scale
E4M3_BUMP = dataclasses.replace(E4M3_RNE, rounding=ScaleRounding.BUMP)
UE8M0_CEIL = dataclasses.replace(MXFP4_FLOAT_LOG2.scale, rounding=ScaleRounding.CEIL_LOG2_EXACT)
UE8M0_FLOAT = MXFP4_FLOAT_LOG2.scale


def amax_values() -> list[float]:
    """Every finite bf16 >= 0 as a float32, a thousand random float32 in [0, 3000), and 6 * 2**k for every k."""
    x = all_finite_bf16().float()
    rng = random.Random(6)
    extra = [float(np.float32(rng.uniform(0.0, 3000.0))) for _ in range(1000)]
    extra += [6.0 * 2.0**k for k in range(-126, 126)]
    return sorted({abs(v) for v in x.tolist()} | set(extra))


def exact_quotient(amax: float, division: AmaxDivision) -> Fraction:
    """``amax / 6`` as float32 by ``division``, from exact rationals."""
    return div_six(amax) if division is AmaxDivision.DIV_SIX else mul_one_sixth(amax)


def clamped(q: Fraction, traits: ScaleTraits) -> Fraction:
    assert traits.clamp is not None
    lo, hi = traits.clamp
    q = max(q, Fraction(lo))
    return q if math.isinf(hi) else min(q, Fraction(hi))


def test_one_sixth_is_one_sixth_rounded_to_float32() -> None:
    assert Fraction(ONE_SIXTH_F32) == rn32(Fraction(1, 6)) == Fraction(11184811, 2**26)


@pytest.mark.parametrize("division", list(AmaxDivision))
def test_amax_quotient_is_one_float32_rounding(division: AmaxDivision, device: torch.device) -> None:
    values = amax_values()
    ours = amax_quotient(torch.tensor(values, device=device), division).cpu().tolist()
    bad = [(a, q) for a, q in zip(values, ours, strict=True) if Fraction(q) != exact_quotient(a, division)]
    assert bad == []


@pytest.mark.parametrize("traits", [E4M3_RNE, E4M3_BUMP], ids=["rne", "bump"])
def test_e4m3_scale_codes_match_exact_rationals(traits: ScaleTraits) -> None:
    values = amax_values()
    ours = scale_codes(torch.tensor(values), traits).tolist()
    assert traits.division is not None
    bump = traits.rounding is ScaleRounding.BUMP
    want = [exact_e4m3_code(clamped(exact_quotient(a, traits.division), traits), bump) for a in values]
    assert [(a, o, w) for a, o, w in zip(values, ours, want, strict=True) if o != w] == []


def test_bump_never_leaves_a_value_past_six() -> None:
    """Bump's purpose: the decoded scale is at least amax / 6 (as float32), where the clamp leaves room."""
    values = [a for a in amax_values() if 6 * 2.0**-9 <= a <= 6 * 448.0]
    amax = torch.tensor(values)
    assert bool((decode_scales(scale_codes(amax, E4M3_BUMP), E4M3_BUMP) >= amax_quotient(amax, "mul_one_sixth")).all())


def test_ocp_floor_matches_exact_rationals() -> None:
    values = amax_values()
    ours = scale_codes(torch.tensor(values), MXFP4_OCP.scale).tolist()
    want = [0 if a == 0 else max(floor_log2(Fraction(a)) - 2 + 127, 0) for a in values]
    assert [(a, o, w) for a, o, w in zip(values, ours, want, strict=True) if o != w] == []


def test_ceil_exact_matches_exact_rationals() -> None:
    values = amax_values()
    ours = scale_codes(torch.tensor(values), UE8M0_CEIL).tolist()
    want = [ceil_log2(clamped(exact_quotient(a, AmaxDivision.DIV_SIX), UE8M0_CEIL)) + 127 for a in values]
    assert [(a, o, w) for a, o, w in zip(values, ours, want, strict=True) if o != w] == []


def test_float_log2_windows_are_proven_edge_by_edge() -> None:
    """For 2**k, every k from -126 up to 126 (amax / 6 of a float32 stays below 2**126), and the 24 float32 values
    above it (past every window), ``FLOAT_LOG2`` is one below the exact ceiling exactly where a correctly rounded
    float32 log2 is k: decided by exact bounds, not by the windows the rule computes."""
    wrong = []
    lands_low = 0
    for k in range(-126, 127):
        quotients = [Fraction(2) ** k * (1 + Fraction(j, 2**23)) for j in range(25)]
        ours = quotient_scale_codes(torch.tensor([float32(q) for q in quotients]), UE8M0_FLOAT).tolist()
        for j, (q, got) in enumerate(zip(quotients, ours, strict=True)):
            want = k + 127 if j == 0 or log2_rounds_to(q, k) else k + 128
            lands_low += j > 0 and want == k + 127
            if got != want:
                wrong.append((k, j, got, want))
    assert wrong == []
    assert lands_low > 1000  # the windows exist (up to 22 values wide near 2**+-127)


def test_scale_codes_refuse_non_finite_amax_and_unclamped_quotients() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        scale_codes(torch.tensor([1.0, math.inf]), E4M3_RNE)
    with pytest.raises(ValueError, match="outside the clamp"):
        quotient_scale_codes(torch.tensor([449.0]), E4M3_RNE)
    with pytest.raises(ValueError, match="reads amax"):
        quotient_scale_codes(torch.tensor([1.0]), MXFP4_OCP.scale)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"block": 8}, "block must be 16 or 32"),
        ({"rounding": ScaleRounding.FLOAT_LOG2}, "an e4m3fn scale rounds by one of rne, bump"),
        ({"clamp": None}, "needs a clamp"),
        ({"clamp": (-1.0, 448.0)}, "0 <= lo <= hi"),
        ({"clamp": (2.0, 1.0)}, "0 <= lo <= hi"),
        ({"clamp": (1.0, 500.0)}, "hi <= 448"),
        ({"division": None}, "division is None exactly for floor_log2_exact"),
    ],
)
def test_traits_refuse_inconsistent_records(change: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        dataclasses.replace(E4M3_RNE, **change)


def test_ue8m0_traits_refuse_inconsistent_records() -> None:
    with pytest.raises(ValueError, match="lo >= 2"):
        ScaleTraits(ScaleElement.UE8M0, 32, ScaleRounding.FLOAT_LOG2, AmaxDivision.DIV_SIX, (2.0**-130, 1.0))
    with pytest.raises(ValueError, match="takes no clamp"):
        ScaleTraits(ScaleElement.UE8M0, 32, ScaleRounding.FLOOR_LOG2_EXACT, None, (1.0, 2.0))
    with pytest.raises(ValueError, match="0 < lo <= hi"):  # a ue8m0 scale is never 0
        ScaleTraits(ScaleElement.UE8M0, 32, ScaleRounding.CEIL_LOG2_EXACT, AmaxDivision.DIV_SIX, (0.0, 1.0))
    with pytest.raises(ValueError, match="an ue8m0 scale rounds by one of"):
        ScaleTraits(ScaleElement.UE8M0, 32, ScaleRounding.RNE, AmaxDivision.DIV_SIX, (1.0, 2.0))

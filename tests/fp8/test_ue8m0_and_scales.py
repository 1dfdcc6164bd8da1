"""ue8m0 scale bytes and the tile scale rules, against math.frexp, exact rationals and ml_dtypes."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rtp_ref.fp8 import (
    FLT_MIN,
    decode,
    decode_ue8m0,
    dequantize_tiles,
    encode_ue8m0,
    quantize_tiles,
    scale_from_amax,
    tile_amax,
)
from tests.fp8.oracles import all_16bit_floats


def _expected_byte(x: float, rule: str) -> int:
    """The documented contract, computed with math.frexp (x = m * 2**e, 0.5 <= m < 1)."""
    if math.isnan(x) or math.isinf(x) or (x < 0):
        return 0xFF
    if x == 0:
        return 0
    m, e = math.frexp(x)
    floor_k = e - 1
    if rule == "floor":
        k = floor_k
    elif rule == "ceil":
        k = floor_k if m == 0.5 else floor_k + 1
    else:  # nearest, ties up: compare x with 1.5 * 2**floor_k exactly
        k = floor_k + (1 if Fraction(x) >= Fraction(3, 2) * Fraction(2) ** floor_k else 0)
    byte = max(k + 127, 0)
    return 0xFF if byte > 254 else byte


@pytest.mark.parametrize("rule", ["ceil", "floor", "nearest"])
def test_every_bf16_value_and_float32_edges(rule: str, device: torch.device) -> None:
    x = torch.cat(
        [
            all_16bit_floats(torch.bfloat16).float(),
            torch.tensor(
                [
                    FLT_MIN,
                    FLT_MIN / 2,
                    2.0**-149,
                    2.0**-127,
                    2.0**-127 * 1.5,
                    2.0**127,
                    2.0**127 * 1.5,
                    3.4028234663852886e38,
                    0.3,
                    3.0,
                    -0.0,
                ]
            ),
        ]
    )
    got = encode_ue8m0(x.to(device), rule).cpu().tolist()
    want = [_expected_byte(v, rule) for v in x.tolist()]
    assert got == want


def test_nearest_agrees_with_ml_dtypes_in_range() -> None:
    """ml_dtypes' e8m0 cast rounds to nearest (ties up in the linear domain) for positive normals."""
    x = all_16bit_floats(torch.bfloat16).float().numpy()
    keep = (x >= 2.0**-126) & (x <= 2.0**126) & np.isfinite(x)
    ref = x[keep].astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)
    got = encode_ue8m0(torch.from_numpy(x[keep]), "nearest").numpy()
    assert np.array_equal(got, ref)


def test_decode_every_byte(device: torch.device) -> None:
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).to(device)
    got = decode_ue8m0(codes).cpu().tolist()
    assert math.isnan(got[255])
    assert got[:255] == [math.ldexp(1.0, b - 127) for b in range(255)]
    ref = np.arange(255, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    assert got[:255] == ref.tolist()


def test_ceil_mutant_floor_is_caught() -> None:
    """A writer that floors where the contract says ceil must fail the same check."""
    x = all_16bit_floats(torch.bfloat16).float()
    wrong = encode_ue8m0(x, "floor").tolist()
    assert wrong != [_expected_byte(v, "ceil") for v in x.tolist()]


positive = st.floats(min_value=0.0, max_value=1e6, width=32)


@given(amax=positive)
def test_pow2_ceil_scale_bounds(amax: float) -> None:
    """pow2_ceil: a power of two, >= max(amax/448, floor), and < twice that."""
    s = scale_from_amax(torch.tensor([amax]), "pow2_ceil", 448.0, 1e-4).item()
    target = max(
        Fraction(np.float32(np.float32(amax) / np.float32(448.0)).item()), Fraction(np.float32(1e-4).item())
    )
    assert math.frexp(s)[0] == 0.5
    assert target <= Fraction(s) < 2 * target


@given(amax=positive)
def test_amax_div_scale_is_the_correctly_rounded_quotient(amax: float) -> None:
    s = scale_from_amax(torch.tensor([amax]), "amax_div", 448.0, FLT_MIN).item()
    quotient = np.float32(amax) / np.float32(448.0)  # numpy: IEEE float32 division, an independent path
    assert s == max(float(quotient), FLT_MIN)


def test_zero_tile_gets_the_floor_not_nan() -> None:
    for rule in ("amax_div", "pow2_ceil"):
        s = scale_from_amax(torch.zeros(3), rule, 448.0, 1e-4)
        assert torch.isfinite(s).all() and (s > 0).all()
        q = quantize_tiles(torch.zeros(1, 384), s.reshape(1, 3), 128, "e4m3fn", "satfinite")
        assert q.tolist() == [[0] * 384]


def test_scale_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="fp8_max"):
        scale_from_amax(torch.ones(1), "pow2_ceil", 0.0, 1e-4)
    with pytest.raises(ValueError, match="floor"):
        scale_from_amax(torch.ones(1), "pow2_ceil", 448.0, 0.0)
    with pytest.raises(ValueError, match="pow2_floor"):
        scale_from_amax(torch.ones(1), "pow2_floor", 448.0, 1e-4)


@given(seed=st.integers(0, 2**16))
def test_quantized_tiles_stay_in_range_and_dequantize_close(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 512, generator=g) * torch.exp(torch.randn(4, 1, generator=g) * 4)
    amax = tile_amax(x, 128)
    for rule in ("amax_div", "pow2_ceil"):
        s = scale_from_amax(amax, rule, 448.0, FLT_MIN)
        codes = quantize_tiles(x, s, 128, "e4m3fn", "satfinite")
        assert torch.isfinite(decode(codes, "e4m3fn")).all()
        back = dequantize_tiles(codes, s, 128, "e4m3fn")
        # e4m3 has 3 mantissa bits: relative error of a normal value <= 2**-4; absolute floor from
        # the smallest subnormal step (2**-9) times the tile scale.
        bound = (x.abs() * 2.0**-4).reshape(4, 4, 128) + (s * 2.0**-10).unsqueeze(-1)
        assert ((back - x).abs().reshape(4, 4, 128) <= bound).all()


def test_tile_amax_shapes_and_errors() -> None:
    x = torch.tensor([[1.0, -3.0, 2.0, 0.5]])
    assert tile_amax(x, 2).tolist() == [[3.0, 2.0]]
    with pytest.raises(ValueError, match="tile=3"):
        tile_amax(x, 3)


@pytest.mark.parametrize("rule", ["amax_div", "pow2_ceil"])
def test_nan_amax_gives_the_canonical_nan(rule: str) -> None:
    """Kernels write 0x7FC00000 for a NaN scale; the reference must too, whatever NaN came in."""
    negative_nan = torch.tensor([0xFFC00001], dtype=torch.int64).to(torch.int32).view(torch.float32)
    s = scale_from_amax(negative_nan, rule, 448.0, FLT_MIN)
    assert s.view(torch.int32).tolist() == [0x7FC00000]

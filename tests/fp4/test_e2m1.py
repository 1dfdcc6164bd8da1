"""The E2M1 codec against independent oracles: ml_dtypes on every finite bf16, exact rationals on float32 rounding
boundaries, the 16 codes written out from the format's definition, and the nibble order written out byte by byte.

Each comparison is a function returning what is wrong, so the mutants at the bottom (ties away from zero, no
saturation, nibbles swapped) can show that the same comparison fails on a broken codec.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest
import torch

from rtp_ref.fp4 import e2m1
from rtp_ref.fp4.e2m1 import NO_CODE, UNDEFINED, NegativeZero, NonFinitePolicy, decode, encode, pack, unpack
from tests.fp4.oracles import E2M1_MAGNITUDES, all_finite_bf16, ml_dtypes_codes, rational_code

Encoder = Callable[[torch.Tensor], torch.Tensor]
Packer = Callable[[torch.Tensor], torch.Tensor]


def ml_dtypes_mismatches(enc: Encoder, device: torch.device) -> int:
    """Finite bf16 inputs (all 65,280 of them) whose code from ``enc`` differs from ml_dtypes'."""
    x = all_finite_bf16()
    ours = enc(x.to(device)).cpu().numpy()
    return int(np.count_nonzero(ours != ml_dtypes_codes(x.float().numpy())))


def rounding_boundaries() -> list[float]:
    """Every midpoint between adjacent E2M1 magnitudes (and 7, between 6 and the step past it), the float32 values
    either side of each, the magnitudes themselves, and all of them negated: float32 inputs bf16 cannot spell."""
    grid = [*E2M1_MAGNITUDES, Fraction(8)]
    points: list[float] = []
    for lo, hi in itertools.pairwise(grid):
        mid = np.float32(float((lo + hi) / 2))
        points += [float(mid), float(np.nextafter(mid, np.float32(0))), float(np.nextafter(mid, np.float32(np.inf)))]
    points += [float(v) for v in E2M1_MAGNITUDES] + [1e30, 3.4e38, 1e-45, 2.0**-126]
    return points + [-p for p in points]


def random_float32(n: int, seed: int) -> list[float]:
    """``n`` finite float32 values from random bit patterns, then ``n`` uniform in [-8, 8] (where rounding is)."""
    rng = random.Random(seed)
    patterns = np.array([rng.getrandbits(32) for _ in range(n)], dtype=np.uint32).view(np.float32)
    out = [float(v) for v in patterns if np.isfinite(v)]
    return out + [float(np.float32(rng.uniform(-8.0, 8.0))) for _ in range(n)]


def rational_mismatches(enc: Encoder, values: list[float]) -> list[tuple[float, int, int]]:
    """(input, our code, exact round-half-even's code) wherever ``enc`` disagrees with the rational oracle."""
    ours = enc(torch.tensor(values, dtype=torch.float32)).tolist()
    return [(v, got, rational_code(v)) for v, got in zip(values, ours, strict=True) if got != rational_code(v)]


def test_every_finite_bf16_matches_ml_dtypes(device: torch.device) -> None:
    assert ml_dtypes_mismatches(encode, device) == 0


def test_positive_zero_is_ml_dtypes_after_adding_zero(device: torch.device) -> None:
    """``NegativeZero.POSITIVE`` is the kernel that adds +0.0 before converting: ml_dtypes of ``x + 0.0``, which
    turns -0.0 alone into +0.0 (a negative value rounding to zero keeps 0x8)."""
    x = all_finite_bf16()
    ours = encode(x.to(device), negative_zero="positive").cpu().numpy()
    want = ml_dtypes_codes(x.float().numpy() + np.float32(0.0))
    assert np.count_nonzero(ours != want) == 0
    tiny = torch.tensor([-0.0, -0.1, -1e-45, 0.0])
    assert encode(tiny, negative_zero=NegativeZero.POSITIVE).tolist() == [0x0, 0x8, 0x8, 0x0]
    assert encode(tiny, negative_zero=NegativeZero.KEEP).tolist() == [0x8, 0x8, 0x8, 0x0]


def test_float32_rounding_boundaries_match_exact_rationals() -> None:
    assert rational_mismatches(encode, rounding_boundaries()) == []


def test_random_float32_match_exact_rationals() -> None:
    assert rational_mismatches(encode, random_float32(2000, seed=34)) == []


def test_fp16_and_bf16_widen_exactly() -> None:
    x = torch.tensor([0.25, 0.2502, 2.5, 2.502, 5.0, 5.004, -7.0, 1e4])
    for dtype in (torch.float16, torch.bfloat16):
        narrow = x.to(dtype)
        assert encode(narrow).tolist() == encode(narrow.float()).tolist()


def test_non_finite_policies() -> None:
    x = torch.tensor([float("inf"), -float("inf"), float("nan"), -float("nan"), 1.0])
    assert encode(x, NonFinitePolicy.saturate(0x0)).tolist() == [0x7, 0xF, 0x0, 0x0, 0x2]
    assert encode(x, NonFinitePolicy.saturate(0x7)).tolist() == [0x7, 0xF, 0x7, 0x7, 0x2]
    assert encode(x, UNDEFINED).tolist() == [NO_CODE, NO_CODE, NO_CODE, NO_CODE, 0x2]
    assert encode(x, NonFinitePolicy("inf-only", True, None)).tolist() == [0x7, 0xF, NO_CODE, NO_CODE, 0x2]
    with pytest.raises(ValueError, match="not an E2M1 code"):
        NonFinitePolicy.saturate(16)
    with pytest.raises(ValueError, match="dtype"):
        encode(torch.tensor([1.0], dtype=torch.float64))


def test_decode_of_every_code_is_the_written_out_value(device: torch.device) -> None:
    """The 16 codes against the magnitudes written from the definition, negated for 8..15, and 0x8 as -0.0."""
    values = decode(torch.arange(16, dtype=torch.uint8, device=device)).cpu().tolist()
    for code, value in enumerate(values):
        magnitude = E2M1_MAGNITUDES[code & 7]
        assert Fraction(value) == (-magnitude if code & 8 else magnitude), code
        assert math.copysign(1.0, value) == (-1.0 if code & 8 else 1.0), code
    assert [float(e2m1.exact_value(c)) for c in range(16)] == [abs(v) if c == 8 else v for c, v in enumerate(values)]
    with pytest.raises(ValueError, match="above 15"):
        decode(torch.tensor([NO_CODE], dtype=torch.uint8))


def test_every_code_round_trips(device: torch.device) -> None:
    codes = torch.arange(16, dtype=torch.uint8, device=device)
    assert torch.equal(encode(decode(codes)), codes)


def nibble_order_problems(pack_fn: Packer, unpack_fn: Packer) -> list[str]:
    """What is wrong with ``pack_fn``/``unpack_fn`` against bytes built by hand: code ``2i`` in the low nibble of
    byte ``i``, ``2i + 1`` in the high one; and the round trip over every pair of codes."""
    problems = []
    codes = torch.tensor([[0x1, 0x2, 0xF, 0x0, 0x8, 0x7]], dtype=torch.uint8)
    if pack_fn(codes).tolist() != [[0x21, 0x0F, 0x78]]:
        problems.append(f"pack {codes.tolist()} gave {pack_fn(codes).tolist()}, want [[0x21, 0x0f, 0x78]]")
    if unpack_fn(torch.tensor([0x21, 0x0F], dtype=torch.uint8)).tolist() != [1, 2, 15, 0]:
        problems.append("unpack of 0x21 0x0f is not 1 2 15 0")
    pairs = torch.tensor(list(itertools.product(range(16), repeat=2)), dtype=torch.uint8).reshape(1, -1)
    built = (pairs[:, 0::2].to(torch.int64) + 16 * pairs[:, 1::2].to(torch.int64)).to(torch.uint8)
    if not torch.equal(pack_fn(pairs), built):
        problems.append("pack of every code pair differs from low + 16 * high")
    if not torch.equal(unpack_fn(pack_fn(pairs)), pairs):
        problems.append("unpack(pack(codes)) is not codes")
    return problems


def test_pack_puts_the_even_index_in_the_low_nibble() -> None:
    assert nibble_order_problems(pack, unpack) == []


def test_pack_refuses_what_is_not_a_code_pair() -> None:
    with pytest.raises(ValueError, match="odd"):
        pack(torch.zeros(3, dtype=torch.uint8))
    with pytest.raises(ValueError, match="above 15"):
        pack(torch.tensor([1, NO_CODE], dtype=torch.uint8))
    with pytest.raises(ValueError, match="uint8"):
        pack(torch.zeros(2, dtype=torch.int64))


# ----------------------------------------------------------------------------------------------
# Mutants: each broken codec must be caught by the named comparison above.


def _round_half_away(value: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Round to nearest with ties away from zero (magnitudes are non-negative here, so ties go up)."""
    half = torch.where(shift > 0, torch.ones_like(shift) << (shift - 1).clamp(min=0), torch.zeros_like(shift))
    return (value + half) >> shift


def _swapped_pack(codes: torch.Tensor) -> torch.Tensor:
    return (codes[..., 0::2] << 4) | codes[..., 1::2]


def test_mutant_ties_away_from_zero_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(e2m1, "round_shift_right_half_even", _round_half_away)
    assert ml_dtypes_mismatches(encode, torch.device("cpu")) > 0
    assert rational_mismatches(encode, rounding_boundaries())


def test_mutant_without_saturation_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(e2m1, "_saturate", lambda mag: mag)
    assert ml_dtypes_mismatches(encode, torch.device("cpu")) > 0
    assert rational_mismatches(encode, rounding_boundaries())


def test_mutant_with_swapped_nibbles_is_caught() -> None:
    assert len(nibble_order_problems(_swapped_pack, unpack)) == 3

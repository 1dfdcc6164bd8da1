"""Independent oracles for the FP4 tests: ml_dtypes, and exact rational arithmetic (``fractions``).

Nothing here calls rtp_ref.fp4, so a fault in the codec or the scale rules cannot hide in its own oracle. The E2M1
values are written out from the format's definition (OCP MX v1.0: bias 1, one mantissa bit) as literals.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import torch

from tests.fp8.oracles import rational_encode, spec_value

#: the E2M1 magnitudes of codes 0..7, written out
E2M1_MAGNITUDES = [Fraction(0), Fraction(1, 2), Fraction(1), Fraction(3, 2), Fraction(2), Fraction(3), Fraction(4),
                   Fraction(6)]


def all_finite_bf16() -> torch.Tensor:
    """Every finite one of the 65,536 bf16 bit patterns (both zeros, the subnormals and the normals), in order."""
    x = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    return x[torch.isfinite(x)]


def ml_dtypes_codes(x: np.ndarray) -> np.ndarray:
    """E2M1 codes of float32 ``x`` by ``ml_dtypes.float4_e2m1fn`` (finite inputs; it saturates at 6)."""
    return x.astype(np.float32).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)


def rational_code(x: float) -> int:
    """The E2M1 code of a finite float by exact round-half-even over ``E2M1_MAGNITUDES``: a magnitude between 6
    and the step past it (8) rounds as if 8 (code 8, even) existed, then saturates to 6; the float's sign is kept,
    also on -0.0 and on a negative value that rounds to zero."""
    a = abs(Fraction(x))
    grid = [*E2M1_MAGNITUDES, Fraction(8)]
    code = 8
    for i in range(8):
        lo, hi = grid[i], grid[i + 1]
        if lo <= a <= hi:
            code = i if (a - lo < hi - a or (a - lo == hi - a and i % 2 == 0)) else i + 1
            break
    return min(code, 7) | (8 if math.copysign(1.0, x) < 0 else 0)


def rn32(r: Fraction) -> Fraction:
    """``r`` rounded to the nearest float32, ties to even (normals and subnormals; no overflow in the tests)."""
    if r == 0:
        return Fraction(0)
    a = abs(r)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    quantum = Fraction(2) ** (max(e, -126) - 23)
    n = a / quantum
    whole = n.numerator // n.denominator
    rest = n - whole
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and whole % 2):
        whole += 1
    return (1 if r > 0 else -1) * whole * quantum


def float32(r: Fraction) -> float:
    """A float32-exact rational as a Python float, checked to be exact."""
    value = float(r)
    assert Fraction(value) == r and Fraction(float(np.float32(value))) == r, r
    return value


def float32_neighbours(value: float, count: int) -> list[float]:
    """``value`` (a float32) and the ``count`` float32 values on each side of it."""
    out = [float(np.float32(value))]
    for direction in (np.inf, -np.inf):
        v = np.float32(value)
        for _ in range(count):
            v = np.nextafter(v, np.float32(direction), dtype=np.float32)
            out.append(float(v))
    return out


def power_below_two(base: Fraction, squarings: int, bits: int = 256) -> bool:
    """Whether ``base**(2**squarings) < 2``, for ``1 < base < 2``: repeated squaring of a lower and an upper bound,
    each rounded outward to ``bits`` binary places (the exact power's numerator would have millions of digits). As
    the powers grow, a lower bound past 2 settles it early. An undecided case fails the calling test."""
    scale = 1 << bits
    lo = hi = base
    for _ in range(squarings):
        if lo > 2:
            return False
        lo = Fraction(math.floor(lo * lo * scale), scale)
        hi = Fraction(math.ceil(hi * hi * scale), scale)
    assert hi < 2 or lo > 2, ("undecided", base, squarings)
    return hi < 2


def float32_step_above(k: int) -> Fraction:
    """The gap between the integer ``k`` and the next float32 above it, by numpy's nextafter."""
    up = np.nextafter(np.float32(k), np.float32(np.inf), dtype=np.float32)
    return Fraction(float(up)) - k


def log2_rounds_to(y: Fraction, k: int) -> bool:
    """Whether the correctly rounded float32 log2 of ``y = 2**k * (1 + f)``, ``0 < f < 1``, is exactly ``k``:
    ``log2(1 + f) < h`` (h: half the float32 step above k, ``2**-m``), i.e. ``(1 + f)**(2**m) < 2``. Decided with
    exact bounds (log2(1 + f) is irrational, so there is no tie)."""
    base = y / Fraction(2) ** k
    assert 1 < base < 2, (y, k)
    half = float32_step_above(k) / 2
    m = half.denominator.bit_length() - 1
    assert half == Fraction(1, 1 << m), half
    return power_below_two(base, m)


def div_six(amax: float) -> Fraction:
    """``amax / 6`` rounded once to float32."""
    return rn32(Fraction(amax) / 6)


def mul_one_sixth(amax: float) -> Fraction:
    """``amax * (1/6)``: 1/6 rounded to float32, then the product rounded to float32."""
    return rn32(Fraction(amax) * rn32(Fraction(1, 6)))


def exact_e4m3_code(q: Fraction, bump: bool) -> int:
    """The e4m3fn code of float32 ``q`` (0 < q <= 448) by exact round-half-even (tests/fp8's oracle); with
    ``bump``, one code up where that code's value is below ``q``."""
    code = rational_encode(float32(q), "e4m3fn", saturate=True)
    assert isinstance(code, int)
    value = spec_value(code, "e4m3fn")
    assert value is not None
    return code + 1 if bump and value < q else code


def ceil_log2(q: Fraction) -> int:
    """The smallest k with ``2**k >= q``, for ``q > 0``."""
    k = q.numerator.bit_length() - q.denominator.bit_length()
    while Fraction(2) ** k < q:
        k += 1
    while Fraction(2) ** (k - 1) >= q:
        k -= 1
    return k


def floor_log2(a: Fraction) -> int:
    """The largest k with ``2**k <= a``, for ``a > 0``."""
    k = ceil_log2(a)
    return k if Fraction(2) ** k == a else k - 1

"""Independent oracles for the fp8 codec tests: ml_dtypes, and exact rational rounding.

Nothing here calls rtp_ref.fp8's encoder, so a fault in the codec cannot hide in its own oracle.
"""

from __future__ import annotations

import bisect
import functools
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import torch

ML_DTYPES = {
    "e4m3fn": ml_dtypes.float8_e4m3fn,
    "e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
    "e5m2": ml_dtypes.float8_e5m2,
    "e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
}
# Bit layouts written from the format definitions (OCP 8-bit FP spec; fnuz: bias + 1, NaN = 0x80).
SPEC = {  # name: (exponent bits, mantissa bits, bias, max finite, kind)
    "e4m3fn": (4, 3, 7, 448.0, "fn"),
    "e4m3fnuz": (4, 3, 8, 240.0, "fnuz"),
    "e5m2": (5, 2, 15, 57344.0, "ieee"),
    "e5m2fnuz": (5, 2, 16, 57344.0, "fnuz"),
}


def ml_dtypes_encode(x: np.ndarray, fmt: str, saturate: bool) -> np.ndarray:
    """fp8 codes by ml_dtypes (IEEE-style, non-saturating); ``saturate`` clamps to +-max first."""
    xf = x.astype(np.float32)
    if saturate:
        top = np.float32(SPEC[fmt][3])
        xf = np.where(np.isnan(xf), xf, np.clip(xf, -top, top))
    with np.errstate(invalid="ignore", over="ignore"):
        return xf.astype(ML_DTYPES[fmt]).view(np.uint8)


def ml_dtypes_is_nan(codes: np.ndarray, fmt: str) -> np.ndarray:
    return np.isnan(codes.view(ML_DTYPES[fmt]).astype(np.float32))


def spec_value(code: int, fmt: str) -> Fraction | None:
    """Exact value of a code from the bit layout (None for NaN; inf never occurs in tests' use)."""
    e_bits, m_bits, bias, _, kind = SPEC[fmt]
    sign = -1 if code >> 7 else 1
    exp = (code >> m_bits) & ((1 << e_bits) - 1)
    man = code & ((1 << m_bits) - 1)
    if kind == "fnuz" and code == 0x80:
        return None
    if kind == "fn" and (code & 0x7F) == 0x7F:
        return None
    if kind == "ieee" and exp == (1 << e_bits) - 1:
        return None
    if exp == 0:
        return sign * Fraction(man, 1 << m_bits) * Fraction(2) ** (1 - bias)
    return sign * (1 + Fraction(man, 1 << m_bits)) * Fraction(2) ** (exp - bias)


@functools.cache
def positive_grid(fmt: str) -> list[tuple[Fraction, int]]:
    """(value, code) of every finite value >= 0, ascending, plus one step past max as overflow.

    The overflow sentinel has code max_code + 1, so round-half-even between max and the sentinel
    is decided by max_code's parity, exactly as for any other neighbouring pair.
    """
    grid = []
    for code in range(0x80):
        v = spec_value(code, fmt)
        if v is not None and not (
            SPEC[fmt][4] == "ieee" and (code >> SPEC[fmt][1]) == (1 << SPEC[fmt][0]) - 1
        ):
            grid.append((v, code))
    grid.sort()
    top_value, top_code = grid[-1]
    step = top_value - grid[-2][0]
    grid.append((top_value + step, top_code + 1))
    return grid


def rational_encode(x: float, fmt: str, saturate: bool) -> int | str:
    """Round-half-even of a finite float's exact value: a code, or 'nan' / 'inf' / '-inf' on overflow.

    The sign comes from the float itself, so -0.0 keeps its sign where the format has one.
    """
    grid = positive_grid(fmt)
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    a = abs(Fraction(x))
    values = [g[0] for g in grid]
    i = bisect.bisect_right(values, a)
    lo = grid[max(i - 1, 0)]
    hi = grid[min(i if values[i - 1] != a else i - 1, len(grid) - 1)]
    if lo[0] == a or a - lo[0] < hi[0] - a:
        pick = lo
    elif a - lo[0] > hi[0] - a:
        pick = hi
    else:
        pick = lo if lo[1] % 2 == 0 else hi
    if a > grid[-1][0] or pick is grid[-1]:
        if saturate:
            pick = grid[-2]
        elif SPEC[fmt][4] == "ieee":
            return "-inf" if sign else "inf"
        else:
            return "nan"
    code = pick[1]
    if code == 0 and SPEC[fmt][4] == "fnuz":
        return 0
    return sign | code


def all_16bit_floats(dtype: torch.dtype) -> torch.Tensor:
    """Every one of the 65,536 bit patterns of a 16-bit float dtype."""
    return torch.arange(65536, dtype=torch.int32).to(torch.int16).view(dtype)

# Triton ships no type information: every @triton.jit is an untyped decorator to mypy.
# mypy: disable-error-code="untyped-decorator"
"""E2M1 (FP4) tiles with e4m3 scales inside Triton kernels: the arithmetic of ``rtp_ref.fp4`` in integer and
float32 operations that round exactly as the reference does.

No GPU before Blackwell converts to E2M1 in hardware (``cvt.rn.satfinite.e2m1x2.f32`` is sm100a and later), so every
step is software and the same everywhere: the scale's e4m3 code by ``fp8_software`` (round half to even on the
float32 bits), its value rebuilt from the code's fields, each quotient ``x / s`` by ``tl.math.div_rn`` (or ``x *
div_rn(1, s)`` for the reciprocal convention), and the E2M1 code by comparing the quotient's magnitude with the
seven midpoints between E2M1's eight magnitudes, each tie going to the even code (rtp_ref.fp4.e2m1.encode).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import triton
import triton.language as tl

from rtp_ref.fp4.e2m1 import NegativeZero
from rtp_ref.fp4.quantize import PayloadDivision
from rtp_ref.fp4.scales import AmaxDivision, ScaleElement, ScaleRounding
from rtp_ref.kernels.triton_fp8 import fp8_software

if TYPE_CHECKING:
    from rtp_ref.kv.fields import TileScale

#: float32 1/6 as rtp_ref.fp4.scales.ONE_SIXTH_F32 (0x3E2AAAAB): a literal Triton types as float32 unchanged
ONE_SIXTH_F32 = tl.constexpr(0.16666667163372040)
#: the e4m3fn code of NaN a poisoned tile's scale holds (rtp_ref.kernels.torch_eager.E4M3_NAN)
E4M3_NAN_CODE = tl.constexpr(0x7F)


@triton.jit
def e2m1_magnitude(m: tl.tensor) -> tl.tensor:
    """E2M1 magnitude code (int32, 0..7) of float32 ``m >= 0`` (inf saturates to 7): nearest of 0, 0.5, 1, 1.5, 2, 3,
    4, 6, a tie to the even code (0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4)."""
    code = (m > 0.25).to(tl.int32) + (m >= 0.75).to(tl.int32) + (m > 1.25).to(tl.int32)
    code += (m >= 1.75).to(tl.int32) + (m > 2.5).to(tl.int32) + (m >= 3.5).to(tl.int32)
    return code + (m > 5.0).to(tl.int32)


@triton.jit
def e2m1_codes(q: tl.tensor, NEG_ZERO_POSITIVE: tl.constexpr) -> tl.tensor:
    """E2M1 codes (int32, 0..15) of finite float32 quotients ``q``, the sign kept (also where a negative value rounds
    to zero: 0x8); an exact -0.0 gives 0x0 under ``NEG_ZERO_POSITIVE`` (a writer adding +0.0), else 0x8."""
    bits = q.to(tl.int32, bitcast=True)
    magnitude_bits = bits & 0x7FFFFFFF
    sign = (bits >> 31) & 1
    if NEG_ZERO_POSITIVE:
        sign = tl.where(magnitude_bits == 0, 0, sign)
    return (sign << 3) | e2m1_magnitude(magnitude_bits.to(tl.float32, bitcast=True))


@triton.jit
def e4m3_value(code: tl.tensor) -> tl.tensor:
    """float32 value of non-negative e4m3fn codes (int32, 0..0x7E): ``man * 2**-9`` for exponent field 0, else
    ``(1 + man / 8) * 2**(exp - 7)`` built from its bits (both exact)."""
    exp = (code >> 3) & 0xF
    man = code & 0x7
    normal = (((exp + 120) << 23) | (man << 20)).to(tl.float32, bitcast=True)
    return tl.where(exp == 0, man.to(tl.float32) * 0.001953125, normal)


@triton.jit
def scale_slots(tiles: tl.tensor, ORDER_ROWS: tl.constexpr, ORDER_COLS: tl.constexpr) -> tl.tensor:
    """Where tile ``tiles``' scale is stored among a token's scales: at the tile's index, or with ``ORDER_ROWS`` x
    ``ORDER_COLS`` transposed (rtp_ref.kv.fields.Field.stored_index) at ``(t % COLS) * ROWS + t // COLS``."""
    if ORDER_ROWS > 0:  # noqa: SIM108 - a constexpr branch, one of two expressions compiled
        slots = (tiles % ORDER_COLS) * ORDER_ROWS + tiles // ORDER_COLS
    else:
        slots = tiles
    return slots


@triton.jit
def fp4_tile_quantize(x: tl.tensor, cache: tl.tensor, sbase: tl.tensor, valid: tl.tensor, BLOCK_T: tl.constexpr,
                      N_PAD: tl.constexpr, TILE: tl.constexpr, N_TILES: tl.constexpr, ORDER_ROWS: tl.constexpr,
                      ORDER_COLS: tl.constexpr, LOW: tl.constexpr,
                      HIGH: tl.constexpr, MUL_SIXTH: tl.constexpr, BUMP: tl.constexpr, RECIPROCAL: tl.constexpr,
                      NEG_ZERO_POSITIVE: tl.constexpr, POISON: tl.constexpr) -> tl.tensor:
    """The packed E2M1 bytes (int32 [BLOCK_T, N_PAD / 2], the even index in the low nibble) of ``x`` [BLOCK_T,
    N_PAD] (padded columns 0.0) in tiles of ``TILE``; stores each valid token's ``N_TILES`` e4m3 scale codes at byte
    ``sbase``, in the order ``scale_slots`` gives. Per tile: ``q = clamp(amax * (1/6) or amax / 6, LOW, HIGH)``,
    its e4m3 code rounded to nearest even (one code up where that value is below ``q`` under ``BUMP``), ``s`` its
    value, each code ``e2m1(x / s)`` (or of ``x * (1 / s)`` under ``RECIPROCAL``), a zero of ``x``'s sign where
    ``s`` is 0 (``LOW`` 0: no floor). Under ``POISON`` a tile holding NaN or +-inf stores e4m3's NaN and every code
    0."""
    x3 = tl.reshape(x, (BLOCK_T, N_PAD // TILE, TILE))
    # |x| as float32 bits orders like |x|; inf's bits and above are the non-finite values
    amax_bits = tl.max(x3.to(tl.int32, bitcast=True) & 0x7FFFFFFF, axis=2)
    finite = amax_bits < 0x7F800000
    amax = tl.where(finite, amax_bits, 0).to(tl.float32, bitcast=True)
    if MUL_SIXTH:  # noqa: SIM108 - a constexpr branch, one of two expressions compiled
        quotient = amax * ONE_SIXTH_F32
    else:
        quotient = tl.math.div_rn(amax, tl.full(amax.shape, 6.0, tl.float32))
    quotient = tl.minimum(tl.maximum(quotient, LOW), HIGH)
    # e4m3fn: 3 mantissa bits, emin -6, largest code 0x7E, NaN 0x7F, -0 kept, no inf, saturating
    code = fp8_software(quotient, 3, -6, 0x7E, 0x7F, True, False, 0, True).to(tl.int32)
    if BUMP:
        code += (e4m3_value(code) < quotient).to(tl.int32)
    s = e4m3_value(code)
    if RECIPROCAL:
        q3 = x3 * tl.math.div_rn(tl.full(s.shape, 1.0, tl.float32), s)[:, :, None]
    else:
        q3 = tl.math.div_rn(x3, s[:, :, None])
    if LOW == 0.0:  # a scale with no floor can be 0: its tile's values are stored as zeros of their sign
        signed_zero = (x3.to(tl.int32, bitcast=True) & -0x80000000).to(tl.float32, bitcast=True)
        q3 = tl.where((s == 0.0)[:, :, None], signed_zero, q3)
    codes = e2m1_codes(q3, NEG_ZERO_POSITIVE)
    if POISON:
        codes = tl.where(finite[:, :, None], codes, 0)
        code = tl.where(finite, code, E4M3_NAN_CODE)
    tiles = tl.arange(0, N_PAD // TILE)
    smask = valid[:, None] & (tiles < N_TILES)[None, :]
    slots = scale_slots(tiles, ORDER_ROWS, ORDER_COLS)
    tl.store(cache + sbase[:, None] + slots[None, :], code.to(tl.uint8), mask=smask)
    pairs = tl.reshape(codes, (BLOCK_T, N_PAD // 2, 2))
    nibble_weight = 1 + 15 * tl.arange(0, 2)  # 1 for the even index, 16 for the odd one
    return tl.sum(pairs * nibble_weight[None, None, :], axis=2)


def fp4_constexprs(spec: TileScale | None) -> dict[str, Any]:
    """``fp4_tile_quantize``'s convention constexprs for an FP4 tile scale ``spec`` (inert values for None: a
    layout without E2M1). ``fp4_unsupported`` must have passed it."""
    if spec is None or spec.fp4 is None:
        return {"LOW": 1.0, "HIGH": 1.0, "MUL_SIXTH": False, "BUMP": False, "RECIPROCAL": False,
                "NEG_ZERO_POSITIVE": False, "POISON": False}
    fp4 = spec.fp4
    low, high = fp4.scale.clamp or (spec.floor, 448.0)
    return {"LOW": low, "HIGH": high, "MUL_SIXTH": fp4.scale.division is AmaxDivision.MUL_ONE_SIXTH,
            "BUMP": fp4.scale.rounding is ScaleRounding.BUMP,
            "RECIPROCAL": fp4.payload is PayloadDivision.RECIPROCAL_MUL,
            "NEG_ZERO_POSITIVE": fp4.negative_zero is NegativeZero.POSITIVE,
            "POISON": spec.non_finite_tile == "nan_scale_zero_codes"}


def fp4_unsupported(spec: TileScale) -> str | None:
    """None when ``fp4_tile_quantize`` writes FP4 tile scale ``spec``; else why not: its scales are e4m3 rounded
    to nearest even (or bumped) from a clamped quotient, never ue8m0."""
    fp4 = spec.fp4
    if fp4 is None:
        return None
    traits = fp4.scale
    if traits.element is not ScaleElement.E4M3FN or traits.rounding not in (ScaleRounding.RNE, ScaleRounding.BUMP) \
            or traits.clamp is None or traits.division is None:
        return (f"the triton writer stores FP4 scales as e4m3 rounded to nearest even (or bumped) from a clamped "
                f"amax / 6, not {traits.element.value} by {traits.rounding.value}")
    return None

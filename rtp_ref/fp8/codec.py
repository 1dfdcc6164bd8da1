"""Bit-exact fp8 encode/decode in integer arithmetic on torch tensors.

Nothing here calls torch's float8 casts: those differ between builds and devices (see
docs/fp8.md). The encoder works on the float32 bit pattern:

    value = sig * 2**(e - 23)                 sig: 24-bit significand, e: unbiased exponent
    te    = max(e, emin)                      target binade (emin = smallest normal exponent)
    q     = round_half_even(sig / 2**(23 - M + te - e))
    code  = ((te - emin) << M) + q            one formula covers subnormals, normals and the
                                              carry of a round-up into the next binade

so ``code`` is the magnitude code of the nearest representable value; it overflows exactly when it
exceeds the format's largest finite code.
"""

from __future__ import annotations

import torch

from rtp_ref.fp8.formats import ConversionMode, Fp8Format, fp8_format

_F32_EXP_MASK = 0xFF
_F32_MAN_BITS = 23
_F32_MAN_MASK = (1 << _F32_MAN_BITS) - 1
_SUPPORTED_INPUTS = (torch.float32, torch.bfloat16, torch.float16)


def _as_format(fmt: Fp8Format | str) -> Fp8Format:
    return fp8_format(fmt) if isinstance(fmt, str) else fmt


def _as_mode(mode: ConversionMode | str) -> ConversionMode:
    return ConversionMode(mode) if isinstance(mode, str) else mode


def round_shift_right_half_even(value: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """``round(value / 2**shift)`` with ties to even, for integer ``value >= 0`` and ``shift >= 0`` of one dtype.

    ``shift`` must stay below the dtype's bits minus one (30 for int32, 62 for int64); callers clamp, since every
    larger shift of a value below ``2**shift / 2`` rounds it to 0 as well.
    """
    quotient = value >> shift
    remainder = value - (quotient << shift)
    half = torch.where(shift > 0, torch.ones_like(shift) << (shift - 1).clamp(min=0), torch.zeros_like(shift))
    round_up = (remainder > half) | ((remainder == half) & (shift > 0) & ((quotient & 1) == 1))
    return quotient + round_up.to(quotient.dtype)


def encode(
    x: torch.Tensor, fmt: Fp8Format | str, mode: ConversionMode | str = ConversionMode.SATFINITE
) -> torch.Tensor:
    """Encode float32/bf16/fp16 ``x`` to fp8 codes (uint8, same shape and device).

    Rounding is to nearest, ties to even. ``satfinite``: finite overflow and +-inf give +-max, NaN
    gives the format's NaN. ``nonsat``: overflow and +-inf give NaN, or +-inf in e5m2. NaN is
    written as the canonical code (``Fp8Format.nan_code``) whatever its sign or payload. In fnuz
    formats every zero result (including -0.0 and negative underflow) is +0 (code 0x00).
    """
    f = _as_format(fmt)
    m = _as_mode(mode)
    if x.dtype not in _SUPPORTED_INPUTS:
        raise ValueError(f"encode: x has dtype {x.dtype}; supported: float32, bfloat16, float16")
    # int32 throughout: a 24-bit significand, an exponent and a shift all fit, at half the memory traffic of int64
    bits = x.to(torch.float32).contiguous().view(torch.int32)
    sign = (bits >> 31) & 1
    exp_field = (bits >> _F32_MAN_BITS) & _F32_EXP_MASK
    man = bits & _F32_MAN_MASK
    is_nan = (exp_field == _F32_EXP_MASK) & (man != 0)
    is_inf = (exp_field == _F32_EXP_MASK) & (man == 0)

    normal = exp_field != 0
    sig = torch.where(normal, man | (1 << _F32_MAN_BITS), man)
    exp = torch.where(normal, exp_field - 127, torch.full_like(exp_field, -126))
    emin = f.min_normal_exp
    target_exp = exp.clamp(min=emin)
    # shifts past 30 would overflow int32; every one of them (as every shift from 25) rounds a 24-bit significand to 0
    shift = (_F32_MAN_BITS - f.man_bits + target_exp - exp).clamp(max=30)
    q = round_shift_right_half_even(sig, shift)
    mag = ((target_exp - emin) << f.man_bits) + q

    overflow = (mag > f.max_code) | is_inf
    if m is ConversionMode.SATFINITE:
        mag = torch.where(overflow, torch.full_like(mag, f.max_code), mag)
        overflow_is_nan = torch.zeros_like(overflow)
    elif f.has_inf:
        mag = torch.where(overflow, torch.full_like(mag, f.inf_code), mag)
        overflow_is_nan = torch.zeros_like(overflow)
    else:
        overflow_is_nan = overflow

    sign_bit = sign << 7
    if not f.has_negative_zero:
        sign_bit = torch.where(mag == 0, torch.zeros_like(sign_bit), sign_bit)
    code = sign_bit | mag
    code = torch.where(is_nan | overflow_is_nan, torch.full_like(code, f.nan_code), code)
    return code.to(torch.uint8)


def _decode_table(f: Fp8Format) -> list[float]:
    """float32 value of every code, computed from the format definition with exact rationals."""
    return [float(f.exact_value(c)) for c in range(256)]


_TABLES: dict[str, torch.Tensor] = {}


def decode_table(fmt: Fp8Format | str) -> torch.Tensor:
    """All 256 decoded values of ``fmt`` as a float32 CPU tensor indexed by code."""
    f = _as_format(fmt)
    if f.name not in _TABLES:
        _TABLES[f.name] = torch.tensor(_decode_table(f), dtype=torch.float32)
    return _TABLES[f.name]


def decode(codes: torch.Tensor, fmt: Fp8Format | str) -> torch.Tensor:
    """Decode fp8 codes (uint8, or any 1-byte dtype reinterpreted) to float32, same shape/device.

    Every one of the 256 codes has a defined result: NaN codes give NaN, e5m2's inf codes give inf.
    """
    if codes.element_size() != 1:
        raise ValueError(f"decode: codes has dtype {codes.dtype}; expected a 1-byte dtype such as uint8")
    table = decode_table(fmt).to(codes.device)
    return table[codes.contiguous().view(torch.uint8).to(torch.int64)]

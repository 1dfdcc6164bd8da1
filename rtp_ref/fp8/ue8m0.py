"""ue8m0 scale bytes: an unsigned exponent with bias 127, value ``2**(byte - 127)``; 0xFF is NaN.

Encoding needs an explicit rounding rule because torch's ``.to(float8_e8m0fnu)`` rounds to the
nearest power of two (0.3 -> 0.25) while scale writers need "round up" so that ``x / scale`` never
exceeds the fp8 maximum (FlashMLA tests/quant.py, rtp-llm mla_quant_kernel.cu).

Defined results for every float32 input (the contract, tested exhaustively):

=====================  ===========================================================
input                  byte
=====================  ===========================================================
positive, in range     by the rule (``ceil``: smallest 2**k >= x; ``floor``: largest
                       2**k <= x; ``nearest``: the closer one, ties go up)
positive, < 2**-127    0x00 for ``ceil`` and ``nearest`` and ``floor`` (clamped: the
                       smallest scale; no smaller value exists)
> 2**127 after rule    0xFF (NaN): no finite scale exists; writers clamp amax first
+0.0 / -0.0            0x00 (the smallest scale, 2**-127)
negative, NaN, +-inf   0xFF (NaN)
=====================  ===========================================================
"""

from __future__ import annotations

import torch

from rtp_ref.fp8.rules import Pow2Rule

UE8M0_BIAS = 127
UE8M0_NAN = 0xFF


def _float_parts(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sign, unbiased exponent of the leading bit, fraction bits below it as a 23-bit field).

    float32 subnormals are normalised exactly by integer shifting, so every finite nonzero value
    is ``2**exp * (1 + frac / 2**23)``.
    """
    bits = x.to(torch.float32).contiguous().view(torch.int32).to(torch.int64)
    sign = (bits >> 31) & 1
    exp_field = (bits >> 23) & 0xFF
    man = bits & 0x7FFFFF
    # subnormal: value = man * 2**-149; leading bit position p = floor(log2(man))
    p = torch.zeros_like(man)
    for k in (16, 8, 4, 2, 1):
        step = (man >> (p + k)) > 0
        p = p + step.to(p.dtype) * k
    sub_exp = p - 149
    sub_frac = (man << (23 - p).clamp(min=0)) & 0x7FFFFF
    normal = exp_field != 0
    exp = torch.where(normal, exp_field - 127, sub_exp)
    frac = torch.where(normal, man, sub_frac)
    return sign, exp, frac


def encode_ue8m0(x: torch.Tensor, rule: Pow2Rule | str = Pow2Rule.CEIL) -> torch.Tensor:
    """Encode float values to ue8m0 bytes (uint8) with the power-of-two ``rule``; see module doc."""
    r = Pow2Rule(rule)
    xf = x.to(torch.float32)
    sign, exp, frac = _float_parts(xf)
    if r is Pow2Rule.CEIL:
        k = exp + (frac != 0).to(exp.dtype)
    elif r is Pow2Rule.FLOOR:
        k = exp
    else:
        k = exp + (frac >= (1 << 22)).to(exp.dtype)
    byte = (k + UE8M0_BIAS).clamp(min=0)
    byte = torch.where(byte > 254, torch.full_like(byte, UE8M0_NAN), byte)
    is_zero = xf == 0
    invalid = torch.isnan(xf) | torch.isinf(xf) | ((sign == 1) & ~is_zero)
    byte = torch.where(is_zero, torch.zeros_like(byte), byte)
    byte = torch.where(invalid, torch.full_like(byte, UE8M0_NAN), byte)
    return byte.to(torch.uint8)


def decode_ue8m0(codes: torch.Tensor) -> torch.Tensor:
    """Decode ue8m0 bytes to float32: ``2**(byte - 127)``, and NaN for 0xFF.

    2**-127 is a float32 subnormal and is produced exactly.
    """
    if codes.element_size() != 1:
        raise ValueError(f"decode_ue8m0: codes has dtype {codes.dtype}; expected a 1-byte dtype")
    c = codes.contiguous().view(torch.uint8).to(torch.int64)
    # Build the float32 bit pattern directly: byte 1..254 -> exponent field byte; byte 0 -> 2**-127
    # is the subnormal with only mantissa bit 22 set.
    bits = torch.where(c == 0, torch.full_like(c, 1 << 22), c << 23)
    bits = torch.where(c == UE8M0_NAN, torch.full_like(c, 0x7FC00000), bits)
    return bits.to(torch.int32).view(torch.float32)

"""Quantize values into E2M1 codes and block scales under a named set of conventions (``Fp4Conventions``).

Per block of ``scale.block`` consecutive values of the last dimension: ``amax`` (exact: an absolute value and a
maximum), the scale code from it (``rtp_ref.fp4.scales``), the scale's value ``s``, then each value's code
``e2m1(x / s)`` with the quotient formed in float32 by a ``PayloadDivision``: one IEEE division, or a multiply by
``1 / s`` rounded to float32 first; where ``s`` is 0 (an e4m3 scale with no floor), ``x * 0``, a zero of ``x``'s
sign. For a power-of-two scale (ue8m0) the two are the same number, as both are
exact scalings; for an e4m3 scale the reciprocal is rounded, and the product can land on the other side of an E2M1
rounding boundary than the quotient (sglang PR #39123 notes it for DeepSeek V4.1's FP4 record).

A block holding a NaN or an infinity is not defined by any convention here (sglang's writer states "NaN/inf inputs
are not handled"; rtp-ref's field notes list the missing non-finite policy of dynamic-scale layouts as class L):
``Fp4Quantized.defined`` is False for it, its codes are ``NO_CODE`` and its scale byte 0, which means nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import torch

from rtp_ref.fp4.e2m1 import NO_CODE, UNDEFINED, NegativeZero, decode, encode
from rtp_ref.fp4.scales import (
    AmaxDivision,
    ScaleElement,
    ScaleRounding,
    ScaleTraits,
    decode_scales,
    scale_codes,
)
from rtp_ref.fp8.scales import tile_amax


class PayloadDivision(str, Enum):
    """How ``x / s`` is formed in float32 (module doc)."""

    #: one correctly rounded IEEE division (DeepSeek V4.1's FP4 record, sglang PR #39123)
    IEEE_DIV = "ieee_div"
    #: ``x * r`` with ``r = 1 / s`` rounded to float32
    RECIPROCAL_MUL = "reciprocal_mul"


@dataclass(frozen=True)
class Fp4Conventions:
    """Everything that decides an FP4 block's bytes: the ``scale`` traits, the ``payload`` division and what a
    -0.0 quotient becomes (``negative_zero``); ``source``: where the set is read from."""

    name: str
    scale: ScaleTraits
    payload: PayloadDivision
    negative_zero: NegativeZero
    source: str


@dataclass(frozen=True)
class Fp4Quantized:
    """A quantized tensor: ``codes`` uint8 ``[..., n]`` (E2M1, one per value, unpacked: ``rtp_ref.fp4.e2m1.pack``
    makes the bytes), ``scales`` uint8 ``[..., n // block]`` (scale codes) and ``defined`` bool ``[..., n //
    block]``: False for a block no convention defines (module doc), whose codes are ``NO_CODE``."""

    codes: torch.Tensor
    scales: torch.Tensor
    defined: torch.Tensor


def payload_quotient(x: torch.Tensor, scale: torch.Tensor, division: PayloadDivision | str) -> torch.Tensor:
    """float32 ``x / scale`` by ``division``; ``scale`` broadcasts against ``x`` and is on its device. Where
    ``scale`` is 0 (an e4m3 scale with no floor), ``x * 0``, a zero of ``x``'s sign, whichever the division: the
    writers that allow a zero scale take 0, not 1/0, as its reciprocal."""
    xf = x.to(torch.float32)
    s = scale.to(torch.float32)
    q = xf / s if PayloadDivision(division) is PayloadDivision.IEEE_DIV else xf * (torch.ones_like(s) / s)
    return torch.where(s == 0, xf * 0.0, q)


def quantize_row(x: torch.Tensor, conventions: Fp4Conventions, scale_from: torch.Tensor | None = None) -> Fp4Quantized:
    """Quantize float32/bf16/fp16 ``x[..., n]`` (``n`` a multiple of the block) by ``conventions``: per block the
    scale code from its amax, and each value's E2M1 code of ``x / s`` (module doc). Blocks holding NaN or +-inf come
    back not ``defined``. ``scale_from`` (the shape of ``x``; default ``x``) is what the amax is taken of: a writer
    that computed its scales from other numbers than it divides (rtp_ref.cases.diagnosis tries one)."""
    block = conventions.scale.block
    n = x.shape[-1]
    if n % block:
        raise ValueError(f"quantize: last dimension {n} is not a multiple of the block, {block}")
    amax = tile_amax(x if scale_from is None else scale_from, block)
    defined = torch.isfinite(amax)
    if scale_from is not None:
        defined &= torch.isfinite(tile_amax(x, block))
    scales = scale_codes(torch.where(defined, amax, torch.zeros_like(amax)), conventions.scale)
    scales = torch.where(defined, scales, torch.zeros_like(scales))
    blocks = x.to(torch.float32).reshape(*x.shape[:-1], n // block, block)
    q = payload_quotient(blocks, decode_scales(scales, conventions.scale).unsqueeze(-1), conventions.payload)
    codes = encode(q, UNDEFINED, conventions.negative_zero)
    codes = torch.where(defined.unsqueeze(-1), codes, torch.full_like(codes, NO_CODE))
    return Fp4Quantized(codes.reshape(x.shape), scales, defined)


def dequantize_row(quantized: Fp4Quantized, conventions: Fp4Conventions) -> torch.Tensor:
    """float32 ``[..., n]``: each code's value times its block's scale (NaN in blocks that are not ``defined``)."""
    block = conventions.scale.block
    codes = quantized.codes
    n = codes.shape[-1]
    usable = torch.where(codes == NO_CODE, torch.zeros_like(codes), codes)
    values = decode(usable).reshape(*codes.shape[:-1], n // block, block)
    scaled = values * decode_scales(quantized.scales, conventions.scale).unsqueeze(-1)
    scaled = torch.where(quantized.defined.unsqueeze(-1), scaled, torch.full_like(scaled, math.nan))
    return scaled.reshape(codes.shape)


_E4M3_CLAMP = (2.0**-9, 448.0)
_V41_SOURCE = "sglang PR #39123 (kv_layout.cuh at d0b30a5f); vLLM PR #56893"

#: DeepSeek V4.1's FP4 record as sglang's kernel writes it: e4m3 per 16, ``clamp(amax * (1/6), 2**-9, 448)``
#: rounded to nearest even, IEEE division, and +0.0 added to the quotient, so -0 is stored as 0x0
V41_FP4 = Fp4Conventions(
    "v41_fp4",
    ScaleTraits(ScaleElement.E4M3FN, 16, ScaleRounding.RNE, AmaxDivision.MUL_ONE_SIXTH, _E4M3_CLAMP),
    PayloadDivision.IEEE_DIV,
    NegativeZero.POSITIVE,
    _V41_SOURCE,
)
#: the same record as its torch reference writes it: -0 kept as 0x8
V41_FP4_TORCH = Fp4Conventions(
    "v41_fp4_torch", V41_FP4.scale, PayloadDivision.IEEE_DIV, NegativeZero.KEEP, _V41_SOURCE
)
#: MXFP4 as the OCP MX specification v1.0 (section 6.3) computes it: ue8m0 per 32, ``2**(floor(log2(amax)) - 2)``
MXFP4_OCP = Fp4Conventions(
    "mxfp4_ocp",
    ScaleTraits(ScaleElement.UE8M0, 32, ScaleRounding.FLOOR_LOG2_EXACT, None, None),
    PayloadDivision.IEEE_DIV,
    NegativeZero.KEEP,
    "OCP Microscaling Formats (MX) specification v1.0, section 6.3",
)
#: MXFP4 as vLLM's test quantizer computes it: ``2**ceil(log2(max(amax, 6 * 2**-126) / 6))`` through float32 log2
MXFP4_FLOAT_LOG2 = Fp4Conventions(
    "mxfp4_float_log2",
    ScaleTraits(ScaleElement.UE8M0, 32, ScaleRounding.FLOAT_LOG2, AmaxDivision.DIV_SIX, (2.0**-126, math.inf)),
    PayloadDivision.IEEE_DIV,
    NegativeZero.KEEP,
    "vLLM's MXFP4 test quantizer (rtp-ref issue 34's field notes)",
)

#: the named convention sets, by name
FP4_CONVENTIONS: dict[str, Fp4Conventions] = {c.name: c for c in (V41_FP4, V41_FP4_TORCH, MXFP4_OCP, MXFP4_FLOAT_LOG2)}


def fp4_conventions(name: str) -> Fp4Conventions:
    """The named convention set ``name``; an unknown name raises ValueError listing the valid ones."""
    try:
        return FP4_CONVENTIONS[name]
    except KeyError:
        raise ValueError(f"unknown FP4 conventions {name!r}; valid: {', '.join(sorted(FP4_CONVENTIONS))}") from None

"""The block scales of the FP4 cache formats: their traits as records, and a block's scale from its amax under each
convention the field uses, as named alternatives of the contract.

A scale is one element per block of E2M1 values, either

* ``e4m3fn`` (NVFP4 and DeepSeek V4.1's FP4 record): ``code = e4m3(clamp(amax / 6, lo, hi))``, where ``amax / 6``
  is formed in float32 by one of two ``AmaxDivision`` conventions and rounded to e4m3 by ``ScaleRounding.RNE``
  (nearest, ties to even) or ``ScaleRounding.BUMP`` (FlashMLA's NVFP4 quantizer, vllm-project/FlashMLA PR #18: one
  code up where rounding left the scale below ``amax / 6``, so that no value of the block saturates); or
* ``ue8m0`` (MX, OCP Microscaling Formats specification v1.0): a power of two ``2**k``, by one of three exponent
  rules: ``FLOOR_LOG2_EXACT``, the specification's ``k = floor(log2(amax)) - 2`` (2: the exponent of E2M1's largest
  value), taken from the bits of amax; ``CEIL_LOG2_EXACT``, ``k = ceil(log2(amax / 6))``, the smallest scale under
  which no value saturates, taken from the bits of the float32 quotient; and ``FLOAT_LOG2``, the same formula
  through a float32 ``log2`` (vLLM's MXFP4 test quantizer, ``torch.ceil(torch.log2(amax / 6))``).

``FLOAT_LOG2`` differs from ``CEIL_LOG2_EXACT`` only where the quotient is just above a power of two ``2**k``:
``log2`` of it is ``k`` plus less than half a float32 step of ``k``, so it rounds to ``k`` and the scale comes out
one binade low (the block's amax, just above ``6 * 2**k``, then saturates to 6). Which quotients those are depends
on the ``log2`` rounding; this module states the convention for a correctly rounded float32 ``log2`` (a libm whose
``log2f`` is off by an ulp near an integer moves the window's edge), and for normal quotients, which its sources
ensure by flooring amax at ``6 * 2**-126``.

The amax of a block is ``rtp_ref.fp8.scales.tile_amax``; the e4m3 and ue8m0 encoders are ``rtp_ref.fp8``'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import torch

from rtp_ref.fp8.codec import decode, encode
from rtp_ref.fp8.formats import E4M3FN, ConversionMode
from rtp_ref.fp8.rules import Pow2Rule
from rtp_ref.fp8.ue8m0 import decode_ue8m0, encode_ue8m0

#: 1/6 rounded to float32 (0x3E2AAAAB, 11184811 * 2**-26, above 1/6 by 2**-26 / 3), the constant of ``amax * (1/6)``
ONE_SIXTH_F32 = float(torch.tensor(0x3E2AAAAB, dtype=torch.int32).view(torch.float32))
#: the exponent of E2M1's largest value, 6 = 1.5 * 2**2: OCP MX v1.0's ``emax_elem`` for FP4
E2M1_EMAX = 2
#: the smallest normal float32, 2**-126: the quotient floor ``FLOAT_LOG2`` needs (module doc)
F32_MIN_NORMAL = 2.0**-126


class ScaleElement(str, Enum):
    """The element format of a block's scale."""

    E4M3FN = "e4m3fn"
    UE8M0 = "ue8m0"


class AmaxDivision(str, Enum):
    """How ``amax / 6`` is formed in float32. The two quotients can differ in the last bit, and where they fall on
    either side of an e4m3 rounding boundary the scale's code differs: about one amax in 2**23 (sglang PR #39123)."""

    #: ``amax / 6``, one correctly rounded IEEE division
    DIV_SIX = "div_six"
    #: ``amax * (1/6)``: a multiply by ``ONE_SIXTH_F32``, itself rounded (DeepSeek V4.1's FP4 record, sglang #39123)
    MUL_ONE_SIXTH = "mul_one_sixth"


class ScaleRounding(str, Enum):
    """How the quotient (or, for ``FLOOR_LOG2_EXACT``, amax itself) becomes the scale's code; module doc."""

    RNE = "rne"
    BUMP = "bump"
    FLOOR_LOG2_EXACT = "floor_log2_exact"
    CEIL_LOG2_EXACT = "ceil_log2_exact"
    FLOAT_LOG2 = "float_log2"


_ROUNDINGS = {
    ScaleElement.E4M3FN: (ScaleRounding.RNE, ScaleRounding.BUMP),
    ScaleElement.UE8M0: (ScaleRounding.FLOOR_LOG2_EXACT, ScaleRounding.CEIL_LOG2_EXACT, ScaleRounding.FLOAT_LOG2),
}


@dataclass(frozen=True)
class ScaleTraits:
    """One FP4 format's block scale: its ``element`` format, ``block`` (values per scale: 16 or 32), ``rounding``,
    ``division`` (how ``amax / 6`` is formed; None exactly for ``FLOOR_LOG2_EXACT``, which reads amax itself) and
    ``clamp``: the bounds ``(lo, hi)`` the quotient is clamped to before rounding (None: not clamped). An e4m3
    scale needs a clamp with ``hi <= 448``; its ``lo`` may be 0, as in the writers with no floor (TensorRT-LLM's
    ``cvt_warp_fp16_to_fp4``, which vLLM's NVFP4 writers copy): an all-zero block, or one whose ``amax / 6`` rounds
    below e4m3's smallest subnormal, then gets scale code 0x00, and its values are stored as zeros of their sign
    (rtp_ref.fp4.quantize). ``FLOAT_LOG2`` needs ``lo >= 2**-126``; ``FLOOR_LOG2_EXACT`` takes no clamp; a ue8m0
    clamp needs ``0 < lo``."""

    element: ScaleElement
    block: int
    rounding: ScaleRounding
    division: AmaxDivision | None
    clamp: tuple[float, float] | None

    def __post_init__(self) -> None:
        problem = self._problem()
        if problem:
            raise ValueError(f"ScaleTraits({self.element.value}, block {self.block}, {self.rounding.value}): {problem}")

    def _problem(self) -> str | None:
        if self.block not in (16, 32):
            return "block must be 16 or 32"
        valid = _ROUNDINGS[self.element]
        if self.rounding not in valid:
            return f"an {self.element.value} scale rounds by one of {', '.join(r.value for r in valid)}"
        if (self.division is None) != (self.rounding is ScaleRounding.FLOOR_LOG2_EXACT):
            return "division is None exactly for floor_log2_exact, which reads amax itself"
        if self.rounding is ScaleRounding.FLOOR_LOG2_EXACT:
            return "floor_log2_exact takes no clamp" if self.clamp is not None else None
        lowest = 0.0 if self.element is ScaleElement.E4M3FN else math.nextafter(0.0, 1.0)
        if self.clamp is not None and not lowest <= self.clamp[0] <= self.clamp[1]:
            bound = "0 <= lo" if self.element is ScaleElement.E4M3FN else "0 < lo"
            return f"clamp {self.clamp} must satisfy {bound} <= hi"
        if self.element is ScaleElement.E4M3FN and (self.clamp is None or self.clamp[1] > E4M3FN.max_value):
            return f"an e4m3 scale needs a clamp with hi <= {E4M3FN.max_value}"
        if self.rounding is ScaleRounding.FLOAT_LOG2 and (self.clamp is None or self.clamp[0] < F32_MIN_NORMAL):
            return "float_log2 needs a clamp with lo >= 2**-126 (a normal quotient)"
        return None


def amax_quotient(amax: torch.Tensor, division: AmaxDivision | str) -> torch.Tensor:
    """``amax / 6`` in float32 (same shape and device) by ``division``: one rounding of the exact quotient
    (``DIV_SIX``) or of ``amax * ONE_SIXTH_F32`` (``MUL_ONE_SIXTH``)."""
    a = amax.to(torch.float32)
    # The operand is a tensor on a's device: torch on CUDA turns division by a CPU scalar into a multiply by its
    # reciprocal (rtp_ref.fp8.scales), which is the other convention.
    if AmaxDivision(division) is AmaxDivision.DIV_SIX:
        return a / torch.full_like(a, 6.0)
    return a * torch.full_like(a, ONE_SIXTH_F32)


def _float32_step_above(k: int) -> float:
    """The gap between the integer ``k`` and the next float32 above it (toward zero for a negative ``k``)."""
    if k == 0:
        return 2.0**-149
    p = math.floor(math.log2(abs(k)))
    # below a power of two the float32 steps halve: -2**p + step lies in the binade under 2**p
    return 2.0 ** (p - 24) if k < 0 and abs(k) == 2**p else 2.0 ** (p - 23)


def _log2_window(k: int) -> int:
    """How many float32 ``y = 2**k * (1 + j * 2**-23)``, ``j >= 1``, have a correctly rounded float32 ``log2`` of
    exactly ``k``: those with ``log2(1 + j * 2**-23)`` below half the float32 step above ``k``, i.e. ``j <
    2**23 * (2**(step / 2) - 1)``. For ``k != 0`` that bound is ``ln 2 * 2**n`` (n <= 5) to within 2**-17 relative,
    never within 0.05 of an integer, so float64 decides it (for ``k = 0`` it is below 2**-100); tests/fp4 proves
    each window's edges with exact rationals."""
    bound = math.expm1(math.log(2.0) * _float32_step_above(k) / 2) * 2.0**23
    return math.ceil(bound) - 1


#: ``_log2_window(k)`` for every k a normal float32 quotient can have, indexed by ``k + 126``
_WINDOWS = [_log2_window(k) for k in range(-126, 128)]


def _float_log2_lands_low(q: torch.Tensor) -> torch.Tensor:
    """Where ``ceil(float32 log2(q))`` is one below the exact ``ceil(log2(q))``, for normal positive float32 ``q``:
    ``q = 2**k * (1 + j * 2**-23)`` with ``1 <= j <= _log2_window(k)``."""
    bits = q.contiguous().view(torch.int32).to(torch.int64)
    k = ((bits >> 23) & 0xFF) - 127
    j = bits & 0x7FFFFF
    window = torch.tensor(_WINDOWS, dtype=torch.int64, device=q.device)[k + 126]
    return (j >= 1) & (j <= window)


def scale_codes(amax: torch.Tensor, traits: ScaleTraits) -> torch.Tensor:
    """The scale code (uint8: an e4m3fn code or a ue8m0 byte) of each block amax (float, finite and >= 0; same
    shape and device), by ``traits`` (module doc for each rule). A non-finite amax raises ValueError: no convention
    here states its scale. A ue8m0 exponent stays in [-127, 127]: an amax too small for any rule's scale (zero among
    them) gives 2**-127, byte 0, the smallest scale there is."""
    a = amax.to(torch.float32)
    if not bool(torch.isfinite(a).all()):
        raise ValueError("scale_codes: a non-finite amax; no FP4 scale convention states its scale")
    if traits.division is None:  # FLOOR_LOG2_EXACT, the one rule reading amax itself (ScaleTraits)
        # encode_ue8m0's floor is floor(log2(amax)) + 127 from the bits (0 for zero and amax < 2**-127)
        return (encode_ue8m0(a, Pow2Rule.FLOOR).to(torch.int64) - E2M1_EMAX).clamp(min=0).to(torch.uint8)
    q = amax_quotient(a, traits.division)
    if traits.clamp is not None:
        q = q.clamp(min=traits.clamp[0], max=traits.clamp[1])
    return quotient_scale_codes(q, traits)


def quotient_scale_codes(q: torch.Tensor, traits: ScaleTraits) -> torch.Tensor:
    """The scale codes (uint8) of float32 quotients ``q`` already formed and clamped as ``traits`` states (what
    ``scale_codes`` does after ``amax_quotient``): ``traits.rounding`` alone, for every rule but
    ``FLOOR_LOG2_EXACT``, which reads amax and raises ValueError here, as does a quotient outside the clamp."""
    if traits.rounding is ScaleRounding.FLOOR_LOG2_EXACT:
        raise ValueError("quotient_scale_codes: floor_log2_exact reads amax, not amax / 6; use scale_codes")
    if traits.clamp is not None and not bool(((q >= traits.clamp[0]) & (q <= traits.clamp[1])).all()):
        raise ValueError(f"quotient_scale_codes: a quotient outside the clamp {traits.clamp} (or NaN)")
    if traits.element is ScaleElement.UE8M0:
        byte = encode_ue8m0(q, Pow2Rule.CEIL)
        if traits.rounding is ScaleRounding.FLOAT_LOG2:
            byte = byte - _float_log2_lands_low(q).to(torch.uint8)
        return byte
    code = encode(q, E4M3FN, ConversionMode.SATFINITE)
    if traits.rounding is ScaleRounding.BUMP:
        # q <= hi <= 448 (checked above), the largest e4m3 value, so a code decoding below q is not the largest
        code = code + (decode(code, E4M3FN) < q).to(torch.uint8)
    return code


def decode_scales(codes: torch.Tensor, traits: ScaleTraits) -> torch.Tensor:
    """float32 values of scale ``codes`` (uint8) of ``traits``' element format: e4m3fn or ``2**(byte - 127)``."""
    if traits.element is ScaleElement.UE8M0:
        return decode_ue8m0(codes)
    return decode(codes, E4M3FN)


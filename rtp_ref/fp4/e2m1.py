"""Bit-exact E2M1 (FP4) encode/decode and nibble packing, in integer arithmetic on torch tensors.

E2M1, as the OCP Microscaling Formats (MX) specification v1.0 (section 5.3.3) defines it: 1 sign bit, 2 exponent
bits, 1 mantissa bit, exponent bias 1; the magnitudes of codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6 (code 1 is the one
subnormal); codes 8..15 are their negatives, 0x8 being -0. There is no infinity and no NaN, so what a NaN or an
infinity becomes is a policy of each cache format, stated here as data (``NonFinitePolicy``), not a property of
E2M1. ``ml_dtypes.float4_e2m1fn`` implements the same format; the tests compare against it on every finite bf16.

The encoder follows ``rtp_ref.fp8.codec``: from the float32 bit pattern,

    value = sig * 2**(e - 23)                 sig: 24-bit significand, e: unbiased exponent
    te    = max(e, 0)                         0 = the smallest normal exponent (1 - bias)
    q     = round_half_even(sig / 2**(22 + te - e))
    mag   = (te << 1) + q                     the carry of a round-up lands in the next binade

so ``mag`` is the magnitude code of the nearest value (ties to even); above 7 (6, the largest value) it saturates.
Nothing here calls torch's float4 casts, which (as its float8 casts, docs/fp8.md) are the build's and not a contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from fractions import Fraction

import torch

from rtp_ref.fp8.codec import round_shift_right_half_even

#: the largest E2M1 magnitude and its code
E2M1_MAX = 6.0
MAX_CODE = 0x7
#: the sign bit of a code: 0x8 alone is -0
SIGN_BIT = 0x8
#: what ``encode`` gives where its ``NonFinitePolicy`` defines no code: outside 0..15, so it can never be read as a
#: value, and ``pack`` refuses it
NO_CODE = 0xFF

_F32_MAN_BITS = 23
_SUPPORTED_INPUTS = (torch.float32, torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class NonFinitePolicy:
    """What a cache format makes of the non-finite inputs E2M1 cannot hold: ``saturate_inf`` (True: +-inf encode
    as +-6, codes 0x7 and 0xF, as finite overflow does; False: no code is defined) and ``nan_code`` (the code a NaN
    of either sign becomes; None: no code is defined). Where no code is defined, ``encode`` gives ``NO_CODE``."""

    name: str
    saturate_inf: bool
    nan_code: int | None

    def __post_init__(self) -> None:
        if self.nan_code is not None and not 0 <= self.nan_code <= 0xF:
            raise ValueError(f"NonFinitePolicy {self.name!r}: nan_code {self.nan_code} is not an E2M1 code 0..15")

    @classmethod
    def saturate(cls, nan_code: int) -> NonFinitePolicy:
        """+-inf saturate to +-6 and every NaN becomes ``nan_code`` (the format's declared choice)."""
        return cls(f"saturate(nan={nan_code:#x})", True, nan_code)


#: a format that states nothing for NaN and +-inf (sglang's DSV4.1 FP4 writer: "NaN/inf inputs are not handled",
#: sgl-project/sglang PR #39123): ``encode`` gives ``NO_CODE`` for them
UNDEFINED = NonFinitePolicy("undefined", False, None)


class NegativeZero(str, Enum):
    """What a float32 -0.0 reaching the conversion becomes."""

    #: code 0x8, the sign kept (the torch references, FlashMLA, ml_dtypes)
    KEEP = "keep"
    #: code 0x0: the kernel adds +0.0 to the value before converting it (sglang's DSV4.1 FP4 kernel, PR #39123),
    #: which changes an exact -0.0 only: a negative value that rounds to zero still gives 0x8 under both
    POSITIVE = "positive"


def _saturate(mag: torch.Tensor) -> torch.Tensor:
    """Magnitude codes above 7 (overflow, and +-inf's) clamped to 7: E2M1 conversion saturates (OCP MX v1.0)."""
    return mag.clamp(max=MAX_CODE)


def encode(
    x: torch.Tensor, non_finite: NonFinitePolicy = UNDEFINED, negative_zero: NegativeZero | str = NegativeZero.KEEP
) -> torch.Tensor:
    """E2M1 codes (uint8, 0..15 or ``NO_CODE``; same shape and device) of float32, bf16 or fp16 ``x``.

    Round to nearest, ties to even (16-bit inputs widen to float32 exactly first): 5, midway between 4 and 6, gives
    4's even code 0x6; a finite magnitude above 6 saturates to 6, code 0x7, as E2M1 has nothing above it. Negative
    values keep their sign, also where they round to zero (0x8). ``negative_zero`` decides an exact -0.0, and
    ``non_finite`` NaN and +-inf (``NO_CODE`` where it defines no code).
    """
    if x.dtype not in _SUPPORTED_INPUTS:
        raise ValueError(f"encode: x has dtype {x.dtype}; supported: float32, bfloat16, float16")
    zero_rule = NegativeZero(negative_zero)
    bits = x.to(torch.float32).contiguous().view(torch.int32).to(torch.int64)
    sign = (bits >> 31) & 1
    exp_field = (bits >> _F32_MAN_BITS) & 0xFF
    man = bits & ((1 << _F32_MAN_BITS) - 1)
    is_nan = (exp_field == 0xFF) & (man != 0)
    is_inf = (exp_field == 0xFF) & (man == 0)

    normal = exp_field != 0
    sig = torch.where(normal, man | (1 << _F32_MAN_BITS), man)
    exp = torch.where(normal, exp_field - 127, torch.full_like(exp_field, -126))
    target_exp = exp.clamp(min=0)
    # shifts past 62 would overflow int64; every one of them rounds a 24-bit significand to 0
    shift = (_F32_MAN_BITS - 1 + target_exp - exp).clamp(max=62)
    mag = _saturate((target_exp << 1) + round_shift_right_half_even(sig, shift))

    if zero_rule is NegativeZero.POSITIVE:
        sign = torch.where((exp_field == 0) & (man == 0), torch.zeros_like(sign), sign)
    code = (sign << 3) | mag
    nan_code = NO_CODE if non_finite.nan_code is None else non_finite.nan_code
    code = torch.where(is_nan, torch.full_like(code, nan_code), code)
    if not non_finite.saturate_inf:
        code = torch.where(is_inf, torch.full_like(code, NO_CODE), code)
    return code.to(torch.uint8)


def exact_value(code: int) -> Fraction:
    """The value of E2M1 ``code`` (0..15) by the format's definition (OCP MX v1.0): ``(-1)**s * 2**(e - 1) * (1 +
    m/2)`` for a non-zero exponent field ``e``, ``(-1)**s * m/2`` for ``e == 0``. Code 0x8 gives 0 (its sign,
    -0.0, is ``decode``'s)."""
    if not 0 <= code <= 0xF:
        raise ValueError(f"exact_value: {code} is not an E2M1 code 0..15")
    sign = -1 if code & SIGN_BIT else 1
    exp = (code >> 1) & 0x3
    man = code & 0x1
    if exp == 0:
        return sign * Fraction(man, 2)
    return sign * (1 + Fraction(man, 2)) * Fraction(2) ** (exp - 1)


#: float32 value of every code, by ``exact_value`` (0x8 as -0.0)
_TABLE = [-0.0 if code == SIGN_BIT else float(exact_value(code)) for code in range(16)]


def decode(codes: torch.Tensor) -> torch.Tensor:
    """float32 values of E2M1 ``codes`` (uint8, each 0..15; same shape and device); 0x8 gives -0.0. A byte above
    15 (``NO_CODE`` among them) raises ValueError: it is no E2M1 code."""
    _check_codes(codes, "decode")
    table = torch.tensor(_TABLE, dtype=torch.float32, device=codes.device)
    return table[codes.to(torch.int64)]


def pack(codes: torch.Tensor) -> torch.Tensor:
    """Two codes per byte: ``codes[..., 2i]`` in the low nibble of byte ``i``, ``codes[..., 2i + 1]`` in its high
    nibble (the order of sglang's DSV4.1 V41_FP4 record, PR #39123). ``codes`` is uint8
    ``[..., 2n]`` of codes 0..15; the result is uint8 ``[..., n]``. An odd last dimension or a byte above 15 (an
    undefined code) raises ValueError."""
    _check_codes(codes, "pack")
    if codes.shape[-1] % 2:
        raise ValueError(f"pack: last dimension {codes.shape[-1]} is odd; two codes make a byte")
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack(packed: torch.Tensor) -> torch.Tensor:
    """The inverse of ``pack``: uint8 ``[..., n]`` bytes to uint8 ``[..., 2n]`` codes, low nibble first."""
    if packed.dtype != torch.uint8:
        raise ValueError(f"unpack: packed has dtype {packed.dtype}; expected uint8")
    return torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(*packed.shape[:-1], 2 * packed.shape[-1])


def _check_codes(codes: torch.Tensor, what: str) -> None:
    if codes.dtype != torch.uint8:
        raise ValueError(f"{what}: codes has dtype {codes.dtype}; expected uint8")
    if codes.numel() and int(codes.max()) > 0xF:
        raise ValueError(f"{what}: a code above 15 ({int(codes.max()):#x}); E2M1 codes are 0..15")

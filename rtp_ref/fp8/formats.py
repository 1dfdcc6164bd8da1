"""The fp8 element formats as data: one record per format, everything else is derived.

Sources for the definitions: the OCP 8-bit floating point specification (e4m3 "fn" and e5m2),
the AMD/Graphcore "fnuz" variants used by ROCm gfx942 (bias one larger, a single NaN at 0x80,
no negative zero, no infinity), and ml_dtypes' format table. See docs/fp8.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from typing import Protocol


class NanEncoding(Enum):
    """How a format spells NaN (and whether it has infinities)."""

    #: OCP e4m3: only S.1111.111 is NaN; no infinity.
    FN = "fn"
    #: fnuz: only 0x80 (the would-be negative zero) is NaN; no infinity, no -0.
    FNUZ = "fnuz"
    #: IEEE-like: exponent all ones is inf (mantissa 0) or NaN (mantissa != 0).
    IEEE = "ieee"


@dataclass(frozen=True)
class Fp8Format:
    """One 8-bit float format: 1 sign bit, ``exp_bits`` exponent bits, ``man_bits`` mantissa bits."""

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    nan_encoding: NanEncoding
    #: the torch dtype attribute name holding this format, for reinterpretation only
    torch_dtype_name: str

    @property
    def has_inf(self) -> bool:
        return self.nan_encoding is NanEncoding.IEEE

    @property
    def has_negative_zero(self) -> bool:
        return self.nan_encoding is not NanEncoding.FNUZ

    @property
    def min_normal_exp(self) -> int:
        """Unbiased exponent of the smallest normal (also the scale of the subnormals)."""
        return 1 - self.bias

    @property
    def max_code(self) -> int:
        """Largest finite positive code (sign bit clear)."""
        if self.nan_encoding is NanEncoding.FN:
            return 0x7E
        if self.nan_encoding is NanEncoding.FNUZ:
            return 0x7F
        return ((1 << self.exp_bits) - 2) << self.man_bits | ((1 << self.man_bits) - 1)

    @property
    def nan_code(self) -> int:
        """The NaN this codec writes (a canonical quiet NaN, positive where the format has a sign). A kernel may
        write any of the format's NaN codes (``is_nan_code``) instead: rtp_ref.fp8.elements.NanPolicy."""
        if self.nan_encoding is NanEncoding.FN:
            return 0x7F
        if self.nan_encoding is NanEncoding.FNUZ:
            return 0x80
        return (((1 << self.exp_bits) - 1) << self.man_bits) | (1 << (self.man_bits - 1))

    @property
    def inf_code(self) -> int:
        """Code of +inf; only for formats with infinities."""
        if not self.has_inf:
            raise ValueError(f"fp8 format {self.name!r} has no infinity")
        return ((1 << self.exp_bits) - 1) << self.man_bits

    def is_nan_code(self, code: int) -> bool:
        """True when the 8-bit ``code`` is a NaN in this format."""
        if self.nan_encoding is NanEncoding.FN:
            return (code & 0x7F) == 0x7F
        if self.nan_encoding is NanEncoding.FNUZ:
            return code == 0x80
        exp = (code >> self.man_bits) & ((1 << self.exp_bits) - 1)
        return exp == (1 << self.exp_bits) - 1 and (code & ((1 << self.man_bits) - 1)) != 0

    def exact_value(self, code: int) -> Fraction | float:
        """The value of ``code`` by the format's definition: a Fraction, or a float for NaN, +-inf
        and -0.0 (which a Fraction cannot carry)."""
        if self.is_nan_code(code):
            return float("nan")
        if code == 0x80:
            return -0.0
        sign = -1 if code & 0x80 else 1
        exp = (code >> self.man_bits) & ((1 << self.exp_bits) - 1)
        man = code & ((1 << self.man_bits) - 1)
        if self.has_inf and exp == (1 << self.exp_bits) - 1:
            return sign * float("inf")
        if exp == 0:
            return sign * Fraction(man, 1 << self.man_bits) * Fraction(2) ** self.min_normal_exp
        return sign * (1 + Fraction(man, 1 << self.man_bits)) * Fraction(2) ** (exp - self.bias)

    @property
    def max_value(self) -> float:
        """Largest finite value (448 for e4m3fn, 240 for e4m3fnuz, 57344 for both e5m2)."""
        return float(self.exact_value(self.max_code))


E4M3FN = Fp8Format("e4m3fn", 4, 3, 7, NanEncoding.FN, "float8_e4m3fn")
E4M3FNUZ = Fp8Format("e4m3fnuz", 4, 3, 8, NanEncoding.FNUZ, "float8_e4m3fnuz")
E5M2 = Fp8Format("e5m2", 5, 2, 15, NanEncoding.IEEE, "float8_e5m2")
E5M2FNUZ = Fp8Format("e5m2fnuz", 5, 2, 16, NanEncoding.FNUZ, "float8_e5m2fnuz")

FP8_FORMATS: dict[str, Fp8Format] = {f.name: f for f in (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ)}


class ConversionMode(str, Enum):
    """What an encoder does with values beyond the largest finite value."""

    #: finite overflow and +-inf clamp to +-max; NaN stays NaN (CUDA __NV_SATFINITE, HIP __HIP_SATFINITE)
    SATFINITE = "satfinite"
    #: overflow becomes NaN (inf for e5m2, which has infinities); the IEEE-style conversion
    NONSAT = "nonsat"


class FormatSource(Protocol):
    """Where a cache's fp8 element format and conversion mode come from: a platform table
    (rtp_ref.platform.Platform) or a kernel's bound contract (rtp_ref.contract.WriteContract)."""

    @property
    def element_format(self) -> Fp8Format: ...

    @property
    def conversion_mode(self) -> ConversionMode: ...


def fp8_format(name: str) -> Fp8Format:
    """Look up a format by name; unknown names raise ValueError listing the valid ones."""
    try:
        return FP8_FORMATS[name]
    except KeyError:
        raise ValueError(
            f"unknown fp8 format {name!r}; valid formats: {', '.join(sorted(FP8_FORMATS))}"
        ) from None


def conversion_mode(name: str) -> ConversionMode:
    """Look up a conversion mode by name; unknown names raise ValueError listing the valid ones."""
    try:
        return ConversionMode(name)
    except ValueError:
        valid = ", ".join(m.value for m in ConversionMode)
        raise ValueError(f"unknown conversion mode {name!r}; valid modes: {valid}") from None

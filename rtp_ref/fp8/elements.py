"""Element formats of a cache field as traits, one record each: how many bytes a value takes (or, for a format
narrower than a byte, how many values share a byte), how its bytes read as numbers and which of its bit patterns are
NaN. fp8 value formats, the 16-bit and 32-bit floats, the ue8m0 scale and padding all go through the same record
(and E2M1, whose record rtp_ref.fp4.element holds, a floor above; rtp_ref.kv.fields joins them), so code that
sizes, names, decodes or compares an element (the layouts' field tables, the reference reader, the graders' byte
comparison, a failed check's examples) is written once over every format: a new element format is one record.

The NaN policy (``NanPolicy``): a NaN in gives a NaN of the same format out, and where the format has several NaN
encodings, which a reader decodes alike (either sign, any payload, quiet or signalling: GPUs raise no
floating-point exceptions), any of them passes the ``bit_exact`` grade, unless a platform table pins one (``[fp8]
nan_pins``, with a source showing a reader that depends on it).

Bytes are little-endian, as every GPU rtp-ref targets stores them. Torch-free to import (the platform loader's
field tables take the sizes, its validation the NaN encodings); the decoders import the torch-based codecs when they
first run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.formats import FP8_FORMATS, Fp8Format, NanEncoding

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class NanEncodings:
    """The bit patterns of an element format that are NaN, as data: those whose magnitude (the bits below the sign
    bit; all ``width`` bits where the format is not ``signed``) exceeds ``top``, the largest magnitude that is a
    number or an infinity (None: no magnitude is NaN), and the patterns in ``extra`` (fnuz's 0x80, where a negative
    zero would be). A reader decodes every one of them to NaN."""

    width: int
    signed: bool
    top: int | None
    extra: tuple[int, ...] = ()

    @property
    def _magnitude_mask(self) -> int:
        return (1 << (self.width - 1 if self.signed else self.width)) - 1

    def contains(self, bits: int) -> bool:
        """True when the ``width``-bit pattern ``bits`` is a NaN."""
        return bits in self.extra or (self.top is not None and (bits & self._magnitude_mask) > self.top)

    def is_nan(self, bits: torch.Tensor) -> torch.Tensor:
        """Elementwise ``contains`` over int64 patterns ``bits`` (``element_bits`` gives them)."""
        import torch

        found = (bits & self._magnitude_mask) > self.top if self.top is not None else torch.zeros_like(bits,
                                                                                                        dtype=torch.bool)
        for code in self.extra:
            found |= bits == code
        return found


def fp8_nan_encodings(fmt: Fp8Format) -> NanEncodings:
    """The NaN encodings of fp8 format ``fmt``: e4m3fn S.1111.111 (0x7F, 0xFF), e5m2 an all-ones exponent with a
    non-zero mantissa (0x7D-0x7F, 0xFD-0xFF), fnuz 0x80 alone."""
    if fmt.nan_encoding is NanEncoding.FNUZ:
        return NanEncodings(8, True, None, (0x80,))
    return NanEncodings(8, True, fmt.inf_code if fmt.has_inf else fmt.max_code)


def _ieee(width: int, exp_bits: int) -> NanEncodings:
    """An IEEE 754 binary format's NaNs: an all-ones exponent above a non-zero mantissa (inf's pattern is the top)."""
    return NanEncodings(width, True, ((1 << exp_bits) - 1) << (width - 1 - exp_bits))


@dataclass(frozen=True)
class ElementTraits:
    """One element format: its name; ``size``, the bytes of one unit, the fewest whole bytes that hold whole values;
    ``per_unit``, how many values a unit holds (1, or 2 for E2M1: two codes a byte, the even index in the low
    nibble); ``decode``: units ``[n, size]`` (uint8) -> the values they hold, ``[n]`` or ``[n, per_unit]`` (float64;
    NaN where the bits are a NaN), None for bytes that hold no value (padding); and ``nan``: its NaN encodings
    (None: it holds no NaN)."""

    name: str
    size: int
    decode: Callable[[torch.Tensor], torch.Tensor] | None
    nan: NanEncodings | None = None
    per_unit: int = 1

    @property
    def bits(self) -> int:
        """Bits of one value: 4 for E2M1, ``8 * size`` for every format of one value a unit."""
        return 8 * self.size // self.per_unit

    def values(self, raw: torch.Tensor) -> torch.Tensor:
        """The values of ``raw``, bytes ``[..., k * size]`` of ``k`` consecutive units: float64 ``[..., k *
        per_unit]`` in order (NaN for a value the bytes do not hold)."""
        import torch

        rows = raw.reshape(-1, self.size).contiguous()
        units = rows.shape[0]
        decoded = self.decode(rows) if self.decode is not None else torch.full((units, self.per_unit), float("nan"))
        return decoded.double().reshape(*raw.shape[:-1], raw.shape[-1] // self.size * self.per_unit)


def element_bits(raw: torch.Tensor) -> torch.Tensor:
    """The bit patterns of elements given as their little-endian bytes ``[n, size]`` (uint8): int64 ``[n]``."""
    import torch

    size = raw.shape[1]
    signed = {1: torch.int8, 2: torch.int16, 4: torch.int32}
    if size in signed:
        # the bytes reinterpreted as one signed integer, widened and masked back to the unsigned pattern (every host
        # torch runs on is little-endian)
        wide = raw.contiguous().view(signed[size]).reshape(-1).to(torch.int64)
        return wide & ((1 << (8 * size)) - 1)
    wide = raw.to(torch.int64)
    return sum((wide[:, i] << (8 * i) for i in range(1, size)), wide[:, 0])


def _fp8(fmt: Fp8Format) -> ElementTraits:
    def decode(raw: torch.Tensor) -> torch.Tensor:
        from rtp_ref.fp8.codec import decode as decode_fp8

        return decode_fp8(raw[:, 0], fmt).double()

    return ElementTraits(fmt.name, 1, decode, fp8_nan_encodings(fmt))


def _float(name: str, dtype_name: str, size: int, exp_bits: int) -> ElementTraits:
    def decode(raw: torch.Tensor) -> torch.Tensor:
        import torch

        return raw.view(getattr(torch, dtype_name))[:, 0].double()

    return ElementTraits(name, size, decode, _ieee(8 * size, exp_bits))


def _ue8m0(raw: torch.Tensor) -> torch.Tensor:
    from rtp_ref.fp8.ue8m0 import decode_ue8m0

    return decode_ue8m0(raw[:, 0]).double()


#: every element format a cache field may hold, by name
ELEMENT_TRAITS: dict[str, ElementTraits] = {
    **{name: _fp8(fmt) for name, fmt in FP8_FORMATS.items()},
    "bf16": _float("bf16", "bfloat16", 2, 8),
    "fp16": _float("fp16", "float16", 2, 5),
    "fp32": _float("fp32", "float32", 4, 8),
    # a power of two 2^(e - 127), no sign; 0xFF is its one NaN (OCP MX spec v1.0, E8M0)
    "ue8m0": ElementTraits("ue8m0", 1, _ue8m0, NanEncodings(8, False, 0xFE)),
    # a layout's padding: neither written nor read
    "pad": ElementTraits("pad", 1, None),
}

#: the element name of each torch float dtype a cache may hold verbatim, by the dtype's name
DTYPE_ELEMENTS = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}


def element_traits(name: str) -> ElementTraits:
    """The traits of element format ``name``; an unknown name raises RtpRefError listing the valid ones."""
    try:
        return ELEMENT_TRAITS[name]
    except KeyError:
        raise RtpRefError(f"unknown element format {name!r}; valid: {', '.join(ELEMENT_TRAITS)}") from None


def dtype_element(dtype: torch.dtype) -> ElementTraits:
    """The traits of a float dtype's values stored verbatim (bf16, fp16, fp32)."""
    try:
        return ELEMENT_TRAITS[DTYPE_ELEMENTS[str(dtype)]]
    except KeyError:
        raise RtpRefError(f"no element format for {dtype}; valid: {', '.join(DTYPE_ELEMENTS)}") from None


def nan_pin_problem(name: str, code: int) -> str | None:
    """Why ``code`` cannot be element format ``name``'s pinned NaN (None: it can): an unknown format or one without
    NaN encodings, or a pattern that is not one of its NaNs."""
    traits = ELEMENT_TRAITS.get(name)
    if traits is None or traits.nan is None:
        valid = ", ".join(n for n, t in ELEMENT_TRAITS.items() if t.nan is not None)
        return f"no element format {name!r} with NaN encodings; valid: {valid}"
    if not traits.nan.contains(code):
        return f"{code:#x} is not a NaN of {name}"
    return None


@dataclass(frozen=True)
class NanPolicy:
    """Which stored NaN passes ``bit_exact`` where the contract stores a NaN (module doc): any NaN encoding of the
    element's format, or, for a format in ``pins`` (``(format name, pattern)`` pairs, a platform table's ``[fp8]
    nan_pins``), only the pinned pattern."""

    pins: tuple[tuple[str, int], ...] = ()

    @classmethod
    def pinning(cls, pins: Mapping[str, int]) -> NanPolicy:
        """The policy pinning ``pins`` (element format name -> NaN pattern), each checked by ``nan_pin_problem``."""
        for name, code in pins.items():
            problem = nan_pin_problem(name, code)
            if problem:
                raise RtpRefError(f"NaN pin {name} = {code:#x}: {problem}")
        return cls(tuple(sorted(pins.items())))

    def pinned(self, element: ElementTraits) -> int | None:
        """The pattern pinned for ``element``'s NaN, None where any NaN encoding passes."""
        return dict(self.pins).get(element.name)

    def matches(self, element: ElementTraits, want: torch.Tensor, got: torch.Tensor) -> torch.Tensor:
        """Per element, whether bit patterns ``got`` (int64, ``element_bits``) pass for the contract's ``want``:
        where ``want`` is a NaN, ``got`` is a NaN the policy accepts; elsewhere the same pattern."""
        if element.nan is None:
            return want == got
        import torch

        want_nan, same = element.nan.is_nan(want), want == got
        if not bool(want_nan.any()):  # the common case, decided without looking for NaNs in got
            return same
        pin = self.pinned(element)
        accepted = element.nan.is_nan(got) if pin is None else got == pin
        return torch.where(want_nan, accepted, same)

    def describe(self) -> str:
        """``the table pins NaN: e5m2 0x7f`` ("" without pins), for a failed check's detail."""
        return "the table pins NaN: " + ", ".join(f"{name} {code:#x}" for name, code in self.pins) if self.pins else ""


#: the policy of a table that pins no NaN: any NaN encoding of the element's format passes
ANY_NAN = NanPolicy()

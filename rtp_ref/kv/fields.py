"""The vocabulary of a layout's field table: where a field sits, what it holds, how it is scaled."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from rtp_ref.errors import RtpRefError
from rtp_ref.fp4.element import E2M1_ELEMENT
from rtp_ref.fp8.elements import ELEMENT_TRAITS, ElementTraits
from rtp_ref.fp8.formats import FP8_FORMATS
from rtp_ref.fp8.rules import ScaleRule

if TYPE_CHECKING:
    import torch

    from rtp_ref.fp4.quantize import Fp4Conventions

#: Element of a 16-bit field: the inputs' own type (bf16 or fp16), its bits copied verbatim.
ELEMENT_INPUT16 = "bf16/fp16"
ELEMENT_FP32 = "fp32"
ELEMENT_UE8M0 = "ue8m0"
ELEMENT_PAD = "pad"

ELEMENT_E2M1 = E2M1_ELEMENT.name

#: every element format a cache field's bytes may hold, by name: rtp_ref.fp8.elements' and E2M1 (rtp_ref.fp4.element)
FIELD_ELEMENT_TRAITS: dict[str, ElementTraits] = {**ELEMENT_TRAITS, ELEMENT_E2M1: E2M1_ELEMENT}

#: each field element's bits per value: the inputs' own 16-bit type, and every element format above but the named
#: 16-bit floats (a field of the inputs' type is ``bf16/fp16``, whichever the writer was given)
_ELEMENT_BITS = {
    ELEMENT_INPUT16: 16,
    **{name: traits.bits for name, traits in FIELD_ELEMENT_TRAITS.items() if name not in ("bf16", "fp16")},
}


def field_element(name: str) -> ElementTraits:
    """The traits of element format ``name`` of a cache field's bytes (an fp8 format, ``e2m1``, ``fp32``, ``ue8m0``,
    ``bf16``, ``fp16`` or ``pad``); an unknown name raises RtpRefError listing the valid ones."""
    try:
        return FIELD_ELEMENT_TRAITS[name]
    except KeyError:
        raise RtpRefError(f"unknown element format {name!r}; valid: {', '.join(FIELD_ELEMENT_TRAITS)}") from None


#: every field element name: the fp8 formats, ``e2m1``, ``bf16/fp16``, ``fp32``, ``ue8m0`` and ``pad``
ELEMENTS: tuple[str, ...] = tuple(_ELEMENT_BITS)


def value_bits(element: str) -> int:
    """Bits per value of an element: an fp8 format name, ``e2m1`` (4: two values a byte), ``bf16/fp16``, ``fp32``,
    ``ue8m0`` or ``pad``."""
    try:
        return _ELEMENT_BITS[element]
    except KeyError:
        raise RtpRefError(f"unknown field element {element!r}; valid: {', '.join(_ELEMENT_BITS)}") from None


def field_bytes(element: str, count: int) -> int:
    """Bytes of ``count`` values of ``element``; RtpRefError where they do not fill whole bytes (an odd number of
    E2M1 values)."""
    bits = count * value_bits(element)
    if bits % 8:
        raise RtpRefError(f"{count} values of {element} fill {bits} bits, not whole bytes; valid: a count whose "
                          f"bits are a multiple of 8 ({8 // math.gcd(8, value_bits(element))} values at a time)")
    return bits // 8


def is_fp8_element(element: str) -> bool:
    """True when the element is an fp8 value format (the values need a scale to mean anything)."""
    return element in FP8_FORMATS


class Placement(str, Enum):
    """Where a field's bytes live."""

    #: inside the token's entry: token t of a block at ``t * data_bytes_per_token + offset``
    PER_TOKEN = "per_token"
    #: after the block's per-token data: token t at ``block_size * data_bytes_per_token +
    #: t * trailing_bytes_per_token + offset`` (fp8_model1_mla's scales)
    BLOCK_TRAILING = "block_trailing"
    #: in a segment of its own after the block's per-token and block-trailing areas, holding this field for every
    #: token of the block: token t at ``block_size * start + t * size``, where ``start`` is the bytes a token owns in
    #: every area before the segment (AITER's page-segmented DeepSeek V3.2 cache: nope, scales, rope apart)
    PAGE_SEGMENT = "page_segment"
    #: outside the cache: the per-tensor ``scale`` argument of the writer and reader
    EXTERNAL = "external"


class Source(str, Enum):
    """What a field holds."""

    #: the latent ("nope") values: the k partition
    KV_C = "kv_c"
    #: the rope values: the v partition
    K_PE = "k_pe"
    #: scale values (computed per tile by the writer, or given per tensor)
    SCALE = "scale"
    #: padding: neither written nor read
    PAD = "pad"
    #: padding the writer sets to 0: written, never read (the 432-byte nvfp4_ds_mla record of local-inference-lab/vllm)
    ZERO = "zero"
    #: the keys of an MHA cache, or the indexer's k
    KEY = "key"
    #: the values of an MHA cache
    VALUE = "value"


#: what an MLA layout's fields may hold (the MHA and indexer families add KEY and VALUE)
MLA_SOURCES: tuple[Source, ...] = (Source.KV_C, Source.K_PE, Source.SCALE, Source.PAD, Source.ZERO)


@dataclass(frozen=True)
class TileScale:
    """How the writer computes an inline scale field from the values it covers.

    Scale ``i`` covers values ``[i * tile, (i + 1) * tile)`` of its value field (the last tile may be
    partial): ``s = max(amax / divisor, floor)``, then for ``pow2_ceil`` the next power of two.
    ``fp4``: for a field of E2M1 values, the FP4 conventions that decide its bytes (rtp_ref.fp4): the scale by
    ``fp4.scale``'s traits (its rounding, how ``amax / 6`` is formed, its clamp, whose low end is ``floor``), each
    value ``e2m1(x / s)`` by ``fp4.payload``, a -0.0 by ``fp4.negative_zero``; None for fp8 values.
    ``non_finite_tile``: what an FP4 tile holding NaN or +-inf stores (rtp_ref.kv.records.NON_FINITE_TILES).
    ``reciprocal_amax``, ``reciprocal_payload`` (fp8 values): ``amax * (1/divisor)`` and ``x * (1/s)`` with the
    reciprocals rounded to float32, in place of the divisions (rtp_ref.kv.records.TileRule); a zero scale then
    stores 0x00 for every value.
    """

    tile: int
    rule: ScaleRule
    divisor: float
    floor: float
    fp4: Fp4Conventions | None = None
    non_finite_tile: str = "undefined"
    reciprocal_amax: bool = False
    reciprocal_payload: bool = False

    def formula(self) -> str:
        """The rule as a short formula, for tables (e.g. ``2^ceil(log2(max(amax/448, 0.0001)))``; for FP4
        ``e4m3fn rne of clamp(amax*(1/6), 0.00195312, 448)``)."""
        if self.fp4 is not None:
            traits = self.fp4.scale
            quotient = "amax*(1/6)" if traits.division == "mul_one_sixth" else "amax/6"
            bounds = "" if traits.clamp is None else f", {traits.clamp[0]:g}, {traits.clamp[1]:g}"
            inner = f"clamp({quotient}{bounds})" if bounds else quotient
            return f"{traits.element.value} {traits.rounding.value} of {inner}"
        quotient = f"amax*(1/{self.divisor:g})" if self.reciprocal_amax else f"amax/{self.divisor:g}"
        inner = f"max({quotient}, {self.floor:g})" if self.floor else quotient
        formula = f"2^ceil(log2({inner}))" if self.rule is ScaleRule.POW2_CEIL else inner
        return f"{formula}; values x*(1/s)" if self.reciprocal_payload else formula


@dataclass(frozen=True)
class Field:
    """One field of a layout: ``size`` bytes at byte ``offset`` of its placement's area.

    ``scale_field`` names the scale a value field is divided by (None: stored verbatim, or for fp8 values with
    ``unscaled``, the inputs converted as they are);
    ``tile_scale`` says how the writer computes a scale field (None for the external per-tensor scale);
    ``area`` names the cache tensor holding the field where a family has two (the MHA ``key_cache`` and
    ``value_cache``; offsets count within it), "" where it has one.
    ``order``: a scale field's stored order, ``(rows, cols)`` transposed (rtp_ref.kv.records.FieldRecord), or None.
    """

    name: str
    source: Source
    placement: Placement
    offset: int
    size: int
    element: str
    scale_field: str | None = None
    tile_scale: TileScale | None = None
    note: str = ""
    area: str = ""
    unscaled: bool = False
    order: tuple[int, int] | None = None

    def stored_index(self, i: int) -> int:
        """The element position at which this field stores its ``i``-th value (a scale field's order)."""
        if self.order is None:
            return i
        rows, cols = self.order
        return (i % cols) * rows + i // cols

    def to_stored_order(self, natural: torch.Tensor) -> torch.Tensor:
        """One-byte elements ``natural`` ``[T, count]`` in natural order, as this field stores them."""
        if self.order is None:
            return natural
        rows, cols = self.order
        return natural.reshape(-1, rows, cols).transpose(1, 2).reshape(natural.shape)

    def to_natural_order(self, stored: torch.Tensor) -> torch.Tensor:
        """This field's stored one-byte elements ``stored`` ``[T, count]`` in natural order (``i``-th at ``i``)."""
        if self.order is None:
            return stored
        rows, cols = self.order
        return stored.reshape(-1, cols, rows).transpose(1, 2).reshape(stored.shape)

    @property
    def count(self) -> int:
        """Number of values (``size`` in bits / the element's bits)."""
        return 8 * self.size // value_bits(self.element)

    @property
    def end(self) -> int:
        """First byte after the field within its placement's area."""
        return self.offset + self.size

"""The vocabulary of a layout's field table: where a field sits, what it holds, how it is scaled."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.elements import ELEMENT_TRAITS
from rtp_ref.fp8.formats import FP8_FORMATS
from rtp_ref.fp8.rules import ScaleRule

#: Element of a 16-bit field: the inputs' own type (bf16 or fp16), its bits copied verbatim.
ELEMENT_INPUT16 = "bf16/fp16"
ELEMENT_FP32 = "fp32"
ELEMENT_UE8M0 = "ue8m0"
ELEMENT_PAD = "pad"

#: each field element's size: the inputs' own 16-bit type, and every element format of rtp_ref.fp8.elements but the
#: named 16-bit floats (a field of the inputs' type is ``bf16/fp16``, whichever the writer was given)
_ELEMENT_SIZES = {
    ELEMENT_INPUT16: 2,
    **{name: traits.size for name, traits in ELEMENT_TRAITS.items() if name not in ("bf16", "fp16")},
}


#: every field element name: the fp8 formats, ``bf16/fp16``, ``fp32``, ``ue8m0`` and ``pad``
ELEMENTS: tuple[str, ...] = tuple(_ELEMENT_SIZES)


def element_size(element: str) -> int:
    """Bytes per value of an element: an fp8 format name, ``bf16/fp16``, ``fp32``, ``ue8m0`` or ``pad``."""
    try:
        return _ELEMENT_SIZES[element]
    except KeyError:
        raise RtpRefError(f"unknown field element {element!r}; valid: {', '.join(_ELEMENT_SIZES)}") from None


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
    #: the keys of an MHA cache, or the indexer's k
    KEY = "key"
    #: the values of an MHA cache
    VALUE = "value"


#: what an MLA layout's fields may hold (the MHA and indexer families add KEY and VALUE)
MLA_SOURCES: tuple[Source, ...] = (Source.KV_C, Source.K_PE, Source.SCALE, Source.PAD)


@dataclass(frozen=True)
class TileScale:
    """How the writer computes an inline scale field from the values it covers.

    Scale ``i`` covers values ``[i * tile, (i + 1) * tile)`` of its value field (the last tile may be
    partial): ``s = max(amax / divisor, floor)``, then for ``pow2_ceil`` the next power of two.
    """

    tile: int
    rule: ScaleRule
    divisor: float
    floor: float

    def formula(self) -> str:
        """The rule as a short formula, for tables (e.g. ``2^ceil(log2(max(amax/448, 0.0001)))``)."""
        inner = f"max(amax/{self.divisor:g}, {self.floor:g})"
        return f"2^ceil(log2({inner}))" if self.rule is ScaleRule.POW2_CEIL else inner


@dataclass(frozen=True)
class Field:
    """One field of a layout: ``size`` bytes at byte ``offset`` of its placement's area.

    ``scale_field`` names the scale a value field is divided by (None: stored verbatim);
    ``tile_scale`` says how the writer computes a scale field (None for the external per-tensor scale);
    ``area`` names the cache tensor holding the field where a family has two (the MHA ``key_cache`` and
    ``value_cache``; offsets count within it), "" where it has one.
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

    @property
    def count(self) -> int:
        """Number of values (``size`` / element size)."""
        return self.size // element_size(self.element)

    @property
    def end(self) -> int:
        """First byte after the field within its placement's area."""
        return self.offset + self.size

"""What an MLA layout record is: its fields, its tile rule (the arithmetic contract), its dims.

Torch-free. ``rtp_ref.kv.layout_records`` holds the built-in records and ``rtp_ref.kv.layout_table`` reads
more from a TOML table; ``rtp_ref.kv.layouts.build_layout`` turns a record into a field table for one (R, P).
"""

from __future__ import annotations

from dataclasses import dataclass

from rtp_ref.fp8.rules import ScaleRule
from rtp_ref.kv.fields import Placement, Source
from rtp_ref.kv.non_finite import NonFinitePolicy

#: DeepSeek V3's MLA: kv_lora_rank 512, rope 64
DEFAULT_DIMS = (512, 64)
#: FlashMLA MODEL1: 448 latent values (7 tiles of 64), rope 64
MODEL1_DIMS = (448, 64)
#: a second (R, P) for layouts whose R is free: smaller, and not DeepSeek's, so no width is hard-coded
SMALL_DIMS = (256, 32)
#: a field element standing for the cache's fp8 format (the platform's, or the layout flags')
ELEMENT_FP8 = "fp8"
#: a value field's ``scale`` saying it has none: its fp8 values are the inputs converted as they are (FlashMLA's
#: NVFP4 record stores its rope so), never divided
UNSCALED = "unscaled"


@dataclass(frozen=True)
class FieldRecord:
    """One field of a record: what it holds, where, its element, and how many values.

    ``count``: a number, or the name of a dimension the record's family resolves: ``R`` (kv_lora_rank),
    ``P`` (rope_dim), ``tiles`` (the number of tile scales of R) for MLA; ``HD`` (heads x head size) for MHA;
    ``D`` (head_dim) and ``D/Q`` (its quant blocks) for the indexer.
    ``scale``: the scale field a value field is divided by (fp8 values need one, or ``UNSCALED`` to say they are
    the inputs converted as they are; 16-bit values name none).
    ``area``: the cache tensor holding the field, where a family has two (rtp_ref.kv.fields.Field).
    ``order``: for a scale field, ``(rows, cols)`` when its scales are stored transposed: the natural sequence
    viewed as ``rows x cols`` stored as ``cols x rows``, so scale ``s`` sits at byte ``(s % cols) * rows + s //
    cols`` (FlashMLA's NVFP4 record, (8, 4)); None: scale ``s`` at byte ``s``.
    ``tile_rule``: for a tile-counted scale field, a tile rule of its own in place of the record's (b12x's 368-byte
    record scales its E2M1 nope by an FP4 rule and its fp8 rope by another); None: the record's.
    """

    name: str
    source: Source
    placement: Placement
    element: str
    count: str | int
    scale: str | None = None
    note: str = ""
    area: str = ""
    order: tuple[int, int] | None = None
    tile_rule: TileRule | None = None


@dataclass(frozen=True)
class Fp4Rule:
    """The parts of an FP4 layout's arithmetic contract beyond its tile rule (rtp_ref.fp4, docs/fp8.md "FP4"): how
    the scale is rounded to its element (``rounding``, a ``rtp_ref.fp4.ScaleRounding`` value) and the largest
    quotient (``ceiling``; the smallest is the tile rule's ``floor``), how ``amax / 6`` is formed (``amax_division``:
    an ``AmaxDivision`` value), how a value is divided by its scale (``payload``: a ``PayloadDivision`` value) and
    what a -0.0 quotient becomes (``negative_zero``: a ``NegativeZero`` value). Those three are values, or the
    names of the layout flags holding them (rtp_ref.kv.flags), so that a writer's convention is an alternative the
    suite can name. ``non_finite_tile``: what a tile holding NaN or +-inf stores, one of ``NON_FINITE_TILES``."""

    rounding: str
    ceiling: float
    amax_division: str
    payload: str = "fp4_value_quotient"
    negative_zero: str = "fp4_negative_zero"
    non_finite_tile: str = "undefined"


#: what an FP4 tile holding NaN or +-inf stores: nothing a source defines (the writer refuses it), or its scale
#: element's NaN and every code 0 (sglang's torch reference of V41_FP4: "A NaN element poisons its tile")
NON_FINITE_TILES = ("undefined", "nan_scale_zero_codes")


@dataclass(frozen=True)
class TileRule:
    """How a layout's writer computes a tile scale and applies it (the arithmetic contract).

    ``s = max(amax / divisor, floor)``, for ``pow2_ceil`` then the next power of two; values are stored as
    ``fp8(x / s)``, the quotient correctly rounded in float32, a NaN stored as NaN. ``rule``, ``floor`` and
    ``divisor`` are values, or names of the layout flags holding them (rtp_ref.kv.flags). When a value field's
    count is not a multiple of ``tile``, layout flag ``lora_alignment`` decides: refuse, or a partial last tile.
    ``fp4``: the rest of the contract of a layout whose values are E2M1 (then ``divisor`` is 6, E2M1's largest
    value, and the scale is ``fp4.rounding`` of the quotient clamped to ``[floor, fp4.ceiling]``).
    For fp8 values, ``amax_division`` and ``payload`` say how ``amax / divisor`` and ``x / s`` are formed
    (``rtp_ref.fp4.PayloadDivision`` values): one correctly rounded division (``ieee_div``), or a multiply by the
    divisor's reciprocal rounded to float32 (``reciprocal_mul``; a zero scale then stores every value as 0x00,
    where the division would make NaN of a zero: b12x's rope rule). A floor of 0 means none: an all-zero tile's
    scale is 0.
    """

    tile: int
    rule: ScaleRule | str
    floor: float | str
    divisor: float | str = "fp8_max_divisor"
    fp4: Fp4Rule | None = None
    amax_division: str = "ieee_div"
    payload: str = "ieee_div"


@dataclass(frozen=True)
class LayoutRecord:
    """One MLA layout: its name, field table, tile rule (None: no computed scale), the texts tables show, the
    default (R, P), whether those are the only dims it supports, the (R, P) the suite certifies it at besides the
    default, and ``non_finite``: what its writer makes of NaN, +-inf and an all-zero tile, as its sources state it
    (rtp_ref.kv.non_finite: required of a layout with a tile rule, None for one without)."""

    name: str
    summary: str
    fields: tuple[FieldRecord, ...]
    kv_split: str
    sources: str
    tile_rule: TileRule | None = None
    default_dims: tuple[int, int] = DEFAULT_DIMS
    fixed_dims: bool = False
    extra_certified_dims: tuple[tuple[int, int], ...] = ()
    non_finite: NonFinitePolicy | None = None

    @property
    def certified_dims(self) -> list[tuple[int, int]]:
        """Every (R, P) the suite certifies this layout at: the default first."""
        return [self.default_dims, *self.extra_certified_dims]

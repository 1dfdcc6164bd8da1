"""What an MLA layout record is: its fields, its tile rule (the arithmetic contract), its dims.

Torch-free. ``rtp_ref.kv.layout_records`` holds the built-in records and ``rtp_ref.kv.layout_table`` reads
more from a TOML table; ``rtp_ref.kv.layouts.build_layout`` turns a record into a field table for one (R, P).
"""

from __future__ import annotations

from dataclasses import dataclass

from rtp_ref.fp8.rules import ScaleRule
from rtp_ref.kv.fields import Placement, Source

#: DeepSeek V3's MLA: kv_lora_rank 512, rope 64
DEFAULT_DIMS = (512, 64)
#: FlashMLA MODEL1: 448 latent values (7 tiles of 64), rope 64
MODEL1_DIMS = (448, 64)
#: a second (R, P) for layouts whose R is free: smaller, and not DeepSeek's, so no width is hard-coded
SMALL_DIMS = (256, 32)
#: a field element standing for the cache's fp8 format (the platform's, or the layout flags')
ELEMENT_FP8 = "fp8"


@dataclass(frozen=True)
class FieldRecord:
    """One field of a record: what it holds, where, its element, and how many values.

    ``count``: a number, or the name of a dimension the record's family resolves: ``R`` (kv_lora_rank),
    ``P`` (rope_dim), ``tiles`` (the number of tile scales of R) for MLA; ``HD`` (heads x head size) for MHA;
    ``D`` (head_dim) and ``D/Q`` (its quant blocks) for the indexer.
    ``scale``: the scale field a value field is divided by (fp8 values need one; 16-bit values name none).
    ``area``: the cache tensor holding the field, where a family has two (rtp_ref.kv.fields.Field).
    """

    name: str
    source: Source
    placement: Placement
    element: str
    count: str | int
    scale: str | None = None
    note: str = ""
    area: str = ""


@dataclass(frozen=True)
class TileRule:
    """How a layout's writer computes a tile scale and applies it (the arithmetic contract).

    ``s = max(amax / divisor, floor)``, for ``pow2_ceil`` then the next power of two; values are stored as
    ``fp8(x / s)``, the quotient correctly rounded in float32, a NaN stored as NaN. ``rule``, ``floor`` and
    ``divisor`` are values, or names of the layout flags holding them (rtp_ref.kv.flags). When R is not a
    multiple of ``tile``, layout flag ``lora_alignment`` decides: refuse, or a partial last tile.
    """

    tile: int
    rule: ScaleRule | str
    floor: float | str
    divisor: float | str = "fp8_max_divisor"


@dataclass(frozen=True)
class LayoutRecord:
    """One MLA layout: its name, field table, tile rule (None: no computed scale), the texts tables show, the
    default (R, P), whether those are the only dims it supports, and the (R, P) the suite certifies it at
    besides the default."""

    name: str
    summary: str
    fields: tuple[FieldRecord, ...]
    kv_split: str
    sources: str
    tile_rule: TileRule | None = None
    default_dims: tuple[int, int] = DEFAULT_DIMS
    fixed_dims: bool = False
    extra_certified_dims: tuple[tuple[int, int], ...] = ()

    @property
    def certified_dims(self) -> list[tuple[int, int]]:
        """Every (R, P) the suite certifies this layout at: the default first."""
        return [self.default_dims, *self.extra_certified_dims]

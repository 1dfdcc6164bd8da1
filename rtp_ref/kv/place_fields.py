"""A record's field table placed for one set of dims: every family's layouts get their offsets here.

A record lists its fields in order, each with a symbolic count (``rtp_ref.kv.records.FieldRecord``); given
the counts' values and the cache's fp8 format, each field gets the next free byte of its area and
placement, so offsets are never written by hand and two fields can neither overlap nor leave a gap.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rtp_ref.fp8.formats import Fp8Format
from rtp_ref.kv.fields import Field, Placement, TileScale, field_bytes
from rtp_ref.kv.records import ELEMENT_FP8, UNSCALED, FieldRecord


def place_fields(records: Iterable[FieldRecord], counts: Mapping[str, int], fp8_format: Fp8Format,
                 tile_scales: Mapping[str, TileScale] | None = None) -> tuple[Field, ...]:
    """The fields of ``records`` with elements and sizes resolved (``fp8`` is ``fp8_format``; a symbolic count
    is read from ``counts``), each at the next free offset of its (area, placement) in the records' order;
    external fields (arguments, not cache bytes) at 0. ``tile_scales`` gives the computed scale fields theirs."""
    next_offset: dict[tuple[str, Placement], int] = {}
    placed = []
    for f in records:
        element = fp8_format.name if f.element == ELEMENT_FP8 else f.element
        size = field_bytes(element, counts[f.count] if isinstance(f.count, str) else f.count)
        where = (f.area, f.placement)
        offset = 0 if f.placement is Placement.EXTERNAL else next_offset.get(where, 0)
        unscaled = f.scale == UNSCALED
        placed.append(Field(f.name, f.source, f.placement, offset, size, element,
                            scale_field=None if unscaled else f.scale, tile_scale=(tile_scales or {}).get(f.name),
                            note=f.note, area=f.area, unscaled=unscaled, order=f.order))
        next_offset[where] = offset + size
    return tuple(placed)

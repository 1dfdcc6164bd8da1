"""Readable views of a layout: a JSON-ready dict and a text table (``rtp-ref layouts``, reports)."""

from __future__ import annotations

from typing import Any

from rtp_ref.kv.fields import Field, Placement, TileScale
from rtp_ref.kv.layouts import MlaLayout
from rtp_ref.kv.non_finite import NON_FINITE_CLASSES


def field_as_dict(f: Field) -> dict[str, Any]:
    """One field as plain data."""
    tile = f.tile_scale
    return {
        "name": f.name,
        "source": f.source.value,
        "placement": f.placement.value,
        "offset": f.offset,
        "size": f.size,
        "element": f.element,
        "count": f.count,
        "scale_field": f.scale_field,
        "tile_scale": None
        if tile is None
        else {
            "tile": tile.tile,
            "rule": tile.rule.value,
            "divisor": tile.divisor,
            "floor": tile.floor,
            "formula": tile.formula(),
            "fp4": None if tile.fp4 is None else _fp4_as_dict(tile),
        },
        "note": f.note,
        "area": f.area,
    }


def _fp4_as_dict(tile: TileScale) -> dict[str, Any]:
    """An FP4 tile scale's conventions as plain data (rtp_ref.fp4)."""
    fp4 = tile.fp4
    assert fp4 is not None, "an FP4 tile scale"
    clamp = fp4.scale.clamp
    return {"scale_element": fp4.scale.element.value, "rounding": fp4.scale.rounding.value,
            "amax_division": None if fp4.scale.division is None else fp4.scale.division.value,
            "clamp": None if clamp is None else list(clamp), "payload": fp4.payload.value,
            "negative_zero": fp4.negative_zero.value, "non_finite_tile": tile.non_finite_tile}


def layout_as_dict(layout: MlaLayout, block_size: int) -> dict[str, Any]:
    """A layout's sizes, statements and fields as plain data (JSON-ready: finite numbers only)."""
    return {
        "name": layout.name,
        "kv_lora_rank": layout.kv_lora_rank,
        "rope_dim": layout.rope_dim,
        "bytes_per_token": layout.bytes_per_token,
        "bytes_per_block": layout.bytes_per_block(block_size),
        "block_size": block_size,
        "data_bytes_per_token": layout.data_bytes_per_token,
        "trailing_bytes_per_token": layout.trailing_bytes_per_token,
        "k_bytes_per_token": layout.k_bytes_per_token,
        "v_bytes_per_token": layout.v_bytes_per_token,
        "scale_bytes_per_token": layout.scale_bytes_per_token,
        "pad_bytes_per_token": layout.pad_bytes_per_token,
        "k_plus_v_equals_block": layout.k_plus_v_equals_block,
        "cache_dtype": "input" if layout.stores_input_dtype else "uint8",
        "cache_entry": layout.cache_entry,
        "summary": layout.summary,
        "kv_split": layout.kv_split,
        "sources": layout.sources,
        "non_finite": None if layout.non_finite is None else {**{c: layout.non_finite.states(c) for c in
                                                                 NON_FINITE_CLASSES},
                                                              "source": layout.non_finite.source},
        "fields": [field_as_dict(f) for f in layout.fields],
        "page_map": [{"field": p.field.name, "start": p.start, "per_token": p.per_token, "size": p.field.size}
                     for p in layout.page_map(block_size)],
    }


def _field_note(f: Field) -> str:
    parts = [f.note] if f.note else []
    fp4 = f.tile_scale.fp4 if f.tile_scale is not None else None
    if f.tile_scale is not None:
        parts.insert(0, f"{f.count} x {f.tile_scale.formula()}, one per {f.tile_scale.tile} values")
    if fp4 is not None:
        quotient = "x / s" if fp4.payload.value == "ieee_div" else "x * (1/s)"
        zero = "0x8" if fp4.negative_zero.value == "keep" else "0x0"
        parts.insert(1, f"values e2m1({quotient}), -0.0 as {zero}")
    elif f.tile_scale is None and f.scale_field is not None:
        parts.insert(0, f"divided by {f.scale_field}")
    return "; ".join(parts)


def field_table(fields: tuple[Field, ...]) -> list[str]:
    """A header and one row per field: offset, size, element, placement, the cache tensor where a family has
    two, name and notes (every family's tables print their fields with it)."""
    areas = any(f.area for f in fields)

    def row(offset: object, size: object, element: str, placement: str, area: str, name: str, note: str) -> str:
        cache = f"{area:<12}  " if areas else ""
        return f"  {offset:>6} {size:>5}  {element:<9}  {placement:<14}  {cache}{name:<10}  {note}".rstrip()

    return [row("offset", "size", "element", "placement", "cache", "field", "notes"),
            *(row(f.offset, f.size, f.element, f.placement.value, f.area, f.name, _field_note(f)) for f in fields)]


def page_map_lines(layout: MlaLayout, block_size: int) -> list[str]:
    """Where each cache field of token t sits in a block, as text lines (``MlaLayout.page_map``); none for a layout
    whose block is just one row per token."""
    if all(f.placement in (Placement.PER_TOKEN, Placement.EXTERNAL) for f in layout.fields):
        return []
    return [f"  in a block of B = {block_size} tokens, token t's bytes of each field start at:",
            *(f"    {p.field.name:<10}  {p.start} + {p.per_token} t  ({p.field.size} bytes)"
              for p in layout.page_map(block_size))]


def layout_table(layout: MlaLayout, block_size: int) -> list[str]:
    """The layout as text lines: a heading, its statements, one row per field, and the block's byte map where a
    block is more than one row per token."""
    return [
        f"{layout.name}  R={layout.kv_lora_rank} P={layout.rope_dim}: {layout.bytes_per_token} B/token, "
        f"{layout.bytes_per_block(block_size)} B/block of {block_size} tokens",
        f"  {layout.summary}",
        f"  k {layout.k_bytes_per_token} + v {layout.v_bytes_per_token} "
        f"+ scale {layout.scale_bytes_per_token} "
        f"+ pad {layout.pad_bytes_per_token} B/token; {layout.kv_split}",
        f"  sources: {layout.sources}",
        *([f"  non-finite: {layout.non_finite.text}"] if layout.non_finite else []),
        *field_table(layout.fields),
        *page_map_lines(layout, block_size),
    ]

"""The MHA paged and indexer layouts as printable tables and JSON-ready dicts (``rtp-ref layouts``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.formats import FormatSource
from rtp_ref.kv.describe import field_as_dict, field_table
from rtp_ref.kv.fields import ELEMENT_E2M1, Source
from rtp_ref.kv.flags import LayoutFlags
from rtp_ref.kv.indexer import FP8_SCALE_FORMATS, IndexerLayout, indexer_layout_for, quant_block_for
from rtp_ref.kv.mha_indexer_records import INDEXER_VARIANTS, MHA_VARIANTS, VariantRecord, variant_record
from rtp_ref.kv.mha_paged import MhaPagedLayout
from rtp_ref.kv.nvfp4_page import ScaleOrder


def _element(layout: MhaPagedLayout) -> str:
    if layout.fp4 is not None:
        return ELEMENT_E2M1
    return "bf16/fp16" if layout.element_format is None else layout.element_format.name


def _page(layout: MhaPagedLayout) -> dict[str, Any]:
    """An ``nvfp4`` layout's page: what a block of each side holds, in which order (rtp_ref.kv.nvfp4_page)."""
    if layout.fp4 is None:
        return {}
    return {"page": "per block and side: the E2M1 codes of every (token, head), D/2 bytes each, then their e4m3 "
                    "scales, D/16 each, rows in the cache's order (NHD: t * H + h; HND: h * T + t)",
            "k_scale_order": ScaleOrder.LINEAR.value, "v_scale_order": layout.v_scale_order.value}


def mha_as_dict(layouts: list[MhaPagedLayout], heads_total: int, tp_size: int, block_size: int) -> dict[str, Any]:
    """The MHA family for one head configuration: every cache dtype's element, bytes and field table."""
    first = layouts[0]
    return {
        "op": "reshape_and_cache_flash",
        "num_kv_heads": heads_total,
        "tp_size": tp_size,
        "local_kv_heads": first.num_kv_heads,
        "head_size": first.head_size,
        "block_size": block_size,
        "scales": "k_scale and v_scale outside the cache: shape [1] (per tensor) or [local_kv_heads] (per head)",
        "orders": ["NHD", "HND"],
        "layouts": [
            {
                "kv_cache_dtype": layout.kv_cache_dtype,
                "element": _element(layout),
                "k_bytes_per_token": layout.k_bytes_per_token(),
                "v_bytes_per_token": layout.v_bytes_per_token(),
                "kv_bytes_per_block": block_size * (layout.k_bytes_per_token() + layout.v_bytes_per_token()),
                "summary": record.summary,
                "sources": record.sources,
                "fields": [field_as_dict(f) for f in layout.fields],
                **_page(layout),
            }
            for layout, record in ((lay, variant_record(MHA_VARIANTS, lay.kv_cache_dtype, "kv_cache_dtype"))
                                   for lay in layouts)
        ],
    }


def mha_table(layouts: list[MhaPagedLayout], heads_total: int, tp_size: int, block_size: int) -> list[str]:
    """Lines for ``mha_as_dict``'s view: a row of bytes per cache dtype, then each one's field table."""
    view = mha_as_dict(layouts, heads_total, tp_size, block_size)
    lines = [
        f"mha paged ({view['op']}): {view['local_kv_heads']} KV heads per rank (of {view['num_kv_heads']}, "
        f"tp {view['tp_size']}) x head size {view['head_size']}; caches [blocks, {view['block_size']}, heads, "
        "dim] in NHD, or HND through strides",
        f"  {'kv_cache_dtype':<16}{'element':<12}{'K bytes/token':>14}{'V bytes/token':>14}{'K+V bytes/block':>17}",
    ]
    for row in view["layouts"]:
        lines.append(f"  {row['kv_cache_dtype']:<16}{row['element']:<12}{row['k_bytes_per_token']:>14}"
                     f"{row['v_bytes_per_token']:>14}{row['kv_bytes_per_block']:>17}")
    lines.append(f"  scales: {view['scales']}")
    for row, layout in zip(view["layouts"], layouts, strict=True):
        lines += ["", f"  {row['kv_cache_dtype']}: {row['summary']}", f"  sources: {row['sources']}"]
        if "page" in row:
            lines.append(f"  page: {row['page']}; K scales {row['k_scale_order']}, V scales {row['v_scale_order']} "
                         "(the table lists offsets as NHD with linear scales)")
        lines += field_table(layout.fields)
    return lines


#: an indexer variant's layout, or why it cannot be built for the dims asked for
VariantLayout = IndexerLayout | RtpRefError


def indexer_layouts(source: FormatSource, flags: LayoutFlags, head_dim: int,
                    quant_block_size: int | None) -> dict[str, VariantLayout]:
    """Every indexer variant's layout for ``head_dim``: the fp8 variants' in quant blocks of ``quant_block_size``
    (``DEFAULT_QUANT_BLOCK`` when None), a variant with its own quant block (``mxfp4``) in that; the error where the
    dims do not fit a variant (RtpRefError when they fit none of the fp8 ones)."""
    out: dict[str, VariantLayout] = {}
    for record in INDEXER_VARIANTS:
        quant = record.quant_block or quant_block_for(record.name, quant_block_size)
        try:
            out[record.name] = indexer_layout_for(source, flags, head_dim, quant, scale_fmt=record.name)
        except RtpRefError as exc:
            if record.name in FP8_SCALE_FORMATS:
                raise
            out[record.name] = exc
    return out


def _indexer_bytes(layout: IndexerLayout, block_size: int) -> dict[str, Any]:
    """One indexer layout's sizes, places and field table."""
    scale = layout.field(Source.SCALE)
    per_scale = scale.size // layout.scales_per_token
    return {
        "quant_block_size": layout.quant_block_size,
        "element": layout.field(Source.KEY).element,
        "scale_element": scale.element,
        "bytes_per_token": layout.bytes_per_token,
        "data_bytes_per_token": layout.data_bytes_per_token,
        "trailing_bytes_per_token": layout.trailing_bytes_per_token,
        "value_bytes_per_block": block_size * layout.data_bytes_per_token,
        "scale_bytes_per_block": block_size * layout.trailing_bytes_per_token,
        "scale_offset": f"block_size * {layout.data_bytes_per_token} + t * {layout.trailing_bytes_per_token}"
                        f" + j{f' * {per_scale}' if per_scale != 1 else ''}",
        "fields": [field_as_dict(f) for f in layout.fields],
    }


def indexer_as_dict(layouts: Mapping[str, VariantLayout], block_size: int) -> dict[str, Any]:
    """The indexer layouts (``indexer_layouts``): the fp8 variants' bytes per token, where a block's values and
    scales sit, and its field table, then every variant with its own (``mxfp4``: E2M1 and ue8m0, 68 bytes a token
    at head_dim 128)."""
    first = layouts[FP8_SCALE_FORMATS[0]]
    assert isinstance(first, IndexerLayout), "indexer_layouts raises where the fp8 variants' layout cannot be built"

    def variant(record: VariantRecord) -> dict[str, Any]:
        layout = layouts[record.name]
        shown: dict[str, Any] = {"scale_fmt": record.name, "summary": record.summary, "scales": record.scales,
                                 "sources": record.sources}
        if record.non_finite:
            shown["non_finite"] = record.non_finite
        if isinstance(layout, RtpRefError):
            return {**shown, "error": str(layout)}
        return {**shown, **_indexer_bytes(layout, block_size)}

    return {
        "op": "indexer_k_quant_and_cache",
        "head_dim": first.head_dim,
        **_indexer_bytes(first, block_size),
        "element": first.element_format.name,
        "scale_divisor": first.scale_divisor,
        "scale_formats": [r.name for r in INDEXER_VARIANTS],
        "variants": [variant(r) for r in INDEXER_VARIANTS],
        "block_size": block_size,
    }


def _bytes_line(view: dict[str, Any], block_size: int) -> str:
    return (f"  bytes per token: {view['bytes_per_token']}; a block of {block_size}: {view['value_bytes_per_block']} "
            f"value bytes (token t at t * {view['data_bytes_per_token']}), then {view['scale_bytes_per_block']} "
            f"scale bytes (token t's j-th at {view['scale_offset']})")


def indexer_table(layouts: Mapping[str, VariantLayout], block_size: int) -> list[str]:
    """Lines for ``indexer_as_dict``'s view: the fp8 variants' layout and field table, then each other variant's."""
    view = indexer_as_dict(layouts, block_size)
    first = layouts[FP8_SCALE_FORMATS[0]]
    assert isinstance(first, IndexerLayout)
    lines = [
        f"indexer ({view['op']}): head_dim {view['head_dim']}, one fp32 scale per {view['quant_block_size']} "
        f"values (max(amax, 1e-4) / {view['scale_divisor']:g}; ue8m0: the next power of two), {view['element']}",
        _bytes_line(view, block_size),
        *field_table(first.fields),
    ]
    for row in view["variants"]:
        layout = layouts[row["scale_fmt"]]
        if row["scale_fmt"] in FP8_SCALE_FORMATS:
            continue
        lines += ["", f"  {row['scale_fmt']}: {row['summary']}"]
        if isinstance(layout, RtpRefError):
            lines.append(f"  not available with these arguments: {layout}")
            continue
        lines += [f"  scales: {row['scales']}", _bytes_line(row, block_size), f"  non-finite: {row['non_finite']}",
                  f"  sources: {row['sources']}", *field_table(layout.fields)]
    return lines

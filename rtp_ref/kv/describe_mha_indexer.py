"""The MHA paged and indexer layouts as printable tables and JSON-ready dicts (``rtp-ref layouts``)."""

from __future__ import annotations

from typing import Any

from rtp_ref.kv.describe import field_as_dict, field_table
from rtp_ref.kv.indexer import IndexerLayout
from rtp_ref.kv.mha_indexer_records import INDEXER_VARIANTS, MHA_VARIANTS, variant_record
from rtp_ref.kv.mha_paged import MhaPagedLayout


def _element(layout: MhaPagedLayout) -> str:
    return "bf16/fp16" if layout.element_format is None else layout.element_format.name


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
        lines += ["", f"  {row['kv_cache_dtype']}: {row['summary']}", f"  sources: {row['sources']}",
                  *field_table(layout.fields)]
    return lines


def indexer_as_dict(layout: IndexerLayout, block_size: int) -> dict[str, Any]:
    """The indexer layout: bytes per token, where a block's values and scales sit, and its field table."""
    return {
        "op": "indexer_k_quant_and_cache",
        "head_dim": layout.head_dim,
        "quant_block_size": layout.quant_block_size,
        "element": layout.element_format.name,
        "scale_divisor": layout.scale_divisor,
        "scale_formats": [r.name for r in INDEXER_VARIANTS],
        "variants": [{"scale_fmt": r.name, "summary": r.summary, "scales": r.scales, "sources": r.sources}
                     for r in INDEXER_VARIANTS],
        "bytes_per_token": layout.bytes_per_token,
        "data_bytes_per_token": layout.data_bytes_per_token,
        "trailing_bytes_per_token": layout.trailing_bytes_per_token,
        "block_size": block_size,
        "value_bytes_per_block": block_size * layout.data_bytes_per_token,
        "scale_bytes_per_block": block_size * layout.trailing_bytes_per_token,
        "scale_offset": f"block_size * {layout.data_bytes_per_token} + t * {layout.trailing_bytes_per_token} + j * 4",
        "fields": [field_as_dict(f) for f in layout.fields],
    }


def indexer_table(layout: IndexerLayout, block_size: int) -> list[str]:
    """Lines for ``indexer_as_dict``'s view, then the field table."""
    view = indexer_as_dict(layout, block_size)
    return [
        f"indexer ({view['op']}): head_dim {view['head_dim']}, one fp32 scale per {view['quant_block_size']} "
        f"values (max(amax, 1e-4) / {view['scale_divisor']:g}; ue8m0: the next power of two), {view['element']}",
        f"  bytes per token: {view['bytes_per_token']}; a block of {view['block_size']}: "
        f"{view['value_bytes_per_block']} value bytes (token t at t * {view['data_bytes_per_token']}), then "
        f"{view['scale_bytes_per_block']} scale bytes (token t's j-th at {view['scale_offset']})",
        *field_table(layout.fields),
    ]

"""KV-cache reference: rtp-llm's KV-cache specs, MLA layouts as field tables, layout flags, the reference
cache writer and reader, and golden vectors. docs/layouts.md shows every layout's byte map.

Typical use (what a kernel test or the conformance suite does)::

    layout = layout_for_platform(platform, "fp8_ds_mla", overrides={"lora_alignment": "round_up"})
    validate_write_args(layout, kv_c, k_pe, kv_cache, slot_mapping, scale)  # before touching memory
    reference_write(layout, kv_c, k_pe, expected_cache, slot_mapping, scale)
    kv_c_read, k_pe_read = read_slots(layout, kv_cache, slots, scale, kv_c.dtype)

The public names are imported on first use (PEP 562 ``__getattr__``): the platform loader imports
``rtp_ref.kv.flags``, which is torch-free, and must not pay for the torch-based writer and reader that
an eager import of every submodule here would pull in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rtp_ref._lazy import lazy_exports

if TYPE_CHECKING:
    from rtp_ref.kv.cache import (
        concat_and_cache_mla,
        gather_entries,
        read_slots,
        reference_write,
        scatter_entries,
    )
    from rtp_ref.kv.describe import layout_as_dict, layout_table
    from rtp_ref.kv.dtypes import KvDtype, kv_dtype
    from rtp_ref.kv.entries import decode_entries, encode_entries, tile_scales
    from rtp_ref.kv.fields import Field, Placement, Source, TileScale
    from rtp_ref.kv.flags import (
        FLAG_SPECS,
        FlagSpec,
        LayoutFlags,
        LoraAlignment,
        apply_overrides,
        check_flag_table,
        parse_overrides,
        resolve_flags,
    )
    from rtp_ref.kv.golden import GoldenCase, make_golden, safetensors_bytes, write_golden
    from rtp_ref.kv.layout_records import MLA_LAYOUT_NAMES, LayoutRecord
    from rtp_ref.kv.layouts import MlaLayout, build_layout, default_dims, layout_for_platform
    from rtp_ref.kv.specs import (
        KvPartition,
        MhaSpec,
        MlaSpec,
        effective_seq_size_per_block,
        mla_spec,
        resolve_mla_spec_layout,
        resolve_sparse_fp8_layout,
        split_kv_partition_bytes,
    )
    from rtp_ref.kv.validate import cache_capacity, validate_cache, validate_read_args, validate_write_args

#: Submodule -> the public names it defines (what the ``TYPE_CHECKING`` imports above state for mypy).
_EXPORTS: dict[str, tuple[str, ...]] = {
    "cache": ("concat_and_cache_mla", "gather_entries", "read_slots", "reference_write", "scatter_entries"),
    "describe": ("layout_as_dict", "layout_table"),
    "dtypes": ("KvDtype", "kv_dtype"),
    "entries": ("decode_entries", "encode_entries", "tile_scales"),
    "fields": ("Field", "Placement", "Source", "TileScale"),
    "flags": (
        "FLAG_SPECS",
        "FlagSpec",
        "LayoutFlags",
        "LoraAlignment",
        "apply_overrides",
        "check_flag_table",
        "parse_overrides",
        "resolve_flags",
    ),
    "golden": ("GoldenCase", "make_golden", "safetensors_bytes", "write_golden"),
    "layout_records": ("MLA_LAYOUT_NAMES", "LayoutRecord"),
    "layouts": ("MlaLayout", "build_layout", "default_dims", "layout_for_platform"),
    "specs": (
        "KvPartition",
        "MhaSpec",
        "MlaSpec",
        "effective_seq_size_per_block",
        "mla_spec",
        "resolve_mla_spec_layout",
        "resolve_sparse_fp8_layout",
        "split_kv_partition_bytes",
    ),
    "validate": ("cache_capacity", "validate_cache", "validate_read_args", "validate_write_args"),
}

__all__ = [
    "FLAG_SPECS",
    "MLA_LAYOUT_NAMES",
    "Field",
    "FlagSpec",
    "GoldenCase",
    "KvDtype",
    "KvPartition",
    "LayoutFlags",
    "LayoutRecord",
    "LoraAlignment",
    "MhaSpec",
    "MlaLayout",
    "MlaSpec",
    "Placement",
    "Source",
    "TileScale",
    "apply_overrides",
    "build_layout",
    "cache_capacity",
    "check_flag_table",
    "concat_and_cache_mla",
    "decode_entries",
    "default_dims",
    "effective_seq_size_per_block",
    "encode_entries",
    "gather_entries",
    "kv_dtype",
    "layout_as_dict",
    "layout_for_platform",
    "layout_table",
    "make_golden",
    "mla_spec",
    "parse_overrides",
    "read_slots",
    "reference_write",
    "resolve_flags",
    "resolve_mla_spec_layout",
    "resolve_sparse_fp8_layout",
    "safetensors_bytes",
    "scatter_entries",
    "split_kv_partition_bytes",
    "tile_scales",
    "validate_cache",
    "validate_read_args",
    "validate_write_args",
    "write_golden",
]


__getattr__ = lazy_exports(__name__, globals(), _EXPORTS)

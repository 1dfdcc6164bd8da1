"""Each variant of the MHA paged and DeepSeek indexer caches as one record: what its values are stored as,
where its scales live and how they are computed. The one list of each op's variants.

Torch-free. The shapes of these caches are fixed by their ops (K and V caches of ``[blocks, rows, heads,
dim]``; the indexer's values then block-trailing scales), so a record says what a variant changes: its
element (``bf16/fp16``: the inputs' own bits; ``fp8``: the cache's fp8 format, the platform's unless the
layout flags set another; or a named fp8 format) and, for the indexer, the rule turning a slice's amax into
its scale. ``rtp_ref.kv.mha_paged.mha_layout`` and ``rtp_ref.kv.indexer.slice_scales`` read them.
"""

from __future__ import annotations

from dataclasses import dataclass

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.rules import ScaleRule
from rtp_ref.kv.fields import ELEMENT_INPUT16
from rtp_ref.kv.records import ELEMENT_FP8


@dataclass(frozen=True)
class VariantRecord:
    """One variant of a family's cache: its name (the op's variant argument), element, scales, and rule (the
    indexer's scale rule; None where the scales are the caller's arguments)."""

    family: str
    name: str
    element: str
    scales: str
    summary: str
    sources: str
    rule: ScaleRule | None = None


_MHA_SCALES = "k_scale and v_scale arguments, each [1] (per tensor) or [H] (per head); values stored as fp8(x / s)"
_INDEXER_SCALES = "one fp32 per quant_block_size values, block-trailing; max(amax, 1e-4) / divisor"

MHA_VARIANTS: tuple[VariantRecord, ...] = (
    VariantRecord("mha", "auto", ELEMENT_INPUT16, "none", "K and V in the inputs' own 16-bit type, bits copied",
                  "vLLM reshape_and_cache_flash, kv_cache_dtype 'auto'"),
    VariantRecord("mha", "fp8", ELEMENT_FP8, _MHA_SCALES, "K and V in the cache's fp8 e4m3 (e4m3fnuz on gfx942)",
                  "vLLM reshape_and_cache_flash, kv_cache_dtype 'fp8' / 'fp8_e4m3' (scaled_convert)"),
    VariantRecord("mha", "fp8_e5m2", "e5m2", _MHA_SCALES, "K and V in OCP e5m2",
                  "vLLM reshape_and_cache_flash, kv_cache_dtype 'fp8_e5m2'"),
)
INDEXER_VARIANTS: tuple[VariantRecord, ...] = (
    VariantRecord("indexer", "none", ELEMENT_FP8, _INDEXER_SCALES, "fp8 values, fp32 slice scales as computed",
                  "vLLM indexer_k_quant_and_cache_kernel, scale_fmt none", ScaleRule.AMAX_DIV),
    VariantRecord("indexer", "ue8m0", ELEMENT_FP8, _INDEXER_SCALES + ", raised to the next power of two",
                  "fp8 values, power-of-two fp32 slice scales",
                  "vLLM indexer_k_quant_and_cache_kernel, scale_fmt ue8m0 (DeepSeek V3.2)", ScaleRule.POW2_CEIL),
)


def variant_record(records: tuple[VariantRecord, ...], name: str, argument: str) -> VariantRecord:
    """The record called ``name`` among ``records``; another name raises RtpRefError naming ``argument``."""
    for record in records:
        if record.name == name:
            return record
    raise RtpRefError(f"{argument} {name!r}; valid: {', '.join(r.name for r in records)}")

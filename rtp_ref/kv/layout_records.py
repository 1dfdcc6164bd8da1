"""Every MLA layout as one declarative record: its fields, its scale arithmetic, its dims. The one list of
layout names.

Torch-free (rtp_ref.platform reads the names to validate tables). A record declares its field table before
any dims are known: each field's element (``fp8`` is the cache's fp8 format) and count (``R``, ``P``,
``tiles`` or a number) are resolved by ``rtp_ref.kv.layouts.build_layout`` for one (R, P), the platform's
fp8 format and the layout flags; offsets follow from the order of the fields. A record's ``TileRule`` is
its arithmetic contract: the tile, how the amax becomes a scale (rule, divisor, floor: a value, or the
layout flag that holds it), and the quotient ``x / s`` correctly rounded in float32, NaN kept.

A new MLA layout is one more record: here, or in a TOML table named by ``$RTP_REF_LAYOUTS``
(``rtp_ref.kv.layout_table``), which every rtp-ref process started with it reads.

A record with a page-segment field (``Placement.PAGE_SEGMENT``) is *described*, not certified: its byte map, the
reference writer and reader, ``rtp-ref layouts`` and a platform's ``[reader] reads`` take it, but no op certifies it
(the built-in kernels and the conformance cases address a block as per-token rows and one trailing area), so it is
in ``DESCRIBED_LAYOUT_NAMES`` and not in ``MLA_LAYOUT_NAMES``.
"""

from __future__ import annotations

import os

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.rules import ScaleRule
from rtp_ref.kv.fields import (
    ELEMENT_E2M1,
    ELEMENT_FP32,
    ELEMENT_INPUT16,
    ELEMENT_PAD,
    ELEMENT_UE8M0,
    Placement,
    Source,
)
from rtp_ref.kv.layout_table import load_layout_table
from rtp_ref.kv.non_finite import UNDEFINED, NonFinitePolicy
from rtp_ref.kv.records import (
    DEFAULT_DIMS as DEFAULT_DIMS,
)
from rtp_ref.kv.records import (
    ELEMENT_FP8 as ELEMENT_FP8,
)
from rtp_ref.kv.records import (
    MODEL1_DIMS as MODEL1_DIMS,
)
from rtp_ref.kv.records import (
    SMALL_DIMS as SMALL_DIMS,
)
from rtp_ref.kv.records import (
    UNSCALED as UNSCALED,
)
from rtp_ref.kv.records import (
    FieldRecord as FieldRecord,
)
from rtp_ref.kv.records import (
    Fp4Rule as Fp4Rule,
)
from rtp_ref.kv.records import (
    LayoutRecord as LayoutRecord,
)
from rtp_ref.kv.records import (
    TileRule as TileRule,
)

#: the environment variable naming a TOML table of more layout records
LAYOUTS_ENV = "RTP_REF_LAYOUTS"


def _values(name: str, source: Source, element: str, count: str, scale: str | None = None) -> FieldRecord:
    return FieldRecord(name, source, Placement.PER_TOKEN, element, count, scale)


#: the external per-tensor scale of the fp8 and fp8_rocm_compact layouts
_PER_TENSOR_SCALE = FieldRecord("scale", Source.SCALE, Placement.EXTERNAL, ELEMENT_FP32, 1,
                                note="the `scale` argument: one float32 for the whole cache, shared by nope and rope")
_PER_TENSOR_FP8 = (_values("nope", Source.KV_C, ELEMENT_FP8, "R", "scale"),
                   _values("rope", Source.K_PE, ELEMENT_FP8, "P", "scale"), _PER_TENSOR_SCALE)


def _v41_fields(element: str, scale_element: str, tile: int) -> tuple[FieldRecord, ...]:
    """DeepSeek V4.1's token: its 448 nope then 64 rope values, all quantized in tiles of ``tile``, in the token's
    data row; its tile scales, the nope's then the rope's (one run of 512 / tile), in the token's scale row after
    the block's data rows (sglang's KVLayout: "a page block stores page_size data rows followed by page_size scale
    rows"). 448 is a whole number of tiles, so no tile holds both nope and rope values."""
    def scale(name: str, covers: str) -> FieldRecord:
        return FieldRecord(name, Source.SCALE, Placement.BLOCK_TRAILING, scale_element, "tiles",
                           note=f"scale i covers {covers} values [{tile}i, {tile}(i+1))")

    return (_values("nope", Source.KV_C, element, "R", "nope_scale"),
            _values("rope", Source.K_PE, element, "P", "rope_scale"),
            scale("nope_scale", "nope"), scale("rope_scale", "rope"))


#: sglang's V4.1 cache layouts and their torch references (sgl-project/sglang PR #39123; vLLM PR #56893 writes V41)
_V41_SOURCES = ("sglang PR #39123: python/sglang/kernels/ops/attention/dsv4/kv_layout.py@0f23f19981c4 (KVLayout V41 "
                "and V41_FP4: data bytes, scale bytes, tile), kernels/ops/attention/dsv4/torch_quant.py@5158244876e6 "
                "(quantize_k_cache_v41), test/kernels/deepseek_v4/dsv41_kv_quant_reference.py@2a4b881b3ca7 "
                "(quantize_k_cache_v41_fp4); FlashMLA (vllm-project) flash_mla/flash_mla_interface.py@02137a43fbd0 "
                "(528 and 288 B per token, data rows then scale rows) and tests/quant.py@02137a43fbd0; vLLM PR #56893 "
                "(V41 on SM100)")

#: FlashMLA's NVFP4 sparse MLA record with fp8 rope (vllm-project/FlashMLA PR #18) and vLLM's writer of it (PR #51724)
_NVFP4_MLA_SOURCES = ("vllm-project/FlashMLA PR #18: csrc/sm100/decode/head64/config.h@6bc49418c5ea (352 B per token, "
                      "nvfp4_sf_byte(s) = 8 * (s & 3) + (s >> 2)) and tests/quant.py@6bc49418c5ea (the quantizer: "
                      "amax / 6 floored at 2^-9, e4m3 rounded to nearest even then one code up where below the "
                      "target, x / sf, the rope cast to e4m3); tests/test_nvfp4_quant.py@29b0d03c6496; vLLM PR "
                      "#51724: csrc/libtorch_stable/nvfp4_ds_mla_cache_kernels.cu@03b6016490cc (kv_cache_dtype "
                      "'nvfp4_fp8_ds_mla'; it multiplies by 1.0f / sf, fp4_value_quotient=reciprocal_mul)")

#: the 432-byte record local-inference-lab/vllm names ``nvfp4_ds_mla`` (b12x PR #35 gives the same name 368 bytes,
#: with an fp8 rope: the same name, other bytes)
_NVFP4_DS_MLA_SOURCES = ("local-inference-lab/vllm PR #82 (merged 2026-07-07), "
                         "csrc/libtorch_stable/nvfp4_kv_cache_kernels.cu@42d67f7630d8 "
                         "(concat_and_cache_nvfp4_mla_kernel, kv_cache_dtype 'nvfp4_ds_mla', for B12X_MLA_SPARSE on "
                         "SM120: [0,256) E2M1, [256,288) e4m3 scales, [288,304) zeros, [304,432) bf16 rope; "
                         "cvt_warp_fp16_to_fp4 with SFScaleVal 1.0: e4m3(amax * (1/6)) with no floor, "
                         "x * (1 / sf), 0 as the reciprocal of a zero scale)")

_NVFP4_FP8_ROPE_SOURCES = ("local-inference-lab/b12x PR #35 (merged 2026-07-17), "
                           "b12x/attention/_shared/mla/kv_cache.py@17f797fcff7d (ConcatAndCacheNvfp4MlaFp8RopeKernel, "
                           "KV_FP8_ROPE=1: [0,256) E2M1 and [256,288) e4m3 scales as the 432-byte record's, [288,292) "
                           "an fp32 rope scale rope_amax * f32(1/448), [292,304) zeros, [304,368) 64 e4m3 rope values "
                           "cvt.rn.satfinite(v * rcp.approx.ftz(rope_scale)), all 0 where the scale is 0)")
#: the forks' NVFP4 nope (local-inference-lab/vllm's 432-byte record, b12x's 368-byte one: the same bytes): 512 E2M1
#: codes, then 32 e4m3 scales in tile order, e4m3(amax * (1/6)) with no floor, codes x * (1/sf)
_FORK_NVFP4_NOPE = (_values("nope", Source.KV_C, ELEMENT_E2M1, "R", "nope_scale"),
                    FieldRecord("nope_scale", Source.SCALE, Placement.PER_TOKEN, "e4m3fn", "tiles",
                                note="scale i covers nope values [16i, 16(i+1)); 0x00 where amax * (1/6) rounds to 0"))
_FORK_NVFP4_RULE = TileRule(16, ScaleRule.AMAX_DIV, 0.0, 6.0,
                            fp4=Fp4Rule("rne", 448.0, "mul_one_sixth", payload="reciprocal_mul"))
#: b12x's fp8 rope: one fp32 scale over the 64 values, amax * float32(1/448), no floor, values times its reciprocal
#: (the writer's rcp.approx.ftz is not correctly rounded; the contract states the correctly rounded reciprocal)
_B12X_ROPE_RULE = TileRule(64, ScaleRule.AMAX_DIV, 0.0, 448.0, amax_division="reciprocal_mul",
                           payload="reciprocal_mul")

BUILTIN_LAYOUTS: tuple[LayoutRecord, ...] = (
    LayoutRecord(
        "auto", "kv_c then k_pe in the inputs' own 16-bit type; no scale",
        (_values("nope", Source.KV_C, ELEMENT_INPUT16, "R"), _values("rope", Source.K_PE, ELEMENT_INPUT16, "P")),
        "k + v == block: the entry is exactly the nope then the rope values, nothing else",
        "vLLM and rtp-llm concat_and_cache_mla with kv_cache_dtype 'auto'",
        extra_certified_dims=(SMALL_DIMS,)),
    LayoutRecord(
        "fp8", "nope and rope both quantized to fp8 with one external per-tensor scale", _PER_TENSOR_FP8,
        "k + v == block: the scale is the external per-tensor `scale` argument, so the block holds only k and v",
        "vLLM concat_and_cache_mla kv_cache_dtype 'fp8'/'fp8_e4m3' (scaled_convert: x / scale)",
        extra_certified_dims=(SMALL_DIMS,)),
    LayoutRecord(
        "fp8_ds_mla", "nope fp8 in tiles of 128, one fp32 scale per tile inline, rope 16-bit copied bit-exact",
        (_values("nope", Source.KV_C, ELEMENT_FP8, "R", "nope_scale"),
         FieldRecord("nope_scale", Source.SCALE, Placement.PER_TOKEN, ELEMENT_FP32, "tiles",
                     note="scale i covers nope values [128i, 128(i+1))"),
         _values("rope", Source.K_PE, ELEMENT_INPUT16, "P")),
        "k + v != block: the inline fp32 tile scales are part of the block but of neither k nor v "
        "(rtp-llm's spec reports k = R and v = P elements, 576 for 656-byte blocks)",
        "vLLM concat_and_cache_ds_mla_kernel; FlashMLA tests/quant.py (V32_FP8Sparse); rtp-llm MLAKVCacheSpec.h",
        tile_rule=TileRule(128, "ds_mla_scale_rule", "ds_mla_scale_floor"),
        non_finite=NonFinitePolicy(
            UNDEFINED, UNDEFINED,
            "scale = ds_mla_scale_floor (under pow2_ceil the power of two at or above it), every value 0",
            "neither vLLM's concat_and_cache_ds_mla_kernel nor FlashMLA tests/quant.py (V32) states what a NaN or inf "
            "in a tile stores; the floor is the ds_mla_scale_floor flag (FLT_MIN in vLLM, 1e-4 in FlashMLA)")),
    LayoutRecord(
        "fp8_model1_mla", "per block: each token's nope fp8 (tiles of 64) and 16-bit rope, then every token's "
        "ue8m0 tile scales + 1 pad byte after the block's data",
        (_values("nope", Source.KV_C, ELEMENT_FP8, "R", "nope_scale"),
         _values("rope", Source.K_PE, ELEMENT_INPUT16, "P"),
         FieldRecord("nope_scale", Source.SCALE, Placement.BLOCK_TRAILING, ELEMENT_UE8M0, "tiles",
                     note="scale i covers nope values [64i, 64(i+1))"),
         FieldRecord("pad", Source.PAD, Placement.BLOCK_TRAILING, ELEMENT_PAD, 1,
                     note="rounds the token's trailing group to 8 bytes; never written")),
        "k + v != block: the block-trailing ue8m0 scales and pad bytes belong to the block but to neither k nor v",
        "FlashMLA tests/quant.py (MODEL1_FP8Sparse); rtp-llm concat_and_cache_ds_model1_kernel",
        tile_rule=TileRule(64, ScaleRule.POW2_CEIL, "model1_scale_floor"),
        default_dims=MODEL1_DIMS, fixed_dims=True,
        non_finite=NonFinitePolicy(
            UNDEFINED, UNDEFINED, "scale = the power of two at or above model1_scale_floor as ue8m0 (2^-13 at 1e-4), "
            "every value 0", "FlashMLA tests/quant.py (MODEL1) states nothing of NaN or inf; the floor is the "
            "model1_scale_floor flag")),
    LayoutRecord(
        "fp8_rocm_compact", "rtp-llm's sparse fp8 MLA on ROCm: R + P fp8 bytes per token; the scale is external "
        "per-tensor", _PER_TENSOR_FP8,
        "k + v == block: the compact layout has no scale area; its scale lives outside the cache as the "
        "per-tensor `scale` (AITER mla_decode_fwd's kv_scale), which this table declares",
        "rtp-llm PR MLAKVCacheSpec.h 46-57 (r + rope bytes); read by AITER's sparse MLA decode, mla_decode_fwd "
        "(op_tests/test_mla_sparse.py: 576 fp8 values, one kv_scale); written by sglang's HIP path (no scale)",
        extra_certified_dims=(SMALL_DIMS,)),
    LayoutRecord(
        "nvfp4_fp8_ds_mla", "NVFP4 sparse MLA with fp8 rope, one 352-byte record a token: the nope as E2M1 codes (two "
        "a byte, the even index low), the rope as e4m3 with no scale, then 32 e4m3 nope scales, one per 16 values, "
        "stored transposed (8 x 4)",
        (_values("nope", Source.KV_C, ELEMENT_E2M1, "R", "nope_scale"),
         FieldRecord("rope", Source.K_PE, Placement.PER_TOKEN, ELEMENT_FP8, "P", UNSCALED,
                     note="the input converted as it is: no scale"),
         FieldRecord("nope_scale", Source.SCALE, Placement.PER_TOKEN, "e4m3fn", "tiles", order=(8, 4),
                     note="scale s covers nope values [16s, 16(s+1)) and sits at byte 8 * (s % 4) + s // 4")),
        "k + v != block: the inline e4m3 nope scales are part of the entry but of neither k nor v", _NVFP4_MLA_SOURCES,
        tile_rule=TileRule(16, ScaleRule.AMAX_DIV, 2.0**-9, 6.0, fp4=Fp4Rule("bump", 448.0, "div_six")),
        fixed_dims=True,
        non_finite=NonFinitePolicy(
            UNDEFINED, UNDEFINED, "scale 2^-9 (e4m3 0x01, the floor), codes 0 (a -0.0 value 0x8, 0x0 under "
            "fp4_negative_zero=positive)",
            "the sources disagree: FlashMLA's tests/quant.py takes a NaN into the tile's amax (a NaN scale), vLLM's "
            "writer drops it (fmaxf); an inf tile's codes are the hardware conversion's, which no source states")),
    LayoutRecord(
        "nvfp4_ds_mla_bf16rope", "a fork's NVFP4 sparse MLA with a bf16 rope, one 432-byte record a token: the nope "
        "as E2M1 codes (two a byte, the even index low), 32 e4m3 nope scales (one per 16 values, in tile order, no "
        "floor), 16 zero bytes, the rope's 16-bit bits (local-inference-lab/vllm's 'nvfp4_ds_mla')",
        (*_FORK_NVFP4_NOPE,
         FieldRecord("zero", Source.ZERO, Placement.PER_TOKEN, ELEMENT_PAD, 16,
                     note="written as 0, never read: the rope starts 16-byte aligned"),
         _values("rope", Source.K_PE, ELEMENT_INPUT16, "P")),
        "k + v != block: the inline e4m3 nope scales and the zero bytes are part of the entry but of neither k nor v",
        _NVFP4_DS_MLA_SOURCES,
        tile_rule=_FORK_NVFP4_RULE,
        fixed_dims=True,
        non_finite=NonFinitePolicy(
            UNDEFINED, UNDEFINED, "scale 0x00 (no floor) and every value a zero of its sign: 0x0, a -0.0 0x8 "
            "(0x0 under fp4_negative_zero=positive)",
            "the fork's writer takes the tile's amax with fmaxf, which drops a NaN, and converts with "
            "cvt.rn.satfinite.e2m1x2.f32, whose NaN and inf results PTX does not state; a zero scale's reciprocal is "
            "0 in cvt_warp_fp16_to_fp4")),
    LayoutRecord(
        "nvfp4_ds_mla_fp8rope", "b12x's NVFP4 sparse MLA with an fp8 rope, one 368-byte record a token: the nope "
        "and its 32 e4m3 scales as nvfp4_ds_mla_bf16rope's, an fp32 rope scale, 12 zero bytes, 64 e4m3 rope values "
        "(b12x's 'nvfp4_ds_mla' under KV_FP8_ROPE=1)",
        (*_FORK_NVFP4_NOPE,
         FieldRecord("rope_scale", Source.SCALE, Placement.PER_TOKEN, ELEMENT_FP32, "tiles",
                     note="one scale over the 64 rope values: amax * float32(1/448), 0 for an all-zero rope",
                     tile_rule=_B12X_ROPE_RULE),
         FieldRecord("zero", Source.ZERO, Placement.PER_TOKEN, ELEMENT_PAD, 12,
                     note="written as 0, never read: the rope starts 16-byte aligned"),
         FieldRecord("rope", Source.K_PE, Placement.PER_TOKEN, ELEMENT_FP8, "P", "rope_scale",
                     note="fp8 of v * float32(1 / rope_scale); 0x00 where the scale is 0")),
        "k + v != block: the inline nope and rope scales and the zero bytes are part of the entry but of neither k "
        "nor v", _NVFP4_FP8_ROPE_SOURCES,
        tile_rule=_FORK_NVFP4_RULE,
        fixed_dims=True,
        non_finite=NonFinitePolicy(
            UNDEFINED, UNDEFINED, "nope: scale 0x00 (no floor) and every value a zero of its sign (0x0, a -0.0 0x8, "
            "0x0 under fp4_negative_zero=positive); rope: scale 0.0 and every value 0x00",
            "b12x's writer takes both amaxes with fmaxf, which drops a NaN, and converts with satfinite conversions "
            "whose NaN results PTX does not state; a zero rope scale stores zeros (it skips the reciprocal)")),
    LayoutRecord(
        "V41", "DeepSeek V4.1: per block, each token's nope and rope both fp8 in tiles of 32, then every token's 16 "
        "ue8m0 tile scales (14 nope, 2 rope)", _v41_fields(ELEMENT_FP8, ELEMENT_UE8M0, 32),
        "k + v != block: the block-trailing ue8m0 scales belong to the block but to neither k nor v", _V41_SOURCES,
        tile_rule=TileRule(32, ScaleRule.POW2_CEIL, 1e-4),
        default_dims=MODEL1_DIMS, fixed_dims=True,
        non_finite=NonFinitePolicy(
            UNDEFINED, UNDEFINED, "scale 2^-13 (the 1e-4 floor, rounded up to a power of two), every value 0",
            "undefined by its sources: sglang's V41 writer says 'NaN/inf inputs are not handled' (sglang PR #39123)")),
    LayoutRecord(
        "V41_FP4", "DeepSeek V4.1's FP4 cache: per block, each token's nope and rope as E2M1 codes (two a byte, the "
        "even index in the low nibble), then every token's 32 e4m3 scales, one per 16 values (28 nope, 4 rope)",
        _v41_fields(ELEMENT_E2M1, "e4m3fn", 16),
        "k + v != block: the block-trailing e4m3 scales belong to the block but to neither k nor v", _V41_SOURCES,
        tile_rule=TileRule(16, ScaleRule.AMAX_DIV, 2.0**-9, 6.0,
                           fp4=Fp4Rule("rne", 448.0, "mul_one_sixth", non_finite_tile="nan_scale_zero_codes")),
        default_dims=MODEL1_DIMS, fixed_dims=True,
        non_finite=NonFinitePolicy(
            "the tile's scale NaN (e4m3 0x7F) and every code of the tile 0x0",
            "the tile's scale NaN (e4m3 0x7F) and every code of the tile 0x0",
            "scale 2^-9 (the clamp), codes 0, a -0.0 value 0x8 (0x0 under fp4_negative_zero=positive)",
            "sglang's torch reference, 'A NaN element poisons its tile' (sglang PR #39123; its kernel: 'NaN/inf "
            "inputs are not handled')")),
)


#: AITER's page-segmented DeepSeek V3.2 fp8 cache: per page of B tokens, [B x 512 fp8 | B x 4 fp32 | B x 64 bf16].
#: Read by mla_decode_fwd's gfx942 page64 ds32 kernel (ROCm/aiter PR #1950); AITER ships no writer of it (its test
#: builds the page in torch), so the tile rule is the platform's ds_mla flags: the values fp8_ds_mla holds, placed
#: per page, which that reader multiplies as stored.
DESCRIBED_BUILTIN_LAYOUTS: tuple[LayoutRecord, ...] = (
    LayoutRecord(
        "fp8_ds_mla_3buffer", "per page of B tokens: every token's nope fp8 (tiles of 128), then every token's 4 fp32 "
        "tile scales, then every token's 16-bit rope (AITER's ds3.2 '3buffer' page)",
        (FieldRecord("nope", Source.KV_C, Placement.PAGE_SEGMENT, ELEMENT_FP8, "R", "nope_scale"),
         FieldRecord("nope_scale", Source.SCALE, Placement.PAGE_SEGMENT, ELEMENT_FP32, "tiles",
                     note="scale i covers nope values [128i, 128(i+1)); the reader multiplies it as stored"),
         FieldRecord("rope", Source.K_PE, Placement.PAGE_SEGMENT, ELEMENT_INPUT16, "P")),
        "k + v != block: the page's fp32 tile-scale segment belongs to the block but to neither k nor v",
        "AITER op_tests/test_mla_persistent.py (split_3buffer_kv_cache) and PR #1950 (mla_decode_fwd's gfx942 "
        "page64 ds32 kernel); AITER ships no writer of it",
        tile_rule=TileRule(128, "ds_mla_scale_rule", "ds_mla_scale_floor"), fixed_dims=True),
)


def certifiable(record: LayoutRecord) -> bool:
    """Whether an op can certify the record: none of its fields sits in a page segment (module doc)."""
    return all(f.placement is not Placement.PAGE_SEGMENT for f in record.fields)


def _extra_layouts() -> tuple[LayoutRecord, ...]:
    path = os.environ.get(LAYOUTS_ENV)
    if not path:
        return ()
    return load_layout_table(path, taken=tuple(r.name for r in BUILTIN_LAYOUTS + DESCRIBED_BUILTIN_LAYOUTS))


_EXTRA = _extra_layouts()
#: every MLA layout an op certifies: the built-in records, then the certifiable ones of ``$RTP_REF_LAYOUTS``'s table
MLA_LAYOUTS: tuple[LayoutRecord, ...] = BUILTIN_LAYOUTS + tuple(r for r in _EXTRA if certifiable(r))
#: every MLA layout name an op certifies, in the records' order
MLA_LAYOUT_NAMES: tuple[str, ...] = tuple(r.name for r in MLA_LAYOUTS)
#: the described layouts (module doc): built in, then those of ``$RTP_REF_LAYOUTS``'s table
DESCRIBED_LAYOUTS: tuple[LayoutRecord, ...] = DESCRIBED_BUILTIN_LAYOUTS + tuple(
    r for r in _EXTRA if not certifiable(r))
DESCRIBED_LAYOUT_NAMES: tuple[str, ...] = tuple(r.name for r in DESCRIBED_LAYOUTS)
#: every layout record's name: the certified, then the described
ALL_LAYOUT_NAMES: tuple[str, ...] = MLA_LAYOUT_NAMES + DESCRIBED_LAYOUT_NAMES
_BY_NAME = {r.name: r for r in MLA_LAYOUTS + DESCRIBED_LAYOUTS}


def layout_record(name: str) -> LayoutRecord:
    """The record of MLA layout ``name`` (certified or described); an unknown name raises RtpRefError listing the
    valid ones."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise RtpRefError(f"unknown MLA layout {name!r}; valid layouts: {', '.join(ALL_LAYOUT_NAMES)}") from None

"""Each variant of the MHA paged and DeepSeek indexer caches as one record: its field table (what is stored
where, in which element), where its scales live and how they are computed. The one list of each op's
variants.

Torch-free. A record's fields are placed by ``rtp_ref.kv.place_fields`` with the family's dims: ``HD`` (an
MHA cache's heads x head size per token; the K fields in ``key_cache``, the V fields in ``value_cache``,
heads at ``h * D`` of a token's row, HND order only through strides), ``D`` and ``D/Q`` (the indexer's
head_dim and its quant blocks: per block, every token's values, then every token's scales). An element
``bf16/fp16`` is the inputs' own bits; ``fp8`` the cache's fp8 format (the platform's unless the layout
flags set another); ``e2m1`` two FP4 codes a byte (the indexer's ``mxfp4``); or a named format.
``rtp_ref.kv.mha_paged.mha_layout`` and ``rtp_ref.kv.indexer.indexer_layout_for`` build layouts from them.
"""

from __future__ import annotations

from dataclasses import dataclass

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.rules import ScaleRule
from rtp_ref.kv.fields import ELEMENT_E2M1, ELEMENT_FP32, ELEMENT_INPUT16, ELEMENT_UE8M0, Placement, Source
from rtp_ref.kv.records import ELEMENT_FP8, FieldRecord


@dataclass(frozen=True)
class VariantRecord:
    """One variant of a family's cache: its name (the op's variant argument), field table, scales, and rule (the
    indexer's fp8 scale rule; None where the scales are the caller's arguments, or E2M1's: rtp_ref.kv.indexer
    states those). ``quant_block``: the one quant block the variant takes (mxfp4: 32, fixed by the format), None
    where any that divides head_dim does; ``non_finite``: what its writer stores for NaN and +-inf, where the
    variant states it."""

    family: str
    name: str
    fields: tuple[FieldRecord, ...]
    scales: str
    summary: str
    sources: str
    rule: ScaleRule | None = None
    quant_block: int | None = None
    non_finite: str = ""

    @property
    def element(self) -> str:
        """The element the variant stores its key values in (every value field of a variant shares it)."""
        return next(f.element for f in self.fields if f.source is Source.KEY)


def _mha_fields(element: str) -> tuple[FieldRecord, ...]:
    """K and V of ``element``; fp8 ones divided by the k_scale / v_scale arguments."""
    scaled = element != ELEMENT_INPUT16
    values = tuple(FieldRecord(name, source, Placement.PER_TOKEN, element, "HD", f"{name[0]}_scale" if scaled else None,
                               note=f"head h's {name}s at h * D", area=f"{name}_cache")
                   for name, source in (("key", Source.KEY), ("value", Source.VALUE)))
    scales = tuple(FieldRecord(f"{c}_scale", Source.SCALE, Placement.EXTERNAL, ELEMENT_FP32, 1,
                               note=f"the {c}_scale argument: [1] per tensor or [H] per head, float32") for c in "kv")
    return values + (scales if scaled else ())


def _nvfp4_fields() -> tuple[FieldRecord, ...]:
    """K and V as E2M1 codes with an e4m3 scale per 16 values, each side's codes then its scales (the field table's
    offsets are NHD's with linear scales: rtp_ref.kv.nvfp4_page places HND rows and swizzled scales), and the
    per-tensor decode scales."""
    out: list[FieldRecord] = []
    for name, source in (("key", Source.KEY), ("value", Source.VALUE)):
        area = f"{name}_cache"
        out += [FieldRecord(name, source, Placement.PER_TOKEN, ELEMENT_E2M1, "HD", f"{name}_scale",
                            note="head h's D/2 bytes at h * D/2 (value 2i in the low nibble of byte i)", area=area),
                FieldRecord(f"{name}_scale", Source.SCALE, Placement.BLOCK_TRAILING, NVFP4_SCALE_ELEMENT, "HD/16",
                            note="e4m3(g * amax * (1/6)) of each 16 values, in "
                                 f"{'layout flag nvfp4_v_scale_order' if name == 'value' else 'linear'} order",
                            area=area)]
    return (*out, *(FieldRecord(f"{c}_scale", Source.SCALE, Placement.EXTERNAL, ELEMENT_FP32, 1,
                                note=f"the {c}_scale argument: [1] or 0-D, float32, the decode scale (g = 1 / it)")
                    for c in "kv"))


#: the element of NVFP4's block scales
NVFP4_SCALE_ELEMENT = "e4m3fn"
_NVFP4_SCALES = ("k_scale and v_scale, one float32 each: the decode scales (g = 1 / k_scale); per 16 values one "
                 "e4m3 scale e4m3(g * (amax * (1/6))), nearest even, saturating; values stored as "
                 "e2m1(x * (1 / (scale * (1 / g)))), 0 where the scale is 0")
_NVFP4_NON_FINITE = ("undefined: vLLM's amax skips NaN (__hmax2) and no source states the E2M1 conversion of NaN; "
                     "a block holding NaN or +-inf is not certified")
_NVFP4_SOURCES = ("vLLM reshape_and_cache_flash, kv_cache_dtype 'nvfp4' (PR #37332; vllm-project/vllm@0cd789b397ef:"
                  "csrc/libtorch_stable/nvfp4_kv_cache_kernels.cu, PR #55976's version; vllm-project/vllm@"
                  "20b4ad8eb933:csrc/libtorch_stable/quantization/fp4/nvfp4_utils.cuh); FlashInfer "
                  "nvfp4_quantize_paged_kv_cache (flashinfer-ai/flashinfer@fb28d7242b35:flashinfer/quantization/"
                  "fp4_quantization.py); V-scale order: vLLM #50084")

_MHA_SCALES = "k_scale and v_scale arguments, each [1] (per tensor) or [H] (per head); values stored as fp8(x / s)"
_INDEXER_SCALES = "one fp32 per quant_block_size values, block-trailing; max(amax, 1e-4) / divisor"
#: the indexer cache's fields: both scale formats store the same ones
INDEXER_FIELDS: tuple[FieldRecord, ...] = (
    FieldRecord("k", Source.KEY, Placement.PER_TOKEN, ELEMENT_FP8, "D", "k_scale"),
    FieldRecord("k_scale", Source.SCALE, Placement.BLOCK_TRAILING, ELEMENT_FP32, "D/Q",
                note="scale j covers k values [jQ, (j+1)Q)"),
)

#: the indexer cache's fields under ``mxfp4``: E2M1 codes, two a byte (the even index in the low nibble), then one
#: ue8m0 scale byte per 32 values, block-trailing as the fp8 variants' scales
MXFP4_INDEXER_FIELDS: tuple[FieldRecord, ...] = (
    FieldRecord("k", Source.KEY, Placement.PER_TOKEN, ELEMENT_E2M1, "D", "k_scale",
                note="two codes a byte: value 2i in the low nibble of byte i, 2i + 1 in the high one"),
    FieldRecord("k_scale", Source.SCALE, Placement.BLOCK_TRAILING, ELEMENT_UE8M0, "D/Q",
                note="scale j (2^(byte - 127)) covers k values [32j, 32j + 32)"),
)
#: the quant block of ``mxfp4``: OCP MX's block of 32, which vLLM's MXFP4 indexer writer and DeepGEMM's reader fix
MXFP4_QUANT_BLOCK = 32
_MXFP4_SCALES = ("one ue8m0 byte per 32 values, block-trailing: 2^e, e = ceil(log2(max(amax, 6 * 2^-126) * (1/6))) "
                 "exactly (float32 1/6), clamped to [-127, 127]; values stored as e2m1(x * 2^-e)")
_MXFP4_NON_FINITE = ("a NaN is left out of its block's amax and stored as 0x7 (+6); +-inf saturate (0x7, 0xF) and "
                     "give their block the scale 2^127 (byte 254, the exponent clamp); a block of only NaN (or zeros) "
                     "gets the floor's scale 2^-126 (byte 1)")
_MXFP4_SOURCES = ("vLLM's fused DeepSeek-V4 MXFP4 indexer writer (vllm-project/vllm@e8f3d1e27521:vllm/models/"
                  "deepseek_v4/common/ops/fused_compress_quant_cache.py); vLLM PR #48558 (open: the unfused "
                  "indexer_k_quant_and_cache, scale_fmt mxfp4); DeepGEMM's ceil_to_ue8m0 (deepseek-ai/DeepGEMM@"
                  "38939a4c494c:deep_gemm/utils/math.py)")

MHA_VARIANTS: tuple[VariantRecord, ...] = (
    VariantRecord("mha", "auto", _mha_fields(ELEMENT_INPUT16), "none",
                  "K and V in the inputs' own 16-bit type, bits copied",
                  "vLLM reshape_and_cache_flash, kv_cache_dtype 'auto'"),
    VariantRecord("mha", "fp8", _mha_fields(ELEMENT_FP8), _MHA_SCALES,
                  "K and V in the cache's fp8 e4m3 format: the platform's unless the layout flags set one",
                  "vLLM reshape_and_cache_flash, kv_cache_dtype 'fp8' / 'fp8_e4m3' (scaled_convert)"),
    VariantRecord("mha", "fp8_e5m2", _mha_fields("e5m2"), _MHA_SCALES, "K and V in OCP e5m2",
                  "vLLM reshape_and_cache_flash, kv_cache_dtype 'fp8_e5m2'"),
    VariantRecord("mha", "nvfp4", _nvfp4_fields(), _NVFP4_SCALES,
                  "K and V as E2M1 codes (D/2 bytes a head) and an e4m3 scale per 16 values (D/16 bytes a head): a "
                  "block's codes of every token and head, then their scales, per side",
                  _NVFP4_SOURCES, non_finite=_NVFP4_NON_FINITE),
)
INDEXER_VARIANTS: tuple[VariantRecord, ...] = (
    VariantRecord("indexer", "none", INDEXER_FIELDS, _INDEXER_SCALES, "fp8 values, fp32 slice scales as computed",
                  "vLLM indexer_k_quant_and_cache_kernel, scale_fmt none", rule=ScaleRule.AMAX_DIV),
    VariantRecord("indexer", "ue8m0", INDEXER_FIELDS, _INDEXER_SCALES + ", raised to the next power of two",
                  "fp8 values, power-of-two fp32 slice scales",
                  "vLLM indexer_k_quant_and_cache_kernel, scale_fmt ue8m0 (DeepSeek V3.2)", rule=ScaleRule.POW2_CEIL),
    VariantRecord("indexer", "mxfp4", MXFP4_INDEXER_FIELDS, _MXFP4_SCALES,
                  "E2M1 values, two a byte, and one ue8m0 scale byte per 32 (68 bytes a token at head_dim 128)",
                  _MXFP4_SOURCES, quant_block=MXFP4_QUANT_BLOCK, non_finite=_MXFP4_NON_FINITE),
)


def variant_record(records: tuple[VariantRecord, ...], name: str, argument: str) -> VariantRecord:
    """The record called ``name`` among ``records``; another name raises RtpRefError naming ``argument``."""
    for record in records:
        if record.name == name:
            return record
    raise RtpRefError(f"{argument} {name!r}; valid: {', '.join(r.name for r in records)}")

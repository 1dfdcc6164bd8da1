# Triton ships no type information: every @triton.jit is an untyped decorator to mypy.
# mypy: disable-error-code="untyped-decorator"
"""``reshape_and_cache_flash`` with ``kv_cache_dtype="nvfp4"`` in Triton (rtp_ref.kv.mha_paged and
rtp_ref.kv.nvfp4_page state the contract; rtp_ref.fp4.nvfp4 the arithmetic).

One program quantizes every head of ``BLOCK_T`` tokens of K and of V. Per block of 16 values: ``amax`` from the
float32 bits, ``g = 1 / k_scale``, the e4m3 scale code of ``g * (amax * (1/6))`` in software
(rtp_ref.kernels.triton_fp8.fp8_software: no GPU before Blackwell converts to E2M1, so the whole path is software
and the same everywhere), the decode scale ``s = e4m3 value * (1 / g)``, and each code of ``x * (1 / s)`` (or
``x / s``), every reciprocal and quotient by ``tl.math.div_rn`` (correctly rounded, as the reference). A block's
bytes go where its page puts them: codes at row ``t * H + h`` (NHD) or ``h * T + t`` (HND) of the side's code
area, scales linear or swizzled in 4-token groups, addressed from the block's first byte (``stride(0)`` apart). All
offsets are int64.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from rtp_ref.fp4.e2m1 import NegativeZero
from rtp_ref.fp4.quantize import PayloadDivision
from rtp_ref.kernels.call_signature import Launch, no_launch
from rtp_ref.kernels.triton_fp4 import ONE_SIXTH_F32, e2m1_codes, e4m3_value
from rtp_ref.kernels.triton_fp8 import fp8_software, interpreted, load_f32
from rtp_ref.kernels.triton_launch import mha_write_launch
from rtp_ref.kernels.triton_slots import program_slots
from rtp_ref.kv.mha_paged import MhaPagedLayout
from rtp_ref.kv.nvfp4_page import SWIZZLE_TOKENS, ScaleOrder, order_of

#: SWIZZLE_TOKENS as a Triton constexpr (a kernel reads no other global)
SWIZZLE = tl.constexpr(SWIZZLE_TOKENS)
#: tokens a program writes under Triton's interpreter (each program costs milliseconds of Python) and on a GPU
INTERPRETER_BLOCK_T = 64
GPU_BLOCK_T = 1
GPU_NUM_WARPS = 4


@triton.jit
def _side(  # type: ignore[no-untyped-def]  # Triton kernel arguments: pointers and ints
        src, src_t, src_h, cache, page_stride, scale_ptr, t, block, row, valid,
        BLOCK_T: tl.constexpr, T: tl.constexpr, H: tl.constexpr, H_PAD: tl.constexpr, D: tl.constexpr,
        D_PAD: tl.constexpr, IN_BF16: tl.constexpr, HND: tl.constexpr, SWIZZLED: tl.constexpr,
        RECIPROCAL: tl.constexpr, NEG_ZERO_POSITIVE: tl.constexpr):
    h = tl.arange(0, H_PAD).to(tl.int64)[None, :, None]
    d = tl.arange(0, D_PAD)[None, None, :]
    mask = valid[:, None, None] & (h < H) & (d < D)
    x = load_f32(src, t[:, None, None] * src_t + h * src_h + d, mask, IN_BF16, False)
    x4 = tl.reshape(x, (BLOCK_T, H_PAD, D_PAD // 16, 16))
    # |x| as float32 bits orders like |x| (the cases hold finite values only: the variant defines no other)
    amax = tl.max(x4.to(tl.int32, bitcast=True) & 0x7FFFFFFF, axis=3).to(tl.float32, bitcast=True)
    one = tl.full([BLOCK_T, H_PAD, D_PAD // 16], 1.0, tl.float32)
    g = tl.math.div_rn(one, one * tl.load(scale_ptr))
    # e4m3fn: 3 mantissa bits, emin -6, largest code 0x7E, NaN 0x7F, -0 kept, no inf, saturating
    code = fp8_software(g * (amax * ONE_SIXTH_F32), 3, -6, 0x7E, 0x7F, True, False, 0, True).to(tl.int32)
    s = e4m3_value(code) * tl.math.div_rn(one, g)
    if RECIPROCAL:  # noqa: SIM108 - a constexpr branch, one of two expressions compiled
        q = x4 * tl.math.div_rn(one, s)[:, :, :, None]
    else:
        q = tl.math.div_rn(x4, s[:, :, :, None])
    q = tl.where((code == 0)[:, :, :, None], x4 * 0.0, q)  # a zero scale stores zeros of the values' signs
    pairs = tl.reshape(e2m1_codes(q, NEG_ZERO_POSITIVE), (BLOCK_T, H_PAD, D_PAD // 2, 2))
    nibble_weight = 1 + 15 * tl.arange(0, 2)  # 1 for the even index, 16 for the odd one
    packed = tl.sum(pairs * nibble_weight[None, None, None, :], axis=3)
    # the side's page: rows of D/2 code bytes, then rows of D/16 scale bytes
    page = block[:, None, None] * page_stride
    tt = row[:, None, None]
    if HND:  # noqa: SIM108 - a constexpr branch, one of two expressions compiled
        rows = h * T + tt
    else:
        rows = tt * H + h
    j = tl.arange(0, D_PAD // 2)[None, None, :]
    code_mask = valid[:, None, None] & (h < H) & (j < D // 2)
    tl.store(cache + page + rows * (D // 2) + j, packed.to(tl.uint8), mask=code_mask)
    sg = tl.arange(0, D_PAD // 16)[None, None, :]
    area = page + T * H * (D // 2)
    if SWIZZLED:  # each 4 tokens' [4, S] scales of a head stored [S, 4] (rtp_ref.kv.nvfp4_page), S = D / 16
        group = tt // SWIZZLE
        within = sg * SWIZZLE + tt % SWIZZLE
        if HND:
            where = area + (h * T + group * SWIZZLE) * (D // 16) + within
        else:
            where = area + ((group * SWIZZLE + within // (D // 16)) * H + h) * (D // 16) + within % (D // 16)
    else:
        where = area + rows * (D // 16) + sg
    tl.store(cache + where, code.to(tl.uint8), mask=valid[:, None, None] & (h < H) & (sg < D // 16))


@triton.jit
def _reshape_and_cache_nvfp4(  # type: ignore[no-untyped-def]  # Triton kernel arguments
        key, value, key_cache, value_cache, slot_mapping, flags, capacity, k_scale, v_scale, tokens,
        key_t, key_h, value_t, value_h, kc_block, vc_block,
        BLOCK_T: tl.constexpr, T: tl.constexpr, H: tl.constexpr, H_PAD: tl.constexpr, D: tl.constexpr,
        D_PAD: tl.constexpr, IN_BF16: tl.constexpr, K_HND: tl.constexpr, V_HND: tl.constexpr,
        V_SWIZZLED: tl.constexpr, RECIPROCAL: tl.constexpr, NEG_ZERO_POSITIVE: tl.constexpr):
    t, block, row, valid = program_slots(slot_mapping, flags, capacity, tokens, T, BLOCK_T)
    _side(key, key_t, key_h, key_cache, kc_block, k_scale, t, block, row, valid, BLOCK_T, T, H, H_PAD, D, D_PAD,
          IN_BF16, K_HND, False, RECIPROCAL, NEG_ZERO_POSITIVE)
    _side(value, value_t, value_h, value_cache, vc_block, v_scale, t, block, row, valid, BLOCK_T, T, H, H_PAD, D,
          D_PAD, IN_BF16, V_HND, V_SWIZZLED, RECIPROCAL, NEG_ZERO_POSITIVE)


def prepare_triton_nvfp4_mha(layout: MhaPagedLayout, key: torch.Tensor, value: torch.Tensor,
                             key_cache: torch.Tensor, value_cache: torch.Tensor, slot_mapping: torch.Tensor,
                             k_scale: torch.Tensor, v_scale: torch.Tensor, flags: torch.Tensor) -> Launch:
    """The launch of an ``nvfp4`` ``reshape_and_cache_flash`` for arguments of this metadata
    (rtp_ref.kernels.call_signature), as ``prepare_triton_mha`` is for the other variants: checks nothing (its
    caller has, as the reference does); a slot past the cache sets ``flags`` and is written nowhere."""
    tokens, heads, size = slot_mapping.numel(), layout.num_kv_heads, layout.head_size
    if tokens == 0:
        return no_launch
    fp4 = layout.fp4
    assert fp4 is not None, "prepare_triton_nvfp4_mha writes the nvfp4 variant only"
    BLOCK_T = INTERPRETER_BLOCK_T if interpreted() else GPU_BLOCK_T  # a Triton constexpr
    constexprs = {"BLOCK_T": BLOCK_T, "T": key_cache.shape[1], "H": heads, "H_PAD": triton.next_power_of_2(heads),
                  "D": size, "D_PAD": triton.next_power_of_2(size), "IN_BF16": key.dtype == torch.bfloat16,
                  "K_HND": order_of(key_cache) == "HND", "V_HND": order_of(value_cache) == "HND",
                  "V_SWIZZLED": layout.v_scale_order is ScaleOrder.SWIZZLED_4_TOKEN,
                  "RECIPROCAL": fp4.payload is PayloadDivision.RECIPROCAL_MUL,
                  "NEG_ZERO_POSITIVE": fp4.negative_zero is NegativeZero.POSITIVE}
    scalars = (tokens, key.stride(0), key.stride(1), value.stride(0), value.stride(1), key_cache.stride(0),
               value_cache.stride(0))
    launch: Launch = mha_write_launch(_reshape_and_cache_nvfp4, tokens, BLOCK_T, constexprs, GPU_NUM_WARPS, key_cache,
                                      flags, scalars)
    return launch

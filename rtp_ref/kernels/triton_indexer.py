# Triton ships no type information: every @triton.jit is an untyped decorator to mypy.
# mypy: disable-error-code="untyped-decorator"
"""``indexer_k_quant_and_cache`` in Triton (rtp_ref.kv.indexer states the contract).

One program quantises one ``QUANT``-value slice of ``BLOCK_T`` tokens (``GPU_PROGRAM_VALUES / QUANT`` on a GPU,
``INTERPRETER_BLOCK_T`` under the interpreter):
the slice's amax (NaN dropped, as ``fmaxf`` folds), its fp32 scale ``div_rn(max(amax, 1e-4), divisor)`` (a
power of two for ue8m0: values are then multiplied by its exact reciprocal, the same correctly rounded quotient
without a division), the fp8 codes of ``div_rn(x, scale)``, then the four scale bytes after the block's values,
as one int32 store where the host found the cache's address and block stride 4-byte aligned (``SCALE_WORD``), one
by one otherwise. All offsets are int64.

``mxfp4`` (``_indexer_mxfp4``): one program quantises one 32-value block of ``BLOCK_T`` tokens: its amax (NaN
dropped), ``q = max(amax, 6 * 2**-126) * (1/6)`` with the float32 1/6 (rtp_ref.kernels.triton_fp4.ONE_SIXTH_F32),
the exponent ``e = ceil(log2(q))`` from q's bits (the exponent field, one up where a mantissa bit is set: exact, no
``log2``), clamped to 127, each value times ``2**-e`` built from its bits (exact: a power of two), its E2M1 code by
rtp_ref.kernels.triton_fp4.e2m1_codes (a NaN as 0x7), two codes a byte, and the scale byte ``e + 127``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from rtp_ref.errors import RtpRefError
from rtp_ref.kernels.call_signature import Launch, no_launch, on_device
from rtp_ref.kernels.format_traits import FormatTraits
from rtp_ref.kernels.triton_fp4 import ONE_SIXTH_F32, e2m1_codes
from rtp_ref.kernels.triton_fp8 import (
    F32_2POW_M127_BITS,
    conversion_saturates,
    fp8_codes,
    hardware_selector,
    interpreted,
    load_f32,
    ue8m0_ceil,
)
from rtp_ref.kernels.triton_launch import CompiledLaunch
from rtp_ref.kv.indexer import AMAX_FLOOR, IndexerLayout

#: the largest quant block the kernel takes (a power of two: ``tl.arange``); Triton's block limit is 2^20 values
TRITON_MAX_QUANT_BLOCK = 1 << 20
#: tokens a program quantises under Triton's interpreter, where each program costs milliseconds of Python
INTERPRETER_BLOCK_T = 64
#: values a program quantises on a GPU (its tokens: this / QUANT, at least one) and the warps it runs on. One token's
#: 128-value slice a program left the H200 scheduling 2M tiny programs at 9-10% of the copy roof; the figures of
#: the sweep that chose these are in docs/performance.md
GPU_PROGRAM_VALUES = 4096
GPU_NUM_WARPS = 4


@triton.jit
def _indexer_k_quant_and_cache(  # type: ignore[no-untyped-def]  # Triton kernel arguments
        k, cache, slot_mapping, flags, capacity, tokens, k_stride, block_stride, block_size, divisor, floor,
        BLOCK_T: tl.constexpr, D: tl.constexpr, QUANT: tl.constexpr, N: tl.constexpr, IN_BF16: tl.constexpr,
        UE8M0: tl.constexpr, HW: tl.constexpr, MAN_BITS: tl.constexpr, EMIN: tl.constexpr, MAX_CODE: tl.constexpr,
        NAN_CODE: tl.constexpr, NEG_ZERO: tl.constexpr, HAS_INF: tl.constexpr, INF_CODE: tl.constexpr,
        SATFINITE: tl.constexpr, MAX_VALUE: tl.constexpr, CLAMP: tl.constexpr, SCALE_WORD: tl.constexpr):
    t = tl.program_id(0).to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T).to(tl.int64)
    j = tl.program_id(1).to(tl.int64)
    slot = tl.load(slot_mapping + t, mask=t < tokens, other=-1).to(tl.int64)
    # a slot past the cache is flagged and written nowhere (rtp_ref.kernels.input_flags)
    past = slot >= capacity
    tl.store(flags + 0 * t, tl.full([BLOCK_T], 1, tl.int32), mask=past)
    valid = (slot >= 0) & ~past
    # padding slots address block 0 row 0 (masked off): no negative offset is ever formed
    slot = tl.where(valid, slot, 0)
    block = slot // block_size
    row = slot % block_size
    lane = tl.arange(0, QUANT)
    mask = valid[:, None] & (lane < QUANT)[None, :]
    # the values load whatever the slot says (padding tokens' are loaded and dropped), so that they and the slots
    # are in flight together: a load masked by the slot would wait for it
    loaded = (t < tokens)[:, None] & (lane < QUANT)[None, :]
    # tokens past the call read 1.0 where only divided ('none'; see load_f32), 0.0 otherwise; never stored
    x = load_f32(k, t[:, None] * k_stride + j * QUANT + lane[None, :], loaded, IN_BF16, not UE8M0)
    magnitude = tl.abs(x)
    amax = tl.max(tl.where(magnitude != magnitude, 0.0, magnitude), axis=1)
    scale = tl.math.div_rn(tl.maximum(amax, floor), tl.full([BLOCK_T], 1.0, tl.float32) * divisor)
    if UE8M0:
        byte = ue8m0_ceil(scale)
        # byte 0 would be 2**-127, far below the floor / divisor; 0xFF only for an infinite scale
        scale = tl.where(byte == 0xFF, scale, (byte << 23).to(tl.float32, bitcast=True))
        # 2**(127 - byte): a normal float's bits but for byte 254 (2**-127, subnormal); 0 for an infinite scale,
        # since x * 0 is x / inf (a signed zero; NaN for an infinite x)
        reciprocal = tl.where(byte == 0xFF, 0, tl.where(byte == 254, F32_2POW_M127_BITS, (254 - byte) << 23))
        reciprocal = reciprocal.to(tl.float32, bitcast=True)
        q = x * reciprocal[:, None]
    else:
        q = tl.math.div_rn(x, tl.full([BLOCK_T, QUANT], 1.0, tl.float32) * scale[:, None])
    code = fp8_codes(q, HW, MAN_BITS, EMIN, MAX_CODE, NAN_CODE, NEG_ZERO, HAS_INF, INF_CODE, SATFINITE, MAX_VALUE,
                     CLAMP)
    base = cache + block * block_stride
    tl.store(base[:, None] + row[:, None] * D + j * QUANT + lane[None, :], code, mask=mask)
    bits = scale.to(tl.int32, bitcast=True)
    at = base + block_size * D + (row * N + j) * 4
    if SCALE_WORD:
        tl.store(at.to(tl.pointer_type(tl.int32)), bits, mask=valid)
    else:
        four = tl.arange(0, 4)
        tl.store(at[:, None] + four[None, :], ((bits[:, None] >> (8 * four[None, :])) & 0xFF).to(tl.uint8),
                 mask=valid[:, None] & (four < 4)[None, :])


#: ``6 * 2**-126``, ``mxfp4``'s amax floor (float32: exact)
MXFP4_AMAX_FLOOR = tl.constexpr(6 * 2.0**-126)


@triton.jit
def _indexer_mxfp4(  # type: ignore[no-untyped-def]  # Triton kernel arguments
        k, cache, slot_mapping, flags, capacity, tokens, k_stride, block_stride, block_size,
        BLOCK_T: tl.constexpr, D: tl.constexpr, N: tl.constexpr, IN_BF16: tl.constexpr):
    t = tl.program_id(0).to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T).to(tl.int64)
    j = tl.program_id(1).to(tl.int64)
    slot = tl.load(slot_mapping + t, mask=t < tokens, other=-1).to(tl.int64)
    past = slot >= capacity
    tl.store(flags + 0 * t, tl.full([BLOCK_T], 1, tl.int32), mask=past)
    valid = (slot >= 0) & ~past
    slot = tl.where(valid, slot, 0)
    block = slot // block_size
    row = slot % block_size
    lane = tl.arange(0, 32)
    loaded = (t < tokens)[:, None] & (lane < 32)[None, :]
    x = load_f32(k, t[:, None] * k_stride + j * 32 + lane[None, :], loaded, IN_BF16, False)
    magnitude = tl.abs(x)
    amax = tl.max(tl.where(magnitude != magnitude, 0.0, magnitude), axis=1)
    q = tl.maximum(amax, MXFP4_AMAX_FLOOR) * ONE_SIXTH_F32
    # q >= 2**-126 is normal: ceil(log2(q)) is its exponent, one more where any mantissa bit is set; inf's field 255
    bits = q.to(tl.int32, bitcast=True)
    e = ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0).to(tl.int32)
    e = tl.minimum(e, 127)
    # 2**-e from its bits: exponent field 127 - e, or the subnormal 2**-127 for e = 127
    reciprocal = tl.where(e == 127, F32_2POW_M127_BITS, (127 - e) << 23).to(tl.float32, bitcast=True)
    scaled = x * reciprocal[:, None]
    codes = e2m1_codes(scaled, False)
    codes = tl.where(scaled != scaled, 7, codes)  # a NaN: 0x7 (rtp_ref.kv.indexer)
    pairs = tl.reshape(codes, (BLOCK_T, 16, 2))
    nibble_weight = 1 + 15 * tl.arange(0, 2)  # 1 for the even index, 16 for the odd one
    packed = tl.sum(pairs * nibble_weight[None, None, :], axis=2).to(tl.uint8)
    base = cache + block * block_stride
    byte = tl.arange(0, 16)
    tl.store(base[:, None] + row[:, None] * (D // 2) + j * 16 + byte[None, :], packed,
             mask=valid[:, None] & (byte < 16)[None, :])
    tl.store(base + block_size * (D // 2) + row * N + j, (e + 127).to(tl.uint8), mask=valid)


def _prepare_mxfp4(layout: IndexerLayout, k: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                   flags: torch.Tensor) -> Launch:
    """``prepare_triton_indexer``'s launch for an ``mxfp4`` layout (quant block 32: rtp_ref.kv.indexer)."""
    block_size, tokens = kv_cache.shape[1], slot_mapping.numel()
    BLOCK_T = INTERPRETER_BLOCK_T if interpreted() else max(1, GPU_PROGRAM_VALUES // 32)  # a Triton constexpr
    constexprs = {"BLOCK_T": BLOCK_T, "D": layout.head_dim, "N": layout.scales_per_token,
                  "IN_BF16": k.dtype == torch.bfloat16}
    scalars = (kv_cache.shape[0] * block_size, tokens, k.stride(0), kv_cache.stride(0), block_size)
    write = CompiledLaunch(_indexer_mxfp4, (triton.cdiv(tokens, BLOCK_T), layout.scales_per_token), constexprs,
                           enable_fp_fusion=False, num_warps=GPU_NUM_WARPS)
    index = kv_cache.device.index if kv_cache.is_cuda else None

    def launch(k: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor, scale_fmt: str) -> None:
        with on_device(index):
            write(k, kv_cache, slots, flags, *scalars)

    return launch


def prepare_triton_indexer(layout: IndexerLayout, k: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                           scale_fmt: str, flags: torch.Tensor) -> Launch:
    """The launch of ``indexer_k_quant_and_cache`` for arguments of this metadata (rtp_ref.kernels.call_signature):
    ``launch(k, kv_cache, slot_mapping, scale_fmt)`` writes as
    ``rtp_ref.kv.indexer.reference_indexer_k_quant_and_cache`` does, with one Triton launch.

    Checks nothing but the quant block (a power of two: a Triton block): its caller
    (rtp_ref.kernels.mha_indexer_builtin) has checked the metadata as the reference does (validate_indexer_args); a
    slot past the cache sets ``flags`` and is written nowhere (rtp_ref.kernels.input_flags).
    """
    block_size = kv_cache.shape[1]
    quant = layout.quant_block_size
    if quant & (quant - 1) or quant > TRITON_MAX_QUANT_BLOCK:
        raise RtpRefError(f"quant_block_size {quant}: this kernel needs a power of two up to {TRITON_MAX_QUANT_BLOCK}")
    tokens = slot_mapping.numel()
    if tokens == 0:
        return no_launch
    if layout.fp4 is not None:
        return _prepare_mxfp4(layout, k, kv_cache, slot_mapping, flags)
    traits = FormatTraits.of(layout.element_format, layout.conversion_mode)
    BLOCK_T = INTERPRETER_BLOCK_T if interpreted() else max(1, GPU_PROGRAM_VALUES // quant)  # a Triton constexpr
    constexprs = {"BLOCK_T": BLOCK_T, "D": layout.head_dim, "QUANT": quant, "N": layout.scales_per_token,
                  "IN_BF16": k.dtype == torch.bfloat16, "UE8M0": scale_fmt == "ue8m0",
                  "HW": hardware_selector(layout.element_format, layout.conversion_mode, kv_cache.device),
                  "CLAMP": not conversion_saturates(), **traits.triton_constexprs(),
                  # the call signature keys launches on start addresses modulo 16: this holds for every call
                  "SCALE_WORD": kv_cache.data_ptr() % 4 == 0 and kv_cache.stride(0) % 4 == 0}
    scalars = (kv_cache.shape[0] * block_size, tokens, k.stride(0), kv_cache.stride(0), block_size,
               layout.scale_divisor, AMAX_FLOOR)
    write = CompiledLaunch(_indexer_k_quant_and_cache, (triton.cdiv(tokens, BLOCK_T), layout.scales_per_token),
                           constexprs, enable_fp_fusion=False, num_warps=GPU_NUM_WARPS)
    index = kv_cache.device.index if kv_cache.is_cuda else None

    def launch(k: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor, scale_fmt: str) -> None:
        with on_device(index):
            write(k, kv_cache, slots, flags, *scalars)

    return launch

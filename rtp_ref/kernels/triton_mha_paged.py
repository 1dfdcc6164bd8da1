# Triton ships no type information: every @triton.jit is an untyped decorator to mypy.
# mypy: disable-error-code="untyped-decorator"
"""``reshape_and_cache_flash`` in Triton (rtp_ref.kv.mha_paged states the contract).

One program writes every head of ``BLOCK_T`` tokens to the K and the V cache (``GPU_BLOCK_T`` on a GPU,
``INTERPRETER_BLOCK_T`` under the interpreter). The cache order (NHD or HND) is only
strides: the program addresses ``block * block_stride + row * page_stride + head * head_stride + d``, in
elements, for each cache separately. ``auto`` moves the 16-bit inputs as int16 (the kernel casts its pointers:
views made per call cost host time), so every bit pattern (NaN payloads included) is copied; fp8 divides in fp32
with ``tl.math.div_rn`` (correctly rounded, as vLLM's ``x / scale``) and converts with rtp_ref.kernels.triton_fp8.
All offsets are int64.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from rtp_ref.fp8.formats import E4M3FN, ConversionMode
from rtp_ref.kernels.call_signature import Launch, no_launch
from rtp_ref.kernels.format_traits import FormatTraits
from rtp_ref.kernels.triton_fp8 import (
    HARDWARE_TYPES,
    SW,
    conversion_saturates,
    fp8_codes,
    hardware_selector,
    interpreted,
    load_f32,
)
from rtp_ref.kernels.triton_launch import has_backend, mha_write_launch
from rtp_ref.kernels.triton_nvfp4_mha import prepare_triton_nvfp4_mha
from rtp_ref.kernels.triton_slots import program_slots
from rtp_ref.kv.mha_paged import MhaPagedLayout, scale_step

#: tokens a program writes under Triton's interpreter, where each program costs milliseconds of Python
INTERPRETER_BLOCK_T = 64
#: tokens a program writes on a GPU, and the warps it runs on (the sweep that chose them: docs/performance.md)
GPU_BLOCK_T = 1
GPU_NUM_WARPS = 2


@triton.jit
def _rows(  # type: ignore[no-untyped-def]  # Triton kernel arguments: pointers and ints
        src, src_t, src_h, dst, d_block, d_page, d_head, scale_ptr, scale_step, t, block, row, valid,
        BLOCK_T: tl.constexpr, H: tl.constexpr, H_PAD: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr,
        IN_BF16: tl.constexpr, FP8: tl.constexpr, HW: tl.constexpr, MAN_BITS: tl.constexpr,
        EMIN: tl.constexpr, MAX_CODE: tl.constexpr, NAN_CODE: tl.constexpr, NEG_ZERO: tl.constexpr,
        HAS_INF: tl.constexpr, INF_CODE: tl.constexpr, SATFINITE: tl.constexpr, MAX_VALUE: tl.constexpr,
        CLAMP: tl.constexpr):
    if not FP8:  # the 16-bit bits moved as int16: every pattern, NaN payloads included, copied as it is
        src = src.to(tl.pointer_type(tl.int16))
        dst = dst.to(tl.pointer_type(tl.int16))
    h = tl.arange(0, H_PAD).to(tl.int64)[None, :, None]
    d = tl.arange(0, D_PAD)[None, None, :]
    mask = valid[:, None, None] & (h < H) & (d < D)
    out = dst + block[:, None, None] * d_block + row[:, None, None] * d_page + h * d_head + d
    offs = t[:, None, None] * src_t + h * src_h + d
    if FP8:
        x = load_f32(src, offs, mask, IN_BF16, False)
        # scale_step 1: one scale per head; 0: head h reads the per-tensor scale
        scale = tl.load(scale_ptr + h * scale_step, mask=h < H, other=1.0)
        q = tl.math.div_rn(x, tl.full([BLOCK_T, H_PAD, D_PAD], 1.0, tl.float32) * scale)
        code = fp8_codes(q, HW, MAN_BITS, EMIN, MAX_CODE, NAN_CODE, NEG_ZERO, HAS_INF, INF_CODE, SATFINITE,
                         MAX_VALUE, CLAMP)
        tl.store(out, code, mask=mask)
    else:
        tl.store(out, tl.load(src + offs, mask=mask, other=0), mask=mask)


@triton.jit
def _reshape_and_cache_flash(  # type: ignore[no-untyped-def]  # Triton kernel arguments
        key, value, key_cache, value_cache, slot_mapping, flags, capacity, k_scale, v_scale, k_step, v_step, tokens,
        key_t, key_h, value_t, value_h, kc_block, kc_page, kc_head, vc_block, vc_page, vc_head, block_size,
        BLOCK_T: tl.constexpr, H: tl.constexpr, H_PAD: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr,
        IN_BF16: tl.constexpr, FP8: tl.constexpr, HW: tl.constexpr, MAN_BITS: tl.constexpr,
        EMIN: tl.constexpr, MAX_CODE: tl.constexpr, NAN_CODE: tl.constexpr, NEG_ZERO: tl.constexpr,
        HAS_INF: tl.constexpr, INF_CODE: tl.constexpr, SATFINITE: tl.constexpr, MAX_VALUE: tl.constexpr,
        CLAMP: tl.constexpr):
    t, block, row, valid = program_slots(slot_mapping, flags, capacity, tokens, block_size, BLOCK_T)
    _rows(key, key_t, key_h, key_cache, kc_block, kc_page, kc_head, k_scale, k_step, t, block, row, valid,
          BLOCK_T, H, H_PAD, D, D_PAD, IN_BF16, FP8, HW, MAN_BITS, EMIN, MAX_CODE, NAN_CODE, NEG_ZERO,
          HAS_INF, INF_CODE, SATFINITE, MAX_VALUE, CLAMP)
    _rows(value, value_t, value_h, value_cache, vc_block, vc_page, vc_head, v_scale, v_step, t, block, row, valid,
          BLOCK_T, H, H_PAD, D, D_PAD, IN_BF16, FP8, HW, MAN_BITS, EMIN, MAX_CODE, NAN_CODE, NEG_ZERO,
          HAS_INF, INF_CODE, SATFINITE, MAX_VALUE, CLAMP)


def _constexprs(layout: MhaPagedLayout, block_t: int, in_bf16: bool, hw: int, clamp: bool) -> dict[str, object]:
    """The kernel's constexprs for ``layout``: ``block_t`` tokens a program, fp8 conversion ``hw`` (a
    rtp_ref.kernels.triton_fp8 selector), an explicit saturating clamp before it if ``clamp``."""
    fmt = layout.element_format
    # no fp8 value: the traits are unused (the 16-bit bits are moved as int16)
    traits = FormatTraits.of(fmt or E4M3FN, layout.conversion_mode if fmt else ConversionMode.SATFINITE)
    heads = layout.num_kv_heads
    return {"BLOCK_T": block_t, "H": heads, "H_PAD": triton.next_power_of_2(heads), "D": layout.head_size,
            "D_PAD": triton.next_power_of_2(layout.head_size), "IN_BF16": in_bf16, "FP8": fmt is not None,
            "HW": hw, "CLAMP": clamp, **traits.triton_constexprs()}


def ptx_for_mha(layout: MhaPagedLayout, sm: int) -> str:
    """PTX of the kernel for ``layout`` (bf16 inputs) on NVIDIA ``sm`` (e.g. 90) as it runs there: the hardware
    conversion of the cache's format (rtp_ref.kernels.triton_fp8.hardware_selector's choice on a GPU that lists
    it), no clamp (the conversion is expected to saturate by itself). Needs no GPU. Raises RuntimeError when this
    Triton has no NVIDIA backend or ``layout`` has no fp8 format with a hardware type."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if not has_backend("nvidia"):
        raise RuntimeError("this Triton build has no NVIDIA backend; ptx_for_mha needs triton's 'nvidia' backend")
    if layout.element_format is None or layout.element_format not in HARDWARE_TYPES:
        raise RuntimeError(f"{layout.kv_cache_dtype}: no hardware fp8 type to compile for")
    constexprs = _constexprs(layout, 1, True, HARDWARE_TYPES[layout.element_format], clamp=False)
    pointers = {"key": "*bf16", "value": "*bf16", "key_cache": "*u8", "value_cache": "*u8", "slot_mapping": "*i64",
                "flags": "*i32", "capacity": "i64", "k_scale": "*fp32", "v_scale": "*fp32"}
    scalars = dict.fromkeys(("k_step", "v_step", "tokens", "key_t", "key_h", "value_t", "value_h", "kc_block",
                             "kc_page", "kc_head", "vc_block", "vc_page", "vc_head", "block_size"), "i64")
    signature = {**pointers, **scalars, **dict.fromkeys(constexprs, "constexpr")}
    source = ASTSource(_reshape_and_cache_flash, signature, constexprs)
    compiled = triton.compile(source, target=GPUTarget("cuda", sm, 32), options={"enable_fp_fusion": False})
    return str(compiled.asm["ptx"])


def prepare_triton_mha(layout: MhaPagedLayout, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                       value_cache: torch.Tensor, slot_mapping: torch.Tensor, k_scale: torch.Tensor,
                       v_scale: torch.Tensor, flags: torch.Tensor) -> Launch:
    """The launch of ``reshape_and_cache_flash`` for arguments of this metadata (rtp_ref.kernels.call_signature):
    ``launch(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)`` writes as
    ``rtp_ref.kv.mha_paged.reference_reshape_and_cache_flash`` does, with one Triton launch.

    Checks nothing: its caller (rtp_ref.kernels.mha_indexer_builtin) has checked the arguments' metadata as the
    reference does (validate_mha_args); a slot past the cache sets ``flags`` and is written nowhere
    (rtp_ref.kernels.input_flags). k_scale and v_scale are each per tensor or per head, independently (read at
    their own ``scale_step``). ``nvfp4`` is rtp_ref.kernels.triton_nvfp4_mha's.
    """
    if layout.fp4 is not None:
        return prepare_triton_nvfp4_mha(layout, key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale,
                                        flags)
    tokens, heads = slot_mapping.numel(), layout.num_kv_heads
    if tokens == 0:
        return no_launch
    BLOCK_T = INTERPRETER_BLOCK_T if interpreted() else GPU_BLOCK_T  # a Triton constexpr
    fmt = layout.element_format
    hw = SW if fmt is None else hardware_selector(fmt, layout.conversion_mode, key_cache.device)
    constexprs = _constexprs(layout, BLOCK_T, key.dtype == torch.bfloat16, hw, clamp=not conversion_saturates())
    scalars = (scale_step(k_scale, heads), scale_step(v_scale, heads), tokens,
               key.stride(0), key.stride(1), value.stride(0), value.stride(1),
               key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
               value_cache.stride(0), value_cache.stride(1), value_cache.stride(2), key_cache.shape[1])
    launch: Launch = mha_write_launch(_reshape_and_cache_flash, tokens, BLOCK_T, constexprs, GPU_NUM_WARPS, key_cache,
                                      flags, scalars)
    return launch

"""The MHA paged and indexer writes in CUDA C++ (``csrc/mha_indexer.cu``), for CUDA GPUs.

fp8 conversion: ``hardware`` (``__nv_cvt_float_to_fp8`` with ``__NV_SATFINITE``) for OCP e4m3 and e5m2 under
``satfinite`` where the GPU's platform table lists the format under ``[hardware] fp8_conversion``; ``software``
(integer round-half-even) for every other format or mode, e.g. fnuz of a ROCm table emulated on an
NVIDIA GPU. Inputs are bf16 or fp16 with a contiguous last dimension. Both kernels move up to 8 values a lane
at once, as wide as the call's alignment allows (``mha_vector_width``, ``indexer_vector_width``), and give a row
as many lanes as one such vector a lane needs (``row_lanes``), so that a warp writes several rows side by side. """

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

import torch

from rtp_ref.errors import RtpRefError, UnsupportedLayoutError
from rtp_ref.fp8.formats import E4M3FN
from rtp_ref.kernels.call_signature import Launch, on_device, raw_stream
from rtp_ref.kernels.cuda_build import HARDWARE_NONE, arch_of, build_library, hardware_conversion
from rtp_ref.kernels.format_traits import CUDA_TRAIT_FIELDS, FormatTraits
from rtp_ref.kv.indexer import AMAX_FLOOR, FP8_SCALE_FORMATS, IndexerLayout
from rtp_ref.kv.mha_paged import MhaPagedLayout, scale_step

#: the largest quant block the indexer kernel claims (a power of two: a row's lanes stride over it, V values a lane)
CUDA_MAX_QUANT_BLOCK = 1024


#: tokens one warp of the MHA kernel writes (its lanes take a token's heads 32 / row_lanes at a time) and passes
#: one warp of the indexer kernel makes over (token, quant slice) rows, 32 / row_lanes side by side a pass (1 or
#: 2): a warp loads its tokens' or rows' values before any store, so more put more loads in flight, at the cost of
#: registers; the sweep that chose these is in docs/performance.md
MHA_TOKENS_PER_WARP = 2
INDEXER_ROWS_PER_WARP = 2
#: below this many tokens the MHA kernel gives each warp one step of its tokens' heads (MHA_TOKENS_PER_WARP tokens
#: shared by ceil(heads / heads side by side) warps) instead of all of them: a decode batch then still spreads
#: over the GPU's warps, where a warp a token left 64 tokens' 8 heads to 64 warps walking their heads in turn
MHA_SPLIT_BELOW_TOKENS = 8192


class _MhaParams(ctypes.Structure):
    """Mirror of ``struct RtpRefMhaParams`` in mha_indexer.cu: int64 fields, no padding."""

    _fields_ = [(name, ctypes.c_int64) for name in (
        "key", "value", "key_cache", "value_cache", "slots", "k_scale", "v_scale",
        "num_tokens", "heads", "head_size", "key_t", "key_h", "value_t", "value_h",
        "kc_block", "kc_page", "kc_head", "vc_block", "vc_page", "vc_head", "block_size",
        "fp8", "k_scale_step", "v_scale_step", "input_fp16", "hardware", *CUDA_TRAIT_FIELDS, "capacity", "flags",
        "vec", "rows", "lanes", "split")]


class _IndexerParams(ctypes.Structure):
    """Mirror of ``struct RtpRefIndexerParams`` in mha_indexer.cu: int64 fields, then 2 doubles."""

    _fields_ = [(name, ctypes.c_int64) for name in (
        "k", "cache", "slots", "num_tokens", "k_row", "block_bytes", "block_size", "head_dim", "quant",
        "n_slices", "ue8m0", "input_fp16", "hardware", *CUDA_TRAIT_FIELDS, "capacity", "flags", "vec",
        "rows", "lanes",
    )] + [("divisor", ctypes.c_double), ("floor_", ctypes.c_double)]


@functools.cache
def _library(arch: str) -> ctypes.CDLL:
    lib = build_library("mha_indexer.cu", arch)
    lib.rtp_ref_mha_paged_write.argtypes = [ctypes.POINTER(_MhaParams), ctypes.c_void_p]
    lib.rtp_ref_indexer_write.argtypes = [ctypes.POINTER(_IndexerParams), ctypes.c_void_p]
    lib.rtp_ref_mha_paged_write.restype = lib.rtp_ref_indexer_write.restype = ctypes.c_int
    lib.rtp_ref_mha_indexer_error_string.argtypes = [ctypes.c_int]
    lib.rtp_ref_mha_indexer_error_string.restype = ctypes.c_char_p
    return lib


def _launcher(entry: str, params: ctypes.Structure, device: torch.device) -> Callable[[], None]:
    """Launch ``entry`` with ``params`` (filled by the caller) on the current stream of ``device``."""
    lib = _library(arch_of(device))
    write = getattr(lib, entry)
    index = device.index
    reference = ctypes.byref(params)

    def launch() -> None:
        with on_device(index):
            code = write(reference, raw_stream(index))
        if code != 0:
            raise RuntimeError(f"cuda kernel launch failed: {lib.rtp_ref_mha_indexer_error_string(code).decode()}")

    return launch


def _aligned(t: torch.Tensor, element: int, width: int) -> bool:
    """Whether ``t`` (``element`` bytes a value) starts on a ``width``-byte boundary and every stride but the last
    keeps it there."""
    return t.data_ptr() % width == 0 and all(stride * element % width == 0 for stride in t.stride()[:-1])


def mha_vector_width(head_size: int, inputs: tuple[torch.Tensor, ...], caches: tuple[torch.Tensor, ...],
                     cache_element: int) -> int:
    """The values a lane of the MHA kernel moves at once: the widest of 8, 4, 2 that divides ``head_size`` and for
    which every input (16-bit) and cache (``cache_element`` bytes) start address and token/head stride is aligned
    to the access (the call signature keys launches on start addresses modulo 16, so this holds for every call of
    the launch); 1 otherwise."""
    for vec in (8, 4, 2):
        if head_size % vec == 0 and all(_aligned(t, 2, 2 * vec) for t in inputs) \
                and all(_aligned(c, cache_element, cache_element * vec) for c in caches):
            return vec
    return 1


def row_lanes(values: int, vec: int) -> int:
    """The lanes of a warp one row of ``values`` values takes at ``vec`` values a lane: the fewest that cover it
    with one vector a lane, rounded up to a power of two, at most 32 (a wider row is strided over the warp). A row
    that needs no more than half a warp shares it with others instead of leaving lanes idle."""
    vectors = -(-values // vec)
    return min(32, 1 << (vectors - 1).bit_length())


def mha_split(tokens: int, heads: int, lanes: int) -> int:
    """The warps that share a token's heads in the MHA kernel: one for ``MHA_SPLIT_BELOW_TOKENS`` tokens and more
    (a warp a token), else as many as the token's heads need at ``32 / lanes`` heads a warp (each warp one step)."""
    return 1 if tokens >= MHA_SPLIT_BELOW_TOKENS else -(-heads // (32 // lanes))


def prepare_cuda_mha(layout: MhaPagedLayout, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                     value_cache: torch.Tensor, slot_mapping: torch.Tensor, k_scale: torch.Tensor,
                     v_scale: torch.Tensor, flags: torch.Tensor) -> Launch:
    """The launch of ``reshape_and_cache_flash`` for arguments of this metadata (rtp_ref.kernels.call_signature):
    ``launch(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)`` writes as
    ``rtp_ref.kv.mha_paged.reference_reshape_and_cache_flash`` does, in one CUDA launch. Checks nothing: its
    caller (rtp_ref.kernels.mha_indexer_builtin) has checked the metadata as the reference does (validate_mha_args); a
    slot past the cache sets ``flags`` and is written nowhere (rtp_ref.kernels.input_flags). k_scale and v_scale
    each per tensor or per head, independently."""
    fmt = layout.element_format
    traits = FormatTraits.of(fmt or E4M3FN, layout.conversion_mode).cuda_params()
    vec = mha_vector_width(layout.head_size, (key, value), (key_cache, value_cache), 1 if fmt is not None else 2)
    lanes = row_lanes(layout.head_size, vec)
    params = _MhaParams(
        num_tokens=slot_mapping.numel(), heads=layout.num_kv_heads,
        head_size=layout.head_size, key_t=key.stride(0), key_h=key.stride(1), value_t=value.stride(0),
        value_h=value.stride(1), kc_block=key_cache.stride(0), kc_page=key_cache.stride(1),
        kc_head=key_cache.stride(2), vc_block=value_cache.stride(0), vc_page=value_cache.stride(1),
        vc_head=value_cache.stride(2), block_size=key_cache.shape[1], fp8=fmt is not None,
        k_scale_step=scale_step(k_scale, layout.num_kv_heads), v_scale_step=scale_step(v_scale, layout.num_kv_heads),
        input_fp16=key.dtype == torch.float16,
        hardware=HARDWARE_NONE if fmt is None else hardware_conversion(fmt, layout.conversion_mode, key_cache.device),
        **traits, capacity=key_cache.shape[0] * key_cache.shape[1], flags=flags.data_ptr(), vec=vec,
        rows=MHA_TOKENS_PER_WARP, lanes=lanes, split=mha_split(slot_mapping.numel(), layout.num_kv_heads, lanes),
    )
    run = _launcher("rtp_ref_mha_paged_write", params, key_cache.device)

    def launch(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
               slots: torch.Tensor, k_scale: torch.Tensor, v_scale: torch.Tensor) -> None:
        params.key, params.value, params.slots = key.data_ptr(), value.data_ptr(), slots.data_ptr()
        params.key_cache, params.value_cache = key_cache.data_ptr(), value_cache.data_ptr()
        params.k_scale, params.v_scale = k_scale.data_ptr(), v_scale.data_ptr()
        run()

    return launch



def indexer_vector_width(layout: IndexerLayout, k: torch.Tensor, kv_cache: torch.Tensor) -> int:
    """The values a lane of the indexer kernel moves at once: the widest of 8, 4, 2 that divides the quant block
    and the head and for which ``k`` (16-bit) starts at an aligned address with aligned strides and so do the
    cache and its block stride (the kernel addresses a token's codes as block * block stride + row * head_dim, so
    the token stride, head_dim + scales, does not count); start addresses modulo 16 are part of the call
    signature, so this holds for every call of the launch; 1 otherwise."""
    quant = layout.quant_block_size
    for vec in (8, 4, 2):
        if quant % vec == 0 and layout.head_dim % vec == 0 and _aligned(k, 2, 2 * vec) \
                and kv_cache.data_ptr() % vec == 0 and kv_cache.stride(0) % vec == 0:
            return vec
    return 1


def prepare_cuda_indexer(layout: IndexerLayout, k: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                         scale_fmt: str, flags: torch.Tensor) -> Launch:
    """The launch of ``indexer_k_quant_and_cache`` for arguments of this metadata: ``launch(k, kv_cache,
    slot_mapping, scale_fmt)`` writes as ``rtp_ref.kv.indexer.reference_indexer_k_quant_and_cache`` does, in one
    CUDA launch (``row_lanes`` lanes a token's quant slice, ``indexer_vector_width`` values a lane at once).
    ``quant_block_size`` must be a power of two up to 1024 (the claim the built-in makes). Checks nothing else:
    its caller (rtp_ref.kernels.mha_indexer_builtin) has checked the metadata as the reference does
    (validate_indexer_args); a slot past the cache sets ``flags`` and is written nowhere. It writes fp8 only: an
    E2M1 layout (``mxfp4``) raises UnsupportedLayoutError before anything is launched."""
    if layout.fp4 is not None:
        raise UnsupportedLayoutError(f"scale_fmt {scale_fmt!r}: the cuda indexer writer stores fp8 values only; "
                                     f"valid: {', '.join(FP8_SCALE_FORMATS)}")
    block_size = kv_cache.shape[1]
    quant = layout.quant_block_size
    if quant & (quant - 1) or quant > CUDA_MAX_QUANT_BLOCK:
        raise RtpRefError(f"quant_block_size {quant}: this kernel needs a power of two up to {CUDA_MAX_QUANT_BLOCK}")
    vec = indexer_vector_width(layout, k, kv_cache)
    params = _IndexerParams(
        num_tokens=slot_mapping.numel(), k_row=k.stride(0), block_bytes=kv_cache.stride(0), block_size=block_size,
        head_dim=layout.head_dim, quant=quant, n_slices=layout.scales_per_token, ue8m0=scale_fmt == "ue8m0",
        input_fp16=k.dtype == torch.float16,
        hardware=hardware_conversion(layout.element_format, layout.conversion_mode, kv_cache.device),
        divisor=layout.scale_divisor, floor_=AMAX_FLOOR,
        **FormatTraits.of(layout.element_format, layout.conversion_mode).cuda_params(),
        capacity=kv_cache.shape[0] * block_size, flags=flags.data_ptr(), vec=vec, rows=INDEXER_ROWS_PER_WARP,
        lanes=row_lanes(quant, vec),
    )
    run = _launcher("rtp_ref_indexer_write", params, kv_cache.device)

    def launch(k: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor, scale_fmt: str) -> None:
        params.k, params.cache, params.slots = k.data_ptr(), kv_cache.data_ptr(), slots.data_ptr()
        run()

    return launch

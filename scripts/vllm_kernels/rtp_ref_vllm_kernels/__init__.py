"""vLLM's production KV-cache CUDA kernels as rtp-ref kernels (entry-point group ``rtp_ref.kernels``).

Five kernels, one per op vLLM has, each calling vLLM's own host function (csrc/cache_kernels.cu, built from
``$VLLM_SRC`` at the first call: rtp_ref_vllm_kernels._build) through ``torch.ops.rtp_vllm``:

=======================  ===============================  =========================================================
kernel                   rtp-ref op                       vLLM op (kv_cache_dtype / scale_fmt passed as named)
=======================  ===============================  =========================================================
``vllm-mla``             concat_and_cache_mla             concat_and_cache_mla: auto, fp8, fp8_ds_mla
``vllm-mha``             reshape_and_cache_flash          reshape_and_cache_flash: auto, fp8 (e4m3), fp8_e5m2
``vllm-indexer``         indexer_k_quant_and_cache        indexer_k_quant_and_cache: scale_fmt none, ue8m0
``vllm-gather``          gather_and_maybe_dequant_cache   gather_and_maybe_dequant_cache (auto, fp8);
                                                          cp_gather_and_upconvert_fp8_kv_cache (fp8_ds_mla)
``vllm-indexer-gather``  cp_gather_indexer_k_quant_cache  cp_gather_indexer_k_quant_cache
=======================  ===============================  =========================================================

Each claims only the variants vLLM's CUDA build for the GPU implements and raises before calling vLLM for any other
(vLLM would take some of them under another meaning: a ``scale_fmt`` other than ``ue8m0``/``mxfp8`` is written as
plain float scales). The arguments are passed to vLLM as rtp-ref passes them (fp8 caches are uint8 tensors, which
is what vLLM allocates too); what the adapter checks first is only what vLLM's kernel assumes without checking and
would otherwise read or write wrongly (its limits, declared in ``input_domain``/``input_requirements``: the scaled
writes refuse fp16 inputs, ``_FP16_AMAX``), or what would fault on the device. Where vLLM's op writes what no
reader can use without raising (a bf16 input into an fp16 cache under ``auto``), the adapter lets it: the
certification reports vLLM's behaviour, not the adapter's. One exception: a write of no tokens returns without
calling vLLM, whose writers would launch a grid of zero blocks (an invalid configuration that vLLM does not check
and that CUDA keeps as its last error, to be raised by whichever torch operation next checks it).

Importing this module builds nothing and needs no GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from rtp_ref_vllm_kernels._build import load_ops, vllm_src

__all__ = ["VllmGather", "VllmIndexer", "VllmIndexerGather", "VllmMha", "VllmMla", "kernels", "load_ops",
           "vllm_src"]
__version__ = "0.1.0"

#: the quant block vLLM's indexer kernels handle: one warp of 32 lanes x 4 values reduces one amax (the write) and
#: copies one scale per 128 bytes of codes (the gather), whatever quant_block_size says
VLLM_INDEXER_QUANT_BLOCK = 128
#: the row widths (kv_lora_rank + rope_dim) vLLM's gather_and_maybe_dequant_cache is instantiated for
VLLM_GATHER_WIDTHS = (320, 512, 576)
#: a declared input domain (rtp_ref.cases.domain): argument dimension -> the values taken
Domain = dict[str, tuple[str | int, ...]]
_FP8_CACHE_DTYPES = (torch.uint8, torch.float8_e4m3fn, torch.float8_e5m2)
#: why the scaled writes (the indexer's, fp8_ds_mla's) refuse fp16: vLLM dispatches fp16 inputs as uint16_t
#: (quant_utils.cuh, DISPATCH_BY_KV_CACHE_DTYPE) and those kernels take the amax of ``fabsf(float(x))``, the fp16
#: value's bit pattern read as an integer, so every scale is wrong (the codes themselves convert the bits as fp16);
#: vLLM calls them with bf16 only (DeepSeek's checkpoints)
_FP16_AMAX = ("vLLM's kernel computes the scale's amax from fp16 bit patterns read as integers (fp16 is dispatched "
              "as uint16_t): its scales are wrong for fp16 inputs; valid: bf16")


def _fail(kernel: str, message: str) -> None:
    raise ValueError(f"{kernel}: {message}")


def _unclaimed(kernel: str, what: str, value: str, claims: Sequence[str]) -> None:
    raise NotImplementedError(f"{kernel}: vLLM's CUDA kernel does not write {what}={value!r} on this build; "
                              f"valid: {', '.join(claims)}")


def _on_cuda(kernel: str, device: torch.device, **tensors: torch.Tensor | None) -> None:
    """Every tensor given is on ``device``, a CUDA device (vLLM dereferences each on the GPU)."""
    if device.type != "cuda":
        _fail(kernel, f"tensors on {device}; vLLM's kernels run on CUDA devices only")
    for name, t in tensors.items():
        if t is not None and t.device != device:
            _fail(kernel, f"{name} is on {t.device}, the others on {device}")


def _slots_int64(kernel: str, slot_mapping: torch.Tensor) -> None:
    # vLLM reads slot_mapping through an int64_t pointer (its const_data_ptr<int64_t> refuses another dtype too)
    if slot_mapping.dtype != torch.int64 or slot_mapping.dim() != 1:
        _fail(kernel, f"slot_mapping {slot_mapping.dtype} {tuple(slot_mapping.shape)}; vLLM takes a 1-D int64 one")


def _index_int32(kernel: str, **tensors: torch.Tensor | None) -> None:
    for name, t in tensors.items():
        if t is not None and (t.dtype != torch.int32 or not t.is_contiguous()):
            _fail(kernel, f"{name} {t.dtype}{'' if t.is_contiguous() else ' (strided)'}; vLLM reads contiguous "
                          f"int32 index tensors only")


def _aligned(t: torch.Tensor, width: int) -> bool:
    """``t`` starts on a ``width``-byte boundary and every stride but the last keeps it there."""
    return t.data_ptr() % width == 0 and all(s * t.element_size() % width == 0 for s in t.stride()[:-1])


def _float32_scale(kernel: str, name: str, scale: torch.Tensor, numel: Sequence[int] = (1,)) -> None:
    if scale.dtype != torch.float32 or scale.numel() not in numel:
        _fail(kernel, f"{name} {scale.dtype} {tuple(scale.shape)}; vLLM reads a float32 tensor of "
                      f"{' or '.join(map(str, numel))} value(s)")


class _VllmKernel:
    """What the five share: CUDA only, vLLM's ops built and loaded at the first call (not at import)."""

    name: str
    op: str
    devices = ("cuda",)
    #: the report's column for the fp8 conversion: vLLM's kernels convert with __nv_cvt_float_to_fp8 (satfinite)
    conversion_path = "hardware"

    @staticmethod
    def _ops() -> Any:
        return load_ops()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}: vLLM's {self.op}>"


class VllmMla(_VllmKernel):
    """vLLM's ``concat_and_cache_mla``: ``auto`` (bits copied), ``fp8`` (e4m3, ``x / scale``), ``fp8_ds_mla``
    (656-byte rows: 4 tiles of 128 e4m3 codes with power-of-two float32 tile scales, bf16/fp16 rope)."""

    name = "vllm-mla"
    op = "concat_and_cache_mla"
    kv_cache_dtypes = ("auto", "fp8", "fp8_ds_mla")
    #: fp8_ds_mla takes bf16 inputs only (``_FP16_AMAX``); auto and fp8 take fp16 too (their fp16 cases, outside
    #: the declared domain, are run and graded)
    input_domain: ClassVar[Domain] = {"slot_mapping": ("int64",), "input": ("bf16",)}
    #: fp8_ds_mla loads kv_c 8 values (16 bytes) at a time and k_pe 2 at a time (csrc/cache_kernels.cu,
    #: concat_and_cache_ds_mla_kernel): an unaligned input faults there; auto and fp8 copy value by value and take
    #: any alignment (their unaligned cases are run and graded)
    input_requirements = ("aligned16",)
    graph_safe = True

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        n = self.name
        if kv_cache_dtype not in self.kv_cache_dtypes:
            _unclaimed(n, "kv_cache_dtype", kv_cache_dtype, self.kv_cache_dtypes)
        _on_cuda(n, kv_cache.device, kv_c=kv_c, k_pe=k_pe, slot_mapping=slot_mapping, scale=scale)
        _slots_int64(n, slot_mapping)
        _float32_scale(n, "scale", scale)
        if kv_c.dim() != 2 or k_pe.dim() != 2 or kv_cache.dim() != 3:
            _fail(n, "kv_c [T, R], k_pe [T, P] and kv_cache [blocks, block_size, entry] expected")
        if kv_c.stride(1) != 1 or k_pe.stride(1) != 1 or kv_cache.stride(2) != 1:
            _fail(n, "vLLM addresses kv_c, k_pe and the cache rows as contiguous in their last dimension")
        if kv_cache_dtype == "fp8_ds_mla":
            if kv_c.dtype == torch.float16 or k_pe.dtype == torch.float16:
                _fail(n, f"fp8_ds_mla from fp16 inputs: {_FP16_AMAX}")
            if not (_aligned(kv_c, 16) and _aligned(k_pe, 4) and _aligned(kv_cache, 8)):
                _fail(n, "fp8_ds_mla: vLLM's kernel loads kv_c 16 bytes and k_pe 4 bytes at a time and stores the "
                         "cache 8 bytes at a time; these inputs are not aligned to that")
        elif kv_cache_dtype == "fp8" and kv_cache.dtype not in _FP8_CACHE_DTYPES:
            _fail(n, f"fp8: the cache is {kv_cache.dtype}; vLLM writes fp8 codes into a byte cache")
        if slot_mapping.numel() == 0:
            return  # module doc: no launch of zero blocks
        if min(kv_c.shape[0], k_pe.shape[0]) < slot_mapping.numel():
            _fail(n, f"kv_c/k_pe have fewer rows than the {slot_mapping.numel()} slots")
        self._ops().concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale, False)


class VllmMha(_VllmKernel):
    """vLLM's ``reshape_and_cache_flash``: ``auto``, ``fp8`` (vLLM's ``fp8``: e4m3 on CUDA) and ``fp8_e5m2``, per
    tensor or per head scales (both of one shape), NHD or HND caches (read from the strides)."""

    name = "vllm-mha"
    op = "reshape_and_cache_flash"
    kv_cache_dtypes = ("auto", "fp8", "fp8_e5m2")
    #: vLLM requires k_scale and v_scale of one shape ("k_scale and v_scale must have the same shape"): the
    #: mixed cases ([1] and [H]) are refused before anything is launched
    input_domain: ClassVar[Domain] = {"slot_mapping": ("int64",), "scales": ("tensor", "head", "0d")}
    graph_safe = True

    def __call__(self, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                 slot_mapping: torch.Tensor, kv_cache_dtype: str, k_scale: torch.Tensor,
                 v_scale: torch.Tensor) -> None:
        n = self.name
        if kv_cache_dtype not in self.kv_cache_dtypes:
            # nvfp4 needs vLLM's SM100/SM120 build (ENABLE_NVFP4_SM100/SM120), not this one
            _unclaimed(n, "kv_cache_dtype", kv_cache_dtype, self.kv_cache_dtypes)
        _on_cuda(n, key_cache.device, key=key, value=value, value_cache=value_cache, slot_mapping=slot_mapping,
                 k_scale=k_scale, v_scale=v_scale)
        _slots_int64(n, slot_mapping)
        if key.dim() != 3 or value.shape[1:] != key.shape[1:] or key_cache.dim() != 4:
            _fail(n, "key and value [T, H, D] of one head size and caches [blocks, block_size, H, D] expected")
        heads, head_size = key.shape[1], key.shape[2]
        # vLLM addresses a token's head h at key + t * stride(0) + h * head_size (and value likewise)
        for label, t in (("key", key), ("value", value)):
            if t.stride(2) != 1 or (heads > 1 and t.stride(1) != head_size):
                _fail(n, f"{label} strides {t.stride()}: vLLM reads a token's heads as one contiguous row")
        # vLLM takes the block, page and head strides from key_cache and uses them for value_cache too
        if value_cache.shape != key_cache.shape or value_cache.stride() != key_cache.stride() \
                or key_cache.stride(3) != 1:
            _fail(n, f"key_cache {tuple(key_cache.shape)} {key_cache.stride()} and value_cache "
                     f"{tuple(value_cache.shape)} {value_cache.stride()}: vLLM addresses both through key_cache's "
                     f"strides (last dimension contiguous)")
        _float32_scale(n, "k_scale", k_scale, (1, heads))
        _float32_scale(n, "v_scale", v_scale, (1, heads))
        if k_scale.shape != v_scale.shape:
            # vLLM's own check, raised here: in this build its failed TORCH_CHECK ended the process (seen on an H100,
            # certify's mixed-scale cases: the worker died) instead of raising through the op
            _fail(n, f"k_scale {tuple(k_scale.shape)} and v_scale {tuple(v_scale.shape)}: vLLM requires one shape")
        if kv_cache_dtype != "auto" and key_cache.dtype not in _FP8_CACHE_DTYPES:
            _fail(n, f"{kv_cache_dtype}: the caches are {key_cache.dtype}; vLLM writes fp8 codes into byte caches")
        if slot_mapping.numel() == 0:
            return  # module doc: no launch of zero blocks
        if key.shape[0] < slot_mapping.numel():
            _fail(n, f"key/value have fewer rows than the {slot_mapping.numel()} slots")
        self._ops().reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype,
                                            k_scale, v_scale)


class VllmIndexer(_VllmKernel):
    """vLLM's ``indexer_k_quant_and_cache``: e4m3 codes and float32 scales (``none``) or power-of-two float32 scales
    (``ue8m0``), in quant blocks of 128 (module doc)."""

    name = "vllm-indexer"
    op = "indexer_k_quant_and_cache"
    scale_fmts = ("none", "ue8m0")
    input_domain: ClassVar[Domain] = {"slot_mapping": ("int64",), "input": ("bf16",),
                                      "quant_block": (VLLM_INDEXER_QUANT_BLOCK,)}
    #: vLLM reads k as ``k[t * head_dim + i]``, ignoring its row stride, 4 values (8 bytes) at a time
    input_requirements = ("contiguous",)
    graph_safe = True

    def __call__(self, k: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor, quant_block_size: int,
                 scale_fmt: str) -> None:
        n = self.name
        if scale_fmt not in self.scale_fmts:
            # vLLM writes ue8m0 scales for "ue8m0" (and packed MX bytes for "mxfp8"), plain float32 for any other
            # string: an unclaimed name must not reach it
            _unclaimed(n, "scale_fmt", scale_fmt, self.scale_fmts)
        _on_cuda(n, kv_cache.device, k=k, slot_mapping=slot_mapping)
        _slots_int64(n, slot_mapping)
        if k.dim() != 2 or kv_cache.dim() != 3 or kv_cache.dtype != torch.uint8:
            _fail(n, "k [T, head_dim] and a uint8 kv_cache [blocks, block_size, row] expected")
        if k.dtype != torch.bfloat16:
            _fail(n, f"k {k.dtype}: " + (_FP16_AMAX if k.dtype == torch.float16 else "vLLM takes bf16 or fp16"))
        head_dim = k.shape[1]
        if quant_block_size != VLLM_INDEXER_QUANT_BLOCK or head_dim % VLLM_INDEXER_QUANT_BLOCK:
            _fail(n, f"head_dim {head_dim}, quant_block_size {quant_block_size}: vLLM's kernel reduces one amax "
                     f"over 128 values and writes one scale per 128 values; valid: quant_block_size 128 and a "
                     f"head_dim that is a multiple of it")
        if not k.is_contiguous() or k.data_ptr() % 8:
            _fail(n, "vLLM reads k as a contiguous [T, head_dim] array, 8 bytes at a time; k is not one")
        row = head_dim + 4 * head_dim // quant_block_size
        if kv_cache.shape[2] != row or kv_cache.stride(2) != 1 or kv_cache.stride(1) != row:
            _fail(n, f"kv_cache {tuple(kv_cache.shape)} {kv_cache.stride()}: vLLM lays a block out as every "
                     f"token's {head_dim} codes then their scales ({row} bytes a token, rows contiguous)")
        tokens = slot_mapping.numel()
        if tokens == 0:
            return  # module doc: no launch of zero blocks
        if k.shape[0] < tokens:
            _fail(n, f"k has {k.shape[0]} rows for {tokens} slots")
        # vLLM's op takes its token count from k (one thread block a row, each reading slot_mapping[row]): rows past
        # the slot mapping (an engine's padded batch) are not passed, as vLLM's caller does not pass them
        self._ops().indexer_k_quant_and_cache(k[:tokens], kv_cache, slot_mapping, quant_block_size, scale_fmt)


class VllmGather(_VllmKernel):
    """vLLM's MLA cache read: ``gather_and_maybe_dequant_cache`` for ``auto`` and ``fp8``, and, for ``fp8_ds_mla``,
    ``cp_gather_and_upconvert_fp8_kv_cache`` (the reader vLLM uses for that layout: bf16 rows only)."""

    name = "vllm-gather"
    op = "gather_and_maybe_dequant_cache"
    kv_cache_dtypes = ("auto", "fp8", "fp8_ds_mla")
    #: vLLM's gathers read int32 index tensors only; its fp8_ds_mla reader writes bf16 only and under ``auto`` it
    #: reads the cache as dst's own dtype: dst bf16 (what vLLM gathers DeepSeek's cache into) is the domain, and
    #: outside it the adapter refuses what vLLM cannot do (auto into another dtype, fp8_ds_mla into fp16 or fp32)
    #: and runs the rest (fp8 into fp16 or fp32), which is graded as usual
    input_domain: ClassVar[Domain] = {"block_table": ("int32",), "dst": ("bf16",)}
    # no graph_safe: auto and fp8 are capturable; fp8_ds_mla reads the token count on the host and refuses capture

    def __call__(self, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
                 cu_seq_lens: torch.Tensor, kv_cache_dtype: str, scale: torch.Tensor,
                 seq_starts: torch.Tensor | None = None) -> None:
        n = self.name
        if kv_cache_dtype not in self.kv_cache_dtypes:
            _unclaimed(n, "kv_cache_dtype", kv_cache_dtype, self.kv_cache_dtypes)
        _on_cuda(n, kv_cache.device, dst=dst, block_table=block_table, cu_seq_lens=cu_seq_lens, scale=scale,
                 seq_starts=seq_starts)
        _index_int32(n, block_table=block_table, cu_seq_lens=cu_seq_lens, seq_starts=seq_starts)
        if kv_cache.dim() != 3 or dst.dim() != 2 or block_table.dim() != 2 or cu_seq_lens.dim() != 1:
            _fail(n, "kv_cache [blocks, block_size, entry], dst [rows, width], block_table [batch, blocks] and "
                     "cu_seq_lens [batch + 1] expected")
        if block_table.shape[0] + 1 != cu_seq_lens.shape[0]:
            _fail(n, f"block_table has {block_table.shape[0]} rows, cu_seq_lens {cu_seq_lens.shape[0]} entries")
        # vLLM's readers store dst 16 bytes at a time
        if dst.stride(1) != 1 or not _aligned(dst, 16):
            _fail(n, "vLLM stores dst 16 bytes at a time: dst rows must be contiguous and 16-byte aligned")
        _float32_scale(n, "scale", scale)
        if kv_cache_dtype == "fp8_ds_mla":
            self._ds_mla(kv_cache, dst, block_table, cu_seq_lens, seq_starts)
            return
        width = dst.shape[1]
        if width not in VLLM_GATHER_WIDTHS or kv_cache.shape[2] != width or kv_cache.stride(2) != 1:
            _fail(n, f"dst width {width}, cache entry {kv_cache.shape[2]}: vLLM's gather is built for rows of "
                     f"{'/'.join(map(str, VLLM_GATHER_WIDTHS))} values, stored contiguous in the cache")
        if kv_cache_dtype == "auto" and kv_cache.dtype != dst.dtype:
            _fail(n, f"auto: a {kv_cache.dtype} cache into a {dst.dtype} dst; vLLM's auto gather reads the cache "
                     f"as dst's own dtype (no conversion)")
        if kv_cache_dtype == "fp8" and kv_cache.dtype not in _FP8_CACHE_DTYPES:
            _fail(n, f"fp8: the cache is {kv_cache.dtype}; vLLM reads fp8 codes from a byte cache")
        if not _aligned(kv_cache, 16 * kv_cache.element_size() // dst.element_size()):
            _fail(n, "vLLM loads a cache row as vectors of 16 bytes of dst; this cache is not aligned to that")
        # token_to_seq is unused by vLLM's implementation (cache_kernels.cu: "(void)token_to_seq"): any tensor; the
        # token count is dst's rows, which needs no sync: rows past cu_seq_lens[-1] are never written
        self._ops().gather_and_maybe_dequant_cache(kv_cache, dst, block_table, cu_seq_lens, cu_seq_lens,
                                                   dst.shape[0], kv_cache_dtype, scale, seq_starts)

    def _ds_mla(self, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
                cu_seq_lens: torch.Tensor, seq_starts: torch.Tensor | None) -> None:
        n = self.name
        if dst.dtype != torch.bfloat16:
            _fail(n, f"fp8_ds_mla: dst {dst.dtype}; vLLM's fp8_ds_mla reader writes bf16 only")
        if dst.shape[1] != 576 or kv_cache.dtype not in _FP8_CACHE_DTYPES or kv_cache.shape[2] < 656:
            _fail(n, "fp8_ds_mla: a byte cache of 656-byte rows into a dst of 576 columns expected")
        if kv_cache.stride(2) != 1 or not _aligned(kv_cache, 16):
            _fail(n, "fp8_ds_mla: vLLM loads cache rows 8 and 16 bytes at a time; this cache is not aligned")
        if dst.is_cuda and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"{n}: fp8_ds_mla needs the gathered token count on the host (vLLM's caller passes "
                               f"a dst of exactly that many rows), which cannot be read during a CUDA graph capture")
        # vLLM's upconvert gather fills its dst to the last row (the last sequence ends at dst's end): pass exactly
        # the rows the sequences fill, as vLLM's caller does
        total = int(cu_seq_lens[-1])
        if total == 0:
            return
        self._ops().cp_gather_and_upconvert_fp8_kv_cache(kv_cache, dst[:total], block_table, cu_seq_lens[:-1],
                                                         block_table.shape[0], seq_starts)


class VllmIndexerGather(_VllmKernel):
    """vLLM's ``cp_gather_indexer_k_quant_cache``: the indexer cache's codes and scales copied into dense rows (for
    caches of quant blocks of 128, module doc)."""

    name = "vllm-indexer-gather"
    op = "cp_gather_indexer_k_quant_cache"
    scale_fmts = ("none", "ue8m0")
    input_domain: ClassVar[Domain] = {"block_table": ("int32",), "quant_block": (VLLM_INDEXER_QUANT_BLOCK,)}

    def __call__(self, kv_cache: torch.Tensor, dst_k: torch.Tensor, dst_scale: torch.Tensor,
                 block_table: torch.Tensor, cu_seq_lens: torch.Tensor) -> None:
        n = self.name
        _on_cuda(n, kv_cache.device, dst_k=dst_k, dst_scale=dst_scale, block_table=block_table,
                 cu_seq_lens=cu_seq_lens)
        _index_int32(n, block_table=block_table, cu_seq_lens=cu_seq_lens)
        if kv_cache.dim() != 3 or dst_k.dim() != 2 or dst_scale.dim() != 2 or dst_scale.shape[0] != dst_k.shape[0]:
            _fail(n, "kv_cache [blocks, block_size, row], dst_k [rows, head_dim], dst_scale [rows, scale bytes]")
        if block_table.dim() != 2 or block_table.shape[0] + 1 != cu_seq_lens.shape[0]:
            _fail(n, "block_table [batch, blocks] and cu_seq_lens [batch + 1] expected")
        head_dim = dst_k.shape[1] * dst_k.element_size()
        scale_bytes = dst_scale.shape[1] * dst_scale.element_size()
        # vLLM derives the quant block from the widths (head_dim * 4 / dst_scale.size(1)) and copies one scale per
        # 128 bytes of codes
        if head_dim % VLLM_INDEXER_QUANT_BLOCK or scale_bytes * VLLM_INDEXER_QUANT_BLOCK != 4 * head_dim:
            _fail(n, f"dst_k {tuple(dst_k.shape)}, dst_scale {tuple(dst_scale.shape)}: vLLM's gather copies one "
                     f"float32 scale per 128 codes; valid: quant blocks of 128")
        if kv_cache.shape[2] * kv_cache.element_size() != head_dim + scale_bytes:
            _fail(n, f"kv_cache rows of {kv_cache.shape[2]} do not hold {head_dim} codes and {scale_bytes} scale bytes")
        # it copies 16 bytes at a time and addresses dst_scale from dst_k's row index (both dense)
        # (the cache through its block stride only: a token's codes are at row * head_dim within the block)
        if not (dst_k.is_contiguous() and dst_scale.is_contiguous() and _aligned(dst_k, 16)
                and dst_scale.data_ptr() % 4 == 0 and kv_cache.data_ptr() % 16 == 0
                and kv_cache.stride(0) * kv_cache.element_size() % 16 == 0):
            _fail(n, "vLLM copies 16 bytes at a time into dense dst_k and dst_scale: they must be contiguous and "
                     "aligned (and the cache's blocks 16-byte aligned)")
        self._ops().cp_gather_indexer_k_quant_cache(kv_cache, dst_k, dst_scale, block_table, cu_seq_lens)


def kernels() -> list[_VllmKernel]:
    """The entry point: vLLM's five cache kernels (nothing is built until one is called)."""
    return [VllmMla(), VllmMha(), VllmIndexer(), VllmGather(), VllmIndexerGather()]

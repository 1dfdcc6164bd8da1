# Triton ships no type information: every @triton.jit is an untyped decorator to mypy.
# mypy: disable-error-code="untyped-decorator"
"""The ``triton-gather`` built-in reader: ``gather_and_maybe_dequant_cache`` for every MLA layout in one Triton
kernel, on CUDA, ROCm and Triton's interpreter; and ``triton-indexer-gather``
(``cp_gather_indexer_k_quant_cache``: the indexer cache's bytes, copied row by row).

One program fills ``ROWS`` rows of ``dst`` (one on a GPU; a block of rows in Triton's interpreter, which pays for
every operation of every program in Python, so a row per program made the readers most of a CPU certify run). Each
row finds its sequence by a binary search of ``cu_seq_lens`` (no host-side search, no per-sequence launch), its
cache slot through the block table, and decodes the entry from the layout's field table (``WritePlan``, as the
writers do). Bytes are read one at a time and assembled into 16- and 32-bit values, so no field needs any alignment.

fp8 codes are decoded with integer arithmetic from the format's traits (the exact value: normal codes become
float32 bits, subnormal ones an exact product), multiplied by their scale in float32 (one rounding, as the
reference), and rounded once to ``dst``'s dtype: bf16 in integer arithmetic (nearest even), fp16 by Triton's
nearest-even conversion; a NaN is stored as the dtype's canonical bits (rtp_ref.kv.gather.CANONICAL_NAN).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from rtp_ref.kernels.call_signature import Launch, no_launch, on_device
from rtp_ref.kernels.triton_fp8 import interpreted
from rtp_ref.kernels.triton_launch import CompiledLaunch
from rtp_ref.kernels.write_plan import WritePlan
from rtp_ref.kv.gather import CANONICAL_NAN, read16
from rtp_ref.kv.indexer import IndexerLayout
from rtp_ref.kv.layouts import MlaLayout

#: ``dst`` dtype -> the kernel's OUT selector
_OUT = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
#: ``dst`` dtype -> the integer view the kernel stores bits through
_BITS_VIEW = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


@triton.jit
def _bytes(ptr: tl.tensor, offs: tl.tensor, mask: tl.tensor, N: tl.constexpr) -> tl.tensor:
    """The little-endian ``N``-byte unsigned values at byte offsets ``offs`` (int32)."""
    v = tl.load(ptr + offs, mask=mask, other=0).to(tl.int32)
    for k in tl.static_range(1, N):
        v = v | (tl.load(ptr + offs + k, mask=mask, other=0).to(tl.int32) << (8 * k))
    return v


@triton.jit
def _fp8_decode(c: tl.tensor, MAN_BITS: tl.constexpr, EMIN: tl.constexpr, MAX_CODE: tl.constexpr,
                NEG_ZERO: tl.constexpr, HAS_INF: tl.constexpr, INF_CODE: tl.constexpr,
                SUB_STEP: tl.constexpr) -> tl.tensor:
    """The exact float32 value of fp8 codes ``c`` (int32 0..255) of the format the traits describe."""
    mag = c & 0x7F
    e = mag >> MAN_BITS
    m = mag & ((1 << MAN_BITS) - 1)
    normal = (((e - 1 + EMIN + 127) << 23) | (m << (23 - MAN_BITS))).to(tl.float32, bitcast=True)
    v = tl.where(e == 0, m.to(tl.float32) * SUB_STEP, normal)
    # the sign as a bit: Triton compiles -v as 0 - v, which turns a -0.0 code into +0.0 on the GPU
    sign = (c >> 7) << 31
    v = (v.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)
    nan = mag > MAX_CODE
    if HAS_INF:
        v = tl.where(mag == INF_CODE, (sign | 0x7F800000).to(tl.float32, bitcast=True), v)
        nan = nan & (mag != INF_CODE)
    if not NEG_ZERO:
        nan = nan | (c == 0x80)
    return tl.where(nan, (tl.zeros_like(c) + 0x7FC00000).to(tl.float32, bitcast=True), v)


@triton.jit
def _read16(cache: tl.tensor, offs: tl.tensor, mask: tl.tensor, IN_BF16: tl.constexpr) -> tl.tensor:
    """The float32 value of the 16-bit fields at byte offsets ``offs`` (bf16 or fp16 bits)."""
    bits = _bytes(cache, offs, mask, 2)
    if IN_BF16:
        return (bits << 16).to(tl.float32, bitcast=True)
    return bits.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _store_row(dst: tl.tensor, offs: tl.tensor, v: tl.tensor, mask: tl.tensor, OUT: tl.constexpr,
               NAN_OUT: tl.constexpr) -> None:
    """Store float32 ``v`` rounded to the dst dtype (OUT: 0 fp32, 1 bf16, 2 fp16) through its integer view."""
    nan = v != v
    if OUT == 0:
        bits = v.to(tl.int32, bitcast=True)
    elif OUT == 1:
        b = tl.where(nan, 0, v.to(tl.int32, bitcast=True))
        bits = (b + 0x7FFF + ((b >> 16) & 1)) >> 16  # nearest even; an arithmetic shift keeps the sign bits
    else:
        bits = v.to(tl.float16).to(tl.int16, bitcast=True).to(tl.int32)
    bits = tl.where(nan, NAN_OUT, bits)
    if OUT == 0:
        tl.store(dst + offs, bits, mask=mask)
    else:
        tl.store(dst + offs, bits.to(tl.int16), mask=mask)


@triton.jit
def _decode_part(cache: tl.tensor, row: tl.tensor, block_base: tl.tensor, offset: tl.tensor, cols: tl.tensor,
                 mask: tl.tensor, tensor_scale: tl.tensor, block_size: tl.tensor, MODE: tl.constexpr,
                 OFF: tl.constexpr, DATA_BYTES: tl.constexpr, TRAIL_BYTES: tl.constexpr, TILE: tl.constexpr,
                 SCALE_UE8M0: tl.constexpr, SCALE_TRAILING: tl.constexpr, SCALE_OFF: tl.constexpr,
                 IN_BF16: tl.constexpr, MAN_BITS: tl.constexpr, EMIN: tl.constexpr, MAX_CODE: tl.constexpr,
                 NEG_ZERO: tl.constexpr, HAS_INF: tl.constexpr, INF_CODE: tl.constexpr,
                 SUB_STEP: tl.constexpr) -> tl.tensor:
    """One value field of the entry at byte ``row`` as float32: a 16-bit copy (MODE 0), fp8 times the per-tensor
    scale (1) or times its tile's scale (2)."""
    if MODE == 0:
        return _read16(cache, row + OFF + 2 * cols, mask, IN_BF16)
    codes = tl.load(cache + row + OFF + cols, mask=mask, other=0).to(tl.int32)
    v = _fp8_decode(codes, MAN_BITS, EMIN, MAX_CODE, NEG_ZERO, HAS_INF, INF_CODE, SUB_STEP)
    if MODE == 1:
        return v * tensor_scale
    if SCALE_TRAILING:
        sbase = block_base + block_size * DATA_BYTES + offset * TRAIL_BYTES + SCALE_OFF
    else:
        sbase = row + SCALE_OFF
    tile = cols // TILE
    if SCALE_UE8M0:  # 2^(e - 127): e << 23 as float32 bits; e = 0 is the subnormal 2^-127, 255 NaN
        e = tl.load(cache + sbase + tile, mask=mask, other=127).to(tl.int32)
        sbits = tl.where(e == 0, 0x00400000, tl.where(e == 0xFF, 0x7FC00000, e << 23))
    else:
        sbits = _bytes(cache, sbase + 4 * tile, mask, 4)
    return v * sbits.to(tl.float32, bitcast=True)


@triton.jit
def _sequence_of(r: tl.tensor, cu: tl.tensor, batch: tl.tensor, BATCH_BITS: tl.constexpr) -> tl.tensor:
    """The sequence each row of ``r`` (a vector of rows) belongs to: how many ``cu[1..batch]`` are at or before it
    (``batch``: past them). ``cu`` never decreases (checked by the caller), so that is the largest ``k <= batch``
    with ``cu[k] <= r``, found by a binary search: ``BATCH_BITS`` loads a row (``2**BATCH_BITS > batch``), where
    counting read the whole vector (at 2M tokens in 2,048 sequences a 2M-program grid read 4G entries)."""
    b = tl.zeros_like(r)
    for i in tl.static_range(BATCH_BITS):
        candidate = b + (1 << (BATCH_BITS - 1 - i))
        inside = candidate <= batch
        end = tl.load(cu + candidate, mask=inside, other=0).to(tl.int64)
        b = tl.where(inside & (end <= r), candidate, b)
    return b


@triton.jit
def _rows(n_rows: tl.tensor, cu: tl.tensor, batch: tl.tensor, table: tl.tensor, table_row: tl.tensor,
          table_col: tl.tensor, block_size: tl.tensor, starts: tl.tensor, ROWS: tl.constexpr,
          BATCH_BITS: tl.constexpr, HAS_STARTS: tl.constexpr) -> tuple[tl.tensor, tl.tensor, tl.tensor, tl.tensor]:
    """This program's rows of ``dst``, which of them belong to a sequence (rows past ``n_rows`` or at or past
    ``cu[batch]`` are left alone), and each row's cache block and offset in it (0 where not live)."""
    r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    b = _sequence_of(r, cu, batch, BATCH_BITS)
    live = (r < n_rows) & (b < batch)
    pos = r - tl.load(cu + b, mask=live, other=0).to(tl.int64)
    if HAS_STARTS:
        pos += tl.load(starts + b, mask=live, other=0).to(tl.int64)
    logical = pos // block_size
    block = tl.load(table + b * table_row + logical * table_col, mask=live, other=0).to(tl.int64)
    return r, live, block, pos - logical * block_size


@triton.jit
def _mla_gather(
    cache: tl.tensor, dst: tl.tensor, table: tl.tensor, cu: tl.tensor, starts: tl.tensor, scale_ptr: tl.tensor,
    batch: tl.tensor, block_size: tl.tensor, block_bytes: tl.tensor, table_row: tl.tensor, table_col: tl.tensor,
    dst_row: tl.tensor, dst_col: tl.tensor, n_rows: tl.tensor, ROWS: tl.constexpr,
    R: tl.constexpr, P: tl.constexpr, R_PAD: tl.constexpr, P_PAD: tl.constexpr, BATCH_BITS: tl.constexpr,
    HAS_STARTS: tl.constexpr, NOPE_MODE: tl.constexpr, ROPE_MODE: tl.constexpr, NOPE_OFF: tl.constexpr,
    ROPE_OFF: tl.constexpr, DATA_BYTES: tl.constexpr, TRAIL_BYTES: tl.constexpr, TILE: tl.constexpr,
    SCALE_UE8M0: tl.constexpr, SCALE_TRAILING: tl.constexpr, SCALE_OFF: tl.constexpr, IN_BF16: tl.constexpr,
    OUT: tl.constexpr, NAN_OUT: tl.constexpr, MAN_BITS: tl.constexpr, EMIN: tl.constexpr, MAX_CODE: tl.constexpr,
    NEG_ZERO: tl.constexpr, HAS_INF: tl.constexpr, INF_CODE: tl.constexpr, SUB_STEP: tl.constexpr,
) -> None:
    """Fill rows ``ROWS * program_id(0)`` on of ``dst`` (module doc); a row at or past ``cu[batch]`` is left
    alone."""
    r, live, block, offset = _rows(n_rows, cu, batch, table, table_row, table_col, block_size, starts, ROWS,
                                   BATCH_BITS, HAS_STARTS)
    block_base = (block * block_bytes)[:, None]
    row = block_base + (offset * DATA_BYTES)[:, None]
    tensor_scale = 1.0
    if NOPE_MODE == 1 or ROPE_MODE == 1:
        tensor_scale = tl.load(scale_ptr)
    cols = tl.arange(0, R_PAD)[None, :]
    nmask = (cols < R) & live[:, None]
    nope = _decode_part(cache, row, block_base, offset[:, None], cols, nmask, tensor_scale, block_size, NOPE_MODE,
                        NOPE_OFF, DATA_BYTES, TRAIL_BYTES, TILE, SCALE_UE8M0, SCALE_TRAILING, SCALE_OFF,
                        IN_BF16, MAN_BITS, EMIN, MAX_CODE, NEG_ZERO, HAS_INF, INF_CODE, SUB_STEP)
    _store_row(dst, r[:, None] * dst_row + cols * dst_col, nope, nmask, OUT, NAN_OUT)
    pcols = tl.arange(0, P_PAD)[None, :]
    pmask = (pcols < P) & live[:, None]
    rope = _decode_part(cache, row, block_base, offset[:, None], pcols, pmask, tensor_scale, block_size, ROPE_MODE,
                        ROPE_OFF, DATA_BYTES, TRAIL_BYTES, TILE, SCALE_UE8M0, SCALE_TRAILING, SCALE_OFF,
                        IN_BF16, MAN_BITS, EMIN, MAX_CODE, NEG_ZERO, HAS_INF, INF_CODE, SUB_STEP)
    _store_row(dst, r[:, None] * dst_row + (R + pcols) * dst_col, rope, pmask, OUT, NAN_OUT)


def _pow2_at_least(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _rows_per_program() -> int:
    """Rows of ``dst`` per program: one on a GPU (as many programs as rows), a block in Triton's interpreter (its
    cost is per operation per program, whatever the block's size)."""
    return 64 if interpreted() else 1


def _grid(rows: int) -> tuple[int]:
    return (triton.cdiv(rows, _rows_per_program()),)


def prepare_triton_gather(layout: MlaLayout, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
                          cu_seq_lens: torch.Tensor, scale: torch.Tensor,
                          seq_starts: torch.Tensor | None = None) -> Launch:
    """The gather of rtp_ref.kv.gather for checked arguments of this metadata (rtp_ref.kernels.call_signature):
    ``launch(kv_cache, dst, block_table, cu_seq_lens, scale, seq_starts)`` reads, one program per
    ``_rows_per_program()`` rows of ``dst``, through one compiled kernel launched again for every call
    (rtp_ref.kernels.triton_launch.CompiledLaunch: Triton's JIT binds this kernel's 27 constexprs once, not every
    call); nothing is launched for a ``dst`` of no rows."""
    if dst.shape[0] == 0:
        return no_launch
    plan = WritePlan.of(layout)
    t = plan.traits
    constexprs = {
        "ROWS": _rows_per_program(),
        "R": plan.kv_lora_rank, "P": plan.rope_dim, "R_PAD": _pow2_at_least(plan.kv_lora_rank),
        "P_PAD": _pow2_at_least(plan.rope_dim), "BATCH_BITS": max(block_table.shape[0], 1).bit_length(),
        "HAS_STARTS": seq_starts is not None, "NOPE_MODE": int(plan.nope_mode), "ROPE_MODE": int(plan.rope_mode),
        "NOPE_OFF": plan.nope_offset, "ROPE_OFF": plan.rope_offset, "DATA_BYTES": plan.data_bytes,
        "TRAIL_BYTES": plan.trailing_bytes, "TILE": max(plan.tile, 1), "SCALE_UE8M0": plan.scale_ue8m0,
        "SCALE_TRAILING": plan.scale_trailing, "SCALE_OFF": plan.scale_offset,
        "IN_BF16": read16(kv_cache) == torch.bfloat16, "OUT": _OUT[dst.dtype], "NAN_OUT": CANONICAL_NAN[dst.dtype],
        "MAN_BITS": t.man_bits, "EMIN": t.emin, "MAX_CODE": t.max_code, "NEG_ZERO": t.negative_zero,
        "HAS_INF": t.has_inf, "INF_CODE": t.inf_code, "SUB_STEP": 2.0 ** (t.emin - t.man_bits),
    }
    bits = _BITS_VIEW[dst.dtype]
    # the rows' views keep dst's strides (the same element size)
    scalars = (block_table.shape[0], kv_cache.shape[1], kv_cache.stride(0) * kv_cache.element_size(),
               block_table.stride(0), block_table.stride(1), dst.stride(0), dst.stride(1), dst.shape[0])
    read = CompiledLaunch(_mla_gather, _grid(dst.shape[0]), constexprs)
    index = kv_cache.device.index if kv_cache.is_cuda else None

    def launch(kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor, cu_seq_lens: torch.Tensor,
               scale: torch.Tensor, seq_starts: torch.Tensor | None = None) -> None:
        starts = seq_starts if seq_starts is not None else cu_seq_lens
        with on_device(index):
            read(kv_cache.view(torch.uint8), dst.view(bits), block_table, cu_seq_lens, starts, scale, *scalars)

    return launch


@triton.jit
def _indexer_gather(
    cache: tl.tensor, dst_k: tl.tensor, dst_scale: tl.tensor, table: tl.tensor, cu: tl.tensor, batch: tl.tensor,
    block_size: tl.tensor, block_bytes: tl.tensor, table_row: tl.tensor, table_col: tl.tensor, k_row: tl.tensor,
    scale_row: tl.tensor, n_rows: tl.tensor, ROWS: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr,
    S: tl.constexpr, S_PAD: tl.constexpr, BATCH_BITS: tl.constexpr,
) -> None:
    """Copy the tokens of rows ``ROWS * program_id(0)`` on: each one's ``D`` value bytes to ``dst_k``, its ``S``
    scale bytes (after the block's values) to ``dst_scale``; a row at or past ``cu[batch]`` is left alone."""
    r, live, block, offset = _rows(n_rows, cu, batch, table, table_row, table_col, block_size, cu, ROWS,
                                   BATCH_BITS, False)
    base = (block * block_bytes)[:, None]
    offset = offset[:, None]
    cols = tl.arange(0, D_PAD)[None, :]
    vmask = (cols < D) & live[:, None]
    values = tl.load(cache + base + offset * D + cols, mask=vmask)
    tl.store(dst_k + r[:, None] * k_row + cols, values, mask=vmask)
    scols = tl.arange(0, S_PAD)[None, :]
    smask = (scols < S) & live[:, None]
    scales = tl.load(cache + base + block_size * D + offset * S + scols, mask=smask)
    tl.store(dst_scale + r[:, None] * scale_row + scols, scales, mask=smask)


def prepare_triton_indexer_gather(layout: IndexerLayout, kv_cache: torch.Tensor, dst_k: torch.Tensor,
                                  dst_scale: torch.Tensor, block_table: torch.Tensor,
                                  cu_seq_lens: torch.Tensor) -> Launch:
    """The indexer gather of rtp_ref.kv.indexer_gather for checked arguments of this metadata:
    ``launch(kv_cache, dst_k, dst_scale, block_table, cu_seq_lens)`` copies, one program per ``_rows_per_program()``
    rows of ``dst_k`` (columns contiguous: ``IndexerGatherKernel`` checks that), through one compiled kernel
    (``CompiledLaunch``); nothing is launched for no rows."""
    if dst_k.shape[0] == 0:
        return no_launch
    d, s = layout.data_bytes_per_token, layout.trailing_bytes_per_token  # a token's value and scale bytes
    constexprs = {"ROWS": _rows_per_program(), "D": d, "D_PAD": _pow2_at_least(d), "S": s, "S_PAD": _pow2_at_least(s),
                  "BATCH_BITS": max(block_table.shape[0], 1).bit_length()}
    scalars = (block_table.shape[0], kv_cache.shape[1], kv_cache.stride(0), block_table.stride(0),
               block_table.stride(1), dst_k.stride(0), dst_scale.stride(0), dst_k.shape[0])
    read = CompiledLaunch(_indexer_gather, _grid(dst_k.shape[0]), constexprs)
    index = kv_cache.device.index if kv_cache.is_cuda else None

    def launch(kv_cache: torch.Tensor, dst_k: torch.Tensor, dst_scale: torch.Tensor, block_table: torch.Tensor,
               cu_seq_lens: torch.Tensor) -> None:
        with on_device(index):
            read(kv_cache, dst_k, dst_scale, block_table, cu_seq_lens, *scalars)

    return launch


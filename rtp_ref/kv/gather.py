"""The read side of the MLA cache: gather sequences out of the paged cache into dense, dequantised rows.

``gather_and_maybe_dequant_cache`` is the call of vLLM's MLA gather (``csrc/cache_kernels.cu``): sequence ``b``
fills rows ``cu_seq_lens[b]`` to ``cu_seq_lens[b + 1]`` of ``dst``; its token ``i`` sits at position
``p = seq_starts[b] + i`` of the sequence (``seq_starts`` absent: 0), in block ``block_table[b, p // block_size]``
at offset ``p % block_size``. A row is the token's values, ``kv_c`` then ``k_pe`` (``[tokens, R + P]``), as the
layout defines them: 16-bit fields read as the cache's dtype (``auto``) or, in an fp8 layout's byte cache, as
bf16 (the rope format of FlashMLA's ds_mla and MODEL1 layouts; ``read16``); fp8 fields decoded and multiplied by
their scale (per tile, or the per-tensor ``scale``), in float32, then rounded once, to nearest even, to
``dst``'s dtype (bf16, fp16 or fp32). A NaN is stored as the dtype's canonical positive NaN (``CANONICAL_NAN``):
NaN payloads and signs differ between CPU and GPU conversions, and a reader certified bit for bit must not
depend on them. Rows past ``cu_seq_lens[-1]`` are left as they are.

Every argument is checked before ``dst`` is written (RtpRefError naming it): this is the reference.
"""

from __future__ import annotations

import itertools

import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.kv.cache import gather_entries
from rtp_ref.kv.entries import decode_entries
from rtp_ref.kv.layouts import MlaLayout
from rtp_ref.kv.validate import check_tensor, dtype_name, validate_cache

#: dtypes ``dst`` may have
OUTPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
#: the bits a NaN is stored as, per ``dst`` dtype (the quiet NaN with sign 0 and the top mantissa bit only)
CANONICAL_NAN = {torch.bfloat16: 0x7FC0, torch.float16: 0x7E00, torch.float32: 0x7FC00000}
#: the bits-view dtype of each ``dst`` dtype
_BITS = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}


def read16(kv_cache: torch.Tensor) -> torch.dtype:
    """How a gather reads a layout's 16-bit fields from ``kv_cache``: as its dtype when it is 16-bit (``auto``),
    else (a byte cache) as bf16, FlashMLA's rope format."""
    return kv_cache.dtype if kv_cache.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16


def to_dst_dtype(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float32 ``values`` rounded once to ``dtype`` (nearest even), every NaN the canonical one (module doc)."""
    out = values.to(dtype)
    bits = out.view(_BITS[dtype])
    bits[torch.isnan(values)] = CANONICAL_NAN[dtype]
    return out


def _int_vector(arg: str, x: object, device: torch.device, length: int | None) -> torch.Tensor:
    t = check_tensor(arg, x, device)
    if t.dim() != 1 or t.dtype not in (torch.int32, torch.int64) or (length is not None and t.numel() != length):
        want = f"[{length}]" if length is not None else "[n]"
        raise RtpRefError(f"{arg}: {dtype_name(t.dtype)} {list(t.shape)}; valid: int32 or int64 {want}")
    return t


def sequence_slots(block_table: torch.Tensor, cu_seq_lens: torch.Tensor, block_size: int,
                   seq_starts: torch.Tensor | None = None) -> torch.Tensor:
    """The cache slot of every row a gather fills (int64, CPU), from checked arguments (module doc)."""
    lens = (cu_seq_lens[1:] - cu_seq_lens[:-1]).to(torch.int64).cpu()
    batch = torch.repeat_interleave(torch.arange(lens.numel()), lens)
    first = torch.repeat_interleave(cu_seq_lens[:-1].to(torch.int64).cpu(), lens)
    position = torch.arange(batch.numel()) - first
    if seq_starts is not None:
        position += seq_starts.to(torch.int64).cpu()[batch]
    blocks = block_table.to(torch.int64).cpu()[batch, position // block_size]
    return blocks * block_size + position % block_size


#: block-table entries up to which ``check_sequences`` checks the index values as Python lists (one copy to the host
#: per index tensor, then integer arithmetic) instead of as tensors. Measured on the 2-core CPU machine with the
#: bench's tables (1,024-token sequences, blocks of 64): one entry 12 us listed against 158 us as tensors (about
#: twenty tensor operations, every call); 1,024 entries 116 against 183 us; 2,048 entries 237 against 91 us
LISTED_CHECK_ENTRIES = 1024


def check_sequences(cache: torch.Tensor, block_table: object, cu_seq_lens: object, seq_starts: object,
                    rows: int, dst_name: str) -> None:
    """Check a gather's index arguments against ``cache`` (``[num_blocks, block_size, ...]``) and an output of
    ``rows`` rows named ``dst_name``: the table, ``cu_seq_lens`` starting at 0 and never decreasing, the starts,
    every block read inside the cache; RtpRefError naming the first bad one. Reads their values (a device sync).
    Small tables are checked as lists, larger ones as tensors (``LISTED_CHECK_ENTRIES``): the same checks, in the
    same order, with the same messages."""
    device = cache.device
    table = check_tensor("block_table", block_table, device)
    if table.dim() != 2 or table.dtype not in (torch.int32, torch.int64):
        raise RtpRefError(f"block_table: {dtype_name(table.dtype)} {list(table.shape)}; valid: int32 or int64 "
                          "[batch, max_blocks]")
    batch = table.shape[0]
    cu = _int_vector("cu_seq_lens", cu_seq_lens, device, batch + 1)
    starts = None if seq_starts is None else _int_vector("seq_starts", seq_starts, device, batch)
    check = _check_listed if table.numel() <= LISTED_CHECK_ENTRIES else _check_tensors
    check(cache.shape[0], cache.shape[1], table, cu, starts, rows, dst_name)


def _check_listed(num_blocks: int, block_size: int, table: torch.Tensor, cu_seq_lens: torch.Tensor,
                  seq_starts: torch.Tensor | None, rows: int, dst_name: str) -> None:
    """``check_sequences``'s value checks on the index tensors' values as lists."""
    cu: list[int] = cu_seq_lens.tolist()
    lens = [after - before for before, after in itertools.pairwise(cu)]
    if cu[0] != 0 or any(n < 0 for n in lens):
        raise RtpRefError(f"cu_seq_lens: {cu}; valid: starts at 0 and never decreases")
    if cu[-1] > rows:
        raise RtpRefError(f"{dst_name}: {rows} rows for {cu[-1]} tokens (cu_seq_lens[-1]); valid: >= {cu[-1]} rows")
    starts: list[int] = [0] * len(lens) if seq_starts is None else seq_starts.tolist()
    if any(start < 0 for start in starts):
        raise RtpRefError(f"seq_starts: {starts}; valid: every start >= 0")
    width = table.shape[1]
    needed = [(start + n + block_size - 1) // block_size for start, n in zip(starts, lens, strict=True)]
    for b, columns in enumerate(needed):
        if columns > width:
            raise RtpRefError(f"block_table: sequence {b} reaches position {starts[b] + lens[b] - 1}, block "
                              f"{columns - 1}, past its {width} columns; valid: a wider table")
    entries: list[list[int]] = table.tolist()
    for b, (start, n, columns) in enumerate(zip(starts, lens, needed, strict=True)):
        if n <= 0:
            continue
        for c in range(start // block_size, columns):
            block = entries[b][c]
            if not 0 <= block < num_blocks:
                row = cu[b] + max(c * block_size, start) - start  # the first row reading it (as _check_tensors)
                raise RtpRefError(f"block_table: row {row} of {dst_name} reads block {block}; valid: "
                                  f"0..{num_blocks - 1}")


def _check_tensors(num_blocks: int, block_size: int, table: torch.Tensor, cu_seq_lens: torch.Tensor,
                   seq_starts: torch.Tensor | None, rows: int, dst_name: str) -> None:
    """``check_sequences``'s value checks as tensor operations (their cost is the table's size, not the rows')."""
    batch = table.shape[0]
    cu = cu_seq_lens.to(torch.int64).cpu()
    lens = cu[1:] - cu[:-1]
    if int(cu[0]) != 0 or bool((lens < 0).any()):
        raise RtpRefError(f"cu_seq_lens: {cu.tolist()}; valid: starts at 0 and never decreases")
    if int(cu[-1]) > rows:
        raise RtpRefError(f"{dst_name}: {rows} rows for {int(cu[-1])} tokens (cu_seq_lens[-1]); valid: >= "
                          f"{int(cu[-1])} rows")
    starts = torch.zeros(batch, dtype=torch.int64)
    if seq_starts is not None:
        starts = seq_starts.to(torch.int64).cpu()
        if bool((starts < 0).any()):
            raise RtpRefError(f"seq_starts: {starts.tolist()}; valid: every start >= 0")
    needed = (starts + lens + block_size - 1) // block_size
    wide = torch.nonzero(needed > table.shape[1]).flatten()
    if wide.numel():
        b = int(wide[0])
        raise RtpRefError(f"block_table: sequence {b} reaches position {int(starts[b] + lens[b]) - 1}, block "
                          f"{int(needed[b]) - 1}, past its {table.shape[1]} columns; valid: a wider table")
    # the table entries the rows read, sequence by sequence, block by block (the rows' order): each sequence reads
    # its columns from starts // block_size up to needed, so the check costs the table's size, not the tokens'
    entries = table.to(torch.int64).cpu()
    columns = torch.arange(table.shape[1])
    read = (columns[None, :] >= (starts // block_size)[:, None]) & (columns[None, :] < needed[:, None]) \
        & (lens > 0)[:, None]
    bad = torch.nonzero(read & ((entries < 0) | (entries >= num_blocks)))
    if bad.numel():
        b, c = (int(i) for i in bad[0])
        # the first row reading it: the sequence's first position in that block
        row = int(cu[b]) + max(c * block_size, int(starts[b])) - int(starts[b])
        raise RtpRefError(f"block_table: row {row} of {dst_name} reads block {int(entries[b, c])}; valid: "
                          f"0..{num_blocks - 1}")


def validate_gather_args(layout: MlaLayout, kv_cache: object, dst: object, block_table: object, cu_seq_lens: object,
                         scale: object, seq_starts: object) -> None:
    """Check a gather's arguments (module doc); RtpRefError naming the first bad one. Reads the index tensors'
    values (a device sync): this is the reference's check."""
    cache = check_tensor("kv_cache", kv_cache, None)
    validate_cache(layout, cache, read16(cache))
    device = cache.device
    out = check_tensor("dst", dst, device)
    width = layout.kv_lora_rank + layout.rope_dim
    if out.dim() != 2 or out.shape[1] != width or out.dtype not in OUTPUT_DTYPES:
        raise RtpRefError(f"dst: {dtype_name(out.dtype)} {list(out.shape)}; valid: bfloat16, float16 or float32 "
                          f"[tokens, {width}] (kv_lora_rank + rope_dim)")
    check_sequences(cache, block_table, cu_seq_lens, seq_starts, out.shape[0], "dst")
    s = check_tensor("scale", scale, device)
    if s.dtype != torch.float32 or s.numel() != 1:
        raise RtpRefError(f"scale: {dtype_name(s.dtype)} with {s.numel()} elements; valid: float32 with 1 element")


def gather_and_maybe_dequant_cache(layout: MlaLayout, kv_cache: torch.Tensor, dst: torch.Tensor,
                                   block_table: torch.Tensor, cu_seq_lens: torch.Tensor, scale: torch.Tensor,
                                   seq_starts: torch.Tensor | None = None) -> None:
    """Fill ``dst``'s first ``cu_seq_lens[-1]`` rows with the sequences' dequantised values (module doc). The
    op's reference (rtp_ref.ops): called as a gather kernel is, with the layout first and no ``kv_cache_dtype``."""
    validate_gather_args(layout, kv_cache, dst, block_table, cu_seq_lens, scale, seq_starts)
    slots = sequence_slots(block_table, cu_seq_lens, kv_cache.shape[1], seq_starts)
    if slots.numel() == 0:
        return
    # checked above: decode the entries directly (read_slots would check every argument again)
    entries = gather_entries(layout, kv_cache.cpu(), slots)
    kv_c, k_pe = decode_entries(layout, entries, scale.cpu(), read16(kv_cache))
    dst[: slots.numel()] = to_dst_dtype(torch.cat([kv_c, k_pe], dim=1), dst.dtype).to(dst.device)

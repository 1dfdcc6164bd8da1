"""The large-address tier's cases: caches whose byte offsets pass 2^31 and 2^32, laid out as serving does.

The commonest silent KV-cache corruption of 2026 was a byte or element offset computed in 32 bits
(docs/sources.md#large-caches-and-32-bit-offsets): it wraps only past 2 GiB, which small caches never
reach. One case per op and layout, built like a serving engine's pool:

- one canary-filled byte buffer holds a front margin (``MARGIN``: 2 GiB and more, where an offset
  wrapped to a negative int32 lands, inside the buffer), the pool, and a tail;
- the pool interleaves ``LAYERS`` caches block by block (``[num_blocks, LAYERS, block...]``): the cache
  under test is a strided view of one of them, as a layer of a multi-layer pool is (the MHA op's key and
  value caches are the two layers, FlashInfer's ``[num_blocks, 2, block_size, H, D]``); its block stride
  is ``LAYERS`` blocks, so its last blocks lie past 2^32 bytes from its base;
- the tokens' slots are the first and last slots, the slots on both sides of byte offsets 2^31 and 2^32,
  the slot whose ``slot * entry`` first passes 2^31 elements, a few between, and a padding slot.

The checks stay exact without a second copy of the buffer: the expected bytes of each block holding a
target slot come from the op's reference writing the same tokens into a small canary-filled cache of just
those blocks; after the call the target blocks are gathered and compared, and one pass over the whole
buffer counts its non-canary bytes, which must equal the target blocks' own count (nothing was written
anywhere else). Two guard allocations, before and after the buffer, keep a canary of their own.
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from rtp_ref.cases.cases import CaseSpec
from rtp_ref.cases.tier_hooks import LargeTier, PoolCaches
from rtp_ref.contract import WriteContract
from rtp_ref.errors import RtpRefError
from rtp_ref.kv.padding import first_real_slot
from rtp_ref.ops import MLA_OP, OPS, op_spec

#: every byte of the buffer before the call
CANARY = 0x5A
#: every byte of the guard allocations
GUARD_CANARY = 0xA5
#: bytes of each guard allocation
GUARD_BYTES = 1 << 20
#: bytes before the pool: an offset that wrapped to a negative int32 lands here, inside the buffer
MARGIN = (1 << 31) + (1 << 20)
#: bytes after the pool
TAIL = 1 << 20
#: caches interleaved block by block in the pool: the block stride of each is this many blocks
LAYERS = 2
BLOCK_SIZE = 64
#: the byte offsets the tier's slots straddle
BOUNDARIES = (1 << 31, 1 << 32)
#: bytes counted per pass of the buffer scan (a GPU or CPU temporary of this many bools)
SCAN_CHUNK = 1 << 28


@dataclass(frozen=True)
class LargeSpec(CaseSpec):
    """One large-address case: an op and one of its layouts (variants); the rest is fixed by the tier."""

    op: str = MLA_OP

    @property
    def case_id(self) -> str:
        return "large"


def large_ops() -> tuple[str, ...]:
    """The ops with a large-address case (their ``OpCases.large``), in report order."""
    return tuple(name for name, spec in OPS.items() if spec.cases.large is not None)


def large_specs(op: str, layout: str) -> Iterator[LargeSpec]:
    """The tier's one case of ``layout`` of ``op``."""
    yield LargeSpec(layout=layout, kind="large", tokens=0, block_size=BLOCK_SIZE, num_blocks=0,
                    input_dtype=torch.bfloat16, seed=zlib.crc32(f"{op}/{layout}".encode()), op=op)


def tier_of(op: str) -> LargeTier:
    """``op``'s large-address hooks (RtpRefError: the op has no large-address case)."""
    tier = op_spec(op).cases.large
    if tier is None:
        raise RtpRefError(f"op {op!r} has no large-address case")
    return tier


def _shape(spec: LargeSpec, contract: WriteContract) -> PoolCaches:
    """The op's caches at the tier's block size."""
    return tier_of(spec.op).caches(spec.layout, contract, BLOCK_SIZE)


def num_blocks_for(block_bytes: int) -> int:
    """Blocks of one cache for its last block to start past 2^32 bytes from the cache's base."""
    return (1 << 32) // (LAYERS * block_bytes) + 2


def _buffer_size(shape: PoolCaches) -> int:
    """Bytes of a case's buffer: the margin, the pool of ``LAYERS`` interleaved caches, the tail."""
    return MARGIN + num_blocks_for(shape.block_bytes) * LAYERS * shape.block_bytes + TAIL


#: a buffer is allocated in steps of this many bytes: every op's and layout's case then fits the first buffer
#: made (their sizes differ by under a MiB), so a run fills it once; a fresh fill of 6 GiB took 18-22 s on a
#: 2-core CPU (first touch of its pages), reusing it milliseconds
ALLOCATION_STEP = 16 << 20


def _allocation(size: int) -> int:
    return -(-size // ALLOCATION_STEP) * ALLOCATION_STEP


def buffer_bytes(spec: LargeSpec, contract: WriteContract) -> int:
    """Bytes the case allocates on its device (the buffer, rounded up to ``ALLOCATION_STEP``, and both guards)."""
    return _allocation(_buffer_size(_shape(spec, contract))) + 2 * GUARD_BYTES


def memory_shortfall(device: str, need: int) -> str | None:
    """Why ``device`` cannot hold ``need`` bytes now (None: it can, or it cannot be told): the tier skips
    such a case with this reason rather than failing for the machine."""
    if device.startswith("cuda"):
        free = torch.cuda.mem_get_info(torch.device(device))[0]
    else:
        meminfo = Path("/proc/meminfo")
        if not meminfo.exists():
            return None
        line = next((x for x in meminfo.read_text().splitlines() if x.startswith("MemAvailable:")), None)
        if line is None:
            return None
        free = int(line.split()[1]) * 1024
    if free >= need * 1.1:
        return None
    return f"the large-address case needs {need / 2**30:.1f} GiB on {device}, {free / 2**30:.1f} GiB is free"


def _target_slots(capacity: int, shape: PoolCaches, g: torch.Generator, first_slot: int = 0) -> list[int]:
    """The first real slot (``first_slot``: rtp_ref.kv.padding) and the last slot, both sides of each boundary,
    the first slot whose flat element index ``slot * entry`` passes 2^31, and a few random ones; in increasing
    order, each once."""
    stride = LAYERS * shape.block_bytes

    def offset(slot: int) -> int:
        block, row = divmod(slot, BLOCK_SIZE)
        return block * stride + row * shape.row_bytes

    slots = {first_slot, capacity - 1}
    for boundary in BOUNDARIES:
        first = _first_slot_past(capacity, offset, boundary)
        slots |= {first - 1, first}
    row_elems = math.prod(shape.block[1:])
    flat = math.ceil((1 << 31) / row_elems)
    slots |= {s for s in (flat - 1, flat) if s < capacity}
    slots |= {int(s) for s in torch.randint(1, capacity - 1, (4,), generator=g)}
    return sorted(slots)


def _first_slot_past(capacity: int, offset: Callable[[int], int], boundary: int) -> int:
    """The smallest slot below ``capacity`` whose byte offset reaches ``boundary`` (offsets grow with the slot)."""
    lo, hi = 0, capacity - 1
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if offset(mid) >= boundary else (mid + 1, hi)
    return lo


#: eight canary bytes as one int64 word: scans compare words, eight bytes at a time
CANARY_WORD = int.from_bytes(bytes([CANARY]) * 8, "little", signed=True)


def changed_words(buffer: torch.Tensor) -> Iterator[tuple[int, torch.Tensor]]:
    """(the chunk's first byte, int64 word indices within it) of every ``SCAN_CHUNK`` of ``buffer`` (its size a
    multiple of 8) holding a byte that is not the canary. Comparing int64 words reads the buffer at memory
    speed; a bytewise compare and sum is some 30 times slower on a CPU."""
    words = buffer.reshape(-1).view(torch.int64)
    step = SCAN_CHUNK // 8
    for start in range(0, words.numel(), step):
        changed = words[start:start + step] != CANARY_WORD
        if bool(changed.any()):
            yield start * 8, torch.nonzero(changed).flatten()


#: per device: a canary-filled buffer kept between cases (filling 6 GiB takes a CPU seconds), and whether
#: it is all canary now (a case returns it with ``LargeCase.release``)
_BUFFERS: dict[str, tuple[torch.Tensor, bool]] = {}


def _filled(size: int, device: str) -> torch.Tensor:
    """``size`` canary bytes on ``device``; on a CPU filled by every core (the first touch of 6 GiB of pages
    took 10-18 s on one core of a 2-core machine, 7 s on both), whatever the run's thread count."""
    threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(max(threads, os.cpu_count() or 1))
    try:
        return torch.full((size,), CANARY, dtype=torch.uint8, device=device)
    finally:
        torch.set_num_threads(threads)


def _canary_buffer(size: int, device: str) -> torch.Tensor:
    """``size`` canary bytes on ``device``: the kept buffer when it is clean and large enough, else a new one."""
    kept = _BUFFERS.pop(device, None)
    if kept is not None and kept[1] and kept[0].numel() >= size:
        buffer = kept[0]
    else:
        del kept  # its memory goes before the new buffer takes its own
        buffer = _filled(_allocation(size), device)
    _BUFFERS[device] = (buffer, False)
    return buffer[:size]


def _restore(region: torch.Tensor, chunks: list[tuple[int, torch.Tensor]]) -> None:
    """Put the canary back into the words ``chunks`` (``changed_words`` of ``region``) name."""
    words = region.view(torch.int64)
    for start, index in chunks:
        words[start // 8 + index] = CANARY_WORD


class LargeCase:
    """One large-address case on a device: the buffer, the cache views, the inputs, and the expected bytes of
    the target blocks (from the reference on a small cache of those blocks)."""

    def __init__(self, spec: LargeSpec, contract: WriteContract, device: torch.device | str) -> None:
        self.spec = spec
        self.tier = tier_of(spec.op)
        self.shape = _shape(spec, contract)
        self.num_blocks = num_blocks_for(self.shape.block_bytes)
        self.stride_bytes = LAYERS * self.shape.block_bytes
        g = torch.Generator().manual_seed(spec.seed)
        capacity = self.num_blocks * BLOCK_SIZE
        target = _target_slots(capacity, self.shape, g, first_real_slot(contract.flags.padding_slot))
        # one padding slot among them: a kernel must write nothing for it
        self.slots_cpu = torch.tensor([*target[:2], -1, *target[2:]], dtype=torch.int64)
        self.blocks = torch.unique(self.slots_cpu[self.slots_cpu >= 0] // BLOCK_SIZE)
        self.inputs_cpu = self.tier.inputs(self.shape.layout, g, self.slots_cpu.numel())
        self.expected = self._expected()
        self.guards = tuple(torch.full((GUARD_BYTES,), GUARD_CANARY, dtype=torch.uint8, device=device)
                            for _ in range(2))
        self.buffer = _canary_buffer(_buffer_size(self.shape), str(device))
        self.caches = self._views(self.buffer, MARGIN, self.num_blocks)
        self.slots = self.slots_cpu.to(device)
        self.inputs = tuple(t.to(device) for t in self.inputs_cpu)
        self._changed: list[tuple[int, torch.Tensor]] | None = None

    def _views(self, buffer: torch.Tensor, base: int, num_blocks: int, layers: int = LAYERS) -> list[torch.Tensor]:
        """Each cache over ``buffer`` from byte ``base``: block ``b`` of cache ``i`` at ``base + (b * layers + i)
        * block_bytes``, the block itself contiguous."""
        shape = self.shape
        itemsize = torch.empty((), dtype=shape.dtype).element_size()
        elems = buffer.view(shape.dtype)
        inner = [math.prod(shape.block[i + 1:]) for i in range(len(shape.block))]
        block_elems = shape.block_bytes // itemsize
        return [elems.as_strided((num_blocks, *shape.block), (layers * block_elems, *inner),
                                 (base + i * shape.block_bytes) // itemsize)
                for i in range(len(shape.names))]

    def call(self, kernel: Callable[..., None]) -> None:
        """The kernel's call on the large caches."""
        self.tier.call(kernel, self.spec.layout, self.caches, self.slots, self.inputs)

    def _expected(self) -> list[torch.Tensor]:
        """Each cache's target blocks as the reference writes them, uint8 ``[blocks, block_bytes]``: the same
        tokens into canary-filled caches of just those blocks, the slots renumbered."""
        count = self.blocks.numel()
        small = torch.full((count * LAYERS * self.shape.block_bytes,), CANARY, dtype=torch.uint8)
        caches = self._views(small, 0, count)
        block_of = {int(b): i for i, b in enumerate(self.blocks)}
        renumbered = torch.tensor([-1 if s < 0 else block_of[int(s) // BLOCK_SIZE] * BLOCK_SIZE + int(s) % BLOCK_SIZE
                                   for s in self.slots_cpu], dtype=torch.int64)
        self.tier.reference(self.shape.layout, self.spec.layout, caches, renumbered, self.inputs_cpu)
        return [self._bytes(c) for c in caches]

    def _bytes(self, cache: torch.Tensor) -> torch.Tensor:
        """A cache's blocks (all of a small one's) as uint8 ``[blocks, block_bytes]`` on the CPU."""
        return cache.contiguous().cpu().view(torch.uint8).reshape(cache.shape[0], -1)

    def gathered(self) -> list[torch.Tensor]:
        """Each cache's target blocks as the call left them, uint8 ``[blocks, block_bytes]`` on the CPU."""
        return [self._bytes(c[self.blocks.to(c.device)]) for c in self.caches]

    def block_slots(self) -> list[list[int]]:
        """The target slots in each target block, in ``blocks`` order."""
        slots = [int(s) for s in self.slots_cpu if s >= 0]
        return [[s for s in slots if s // BLOCK_SIZE == block] for block in self.blocks.tolist()]

    def block_offsets(self) -> list[int]:
        """The byte offset from its cache's base of each target block's last target byte."""
        return [block * self.stride_bytes + (max(s % BLOCK_SIZE for s in slots) + 1) * self.shape.row_bytes - 1
                for block, slots in zip(self.blocks.tolist(), self.block_slots(), strict=True)]

    def target_ranges(self) -> list[tuple[int, int]]:
        """Byte ranges ``[start, end)`` of the buffer holding target blocks."""
        return sorted((MARGIN + b * self.stride_bytes + i * self.shape.block_bytes,
                       MARGIN + b * self.stride_bytes + (i + 1) * self.shape.block_bytes)
                      for b in self.blocks.tolist() for i in range(len(self.shape.names)))

    def changed_chunks(self) -> list[tuple[int, torch.Tensor]]:
        """``changed_words`` of the buffer after the call, scanned once (the grading and ``release`` share it)."""
        if self._changed is None:
            self._changed = list(changed_words(self.buffer))
        return self._changed

    def release(self) -> None:
        """Return the buffer to the canary, so the next case keeps it instead of filling a new one (the whole
        allocation: a stray write past this case's size would otherwise reach the next, larger case)."""
        _restore(self.buffer, self.changed_chunks())
        device = str(self.buffer.device)
        kept = _BUFFERS.get(device)
        if kept is not None and kept[0].data_ptr() == self.buffer.data_ptr():
            slack = kept[0][self.buffer.numel():]  # the allocation's rounding, past this case's size
            _restore(slack, list(changed_words(slack)))
            _BUFFERS[device] = (kept[0], True)

    def cache_base(self) -> int:
        """The buffer byte where the first cache begins."""
        return MARGIN

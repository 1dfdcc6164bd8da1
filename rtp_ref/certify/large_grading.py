"""Grading a large-address case (rtp_ref.certify.large_cases): the target blocks against the reference's,
every other byte of the buffer and the guards against their canaries, and where a wrong block lies.

A case is ``bit_exact`` when every check passes; any failure is a ``layout`` failure (the bytes are not
where the layout puts them, or other memory changed), so it reaches no grade.
"""

from __future__ import annotations

import torch

from rtp_ref.cases.checks import Check, grade_reached
from rtp_ref.cases.grading import Grading
from rtp_ref.certify.large_cases import BOUNDARIES, CANARY, GUARD_CANARY, SCAN_CHUNK, LargeCase, changed_words


def _changed(buffer: torch.Tensor, chunks: list[tuple[int, torch.Tensor]] | None = None) -> int:
    """How many bytes of ``buffer`` are not the canary (one pass, or none given its ``changed_words``)."""
    count = 0
    flat = buffer.reshape(-1)
    for start, index in changed_words(flat) if chunks is None else chunks:
        words = flat[start:start + SCAN_CHUNK].view(torch.int64)[index]
        count += int(torch.count_nonzero(words.view(torch.uint8) != CANARY))
    return count


def _first_outside(case: LargeCase) -> int | None:
    """The first changed byte of the buffer outside every target block (scanned only once a change is known).
    Target blocks start and end on 8-byte words, so a word is inside one or outside all."""
    ranges = case.target_ranges()
    for start, index in case.changed_chunks():
        at = start + 8 * index
        inside = torch.zeros_like(at, dtype=torch.bool)
        for lo, hi in ranges:
            inside |= (at >= lo) & (at < hi)
        outside = at[~inside]
        if outside.numel():
            first = int(outside[0])
            word = case.buffer[first:first + 8].cpu().tolist()
            return first + next(i for i, b in enumerate(word) if b != CANARY)
    return None


def _offset_text(offset: int) -> str:
    """A byte offset as the boundaries it passed: ``2^32 + 1,234`` or ``-2^31 + 5``."""
    for boundary, name in ((1 << 32, "2^32"), (1 << 31, "2^31")):
        if offset >= boundary:
            return f"{name} + {offset - boundary:,}"
    if offset < 0:
        return f"-2^31 + {offset + (1 << 31):,}" if offset >= -(1 << 31) else f"{offset:,}"
    return f"{offset:,}"


def grade_large(case: LargeCase) -> Grading:
    """The large case's checks after its call: ``layout.untouched_bytes`` (outside the target blocks and in the
    guards), ``layout.offset_width`` (a block past 2^31 bytes is wrong) and ``layout.large_entries`` (a block
    below 2^31 is wrong: a fault of its own, or a wrapped write landing there)."""
    got = case.gathered()
    wrong_blocks = {j for g, e in zip(got, case.expected, strict=True)
                    for j in torch.nonzero((g != e).any(dim=1)).flatten().tolist()}
    offsets = case.block_offsets()
    high = {j for j, off in enumerate(offsets) if off >= BOUNDARIES[0]}
    slots_of = case.block_slots()
    low_wrong = sorted(wrong_blocks - high)
    high_wrong = sorted(wrong_blocks & high)

    def listed(blocks: list[int]) -> str:
        return ", ".join(f"slot {slots_of[j][-1]} (byte offset {_offset_text(offsets[j])})" for j in blocks[:4])

    outside = _changed(case.buffer, case.changed_chunks()) - sum(_changed(g) for g in got)
    guards = sum(int(torch.count_nonzero(g != GUARD_CANARY)) for g in case.guards)
    untouched = outside == 0 and guards == 0
    detail = ""
    if not untouched:
        first = _first_outside(case) if outside else None
        where = "" if first is None else (f", the first at byte offset {_offset_text(first - case.cache_base())} "
                                          "from the cache's base")
        detail = (f"{outside:,} byte(s) outside the target blocks changed{where}"
                  + (f"; {guards:,} byte(s) of the guard allocations changed" if guards else ""))
    checks = [
        Check("layout.untouched_bytes", untouched, detail),
        Check("layout.offset_width", not high_wrong,
              f"{len(high_wrong)} target block(s) past 2^31 bytes are wrong: {listed(high_wrong)}"
              + ("" if low_wrong else ", every one below is right")),
        Check("layout.large_entries", not low_wrong,
              f"{len(low_wrong)} target block(s) below 2^31 bytes differ from the reference's: {listed(low_wrong)}"
              + (" (a wrapped write of a block past 2^31 may have landed there)" if high_wrong else "")),
    ]
    return Grading(checks, grade_reached([c.name for c in checks if not c.passed]), {})

# Triton ships no type information: every @triton.jit is an untyped decorator to mypy.
# mypy: disable-error-code="untyped-decorator"
"""Where a Triton writer program's tokens go: the slot-mapping prologue the paged writers share."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def program_slots(slot_mapping, flags, capacity, tokens, block_size,  # type: ignore[no-untyped-def]
                  BLOCK_T: tl.constexpr):
    """``(t, block, row, valid)`` of this program's ``BLOCK_T`` tokens (int64): token ``t`` goes to row ``row`` of
    block ``block`` where ``valid``. A negative slot is not valid; a slot past the cache (``>= capacity``) is not
    valid either and sets ``flags[0]`` (rtp_ref.kernels.input_flags); invalid tokens address block 0 row 0 (masked
    off by the caller), so no negative offset is ever formed."""
    t = tl.program_id(0).to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T).to(tl.int64)
    slot = tl.load(slot_mapping + t, mask=t < tokens, other=-1).to(tl.int64)
    past = slot >= capacity
    tl.store(flags + 0 * t, tl.full([BLOCK_T], 1, tl.int32), mask=past)
    valid = (slot >= 0) & ~past
    slot = tl.where(valid, slot, 0)
    return t, slot // block_size, slot % block_size, valid

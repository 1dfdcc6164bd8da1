"""Engine padding conventions: which slot values mark a padding token, as the layout flag ``padding_slot`` says.

An engine pads a batch (to a CUDA-graph bucket, say) with tokens that must not reach the cache. Engines mark them
two ways, and a writer must follow its engine's:

- ``negative``: a negative slot writes nothing (vLLM's ``slot_idx < 0``, rtp-llm). Every slot from 0 is real.
- ``zero``: slot 0 is the engine's reserved padding sink, and a write to it is skipped like a negative one; real
  tokens have slots from 1 (sglang: ``store_cache(..., reserved_skip_index=0)``, its allocator handing out slots
  from 1; sglang #32477). Padding rows there hold whatever the model left in them, NaN included (sglang #35351), and
  MLA writers that overwrote slot 0 corrupted every padded request (sglang #36207).

The references (rtp_ref.kv) are written in the ``negative`` convention; ``as_negative`` turns a slot mapping of
either into it, which is all a writer bound to a ``zero`` contract adds.
"""

from __future__ import annotations

import torch

#: the value of ``padding_slot`` in which a negative slot is padding and slot 0 is real
NEGATIVE = "negative"
#: the value of ``padding_slot`` in which slot 0 is padding too: the engine's reserved sink
ZERO = "zero"


def reserved_slot(padding_slot: str) -> int | None:
    """The slot the convention reserves as its padding sink (0 under ``zero``), None where it reserves none."""
    return 0 if padding_slot == ZERO else None


def first_real_slot(padding_slot: str) -> int:
    """The first slot a real token may have: 1 under ``zero`` (0 is the sink), else 0."""
    return 1 if padding_slot == ZERO else 0


def padding_sentinel(padding_slot: str) -> int:
    """The slot value an engine of the convention gives its padding tokens: 0 under ``zero``, else -1."""
    return 0 if padding_slot == ZERO else -1


def as_negative(slot_mapping: torch.Tensor, padding_slot: str) -> torch.Tensor:
    """``slot_mapping`` in the ``negative`` convention: under ``zero`` a new tensor (same dtype and device) with
    slot 0 as -1; otherwise, or when it is no tensor (the writer's checks name that), ``slot_mapping`` itself."""
    if padding_slot != ZERO or not isinstance(slot_mapping, torch.Tensor):
        return slot_mapping
    return slot_mapping.masked_fill(slot_mapping == 0, -1)

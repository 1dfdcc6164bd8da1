"""The NaN-padding case of every write op: a batch padded the way engines pad CUDA-graph batches.

A ``nan_padding`` case has about a fifth of its tokens padding, and ``BUCKET_ROWS`` more input rows after the slot
mapping's last token (the batch padded to a bucket: tokenspeed #667 faulted on such rows). Every padding row holds
NaN in every value input: what a model leaves in rows it never computed (sglang #35351). The kernel is given the
padding tokens' slots in the engine's convention (the layout flag ``padding_slot``, rtp_ref.kv.padding): -1, or
the reserved slot 0, real tokens then having slots from 1. The case is graded like any other, so a kernel that
stores a padding row (NaN or not), writes the reserved slot, or reads rows past the slot mapping fails on the bytes
it changed; examples name the reserved slot as such (rtp_ref.cases.storage.slot_namer).
"""

from __future__ import annotations

import torch

from rtp_ref.kv.padding import padding_sentinel

#: the kind of the NaN-padding cases (a deviation may name it: rtp_ref.platform.CASE_KINDS)
NAN_PADDING_KIND = "nan_padding"
#: input rows after the slot mapping's last token in a ``nan_padding`` case
BUCKET_ROWS = 3


def input_rows(kind: str, tokens: int) -> int:
    """The rows of a case's value inputs: ``tokens``, and ``BUCKET_ROWS`` more in a ``nan_padding`` case."""
    return tokens + BUCKET_ROWS if kind == NAN_PADDING_KIND else tokens


def padding_rows(slots: torch.Tensor, rows: int) -> torch.Tensor:
    """The rows of ``rows`` input rows that are padding under ``slots`` (negative convention): a negative slot's,
    and every row past the slot mapping (bool ``[rows]``, on the CPU)."""
    padding = torch.ones(rows, dtype=torch.bool)
    padding[: slots.numel()] = slots.cpu() < 0
    return padding


def poison(x: torch.Tensor, padding: torch.Tensor) -> None:
    """Fill the ``padding`` rows (bool ``[rows]``) of ``x`` (``[rows, ...]``, on any device) with NaN, in place."""
    x[padding.to(x.device)] = float("nan")


def engine_slots(kind: str, slots: torch.Tensor, padding_slot: str) -> torch.Tensor | None:
    """The slot mapping a kernel is given in a case of ``kind`` whose slots (negative convention) are ``slots``:
    in a ``nan_padding`` case under a convention whose padding sentinel is not -1, the padding tokens' slots are
    the sentinel (a new tensor); None where the kernel gets ``slots`` themselves."""
    sentinel = padding_sentinel(padding_slot)
    if kind != NAN_PADDING_KIND or sentinel == -1:
        return None
    return slots.masked_fill(slots < 0, sentinel)

"""What makes a timed read figure a measurement of the read: the output rows hold the reference's after the timed calls.

Before each timed sample the outputs are filled with ``POISON``; after it, the rows of up to ``CHECKED_SEQUENCES``
sequences (the first and the last among them) must hold exactly what the op's reference reads for them from the
source cache the sample's last call took. So a reader that skipped the timed calls leaves poison, and one that
returns an earlier call's rows leaves the other source cache's (rtp_ref.bench.read_workloads takes them in turn).
The reference reads on the CPU from a copy of just the blocks those sequences hold, so a 2M-token read is checked
in seconds.
"""

from __future__ import annotations

import math

import torch

from rtp_ref.bench.read_workloads import ReadWorkload
from rtp_ref.bench.verify import POISON, compare_sets
from rtp_ref.bench.workloads import BLOCK_SIZE

#: sequences whose rows are compared after each sample
CHECKED_SEQUENCES = 4


def _rows_bytes(t: torch.Tensor) -> torch.Tensor:
    """``t`` ``[rows, ...]`` as uint8 ``[rows, row bytes]`` on the CPU."""
    return t.contiguous().view(torch.uint8).reshape(t.shape[0], -1).cpu()


class ReadCheck:
    """The check of one read workload: ``poison()`` before a sample, ``mismatch()`` after it (module doc)."""

    def __init__(self, w: ReadWorkload) -> None:
        """Work out the rows to check and the reference's bytes for them from every source cache."""
        self.workload = w
        table, cu = w.block_table.cpu().to(torch.int64), w.cu_seq_lens.cpu().to(torch.int64)
        count = cu.numel() - 1
        sequences = torch.unique(torch.linspace(0, count - 1, min(count, CHECKED_SEQUENCES)).round().to(torch.int64))
        lens = [int(cu[s + 1] - cu[s]) for s in sequences]
        spans = [table[s, : math.ceil(n / BLOCK_SIZE)] for s, n in zip(sequences.tolist(), lens, strict=True)]
        blocks = torch.unique(torch.cat(spans))
        position = torch.full((w.inputs[0][0].shape[0],), -1, dtype=torch.int64)
        position[blocks] = torch.arange(blocks.numel())
        mini_table = torch.zeros((sequences.numel(), table.shape[1]), dtype=torch.int32)
        for i, span in enumerate(spans):
            mini_table[i, : span.numel()] = position[span].to(torch.int32)
        mini_cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
        self.rows = torch.cat([torch.arange(int(cu[s]), int(cu[s + 1])) for s in sequences]).to(w.outputs[0].device)
        picked = blocks.to(w.inputs[0][0].device)
        self.expected = [self._reference(inputs[0].index_select(0, picked).cpu(), mini_table, mini_cu)
                         for inputs in w.inputs]

    def _reference(self, cache: torch.Tensor, table: torch.Tensor, cu: torch.Tensor) -> list[torch.Tensor]:
        rows = int(cu[-1])
        outputs = tuple(torch.empty((rows, *o.shape[1:]), dtype=o.dtype) for o in self.workload.outputs)
        for o in outputs:
            o.view(torch.uint8).fill_(POISON)
        self.workload.reference(cache, outputs, table, cu)
        return [_rows_bytes(o) for o in outputs]

    def poison(self) -> None:
        """Fill every output of the workload with ``POISON`` (before a timed sample)."""
        for o in self.workload.outputs:
            o.view(torch.uint8).fill_(POISON)

    def mismatch(self) -> str | None:
        """What differs between the checked rows and the reference's for the source cache of the latest call, or
        None when they are equal: how many bytes, how many still hold the poison, and whether the rows are another
        source cache's (a stale read)."""
        w = self.workload
        found = compare_sets([_rows_bytes(o.index_select(0, self.rows)) for o in w.outputs], self.expected, w.last)
        if found is None:
            return None
        differ, checked, poisoned, stale = found
        what = (f"they hold source cache {stale}'s rows, read by an earlier call: a stale read" if stale is not None
                else f"{poisoned} of them still hold the poison written before the sample")
        return (f"after a timed sample, {differ} of {checked} checked output bytes differ from the reference's read "
                f"of the last call's source cache (set {w.last}); {what}")

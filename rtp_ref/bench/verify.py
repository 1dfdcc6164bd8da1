"""What makes a timed figure a measurement of the write: the cache holds the reference's bytes after the timed calls.

Before each timed sample the caches are filled with ``POISON``; after it, the blocks checked must hold exactly what
the op's reference (rtp_ref.ops ``op_reference``) writes for the input set of the sample's last call into caches
filled with the same poison. So a kernel that skipped the timed calls leaves poison, and one that replays an
earlier call's bytes leaves the other input set's (rtp_ref.bench.workloads takes the sets in turn): either is
caught in the sample it happened in.

The blocks checked: all of them up to ``CHECKED_BLOCKS``, else ``CHECKED_BLOCKS`` blocks spread evenly over the
cache, the first and the last among them, with every byte of each (tokens, scales, rows no token writes). The
reference runs on the CPU over just the tokens those blocks receive, so a 2M-token write is checked in seconds.
"""

from __future__ import annotations

import torch

from rtp_ref.bench.workloads import LayeredWorkload, Tensors, Workload

#: the byte the caches hold before each timed sample
POISON = 0xA5
#: blocks compared after each sample: the whole cache of writes up to 4096 tokens (64-slot blocks, half written)
CHECKED_BLOCKS = 128


def _bytes(cache: torch.Tensor, blocks: torch.Tensor | None = None) -> torch.Tensor:
    """A cache's blocks (``blocks`` of them, or all) as uint8 ``[blocks, block bytes]`` on the CPU."""
    # viewed as bytes first: indexing is not implemented for every fp8 dtype on every device
    data = cache.view(torch.uint8)
    if blocks is not None:
        data = data.index_select(0, blocks)
    return data.reshape(data.shape[0], -1).cpu()


class CacheCheck:
    """The check of one workload: ``poison()`` before a sample, ``mismatch()`` after it (module doc)."""

    def __init__(self, w: Workload) -> None:
        """Work out the blocks to check and the reference's bytes in them for every input set, from the inputs as
        they are now (before any kernel runs: a kernel that wrote into its inputs cannot change what is
        expected)."""
        self.workload = w
        num_blocks, block_size = w.caches[0].shape[:2]
        count = min(num_blocks, CHECKED_BLOCKS)
        blocks = torch.unique(torch.linspace(0, num_blocks - 1, count).round().to(torch.int64))
        self.blocks = blocks.to(w.slots.device)
        position = torch.full((num_blocks,), -1, dtype=torch.int64)
        position[blocks] = torch.arange(blocks.numel())
        slots = w.slots.cpu().to(torch.int64)
        owner = position[slots // block_size]
        tokens = torch.nonzero(owner >= 0).flatten()
        # the checked tokens' slots in caches of just the checked blocks
        renumbered = owner[tokens] * block_size + slots[tokens] % block_size
        picked = tokens.to(w.slots.device)
        self.expected = [self._reference(tuple(t.index_select(0, picked).cpu() for t in inputs), renumbered)
                         for inputs in w.inputs]

    def _reference(self, inputs: Tensors, slots: torch.Tensor) -> list[torch.Tensor]:
        caches = tuple(torch.empty((self.blocks.numel(), *c.shape[1:]), dtype=c.dtype) for c in self.workload.caches)
        for c in caches:
            c.view(torch.uint8).fill_(POISON)
        self.workload.reference(inputs, caches, slots)
        return [_bytes(c) for c in caches]

    def poison(self) -> None:
        """Fill every cache of the workload with ``POISON`` (before a timed sample)."""
        for c in self.workload.caches:
            c.view(torch.uint8).fill_(POISON)

    def mismatch(self) -> str | None:
        """What differs between the checked blocks and the reference's bytes for the input set of the latest call,
        or None when they are equal: how many bytes, how many of them still hold the poison (not written since it
        was), and whether the blocks hold another input set's bytes instead (a stale write)."""
        w = self.workload
        found = compare_sets([_bytes(c, self.blocks) for c in w.caches], self.expected, w.last)
        if found is None:
            return None
        differ, checked, poisoned, stale = found
        what = (f"they hold input set {stale}'s bytes, written by an earlier call: a stale write" if stale is not None
                else f"{poisoned} of them still hold the poison written before the sample")
        return (f"after a timed sample, {differ} of {checked} checked cache bytes differ from the reference's for the "
                f"last call's inputs (set {w.last}); {what}")


def compare_sets(got: list[torch.Tensor], expected: list[list[torch.Tensor]],
                 last: int) -> tuple[int, int, int, int | None] | None:
    """``got`` (the checked bytes) against ``expected[last]`` (the reference's for the input set of the latest call):
    None when equal, else (bytes that differ, bytes checked, differing bytes that still hold ``POISON``, the other
    input set whose expected bytes ``got`` equals, or None)."""
    want = expected[last]
    if all(torch.equal(g, e) for g, e in zip(got, want, strict=True)):
        return None
    stale = next((i for i, other in enumerate(expected)
                  if i != last and all(torch.equal(g, e) for g, e in zip(got, other, strict=True))), None)
    differ = sum(int((g != e).sum()) for g, e in zip(got, want, strict=True))
    poisoned = sum(int(((g != e) & (g == POISON)).sum()) for g, e in zip(got, want, strict=True))
    return differ, sum(g.numel() for g in got), poisoned, stale


class LayeredCheck:
    """The check of a layered write (rtp_ref.bench.workloads ``LayeredWorkload``): every layer's caches, each as
    ``CacheCheck`` checks one write, so a grouped kernel that skips a layer is caught."""

    def __init__(self, w: LayeredWorkload) -> None:
        """One ``CacheCheck`` per layer (each works out its reference bytes from the layer's inputs as they are)."""
        self.layers = [CacheCheck(layer) for layer in w.layers]

    def poison(self) -> None:
        """Fill every layer's caches with ``POISON``."""
        for check in self.layers:
            check.poison()

    def mismatch(self) -> str | None:
        """The first layer whose checked blocks differ from the reference's bytes, named with what differs; None
        when every layer holds them."""
        for index, check in enumerate(self.layers):
            found = check.mismatch()
            if found is not None:
                return f"layer {index} of {len(self.layers)}: {found}"
        return None

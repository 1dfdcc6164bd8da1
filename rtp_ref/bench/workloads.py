"""One timed write per op, variant and size: the inputs a serving step hands the kernel, and the bytes it must move.

Inputs are random (never zeros, bf16, drawn on the device), slots a random permutation over a cache twice as
large as the write (so writes scatter as a serving batch's do), scales fixed; the same for the same arguments.
There are ``INPUT_SETS`` sets of inputs, with different values and the same slots, and the calls take them in
turn: a kernel that writes what an earlier call wrote (or nothing) leaves another set's bytes, which the check
after each timed sample sees (rtp_ref.bench.verify). A call can be repeated and captured in a graph.

Bytes counted: the fewest a write must move — inputs read once, int64 slots read once, cache bytes written once
(pad bytes excluded; block-trailing scales included). Shapes: the MLA write at the layout's default dims; the MHA
write with 8 KV heads of 128 (NHD, per-tensor scales); the indexer write with head_dim 128, one quant block.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rtp_ref.bench.measure import minimum_bytes
from rtp_ref.contract import WriteContract
from rtp_ref.kv.indexer import fixed_quant_block, indexer_layout_for
from rtp_ref.kv.layouts import default_dims
from rtp_ref.kv.mha_paged import mha_layout
from rtp_ref.ops import INDEXER_OP, MHA_OP, MLA_OP, op_reference

BLOCK_SIZE = 64
#: the MHA workload's KV heads and head size, the indexer's head_dim (its quant block: the whole head, or the
#: variant's own: mxfp4's 32)
MHA_HEADS, MHA_HEAD_SIZE, INDEXER_DIM = 8, 128, 128
INPUT_DTYPE = torch.bfloat16
#: input sets the calls take in turn (two: consecutive calls never see the same values)
INPUT_SETS = 2

Tensors = tuple[torch.Tensor, ...]


@dataclass
class Workload:
    """One bench point's arguments on the device: ``call(kernel)`` makes the op's call on the next input set;
    ``nbytes`` is what one call must move at least; ``slots`` is the slot mapping every call passes (a tool may
    rewrite it in place); ``caches`` the tensors the op writes, block first.

    ``inputs``: each set's per-token tensors; ``arguments(inputs)`` the op's call arguments for one set (the
    protocol's positional arguments, rtp_ref.kernels.protocol); ``reference(inputs, caches, slots)`` writes a set
    into ``caches`` with the op's reference (CPU tensors); ``last``: the index of the set the latest call took (-1
    before the first)."""

    op: str
    layout: str
    tokens: int
    nbytes: int
    slots: torch.Tensor
    caches: Tensors
    inputs: tuple[Tensors, ...]
    arguments: Callable[[Tensors], tuple[object, ...]]
    reference: Callable[[Tensors, Tensors, torch.Tensor], None]
    last: int = -1

    def invoke(self, kernel: Callable[..., None], inputs: Tensors) -> None:
        """The op's call of ``kernel`` on the input set ``inputs``."""
        kernel(*self.arguments(inputs))

    def call(self, kernel: Callable[..., None]) -> None:
        """The op's call of ``kernel`` on the next input set, the sets taken in turn."""
        self.last = (self.last + 1) % len(self.inputs)
        self.call_on(kernel, self.last)

    def call_on(self, kernel: Callable[..., None], index: int) -> None:
        """The op's call of ``kernel`` on input set ``index`` (``last`` is not changed)."""
        self.invoke(kernel, self.inputs[index])

    @property
    def footprint(self) -> int:
        """Bytes the calls go through in turn: ``nbytes`` and the inputs of the other sets (what decides whether
        they stay in a cache from one call to the next)."""
        per_set = sum(t.numel() * t.element_size() for t in self.inputs[0])
        return self.nbytes + (len(self.inputs) - 1) * per_set


def _randn(g: torch.Generator, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    # drawn on the device itself: 2M tokens of MHA inputs are 4G values, minutes of CPU time
    return torch.randn(shape, generator=g, dtype=torch.float32, device=device).to(INPUT_DTYPE)


def _slots(g: torch.Generator, tokens: int, device: torch.device,
           given: torch.Tensor | None) -> tuple[torch.Tensor, int]:
    """A random permutation of ``tokens`` slots over a cache twice as large (``given``: another layer's, the same
    tensor: every layer of a step writes the same slots); returns it and the block count."""
    num_blocks = math.ceil(2 * max(tokens, 1) / BLOCK_SIZE)
    if given is not None:
        return given, num_blocks
    return torch.randperm(num_blocks * BLOCK_SIZE, generator=g, device=device)[:tokens], num_blocks


def _mla(layout_name: str, tokens: int, contract: WriteContract, device: torch.device, g: torch.Generator,
         given: torch.Tensor | None) -> Workload:
    layout = contract.layout(layout_name, *default_dims(layout_name))
    slots, num_blocks = _slots(g, tokens, device, given)
    inputs = tuple((_randn(g, (tokens, layout.kv_lora_rank), device), _randn(g, (tokens, layout.rope_dim), device))
                   for _ in range(INPUT_SETS))
    cache = torch.zeros(layout.cache_shape(num_blocks, BLOCK_SIZE), dtype=layout.cache_dtype(INPUT_DTYPE),
                        device=device)
    scale = torch.tensor([0.05], dtype=torch.float32, device=device)

    def arguments(x: Tensors) -> tuple[object, ...]:
        return x[0], x[1], cache, slots, layout_name, scale

    def reference(x: Tensors, caches: Tensors, at: torch.Tensor) -> None:
        op_reference(MLA_OP)(layout, x[0], x[1], caches[0], at, scale.cpu())

    return Workload(MLA_OP, layout_name, tokens, minimum_bytes(layout, tokens, INPUT_DTYPE), slots, (cache,),
                    inputs, arguments, reference)


def _mha(variant: str, tokens: int, contract: WriteContract, device: torch.device, g: torch.Generator,
         given: torch.Tensor | None) -> Workload:
    layout = mha_layout(contract, variant, MHA_HEADS, MHA_HEAD_SIZE)
    shape = (tokens, MHA_HEADS, MHA_HEAD_SIZE)
    slots, num_blocks = _slots(g, tokens, device, given)
    inputs = tuple((_randn(g, shape, device), _randn(g, shape, device)) for _ in range(INPUT_SETS))
    dtype = layout.cache_dtype(INPUT_DTYPE)
    caches = tuple(torch.zeros((num_blocks, BLOCK_SIZE, MHA_HEADS, MHA_HEAD_SIZE), dtype=dtype, device=device)
                   for _ in range(2))
    scale = torch.tensor([0.05], dtype=torch.float32, device=device)
    values = 2 * tokens * MHA_HEADS * MHA_HEAD_SIZE
    nbytes = values * 2 + tokens * 8 + values * caches[0].element_size()

    def arguments(x: Tensors) -> tuple[object, ...]:
        return x[0], x[1], caches[0], caches[1], slots, variant, scale, scale

    def reference(x: Tensors, into: Tensors, at: torch.Tensor) -> None:
        op_reference(MHA_OP)(layout, x[0], x[1], into[0], into[1], at, scale.cpu(), scale.cpu())

    return Workload(MHA_OP, variant, tokens, nbytes, slots, caches, inputs, arguments, reference)


def _indexer(scale_fmt: str, tokens: int, contract: WriteContract, device: torch.device, g: torch.Generator,
             given: torch.Tensor | None) -> Workload:
    quant = fixed_quant_block(scale_fmt) or INDEXER_DIM
    layout = indexer_layout_for(contract, contract.flags, INDEXER_DIM, quant, scale_fmt=scale_fmt)
    slots, num_blocks = _slots(g, tokens, device, given)
    inputs = tuple((_randn(g, (tokens, INDEXER_DIM), device),) for _ in range(INPUT_SETS))
    cache = torch.zeros((num_blocks, BLOCK_SIZE, layout.bytes_per_token), dtype=torch.uint8, device=device)
    nbytes = tokens * INDEXER_DIM * 2 + tokens * 8 + tokens * layout.bytes_per_token

    def arguments(x: Tensors) -> tuple[object, ...]:
        return x[0], cache, slots, quant, scale_fmt

    def reference(x: Tensors, caches: Tensors, at: torch.Tensor) -> None:
        op_reference(INDEXER_OP)(layout, x[0], caches[0], at, scale_fmt)

    return Workload(INDEXER_OP, scale_fmt, tokens, nbytes, slots, (cache,), inputs, arguments, reference)


_BUILDERS = {MLA_OP: _mla, MHA_OP: _mha, INDEXER_OP: _indexer}


def workload(op: str, variant: str, tokens: int, contract: WriteContract, device: torch.device,
             slots: torch.Tensor | None = None, layer: int = 0) -> Workload:
    """The bench point of ``op``'s ``variant`` at ``tokens`` tokens on ``device`` under ``contract``: the same for
    the same arguments. ``layer`` > 0 draws other values (another layer's inputs) into caches of its own;
    ``slots``: the slot mapping to write (another layer's), else one drawn."""
    values = torch.Generator(device=device).manual_seed(tokens + (layer << 32))
    return _BUILDERS[op](variant, tokens, contract, device, values, slots)


@dataclass
class LayeredWorkload:
    """The same write for ``len(layers)`` layers of one step: each layer's caches and inputs, one slot mapping.

    ``call(kernel)`` writes every layer on the next input set: in one call of ``kernel.write_layers`` where the
    kernel has it (a grouped kernel: one launch for the layers; it takes each layer's arguments as the op's call
    takes them, the protocol's positional arguments), else one call per layer. ``nbytes``: every layer's."""

    layers: list[Workload]

    @property
    def op(self) -> str:
        """The op every layer's write makes."""
        return self.layers[0].op

    @property
    def layout(self) -> str:
        """The variant every layer's cache holds."""
        return self.layers[0].layout

    @property
    def tokens(self) -> int:
        """Tokens each layer's write takes."""
        return self.layers[0].tokens

    @property
    def nbytes(self) -> int:
        """The fewest bytes the layers' writes move, all of them."""
        return sum(w.nbytes for w in self.layers)

    @property
    def footprint(self) -> int:
        """Bytes every layer's calls go through in turn."""
        return sum(w.footprint for w in self.layers)

    @property
    def inputs(self) -> tuple[tuple[Tensors, ...], ...]:
        """Per input set, each layer's inputs of that set."""
        return tuple(tuple(w.inputs[i] for w in self.layers) for i in range(INPUT_SETS))

    @property
    def last(self) -> int:
        """The index of the input set the latest call took (every layer's)."""
        return self.layers[0].last

    @last.setter
    def last(self, index: int) -> None:
        for w in self.layers:
            w.last = index

    def invoke(self, kernel: Callable[..., None], inputs: tuple[Tensors, ...]) -> None:
        """Every layer's write of its inputs ``inputs[layer]``: grouped or one call per layer (class doc)."""
        grouped = getattr(kernel, "write_layers", None)
        if grouped is not None:
            grouped([w.arguments(x) for w, x in zip(self.layers, inputs, strict=True)])
            return
        for w, x in zip(self.layers, inputs, strict=True):
            w.invoke(kernel, x)

    def call(self, kernel: Callable[..., None]) -> None:
        """Every layer's write on the next input set, the sets taken in turn."""
        self.last = (self.last + 1) % INPUT_SETS
        self.call_on(kernel, self.last)

    def call_on(self, kernel: Callable[..., None], index: int) -> None:
        """Every layer's write of input set ``index`` (``last`` is not changed)."""
        self.invoke(kernel, self.inputs[index])


def layered(op: str, variant: str, tokens: int, layers: int, contract: WriteContract,
            device: torch.device) -> LayeredWorkload:
    """``layers`` layers' writes of ``op``'s ``variant`` at ``tokens`` tokens: other values and caches per layer,
    layer 0's slot mapping for all (``workload``)."""
    first = workload(op, variant, tokens, contract, device)
    return LayeredWorkload([first, *(workload(op, variant, tokens, contract, device, first.slots, layer)
                                     for layer in range(1, layers))])

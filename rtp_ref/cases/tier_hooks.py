"""What the large-address and CUDA-graph tiers need of a write op: its ``OpCases.large`` (``LargeTier``) and
``OpCases.graph`` (a builder of ``GraphCase``). The tiers themselves (rtp_ref.certify.large_cases and graph_cases)
are written once over these hooks, so an op joins a tier by stating them in its module."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from rtp_ref.cases.cases import CaseSpec
from rtp_ref.contract import WriteContract


@dataclass(frozen=True)
class PoolCaches:
    """An op's caches as the large tier lays them in a serving pool: their names (one pool layer each, in the
    call's order), their element dtype, one block's shape (rows first) and the op's layout at those shapes."""

    names: tuple[str, ...]
    dtype: torch.dtype
    block: tuple[int, ...]
    layout: Any

    @property
    def block_bytes(self) -> int:
        """Bytes of one block of one cache."""
        return math.prod(self.block) * torch.empty((), dtype=self.dtype).element_size()

    @property
    def row_bytes(self) -> int:
        """Bytes of one block row (a slot) of one cache."""
        return self.block_bytes // self.block[0]


@dataclass(frozen=True)
class LargeTier:
    """An op's large-address hooks. ``caches(variant, contract, block_size)``: its caches' shape; ``inputs(layout, g,
    tokens)``: its value inputs and scales on the CPU (seeded by ``g``); ``call(fn, variant, caches, slots, inputs)``:
    ``fn`` (a kernel of the op) called on them as engines call it; ``reference(layout, variant, caches, slots,
    inputs)``: the op's reference writing the same tokens into CPU caches of the same shape."""

    caches: Callable[[str, WriteContract, int], PoolCaches]
    inputs: Callable[[Any, torch.Generator, int], tuple[torch.Tensor, ...]]
    call: Callable[[Callable[..., None], str, Sequence[torch.Tensor], torch.Tensor, tuple[torch.Tensor, ...]], None]
    reference: Callable[[Any, str, Sequence[torch.Tensor], torch.Tensor, tuple[torch.Tensor, ...]], None]


class GraphCase(Protocol):
    """A write case as the graph tier uses it: its storage (every byte the call may touch), its call, its input
    tensors by name (the tier copies new values into them in place), and its reference onto a storage copy."""

    @property
    def storage(self) -> torch.Tensor: ...

    def call(self, kernel: Callable[..., None]) -> None:
        """Call ``kernel`` on the case's tensors as engines call the op."""

    def inputs(self) -> dict[str, torch.Tensor]:
        """The call's input tensors by argument name (slots and scales under ``SLOTS_AND_SCALES``' names)."""

    def reference_on(self, storage: torch.Tensor) -> None:
        """Write what the reference writes for the inputs as they are now into ``storage`` (a CPU copy)."""


#: the graph tier's inputs that are not values (its third replay and its padding scenario change these)
SLOTS_AND_SCALES = ("slot_mapping", "scale", "k_scale", "v_scale")

#: an op's graph hook: the op's case of ``spec`` (kind ``random``; the tier picks tokens and blocks) on ``device``
GraphBuilder = Callable[[CaseSpec, WriteContract, str], GraphCase]


def spread_values(g: torch.Generator, dtype: torch.dtype, *shape: int) -> torch.Tensor:
    """Normal values of ``shape`` in ``dtype``, each row (first dimension) scaled by a power of two in [2^-4, 2^4]:
    rows of one call span the magnitudes a serving batch does."""
    spread = torch.exp2(torch.randint(-4, 5, (shape[0],) + (1,) * (len(shape) - 1), generator=g).float())
    return (torch.randn(*shape, generator=g) * spread).to(dtype)


def per_tensor_scale(*xs: torch.Tensor, fmt_max: float) -> torch.Tensor:
    """The fp32 ``[1]`` scale that maps the largest magnitude among ``xs`` to ``fmt_max`` (a calibrated scale)."""
    amax = max(float(x.float().abs().max()) for x in xs)
    return torch.tensor([amax / fmt_max], dtype=torch.float32)

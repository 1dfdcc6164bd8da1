"""What the engine needs of an op's conformance cases: ``OpCases`` (the cases of each variant and how one is built)
and ``BuiltCase`` (a case on the device under test: snapshot, call, grade). Every op's module (rtp_ref/ops) puts
its ``OpCases`` in its record; the engine and the conformance suite are written once over them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from rtp_ref.cases.domain import Dimension, Domain, Value, outside
from rtp_ref.cases.grading import Grading
from rtp_ref.cases.tier_hooks import GraphBuilder, LargeTier
from rtp_ref.contract import WriteContract


class DeviationKey(Protocol):
    """What a deviation is matched on: the case's variant, kind and tokens."""

    @property
    def layout(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def tokens(self) -> int: ...


class CaseKey(DeviationKey, Protocol):
    """A case's identity: its variant (``layout``), kind and token count (what a deviation is matched on), its seed
    and id. The key of an op that names argument dimensions (``OpCases.domain``) also has ``arguments``: the value
    it gives each (``arguments_of``)."""

    @property
    def seed(self) -> int: ...

    @property
    def case_id(self) -> str: ...


def arguments_of(key: object) -> Mapping[str, Value]:
    """The value a case ``key`` gives each argument dimension of its op (its ``arguments``); empty for the key of
    an op that names none."""
    found = getattr(key, "arguments", None)
    return found if isinstance(found, Mapping) else {}


class BuiltCase(Protocol):
    """One case built on the device under test: its tensors are views into byte storages between guard zones."""

    @property
    def key(self) -> CaseKey: ...

    @property
    def layout(self) -> object:
        """The op's layout object at the case's shapes (what a kernel's ``supports`` is asked about)."""

    def check_as_built(self, device: str) -> None:
        """Raise AssertionError (the suite's own error) unless every tensor is on ``device`` and the strided kinds
        are strided there."""

    def snapshot(self) -> torch.Tensor:
        """A CPU copy of every byte the call may touch (the storages, in a fixed order)."""

    def call(self, kernel: Callable[..., None]) -> None:
        """Call ``kernel`` the way engines call the op."""

    def value_inputs(self) -> tuple[torch.Tensor, ...]:
        """The inputs a kernel's ``input_requirements`` speak of."""

    def grade(self, before: torch.Tensor, after: torch.Tensor, max_ulp: float) -> Grading:
        """Grade the call from ``snapshot()`` before and after it."""

    def diagnose(self, after: torch.Tensor, contract: WriteContract) -> str | None:
        """Which known contract the bytes follow instead, when they are wrong (None: nothing to say)."""

    def record_fields(self) -> Mapping[str, Any]:
        """Facts of the case for its report record beyond its key (the MLA dims, say)."""


@dataclass(frozen=True)
class PastCapacity:
    """A write case whose last token's slot is one past the cache: its built case, the bytes its valid tokens may
    write (over ``snapshot()``), and each cache's trailing guard, at least one block long, as ``(cache name, start,
    end)`` positions (where an unchecked write of the bad slot lands)."""

    case: BuiltCase
    valid_footprint: torch.Tensor
    guards: tuple[tuple[str, int, int], ...]


def random_sample(specs: Callable[[str], Iterable[CaseKey]]) -> Callable[[str], CaseKey]:
    """A ``sample`` for ``OpCases``: a variant's first random case of more than one token among ``specs``."""

    def sample(variant: str) -> CaseKey:
        return next(key for key in specs(variant) if key.tokens > 1 and key.kind == "random")

    return sample


@dataclass(frozen=True)
class OpCases:
    """The conformance cases of one op: ``specs(variant)`` gives every case key of a variant, ``build(key,
    contract, device)`` builds one; ``sample(variant)`` is a case of many tokens standing for the variant (the
    unclaimed-variant and determinism cases use it); ``names_variant``: whether the op's call names the variant (a
    kernel can refuse only a variant it is told); ``past_capacity(key, contract, device)``: the key's case with its
    last slot one past the cache, for ops that write through a slot mapping (None: the op has no slots);
    ``large`` and ``graph``: the op's hooks for the large-address and CUDA-graph tiers (rtp_ref.cases.tier_hooks;
    None: the op has no case in that tier); ``domain``: the argument dimensions a kernel may narrow, which every case
    key's ``arguments`` give a value (rtp_ref.cases.domain); ``launch(variant, device)``: the variant's launch-size
    case for a kernel on torch device type ``device`` (rtp_ref.cases.launch_size; None: the op has none)."""

    op: str
    specs: Callable[[str], Iterable[CaseKey]]
    build: Callable[[Any, WriteContract, str], BuiltCase]
    sample: Callable[[str], CaseKey]
    names_variant: bool = True
    past_capacity: Callable[[Any, WriteContract, str], PastCapacity] | None = None
    large: LargeTier | None = None
    graph: GraphBuilder | None = None
    domain: tuple[Dimension, ...] = ()
    launch: Callable[[str, str], CaseKey] | None = None

    def keys(self, variant: str, device: str) -> Iterator[CaseKey]:
        """Every regular case of ``variant`` for a kernel on torch device type ``device``: ``specs(variant)``, then
        the launch-size case at the size that device takes, where the op has one."""
        yield from self.specs(variant)
        if self.launch is not None:
            yield self.launch(variant, device)

    def sample_in(self, variant: str, declared: Domain) -> CaseKey:
        """``sample(variant)``, or where it is outside the ``declared`` domain the variant's first random case of
        more than one token inside it (the pair cases a kernel must take: determinism, the out-of-range slot); the
        sample when no such case exists (the kernel then answers for refusing it)."""
        first = self.sample(variant)
        if not outside(declared, arguments_of(first)):
            return first
        return next((key for key in self.specs(variant) if key.kind == "random" and key.tokens > 1
                     and not outside(declared, arguments_of(key))), first)

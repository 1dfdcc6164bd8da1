"""What an op is, as one record (``OpSpec``): its name, cache family, call, the variants a kernel may claim, the
reference that defines it and its conformance cases. Each op's module in this package defines its record as
``OP``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rtp_ref.cases.op_cases import OpCases


@dataclass(frozen=True)
class OpSpec:
    """One op: what a kernel of it is called with, what it may claim, and the reference that defines it."""

    name: str
    #: the cache family (``rtp-ref layouts --family``)
    family: str
    #: the kernel attribute listing the variants it claims
    claims: str
    #: every variant of the op: the values of its variant argument
    variants: tuple[str, ...]
    #: the call the suite makes, as the kernel implements it
    signature: str
    #: what built-in kernels of the op append to their implementation's name
    name_suffix: str
    #: the reference the op is defined by: called as a kernel of the op is, with the variant's layout first
    reference: Callable[..., None]
    #: its conformance cases: their keys, how one is built, called and graded (the engine runs them)
    cases: OpCases
    #: a read op: it fills a dense output from a cache and leaves the cache as it is
    reads: bool = False
    #: where the op comes in lists and reports (lower first; an op without one comes after the built-in five)
    rank: int = 100

"""The non-finite cases of a dynamic-scale layout (rtp_ref.kv.non_finite): one per class, graded in a column of
its own.

Each layout whose record states a non-finite policy gets three 8-token cases (kinds ``NON_FINITE_KINDS``): its
tokens 0 and 1 hold the class (``nonfinite_nan``: a NaN of each sign; ``nonfinite_inf``: +inf and -inf;
``zero_tile``: a token of zeros and one of -0.0), the others random values. A class the policy defines is graded
like any case. For a class it leaves undefined, only where the kernel wrote is judged (``PLACEMENT_CHECKS``: no
byte outside the tokens' entries); the bytes it stored there are reported, ``undefined``, never a pass or a failure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rtp_ref.cases.checks import Check
from rtp_ref.kv.non_finite import NonFinitePolicy

#: the kind of each class's case
NON_FINITE_KINDS = {"nonfinite_nan": "nan", "nonfinite_inf": "inf", "zero_tile": "zero_tile"}
#: the checks an undefined class is still judged by: where the kernel wrote, not what
PLACEMENT_CHECKS = ("layout.untouched_bytes", "layout.entry_bounds", "layout.block_stride", "layout.reserved_slot",
                    "support.kernel_ran")


@dataclass(frozen=True)
class NonFiniteCase:
    """What the engine needs of a built case of a non-finite kind (its ``non_finite``): the class, the layout's
    policy, and ``stored(before, after)``: what the kernel stored for the class's values, for the report."""

    cls: str
    policy: NonFinitePolicy
    stored: Callable[[torch.Tensor, torch.Tensor], str]

    @property
    def defined(self) -> bool:
        """Whether the policy defines the class's bytes."""
        return self.policy.defined(self.cls)


def with_class(x: torch.Tensor, kind: str) -> None:
    """Put the class of case ``kind`` into rows 0 and 1 of ``x`` ``[T, width]`` (16-bit, any device), in place."""
    if kind == "zero_tile":
        x[0] = 0.0
        x[1] = -0.0
        return
    bits = x.view(torch.int16)
    width = x.shape[1]
    if kind == "nonfinite_nan":
        # set by bits: assigning float("nan") gives whichever sign torch's cast picks
        quiet = 0x7FC0 if x.dtype == torch.bfloat16 else 0x7E00
        bits[0, 5 % width], bits[1, width - 1] = quiet, (quiet | 0x8000) - 0x10000
        return
    x[0, 5 % width], x[1, width - 1] = float("inf"), float("-inf")


def placement_only(checks: list[Check]) -> list[Check]:
    """The checks of ``checks`` an undefined class is judged by (``PLACEMENT_CHECKS``)."""
    return [c for c in checks if c.name in PLACEMENT_CHECKS]

"""A dynamic-scale layout's non-finite policy: what its writer stores for a tile holding NaN, one holding +-inf,
and an all-zero tile, as its sources state it, or ``undefined`` where none does.

A scale computed from the values (a tile's amax) meets inputs a per-tensor scale never does: a NaN makes the amax
NaN or is dropped by ``fmaxf``, an inf makes the scale infinite and every other value of the tile 0 or NaN, an
all-zero tile needs a floor (compressed-tensors #595: an infinite global scale). Writers disagree (sglang's V41
writer "does not handle NaN/inf"; vLLM's gfx950 writer replaces NaN, vLLM #57523), so each layout record states its
own (``rtp_ref.kv.records.LayoutRecord.non_finite``) and certify grades each class in a case of its own, in its own
column: a class the policy defines is graded like any case; an undefined one is reported as ``undefined`` with what
the kernel stored, never as a pass or a failure (docs/conformance.md#non-finite-policies).
"""

from __future__ import annotations

from dataclasses import dataclass

#: what a policy says of a class no source defines
UNDEFINED = "undefined"
#: the classes of non-finite or degenerate tiles, in the order reports list them
NON_FINITE_CLASSES = ("nan", "inf", "zero_tile")
#: how reports name each class
CLASS_TEXT = {"nan": "NaN in a tile", "inf": "+-inf in a tile", "zero_tile": "an all-zero tile"}


@dataclass(frozen=True)
class NonFinitePolicy:
    """What a layout's writer stores for each class of ``NON_FINITE_CLASSES``: a description of the bytes, or
    ``UNDEFINED``; ``source``: where that is stated."""

    nan: str
    inf: str
    zero_tile: str
    source: str

    def states(self, cls: str) -> str:
        """What the policy says of class ``cls`` (one of ``NON_FINITE_CLASSES``)."""
        if cls not in NON_FINITE_CLASSES:
            raise ValueError(f"non-finite class {cls!r}; valid: {', '.join(NON_FINITE_CLASSES)}")
        text: str = getattr(self, cls)
        return text

    def defined(self, cls: str) -> bool:
        """Whether the policy defines the bytes of class ``cls``."""
        return self.states(cls) != UNDEFINED

    @property
    def text(self) -> str:
        """The whole policy on one line: ``NaN in a tile: undefined; ...; an all-zero tile: ... (source)``."""
        return "; ".join(f"{CLASS_TEXT[c]}: {self.states(c)}" for c in NON_FINITE_CLASSES) + f" ({self.source})"

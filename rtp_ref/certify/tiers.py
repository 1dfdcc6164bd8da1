"""The conformance tiers a run selects (``rtp-ref certify --tier``, ``--rtp-tier``). Torch- and pytest-free:
the pytest plugin and the report read it.

``regular``: every case of every claimed layout; ``large``: one case per op and layout whose cache passes
4 GiB (rtp_ref.certify.large_cases); ``graph``: each op and layout captured in a CUDA graph and replayed with
new inputs (rtp_ref.certify.graph_cases; CUDA devices only); ``stream``: each write op and layout called on a
non-default stream right after a producer that writes its inputs late (rtp_ref.certify.stream_cases; CUDA devices
only); ``all``: every tier, each with its own column in the report.
"""

from __future__ import annotations

#: the tiers a case belongs to, the regular one first (a case record without a ``tier`` is a regular case)
TIERS = ("regular", "large", "graph", "stream")
#: what ``--tier`` accepts: a tier, or ``all`` of them
TIER_CHOICES = (*TIERS, "all")


def runs_tier(selected: str, tier: str) -> bool:
    """Whether a run given ``--tier selected`` runs the cases of ``tier``."""
    return selected in (tier, "all")


#: what the skip reason of a kernel that declares ``graph_safe = False`` says (the report's ``declined``)
DECLINES = "declares graph_safe = False"


def declined_reason(name: str) -> str:
    """The skip reason of the graph-tier cases of kernel ``name``, which declares it is not graph-safe."""
    return f"graph tier: {name} {DECLINES}"

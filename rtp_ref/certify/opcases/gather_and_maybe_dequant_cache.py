"""The MLA read's conformance cases (``gather_and_maybe_dequant_cache``): rtp_ref.certify.gather_cases."""

from __future__ import annotations

from rtp_ref.certify.gather_cases import GatherSpec, gather_specs
from rtp_ref.certify.opcases.base import OpCases
from rtp_ref.certify.opcases.read import ReadCase
from rtp_ref.ops import MLA_GATHER_OP


def _sample(variant: str) -> GatherSpec:
    return next(s for s in gather_specs(variant) if s.tokens > 1 and s.kind == "random")


CASES = OpCases(MLA_GATHER_OP, gather_specs, ReadCase, _sample)

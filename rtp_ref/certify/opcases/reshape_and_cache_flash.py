"""The MHA paged write's conformance cases (``reshape_and_cache_flash``): rtp_ref.certify.family_cases.mha_specs."""

from __future__ import annotations

from rtp_ref.certify.family_cases import FamilySpec, mha_specs
from rtp_ref.certify.opcases.base import OpCases
from rtp_ref.certify.opcases.family_write import FamilyWriteCase, past_capacity
from rtp_ref.ops import MHA_OP


def _sample(variant: str) -> FamilySpec:
    return next(s for s in mha_specs(variant) if s.tokens > 1 and s.kind == "random")


CASES = OpCases(MHA_OP, mha_specs, FamilyWriteCase, _sample, past_capacity=past_capacity)

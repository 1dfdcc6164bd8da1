"""The indexer write's conformance cases (``indexer_k_quant_and_cache``): rtp_ref.certify.family_cases.
indexer_specs."""

from __future__ import annotations

from rtp_ref.certify.family_cases import FamilySpec, indexer_specs
from rtp_ref.certify.opcases.base import OpCases
from rtp_ref.certify.opcases.family_write import FamilyWriteCase, past_capacity
from rtp_ref.ops import INDEXER_OP


def _sample(variant: str) -> FamilySpec:
    return next(s for s in indexer_specs(variant) if s.tokens > 1 and s.kind == "random")


CASES = OpCases(INDEXER_OP, indexer_specs, FamilyWriteCase, _sample, past_capacity=past_capacity)

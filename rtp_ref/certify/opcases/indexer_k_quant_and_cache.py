"""The indexer write's conformance cases (``indexer_k_quant_and_cache``): rtp_ref.certify.family_cases.
indexer_specs."""

from __future__ import annotations

from rtp_ref.certify.family_cases import FamilySpec, indexer_specs
from rtp_ref.certify.opcases.base import OpCases
from rtp_ref.certify.opcases.family_write import FamilyWriteCase
from rtp_ref.ops import INDEXER_OP


def _unclaimed(variant: str) -> FamilySpec:
    return next(s for s in indexer_specs(variant) if s.tokens > 1)


CASES = OpCases(INDEXER_OP, indexer_specs, FamilyWriteCase, _unclaimed)

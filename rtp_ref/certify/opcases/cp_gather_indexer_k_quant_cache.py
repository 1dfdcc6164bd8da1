"""The indexer read's conformance cases (``cp_gather_indexer_k_quant_cache``): rtp_ref.certify.
indexer_gather_cases. Its call names no variant, so a reader cannot refuse one (``names_variant=False``): there is
no unclaimed case."""

from __future__ import annotations

from rtp_ref.certify.indexer_gather_cases import IndexerGatherSpec, indexer_gather_specs
from rtp_ref.certify.opcases.base import OpCases
from rtp_ref.certify.opcases.read import ReadCase
from rtp_ref.ops import INDEXER_GATHER_OP


def _sample(variant: str) -> IndexerGatherSpec:
    return next(s for s in indexer_gather_specs(variant) if s.tokens > 1 and s.kind == "random")


CASES = OpCases(INDEXER_GATHER_OP, indexer_gather_specs, ReadCase, _sample, names_variant=False)

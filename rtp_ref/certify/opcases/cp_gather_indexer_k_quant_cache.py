"""The indexer read's conformance cases (``cp_gather_indexer_k_quant_cache``): rtp_ref.certify.
indexer_gather_cases. Its call names no variant, so a reader cannot refuse one: there is no unclaimed case."""

from __future__ import annotations

from rtp_ref.certify.indexer_gather_cases import indexer_gather_specs
from rtp_ref.certify.opcases.base import OpCases
from rtp_ref.certify.opcases.read import ReadCase
from rtp_ref.ops import INDEXER_GATHER_OP

CASES = OpCases(INDEXER_GATHER_OP, indexer_gather_specs, ReadCase, lambda variant: None)

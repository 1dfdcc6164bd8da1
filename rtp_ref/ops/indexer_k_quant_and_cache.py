"""``indexer_k_quant_and_cache``: DeepSeek V3.2's indexer cache write; its variants the scale_fmt values."""

from __future__ import annotations

from rtp_ref.cases.mha_indexer_cases import INDEXER_DOMAIN, indexer_launch, indexer_specs
from rtp_ref.cases.mha_indexer_tiers import INDEXER_LARGE, indexer_graph_case
from rtp_ref.cases.mha_indexer_write import MhaIndexerWriteCase, past_capacity
from rtp_ref.cases.op_cases import OpCases, random_sample
from rtp_ref.kv.indexer import SCALE_FORMATS, reference_indexer_k_quant_and_cache
from rtp_ref.kv.op_names import INDEXER_OP
from rtp_ref.ops.record import OpSpec

OP = OpSpec(INDEXER_OP, "indexer", "scale_fmts", SCALE_FORMATS,
            "kernel(k, kv_cache, slot_mapping, quant_block_size, scale_fmt)",
            "-indexer", reference_indexer_k_quant_and_cache,
            OpCases(INDEXER_OP, indexer_specs, MhaIndexerWriteCase, random_sample(indexer_specs),
                    past_capacity=past_capacity,
                    large=INDEXER_LARGE, graph=indexer_graph_case, domain=INDEXER_DOMAIN, launch=indexer_launch),
            reads=False, rank=2)

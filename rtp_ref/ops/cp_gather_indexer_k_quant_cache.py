"""``cp_gather_indexer_k_quant_cache``: The indexer cache's stored codes and scales gathered into dense rows; its call
names no variant, the variants (scale_fmt) say how the cache read was written."""

from __future__ import annotations

from rtp_ref.cases.indexer_gather_cases import INDEXER_GATHER_DOMAIN, indexer_gather_specs
from rtp_ref.cases.op_cases import OpCases, random_sample
from rtp_ref.cases.read_case import ReadCase
from rtp_ref.kv.indexer import SCALE_FORMATS
from rtp_ref.kv.indexer_gather import gather_indexer_k_quant_cache
from rtp_ref.kv.op_names import INDEXER_GATHER_OP
from rtp_ref.ops.record import OpSpec

OP = OpSpec(INDEXER_GATHER_OP, "indexer", "scale_fmts", SCALE_FORMATS,
            "kernel(kv_cache, dst_k, dst_scale, block_table, cu_seq_lens)",
            "-indexer-gather", gather_indexer_k_quant_cache,
            OpCases(INDEXER_GATHER_OP, indexer_gather_specs, ReadCase, random_sample(indexer_gather_specs),
                    names_variant=False, domain=INDEXER_GATHER_DOMAIN),
            reads=True, rank=4)

"""``reshape_and_cache_flash``: vLLM's paged K/V write; its variants the cache dtypes."""

from __future__ import annotations

from rtp_ref.cases.mha_indexer_cases import MHA_DOMAIN, mha_launch, mha_specs
from rtp_ref.cases.mha_indexer_tiers import MHA_LARGE, mha_graph_case
from rtp_ref.cases.mha_indexer_write import MhaIndexerWriteCase, past_capacity
from rtp_ref.cases.op_cases import OpCases, random_sample
from rtp_ref.kv.mha_paged import MHA_CACHE_DTYPES, reference_reshape_and_cache_flash
from rtp_ref.kv.op_names import MHA_OP
from rtp_ref.ops.record import OpSpec

OP = OpSpec(MHA_OP, "mha", "kv_cache_dtypes", MHA_CACHE_DTYPES,
            "kernel(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale)",
            "-mha", reference_reshape_and_cache_flash,
            OpCases(MHA_OP, mha_specs, MhaIndexerWriteCase, random_sample(mha_specs), past_capacity=past_capacity,
                    large=MHA_LARGE, graph=mha_graph_case, domain=MHA_DOMAIN, launch=mha_launch),
            reads=False, rank=1)

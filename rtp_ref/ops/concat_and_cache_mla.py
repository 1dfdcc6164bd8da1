"""``concat_and_cache_mla``: The MLA write: the latent cache, its variants the MLA layouts (vLLM, rtp-llm)."""

from __future__ import annotations

from rtp_ref.cases.mla_tiers import MLA_LARGE, MlaGraphCase
from rtp_ref.cases.mla_write import MLA_DOMAIN, MlaWriteCase, mla_keys, mla_launch, mla_past_capacity, mla_sample
from rtp_ref.cases.op_cases import OpCases
from rtp_ref.kv.cache import reference_write
from rtp_ref.kv.layout_records import MLA_LAYOUT_NAMES
from rtp_ref.kv.op_names import MLA_OP
from rtp_ref.ops.record import OpSpec

OP = OpSpec(MLA_OP, "mla", "kv_cache_dtypes", MLA_LAYOUT_NAMES,
            "kernel(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale)",
            "", reference_write,
            OpCases(MLA_OP, mla_keys, MlaWriteCase, mla_sample, past_capacity=mla_past_capacity,
                    large=MLA_LARGE, graph=MlaGraphCase, domain=MLA_DOMAIN, launch=mla_launch),
            reads=False, rank=0)

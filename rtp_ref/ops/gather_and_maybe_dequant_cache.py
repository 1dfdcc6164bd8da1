"""``gather_and_maybe_dequant_cache``: vLLM's MLA gather: sequences read out of the cache through a block table into
dense dequantised rows; its variants the MLA layouts."""

from __future__ import annotations

from rtp_ref.cases.gather_cases import GATHER_DOMAIN, gather_specs
from rtp_ref.cases.op_cases import OpCases, random_sample
from rtp_ref.cases.read_case import ReadCase
from rtp_ref.kv.gather import gather_and_maybe_dequant_cache
from rtp_ref.kv.layout_records import MLA_LAYOUT_NAMES
from rtp_ref.kv.op_names import MLA_GATHER_OP
from rtp_ref.ops.record import OpSpec

OP = OpSpec(MLA_GATHER_OP, "mla", "kv_cache_dtypes", MLA_LAYOUT_NAMES,
            "kernel(kv_cache, dst, block_table, cu_seq_lens, kv_cache_dtype, scale, seq_starts)",
            "-gather", gather_and_maybe_dequant_cache,
            OpCases(MLA_GATHER_OP, gather_specs, ReadCase, random_sample(gather_specs), domain=GATHER_DOMAIN),
            reads=True, rank=3)

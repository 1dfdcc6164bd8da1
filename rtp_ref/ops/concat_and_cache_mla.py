"""``concat_and_cache_mla``: The MLA write: the latent cache, its variants the MLA layouts (vLLM, rtp-llm)."""

from __future__ import annotations

from rtp_ref.kv.cache import reference_write
from rtp_ref.kv.layout_records import MLA_LAYOUT_NAMES
from rtp_ref.ops.names import MLA_OP
from rtp_ref.ops.record import OpSpec

OP = OpSpec(MLA_OP, "mla", "kv_cache_dtypes", MLA_LAYOUT_NAMES,
            "kernel(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale)",
            "", reference_write, reads=False, rank=0)

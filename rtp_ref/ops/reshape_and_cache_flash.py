"""``reshape_and_cache_flash``: vLLM's paged K/V write; its variants the cache dtypes."""

from __future__ import annotations

from rtp_ref.kv.mha_paged import MHA_CACHE_DTYPES, reference_reshape_and_cache_flash
from rtp_ref.ops.names import MHA_OP
from rtp_ref.ops.record import OpSpec

OP = OpSpec(MHA_OP, "mha", "kv_cache_dtypes", MHA_CACHE_DTYPES,
            "kernel(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale)",
            "-mha", reference_reshape_and_cache_flash, reads=False, rank=1)

"""``indexer_k_quant_and_cache``: DeepSeek V3.2's indexer cache write; its variants the scale_fmt values."""

from __future__ import annotations

from rtp_ref.kv.indexer import SCALE_FORMATS, reference_indexer_k_quant_and_cache
from rtp_ref.ops.names import INDEXER_OP
from rtp_ref.ops.record import OpSpec

OP = OpSpec(INDEXER_OP, "indexer", "scale_fmts", SCALE_FORMATS,
            "kernel(k, kv_cache, slot_mapping, quant_block_size, scale_fmt)",
            "-indexer", reference_indexer_k_quant_and_cache, reads=False, rank=2)

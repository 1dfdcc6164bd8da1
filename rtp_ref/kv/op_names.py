"""The names of the built-in ops, for the code that calls one of them by name."""

#: the op of a kernel without an ``op`` attribute
MLA_OP = "concat_and_cache_mla"
MHA_OP = "reshape_and_cache_flash"
INDEXER_OP = "indexer_k_quant_and_cache"
MLA_GATHER_OP = "gather_and_maybe_dequant_cache"
INDEXER_GATHER_OP = "cp_gather_indexer_k_quant_cache"

"""The MHA paged write's and the indexer write's hooks for the large-address and CUDA-graph tiers
(rtp_ref.cases.tier_hooks). The MHA write's key and value caches are two layers of the pool (FlashInfer's
``[num_blocks, 2, block_size, H, D]``), with Llama-style 8 KV heads of 128; the indexer cache is one layer."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from rtp_ref.cases.cases import CaseSpec
from rtp_ref.cases.mha_indexer_cases import (
    IndexerCase,
    MhaCase,
    MhaIndexerSpec,
    build_mha_indexer_case,
    variant_scales,
)
from rtp_ref.cases.tier_hooks import LargeTier, PoolCaches, per_tensor_scale, spread_values
from rtp_ref.contract import WriteContract
from rtp_ref.kv.indexer import DEFAULT_HEAD_DIM, IndexerLayout, indexer_layout_for, quant_block_for
from rtp_ref.kv.indexer import reference_indexer_k_quant_and_cache as indexer_reference
from rtp_ref.kv.mha_paged import MhaPagedLayout, mha_layout, reference_reshape_and_cache_flash
from rtp_ref.kv.op_names import INDEXER_OP, MHA_OP

#: the tiers' input dtype
INPUT_DTYPE = torch.bfloat16
#: MHA heads and head size of the tiers (a Llama-style 8 KV heads of 128)
MHA_HEADS, MHA_HEAD_SIZE = 8, 128


def _mha_caches(variant: str, contract: WriteContract, block_size: int) -> PoolCaches:
    layout = mha_layout(contract, variant, MHA_HEADS, MHA_HEAD_SIZE)
    return PoolCaches(("key_cache", "value_cache"), layout.cache_dtype(INPUT_DTYPE),
                      (block_size, MHA_HEADS, layout.row_width), layout)


def _mha_inputs(layout: MhaPagedLayout, g: torch.Generator, tokens: int) -> tuple[torch.Tensor, ...]:
    key = spread_values(g, INPUT_DTYPE, tokens, MHA_HEADS, MHA_HEAD_SIZE)
    value = spread_values(g, INPUT_DTYPE, tokens, MHA_HEADS, MHA_HEAD_SIZE)
    fmt_max = layout.calibration_max
    return key, value, per_tensor_scale(key, fmt_max=fmt_max), per_tensor_scale(value, fmt_max=fmt_max)


def _mha_call(fn: Callable[..., None], variant: str, caches: Sequence[torch.Tensor], slots: torch.Tensor,
              inputs: tuple[torch.Tensor, ...]) -> None:
    key, value, k_scale, v_scale = inputs
    fn(key, value, caches[0], caches[1], slots, variant, k_scale, v_scale)


def _mha_reference(layout: MhaPagedLayout, variant: str, caches: Sequence[torch.Tensor], slots: torch.Tensor,
                   inputs: tuple[torch.Tensor, ...]) -> None:
    key, value, k_scale, v_scale = inputs
    reference_reshape_and_cache_flash(layout, key, value, caches[0], caches[1], slots, k_scale, v_scale)


def _indexer_caches(variant: str, contract: WriteContract, block_size: int) -> PoolCaches:
    layout = indexer_layout_for(contract, contract.flags, DEFAULT_HEAD_DIM, quant_block_for(variant),
                                scale_fmt=variant)
    return PoolCaches(("kv_cache",), torch.uint8, (block_size, layout.bytes_per_token), layout)


def _indexer_inputs(layout: IndexerLayout, g: torch.Generator, tokens: int) -> tuple[torch.Tensor, ...]:
    return (spread_values(g, INPUT_DTYPE, tokens, layout.head_dim),)


def _indexer_call(fn: Callable[..., None], variant: str, caches: Sequence[torch.Tensor], slots: torch.Tensor,
                  inputs: tuple[torch.Tensor, ...]) -> None:
    fn(inputs[0], caches[0], slots, quant_block_for(variant), variant)


def _indexer_reference(layout: IndexerLayout, variant: str, caches: Sequence[torch.Tensor], slots: torch.Tensor,
                       inputs: tuple[torch.Tensor, ...]) -> None:
    indexer_reference(layout, inputs[0], caches[0], slots, variant)


MHA_LARGE = LargeTier(_mha_caches, _mha_inputs, _mha_call, _mha_reference)
INDEXER_LARGE = LargeTier(_indexer_caches, _indexer_inputs, _indexer_call, _indexer_reference)


class MhaIndexerGraphCase:
    """An MHA or indexer case (rtp_ref.cases.mha_indexer_cases) as the graph tier uses it
    (rtp_ref.cases.tier_hooks.GraphCase)."""

    def __init__(self, spec: MhaIndexerSpec, contract: WriteContract, device: str) -> None:
        self.case = build_mha_indexer_case(spec, contract, device)

    @property
    def storage(self) -> torch.Tensor:
        """Every byte the call may touch."""
        return self.case.storage

    def call(self, kernel: Callable[..., None]) -> None:
        """The op as engines call it."""
        self.case.call(kernel)

    def inputs(self) -> dict[str, torch.Tensor]:
        """The call's inputs by argument name."""
        c = self.case
        if isinstance(c, MhaCase):
            return {"key": c.key, "value": c.value, "slot_mapping": c.slot_mapping, "k_scale": c.k_scale,
                    "v_scale": c.v_scale}
        assert isinstance(c, IndexerCase)
        return {"k": c.k, "slot_mapping": c.slot_mapping}

    def reference_on(self, storage: torch.Tensor) -> None:
        """The reference's write of the inputs as they are now into ``storage``."""
        self.case.reference_on(storage)


def mha_graph_case(spec: CaseSpec, contract: WriteContract, device: str) -> MhaIndexerGraphCase:
    """The graph tier's MHA case: GQA heads of 128, per-head scales where the variant takes them (nvfp4's are
    global: one value each)."""
    case_spec = MhaIndexerSpec(*_fields(spec), op=MHA_OP, width=MHA_HEAD_SIZE, heads=MHA_HEADS,
                               scales=variant_scales(spec.layout, "head"))
    return MhaIndexerGraphCase(case_spec, contract, device)


def indexer_graph_case(spec: CaseSpec, contract: WriteContract, device: str) -> MhaIndexerGraphCase:
    """The graph tier's indexer case: head_dim 128 in one quant block (``mxfp4``: its blocks of 32)."""
    case_spec = MhaIndexerSpec(*_fields(spec), op=INDEXER_OP, width=128, quant_block=quant_block_for(spec.layout))
    return MhaIndexerGraphCase(case_spec, contract, device)


def _fields(spec: CaseSpec) -> tuple[str, str, int, int, int, torch.dtype, int]:
    return spec.layout, spec.kind, spec.tokens, spec.block_size, spec.num_blocks, spec.input_dtype, spec.seed

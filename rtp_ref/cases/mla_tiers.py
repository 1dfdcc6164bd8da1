"""The MLA write's hooks for the large-address and CUDA-graph tiers (rtp_ref.cases.tier_hooks): one latent cache
per pool layer, ``kv_c`` and ``k_pe`` in bf16 and a calibrated per-tensor scale."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from rtp_ref.cases.cases import CaseSpec, build_case, cache_view
from rtp_ref.cases.tier_hooks import LargeTier, PoolCaches, per_tensor_scale, spread_values
from rtp_ref.contract import WriteContract
from rtp_ref.kv.cache import reference_write
from rtp_ref.kv.layouts import MlaLayout, default_dims

#: the tiers' input dtype
INPUT_DTYPE = torch.bfloat16


def _caches(variant: str, contract: WriteContract, block_size: int) -> PoolCaches:
    layout = contract.layout(variant, *default_dims(variant))
    return PoolCaches(("kv_cache",), layout.cache_dtype(INPUT_DTYPE), (block_size, layout.cache_entry), layout)


def _inputs(layout: MlaLayout, g: torch.Generator, tokens: int) -> tuple[torch.Tensor, ...]:
    kv_c = spread_values(g, INPUT_DTYPE, tokens, layout.kv_lora_rank)
    k_pe = spread_values(g, INPUT_DTYPE, tokens, layout.rope_dim)
    return kv_c, k_pe, per_tensor_scale(kv_c, k_pe, fmt_max=layout.element_format.max_value)


def _call(fn: Callable[..., None], variant: str, caches: Sequence[torch.Tensor], slots: torch.Tensor,
          inputs: tuple[torch.Tensor, ...]) -> None:
    kv_c, k_pe, scale = inputs
    fn(kv_c, k_pe, caches[0], slots, variant, scale)


def _reference(layout: MlaLayout, variant: str, caches: Sequence[torch.Tensor], slots: torch.Tensor,
               inputs: tuple[torch.Tensor, ...]) -> None:
    kv_c, k_pe, scale = inputs
    reference_write(layout, kv_c, k_pe, caches[0], slots, scale)


MLA_LARGE = LargeTier(_caches, _inputs, _call, _reference)


class MlaGraphCase:
    """An MLA case (rtp_ref.cases.cases) as the graph tier uses it (rtp_ref.cases.tier_hooks.GraphCase)."""

    def __init__(self, spec: CaseSpec, contract: WriteContract, device: str) -> None:
        self.layout = contract.layout(spec.layout, *default_dims(spec.layout))
        self.spec = spec
        self.case = build_case(spec, self.layout, device, padding_slot=contract.flags.padding_slot)

    @property
    def storage(self) -> torch.Tensor:
        """Every byte the call may touch."""
        return self.case.storage

    def call(self, kernel: Callable[..., None]) -> None:
        """``concat_and_cache_mla`` as engines call it."""
        c = self.case
        kernel(c.kv_c, c.k_pe, c.kv_cache, c.slot_mapping, self.layout.name, c.scale)

    def inputs(self) -> dict[str, torch.Tensor]:
        """The call's inputs by argument name."""
        c = self.case
        return {"kv_c": c.kv_c, "k_pe": c.k_pe, "slot_mapping": c.slot_mapping, "scale": c.scale}

    def reference_on(self, storage: torch.Tensor) -> None:
        """The reference's write of the inputs as they are now into ``storage``."""
        c, s = self.case, self.spec
        cache = cache_view(self.layout, storage, s.num_blocks, s.block_size, s.input_dtype, c.padded_rows)
        reference_write(self.layout, c.kv_c.cpu(), c.k_pe.cpu(), cache, c.slot_mapping.cpu(), c.scale.cpu())

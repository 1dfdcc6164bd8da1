"""Writers that ignore the engine's padding convention: each op's reference bound to a platform contract, but
reading every slot in the negative convention, so that under ``padding_slot=zero`` the padding tokens (NaN rows)
land in slot 0, the engine's reserved sink (sglang #36207: MLA writers overwrote slot 0 on MI350X).

Certified through ``RTP_REF_KERNELS=tests.mutants.padding_mutants:mutants`` with ``--layout-flag
padding_slot=zero`` (tests/mutants/test_padding_mutants.py); ``PADDING_EXPECTED`` names the check that must catch
each one.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from rtp_ref.contract import WriteContract
from rtp_ref.kernels.protocol import UnsupportedLayoutError
from rtp_ref.kv.cache import reference_write
from rtp_ref.kv.indexer import indexer_layout_for, reference_indexer_k_quant_and_cache
from rtp_ref.kv.mha_paged import mha_layout, reference_reshape_and_cache_flash
from rtp_ref.ops import INDEXER_OP, MHA_OP, MLA_OP


def _as_real(slot_mapping: torch.Tensor) -> torch.Tensor:
    """The slots such a writer writes: slot 0 taken as a real slot, once (a kernel writes every token given slot 0
    there, whichever lands last winning; the reference refuses a repeated slot, so the later ones are dropped)."""
    zeros = torch.nonzero(slot_mapping == 0).flatten()
    out = slot_mapping.clone()
    out[zeros[1:]] = -1
    return out


class _SlotZeroWriter:
    """A reference writer that takes slot 0 for a real slot whatever the contract's ``padding_slot`` says."""

    name: ClassVar[str]
    op: ClassVar[str]
    devices = ("cpu",)
    conversion_path = "software"

    def __init__(self, contract: WriteContract | None = None) -> None:
        self.contract = contract

    def bind(self, contract: WriteContract) -> _SlotZeroWriter:
        return type(self)(contract)

    def bound(self) -> WriteContract:
        if self.contract is None:
            raise UnsupportedLayoutError(f"{self.name}: bind(contract) it first")
        return self.contract


class MlaWritesReservedSlot(_SlotZeroWriter):
    name = "mutant-mla-writes-reserved-slot"
    op = MLA_OP
    kv_cache_dtypes = ("auto", "fp8_ds_mla")

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        if kv_cache_dtype not in self.kv_cache_dtypes:
            raise UnsupportedLayoutError(f"{self.name} does not support {kv_cache_dtype}")
        layout = self.bound().layout(kv_cache_dtype, kv_c.shape[1], k_pe.shape[1])
        reference_write(layout, kv_c, k_pe, kv_cache, _as_real(slot_mapping), scale)


class MhaWritesReservedSlot(_SlotZeroWriter):
    name = "mutant-mha-writes-reserved-slot"
    op = MHA_OP
    kv_cache_dtypes = ("auto", "fp8")

    def __call__(self, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                 slot_mapping: torch.Tensor, kv_cache_dtype: str, k_scale: torch.Tensor,
                 v_scale: torch.Tensor) -> None:
        if kv_cache_dtype not in self.kv_cache_dtypes:
            raise UnsupportedLayoutError(f"{self.name} does not support {kv_cache_dtype}")
        layout = mha_layout(self.bound(), kv_cache_dtype, key_cache.shape[2], key_cache.shape[3])
        reference_reshape_and_cache_flash(layout, key, value, key_cache, value_cache, _as_real(slot_mapping), k_scale,
                                          v_scale)


class IndexerWritesReservedSlot(_SlotZeroWriter):
    name = "mutant-indexer-writes-reserved-slot"
    op = INDEXER_OP
    scale_fmts = ("none", "ue8m0")

    def __call__(self, k: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor, quant_block_size: int,
                 scale_fmt: str) -> None:
        contract = self.bound()
        layout = indexer_layout_for(contract, contract.flags, k.shape[1], quant_block_size)
        reference_indexer_k_quant_and_cache(layout, k, kv_cache, _as_real(slot_mapping), scale_fmt)


#: mutant class -> the check that must catch it under ``padding_slot=zero``
PADDING_EXPECTED: dict[type[_SlotZeroWriter], str] = {
    MlaWritesReservedSlot: "layout.reserved_slot",
    MhaWritesReservedSlot: "layout.reserved_slot",
    IndexerWritesReservedSlot: "layout.reserved_slot",
}


def mutants() -> list[object]:
    """The entry point for ``RTP_REF_KERNELS``: one instance of each."""
    return [cls() for cls in PADDING_EXPECTED]

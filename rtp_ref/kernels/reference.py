"""The reference writer wrapped as a kernel, so the suite can certify the reference itself.

Certifying it checks the harness end to end: a correct kernel must reach ``bit_exact`` on every
case; the mutants in tests/ show the same harness rejects wrong ones.
"""

from __future__ import annotations

from collections.abc import Collection

import torch

from rtp_ref.contract import WriteContract
from rtp_ref.kernels.protocol import UnsupportedLayoutError
from rtp_ref.kv.cache import KV_CACHE_DTYPE_ALIASES
from rtp_ref.kv.padding import as_negative
from rtp_ref.ops import MLA_OP, op_reference
from rtp_ref.platform import MLA_LAYOUT_NAMES


class ReferenceKernel:
    """``concat_and_cache_mla`` by ``rtp_ref.kv.reference_write``, for any bound contract."""

    name = "reference"
    kv_cache_dtypes: Collection[str] = MLA_LAYOUT_NAMES
    devices: Collection[str] = ("cpu", "cuda")
    conversion_path = "software"
    #: it writes on the host: a CUDA graph cannot capture it (the graph tier does not try)
    graph_safe = False

    def __init__(self, contract: WriteContract | None = None) -> None:
        self.contract = contract

    def bind(self, contract: WriteContract) -> ReferenceKernel:
        """The reference configured for ``contract``."""
        return ReferenceKernel(contract)

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        name = KV_CACHE_DTYPE_ALIASES.get(kv_cache_dtype, kv_cache_dtype)
        if name not in self.kv_cache_dtypes:
            raise UnsupportedLayoutError(
                f"reference: unknown kv_cache_dtype {kv_cache_dtype!r}; valid: {', '.join(self.kv_cache_dtypes)}")
        if self.contract is None:
            raise UnsupportedLayoutError("reference: bind(contract) it to a platform contract before calling it")
        layout = self.contract.layout(name, kv_c.shape[-1], k_pe.shape[-1])
        op_reference(MLA_OP)(layout, kv_c, k_pe, kv_cache, as_negative(slot_mapping, self.contract.flags.padding_slot),
                             scale)

"""Known-bad kernels of the CUDA-graph tier: the built-in triton MLA kernel wrapped with one graph bug each, as the
production bugs had them. Each claims ``graph_safe = True``, so the tier must fail it with the check that names
its bug; on the regular tier (eager calls) all but the slot-0 one write what the reference writes.

* a host-side slot check before the launch: ``.any()`` syncs, which a capture refuses (``graph.capture``);
* the scale copied on the kernel's first call and reused: a captured pointer to the copy replays the old scale
  after the caller's tensor changed (FlashInfer #3740; ``graph.new_slots_and_scales``);
* the slot map copied once per tensor (a plan built from the values): replays keep the capture-time slots
  (``graph.new_slots_and_scales``, and the warm-up graph never writes: ``graph.after_padding_warmup``);
* padding slots clamped to 0 (vLLM #38719, sglang #35351: warm-up batches wrote slot 0;
  ``graph.padding_untouched``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from rtp_ref.contract import WriteContract
from rtp_ref.kernels.triton_mla import TritonMlaKernel
from rtp_ref.platform import MLA_LAYOUT_NAMES


class _GraphMutant:
    """The built-in triton kernel (device validation) with one graph bug injected by ``__call__``."""

    name: ClassVar[str]
    kv_cache_dtypes = MLA_LAYOUT_NAMES
    devices = ("cuda",)
    conversion_path = "hardware"
    #: the (false) claim the tier must refute
    graph_safe = True

    def __init__(self, contract: WriteContract | None = None) -> None:
        self.contract = contract
        self.inner = TritonMlaKernel(contract)
        self.kept: dict[int, torch.Tensor] = {}

    def bind(self, contract: WriteContract) -> Any:
        return type(self)(contract)

    def _kept(self, x: torch.Tensor) -> torch.Tensor:
        """A copy of ``x`` made at the first call that passed this tensor, reused ever after."""
        if x.data_ptr() not in self.kept:
            self.kept[x.data_ptr()] = x.clone()
        return self.kept[x.data_ptr()]


class HostSlotCheck(_GraphMutant):
    """Refuses a slot past the cache on the host first: one sync per call."""

    name = "graph-host-slot-check"

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        if bool((slot_mapping >= kv_cache.shape[0] * kv_cache.shape[1]).any()):
            raise ValueError(f"{self.name}: a slot is past the cache")
        self.inner(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale)


class ScaleCopiedOnce(_GraphMutant):
    """Copies the scale at its first call and divides by the copy from then on."""

    name = "graph-scale-copied-once"

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        self.inner(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, self._kept(scale))


class SlotsCopiedOnce(_GraphMutant):
    """Copies the slot map at its first call (a plan built from its values) and reuses the copy."""

    name = "graph-slots-copied-once"

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        self.inner(kv_c, k_pe, kv_cache, self._kept(slot_mapping), kv_cache_dtype, scale)


class PaddingToSlotZero(_GraphMutant):
    """Clamps padding slots to 0 (``max(slot, 0)``): every padding token is written to slot 0."""

    name = "graph-padding-to-slot-0"

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        self.inner(kv_c, k_pe, kv_cache, slot_mapping.clamp(min=0), kv_cache_dtype, scale)


#: each mutant and the graph checks that must name it (fp8 layouts: the scale mutant needs a per-tensor scale)
GRAPH_EXPECTED: dict[type[_GraphMutant], set[str]] = {
    HostSlotCheck: {"graph.capture"},
    ScaleCopiedOnce: {"graph.new_slots_and_scales"},
    SlotsCopiedOnce: {"graph.new_slots_and_scales", "graph.after_padding_warmup"},
    PaddingToSlotZero: {"graph.padding_untouched"},
}


def graph_mutants() -> list[object]:
    """The entry point for ``RTP_REF_KERNELS``: one instance of each graph-tier mutant."""
    return [cls() for cls in GRAPH_EXPECTED]

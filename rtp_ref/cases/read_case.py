"""What the read ops' conformance cases share: a cache the reference wrote and canary-filled outputs, each in a
storage between guard zones; the snapshot is the cache storage followed by the output storage."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from rtp_ref.cases.gather_cases import GatherCase, GatherSpec
from rtp_ref.cases.gather_grading import grade_gather, grade_indexer_gather
from rtp_ref.cases.grading import Grading
from rtp_ref.cases.indexer_gather_cases import IndexerGatherCase, IndexerGatherSpec
from rtp_ref.cases.read_diagnosis import diagnose_read
from rtp_ref.contract import WriteContract


class ReadCase:
    """One read case on a device (rtp_ref.cases.op_cases.BuiltCase): an MLA gather or an indexer gather."""

    def __init__(self, key: GatherSpec | IndexerGatherSpec, contract: WriteContract, device: str) -> None:
        self.key = key
        self.case: GatherCase | IndexerGatherCase = (GatherCase(key, contract, device) if isinstance(key, GatherSpec)
                                                     else IndexerGatherCase(key, contract, device))
        self.layout: object = self.case.layout
        self.nan = contract.nan_policy

    def check_as_built(self, device: str) -> None:
        """The cache and the outputs are on the device under test."""
        assert self.case.kv_cache.device.type == device and self.case.dst_storage.device.type == device, \
            f"suite error: the case is not on {device}"

    def snapshot(self) -> torch.Tensor:
        return torch.cat([self.case.cache_storage.cpu(), self.case.dst_storage.cpu()])

    def call(self, kernel: Callable[..., None]) -> None:
        self.case.call(kernel)

    def value_inputs(self) -> tuple[torch.Tensor, ...]:
        return ()

    def grade(self, before: torch.Tensor, after: torch.Tensor, max_ulp: float) -> Grading:
        split = self.case.cache_storage.numel()
        cache_before, dst_before, cache_after, dst_after = before[:split], before[split:], after[:split], after[split:]
        if isinstance(self.case, GatherCase):
            return grade_gather(self.case, cache_before, cache_after, dst_before, dst_after, max_ulp, self.nan)
        return grade_indexer_gather(self.case, cache_before, cache_after, dst_before, dst_after, self.nan)

    def diagnose(self, after: torch.Tensor, contract: WriteContract) -> str | None:
        """For the MLA gather: how the reader computed its rows (rtp_ref.cases.read_diagnosis); the indexer
        gather copies bytes, with nothing to search."""
        if not isinstance(self.case, GatherCase) or self.case.spec.tokens == 0:
            return None
        return diagnose_read(self.case, after[self.case.cache_storage.numel():])

    def record_fields(self) -> Mapping[str, Any]:
        return {}

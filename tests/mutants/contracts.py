"""Correct writers of another contract than the platform's: what the report's diagnosis must name.

Loaded through ``RTP_REF_KERNELS=tests.mutants.contracts:kernels``.
"""

from __future__ import annotations

from rtp_ref.contract import WriteContract
from rtp_ref.fp8 import FLT_MIN
from rtp_ref.fp8.scales import ScaleRule
from tests.mutants.kernels import Mutant, _with_flags


class AmaxDivFltMin(Mutant):
    """fp8_ds_mla with scales amax / 448 floored at FLT_MIN: another writer's convention."""

    name = "contract-amax-div-flt-min"
    kv_cache_dtypes = ("fp8_ds_mla",)

    def mutate_contract(self, contract: WriteContract) -> WriteContract:
        return _with_flags(contract, ds_mla_scale_rule=ScaleRule.AMAX_DIV, ds_mla_scale_floor=FLT_MIN)


def kernels() -> list[Mutant]:
    """The entry point for ``RTP_REF_KERNELS``."""
    return [AmaxDivFltMin()]

"""The MHA write's contract search (rtp_ref.cases.mha_diagnosis), run by the engine on real kernels: a kernel that
rounds toward zero, or multiplies by its scale, is named; one that takes the wrong scale is not blamed on its
conversion. The faulty writers are written from their description (tests/mutants/mha_indexer_mutants.py)."""

from __future__ import annotations

import torch

from rtp_ref.cases.mha_indexer_cases import mha_specs
from rtp_ref.certify.engine import Subject, run_case
from rtp_ref.contract import WriteContract
from rtp_ref.kv.mha_paged import MhaPagedLayout, reference_reshape_and_cache_flash
from rtp_ref.platform import load_platform
from tests.mutants.mha_indexer_mutants import MhaMutant, PerTensorForPerHead, TruncatingConversion

PLATFORM = load_platform("cpu")
CONTRACT = WriteContract.for_platform(PLATFORM)


class ScaleAsMultiplier(MhaMutant):
    """Stores fp8(x * s): the quantisation scale applied the wrong way round."""

    name = "mha-scale-as-multiplier"
    kv_cache_dtypes = ("fp8",)

    def write(self, layout: MhaPagedLayout, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
              value_cache: torch.Tensor, slots: torch.Tensor, k_scale: torch.Tensor, v_scale: torch.Tensor) -> None:
        reference_reshape_and_cache_flash(layout, key, value, key_cache, value_cache, slots, 1.0 / k_scale,
                                          1.0 / v_scale)


def _diagnosis(kernel: object) -> str:
    key = next(s for s in mha_specs("fp8") if s.kind == "random" and s.tokens == 37 and s.order == "HND")
    result = run_case(Subject("k", kernel, "reshape_and_cache_flash", "cpu", "native"), key, CONTRACT, PLATFORM, None)
    assert result.judgement.failed
    return str(result.record.get("diagnosis"))


def test_a_truncating_conversion_is_named() -> None:
    assert _diagnosis(TruncatingConversion().bind(CONTRACT)) == (
        "the fp8 codes follow x / s, rounded toward zero, satfinite; the contract is x / s in fp32, rounded to "
        "nearest even, satfinite")


def test_a_scale_applied_as_a_multiplier_is_named() -> None:
    text = _diagnosis(ScaleAsMultiplier().bind(CONTRACT))
    assert text.startswith("the fp8 codes follow x * s, the scale applied as a multiplier, rounded to nearest even")


def test_a_wrong_scale_is_not_blamed_on_the_conversion() -> None:
    text = _diagnosis(PerTensorForPerHead().bind(CONTRACT))  # the first head's scale for every head
    assert text.startswith("the fp8 codes match no known conversion (tried 12)"), text

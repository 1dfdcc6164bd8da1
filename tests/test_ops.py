"""The op records (rtp_ref/ops.py) name each op's reference writer and case generator, and the suite takes
both from there: a record pointed elsewhere changes what the built-in reference kernel writes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rtp_ref import ops
from rtp_ref.certify.family_cases import build_family_case
from rtp_ref.kernels.contract import WriteContract
from rtp_ref.kernels.family_builtin import family_kernels
from rtp_ref.platform import load_platform

# the functions the records must name, written out here rather than read from the records
NAMED = {
    ops.MLA_OP: ("rtp_ref.kv.cache", "reference_write", "rtp_ref.certify.case_matrix", "case_specs"),
    ops.MHA_OP: ("rtp_ref.kv.mha_paged", "reference_reshape_and_cache_flash", "rtp_ref.certify.family_cases",
                 "mha_specs"),
    ops.INDEXER_OP: ("rtp_ref.kv.indexer", "reference_indexer_k_quant_and_cache", "rtp_ref.certify.family_cases",
                     "indexer_specs"),
    ops.MLA_GATHER_OP: ("rtp_ref.kv.gather", "gather_and_maybe_dequant_cache", "rtp_ref.certify.gather_cases",
                        "gather_specs"),
    ops.INDEXER_GATHER_OP: ("rtp_ref.kv.indexer_gather", "gather_indexer_k_quant_cache",
                            "rtp_ref.certify.indexer_gather_cases", "indexer_gather_specs"),
}


@pytest.mark.parametrize("op", list(ops.OPS))
def test_each_record_names_its_reference_and_the_cases_of_each_variant(op: str) -> None:
    ref_module, ref_name, cases_module, cases_name = NAMED[op]
    reference, cases = ops.op_reference(op), ops.op_cases(op)
    assert (reference.__module__, reference.__name__) == (ref_module, ref_name)
    assert (cases.__module__, cases.__name__) == (cases_module, cases_name)
    for variant in ops.OPS[op].variants:
        specs = [c[0] if isinstance(c, tuple) else c for c in cases(variant)]
        assert specs and all(s.layout == variant for s in specs)
        assert all(getattr(s, "op", ops.MLA_OP) == op for s in specs)


def _writes_nothing(*args: object) -> None:
    """A stand-in reference for the test below."""


def test_the_builtin_reference_kernel_writes_what_its_record_names(monkeypatch: pytest.MonkeyPatch) -> None:
    contract = WriteContract.for_platform(load_platform("cpu"))
    kernel = next(k for k in family_kernels() if k.name == "reference-mha").bind(contract)
    spec = next(s for s in ops.op_cases(ops.MHA_OP)("fp8") if s.tokens > 1)

    def storage_after_a_call() -> tuple[torch.Tensor, torch.Tensor]:
        case = build_family_case(spec, contract, "cpu")
        before = case.storage.clone()
        case.call(kernel)
        return before, case.storage

    before, after = storage_after_a_call()
    assert not torch.equal(before, after)
    elsewhere = dataclasses.replace(ops.OPS[ops.MHA_OP], reference=f"{__name__}:_writes_nothing")
    monkeypatch.setitem(ops.OPS, ops.MHA_OP, elsewhere)
    before, after = storage_after_a_call()
    assert torch.equal(before, after)

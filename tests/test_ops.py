"""The op records (rtp_ref/ops, one module each) name each op's reference, each op's conformance cases
(rtp_ref/ops) give cases of every variant, and the suite takes the reference from the record: a record
pointed elsewhere changes what the built-in reference kernel writes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rtp_ref import ops
from rtp_ref.cases.mha_indexer_cases import build_mha_indexer_case, mha_specs
from rtp_ref.contract import WriteContract
from rtp_ref.kernels.mha_indexer_builtin import mha_indexer_kernels
from rtp_ref.platform import load_platform

# the references the records must name, written out here rather than read from the records
NAMED = {
    ops.MLA_OP: ("rtp_ref.kv.cache", "reference_write"),
    ops.MHA_OP: ("rtp_ref.kv.mha_paged", "reference_reshape_and_cache_flash"),
    ops.INDEXER_OP: ("rtp_ref.kv.indexer", "reference_indexer_k_quant_and_cache"),
    ops.MLA_GATHER_OP: ("rtp_ref.kv.gather", "gather_and_maybe_dequant_cache"),
    ops.INDEXER_GATHER_OP: ("rtp_ref.kv.indexer_gather", "gather_indexer_k_quant_cache"),
}


def test_the_scan_finds_the_five_ops_in_rank_order_each_with_its_cases() -> None:
    assert list(ops.OPS) == list(NAMED)
    assert all(spec.cases.op == name for name, spec in ops.OPS.items())


@pytest.mark.parametrize("op", list(ops.OPS))
def test_each_record_names_its_reference_and_its_op_has_cases_of_each_variant(op: str) -> None:
    reference = ops.op_reference(op)
    assert (reference.__module__, reference.__name__) == NAMED[op]
    for variant in ops.OPS[op].variants:
        keys = list(ops.op_spec(op).cases.specs(variant))
        assert keys and all(k.layout == variant for k in keys)
        # the MLA write's keys wrap its case specs (which name no op); the other ops' specs name theirs
        assert all(getattr(getattr(k, "spec", k), "op", ops.MLA_OP) == op for k in keys)


def _writes_nothing(*args: object) -> None:
    """A stand-in reference for the test below."""


def test_the_builtin_reference_kernel_writes_what_its_record_names(monkeypatch: pytest.MonkeyPatch) -> None:
    contract = WriteContract.for_platform(load_platform("cpu"))
    kernel = next(k for k in mha_indexer_kernels() if k.name == "reference-mha").bind(contract)
    spec = next(s for s in mha_specs("fp8") if s.tokens > 1)

    def storage_after_a_call() -> tuple[torch.Tensor, torch.Tensor]:
        case = build_mha_indexer_case(spec, contract, "cpu")
        before = case.storage.clone()
        case.call(kernel)
        return before, case.storage

    before, after = storage_after_a_call()
    assert not torch.equal(before, after)
    elsewhere = dataclasses.replace(ops.OPS[ops.MHA_OP], reference=_writes_nothing)
    monkeypatch.setitem(ops.OPS, ops.MHA_OP, elsewhere)
    before, after = storage_after_a_call()
    assert torch.equal(before, after)

"""Every op's failed checks read like the MLA write's: each names up to three examples (token or row, slot, field,
element, the kernel's value or ``not written``, the contract's), on one line of bounded length.

Each mutant of the MHA, indexer and read ops is run on its op's cases until the check that must catch it fails;
then every check that failed in that case is read.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rtp_ref.cases.gather_cases import GatherCase
from rtp_ref.cases.gather_grading import grade_gather, grade_indexer_gather
from rtp_ref.cases.grading import MAX_DETAIL, Grading
from rtp_ref.cases.indexer_gather_cases import IndexerGatherCase
from rtp_ref.cases.invalid_calls import MUST_RAISE_KINDS
from rtp_ref.cases.mha_indexer_cases import MhaIndexerSpec, build_mha_indexer_case
from rtp_ref.cases.mha_indexer_grading import grade_mha_indexer_write
from rtp_ref.contract import WriteContract
from rtp_ref.ops import MLA_GATHER_OP, op_name, op_spec
from rtp_ref.platform import load_platform
from tests.mutants.gather_mutants import GATHER_EXPECTED
from tests.mutants.mha_indexer_mutants import MHA_INDEXER_EXPECTED

#: every mutant of the other ops whose fault a grade check names (an unclaimed layout is not graded)
GRADED = {cls: expected for cls, expected in {**MHA_INDEXER_EXPECTED, **GATHER_EXPECTED}.items()
          if not expected[1].startswith("support.")}


def _contract(platform: str) -> WriteContract:
    return WriteContract.for_platform(load_platform(platform))


def _graded(kernel: Any, spec: Any, contract: WriteContract) -> Grading:
    """Build ``spec``'s case on the CPU, call ``kernel`` on it and grade the call."""
    if isinstance(spec, MhaIndexerSpec):
        case = build_mha_indexer_case(spec, contract, "cpu")
        before = case.storage.clone()
        case.call(kernel)
        return grade_mha_indexer_write(case, before, case.storage.clone(), 1.0)
    reader = GatherCase(spec, contract, "cpu") if spec.op == MLA_GATHER_OP else IndexerGatherCase(spec, contract, "cpu")
    cache_before, dst_before = reader.cache_storage.clone(), reader.dst_storage.clone()
    reader.call(kernel)
    after = (reader.cache_storage.clone(), reader.dst_storage.clone())
    if isinstance(reader, GatherCase):
        return grade_gather(reader, cache_before, after[0], dst_before, after[1])
    return grade_indexer_gather(reader, cache_before, after[0], dst_before, after[1])


def _first_failing_case(cls: type, platform: str, check: str) -> Grading:
    contract = _contract(platform)
    kernel = cls().bind(contract)
    claims = getattr(kernel, "kv_cache_dtypes", None) or getattr(kernel, "scale_fmts", ())
    for variant in claims:
        # every regular case on the CPU (the launch-size one included), but the calls a kernel must refuse
        for spec in op_spec(op_name(kernel)).cases.keys(variant, "cpu"):
            if spec.tokens >= 5 and spec.kind not in MUST_RAISE_KINDS:
                grading = _graded(kernel, spec, contract)
                if check in grading.failed:
                    return grading
    raise AssertionError(f"{cls.__name__} never failed {check}")


def assert_examples_read_well(grading: Grading) -> None:
    """Every failed check of ``grading`` names one to three examples on one line of at most MAX_DETAIL characters,
    and never shows the canary's bytes as a number."""
    for c in grading.checks:
        if not c.passed:
            assert ", e.g. " in c.detail, f"{c.name}: {c.detail}"
            assert "\n" not in c.detail and len(c.detail) <= MAX_DETAIL, f"{c.name}: {c.detail}"
            first = c.detail.split(" | ")[0].split(", e.g. ", 1)[1]
            assert first.count("; ") <= 2, f"{c.name}: more than 3 examples: {c.detail}"
            assert "0xa5a5 (" not in c.detail, f"{c.name} shows the canary as a number: {c.detail}"


@pytest.mark.parametrize("cls", list(GRADED), ids=lambda c: c.name)
def test_every_failed_check_of_every_op_carries_examples_on_one_short_line(cls: type) -> None:
    platform, check = GRADED[cls]
    with torch.no_grad():
        assert_examples_read_well(_first_failing_case(cls, platform, check))

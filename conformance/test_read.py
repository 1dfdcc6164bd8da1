"""The read ops' certification: each reader's ``gather_and_maybe_dequant_cache`` or
``cp_gather_indexer_k_quant_cache`` of each case, graded against the reference read
(rtp_ref.certify.gather_grading), and round trips of the MLA cache: tokens written by each MLA writer of the session
(and the reference writer) and read back by the reader must give the reference's read of the reference's write.

The same grades, deviations and call handling as the writes (outcome.py). Every record carries its ``op``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import torch

from rtp_ref.certify.checks import Check, grade_reached
from rtp_ref.certify.device_errors import describe_error
from rtp_ref.certify.gather_cases import GatherCase, GatherSpec, build_gather_case
from rtp_ref.certify.gather_grading import grade_gather, grade_indexer_gather
from rtp_ref.certify.grading import Grading
from rtp_ref.certify.indexer_gather_cases import IndexerGatherCase
from rtp_ref.kv.cache import reference_write
from rtp_ref.kv.gather import gather_and_maybe_dequant_cache, sequence_slots
from rtp_ref.ops import MLA_GATHER_OP

from .conftest import GatherCaseParam, RoundTripParam
from .matrix import suite
from .outcome import judge, not_covered, settle_call, with_ran_check
from .runner import call_gather_kernel


def test_gather_conforms(gather_case: GatherCaseParam, record_case: Callable[..., None],
                         pytestconfig: pytest.Config) -> None:
    s = suite(pytestconfig)
    k, spec = gather_case.kut, gather_case.spec
    case: GatherCase | IndexerGatherCase = (build_gather_case(spec, s.contract, k.device)
                                            if isinstance(spec, GatherSpec) else
                                            IndexerGatherCase(spec, s.contract, k.device))
    assert case.kv_cache.device.type == k.device and case.dst_storage.device.type == k.device, \
        f"suite error: the case is not on {k.device}"
    cache_before, dst_before = case.cache_storage.cpu().clone(), case.dst_storage.cpu().clone()
    result = call_gather_kernel(k.kernel, case, k.device)
    base = dict(op=spec.op, kernel=k.name, layout=spec.layout, platform=s.platform.name, case=spec.case_id,
                kind=spec.kind, seed=spec.seed, device=k.device, execution=k.execution,
                required_grade=s.platform.required_grade, deviation=gather_case.deviation,
                worker=os.environ.get("PYTEST_XDIST_WORKER"), visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
    cache_after, dst_after = case.cache_storage.cpu(), case.dst_storage.cpu()
    before, after = torch.cat([cache_before, dst_before]), torch.cat([cache_after, dst_after])
    if settle_call(k.kernel, k.name, result, before, after, case.layout, (), not_covered(s.platform,
                   gather_case.deviation), base, record_case):
        return
    grading = (grade_gather(case, cache_before, cache_after, dst_before, dst_after, s.platform.numerics_max_ulp)
               if isinstance(case, GatherCase) else
               grade_indexer_gather(case, cache_before, cache_after, dst_before, dst_after))
    grading = with_ran_check(grading, result.calls, result.launched, expect_launch=spec.tokens > 0)
    failed = {c.name: c.detail for c in grading.checks if not c.passed}
    record_case(**base, grade=grading.grade, failed_checks=sorted(failed), checks=failed, error_stats=grading.stats)
    judge(grading, k.name, s.platform, gather_case.deviation)


def test_round_trip(round_trip: RoundTripParam, record_case: Callable[..., None], pytestconfig: pytest.Config) -> None:
    """Tokens written by the writer, read back by the reader, equal the reference's read of the reference's
    write of them, bit for bit."""
    s = suite(pytestconfig)
    k = round_trip.kut
    spec = GatherSpec(round_trip.layout, "random", 37, 16, 0, torch.bfloat16, 101, batch=3, out="bf16")
    case = build_gather_case(spec, s.contract, k.device)
    lay = case.layout
    g = torch.Generator().manual_seed(spec.seed)
    kv_c = (torch.randn(spec.tokens, lay.kv_lora_rank, generator=g) * 4).to(torch.bfloat16)
    k_pe = (torch.randn(spec.tokens, lay.rope_dim, generator=g) * 4).to(torch.bfloat16)
    starts = case.seq_starts.cpu() if case.seq_starts is not None else None
    slots = sequence_slots(case.block_table.cpu(), case.cu_seq_lens.cpu(), spec.block_size, starts)
    # what the contract says the reader gives back: the reference's read of the reference's write
    want_cache = case.cache_view(case.cache_storage.cpu().clone())
    reference_write(lay, kv_c, k_pe, want_cache, slots, case.scale.cpu())
    want = torch.zeros(spec.tokens, lay.kv_lora_rank + lay.rope_dim, dtype=torch.bfloat16)
    gather_and_maybe_dequant_cache(lay, want_cache, want, case.block_table.cpu(), case.cu_seq_lens.cpu(),
                                   case.scale.cpu(), starts)
    base = dict(op=MLA_GATHER_OP, kernel=k.name, layout=spec.layout, platform=s.platform.name,
                case=f"round_trip-from-{round_trip.writer_name}", kind="round_trip", device=k.device,
                execution=k.execution, required_grade=s.platform.required_grade)
    if round_trip.writer is None:
        reference_write(lay, kv_c.to(k.device), k_pe.to(k.device), case.kv_cache, slots.to(k.device), case.scale)
    else:
        try:
            round_trip.writer.kernel(kv_c.to(k.device), k_pe.to(k.device), case.kv_cache, slots.to(k.device),
                                     spec.layout, case.scale)
            if k.device == "cuda":
                torch.cuda.synchronize()
        except Exception as exc:  # the writer's failure: its own cases name it
            why = f"the writer {round_trip.writer_name} raised: {describe_error(exc)}"
            record_case(**base, grade="none", failed_checks=["read.round_trip"], checks={"read.round_trip": why})
            pytest.fail(f"round trip: {why}", pytrace=False)
    writer_exact = torch.equal(case.cache_view(case.cache_storage.cpu()).view(torch.uint8),
                               want_cache.view(torch.uint8))
    result = call_gather_kernel(k.kernel, case, k.device)
    if result.device_error is not None or result.error is not None:
        check = "support.device_error" if result.device_error is not None else "support.kernel_raised"
        detail = result.device_error or describe_error(result.error)
        record_case(**base, grade="none", failed_checks=[check], checks={check: detail})
        pytest.fail(f"{k.name} failed the round trip's read: {detail}", pytrace=False)
    got = case.dst[: spec.tokens].cpu()
    same = torch.equal(got.view(torch.int16), want.view(torch.int16))
    blame = (f"the writer {round_trip.writer_name}'s bytes differ from the reference's (its own cases say how)"
             if not writer_exact else "the writer's bytes are the reference's: the reader read them wrongly")
    bad = int((got.view(torch.int16) != want.view(torch.int16)).sum())
    checks = [Check("read.round_trip", same, "" if same else f"{bad} value(s) of {got.numel()} read back differ from "
                                                              f"the reference's round trip; {blame}")]
    grading = with_ran_check(Grading(checks, grade_reached([c.name for c in checks if not c.passed]), {}),
                             result.calls, result.launched, expect_launch=True)
    failed = {c.name: c.detail for c in grading.checks if not c.passed}
    record_case(**base, grade=grading.grade, failed_checks=sorted(failed), checks=failed,
                writer=round_trip.writer_name)
    judge(grading, f"{round_trip.writer_name} -> {k.name}", s.platform, None)

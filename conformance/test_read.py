"""The read ops' certification: each reader's ``gather_and_maybe_dequant_cache`` or
``cp_gather_indexer_k_quant_cache`` of each case, graded against the reference read
(rtp_ref.certify.gather_grading), and round trips: tokens written by each writer of the session (of the op whose
caches the reader reads) and by the reference writer, read back by the reader, must give the reference's read of
the reference's write.

The same grades, deviations and call handling as the writes (outcome.py). Every record carries its ``op``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

from rtp_ref.certify.checks import Check, grade_reached
from rtp_ref.certify.device_errors import describe_error
from rtp_ref.certify.gather_cases import GatherCase, GatherSpec
from rtp_ref.certify.gather_grading import grade_gather, grade_indexer_gather
from rtp_ref.certify.grading import Grading
from rtp_ref.certify.indexer_gather_cases import IndexerGatherCase, IndexerGatherSpec
from rtp_ref.kernels.contract import WriteContract
from rtp_ref.kv.cache import reference_write
from rtp_ref.kv.gather import gather_and_maybe_dequant_cache, sequence_slots
from rtp_ref.kv.indexer import reference_indexer_k_quant_and_cache
from rtp_ref.kv.indexer_gather import gather_indexer_k_quant_cache
from rtp_ref.ops import MLA_GATHER_OP, op_cases

from .conftest import GatherCaseParam, RoundTripParam
from .matrix import KernelUnderTest, suite
from .outcome import judge, not_covered, settle_call, with_ran_check
from .runner import call_gather_kernel


def test_gather_conforms(gather_case: GatherCaseParam, record_case: Callable[..., None],
                         pytestconfig: pytest.Config) -> None:
    s = suite(pytestconfig)
    k, spec = gather_case.kut, gather_case.spec
    case: GatherCase | IndexerGatherCase = (GatherCase(spec, s.contract, k.device)
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


@dataclass
class _Trip:
    """One round trip's setting: the read case, the tokens' writes (the reference's and a kernel's) onto its cache,
    the bytes the read must give back and how to get what it gave."""

    case: GatherCase | IndexerGatherCase
    #: the cache storage the reference's write leaves (CPU); what ``write(None)`` puts on the device
    want_cache: torch.Tensor
    #: the output bytes the reference's read of it gives (CPU uint8)
    want: torch.Tensor
    write: Callable[[Callable[..., None] | None], None]
    got: Callable[[], torch.Tensor]


def _mla_trip(variant: str, contract: WriteContract, device: str) -> _Trip:
    spec = GatherSpec(variant, "random", 37, 16, 0, torch.bfloat16, 101, batch=3, out="bf16")
    case = GatherCase(spec, contract, device)
    lay = case.layout
    g = torch.Generator().manual_seed(spec.seed)
    kv_c = (torch.randn(spec.tokens, lay.kv_lora_rank, generator=g) * 4).to(torch.bfloat16)
    k_pe = (torch.randn(spec.tokens, lay.rope_dim, generator=g) * 4).to(torch.bfloat16)
    slots, scale = case.read_slots(), case.scale.cpu()
    want_storage = case.cache_storage.cpu().clone()
    reference_write(lay, kv_c, k_pe, case.cache_view(want_storage), slots, scale)
    want = torch.zeros(spec.tokens, lay.kv_lora_rank + lay.rope_dim, dtype=torch.bfloat16)
    starts = case.seq_starts.cpu() if case.seq_starts is not None else None
    gather_and_maybe_dequant_cache(lay, case.cache_view(want_storage), want, case.block_table.cpu(),
                                   case.cu_seq_lens.cpu(), scale, starts)

    def write(kernel: Callable[..., None] | None) -> None:
        if kernel is None:  # the reference writer's bytes (it is defined on the CPU)
            case.cache_storage.copy_(want_storage)
        else:
            kernel(kv_c.to(device), k_pe.to(device), case.kv_cache, slots.to(device), variant, case.scale)

    return _Trip(case, want_storage, want.view(torch.uint8), write,
                 lambda: case.dst[: spec.tokens].cpu().view(torch.uint8))


def _indexer_trip(variant: str, contract: WriteContract, device: str) -> _Trip:
    spec = IndexerGatherSpec(variant, "random", 37, 16, 0, torch.bfloat16, 101, batch=3)
    case = IndexerGatherCase(spec, contract, device)
    g = torch.Generator().manual_seed(spec.seed)
    k = (torch.randn(spec.tokens, spec.head_dim, generator=g) * 4).to(torch.bfloat16)
    slots = sequence_slots(case.block_table.cpu(), case.cu_seq_lens.cpu(), spec.block_size)
    want_storage = case.cache_storage.cpu().clone()
    reference_indexer_k_quant_and_cache(case.layout, k, case.cache_view(want_storage), slots, variant)
    dst_k, dst_scale = torch.zeros_like(case.dst_k, device="cpu"), torch.zeros_like(case.dst_scale, device="cpu")
    gather_indexer_k_quant_cache(case.layout, case.cache_view(want_storage), dst_k, dst_scale,
                                 case.block_table.cpu(), case.cu_seq_lens.cpu())
    want = torch.cat([dst_k[: spec.tokens].flatten(), dst_scale[: spec.tokens].flatten()])

    def write(kernel: Callable[..., None] | None) -> None:
        if kernel is None:  # the reference writer's bytes (it is defined on the CPU)
            case.cache_storage.copy_(want_storage)
        else:
            kernel(k.to(device), case.kv_cache, slots.to(device), spec.quant_block, variant)

    return _Trip(case, want_storage, want, write, lambda: torch.cat(
        [case.dst_k[: spec.tokens].cpu().flatten(), case.dst_scale[: spec.tokens].cpu().flatten()]))


def test_round_trip(round_trip: RoundTripParam, record_case: Callable[..., None], pytestconfig: pytest.Config) -> None:
    """Tokens written by the writer, read back by the reader, equal the reference's read of the reference's
    write of them, bit for bit."""
    s = suite(pytestconfig)
    k = round_trip.kut
    trip = (_mla_trip if k.op == MLA_GATHER_OP else _indexer_trip)(round_trip.layout, s.contract, k.device)
    base = dict(op=k.op, kernel=k.name, layout=round_trip.layout, platform=s.platform.name,
                case=f"round_trip-from-{round_trip.writer_name}", kind="round_trip", device=k.device,
                execution=k.execution, required_grade=s.platform.required_grade)
    try:
        trip.write(round_trip.writer.kernel if round_trip.writer is not None else None)
        if k.device == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:  # the writer's failure: its own cases name it
        why = f"the writer {round_trip.writer_name} raised: {describe_error(exc)}"
        record_case(**base, grade="none", failed_checks=["read.round_trip"], checks={"read.round_trip": why})
        pytest.fail(f"round trip: {why}", pytrace=False)
    writer_exact = torch.equal(trip.case.cache_storage.cpu(), trip.want_cache)
    result = call_gather_kernel(k.kernel, trip.case, k.device)
    if result.device_error is not None or result.error is not None:
        check = "support.device_error" if result.device_error is not None else "support.kernel_raised"
        detail = result.device_error or describe_error(result.error)
        record_case(**base, grade="none", failed_checks=[check], checks={check: detail})
        pytest.fail(f"{k.name} failed the round trip's read: {detail}", pytrace=False)
    got = trip.got()
    bad = int((got != trip.want).sum())
    blame = (f"the writer {round_trip.writer_name}'s bytes differ from the reference's (its own cases say how)"
             if not writer_exact else "the writer's bytes are the reference's: the reader read them wrongly")
    why = f"{bad} of {got.numel()} byte(s) read back differ from the reference's round trip; {blame}"
    checks = [Check("read.round_trip", bad == 0, "" if bad == 0 else why)]
    grading = with_ran_check(Grading(checks, grade_reached([c.name for c in checks if not c.passed]), {}),
                             result.calls, result.launched, expect_launch=True)
    failed = {c.name: c.detail for c in grading.checks if not c.passed}
    record_case(**base, grade=grading.grade, failed_checks=sorted(failed), checks=failed,
                writer=round_trip.writer_name)
    judge(grading, f"{round_trip.writer_name} -> {k.name}", s.platform, None)


def test_reader_unclaimed_layout_raises(unclaimed_reader_pair: tuple[KernelUnderTest, str],
                                        pytestconfig: pytest.Config, record_case: Callable[..., None]) -> None:
    """A layout the reader does not claim must raise, and leave the cache and dst untouched."""
    k, variant = unclaimed_reader_pair
    spec = next(s for s in op_cases(k.op)(variant) if s.tokens > 1)
    case = GatherCase(spec, suite(pytestconfig).contract, k.device)
    before = torch.cat([case.cache_storage.cpu(), case.dst_storage.cpu()])
    result = call_gather_kernel(k.kernel, case, k.device)
    untouched = torch.equal(before, torch.cat([case.cache_storage.cpu(), case.dst_storage.cpu()]))
    ok = result.device_error is None and result.error is not None and untouched
    record_case(op=k.op, kernel=k.name, layout=variant, kind="unclaimed", case="unclaimed-layout",
                execution=k.execution, failed_checks=[] if ok else ["support.unclaimed_layout_raises"])
    assert result.device_error is None, f"{k.name} left a device error: {result.device_error}"
    assert result.error is not None, f"{k.name} does not claim {variant} but read it without an error"
    assert untouched, f"{k.name} raised for unclaimed {variant} but had already written"

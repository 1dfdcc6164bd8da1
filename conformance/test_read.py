"""Round trips of the read ops: tokens written by each writer of the session (of the op whose caches the reader
reads) and by the reference writer, read back by the reader, must give the reference's read of the reference's
write. A writer whose bytes are not the reference's is not the reader's failure: that trip is not judged (its own
cases fail the writer), and the reader's verdict rests on its other cases. A trip outside the reader's declared
domain that it refuses before writing is refused as declared. (The readers' own cases are test_cases.py's, like
every op's.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

from rtp_ref.cases.checks import Check
from rtp_ref.cases.gather_cases import GatherCase, GatherSpec
from rtp_ref.cases.indexer_gather_cases import IndexerGatherCase, IndexerGatherSpec
from rtp_ref.certify.calls import call_once
from rtp_ref.certify.device_errors import describe_error
from rtp_ref.certify.engine import graded, with_ran_check
from rtp_ref.certify.verdict import FAILED, judge
from rtp_ref.contract import WriteContract
from rtp_ref.kernels.protocol import declared_refusal
from rtp_ref.kv.cache import reference_write
from rtp_ref.kv.gather import gather_and_maybe_dequant_cache, sequence_slots
from rtp_ref.kv.indexer import DEFAULT_QUANT_BLOCK, fixed_quant_block, reference_indexer_k_quant_and_cache
from rtp_ref.kv.indexer_gather import gather_indexer_k_quant_cache
from rtp_ref.ops import MLA_GATHER_OP

from .conftest import RoundTripParam, show
from .matrix import suite


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
    spec = IndexerGatherSpec(variant, "random", 37, 16, 0, torch.bfloat16, 101, batch=3,
                             quant_block=fixed_quant_block(variant) or DEFAULT_QUANT_BLOCK)
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
        pytest.skip(f"round trip not judged: {why} (the writer's own cases judge it)")
    if not torch.equal(trip.case.cache_storage.cpu(), trip.want_cache):
        # the writer's bytes are not the reference's: its own cases fail it; the reader is not judged on them
        pytest.skip(f"round trip not judged: the writer {round_trip.writer_name}'s bytes differ from the reference's "
                    f"write (its own cases say how)")
    before = trip.case.dst_storage.cpu().clone()
    result = call_once(k.kernel, lambda: trip.case.call(k.kernel), round_trip.layout, k.device)
    refusal = declared_refusal(k.kernel, trip.case.spec.arguments, (), trip.case.layout)
    if result.error is not None and refusal and torch.equal(before, trip.case.dst_storage.cpu()):
        record_case(**base, refused=refusal, failed_checks=[], checks={"refused": describe_error(result.error)})
        return  # a read outside the reader's declared domain, refused before writing: no finding
    if result.device_error is not None or result.error is not None:
        check = "support.device_error" if result.device_error is not None else "support.kernel_raised"
        detail = result.device_error or describe_error(result.error)  # type: ignore[arg-type]  # one of the two is set
        record_case(**base, grade="none", failed_checks=[check], checks={check: detail}, outcome=FAILED)
        pytest.fail(f"{k.name} failed the round trip's read: {detail}", pytrace=False)
    got = trip.got()
    bad = int((got != trip.want).sum())
    why = (f"{bad} of {got.numel()} byte(s) read back differ from the reference's round trip; the writer's bytes are "
           f"the reference's: the reader read them wrongly")
    grading = with_ran_check(graded([Check("read.round_trip", bad == 0, "" if bad == 0 else why)]), result,
                             expect_launch=True)
    judgement = judge(grading.grade, grading.checks, f"{round_trip.writer_name} -> {k.name}", s.platform, None)
    failed = {c.name: c.detail for c in grading.checks if not c.passed}
    record_case(**base, grade=grading.grade, failed_checks=sorted(failed), checks=failed,
                writer=round_trip.writer_name, outcome=judgement.outcome)
    show(judgement)

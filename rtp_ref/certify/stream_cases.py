"""The stream tier (``--rtp-tier stream``, ``rtp-ref certify --tier stream``; CUDA only): a kernel must run on the
stream it is called on, after the work queued there before it.

Engines call cache writes on their own non-default streams, right after the kernels that produce the inputs
(projections, RoPE), with nothing synchronised in between. A kernel that launches on the legacy stream, on device
0's stream, or on a stream of its own reads inputs that are not written yet: a launch on another device's current
stream (FlashAttention #2356), a device and stream taken from one argument only (vLLM #55654), a memset on the
legacy stream racing a non-blocking one and zeroing live KV (kekzl/imp #1709).

Each write op and claimed variant has one case: the op's sample case (a random case of many tokens, padding slots
among them), its value inputs overwritten with zeros, then on a new stream a producer that spins ``SPIN_CYCLES``
(``torch.cuda._sleep``) and copies the real inputs back, then the kernel's call on that same stream. A kernel that
follows the stream reads the real inputs and must write exactly the reference's bytes for them, graded as the
regular case is (rtp_ref.certify.engine); one that does not wrote while the producer still spun: from zeros, or
from half-restored inputs, and fails the value checks with the tokens it got wrong.

Cross-device (tensors on ``cuda:1`` while ``cuda:0`` is current, the other half of FlashAttention #2356) needs two
GPUs: its cases are those of this tier with the inputs built on the second device; they are listed and skipped,
said plainly, where torch sees one GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from rtp_ref.cases.op_cases import BuiltCase, CaseKey
from rtp_ref.ops import WRITE_OPS, op_spec

#: how long the producer spins before it writes the inputs, in GPU clock cycles (about 20 ms at the 1.4-2 GHz of
#: current data-centre GPUs): far longer than a small case's launch, so a kernel on another stream has run (and
#: written from the zeros) before the inputs are there
SPIN_CYCLES = 40_000_000
#: the tier's scenarios: the current device, and a second device (needs two GPUs)
SCENARIOS = ("late-inputs", "other-device")


@dataclass(frozen=True)
class StreamSpec:
    """One stream-tier case: an op's variant, a scenario, and the regular case key it runs (``key``)."""

    op: str
    layout: str
    scenario: str
    key: CaseKey

    @property
    def case_id(self) -> str:
        """``stream-late-inputs`` or ``stream-other-device``."""
        return f"stream-{self.scenario}"


def stream_ops() -> tuple[str, ...]:
    """The ops with stream-tier cases: those that write a cache (a read's inputs are the cache itself)."""
    return WRITE_OPS


def stream_specs(op: str, layout: str) -> Iterator[StreamSpec]:
    """The tier's cases of ``layout`` of ``op``: each scenario on the op's sample case."""
    key = op_spec(op).cases.sample(layout)
    for scenario in SCENARIOS:
        yield StreamSpec(op, layout, scenario, key)


def scenario_device(spec: StreamSpec) -> str | None:
    """The device a case's tensors are built on: ``cuda`` (the current device, the first GPU), ``cuda:1`` for the
    other-device scenario; None where that needs a second GPU torch does not see."""
    if spec.scenario == "other-device":
        return "cuda:1" if torch.cuda.device_count() > 1 else None
    return "cuda"


def late_inputs(case: BuiltCase, invoke: Callable[[], None]) -> None:
    """Call ``invoke`` (the kernel on ``case``) on a new stream of the case's device, right after a producer on that
    stream that spins ``SPIN_CYCLES`` and only then writes the case's value inputs (module doc), with ``cuda:0``
    the current device at the call whatever the case's device. Returns once the device is idle."""
    inputs = case.value_inputs()
    device = inputs[0].device
    saved = [t.clone() for t in inputs]
    for t in inputs:
        t.zero_()
    torch.cuda.synchronize(device)
    stream = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
    with torch.cuda.device(device), torch.cuda.stream(stream):
        torch.cuda._sleep(SPIN_CYCLES)  # type: ignore[no-untyped-call]
        for t, value in zip(inputs, saved, strict=True):
            t.copy_(value)
        # the device's current stream stays the producer's; the current device is the first GPU, as in an engine
        # whose process never switched to the device its cache lives on
        with torch.cuda.device(0):
            invoke()
    torch.cuda.synchronize(device)

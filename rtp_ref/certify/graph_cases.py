"""The CUDA-graph tier (``--rtp-tier graph``, ``rtp-ref certify --tier graph``): what engines do with a cache write.

Engines capture the write in a CUDA graph and replay it every decode step with new values in the same input
tensors. A kernel that reads anything on the host (a slot check, a scale's value, a Python-side plan built
from the values) cannot be captured, or bakes the capture-time value into the graph: warm-up runs with an
all-padding slot map have written garbage into slot 0 (vLLM #38719, sglang #35351), and a scale pointer
captured before the tensor changed wrote zeros (FlashInfer #3740).

Each op and claimed variant has two scenarios, on a case of the op's own builders (``random`` values, padding
slots among them) with a second case of the same shapes and another seed giving the new inputs:

* ``replay``: capture one call (after one eager warm-up call, as engines warm up: Triton compiles there),
  then replay three times, the cache restored to its canary before each: with the captured inputs, with new
  values copied into the input tensors in place, and with new slots and scales as well. Each replay must
  write exactly the reference's bytes for the inputs the tensors hold at replay time.
* ``padding-warmup``: capture with every slot the engine's padding sentinel (an engine's warm-up batch: ``-1``, or
  the reserved slot 0 under ``padding_slot=zero``, as sglang pads its graph batches: rtp_ref.kv.padding); the replay
  must leave the whole storage untouched; then the real slots are copied in and the replay must write the
  reference's bytes.

Every comparison is of the whole storage (cache, padding rows and guards), byte for byte. A replay that
wrote the bytes of the captured inputs instead of the new ones is named as such.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from rtp_ref.cases.cases import CaseSpec
from rtp_ref.cases.tier_hooks import SLOTS_AND_SCALES, GraphCase
from rtp_ref.contract import WriteContract
from rtp_ref.errors import RtpRefError
from rtp_ref.kv.padding import padding_sentinel
from rtp_ref.ops import OPS, op_spec

#: the tier's scenarios (module doc), each a case of every op and variant
SCENARIOS = ("replay", "padding-warmup")
#: a decode-sized batch: enough tokens that some are padding, a few blocks
TOKENS, BLOCK_SIZE, NUM_BLOCKS = 24, 16, 4
#: what a kernel's ``graph_safe`` attribute says, as the report's graph-safe column reads it
CLAIMED, UNCLAIMED, DECLINED = "claimed", "unclaimed", "declined"


@dataclass(frozen=True)
class GraphSpec:
    """One graph-tier case: an op's variant (``layout``) and a scenario."""

    op: str
    layout: str
    scenario: str
    seed: int
    kind: str = "graph"

    @property
    def case_id(self) -> str:
        """``graph-replay`` or ``graph-padding-warmup``."""
        return f"graph-{self.scenario}"


def graph_specs(op: str, layout: str) -> Iterator[GraphSpec]:
    """The tier's cases of ``layout`` of ``op``: one per scenario."""
    for scenario in SCENARIOS:
        yield GraphSpec(op, layout, scenario, zlib.crc32(f"graph/{op}/{layout}/{scenario}".encode()))


def graph_claim(kernel: object) -> str:
    """``claimed`` (``graph_safe`` is true: a failure fails the pair), ``declined`` (false: not run) or
    ``unclaimed`` (no attribute: tried and reported, never failing the pair)."""
    claim = getattr(kernel, "graph_safe", None)
    if claim is None:
        return UNCLAIMED
    return CLAIMED if claim else DECLINED


def graph_ops() -> tuple[str, ...]:
    """The ops with graph-tier cases (their ``OpCases.graph``), in report order."""
    return tuple(name for name, spec in OPS.items() if spec.cases.graph is not None)


def build_graph_case(spec: GraphSpec, contract: WriteContract, device: str, seed: int) -> GraphCase:
    """The op's graph-tier case of ``spec``'s variant on ``device``, its values drawn from ``seed``: a decode-sized
    batch (``TOKENS`` tokens, some of them padding, in ``NUM_BLOCKS`` blocks of ``BLOCK_SIZE``); RtpRefError for an
    op with no graph-tier case."""
    build = op_spec(spec.op).cases.graph
    if build is None:
        raise RtpRefError(f"op {spec.op!r} has no graph-tier case")
    return build(CaseSpec(spec.layout, "random", TOKENS, BLOCK_SIZE, NUM_BLOCKS, torch.bfloat16, seed), contract,
                 device)


@dataclass(frozen=True)
class Step:
    """One replay and what it had to write: the check it stands for, and the problem found (None: exact)."""

    check: str
    problem: str | None


def _expected(case: GraphCase, initial: torch.Tensor) -> torch.Tensor:
    out = initial.clone()
    case.reference_on(out)
    return out


def _compare(after: torch.Tensor, expected: torch.Tensor, captured: torch.Tensor | None) -> str | None:
    differ = torch.nonzero(after != expected).flatten()
    if differ.numel() == 0:
        return None
    baked = captured is not None and torch.equal(after, captured)
    what = ("wrote what the inputs held at capture time give, not the new ones (values read at capture)"
            if baked else "storage bytes differ from the reference of the inputs held at replay time")
    return f"{differ.numel()} {what}; first at storage byte {int(differ[0])}"


def _copy_inputs(into: GraphCase, source: GraphCase, slots_and_scales: bool) -> None:
    """Copy ``source``'s values, or its slots and scales, into ``into``'s input tensors in place."""
    theirs = source.inputs()
    for name, tensor in into.inputs().items():
        if (name in SLOTS_AND_SCALES) == slots_and_scales:
            tensor.copy_(theirs[name])


class GraphRun:
    """The two cases of one graph-tier scenario on a CUDA ``device``, and the steps that judge a kernel."""

    def __init__(self, spec: GraphSpec, contract: WriteContract, device: str) -> None:
        self.spec = spec
        self.case = build_graph_case(spec, contract, device, spec.seed)
        self.fresh = build_graph_case(spec, contract, device, spec.seed + 1)
        self.initial = self.case.storage.cpu().clone()
        self.stream = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
        self.sentinel = padding_sentinel(contract.flags.padding_slot)

    def run(self, kernel: Callable[..., None]) -> list[Step]:
        """Warm up, capture and replay (module doc); raises what the kernel or the capture raised."""
        return self._replay(kernel) if self.spec.scenario == "replay" else self._padding(kernel)

    def _restore(self) -> None:
        self.case.storage.copy_(self.initial.to(self.case.storage.device))

    def _capture(self, kernel: Callable[..., None]) -> torch.cuda.CUDAGraph:
        # warm-up and capture on a side stream, as torch.cuda.graph and engines do
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            self.case.call(kernel)
        torch.cuda.current_stream().wait_stream(self.stream)
        torch.cuda.synchronize()
        self._restore()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self.stream):
            self.case.call(kernel)
        torch.cuda.synchronize()
        return graph

    def _replayed(self, graph: torch.cuda.CUDAGraph) -> torch.Tensor:
        self._restore()
        graph.replay()
        torch.cuda.synchronize()
        return self.case.storage.cpu()

    def _replay(self, kernel: Callable[..., None]) -> list[Step]:
        graph = self._capture(kernel)
        captured = _expected(self.case, self.initial)
        steps = [Step("graph.replay", _compare(self._replayed(graph), captured, None))]
        _copy_inputs(self.case, self.fresh, slots_and_scales=False)
        steps.append(Step("graph.new_values", _compare(self._replayed(graph), _expected(self.case, self.initial),
                                                         captured)))
        _copy_inputs(self.case, self.fresh, slots_and_scales=True)
        steps.append(Step("graph.new_slots_and_scales",
                          _compare(self._replayed(graph), _expected(self.case, self.initial), captured)))
        return steps

    def _padding(self, kernel: Callable[..., None]) -> list[Step]:
        slots = self.case.inputs()["slot_mapping"]
        real = slots.clone()
        slots.fill_(self.sentinel)
        graph = self._capture(kernel)
        after = self._replayed(graph)
        moved = torch.nonzero(after != self.initial).flatten()
        untouched = None if moved.numel() == 0 else (
            f"the all-padding replay changed {moved.numel()} storage byte(s); first at byte {int(moved[0])}")
        slots.copy_(real)
        # what the capture-time (all-padding) slots give is the untouched storage
        written = _compare(self._replayed(graph), _expected(self.case, self.initial), self.initial)
        return [Step("graph.padding_untouched", untouched), Step("graph.after_padding_warmup", written)]


"""Timing a cache write, and the roofs it is compared with, measured in the same run.

A KV-cache write is memory-bound, so the honest speed figure is effective bandwidth — the fewest
bytes the write must move (inputs read once, entries written once, slots read once) over its time —
as a fraction of a device-to-device copy measured on the same device in the same process.
GPU times use CUDA events around many repetitions (never host timers around async work); CPU
times use the host clock (``perf_counter``). Both report the median of the samples, with the fastest and the
slowest sample beside it (the spread).

Four times per GPU point: the eager call (host work included, calls queued back to back), the call replayed
inside a CUDA graph (``GRAPH_CALLS`` captured calls per graph, so the time is the kernel's and its launch's, not one
replay's overhead), the cold call (``time_cold``: one call at a time after a write larger than the L2 evicted what
earlier calls left there, as a decode step finds a layer's cache after the other layers ran), and the launch floor:
the same graph of an empty kernel (``torch.cuda._sleep(0)``, a kernel that returns at once), measured in the same
run.

``time_call`` runs a hook before each timed sample and a check after it, both outside the timed span: the bench
poisons the cache before each sample and compares it with the reference's bytes after (rtp_ref.bench.verify), so
every sample is checked and a kernel that skips its write cannot be timed as if it wrote.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from rtp_ref.kv.layouts import MlaLayout

#: what times each figure: eager calls on a GPU, graph replays, and anything on the CPU
EVENTS_TIMER = "cuda events"
GRAPH_TIMER = "graph replay (cuda events)"
HOST_TIMER = "perf_counter"
COLD_TIMER = "cuda events per eager call, L2 flushed before it"
COLD_GRAPH_TIMER = "cuda events per graph replay of one call, L2 flushed before it"
#: calls per cold sample (each after its own flush)
COLD_CALLS = 10


@dataclass(frozen=True)
class Timing:
    """Seconds per call over the timed samples: the median, the fastest (``low``) and the slowest (``high``)
    sample; ``reps`` calls were timed in all (after warm-up). ``problem``: what the check after a sample found
    (timing stopped at that sample), or None when every sample passed or nothing was checked."""

    seconds: float
    reps: int
    low: float
    high: float
    problem: str | None = None
    #: eager calls on a GPU: the host's median seconds per call while queueing them (no sync in the span): what the
    #: call costs the host where the device keeps up (decode sizes), the device's time where it does not
    host: float | None = None


def timer_name(device: torch.device, graph: bool = False) -> str:
    """The timer of a figure on ``device``: ``perf_counter`` on the CPU, CUDA events for eager GPU calls, graph
    replays timed by CUDA events for ``graph``."""
    if device.type != "cuda":
        return HOST_TIMER
    return GRAPH_TIMER if graph else EVENTS_TIMER


def minimum_bytes(layout: MlaLayout, tokens: int, input_dtype: torch.dtype) -> int:
    """Bytes a write of ``tokens`` tokens must move at least: inputs read once, entries written once,
    int64 slots read once (block-trailing scale bytes are part of the entry)."""
    itemsize = torch.empty((), dtype=input_dtype).element_size()
    read = tokens * (layout.kv_lora_rank + layout.rope_dim) * itemsize + tokens * 8
    return read + tokens * layout.written_bytes_per_token


def time_call(fn: Callable[[], object], device: torch.device, min_seconds: float = 0.2, max_reps: int = 200, *,
              before: Callable[[], object] | None = None,
              after: Callable[[], str | None] | None = None) -> Timing:
    """Time per call of ``fn()``: warm up twice, then time samples until ``min_seconds`` or ``max_reps`` samples.

    On a GPU each sample times a run of calls queued back to back (about 20 ms of them), so the host's
    per-call work overlaps the device's instead of being counted as device time; a write that is
    shorter than its host-side cost is then reported as launch-bound, as it is. On the CPU a sample is one call.
    ``before()`` runs before each sample and ``after()`` after it, neither timed; the first message ``after``
    returns ends the timing and is the Timing's ``problem``.
    """
    for _ in range(2):
        fn()
    _sync(device)
    inner = 1
    if device.type == "cuda":
        inner = max(1, min(200, int(20e-3 / max(_one(fn, device, 1)[0], 1e-7))))
    samples: list[float] = []
    hosts: list[float] = []
    spent = 0.0
    problem = None
    while len(samples) < 3 or (spent < min_seconds and len(samples) < max_reps):
        if before is not None:
            before()
        seconds, host = _one(fn, device, inner)
        samples.append(seconds)
        hosts.append(host)
        spent += seconds * inner
        problem = after() if after is not None else None
        if problem is not None:
            break
    return Timing(statistics.median(samples), len(samples) * inner, min(samples), max(samples), problem,
                  statistics.median(hosts) if device.type == "cuda" else None)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _one(fn: Callable[[], object], device: torch.device, calls: int) -> tuple[float, float]:
    """Seconds per call over ``calls`` calls made back to back (work queued before them is done first), and the
    host's seconds per call while making them (the same figure on the CPU)."""
    if device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        begin = time.perf_counter()
        for _ in range(calls):
            fn()
        host = (time.perf_counter() - begin) / calls
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3 / calls, host
    begin = time.perf_counter()
    for _ in range(calls):
        fn()
    seconds = (time.perf_counter() - begin) / calls
    return seconds, seconds


#: calls captured in one timing graph: the per-call time then excludes one replay's fixed cost
GRAPH_CALLS = 20


def captured(fn: Callable[[], object], device: torch.device, calls: int = 1) -> torch.cuda.CUDAGraph:
    """A CUDA graph of ``calls`` calls of ``fn()``, captured after an eager warm-up call on the capture stream.
    Raises whatever the capture raises (a kernel that syncs on the host)."""
    stream = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(calls):
            fn()
    return graph


def time_graph(fn: Callable[[], object], device: torch.device, calls: int = GRAPH_CALLS, *,
               before: Callable[[], object] | None = None,
               after: Callable[[], str | None] | None = None) -> Timing:
    """Time per call of ``fn()`` replayed in a CUDA graph of ``calls`` captured calls (``captured``); ``before``
    and ``after`` as for ``time_call``, around each sample of replays. Raises whatever the capture raises."""
    graph = captured(fn, device, calls)
    t = time_call(graph.replay, device, before=before, after=after)
    return Timing(t.seconds / calls, t.reps * calls, t.low / calls, t.high / calls, t.problem)


def time_cold(calls: Sequence[Callable[[], object]], flush: Callable[[], object], device: torch.device,
              min_seconds: float = 0.2, max_reps: int = 100, *, before: Callable[[], object] | None = None,
              after: Callable[[], str | None] | None = None) -> Timing:
    """Time per call with nothing of earlier calls in the L2: ``calls`` are made in turn (one replay per input
    set, say), ``flush()`` before each one, the timer around the call alone (CUDA events on a GPU, the host clock
    on the CPU). A sample is ``COLD_CALLS`` such calls (their mean); samples until ``min_seconds`` of calls or
    ``max_reps`` samples, at least three. ``before`` and ``after`` as for ``time_call``, around each sample.

    The flush must write more than the L2 holds (twice it, ``flush_buffer``): written lines evict what the calls
    left there, as the other layers' writes of a decode step evict one layer's cache."""
    for fn in calls:  # warm-up: first-call work (compilation, allocation) is not a cold figure
        fn()
    _sync(device)
    cuda = device.type == "cuda"
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))  # type: ignore[no-untyped-call]
              for _ in range(COLD_CALLS)] if cuda else []
    samples: list[float] = []
    spent = 0.0
    problem = None
    turn = 0
    while len(samples) < 3 or (spent < min_seconds and len(samples) < max_reps):
        if before is not None:
            before()
        seconds = 0.0
        for i in range(COLD_CALLS):
            fn = calls[turn % len(calls)]
            turn += 1
            flush()
            if cuda:
                events[i][0].record()
                fn()
                events[i][1].record()
            else:
                begin = time.perf_counter()
                fn()
                seconds += time.perf_counter() - begin
        if cuda:
            events[-1][1].synchronize()
            seconds = sum(float(start.elapsed_time(end)) for start, end in events) / 1e3
        samples.append(seconds / COLD_CALLS)
        spent += seconds
        problem = after() if after is not None else None
        if problem is not None:
            break
    return Timing(statistics.median(samples), len(samples) * COLD_CALLS, min(samples), max(samples), problem)


def flush_buffer(device: torch.device, l2_bytes: int | None) -> torch.Tensor:
    """A buffer whose ``zero_()`` evicts the L2: twice the L2 (64 MiB where its size is unknown) on a GPU; a small
    one on the CPU, where cold figures are host figures anyway."""
    nbytes = 2 * l2_bytes if l2_bytes else 64 << 20
    return torch.empty(nbytes if device.type == "cuda" else 1 << 20, dtype=torch.uint8, device=device)


def launch_floor(device: torch.device) -> float:
    """Seconds per empty kernel replayed in a CUDA graph (``time_graph`` of ``torch.cuda._sleep(0)``)."""
    return time_graph(lambda: torch.cuda._sleep(0), device).seconds  # type: ignore[no-untyped-call]


def copy_roof(device: torch.device, nbytes: int, graph: bool = False) -> float:
    """Device-to-device copy bandwidth in bytes/s (bytes read plus bytes written) of a copy of ``nbytes`` into
    another buffer as large, the same two buffers call after call, measured now: eager calls, or on a GPU with
    ``graph`` replayed in a CUDA graph (no host time in it)."""
    src = torch.empty(max(nbytes // 4, 1), dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)

    def copy() -> None:
        dst.copy_(src)

    seconds = (time_graph(copy, device) if graph and device.type == "cuda" else time_call(copy, device)).seconds
    return 2 * src.numel() * 4 / seconds

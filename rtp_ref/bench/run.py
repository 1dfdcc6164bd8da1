"""``rtp-ref bench``: every kernel x variant x size of every op, the reads included, eager and replayed in a CUDA
graph, against the copy roof and the launch floor measured in the same run.

rtp_ref.bench.workloads (a write) and rtp_ref.bench.read_workloads (a read) build each point's inputs and count its
bytes; rtp_ref.bench.measure times it; rtp_ref.bench.verify (rtp_ref.bench.read_verify) checks the cache (the output
rows) after every timed sample and rtp_ref.bench.integrity judges each figure;
rtp_ref.bench.outputs writes bench.json, bench.md and the chart.
"""

from __future__ import annotations

import platform as pyplatform
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, replace
from datetime import datetime, timezone
from typing import Any

import torch

from rtp_ref.bench.integrity import invalid_figures, judge, l2_state, non_monotonic, speed_limit
from rtp_ref.bench.measure import (
    COLD_GRAPH_TIMER,
    COLD_TIMER,
    captured,
    copy_roof,
    flush_buffer,
    launch_floor,
    time_call,
    time_cold,
    time_graph,
    timer_name,
)
from rtp_ref.bench.read_verify import ReadCheck
from rtp_ref.bench.read_workloads import ReadWorkload, read_workload
from rtp_ref.bench.rows import BenchRow
from rtp_ref.bench.verify import CacheCheck, LayeredCheck
from rtp_ref.bench.workloads import LayeredWorkload, Workload, layered, workload
from rtp_ref.certify.environment import collect_environment, rtp_ref_build
from rtp_ref.certify.session import run_command
from rtp_ref.contract import WriteContract
from rtp_ref.ops import claimed_variants, op_name, op_spec
from rtp_ref.platform import Platform

SCHEMA_VERSION = 3


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


def _per_s(nbytes: int, seconds: float) -> float | None:
    """Bytes per second, or None for a time of zero (a figure that is then invalid: integrity.judge)."""
    return nbytes / seconds if seconds > 0 else None


#: a bench point: a write's, several layers' writes or a read's (rtp_ref.bench.workloads,
#: rtp_ref.bench.read_workloads)
Point = Workload | LayeredWorkload | ReadWorkload
#: what checks a point's output after each timed sample
Check = CacheCheck | LayeredCheck | ReadCheck


def _replays(kernel: Callable[..., None], w: Point, device: torch.device) -> list[Callable[[], None]]:
    """A CUDA graph of one call per input set of ``w``; each replay then records the set it wrote (``w.last``),
    so the check after a sample compares the cache with that set's bytes."""
    return [_replay(captured(_call_on(kernel, w, index), device), w, index) for index in range(len(w.inputs))]


def _call_on(kernel: Callable[..., None], w: Point, index: int) -> Callable[[], None]:
    def call() -> None:
        w.call_on(kernel, index)
    return call


def _replay(graph: torch.cuda.CUDAGraph, w: Point, index: int) -> Callable[[], None]:
    def replay() -> None:
        graph.replay()
        w.last = index
    return replay


def _cold(row: BenchRow, kernel: Callable[..., None], w: Point, check: Check, device: torch.device, roof: float,
          flush: torch.Tensor) -> BenchRow:
    """``row`` with its cold figure: one call at a time, the L2 flushed before each (``time_cold``), replayed
    from a graph of one call per input set (eager calls for a kernel that declares ``graph_safe = False`` or whose
    capture fails); it may not beat the copy roof (``ROOF_ALLOWANCE`` aside): nothing of the point is left in the L2
    to serve it."""
    calls: list[Callable[[], None]] = [lambda: w.call(kernel)]
    timer = COLD_TIMER
    if getattr(kernel, "graph_safe", None) is not False:
        try:
            calls, timer = _replays(kernel, w, device), COLD_GRAPH_TIMER
        except Exception:  # the graph figure says why; the cold figure is then the eager calls'
            torch.cuda.synchronize(device)
    try:
        cold = time_cold(calls, flush.zero_, device, before=check.poison, after=check.mismatch)
    except Exception as exc:  # the eager numbers stand; why this one is missing is shown
        torch.cuda.synchronize(device)
        return replace(row, cold_note=f"not timed: {_failure(exc)}")
    bandwidth = _per_s(w.nbytes, cold.seconds)
    return replace(row, cold_seconds=cold.seconds, cold_roof_fraction=bandwidth and bandwidth / roof,
                   cold_seconds_low=cold.low, cold_seconds_high=cold.high, cold_timer=timer,
                   cold_invalid=judge(cold, w.nbytes, speed_limit(roof, roof)))


def bench_point(kernel: Callable[..., None], name: str, w: Point, check: Check,
                device: torch.device, roof: float, limit: float, l2: str, flush: torch.Tensor) -> BenchRow:
    """Time one kernel on one workload: its eager call, then (GPU) its cold call (``_cold``) and its graph
    replay, the cache poisoned before and checked after every timed sample (``check``) and each figure judged
    against ``limit`` (integrity.judge; the cold figure against the copy roof). A kernel that raises gives a row
    with its error; one whose capture fails gives its eager numbers and why."""

    def call() -> None:
        w.call(kernel)

    row = BenchRow(name, w.op, w.layout, w.tokens, w.nbytes, None, None, None, timer=timer_name(device), l2=l2,
                   footprint=w.footprint, limit_bytes_per_s=limit)
    try:
        eager = time_call(call, device, before=check.poison, after=check.mismatch)
    except Exception as exc:  # a benchmark row, not a crash: say why this point has no number
        return replace(row, note=_failure(exc))
    bandwidth = _per_s(w.nbytes, eager.seconds)
    row = replace(row, seconds=eager.seconds, bandwidth=bandwidth, roof_fraction=bandwidth and bandwidth / roof,
                  seconds_low=eager.low, seconds_high=eager.high, invalid=judge(eager, w.nbytes, limit),
                  host_seconds=eager.host)
    if device.type != "cuda":
        return row
    row = _cold(row, kernel, w, check, device, roof, flush)
    if getattr(kernel, "graph_safe", None) is False:
        return replace(row, graph_note="declares graph_safe = False")
    try:
        graph = time_graph(call, device, before=check.poison, after=check.mismatch)
    except Exception as exc:  # the capture failed: the eager numbers stand, the reason is shown
        torch.cuda.synchronize(device)
        return replace(row, graph_note=f"capture failed: {_failure(exc)}")
    graph_bandwidth = _per_s(w.nbytes, graph.seconds)
    return replace(row, graph_seconds=graph.seconds, graph_roof_fraction=graph_bandwidth and graph_bandwidth / roof,
                   graph_timer=timer_name(device, graph=True), graph_seconds_low=graph.low,
                   graph_seconds_high=graph.high, graph_invalid=judge(graph, w.nbytes, limit))


def _time_point(w: Point, timed: Sequence[tuple[str, Callable[..., None]]], device: torch.device, roof: float,
                limit: float, l2: str, flush: torch.Tensor) -> list[BenchRow]:
    """A row per kernel of ``timed`` on workload ``w``; every row invalid, none timed, when the reference cannot
    write (or read) the workload's inputs (then no figure could be shown to be a measurement of the op)."""
    layers = len(w.layers) if isinstance(w, LayeredWorkload) else 1
    try:
        check: Check = (ReadCheck(w) if isinstance(w, ReadWorkload)
                        else LayeredCheck(w) if isinstance(w, LayeredWorkload) else CacheCheck(w))
    except Exception as exc:  # a failing reference is rtp-ref's bug, named in each row and failing the command
        why = f"not timed: the reference could not write this point's inputs: {_failure(exc)}"
        return [BenchRow(n, w.op, w.layout, w.tokens, w.nbytes, None, None, None, note=why, invalid=why,
                         layers=layers) for n, _ in timed]
    return [replace(bench_point(k, n, w, check, device, roof, limit, l2, flush), layers=layers,
                    launches=1 if layers == 1 or hasattr(k, "write_layers") else layers) for n, k in timed]


def _l2_bytes(device: torch.device) -> int | None:
    """The GPU's L2 size in bytes, where torch reports it; None on the CPU."""
    if device.type != "cuda":
        return None
    size = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", None)
    return int(size) if size else None


def device_name(device: torch.device) -> str:
    """The name of the device the bench times on: the GPU's, or ``cpu (machine)``."""
    if device.type == "cuda":
        return str(torch.cuda.get_device_name(device))
    return f"cpu ({pyplatform.processor() or pyplatform.machine()})"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _point(op: str, variant: str, tokens: int, layers: int, contract: WriteContract, device: torch.device) -> Point:
    """The workload of one bench point: a read, a write, or ``layers`` layers' writes."""
    if op_spec(op).reads:
        return read_workload(op, variant, tokens, contract, device)
    if layers > 1:
        return layered(op, variant, tokens, layers, contract, device)
    return workload(op, variant, tokens, contract, device)


def run_bench(platform: Platform, contract: WriteContract, kernels: Sequence[tuple[str, Callable[..., None]]],
              variants: Mapping[str, Sequence[str]], sizes: Sequence[int], device: torch.device,
              progress: Callable[[str], None] = print, largest_only: Collection[str] = (),
              layers: Sequence[int] = (1,)) -> dict[str, Any]:
    """Measure the roof and the launch floor, then every op x variant x size (x layer count, for writes) for every
    kernel of the op claiming the variant; returns the bench document (bench.json), its invalid figures and
    warnings included.

    ``variants``: per op, the variants to time. ``layers``: layer counts of each write point (1: one layer's write;
    N: the same write into N layers' caches, one call of a grouped kernel's ``write_layers`` or N calls; the reads
    are timed at 1 only). Kernels named in ``largest_only`` are timed at the largest size only (torch.compile
    baselines: each size would be another compilation). Each point's inputs, the reference's bytes for them and a
    copy through the point's footprint are made once and shared by its kernels."""
    started = _now()
    roof_bytes = 4 << 30 if device.type == "cuda" else 256 << 20
    roof = copy_roof(device, roof_bytes)
    progress(f"device copy roof: {roof / 1e12:.3f} TB/s ({roof_bytes >> 20} MiB buffer)")
    floor = launch_floor(device) if device.type == "cuda" else None
    if floor is not None:
        progress(f"launch floor: {floor * 1e6:.2f} us per empty kernel replayed in a CUDA graph")
    else:
        progress("CPU figures: one call per sample on the host clock (perf_counter); not comparable with a GPU's")
    l2_bytes = _l2_bytes(device)
    flush = flush_buffer(device, l2_bytes)
    copies: dict[int, float] = {}
    rows = []
    for op, op_variants in variants.items():
        for variant in op_variants:
            takers = [(n, k) for n, k in kernels if op_name(k) == op and variant in claimed_variants(k)]
            counts = (1,) if op_spec(op).reads else layers
            for tokens, count in ((t, c) for c in counts for t in sizes):
                timed = [(n, k) for n, k in takers if n not in largest_only or tokens == max(sizes)]
                if timed:
                    try:
                        w = _point(op, variant, tokens, count, contract, device)
                    except Exception as exc:  # rtp-ref's bug, not the kernels': named in each row, failing the run
                        why = f"not timed: this point's inputs could not be made: {_failure(exc)}"
                        for n, _ in timed:
                            rows.append(BenchRow(n, op, variant, tokens, 0, None, None, None, note=why, invalid=why,
                                                 layers=count))
                            progress(format_row(rows[-1]))
                        continue
                    if w.footprint not in copies:
                        # a footprint past the roof's buffer is in the roof's cache state: nothing to add
                        copies[w.footprint] = (copy_roof(device, w.footprint // 2, graph=True)
                                               if w.footprint < roof_bytes else roof)
                    limit = speed_limit(roof, copies[w.footprint])
                    state = l2_state(device.type, w.footprint, l2_bytes)
                    for row in _time_point(w, timed, device, roof, limit, state, flush):
                        rows.append(row)
                        progress(format_row(row))
                    del w  # before the next point's inputs are made: two 2M-token workloads may not fit together
    warnings = non_monotonic(rows)
    for line in warnings:
        progress(f"warning: {line}")
    return {
        "schema": "rtp-ref-bench",
        "schema_version": SCHEMA_VERSION,
        "platform": platform.name,
        "device": str(device),
        "device_name": device_name(device),
        "environment": collect_environment(),
        "run": {"started": started, "finished": _now(), "command": run_command(), "rtp_ref": rtp_ref_build()},
        "roof_bytes_per_s": roof,
        "roof_buffer_bytes": roof_bytes,
        "launch_floor_s": floor,
        "l2_bytes": l2_bytes,
        "rows": [asdict(r) for r in rows],
        "invalid": invalid_figures(rows),
        "warnings": warnings,
    }


def us(seconds: float | None) -> str:
    """Seconds as ``12.3 us``; ``-`` for None."""
    return "-" if seconds is None else f"{seconds * 1e6:.1f} us"


def pct(fraction: float | None) -> str:
    """A fraction as ``85.0%``; ``-`` for None."""
    return "-" if fraction is None else f"{100 * fraction:.1f}%"


def format_row(row: BenchRow) -> str:
    """One progress line: kernel, variant, tokens, (GPU) cold time and roof fraction, eager time and roof fraction,
    graph time and roof fraction, and INVALID after a figure that is not a measurement."""
    head = f"{row.kernel:<22} {row.layout:<16} {row.tokens:>8}" + (
        f" x{row.layers} layers, {row.launches} launch(es)" if row.layers > 1 else "")
    if row.seconds is None:
        return f"{head}  {row.note}"
    graph = (f"graph {us(row.graph_seconds):>11} {pct(row.graph_roof_fraction):>6}"
             + (" INVALID" if row.graph_invalid else "") if row.graph_seconds is not None else row.graph_note)
    eager = f"eager {us(row.seconds):>11} {pct(row.roof_fraction):>6}" + (" INVALID" if row.invalid else "")
    if row.cold_seconds is None and not row.cold_note:
        return f"{head}  {eager}  {graph}"
    cold = (f"cold {us(row.cold_seconds):>11} {pct(row.cold_roof_fraction):>6}"
            + (" INVALID" if row.cold_invalid else "") if row.cold_seconds is not None else row.cold_note)
    return f"{head}  {cold}  {eager}  {graph}"

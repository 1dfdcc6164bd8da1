"""The rules a bench figure must pass to be reported as a measurement, and the warnings a series earns.

A figure is invalid when the cache (a reader's output rows) did not hold the reference's bytes after one of its timed
samples (rtp_ref.bench.verify, rtp_ref.bench.read_verify), or when it moves its bytes faster than the copies measured
in the same run allow (``speed_limit``): neither is a time of the op. ``rtp-ref bench`` fails naming every invalid
figure.

A series (one kernel and variant over the sizes) that gets faster with more tokens beyond its spread is
reported as a warning: on a shared machine that is noise, and the series must be measured again before it is read.
"""

from __future__ import annotations

from collections.abc import Sequence

from rtp_ref.bench.measure import Timing
from rtp_ref.bench.rows import BenchRow

#: cache states of a figure (``l2_state``)
WARM, PARTLY_WARM, COLD, CPU_FIGURES, L2_UNKNOWN = "warm", "partly warm", "cold", "CPU figures", "L2 size unknown"
#: a footprint at least this many times the L2 streams from memory on every call: a cold figure
COLD_FACTOR = 4
#: how far past the fastest copy of the same run a figure may go before it is impossible: a write reads about twice
#: what it writes, which a memory system may serve a little faster than a copy's even split, and two medians
#: measured apart differ by a few percent. A figure of a kernel that did not run is many times past it.
ROOF_ALLOWANCE = 1.10


def l2_state(device_type: str, footprint: int, l2_bytes: int | None) -> str:
    """The cache state of figures whose calls go through ``footprint`` bytes in turn, the same buffers call after
    call: on a GPU ``warm`` (they fit in the L2), ``partly warm`` (up to ``COLD_FACTOR`` times it), ``cold``
    (each call streams from memory) or ``L2 size unknown``; ``CPU figures`` on the CPU."""
    if device_type != "cuda":
        return CPU_FIGURES
    if not l2_bytes:
        return L2_UNKNOWN
    if footprint <= l2_bytes:
        return WARM
    return PARTLY_WARM if footprint < COLD_FACTOR * l2_bytes else COLD


def speed_limit(roof: float, footprint_copy: float) -> float:
    """The fastest bandwidth a figure may show: ``ROOF_ALLOWANCE`` times the faster of the device copy roof (a
    copy larger than any cache) and a copy going through the figure's own footprint call after call (the same
    cache state as the figure's: a write served from L2 may beat the memory roof, never an L2-resident copy)."""
    return max(roof, footprint_copy) * ROOF_ALLOWANCE


def judge(timing: Timing, nbytes: int, limit: float) -> str:
    """Why a timed figure of a write moving ``nbytes`` is not a measurement of it, or "" when it is one: the check
    after a sample failed (``timing.problem``), or its median time moves the bytes faster than ``limit``."""
    if timing.problem is not None:
        return timing.problem
    bandwidth = nbytes / timing.seconds if timing.seconds > 0 else float("inf")
    if bandwidth > limit:
        return (f"{timing.seconds * 1e6:.3g} us for {nbytes} bytes is {bandwidth / 1e12:.3f} TB/s, faster than the "
                f"{limit / 1e12:.3f} TB/s the copies measured in this run allow: impossible")
    return ""


def _name(row: BenchRow, mode: str) -> str:
    layers = f" x{row.layers} layers" if row.layers > 1 else ""
    return f"{row.kernel} {row.op} {row.layout} at {row.tokens} tokens{layers}, {mode}"


#: the modes of a row's figures
MODES = ("eager", "graph", "cold")


def _figure(row: BenchRow, mode: str) -> tuple[float | None, float | None, str]:
    """A row's figure of ``mode``: its fastest and slowest sample and why it is invalid ("" when valid)."""
    if mode == "graph":
        return row.graph_seconds_low, row.graph_seconds_high, row.graph_invalid
    if mode == "cold":
        return row.cold_seconds_low, row.cold_seconds_high, row.cold_invalid
    return row.seconds_low, row.seconds_high, row.invalid


def invalid_figures(rows: Sequence[BenchRow]) -> list[str]:
    """Every invalid figure, named by kernel, op, variant, size and mode (eager, graph or cold), with why."""
    return [f"{_name(r, mode)}: {_figure(r, mode)[2]}" for mode in MODES for r in rows if _figure(r, mode)[2]]


def _series(rows: Sequence[BenchRow], mode: str) -> dict[tuple[str, str, str, int], list[tuple[int, float, float]]]:
    """Valid figures of one mode per (op, kernel, variant, layers): (tokens, fastest, slowest sample), by tokens."""
    out: dict[tuple[str, str, str, int], list[tuple[int, float, float]]] = {}
    for r in sorted(rows, key=lambda r: r.tokens):
        low, high, invalid = _figure(r, mode)
        if low is not None and high is not None and not invalid:
            out.setdefault((r.op, r.kernel, r.layout, r.layers), []).append((r.tokens, low, high))
    return out


def non_monotonic(rows: Sequence[BenchRow]) -> list[str]:
    """A warning for every pair of sizes of a series where the smaller write's fastest sample is slower than the
    larger write's slowest: slower with fewer tokens beyond the spread of both."""
    warnings = []
    for mode in MODES:
        for (op, kernel, layout, layers), points in _series(rows, mode).items():
            name = f"{kernel} {op} {layout}" + (f" x{layers} layers" if layers > 1 else "")
            for i, (small, small_low, _) in enumerate(points):
                for large, _, large_high in points[i + 1:]:
                    if small_low > large_high:
                        warnings.append(
                            f"{name}, {mode}: {small} tokens (fastest sample {small_low * 1e6:.1f} us) "
                            f"took longer than {large} tokens (slowest sample {large_high * 1e6:.1f} us), beyond the "
                            "spread of both: noise from other work on the machine, or a size the kernel handles "
                            "badly; measure again before reading the series")
    return warnings

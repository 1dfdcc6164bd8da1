"""What ``rtp-ref bench`` writes: bench.json (the document run_bench returns), bench.md (a dated, versioned header,
a legend of its words, the table, the invalid figures and the warnings) and bench.png (a chart per op: time against
size, log-log, cold, eager and graph, the launch floor as a line, beside each kernel's fraction of the roof at the
largest size, cold on a GPU, eager on the CPU). Invalid figures are in the table, marked; never in the chart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rtp_ref.bench.integrity import COLD, COLD_FACTOR, CPU_FIGURES, L2_UNKNOWN, PARTLY_WARM, ROOF_ALLOWANCE, WARM
from rtp_ref.bench.measure import (
    COLD_CALLS,
    COLD_GRAPH_TIMER,
    COLD_TIMER,
    EVENTS_TIMER,
    GRAPH_CALLS,
    GRAPH_TIMER,
    HOST_TIMER,
)
from rtp_ref.bench.rows import BenchRow
from rtp_ref.bench.run import pct, us
from rtp_ref.ops import OPS

#: the bar a fast kernel must clear at the largest size (>= 85% of the copy roof)
TARGET_FRACTION = 0.85

#: what each timer and cache state word of the table means
TIMER_MEANING = {
    EVENTS_TIMER: "CUDA events around about 20 ms of eager calls queued back to back (host work overlaps the "
                  "device's; a call shorter than its host work is launch-bound, as it is)",
    GRAPH_TIMER: f"CUDA events around replays of a CUDA graph of {GRAPH_CALLS} captured calls, per call",
    HOST_TIMER: "the host clock around one call",
    COLD_GRAPH_TIMER: "CUDA events around one replay of a CUDA graph of one call, after a write of twice the L2 "
                      f"evicted what earlier calls left there (the mean of {COLD_CALLS} such calls per sample)",
    COLD_TIMER: "CUDA events around one eager call (a kernel declaring graph_safe = False), after a write of twice "
                f"the L2 evicted what earlier calls left there (the mean of {COLD_CALLS} such calls per sample)",
}
L2_MEANING = {
    WARM: "the buffers the calls go through in turn (both input sets, the slots, the entries written) fit in the L2",
    PARTLY_WARM: f"those buffers are larger than the L2 but less than {COLD_FACTOR} times it: some of each call is "
                 "served from the L2",
    COLD: f"the buffers the calls go through in turn are at least {COLD_FACTOR} times the L2: every call streams "
          "from memory",
    L2_UNKNOWN: "torch does not report this GPU's L2 size",
    CPU_FIGURES: "timed on the CPU: host figures, a correctness baseline, not comparable with GPU figures",
}


def _header(doc: dict[str, Any], rows: list[BenchRow]) -> list[str]:
    """bench.md's header: when, which rtp-ref, torch and triton, on which device, the command line, the roofs,
    and a legend of the words the table uses."""
    env = doc["environment"]
    run = doc["run"]
    build = run["rtp_ref"]
    commit = f" (git commit {build['commit'][:12]}{', with uncommitted changes' if build['dirty'] else ''})" \
        if build.get("commit") else ""
    floor = doc.get("launch_floor_s")
    l2 = doc.get("l2_bytes")
    lines = [
        f"# rtp-ref bench: {doc['platform']} on {doc['device_name']}",
        "",
        f"- run {run['started']} to {run['finished']} (UTC)",
        f"- rtp-ref {build['version']}{commit}, torch {env.get('torch')}, triton {env.get('triton') or '-'}",
        f"- device: {doc['device_name']}, torch device `{doc['device']}`"
        + (f", L2 {l2 / 2**20:.1f} MiB" if l2 else ""),
        f"- command: `{run['command']}`",
        f"- measured in the same run: device copy roof {doc['roof_bytes_per_s'] / 1e12:.3f} TB/s (a copy of "
        f"{doc['roof_buffer_bytes'] >> 20} MiB)"
        + (f"; launch floor {floor * 1e6:.2f} us (an empty kernel replayed in a CUDA graph)" if floor else ""),
        "- effective bandwidth counts the fewest bytes a write must move (rtp_ref/bench/workloads.py)",
        "",
        "Legend:",
        "",
        "- cold L2 (the headline on a GPU), eager, graph replay: median seconds per call over the timed samples, "
        "with (fastest-slowest sample); cold: nothing of earlier calls in the L2 (a decode step's view of one "
        "layer's cache after the other layers ran), eager and graph: calls back to back in the L2 state the L2 "
        "column names",
        "- of roof: the fewest bytes over the median time, as a fraction of the device copy roof",
        "- host / call (GPU): the host's median time per eager call while queueing them, no sync in the span: what "
        "a call costs the host (its checks and launch) where the device keeps up, as at decode sizes; the device's "
        "time where it does not",
    ]
    if floor:
        lines.append("- graph / floor: the graph replay's time over the launch floor's")
    timers = {r.timer for r in rows} | {r.graph_timer for r in rows} | {r.cold_timer for r in rows}
    lines += [f"- timer `{t}`: {TIMER_MEANING[t]}" for t in sorted(timers) if t]
    lines += [f"- L2 `{s}`: {L2_MEANING[s]}" for s in sorted({r.l2 for r in rows}) if s]
    lines += [
        "- INVALID: not a measurement of the op, so the command failed: the cache (a reader's output rows) did not "
        "hold the reference's bytes after a timed sample (it is poisoned before each one, and the calls take two "
        "input sets, or a reader two source caches, in turn), or "
        f"the figure moves its bytes more than {ROOF_ALLOWANCE:.2f} times as fast as the faster of the copy roof and "
        "a copy through the point's own buffers (rtp_ref/bench/integrity.py); why is under Invalid figures",
        "- layers: the same write into that many layers' caches, timed as one write (its bytes every layer's), in "
        "one launch (a grouped kernel's write_layers) or one per layer",
        "- `-`: not measured (a note says why)",
        "",
    ]
    return lines


def _spread(seconds: float | None, low: float | None, high: float | None) -> str:
    if seconds is None:
        return "-"
    if low is None or high is None:
        return us(seconds)
    return f"{us(seconds)} ({low * 1e6:.1f}-{high * 1e6:.1f})"


def _cells(r: BenchRow, floor: float | None) -> list[str]:
    layers = "1" if r.layers == 1 else f"{r.layers} ({r.launches} launch{'es' if r.launches > 1 else ''})"
    cells = [r.op, r.kernel, r.layout, str(r.tokens), layers, r.timer or "-", r.l2 or "-"]
    if r.seconds is None:
        return [*cells, "-", "-", "-", "-", "-", "-", "-", r.note]
    cold = (_spread(r.cold_seconds, r.cold_seconds_low, r.cold_seconds_high) if r.cold_seconds is not None
            else (r.cold_note or "-"))
    cells += [cold, "INVALID" if r.cold_invalid else pct(r.cold_roof_fraction)]
    ratio = f"{r.graph_seconds / floor:.2f}" if r.graph_seconds and floor else "-"
    graph = (_spread(r.graph_seconds, r.graph_seconds_low, r.graph_seconds_high) if r.graph_seconds is not None
             else (r.graph_note or "-"))
    return [*cells, _spread(r.seconds, r.seconds_low, r.seconds_high),
            "INVALID" if r.invalid else pct(r.roof_fraction), us(r.host_seconds), graph,
            "INVALID" if r.graph_invalid else pct(r.graph_roof_fraction), ratio]


def render_markdown(doc: dict[str, Any]) -> str:
    """bench.md: the header, the table (a row per kernel, variant and size), then the invalid figures and the
    warnings, each section only when it has something."""
    rows = [BenchRow(**r) for r in doc["rows"]]
    lines = [
        *_header(doc, rows),
        "| op | kernel | layout | tokens | layers | timer | L2 | cold L2 | of roof | eager | of roof | host / call "
        "| graph replay | of roof | graph / floor |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(_cells(r, doc.get("launch_floor_s"))) + " |" for r in rows]
    if doc["invalid"]:
        lines += ["", "## Invalid figures", "", *[f"- {line}" for line in doc["invalid"]]]
    if doc["warnings"]:
        lines += ["", "## Warnings", "", *[f"- {line}" for line in doc["warnings"]]]
    return "\n".join(lines) + "\n"


def write_outputs(doc: dict[str, Any], out: Path) -> list[Path]:
    """bench.json, bench.md and bench.png into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "bench.md").write_text(render_markdown(doc))
    chart = out / "bench.png"
    _chart([BenchRow(**r) for r in doc["rows"]], doc, chart)
    return [out / "bench.json", out / "bench.md", chart]


def _chart(rows: list[BenchRow], doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # one layer's writes (and the reads): a layered write is another series, in the table
    valid = [r for r in rows if r.seconds is not None and not r.invalid and r.layers == 1]
    ops = [op for op in OPS if any(r.op == op for r in valid)] or [next(iter(OPS))]
    fig, axes = plt.subplots(len(ops), 2, figsize=(15.0, 4.2 * len(ops)), squeeze=False,
                             gridspec_kw={"width_ratios": [1.0, 1.2]})
    floor = doc.get("launch_floor_s")
    for (time_ax, bar_ax), op in zip(axes, ops, strict=True):
        mine = [r for r in valid if r.op == op]
        _time_panel(time_ax, mine, floor, op)
        _roof_panel(bar_ax, mine, op)
    cpu = " (CPU figures)" if doc["device"] == "cpu" else ""
    fig.suptitle(f"KV-cache writes, {doc['platform']} ({doc['device_name']}){cpu}; copy roof "
                 f"{doc['roof_bytes_per_s'] / 1e12:.2f} TB/s; rtp-ref {doc['run']['rtp_ref']['version']}, "
                 f"{doc['run']['finished']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _time_panel(ax: Any, rows: list[BenchRow], floor: float | None, op: str) -> None:
    """Time per call against tokens, log-log: a solid line per (kernel, layout) eager, dashed for its graph."""
    for kernel, layout in sorted({(r.kernel, r.layout) for r in rows}):
        points = sorted((r for r in rows if (r.kernel, r.layout) == (kernel, layout)), key=lambda r: r.tokens)
        line = ax.plot([r.tokens for r in points], [r.seconds for r in points], marker=".", linewidth=1.0,
                       label=f"{kernel} {layout}")[0]
        graphed = [r for r in points if r.graph_seconds and not r.graph_invalid]
        if graphed:
            ax.plot([r.tokens for r in graphed], [r.graph_seconds for r in graphed], linestyle="--", linewidth=0.8,
                    color=line.get_color())
        cold = [r for r in points if r.cold_seconds and not r.cold_invalid]
        if cold:
            ax.plot([r.tokens for r in cold], [r.cold_seconds for r in cold], linestyle="-.", linewidth=0.8,
                    color=line.get_color())
    if floor:
        ax.axhline(floor, color="black", linewidth=0.8, linestyle=":", label="launch floor")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tokens per write")
    ax.set_ylabel("median seconds per call (solid: eager, dashed: graph, dash-dot: cold L2)")
    ax.set_title(op, fontsize=9)
    ax.legend(fontsize=6, ncol=2)


def _headline(r: BenchRow) -> float:
    """The fraction of the roof a row is charted by: its cold figure where it has a valid one, else its eager."""
    if r.cold_roof_fraction is not None and not r.cold_invalid:
        return r.cold_roof_fraction
    return r.roof_fraction or 0.0


def _roof_panel(ax: Any, rows: list[BenchRow], op: str) -> None:
    """Each kernel's fraction of the copy roof per layout at the largest size, cold on a GPU (the headline; the
    table has the eager call's and the graph replay's too), eager on the CPU."""
    largest = max((r.tokens for r in rows), default=0)
    shown = [r for r in rows if r.tokens == largest]
    layouts = sorted({r.layout for r in shown})
    kernels = sorted({r.kernel for r in shown})
    width = 0.8 / max(len(kernels), 1)
    for i, kernel in enumerate(kernels):
        values = [next((100 * _headline(r) for r in shown
                        if r.kernel == kernel and r.layout == lay), 0.0) for lay in layouts]
        ax.bar([x + i * width for x in range(len(layouts))], values, width, label=kernel)
    ax.set_xticks([x + width * (len(kernels) - 1) / 2 for x in range(len(layouts))], layouts)
    ax.axhline(100, color="black", linewidth=0.8)
    ax.axhline(TARGET_FRACTION * 100, color="gray", linestyle="--", linewidth=0.8, label="target")
    ax.set_ylabel("% of device copy bandwidth")
    mode = "cold L2" if any(r.cold_roof_fraction is not None for r in shown) else "eager"
    ax.set_title(f"{op}, {largest} tokens, {mode}", fontsize=9)
    # Outside the axes: inside, it hid the tops of bars.
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))

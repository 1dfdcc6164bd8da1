"""``rtp-ref bench``: every kernel x variant x size of every op, eager and replayed in a CUDA graph, against the
copy roof and the launch floor measured in the same run.

rtp_ref.bench.workloads builds each point's inputs and counts its bytes; rtp_ref.bench.measure times it.
Results: a table, bench.json, and a PNG chart per op: time against size (log-log, eager and graph, the launch
floor as a line) beside each kernel's fraction of the roof at the largest size (eager).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from rtp_ref.bench.measure import copy_roof, launch_floor, time_call, time_graph
from rtp_ref.bench.workloads import workload
from rtp_ref.certify.environment import collect_environment
from rtp_ref.contract import WriteContract
from rtp_ref.ops import OPS, claimed_variants, op_name
from rtp_ref.platform import Platform

#: the bar a fast kernel must clear at the largest size (>= 85% of the copy roof)
TARGET_FRACTION = 0.85


@dataclass(frozen=True)
class BenchRow:
    """One measured (kernel, variant, tokens) point: the eager call and, on a GPU, its CUDA-graph replay."""

    kernel: str
    op: str
    layout: str
    tokens: int
    bytes: int
    #: the eager call: median seconds, effective bandwidth, its fraction of the copy roof
    seconds: float | None
    bandwidth: float | None
    roof_fraction: float | None
    #: the call replayed in a CUDA graph (None on the CPU, or where the capture failed: ``graph_note``)
    graph_seconds: float | None = None
    graph_roof_fraction: float | None = None
    note: str = ""
    graph_note: str = ""


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


def bench_point(kernel: Callable[..., None], name: str, op: str, variant: str, tokens: int, contract: WriteContract,
                device: torch.device, roof: float) -> BenchRow:
    """Time one kernel on one variant and size: its eager call, then (GPU) its graph replay. A kernel that
    raises gives a row with its error; one whose capture fails gives its eager numbers and why."""
    w = workload(op, variant, tokens, contract, device)

    def call() -> None:
        w.call(kernel)

    try:
        eager = time_call(call, device)
    except Exception as exc:  # a benchmark row, not a crash: say why this point has no number
        return BenchRow(name, op, variant, tokens, w.nbytes, None, None, None, note=_failure(exc))
    bandwidth = w.nbytes / eager.seconds
    row = BenchRow(name, op, variant, tokens, w.nbytes, eager.seconds, bandwidth, bandwidth / roof)
    if device.type != "cuda":
        return row
    if getattr(kernel, "graph_safe", None) is False:
        return replace(row, graph_note="declares graph_safe = False")
    try:
        graph = time_graph(call, device).seconds
    except Exception as exc:  # the capture failed: the eager numbers stand, the reason is shown
        torch.cuda.synchronize(device)
        return replace(row, graph_note=f"capture failed: {_failure(exc)}")
    return replace(row, graph_seconds=graph, graph_roof_fraction=w.nbytes / graph / roof)


def run_bench(platform: Platform, contract: WriteContract, kernels: Sequence[tuple[str, Callable[..., None]]],
              variants: Mapping[str, Sequence[str]], sizes: Sequence[int], device: torch.device,
              progress: Callable[[str], None] = print, largest_only: Collection[str] = ()) -> dict[str, Any]:
    """Measure the roof and the launch floor, then every kernel x claimed variant of its op x size.

    ``variants``: per op, the variants to time. Kernels named in ``largest_only`` are timed at the largest size
    only (torch.compile baselines: each size would be another compilation)."""
    roof_bytes = 4 << 30 if device.type == "cuda" else 256 << 20
    roof = copy_roof(device, roof_bytes)
    progress(f"device copy roof: {roof / 1e12:.3f} TB/s ({roof_bytes >> 20} MiB buffer)")
    floor = launch_floor(device) if device.type == "cuda" else None
    if floor is not None:
        progress(f"launch floor: {floor * 1e6:.2f} us per empty kernel replayed in a CUDA graph")
    rows = []
    for name, kernel in kernels:
        op = op_name(kernel)
        for variant in variants.get(op, ()):
            if variant not in claimed_variants(kernel):
                continue
            for tokens in sizes:
                if name in largest_only and tokens != max(sizes):
                    continue
                row = bench_point(kernel, name, op, variant, tokens, contract, device, roof)
                rows.append(row)
                progress(format_row(row))
    return {
        "schema": "rtp-ref-bench",
        "schema_version": 2,
        "platform": platform.name,
        "device": str(device),
        "environment": collect_environment(),
        "roof_bytes_per_s": roof,
        "launch_floor_s": floor,
        "rows": [asdict(r) for r in rows],
    }


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.1f} us"


def _pct(fraction: float | None) -> str:
    return "-" if fraction is None else f"{100 * fraction:.1f}%"


def format_row(row: BenchRow) -> str:
    """One progress line: kernel, variant, tokens, eager time and roof fraction, graph time and roof fraction."""
    head = f"{row.kernel:<22} {row.layout:<16} {row.tokens:>8}"
    if row.seconds is None:
        return f"{head}  {row.note}"
    graph = (f"graph {_us(row.graph_seconds):>11} {_pct(row.graph_roof_fraction):>6}" if row.graph_seconds
             else row.graph_note)
    return f"{head}  eager {_us(row.seconds):>11} {_pct(row.roof_fraction):>6}  {graph}"


def write_outputs(doc: dict[str, Any], out: Path) -> list[Path]:
    """bench.json, bench.md and bench.png into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(doc, indent=1) + "\n")
    rows = [BenchRow(**r) for r in doc["rows"]]
    floor = doc.get("launch_floor_s")
    header = (f"# rtp-ref bench: {doc['platform']} on {doc['environment'].get('device')}\n\n"
              f"Measured in the same run: device copy roof {doc['roof_bytes_per_s'] / 1e12:.3f} TB/s"
              + (f"; launch floor {floor * 1e6:.2f} us (an empty kernel replayed in a CUDA graph)" if floor else "")
              + ".\n\nEffective bandwidth counts the fewest bytes a write must move (rtp_ref/bench/workloads.py).\n\n"
              "| op | kernel | layout | tokens | eager | of roof | graph replay | of roof | graph / floor |\n"
              "|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        cells = [r.op, r.kernel, r.layout, str(r.tokens)]
        if r.seconds is None:
            cells += ["-", "-", "-", "-", r.note]
        else:
            ratio = f"{r.graph_seconds / floor:.2f}" if r.graph_seconds and floor else "-"
            cells += [_us(r.seconds), _pct(r.roof_fraction), _us(r.graph_seconds) if r.graph_seconds else
                      (r.graph_note or "-"), _pct(r.graph_roof_fraction), ratio]
        lines.append("| " + " | ".join(cells) + " |")
    (out / "bench.md").write_text(header + "\n".join(lines) + "\n")
    chart = out / "bench.png"
    _chart(rows, doc, chart)
    return [out / "bench.json", out / "bench.md", chart]


def _chart(rows: list[BenchRow], doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = [op for op in OPS if any(r.op == op for r in rows)] or [next(iter(OPS))]
    fig, axes = plt.subplots(len(ops), 2, figsize=(15.0, 4.2 * len(ops)), squeeze=False,
                             gridspec_kw={"width_ratios": [1.0, 1.2]})
    floor = doc.get("launch_floor_s")
    for (time_ax, bar_ax), op in zip(axes, ops, strict=True):
        mine = [r for r in rows if r.op == op and r.seconds is not None]
        _time_panel(time_ax, mine, floor, op)
        _roof_panel(bar_ax, mine, op)
    fig.suptitle(f"KV-cache writes, {doc['platform']} ({doc['environment'].get('device')}); copy roof "
                 f"{doc['roof_bytes_per_s'] / 1e12:.2f} TB/s", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _time_panel(ax: Any, rows: list[BenchRow], floor: float | None, op: str) -> None:
    """Time per call against tokens, log-log: a solid line per (kernel, layout) eager, dashed for its graph."""
    for kernel, layout in sorted({(r.kernel, r.layout) for r in rows}):
        points = sorted((r for r in rows if (r.kernel, r.layout) == (kernel, layout)), key=lambda r: r.tokens)
        line = ax.plot([r.tokens for r in points], [r.seconds for r in points], marker=".", linewidth=1.0,
                       label=f"{kernel} {layout}")[0]
        graphed = [r for r in points if r.graph_seconds]
        if graphed:
            ax.plot([r.tokens for r in graphed], [r.graph_seconds for r in graphed], linestyle="--", linewidth=0.8,
                    color=line.get_color())
    if floor:
        ax.axhline(floor, color="black", linewidth=0.8, linestyle=":", label="launch floor")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tokens per write")
    ax.set_ylabel("seconds per call (solid: eager, dashed: graph replay)")
    ax.set_title(op, fontsize=9)
    ax.legend(fontsize=6, ncol=2)


def _roof_panel(ax: Any, rows: list[BenchRow], op: str) -> None:
    """Each kernel's fraction of the copy roof per layout at the largest size, eager (a prefill-sized write is
    made eagerly by engines; the table has the graph replay's too)."""
    largest = max((r.tokens for r in rows), default=0)
    shown = [r for r in rows if r.tokens == largest]
    layouts = sorted({r.layout for r in shown})
    kernels = sorted({r.kernel for r in shown})
    width = 0.8 / max(len(kernels), 1)
    for i, kernel in enumerate(kernels):
        values = [next((100 * (r.roof_fraction or 0.0) for r in shown
                        if r.kernel == kernel and r.layout == lay), 0.0) for lay in layouts]
        ax.bar([x + i * width for x in range(len(layouts))], values, width, label=kernel)
    ax.set_xticks([x + width * (len(kernels) - 1) / 2 for x in range(len(layouts))], layouts)
    ax.axhline(100, color="black", linewidth=0.8)
    ax.axhline(TARGET_FRACTION * 100, color="gray", linestyle="--", linewidth=0.8, label="target")
    ax.set_ylabel("% of device copy bandwidth")
    ax.set_title(f"{op}, {largest} tokens, eager", fontsize=9)
    # Outside the axes: inside, it hid the tops of bars.
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))

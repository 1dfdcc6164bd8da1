"""``rtp-ref bench``: each kernel x layout at a small and a large size, against the copy roof.

Inputs are random (never zeros), slots are a random permutation over a cache twice as large as
the write (so writes scatter like a real serving batch), and every timed call writes the same
slots (a write kernel is idempotent for the same inputs). Results: a table, bench.json, and a PNG
chart of bandwidth fraction per kernel and layout.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from rtp_ref.bench.measure import copy_roof, minimum_bytes, time_call
from rtp_ref.certify.environment import collect_environment
from rtp_ref.kernels.contract import WriteContract
from rtp_ref.kernels.protocol import KVCacheKernel
from rtp_ref.kv.layouts import MlaLayout, default_dims
from rtp_ref.platform import Platform

BLOCK_SIZE = 64
#: the bar a fast kernel must clear at the large size (issue: >= 85% of the copy roof)
TARGET_FRACTION = 0.85


@dataclass(frozen=True)
class BenchRow:
    """One measured (kernel, layout, tokens) point."""

    kernel: str
    layout: str
    tokens: int
    seconds: float | None
    bytes: int
    bandwidth: float | None
    roof_fraction: float | None
    note: str = ""


def bench_inputs(layout: MlaLayout, tokens: int, device: torch.device,
                 dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """(kv_c, k_pe, cache, slots, scale) of a bench point: random values, slots a random permutation over a
    cache twice as large, scale 0.05; the same for the same arguments."""
    g = torch.Generator(device="cpu").manual_seed(tokens)
    kv_c = torch.randn(tokens, layout.kv_lora_rank, generator=g, dtype=torch.float32).to(device, dtype)
    k_pe = torch.randn(tokens, layout.rope_dim, generator=g, dtype=torch.float32).to(device, dtype)
    num_blocks = math.ceil(2 * tokens / BLOCK_SIZE)
    slots = torch.randperm(num_blocks * BLOCK_SIZE, generator=g)[:tokens].to(device)
    cache = torch.zeros(layout.cache_shape(num_blocks, BLOCK_SIZE), dtype=layout.cache_dtype(dtype), device=device)
    scale = torch.tensor([0.05], dtype=torch.float32, device=device)
    return kv_c, k_pe, cache, slots, scale


def bench_point(kernel: KVCacheKernel, name: str, layout: MlaLayout, tokens: int, device: torch.device,
                roof: float) -> BenchRow:
    """Time one kernel on one layout and size; a kernel that raises gives a row with its error."""
    dtype = torch.bfloat16
    kv_c, k_pe, cache, slots, scale = bench_inputs(layout, tokens, device, dtype)
    nbytes = minimum_bytes(layout, tokens, dtype)

    # The protocol call is timed, as an engine makes it: whatever a kernel checks on the host is its cost.
    def call() -> None:
        kernel(kv_c, k_pe, cache, slots, layout.name, scale)

    try:
        timing = time_call(call, device)
    except Exception as exc:  # a benchmark row, not a crash: say why this point has no number
        return BenchRow(name, layout.name, tokens, None, nbytes, None, None, f"{type(exc).__name__}: {exc}"[:200])
    bandwidth = nbytes / timing.seconds
    return BenchRow(name, layout.name, tokens, timing.seconds, nbytes, bandwidth, bandwidth / roof)


def run_bench(platform: Platform, contract: WriteContract, kernels: Sequence[tuple[str, KVCacheKernel]],
              layouts: Sequence[str], sizes: Sequence[int], device: torch.device,
              progress: Callable[[str], None] = print, largest_only: Collection[str] = ()) -> dict[str, Any]:
    """Measure the roof, then every kernel x layout x size; returns the bench document.

    Kernels named in ``largest_only`` are timed at the largest size only (torch.compile baselines:
    each size would be another compilation)."""
    roof_bytes = 4 << 30 if device.type == "cuda" else 256 << 20
    roof = copy_roof(device, roof_bytes)
    progress(f"device copy roof: {roof / 1e12:.3f} TB/s ({roof_bytes >> 20} MiB buffer)")
    rows = []
    for name, kernel in kernels:
        for layout_name in layouts:
            if layout_name not in kernel.kv_cache_dtypes:
                continue
            layout = contract.layout(layout_name, *default_dims(layout_name))
            for tokens in sizes:
                if name in largest_only and tokens != max(sizes):
                    continue
                row = bench_point(kernel, name, layout, tokens, device, roof)
                rows.append(row)
                progress(format_row(row))
    return {
        "schema": "rtp-ref-bench",
        "schema_version": 1,
        "platform": platform.name,
        "device": str(device),
        "environment": collect_environment(),
        "roof_bytes_per_s": roof,
        "rows": [asdict(r) for r in rows],
    }


def format_row(row: BenchRow) -> str:
    """One table line: kernel, layout, tokens, time, effective bandwidth and its roof fraction."""
    if row.seconds is None or row.bandwidth is None or row.roof_fraction is None:
        return f"{row.kernel:<22} {row.layout:<18} {row.tokens:>9}  {'-':>10}  {'-':>10}  {'-':>6}  {row.note}"
    return (f"{row.kernel:<22} {row.layout:<18} {row.tokens:>9}  {row.seconds * 1e3:>8.3f}ms  "
            f"{row.bandwidth / 1e9:>7.1f}GB/s  {100 * row.roof_fraction:>5.1f}%")


def write_outputs(doc: dict[str, Any], out: Path) -> list[Path]:
    """bench.json, bench.md and bench.png (bandwidth fraction per kernel and layout) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(doc, indent=1) + "\n")
    rows = [BenchRow(**r) for r in doc["rows"]]
    header = (f"# rtp-ref bench: {doc['platform']} on {doc['environment'].get('device')}\n\n"
              f"Device copy roof measured in the same run: {doc['roof_bytes_per_s'] / 1e12:.3f} TB/s.\n\n"
              "| kernel | layout | tokens | time | effective bandwidth | of roof |\n|---|---|---|---|---|---|\n")
    lines = [f"| {r.kernel} | {r.layout} | {r.tokens} | "
             + (f"{r.seconds * 1e3:.3f} ms | {r.bandwidth / 1e9:.1f} GB/s | {100 * r.roof_fraction:.1f}% |"
                if r.seconds is not None and r.bandwidth is not None and r.roof_fraction is not None
                else f"- | - | {r.note} |")
             for r in rows]
    (out / "bench.md").write_text(header + "\n".join(lines) + "\n")
    chart = out / "bench.png"
    _chart(rows, doc, chart)
    return [out / "bench.json", out / "bench.md", chart]


def _chart(rows: list[BenchRow], doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    largest = max((r.tokens for r in rows), default=0)
    shown = [r for r in rows if r.tokens == largest]
    layouts = sorted({r.layout for r in shown})
    kernels = sorted({r.kernel for r in shown})
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(layouts)) + 1.8, 4.0))
    width = 0.8 / max(len(kernels), 1)
    for i, kernel in enumerate(kernels):
        values = [next((100 * (r.roof_fraction or 0.0) for r in shown if r.kernel == kernel and r.layout == lay), 0.0)
                  for lay in layouts]
        ax.bar([x + i * width for x in range(len(layouts))], values, width, label=kernel)
    ax.set_xticks([x + width * (len(kernels) - 1) / 2 for x in range(len(layouts))], layouts)
    ax.axhline(100, color="black", linewidth=0.8)
    ax.axhline(TARGET_FRACTION * 100, color="gray", linestyle="--", linewidth=0.8, label="target")
    ax.set_ylabel("% of device copy bandwidth")
    ax.set_title(f"KV-cache write, {largest} tokens, {doc['platform']} ({doc['environment'].get('device')}); "
                 f"roof {doc['roof_bytes_per_s'] / 1e12:.2f} TB/s", fontsize=9)
    # Outside the axes: inside, it hid the tops of bars.
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

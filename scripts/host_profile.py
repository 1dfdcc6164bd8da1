"""Where a built-in writer's (and reader's) host time per eager call goes, on a GPU host (issue: the lean call path).

For each GPU writer and variant at a decode size (1 token by default): the host's microseconds per call over
``--calls`` calls queued back to back (perf_counter, as ``rtp-ref bench``'s ``host / call``), then the same calls
under cProfile, its ``--top`` functions by own time in microseconds per call. Two floors are measured the same way
in the same process: an empty torch op (``torch.ops.aten.zero_`` on a one-element tensor) and a one-line Triton
kernel launched through its compiled kernel (``CompiledLaunch``), so each writer's figure reads against what a
launch from Python costs here at all.

Usage (GPU host, from the repository root): ``python scripts/host_profile.py [--tokens 1] [--calls 2000]``.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import pstats
import time
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from rtp_ref.bench.read_workloads import read_workload
from rtp_ref.bench.workloads import workload
from rtp_ref.contract import WriteContract
from rtp_ref.kernels.discovery import discover_kernels
from rtp_ref.kernels.triton_launch import CompiledLaunch
from rtp_ref.kv.flags import parse_overrides
from rtp_ref.ops import INDEXER_GATHER_OP, INDEXER_OP, MHA_OP, MLA_GATHER_OP, MLA_OP, OPS
from rtp_ref.platform import resolve_platform

POINTS = ((MLA_OP, "auto"), (MLA_OP, "fp8"), (MLA_OP, "fp8_ds_mla"), (MHA_OP, "auto"), (MHA_OP, "fp8"),
          (MLA_GATHER_OP, "fp8"), (INDEXER_GATHER_OP, "ue8m0"),
          (INDEXER_OP, "none"), (INDEXER_OP, "ue8m0"))


@triton.jit
def _one_store(out, VALUE: tl.constexpr):  # type: ignore[no-untyped-def]
    tl.store(out, VALUE)


def sync() -> None:
    """Wait for the GPU's queued work (nothing on a CPU-only run: the script's own check, under the interpreter)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def host_us(fn: Callable[[], object], calls: int) -> float:
    """Host microseconds per call of ``fn`` over ``calls`` calls queued back to back (median of five runs)."""
    figures = []
    for _ in range(5):
        sync()
        begin = time.perf_counter()
        for _ in range(calls):
            fn()
        figures.append((time.perf_counter() - begin) / calls * 1e6)
        sync()
    return sorted(figures)[2]


def profile(fn: Callable[[], object], calls: int, top: int) -> str:
    """cProfile's ``top`` functions by own time over ``calls`` calls, in microseconds per call."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    sync()
    stats = pstats.Stats(profiler)
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]  # type: ignore[attr-defined]
    lines = []
    for (path, line, name), (_, ncalls, own, cumulative, _) in rows:
        lines.append(f"    {own / calls * 1e6:7.2f} own {cumulative / calls * 1e6:7.2f} cum  {ncalls / calls:5.1f}x  "
                     f"{path.rsplit('/', 2)[-1]}:{line} {name}")
    return "\n".join(lines)


#: vLLM's op of each rtp-ref op, called with the op's arguments in rtp-ref's order (the adapter's own order too)
VLLM_OPS = {MLA_OP: ("vllm-mla", "concat_and_cache_mla", (False,)), MHA_OP: ("vllm-mha", "reshape_and_cache_flash", ()),
            INDEXER_OP: ("vllm-indexer", "indexer_k_quant_and_cache", ())}


def _vllm_raw(kernels: dict[str, Any], contract: WriteContract, device: torch.device,
              args: argparse.Namespace) -> list[str]:
    """vLLM's own ops called directly (no adapter checks), where scripts/vllm_kernels is installed: an engine's host
    cost per call, the figure the built-ins are held to."""
    lines = []
    for op, (name, vllm_op, extra) in VLLM_OPS.items():
        entry = kernels.get(name)
        if entry is None:
            continue
        ops = entry.kernel._ops()
        for point_op, variant in POINTS:
            claims = getattr(entry.kernel, "kv_cache_dtypes", None) or getattr(entry.kernel, "scale_fmts", ())
            if point_op != op or variant not in claims:
                continue
            w = workload(op, variant, args.tokens, contract, device)
            arguments = (*w.arguments(w.inputs[0]), *extra)
            call = functools.partial(getattr(ops, vllm_op), *arguments)
            call()
            figure = host_us(call, args.calls)
            label = f"{vllm_op} (vLLM, raw) {variant}"
            lines.append(f"{label:40s} {figure:7.2f} us")
            print(f"== {label}: {figure:.2f} us a call\n{profile(call, args.calls, args.top)}", flush=True)
    return lines


def main() -> None:
    """Print each floor's and writer's host time per call and its profile."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--top", type=int, default=14)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    platform = resolve_platform("auto" if device.type == "cuda" else "cpu")
    contract = WriteContract.for_platform(platform, parse_overrides([]))
    one = torch.zeros(1, device=device)
    launch = CompiledLaunch(_one_store, (1,), {"VALUE": 1.0})  # a constexpr: the compiled kernel is reused
    for _ in range(3):
        launch(one)
    print(f"direct Triton launch: {'used' if launch.direct is not None else 'not used: ' + str(launch.why_not)}")
    floors: dict[str, Callable[[], object]] = {"torch zero_ (floor)": one.zero_}
    if launch.compiled is not None:  # none under the interpreter
        floors["triton compiled[grid] (Triton's path)"] = lambda: launch.compiled[launch.full_grid](one, *launch.tail)
    floors["triton CompiledLaunch (floor)"] = lambda: launch(one)
    summary = []
    for name, fn in floors.items():
        fn()
        figure = host_us(fn, args.calls)
        summary.append(f"{name:40s} {figure:7.2f} us")
        print(f"== {name}: {figure:.2f} us a call\n{profile(fn, args.calls, args.top)}", flush=True)
    kernels = discover_kernels(None, ops=OPS)
    for kernel_name, entry in kernels.items():
        kernel = entry.kernel
        if device.type not in kernel.devices or kernel_name.startswith(("reference", "torch")):
            continue
        op = getattr(kernel, "op", MLA_OP)
        bind = getattr(kernel, "bind", None)
        kernel = bind(contract) if bind is not None else kernel
        for point_op, variant in POINTS:
            if point_op != op:
                continue
            claims = getattr(kernel, "kv_cache_dtypes", None) or getattr(kernel, "scale_fmts", ())
            if variant not in claims:
                continue
            reads = op in (MLA_GATHER_OP, INDEXER_GATHER_OP)
            w = (read_workload if reads else workload)(op, variant, args.tokens, contract, device)

            def call(k: Callable[..., None] = kernel, w: object = w) -> None:
                w.call(k)  # type: ignore[attr-defined]

            call()
            figure = host_us(call, args.calls)
            label = f"{kernel_name} {variant}"
            summary.append(f"{label:40s} {figure:7.2f} us")
            print(f"== {label}: {figure:.2f} us a call\n{profile(call, args.calls, args.top)}", flush=True)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (Triton's interpreter)"
    summary += _vllm_raw(kernels, contract, device, args)
    print(f"\nhost time per eager call, {where}, {args.tokens} token(s):")
    print("\n".join(summary))


if __name__ == "__main__":
    main()

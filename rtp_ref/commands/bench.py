"""``rtp-ref bench``: time every kernel x variant of every op from decode to prefill sizes, eager and in a CUDA
graph, against the copy roof and the launch floor."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import torch

from rtp_ref.bench.outputs import write_outputs
from rtp_ref.bench.run import run_bench
from rtp_ref.certify.signals import interrupts_held
from rtp_ref.commands._output import (
    INTERRUPTED,
    add_json_flag,
    add_layout_flag,
    positive_int,
    print_json,
    writable_dir,
)
from rtp_ref.contract import WriteContract
from rtp_ref.errors import RtpRefError
from rtp_ref.kernels.call_signature import Launch
from rtp_ref.kernels.discovery import discover_kernels
from rtp_ref.kernels.torch_eager import TorchEagerKernel, write_eager
from rtp_ref.kernels.write_plan import PlannedKernel, WritePlan
from rtp_ref.kv.flags import parse_overrides
from rtp_ref.ops import OPS, every_variant, supported_variants
from rtp_ref.platform import resolve_platform

#: tokens per write, from one decode token to a 2M-token prefill (GPU); smaller on the CPU
GPU_SIZES = (1, 64, 1_024, 16_384, 262_144, 2_097_152)
CPU_SIZES = (64, 1_024)
#: the built-in Triton kernels, which on the CPU run in Triton's interpreter: a correctness tool, not a contender
INTERPRETED_ON_CPU = ("triton", "triton-mha", "triton-indexer", "triton-gather", "triton-indexer-gather")
COMPILED = "torch-eager+compile"


class CompiledBaseline(PlannedKernel):
    """torch-eager's write under ``torch.compile``: the baseline the fast kernels are compared with.

    Arguments are validated and the layout planned outside the compiled region (as in torch-eager);
    the write itself (quantise, concatenate, scatter) is compiled once per layout, the plan a constant.
    Boolean masking of padding slots has a data-dependent size, so dynamo captures it rather than
    breaking the graph there.
    """

    name = COMPILED

    def __init__(self, kernel: TorchEagerKernel) -> None:
        self.kv_cache_dtypes = kernel.kv_cache_dtypes
        self.devices = kernel.devices
        self.contract = kernel.contract
        self._init_call_path("host")
        self._compiled: dict[tuple[str, int, int], Callable[..., None]] = {}

    def _prepare(self, plan: WritePlan, contract: WriteContract, kv_c: torch.Tensor, k_pe: torch.Tensor,
                 kv_cache: torch.Tensor, slot_mapping: torch.Tensor, scale: torch.Tensor,
                 flags: torch.Tensor) -> Launch:
        key = (plan.layout.name, plan.kv_lora_rank, plan.rope_dim)
        if key not in self._compiled:
            def write(kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                      scale: torch.Tensor) -> None:
                write_eager(plan, contract, kv_c, k_pe, kv_cache, slot_mapping, scale)

            self._compiled[key] = torch.compile(write, dynamic=False)
        compiled = self._compiled[key]

        def launch(kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor,
                   scale: torch.Tensor) -> None:
            with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
                compiled(kv_c, k_pe, kv_cache, slots, scale)
            self.launch_count += 1

        return launch


def _flush_print(line: str) -> None:
    print(line, flush=True)


def _require_matplotlib() -> None:
    """Raise RtpRefError unless matplotlib (the ``bench`` extra, which draws bench.png) imports.

    Checked before anything is timed: the chart is drawn only after the whole run.
    """
    try:
        import matplotlib  # noqa: F401 (imported to see that it imports)
    except ImportError as exc:
        raise RtpRefError(
            f"bench draws bench.png with matplotlib, which cannot be imported ({exc}); "
            "valid: matplotlib installed, with pip install 'rtp-ref[bench]'"
        ) from None


def _bench(args: argparse.Namespace) -> int:
    # Every argument, the chart library and the report directory are checked before anything is timed.
    platform = resolve_platform(args.platform)
    contract = WriteContract.for_platform(platform, parse_overrides(args.layout_flag))
    # the cpu table is timed on the CPU, as certify runs it there, even on a GPU host
    device = torch.device("cuda" if torch.cuda.is_available() and platform.backend != "cpu" else "cpu")
    valid = every_variant(platform)
    unknown = [n for n in args.layout if n not in valid]
    if unknown:
        raise RtpRefError(f"--layout {unknown[0]!r}: unknown layout; valid: {', '.join(valid)}")
    kernels = []
    for name, entry in discover_kernels(args.kernel or None, ops=OPS).items():
        if name.startswith("reference") and not args.kernel:
            continue  # the references are specifications, not contenders
        bind = getattr(entry.kernel, "bind", None)
        kernel = bind(contract) if bind is not None else entry.kernel
        if device.type not in kernel.devices:
            continue
        if device.type == "cpu" and name in INTERPRETED_ON_CPU:
            continue
        kernels.append((name, kernel))
        if args.compile_baseline and isinstance(kernel, TorchEagerKernel):
            kernels.append((COMPILED, CompiledBaseline(kernel)))
    _require_matplotlib()
    report = writable_dir("--report", args.report)
    sizes = args.tokens or (GPU_SIZES if device.type == "cuda" else CPU_SIZES)
    variants = {op: [v for v in supported_variants(platform, op) if not args.layout or v in args.layout]
                for op in OPS}
    try:
        doc = run_bench(platform, contract, kernels, variants, sizes, device,
                        progress=(lambda _: None) if args.json else _flush_print, largest_only={COMPILED},
                        layers=sorted(set(args.layers)))
    except KeyboardInterrupt:
        print(f"rtp-ref: interrupted: nothing was written to {report}", file=sys.stderr)
        return INTERRUPTED
    try:
        with interrupts_held():  # a Ctrl-C now waits until bench.json, bench.md and bench.png are written
            written = write_outputs(doc, report)
    except OSError as exc:  # the directory was writable when checked: a full disk, or removed meanwhile
        raise RtpRefError(f"--report {args.report!r} cannot be written: {exc.strerror or exc}") from None
    if args.json:
        print_json(doc)
    else:
        print("rtp-ref: wrote " + ", ".join(str(p) for p in written))
    if doc["invalid"]:
        # written first, so that bench.md shows them beside the valid figures
        print(f"rtp-ref: bench: {len(doc['invalid'])} figure(s) are not measurements of the op:", file=sys.stderr)
        for line in doc["invalid"]:
            print(f"  {line}", file=sys.stderr)
        return 1
    return 0


def register(sub: Any) -> None:
    """Add ``bench``."""
    parser = sub.add_parser("bench", help="kernel time and bandwidth, eager and in a CUDA graph, against the roof",
                            description="Benchmark the KV-cache kernels of every op, the reads included: per size "
                            "(on a GPU) the cold call's time (one call at a time after the L2 was flushed: the "
                            "headline), the eager call's time with the host's time per call, the CUDA-graph replay's "
                            "time and the launch floor (an empty kernel's replay), and effective bandwidth (minimum "
                            "bytes / median time) against a device copy, all measured in the same run. The cache is "
                            "poisoned before and checked against the reference after every timed sample, and a "
                            "figure faster than the copies of the same run allow is impossible: an invalid figure "
                            "fails the command (exit 1), named.")
    parser.add_argument("--platform", default="auto", help="platform table whose contract kernels are bound to")
    parser.add_argument("--kernel", action="append", default=[], metavar="NAME", help="only this kernel (repeatable)")
    parser.add_argument("--layout", action="append", default=[], metavar="LAYOUT",
                        help="only this layout or variant of any op (repeatable)")
    add_layout_flag(parser)
    parser.add_argument("--tokens", type=positive_int, nargs="+", metavar="N",
                        help=f"write sizes in tokens (default: {GPU_SIZES} on a GPU, {CPU_SIZES} on the CPU)")
    parser.add_argument("--layers", type=positive_int, nargs="+", metavar="N", default=[1],
                        help="layer counts of each write: N > 1 times the same write into N layers' caches (one "
                             "step's writes), in one call of a kernel's write_layers (a grouped kernel) or N calls "
                             "(default: 1; the reads are timed at 1)")
    parser.add_argument("--compile-baseline", action="store_true",
                        help="also time torch-eager under torch.compile (the baseline kernels are compared with)")
    parser.add_argument("--report", default="reports/bench", metavar="DIR",
                        help="where bench.json, bench.md and bench.png go (default: reports/bench)")
    add_json_flag(parser, "the bench document as JSON")
    parser.set_defaults(func=_bench)

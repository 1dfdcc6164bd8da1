"""``rtp-ref memcheck``: NVIDIA compute-sanitizer over one call of every conformance case of any kernel."""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rtp_ref.commands._output import INTERRUPTED, add_json_flag, print_json, writable_dir
from rtp_ref.errors import RtpRefError
from rtp_ref.kernels.discovery import discover_kernels
from rtp_ref.kernels.protocol import KVCacheKernel
from rtp_ref.memcheck.plan import PlannedCase, layout_cases, plan_cases, select_layouts
from rtp_ref.memcheck.records import CaseRecord, MemcheckRun, text_lines, write_report
from rtp_ref.memcheck.runner import Settings, run_kernel
from rtp_ref.platform import MLA_LAYOUT_NAMES, Platform, detect_platform, resolve_platform

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
SANITIZER = "compute-sanitizer"


def find_sanitizer(option: str | None) -> str:
    """The sanitizer executable: ``--sanitizer`` (a path, or a command on PATH), else compute-sanitizer on
    PATH; missing or not executable raises RtpRefError."""
    if option is None:
        found = shutil.which(SANITIZER)
        if found is None:
            raise RtpRefError(f"{SANITIZER} not found on PATH; valid: a CUDA host with the CUDA toolkit, "
                              "or --sanitizer PATH")
        return found
    found = shutil.which(option)
    if found is None:
        raise RtpRefError(f"--sanitizer {option!r}: no such executable; valid: the path of {SANITIZER} "
                          "(or a command on PATH)")
    return found


def check_gpu() -> None:
    """Raise RtpRefError unless torch sees an NVIDIA GPU: compute-sanitizer checks nothing else."""
    import torch

    if not torch.cuda.is_available():
        raise RtpRefError("torch sees no CUDA GPU on this host (CPU only); memcheck runs each kernel on an NVIDIA "
                          "GPU under compute-sanitizer; valid: a CUDA host")
    if torch.version.hip:
        raise RtpRefError(f"torch here is a ROCm build (HIP {torch.version.hip}); {SANITIZER} checks NVIDIA GPUs "
                          "only; valid: a CUDA host")


def check_kernel_runs(kernel: KVCacheKernel, platform: Platform, device: str) -> None:
    """Raise RtpRefError unless ``kernel`` runs on ``device`` and can follow ``platform``'s contract.

    A kernel without ``bind`` runs as it is, which is only this GPU's own platform.
    """
    if device not in kernel.devices:
        raise RtpRefError(f"--kernel {kernel.name!r} runs on {', '.join(kernel.devices)}; memcheck runs kernels "
                          f"on {device}; valid: a kernel whose devices include {device}")
    if getattr(kernel, "bind", None) is None and device == "cuda":
        native = detect_platform().name
        if platform.name != native:
            raise RtpRefError(f"--platform {platform.name!r}: kernel {kernel.name!r} has no bind(contract), so it "
                              f"runs only as it is, on this GPU's platform; valid: auto or {native}")


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return value


def _plan(args: argparse.Namespace) -> tuple[Settings, Platform, dict[str, list[PlannedCase]]]:
    """Check every argument before anything runs; bad input raises RtpRefError."""
    if args.report is not None:
        writable_dir("--report", args.report)
    entries = discover_kernels(args.kernel)
    sanitizer = find_sanitizer(args.sanitizer)
    if args.device == "cuda":
        check_gpu()
    platform = resolve_platform(args.platform)
    plans = {}
    for name, entry in entries.items():
        check_kernel_runs(entry.kernel, platform, args.device)
        plans[name] = plan_cases(name, select_layouts(entry.kernel, platform, args.layout), args.case)
    if not any(plans.values()):
        raise RtpRefError(f"--case {', '.join(map(repr, args.case))}: matches no case of the selected layouts; "
                          f"valid: part of a case id, such as {next(iter(layout_cases('fp8')))}")
    settings = Settings(sanitizer, args.tool, platform.name if args.platform == "auto" else args.platform,
                        args.device, args.case_timeout)
    return settings, platform, plans


def _printer(plans: dict[str, list[PlannedCase]]) -> Callable[[CaseRecord], None]:
    """Prints each record's table lines as it comes, the columns as wide as the plan needs."""
    cases = [c for planned in plans.values() for c in planned]
    widths = (max(len(c.kernel) for c in cases), max(len(c.layout) for c in cases), max(len(c.case) for c in cases))

    def print_record(record: CaseRecord) -> None:
        for line in text_lines(record, widths):
            print(line, flush=True)

    return print_record


def _memcheck(args: argparse.Namespace) -> int:
    try:
        settings, platform, plans = _plan(args)
        run = MemcheckRun(args.tool, settings.sanitizer, platform.name, args.device, args.case_timeout)
        if not args.json:
            total = sum(map(len, plans.values()))
            print(f"rtp-ref: {args.tool} of {total} case(s) of {', '.join(plans)} on {platform.name} "
                  f"({args.device}), case timeout {args.case_timeout:g}s, with {settings.sanitizer}", flush=True)
        on_record = (lambda _: None) if args.json else _printer(plans)
        for kernel, cases in plans.items():
            run_kernel(settings, kernel, cases, run, on_record)
    except KeyboardInterrupt:  # run_child has ended its sanitizer's process group on the way out
        print("rtp-ref: interrupted: no sanitizer process is left running and no report was written", file=sys.stderr)
        return INTERRUPTED
    try:
        written = write_report(run, Path(args.report)) if args.report else []
    except OSError as exc:
        raise RtpRefError(f"--report {args.report!r} cannot be written: {exc.strerror}") from exc
    if args.json:
        print_json(run.as_json())
    else:
        for note in run.notes:
            print(f"rtp-ref: note: {note}")
        for error in run.errors_outside_cases:
            print(f"rtp-ref: error outside any case: {error}")
        if written:
            print("rtp-ref: wrote " + ", ".join(map(str, written)))
        print(run.summary_line())
    return 0 if run.ok else 1


def register(sub: Any) -> None:
    """Add ``memcheck``."""
    parser = sub.add_parser(
        "memcheck",
        help="run compute-sanitizer over one call of every conformance case of a kernel",
        description="Run NVIDIA compute-sanitizer over one call of every conformance case (every layout the "
        "kernel claims and the platform supports) of any kernel, vendor kernels included, and report each case: "
        "clean, N errors, raised (not a failure here: the conformance suite grades correctness), crashed or hung. "
        "The cases run in a sanitizer process, each call synchronised between marker lines; a process that dies "
        "or hangs is replaced for the remaining cases. Exits 0 when every case ran clean (or raised), 1 on any "
        "sanitizer error, crash or hang, 2 on bad input. Example: rtp-ref memcheck --kernel triton --kernel cuda "
        "--platform cuda-sm90",
    )
    parser.add_argument("--kernel", action="append", required=True, metavar="NAME",
                        help="check this kernel (repeatable): a built-in, an rtp_ref.kernels entry point or one "
                        "named by $RTP_REF_KERNELS")
    parser.add_argument("--platform", default="auto",
                        help="platform name or .toml path whose contract kernels with bind() follow "
                        "(default: auto, this GPU's table); kernels without bind() run as they are")
    parser.add_argument("--layout", action="append", default=[], choices=MLA_LAYOUT_NAMES, metavar="LAYOUT",
                        help="only this layout (repeatable; default: every layout the kernel claims and the "
                        "platform supports)")
    parser.add_argument("--case", action="append", default=[], metavar="TEXT",
                        help="only cases whose id contains TEXT (repeatable), e.g. --case t37-b16")
    parser.add_argument("--sanitizer", metavar="PATH",
                        help=f"the sanitizer executable (default: {SANITIZER} on PATH)")
    parser.add_argument("--tool", choices=TOOLS, default="memcheck", help="the sanitizer tool (default: memcheck)")
    parser.add_argument("--case-timeout", type=_positive_seconds, default=120.0, metavar="SECONDS",
                        help="a case running longer is recorded hung and its process ended (default 120; a "
                        "process's start gets at least 120 s; a kernel's first case may include its build)")
    parser.add_argument("--report", metavar="DIR", help="also write memcheck.json and memcheck.md into DIR")
    # The runner's own tests run the driver on the CPU under a stand-in sanitizer; that checks no memory.
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help=argparse.SUPPRESS)
    add_json_flag(parser, "the records as JSON")
    parser.set_defaults(func=_memcheck)

"""``rtp-ref golden-check``: read a golden file back, prove it intact, and optionally run a kernel on it."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import Any

import torch

from rtp_ref import __version__
from rtp_ref.commands._output import add_json_flag, print_json
from rtp_ref.contract import WriteContract
from rtp_ref.errors import RtpRefError
from rtp_ref.kernels.discovery import discover_kernels
from rtp_ref.kernels.protocol import KernelEntry, device_to_run
from rtp_ref.kv.golden_read import CacheComparison, GoldenFile, compare_cache, read_golden, reference_cache


def _device_for(entry: KernelEntry) -> torch.device:
    """The device the kernel runs on here: a GPU torch sees when it claims one, else the CPU."""
    device = device_to_run(entry.kernel.devices)
    if device is None:
        raise RtpRefError(
            f"kernel {entry.kernel.name!r} runs on {', '.join(entry.kernel.devices)}, and torch sees no such "
            "device here; valid: a kernel that runs on cpu, or a machine with its GPU"
        )
    return torch.device(device)


@dataclass(frozen=True)
class KernelRun:
    """One kernel's call on a golden file: where it ran, what it raised, how its cache compares."""

    name: str
    origin: str
    device: str
    #: the kernel's exception as ``Type: message``, None when it returned normally
    error: str | None
    comparison: CacheComparison

    @property
    def ok(self) -> bool:
        """True when the kernel returned normally and wrote exactly ``kv_cache_expected``."""
        return self.error is None and self.comparison.matches


def run_kernel(golden: GoldenFile, entry: KernelEntry) -> KernelRun:
    """Run ``entry``'s kernel on the file's inputs over a copy of ``kv_cache_before`` and compare.

    The kernel is bound (when it can be) to the contract stored in the file: its fp8 format,
    conversion mode and layout flags. An exception from the kernel is its failure on valid inputs
    and is returned in ``error`` (the cache is compared as the kernel left it). A kernel that does
    not claim the file's layout, or cannot run here, raises RtpRefError.
    """
    kernel, layout = entry.kernel, golden.layout
    if layout.name not in kernel.kv_cache_dtypes:
        raise RtpRefError(
            f"kernel {kernel.name!r} does not claim layout {layout.name!r} of {golden.where}; "
            f"it claims {', '.join(kernel.kv_cache_dtypes)}"
        )
    bind = getattr(kernel, "bind", None)
    if bind is not None:
        kernel = bind(WriteContract(layout.element_format, layout.conversion_mode, layout.flags,
                                    golden.metadata["platform"]))
    device = _device_for(entry)
    t = {key: tensor.to(device) for key, tensor in golden.tensors.items()}
    cache = t["kv_cache_before"].clone()
    error = None
    try:
        kernel(t["kv_c"], t["k_pe"], cache, t["slot_mapping"], layout.name, t["scale"])
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    # The kernel is the unit under test: whatever it raises is reported as its failure (exit 1),
    # never as a traceback of rtp-ref.
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    return KernelRun(entry.kernel.name, entry.origin, str(device), error, compare_cache(golden, cache))


def _comparison_json(c: CacheComparison) -> dict[str, Any]:
    return {"matches": c.matches, "bytes": c.total_bytes, "mismatched_bytes": c.mismatched_bytes,
            "first_mismatches": [asdict(m) for m in c.first]}


def _print_mismatches(c: CacheComparison, writer: str) -> None:
    for m in c.first:
        print(f"  {m.describe(writer)}")
    if c.mismatched_bytes > len(c.first):
        print(f"  ... and {c.mismatched_bytes - len(c.first)} more byte(s)")


def _print_text(golden: GoldenFile, reference: CacheComparison, run: KernelRun | None) -> None:
    meta, layout = golden.metadata, golden.layout
    print(
        f"{golden.path}: {layout.name} on {meta['platform']} ({meta['fp8_format']}, {meta['conversion_mode']}), "
        f"R={layout.kv_lora_rank} P={layout.rope_dim}, {meta['input_dtype']} inputs, {meta['num_tokens']} tokens "
        f"into {golden.num_blocks} blocks x {golden.block_size}; written by rtp-ref {meta['rtp_ref_version']}"
    )
    if reference.matches:
        print(f"reference: kv_cache_expected is what the reference writer of rtp-ref {__version__} writes "
              f"({reference.total_bytes} bytes)")
    else:
        print(f"reference: MISMATCH: {reference.mismatched_bytes} of {reference.total_bytes} bytes of "
              f"kv_cache_expected differ from what the reference writer of rtp-ref {__version__} writes from "
              f"the stored inputs (file written by rtp-ref {meta['rtp_ref_version']}): the file is damaged, "
              "or the reference changed between the two versions")
        _print_mismatches(reference, "the reference")
    if run is None:
        return
    name = f"kernel {run.name} on {run.device}"
    if run.error is not None:
        print(f"{name}: RAISED {run.error}")
    if run.comparison.matches:
        print(f"{name}: the cache matches kv_cache_expected ({run.comparison.total_bytes} bytes)")
    else:
        print(f"{name}: MISMATCH: {run.comparison.mismatched_bytes} of {run.comparison.total_bytes} bytes "
              "differ from kv_cache_expected")
        _print_mismatches(run.comparison, "the kernel")


def _golden_check(args: argparse.Namespace) -> int:
    golden = read_golden(args.file)
    entry = discover_kernels([args.kernel])[args.kernel] if args.kernel else None
    reference = compare_cache(golden, reference_cache(golden))
    run = run_kernel(golden, entry) if entry is not None else None
    ok = reference.matches and (run is None or run.ok)
    if args.json:
        kernel = None if run is None else {
            "name": run.name, "origin": run.origin, "device": run.device, "error": run.error,
            **_comparison_json(run.comparison),
        }
        print_json({"file": golden.path, "ok": ok, "rtp_ref_version": __version__,
                    "metadata": dict(sorted(golden.metadata.items())),
                    "reference": _comparison_json(reference), "kernel": kernel})
    else:
        _print_text(golden, reference, run)
        print(f"rtp-ref: golden-check {'passed' if ok else 'FAILED'}")
    return 0 if ok else 1


def register(sub: Any) -> None:
    """Add ``golden-check``."""
    parser = sub.add_parser(
        "golden-check",
        help="read a golden file back: validate it, re-derive its expected cache, optionally run a kernel on it",
        description="Load a golden file written by `rtp-ref golden`, check every key, dtype, shape and metadata "
        "value, re-run the reference writer on its inputs and compare with its kv_cache_expected byte for byte "
        "(a mismatch: the file is damaged, or the reference changed since the version that wrote it). With "
        "--kernel, run that kernel (bound to the file's contract) on the inputs over a copy of kv_cache_before "
        "and compare too. Exits 0 when everything matches, 1 on a mismatch or a kernel error, 2 when the file "
        "or the arguments are bad. Example: rtp-ref golden-check ds_mla.safetensors --kernel triton",
    )
    parser.add_argument("file", metavar="FILE", help="the golden .safetensors file")
    parser.add_argument("--kernel", metavar="NAME",
                        help="also run this kernel (a built-in, an rtp_ref.kernels entry point or one named by "
                        "$RTP_REF_KERNELS, as `rtp-ref certify --kernel` takes) and compare its cache")
    add_json_flag(parser)
    parser.set_defaults(func=_golden_check)

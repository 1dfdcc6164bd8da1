"""``rtp-ref golden-check``: read a golden file of any write op back, prove it intact, and optionally run a kernel of
that op on it."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import Any

import torch

from rtp_ref import __version__
from rtp_ref.commands._golden_run import compare_cache, kernel_arguments, reference_cache
from rtp_ref.commands._output import add_json_flag, print_json
from rtp_ref.contract import WriteContract
from rtp_ref.errors import RtpRefError
from rtp_ref.kernels.discovery import discover_kernels
from rtp_ref.kernels.protocol import KernelEntry, declared_limit, device_to_run
from rtp_ref.kv.golden_file import CacheComparison, GoldenFile
from rtp_ref.kv.golden_read import call_values, fresh_caches, read_golden
from rtp_ref.ops import OPS, claimed_variants, op_name


def _device_for(entry: KernelEntry) -> torch.device:
    """The device the kernel runs on here: a GPU torch sees when it claims one, else the CPU."""
    device = device_to_run(entry.kernel.devices)
    if device is None:
        raise RtpRefError(
            f"kernel {entry.kernel.name!r} runs on {', '.join(entry.kernel.devices)}, and torch sees no such "
            "device here; valid: a kernel that runs on cpu, or a machine with its GPU"
        )
    return torch.device(device)


def kernel_for(golden: GoldenFile, name: str) -> KernelEntry:
    """The kernel ``--kernel name`` names, when it is a kernel of the file's op; RtpRefError otherwise (an unknown
    name, a kernel that cannot run here, a kernel of another op: that one names the kernels of the file's op)."""
    entry = discover_kernels([name], ops=tuple(OPS))[name]
    op = op_name(entry.kernel)
    if op != golden.op:
        valid = discover_kernels(ops=(golden.op,))
        raise RtpRefError(f"--kernel {name!r}: a kernel of {op}, but {golden.where} holds a call of {golden.op}; "
                          f"valid: a kernel of {golden.op} ({', '.join(valid) or 'none found here'})")
    return entry


@dataclass(frozen=True)
class KernelRun:
    """One kernel's call on a golden file: where it ran, what it raised, how its caches compare."""

    name: str
    origin: str
    device: str
    #: the kernel's exception as ``Type: message``, None when it returned normally
    error: str | None
    comparison: CacheComparison

    @property
    def ok(self) -> bool:
        """True when the kernel returned normally and wrote exactly the expected caches."""
        return self.error is None and self.comparison.matches


def run_kernel(golden: GoldenFile, entry: KernelEntry) -> KernelRun:
    """Run ``entry``'s kernel (one of the file's op) on the file's inputs over copies of its initial caches and
    compare.

    The kernel is bound (when it can be) to the contract stored in the file: its fp8 format, conversion mode and
    layout flags, and called as the op's signature says (rtp_ref.ops). An exception from the kernel is its failure
    on valid inputs and is returned in ``error`` (the caches are compared as the kernel left them). A kernel that
    does not claim the file's variant, declares it does not write its layout (``supports``), or cannot run here,
    raises RtpRefError.
    """
    kernel = entry.kernel
    claims = claimed_variants(kernel)
    if golden.variant not in claims:
        raise RtpRefError(
            f"--kernel {kernel.name!r} does not claim layout {golden.variant!r} of {golden.where}; valid: a kernel "
            f"whose {OPS[golden.op].claims} lists it ({kernel.name} claims {', '.join(claims)})"
        )
    limit = declared_limit(kernel, golden.layout)
    if limit is not None:
        raise RtpRefError(f"--kernel {kernel.name!r} declares it does not write the layout of {golden.where}: "
                          f"{limit}; valid: a kernel that writes it")
    bind = getattr(kernel, "bind", None)
    if bind is not None:
        c = golden.contract
        kernel = bind(WriteContract(c.element_format, c.conversion_mode, c.flags, golden.metadata["platform"]))
    device = _device_for(entry)
    caches = fresh_caches(golden, device)
    values = call_values(golden, caches, device)
    error = None
    try:
        kernel(*(values[name] for name in kernel_arguments(golden.op)))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    # The kernel is the unit under test: whatever it raises is reported as its failure (exit 1),
    # never as a traceback of rtp-ref.
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    return KernelRun(entry.kernel.name, entry.origin, str(device), error, compare_cache(golden, caches))


def _comparison_json(c: CacheComparison) -> dict[str, Any]:
    return {"matches": c.matches, "bytes": c.total_bytes, "mismatched_bytes": c.mismatched_bytes,
            "first_mismatches": [asdict(m) for m in c.first]}


def _print_mismatches(c: CacheComparison, writer: str) -> None:
    for m in c.first:
        print(f"  {m.describe(writer)}")
    if c.unlisted_bytes:
        print(f"  ... and {c.unlisted_bytes} more byte(s)")


def _print_text(golden: GoldenFile, reference: CacheComparison, run: KernelRun | None) -> None:
    meta = golden.metadata
    caches = " and ".join(f"{name}_expected" for name in golden.caches)
    are = "are" if len(golden.caches) > 1 else "is"
    print(f"{golden.path}: {golden.summary}; written by rtp-ref {meta['rtp_ref_version']}")
    if reference.matches:
        print(f"reference: {caches} {are} what the reference writer of rtp-ref {__version__} writes "
              f"({reference.total_bytes} bytes)")
    else:
        print(f"reference: MISMATCH: {reference.mismatched_bytes} of {reference.total_bytes} bytes of "
              f"{caches} differ from what the reference writer of rtp-ref {__version__} writes from "
              f"the stored inputs (file written by rtp-ref {meta['rtp_ref_version']}): the file is damaged, "
              "or the reference changed between the two versions")
        _print_mismatches(reference, "the reference")
    if run is None:
        return
    name = f"kernel {run.name} on {run.device}"
    if run.error is not None:
        print(f"{name}: RAISED {run.error}")
    if run.comparison.matches:
        print(f"{name}: the cache matches {caches} ({run.comparison.total_bytes} bytes)")
    else:
        print(f"{name}: MISMATCH: {run.comparison.mismatched_bytes} of {run.comparison.total_bytes} bytes "
              f"differ from {caches}")
        _print_mismatches(run.comparison, "the kernel")


def _golden_check(args: argparse.Namespace) -> int:
    golden = read_golden(args.file)
    entry = kernel_for(golden, args.kernel) if args.kernel else None
    reference = compare_cache(golden, reference_cache(golden))
    run = run_kernel(golden, entry) if entry is not None else None
    ok = reference.matches and (run is None or run.ok)
    if args.json:
        kernel = None if run is None else {
            "name": run.name, "origin": run.origin, "device": run.device, "error": run.error,
            **_comparison_json(run.comparison),
        }
        print_json({"file": golden.path, "op": golden.op, "ok": ok, "rtp_ref_version": __version__,
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
        description="Load a golden file written by `rtp-ref golden` (any --family: the MLA, MHA paged or indexer "
        "write), check every key, dtype, shape and metadata value, re-run the op's reference on its inputs and compare "
        "with its expected caches byte for byte (a mismatch: the file is damaged, or the reference changed since the "
        "version that wrote it). With --kernel, run that kernel of the file's op (bound to the file's contract) on "
        "the inputs over a copy of the initial caches and compare too. Exits 0 when everything matches, 1 on a "
        "mismatch or a kernel error, 2 when the file or the arguments are bad. Example: rtp-ref golden-check "
        "ds_mla.safetensors --kernel torch-eager (a Triton kernel needs a GPU, or TRITON_INTERPRET=1 on a CPU)",
    )
    parser.add_argument("file", metavar="FILE", help="the golden .safetensors file")
    parser.add_argument("--kernel", metavar="NAME",
                        help="also run this kernel of the file's op (a built-in, an rtp_ref.kernels entry point or one "
                        "named by $RTP_REF_KERNELS, as `rtp-ref certify --kernel` takes; `rtp-ref kernels --op OP` "
                        "lists them) and compare its caches")
    add_json_flag(parser)
    parser.set_defaults(func=_golden_check)

"""The child process ``rtp-ref memcheck`` runs under the sanitizer: one synchronised call per case.

    python -m rtp_ref.memcheck.driver --kernel NAME --platform P --device cuda KEY [KEY ...]

For each ``layout/case-id`` key, in order, it prints the case marker, builds the case's inputs on the
device (the suite's own ``build_case``), calls the kernel once, synchronises, and prints the end
marker with what the kernel raised. Because every call is synchronised before the end marker, the
sanitizer's reports for a call come out after that call's case marker and before the next one.
A kernel that raises is not a finding here (memcheck is about memory errors; the conformance suite
grades correctness). A call that leaves the CUDA context unusable ends the driver after its markers:
no later case could run in it, so the parent starts a new driver for the rest.

``--device cpu`` runs the same loop on the CPU. It checks no memory at all and exists so that the
parent's parsing and restart loop can be tested on machines without a GPU.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import torch

from rtp_ref.cases.cases import build_case
from rtp_ref.certify.device_errors import pending_device_error
from rtp_ref.contract import WriteContract
from rtp_ref.kernels.discovery import discover_kernels
from rtp_ref.kernels.protocol import KVCacheKernel
from rtp_ref.memcheck.markers import case_line, device_lost_line, end_line
from rtp_ref.memcheck.plan import layout_cases, split_key
from rtp_ref.platform import load_platform

#: the driver's exit status after a call left the CUDA context unusable
DEVICE_LOST_EXIT = 3


def bound_kernel(kernel: KVCacheKernel, contract: WriteContract) -> KVCacheKernel:
    """``kernel`` bound to ``contract`` when it has ``bind``; a kernel without it runs as it is."""
    bind = getattr(kernel, "bind", None)
    if bind is None:
        return kernel
    bound: KVCacheKernel = bind(contract)
    return bound


def call_case(kernel: KVCacheKernel, contract: WriteContract, key: str, device: torch.device) -> BaseException | None:
    """Build case ``key``'s inputs on ``device``, call ``kernel`` once and synchronise; returns what it raised,
    or the device error it left (``DeviceError``)."""
    layout_name, case = split_key(key)
    spec, dims = layout_cases(layout_name)[case]
    inputs = build_case(spec, contract.layout(layout_name, *dims), device, padding_slot=contract.flags.padding_slot)
    try:
        kernel(inputs.kv_c, inputs.k_pe, inputs.kv_cache, inputs.call_slots, layout_name, inputs.scale)
    # The kernel's exception is recorded, not a reason to stop: the next case still runs.
    except Exception as exc:
        return exc
    # a launch error left pending (an empty grid) belongs to this case, not to the next one's first launch
    pending = pending_device_error(device.type)
    return DeviceError(pending) if pending is not None else None


class DeviceError(RuntimeError):
    """A device error the call left pending or raised asynchronously (reported like an exception it raised)."""


def device_lost(device: torch.device) -> bool:
    """Whether the CUDA context is unusable (a sticky error): a tiny computation on it fails."""
    if device.type != "cuda":
        return False
    try:
        torch.cuda.synchronize(device)
        torch.ones(1, device=device).add_(1).item()
    except Exception:  # any error here means the context is gone
        return True
    return False


def _emit(line: str) -> None:
    # Flushed at once: the parent attributes sanitizer reports by where they fall between these lines.
    print(line, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the cases named on the command line; 0 after the last, ``DEVICE_LOST_EXIT`` after a lost context."""
    parser = argparse.ArgumentParser(prog="python -m rtp_ref.memcheck.driver")
    parser.add_argument("--kernel", required=True)
    parser.add_argument("--platform", required=True, help="a platform name or .toml path")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("keys", nargs="+", metavar="LAYOUT/CASE")
    args = parser.parse_args(argv)
    contract = WriteContract.for_platform(load_platform(args.platform))
    kernel = bound_kernel(discover_kernels([args.kernel])[args.kernel].kernel, contract)
    device = torch.device(args.device)
    for key in args.keys:
        _emit(case_line(key))
        error = call_case(kernel, contract, key, device)
        _emit(end_line(key, error))
        if error is not None and device_lost(device):
            _emit(device_lost_line(key))
            return DEVICE_LOST_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())

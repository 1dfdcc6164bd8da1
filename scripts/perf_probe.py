"""Where the time of a cache write goes (GPU only; a diagnostic, not a test).

``python3 scripts/perf_probe.py [--sequential] [--scatter]`` times the triton and cuda kernels at 2M
tokens, each layout, with the bench's random slots; ``--sequential`` also with sequential slots (same
bytes, written in order), ``--scatter`` also a plain scatter copy of each layout's entry size (``auto``
with a rank that gives the same row bytes). If a
write is slower with random slots than with sequential ones by more than its extra bytes explain, the
scatter itself (DRAM pages opened per token) bounds it, not the kernel's arithmetic.
``--one LAYOUT KERNEL`` runs one write (random slots) once, for ``ncu``.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from rtp_ref.bench.measure import copy_roof, minimum_bytes, time_call
from rtp_ref.kernels.contract import PlannedKernel, WriteContract
from rtp_ref.kernels.cuda_mla import CudaMlaKernel
from rtp_ref.kernels.triton_mla import TritonMlaKernel
from rtp_ref.kv.layouts import MlaLayout, default_dims
from rtp_ref.platform import load_platform

TOKENS = 2 * 1024 * 1024
BLOCK = 64
LAYOUTS = ("auto", "fp8", "fp8_ds_mla", "fp8_model1_mla")


def inputs(contract: WriteContract, layout_name: str, dims: tuple[int, int],
           sequential: bool) -> tuple[MlaLayout, tuple[Any, ...]]:
    layout = contract.layout(layout_name, *dims)
    blocks = 2 * TOKENS // BLOCK
    kv_c = torch.randn(TOKENS, dims[0], device="cuda", dtype=torch.bfloat16)
    k_pe = torch.randn(TOKENS, dims[1], device="cuda", dtype=torch.bfloat16)
    cache = torch.zeros(layout.cache_shape(blocks, BLOCK), dtype=layout.cache_dtype(torch.bfloat16), device="cuda")
    if sequential:
        slots = torch.arange(TOKENS, device="cuda")
    else:
        slots = torch.randperm(blocks * BLOCK, device="cuda")[:TOKENS]
    return layout, (kv_c, k_pe, cache, slots, layout_name, torch.tensor([0.05], device="cuda"))


def timed(kernel: PlannedKernel, args: tuple[Any, ...], roof: float, layout: MlaLayout) -> str:
    """Validate once, then time the unchecked write; '<ms> ms <pct>% of roof'."""
    kernel(*args)
    t = time_call(lambda: kernel.write_unchecked(*args), torch.device("cuda")).seconds
    nbytes = minimum_bytes(layout, TOKENS, torch.bfloat16)
    return f"{t * 1e3:7.3f} ms {100 * nbytes / t / roof:5.1f}% of roof"


def main() -> None:
    contract = WriteContract.for_platform(load_platform("cuda-sm90"))
    kernels: dict[str, PlannedKernel] = {"triton": TritonMlaKernel(contract), "cuda": CudaMlaKernel(contract)}
    if sys.argv[1:2] == ["--one"]:
        layout_name, kernel_name = sys.argv[2], sys.argv[3]
        _, args = inputs(contract, layout_name, default_dims(layout_name), sequential=False)
        kernels[kernel_name](*args)
        torch.cuda.synchronize()
        return
    roof = copy_roof(torch.device("cuda"), 4 << 30)
    print(f"copy roof {roof / 1e12:.3f} TB/s; {TOKENS} tokens")
    for layout_name in LAYOUTS:
        dims = default_dims(layout_name)
        entry = contract.layout(layout_name, *dims).bytes_per_token
        for name, kernel in kernels.items():
            for sequential in (False, True) if "--sequential" in sys.argv else (False,):
                layout, args = inputs(contract, layout_name, dims, sequential)
                print(f"{layout_name:15s} {name:7s} {'sequential' if sequential else 'random    '} "
                      f"{timed(kernel, args, roof, layout)}", flush=True)
        if "--scatter" not in sys.argv:
            continue
        # the same entry bytes as a pure scatter copy: auto rows of `entry` bytes (rank + 64 rope values)
        copy_dims = ((entry + 1) // 2 - 64, 64)
        for sequential in (False, True):
            layout, args = inputs(contract, "auto", copy_dims, sequential)
            print(f"{layout_name:15s} scatter copy of {layout.bytes_per_token} B rows "
                  f"{'sequential' if sequential else 'random    '} {timed(kernels['triton'], args, roof, layout)}",
                  flush=True)


if __name__ == "__main__":
    main()

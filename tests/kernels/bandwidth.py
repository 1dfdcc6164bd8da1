"""Bandwidth of the triton and cuda kernels at a serving-size write (GPU only; a tuning tool, not a test).

``python -m tests.kernels.bandwidth [TOKENS] [--sweep] [--sequential]`` prints, per kernel and layout,
the time of one write and its share of the device copy roof, on ``rtp-ref bench``'s inputs and
measure (rtp_ref.bench): random slots over a cache twice as large, median of back-to-back calls
of the kernels' default call path (no device sync). torch-eager is left out (``rtp-ref bench``
times it). ``--sweep`` adds the triton kernel over ``tokens_per_program`` x ``num_warps``;
``--sequential`` adds each write with slots in order (same bytes: what the scatter itself costs).
``--one LAYOUT KERNEL`` makes one write and exits, for ``ncu``.
"""

from __future__ import annotations

import sys

import torch

from rtp_ref.bench.measure import copy_roof, time_call
from rtp_ref.bench.workloads import workload
from rtp_ref.kernels.cuda_mla import CudaMlaKernel
from rtp_ref.kernels.triton_mla import TritonMlaKernel
from rtp_ref.kernels.write_plan import PlannedKernel
from rtp_ref.ops import MLA_OP
from tests.kernels.cases import contract

LAYOUTS = ("auto", "fp8", "fp8_ds_mla", "fp8_model1_mla")
SWEEP = [(t, w) for t in (2, 4, 8) for w in (2, 4)]
CUDA = torch.device("cuda")


def main(tokens: int, sweep: bool, sequential: bool) -> None:
    c = contract("cuda-sm90")
    roof = copy_roof(CUDA, 4 << 30)
    print(f"device copy: {roof / 1e12:.2f} TB/s; {tokens} tokens, block 64, bf16 inputs, random slots")
    kernels: list[tuple[str, PlannedKernel]] = [("triton", TritonMlaKernel(c)), ("cuda", CudaMlaKernel(c))]
    if sweep:
        kernels += [(f"triton t{t} w{w}", TritonMlaKernel(c, tokens_per_program=t, num_warps=w)) for t, w in SWEEP]
    for layout_name in LAYOUTS:
        w = workload(MLA_OP, layout_name, tokens, c, CUDA)
        random_slots = w.slots.clone()
        orders = [("", random_slots)] + ([(" sequential", torch.arange(tokens, device=CUDA))] if sequential else [])
        for name, kernel in kernels:
            for order, slot_order in orders:
                w.slots.copy_(slot_order)
                seconds = time_call(lambda k=kernel, w=w: w.call(k), CUDA).seconds
                print(f"  {layout_name:16s} {name + order:27s} {seconds * 1e3:8.3f} ms  "
                      f"{w.nbytes / seconds / 1e12:5.2f} TB/s  {100 * w.nbytes / seconds / roof:5.1f}% of copy",
                      flush=True)


def one_write(layout_name: str, kernel_name: str, tokens: int) -> None:
    """One write of the bench's inputs by one kernel, nothing else on the GPU (for ncu's counters)."""
    c = contract("cuda-sm90")
    kernel = {"triton": TritonMlaKernel, "cuda": CudaMlaKernel}[kernel_name](c)
    workload(MLA_OP, layout_name, tokens, c, CUDA).call(kernel)
    torch.cuda.synchronize()


if __name__ == "__main__":
    args = sys.argv[1:]
    numbers = [a for a in args if a.isdigit()]
    count = int(numbers[0]) if numbers else 2 * 1024 * 1024
    if "--one" in args:
        at = args.index("--one")
        one_write(args[at + 1], args[at + 2], count)
    else:
        main(count, "--sweep" in args, "--sequential" in args)

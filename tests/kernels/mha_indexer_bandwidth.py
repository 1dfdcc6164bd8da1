"""Bandwidth of the MHA and indexer kernels at a serving-size write (GPU only; a tuning tool, not a test).

``python -m tests.kernels.mha_indexer_bandwidth [TOKENS] [--sweep] [--once] [--kernel NAME ...]`` prints, per kernel
and variant, the time of one write and its share of the device copy roof, on ``rtp-ref bench``'s inputs and
measure (rtp_ref.bench). Kernels: the built-in triton and cuda ones of ``reshape_and_cache_flash`` and
``indexer_k_quant_and_cache`` (names as ``rtp-ref bench --kernel``: ``triton-mha``, ``cuda-mha``,
``triton-indexer``, ``cuda-indexer``). ``--sweep`` adds the triton indexer over its values a program x warps, the
triton MHA kernel over its tokens a program x warps and the cuda kernels over their passes a warp. ``--once`` makes
two calls per variant instead of timing (for a profiler: ncu then sees a compiled kernel's second launch).
"""

from __future__ import annotations

import sys

import torch

from rtp_ref.bench.measure import copy_roof, time_call
from rtp_ref.bench.workloads import workload
from rtp_ref.kernels import cuda_mha_indexer, triton_indexer, triton_mha_paged
from rtp_ref.kernels.mha_indexer_builtin import mha_indexer_kernels
from rtp_ref.ops import INDEXER_OP, MHA_OP
from tests.kernels.cases import contract

VARIANTS = {MHA_OP: ("auto", "fp8", "fp8_e5m2"), INDEXER_OP: ("none", "ue8m0")}
SUFFIX = {MHA_OP: "-mha", INDEXER_OP: "-indexer"}
SWEEP = [(values, warps) for values in (1024, 2048, 4096, 8192) for warps in (2, 4, 8)]
MHA_SWEEP = [(tokens, warps) for tokens in (1, 2, 4) for warps in (2, 4, 8)]
ROWS = (1, 2)
CUDA = torch.device("cuda")


def _call_twice(name: str, kernel: object, op: str, tokens: int) -> None:
    c = contract("cuda-sm90")
    for variant in VARIANTS[op]:
        w = workload(op, variant, tokens, c, CUDA)
        w.call(kernel)
        w.call(kernel)
        torch.cuda.synchronize()
        print(f"  {variant:10s} {name:28s} called twice", flush=True)


def _time(name: str, kernel: object, op: str, tokens: int, roof: float) -> None:
    c = contract("cuda-sm90")
    for variant in VARIANTS[op]:
        w = workload(op, variant, tokens, c, CUDA)
        seconds = time_call(lambda w=w: w.call(kernel), CUDA).seconds
        print(f"  {variant:10s} {name:28s} {seconds * 1e3:8.3f} ms  {w.nbytes / seconds / 1e12:5.2f} TB/s  "
              f"{100 * w.nbytes / seconds / roof:5.1f}% of copy", flush=True)


def main(tokens: int, names: list[str], sweep: bool, once: bool) -> None:
    c = contract("cuda-sm90")
    chosen = [k for k in mha_indexer_kernels() if k.impl in ("triton", "cuda")
              and (not names or f"{k.impl}{SUFFIX[k.op]}" in names)]
    if once:
        for kernel in chosen:
            _call_twice(f"{kernel.impl}{SUFFIX[kernel.op]}", kernel.bind(c), kernel.op, tokens)
        return
    roof = copy_roof(CUDA, 4 << 30)
    print(f"device copy: {roof / 1e12:.2f} TB/s; {tokens} tokens, block 64, bf16 inputs, random slots")
    for kernel in chosen:
        _time(f"{kernel.impl}{SUFFIX[kernel.op]}", kernel.bind(c), kernel.op, tokens, roof)
    if sweep:
        kernels = {(k.impl, k.op): k for k in mha_indexer_kernels()}
        for values, warps in SWEEP:
            triton_indexer.GPU_PROGRAM_VALUES, triton_indexer.GPU_NUM_WARPS = values, warps
            _time(f"triton-indexer v{values} w{warps}", kernels["triton", INDEXER_OP].bind(c), INDEXER_OP, tokens,
                  roof)
        for block_t, warps in MHA_SWEEP:
            triton_mha_paged.GPU_BLOCK_T, triton_mha_paged.GPU_NUM_WARPS = block_t, warps
            _time(f"triton-mha t{block_t} w{warps}", kernels["triton", MHA_OP].bind(c), MHA_OP, tokens, roof)
        for rows in ROWS:
            cuda_mha_indexer.MHA_TOKENS_PER_WARP = cuda_mha_indexer.INDEXER_ROWS_PER_WARP = rows
            for op in (MHA_OP, INDEXER_OP):
                _time(f"cuda{SUFFIX[op]} passes {rows}", kernels["cuda", op].bind(c), op, tokens, roof)


if __name__ == "__main__":
    args = sys.argv[1:]
    numbers = [a for a in args if a.isdigit()]
    chosen = [args[i + 1] for i, a in enumerate(args) if a == "--kernel"]
    main(int(numbers[0]) if numbers else 2 * 1024 * 1024, chosen, "--sweep" in args, "--once" in args)

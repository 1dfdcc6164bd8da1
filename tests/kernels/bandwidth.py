"""Effective bandwidth of the built-in kernels at a serving-size write (GPU only; not a test).

``python -m tests.kernels.bandwidth [tokens] [--sweep]`` prints, per kernel and layout, the time of
one write and its effective bandwidth (input bytes read + slots read + entry bytes written, over
time) next to the device's copy bandwidth (bytes read + written by a 4 GiB device-to-device copy).
Arguments are validated once through the kernel's ``__call__``, then timed through
``write_unchecked``, many calls back to back so that host overhead hides behind the GPU (torch-eager,
which has no unchecked entry point, is left out: its figures are in gpu-measurements.md).
``--sweep`` also times the triton kernel over ``tokens_per_program`` x ``num_warps``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import torch

from rtp_ref.kernels.builtin import available_builtin_kernels
from rtp_ref.kernels.triton_mla import TritonMlaKernel
from tests.kernels.cases import contract

LAYOUTS = ("auto", "fp8", "fp8_ds_mla", "fp8_model1_mla")
SWEEP = [(t, w) for t in (2, 4, 8, 16) for w in (4, 8)]


def _time(fn: Callable[[], object], repeats: int = 20) -> float:
    """Mean seconds per call of ``fn`` over ``repeats`` calls queued back to back, after a warm-up."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats


def copy_roof() -> float:
    """Bytes per second of a 4 GiB device-to-device copy, counting bytes read and written."""
    src = torch.empty(1 << 30, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / _time(lambda: dst.copy_(src))


def main(tokens: int, sweep: bool) -> None:
    roof = copy_roof()
    print(f"device copy: {roof / 1e12:.2f} TB/s; {tokens} tokens, block 64, bf16 inputs, random slots")
    c = contract("cuda-sm90")
    for layout in LAYOUTS:
        lay = c.layout(layout, 448 if layout == "fp8_model1_mla" else 512, 64)
        block = 64
        blocks = tokens // block
        kv_c = torch.randn(tokens, lay.kv_lora_rank, device="cuda", dtype=torch.bfloat16)
        k_pe = torch.randn(tokens, lay.rope_dim, device="cuda", dtype=torch.bfloat16)
        cache = torch.zeros(lay.cache_shape(blocks, block), dtype=lay.cache_dtype(torch.bfloat16), device="cuda")
        slots = torch.randperm(blocks * block, device="cuda")[:tokens]
        scale = torch.tensor([0.5], device="cuda")
        moved = (kv_c.numel() + k_pe.numel()) * 2 + slots.numel() * 8 + tokens * lay.bytes_per_token
        kernels: list[tuple[str, Any]] = [
            (k.name, getattr(k, "bind")(c))  # noqa: B009 - the protocol's optional method
            for k in available_builtin_kernels() if k.name != "torch-eager" and "cuda" in k.devices
        ]
        if sweep:
            kernels += [(f"triton t{t} w{w}", TritonMlaKernel(c, tokens_per_program=t, num_warps=w)) for t, w in SWEEP]
        for name, bound in kernels:
            bound(kv_c[:64], k_pe[:64], cache, slots[:64], layout, scale)  # validates the arguments once
            seconds = _time(functools.partial(bound.write_unchecked, kv_c, k_pe, cache, slots, layout, scale))
            print(f"  {layout:16s} {name:16s} {seconds * 1e3:8.3f} ms  {moved / seconds / 1e12:5.2f} TB/s  "
                  f"{100 * moved / seconds / roof:5.1f}% of copy", flush=True)


if __name__ == "__main__":
    numbers = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(int(numbers[0]) if numbers else 2 * 1024 * 1024, "--sweep" in sys.argv)

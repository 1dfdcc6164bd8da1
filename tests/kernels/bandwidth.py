"""Effective bandwidth of the built-in kernels at a serving-size write (GPU only; not a test).

``python -m tests.kernels.bandwidth [tokens]`` prints, per kernel and layout, the time of one write
and its effective bandwidth (input bytes read + slots read + entry bytes written, over time) next
to the device's copy bandwidth (bytes read + written by a 4 GiB device-to-device copy). Arguments
are validated once through the kernel's ``__call__``, then timed through ``write_unchecked``
(torch-eager, which has none, is left out: its measured figures are in gpu-measurements.md).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

import torch

from rtp_ref.kernels.builtin import available_builtin_kernels
from tests.kernels.cases import contract

LAYOUTS = ("auto", "fp8", "fp8_ds_mla", "fp8_model1_mla")


def _time(fn: Callable[[], object], repeats: int = 10) -> float:
    """Median seconds of ``fn`` over ``repeats`` runs on the current stream, after one warm-up."""
    fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return sorted(times)[len(times) // 2]


def copy_roof() -> float:
    """Bytes per second of a 4 GiB device-to-device copy, counting bytes read and written."""
    src = torch.empty(1 << 30, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / _time(lambda: dst.copy_(src))


def main(tokens: int) -> None:
    roof = copy_roof()
    print(f"device copy: {roof / 1e12:.2f} TB/s; {tokens} tokens, block 64, bf16 inputs")
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
        for kernel in available_builtin_kernels():
            # torch-eager has no unchecked entry point: its host-side argument checks would dominate.
            if kernel.name == "torch-eager" or "cuda" not in kernel.devices:
                continue
            bound = getattr(kernel, "bind")(c)  # noqa: B009 - the protocol's optional method
            bound(kv_c[:64], k_pe[:64], cache, slots[:64], layout, scale)  # validates the arguments once
            run = functools.partial(bound.write_unchecked, kv_c, k_pe, cache, slots, layout, scale)
            seconds = _time(run)
            print(f"  {layout:16s} {kernel.name:12s} {seconds * 1e3:8.3f} ms  {moved / seconds / 1e12:5.2f} TB/s  "
                  f"{100 * moved / seconds / roof:5.1f}% of copy")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2 * 1024 * 1024)

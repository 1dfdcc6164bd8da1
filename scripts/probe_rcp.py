"""Device probe: is PTX ``rcp.approx.ftz.f32`` correctly rounded where NVFP4 writers use it?

Counts, on this GPU, the float32 inputs where ``rcp.approx.ftz.f32`` differs from ``1/x`` rounded to nearest
even (``div.rn``): every positive normal float32 (exhaustive), the 126 positive finite E4M3 values, the E4M3
values times a few decode scales, and 6.0 (``amax * rcp(6)``). Prints one line per set.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rcp_pair(x_ptr, approx_ptr, exact_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    approx = tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=tl.float32,
                                       is_pure=True, pack=1)
    exact = tl.math.div_rn(tl.full(x.shape, 1.0, tl.float32), x)
    tl.store(approx_ptr + offs, approx, mask=mask)
    tl.store(exact_ptr + offs, exact, mask=mask)


def mismatches(x: torch.Tensor) -> tuple[int, list[tuple[float, float, float]]]:
    approx, exact = torch.empty_like(x), torch.empty_like(x)
    n = x.numel()
    _rcp_pair[(triton.cdiv(n, 1024),)](x, approx, exact, n, BLOCK=1024)
    bad = (approx.view(torch.int32) != exact.view(torch.int32)).nonzero().flatten()
    examples = [(x[i].item(), approx[i].item(), exact[i].item()) for i in bad[:3].tolist()]
    return bad.numel(), examples


def main() -> None:
    dev = torch.device("cuda")
    e4m3 = torch.arange(1, 127, dtype=torch.uint8, device=dev).view(torch.float8_e4m3fn).float()
    sets = {"6.0": torch.tensor([6.0], device=dev), "e4m3 values": e4m3}
    for k_scale in (1.0, 0.5, 0.1, 2.0 / 3.0, 1 / 448, 3.0):
        g = torch.tensor(1.0, device=dev) / torch.tensor(k_scale, device=dev)
        sets[f"e4m3 * (1/g), k_scale={k_scale}"] = e4m3 * (torch.tensor(1.0, device=dev) / g)
    total, chunk = 0, 1 << 28
    first: list[tuple[float, float, float]] = []
    # every positive normal float32: bit patterns 0x00800000 .. 0x7f7fffff
    lo, hi = 0x00800000, 0x7F800000
    for start in range(lo, hi, chunk):
        bits = torch.arange(start, min(start + chunk, hi), dtype=torch.int64, device=dev).to(torch.int32)
        count, ex = mismatches(bits.view(torch.float32))
        total += count
        first = first or ex
    print(f"rcp.approx.ftz.f32 vs div.rn: all positive normal float32: {total} of {hi - lo} differ; e.g. {first}")
    for name, x in sets.items():
        count, ex = mismatches(x.contiguous())
        print(f"rcp.approx.ftz.f32 vs div.rn: {name}: {count} of {x.numel()} differ; e.g. {ex}")
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)


if __name__ == "__main__":
    main()

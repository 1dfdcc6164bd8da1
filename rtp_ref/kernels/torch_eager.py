"""The ``torch-eager`` built-in kernel: the cache write as a user first writes it, in plain torch ops.

Tile amax, divide, cast with torch's own ``.to(torch.float8_*)``, concatenate, scatter into the cache.
It is deliberately naive and is the baseline the suite measures deviations against:

* no clamp before the cast: torch's cast saturates on some builds (CPU, torch 2.13: 1000 -> 448)
  and not on others (CUDA: 1000 -> NaN), so the same code meets the contract on one device and
  breaks it on another; the platform tables list the CUDA behaviour as a known deviation;
* the power-of-two scale is ``exp2(ceil(log2(s)))`` in float32, which can round ``log2`` of a value
  just above a power of two down to the integer and so pick a scale one binade too small.

``conversion_path`` is ``"torch"``: neither the hardware nor the rtp-ref software conversion.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

import torch

from rtp_ref.contract import WriteContract
from rtp_ref.kernels.call_signature import Launch
from rtp_ref.kernels.write_plan import PlannedKernel, ValueMode, WritePlan
from rtp_ref.platform import MLA_LAYOUT_NAMES


def _quantize(x: torch.Tensor, scale: torch.Tensor, fp8: torch.dtype) -> torch.Tensor:
    return (x.float() / scale).to(fp8).view(torch.uint8)


def _tiled(x: torch.Tensor, plan: WritePlan, fp8: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp8 bytes [n, R], float32 scales [n, tiles]) of the latent rows ``x``."""
    n, r = x.shape
    padded = torch.nn.functional.pad(x.float(), (0, plan.n_tiles * plan.tile - r))
    tiles = padded.view(n, plan.n_tiles, plan.tile)
    amax = tiles.abs().amax(dim=-1)
    s = torch.clamp(amax / plan.divisor, min=plan.floor)
    if plan.pow2_scale:
        s = torch.exp2(torch.ceil(torch.log2(s)))
    codes = (tiles / s.unsqueeze(-1)).to(fp8).view(torch.uint8).reshape(n, plan.n_tiles * plan.tile)[:, :r]
    return codes, s


class TorchEagerKernel(PlannedKernel):
    """``concat_and_cache_mla`` in eager torch ops, on CPU and CUDA (module doc)."""

    name = "torch-eager"
    kv_cache_dtypes: Collection[str] = MLA_LAYOUT_NAMES
    devices: Collection[str] = ("cpu", "cuda")
    conversion_path: Literal["torch"] = "torch"

    def __init__(self, contract: WriteContract | None = None) -> None:
        # its boolean masking of padding slots reads the slots on the host: it validates there as well
        self._init_call_path("host")
        self.contract = contract

    def bind(self, contract: WriteContract) -> TorchEagerKernel:
        """This kernel following ``contract`` (its fp8 dtype, scale rule, divisor and floor)."""
        return TorchEagerKernel(contract)

    def _prepare(self, plan: WritePlan, contract: WriteContract, kv_c: torch.Tensor, k_pe: torch.Tensor,
                 kv_cache: torch.Tensor, slot_mapping: torch.Tensor, scale: torch.Tensor,
                 flags: torch.Tensor) -> Launch:
        def launch(kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor,
                   scale: torch.Tensor) -> None:
            write_eager(plan, contract, kv_c, k_pe, kv_cache, slots, scale)
            self.launch_count += 1

        return launch


def write_eager(plan: WritePlan, contract: WriteContract, kv_c: torch.Tensor, k_pe: torch.Tensor,
                kv_cache: torch.Tensor, slot_mapping: torch.Tensor, scale: torch.Tensor) -> None:
    """torch-eager's write of validated arguments (no state: ``torch.compile`` takes it as it is)."""
    fp8 = getattr(torch, contract.element_format.torch_dtype_name)
    tokens = slot_mapping.shape[0]
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    nope, rope = kv_c[:tokens][keep], k_pe[:tokens][keep]

    pieces: list[tuple[int, torch.Tensor]] = []  # (byte offset in the token's data area, bytes [n, k])
    trailing: list[tuple[int, torch.Tensor]] = []  # (byte offset in the token's trailing group, ...)
    if plan.nope_mode is ValueMode.COPY16:
        pieces.append((plan.nope_offset, nope.contiguous().view(torch.uint8)))
    elif plan.nope_mode is ValueMode.PER_TENSOR:
        pieces.append((plan.nope_offset, _quantize(nope, scale, fp8)))
    else:
        codes, s = _tiled(nope, plan, fp8)
        pieces.append((plan.nope_offset, codes))
        if plan.scale_ue8m0:
            scale_bytes = (torch.log2(s) + 127).clamp(0, 255).to(torch.uint8)
        else:
            scale_bytes = s.contiguous().view(torch.uint8)
        (trailing if plan.scale_trailing else pieces).append((plan.scale_offset, scale_bytes))
    if plan.rope_mode is ValueMode.COPY16:
        pieces.append((plan.rope_offset, rope.contiguous().view(torch.uint8)))
    else:
        pieces.append((plan.rope_offset, _quantize(rope, scale, fp8)))

    # Each block as one row of bytes (its stride honoured), then an index_put per field.
    num_blocks, block_size = kv_cache.shape[0], kv_cache.shape[1]
    raw = kv_cache.view(torch.uint8)
    # A plain view where the cache is contiguous: under torch.compile an index_put into the as_strided
    # view did not reach the cache (tests/bench/test_bench.py's compiled-baseline test fails without it).
    if kv_cache.is_contiguous():
        blocks = raw.view(num_blocks, -1)
    else:
        stride = kv_cache.stride(0) * kv_cache.element_size()
        blocks = raw.as_strided((num_blocks, block_size * plan.layout.bytes_per_token), (stride, 1))
    block, offset = (slots // block_size).unsqueeze(1), (slots % block_size).unsqueeze(1)
    for start, data in pieces:
        cols = torch.arange(start, start + data.shape[1], device=kv_cache.device)
        blocks[block, offset * plan.data_bytes + cols] = data
    for start, data in trailing:
        cols = torch.arange(start, start + data.shape[1], device=kv_cache.device)
        blocks[block, block_size * plan.data_bytes + offset * plan.trailing_bytes + cols] = data

"""The built-in Triton writer of the NVFP4 MHA cache against the reference, byte for byte over whole canary-filled
caches: both cache orders, both V-scale orders, each payload and -0.0 convention, bf16 and fp16, strided inputs and a
K side that is one half of a ``[blocks, 2, H, T, F]`` tensor (vLLM's). On a machine without a GPU the writer runs in
Triton's interpreter (tox sets TRITON_INTERPRET=1), on a GPU compiled."""

from __future__ import annotations

import pytest
import torch

from rtp_ref.contract import WriteContract
from rtp_ref.kernels.mha_indexer_builtin import mha_indexer_kernels
from rtp_ref.kv.mha_paged import mha_layout, reference_reshape_and_cache_flash
from rtp_ref.platform import load_platform

triton = pytest.importorskip("triton")
from rtp_ref.kernels.triton_fp8 import interpreted  # noqa: E402 - needs triton

DEVICE = "cpu" if interpreted() else "cuda"
if DEVICE == "cuda" and not torch.cuda.is_available():
    pytest.skip("triton was imported without TRITON_INTERPRET and torch sees no GPU", allow_module_level=True)
CANARY = 0xA5
CONTRACT = WriteContract.for_platform(load_platform("cpu"))
#: each convention of the variant's layout flags, the cpu table's first
FLAGS = {"cpu": {}, "linear-v": {"nvfp4_v_scale_order": "linear"}, "ieee-div": {"nvfp4_value_quotient": "ieee_div"},
         "positive-zero": {"fp4_negative_zero": "positive"}}


def _caches(kind: str, blocks: int, T: int, H: int, width: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A K and a V cache side of ``kind`` (NHD, HND, or the two halves of one HND ``[blocks, 2, H, T, F]``), canary
    filled."""
    if kind == "kv-tensor":
        whole = torch.full((blocks, 2, H, T, width), CANARY, dtype=torch.uint8, device=device)
        return whole[:, 0].permute(0, 2, 1, 3), whole[:, 1].permute(0, 2, 1, 3)
    shape = (blocks, T, H, width) if kind == "NHD" else (blocks, H, T, width)
    sides = [torch.full(shape, CANARY, dtype=torch.uint8, device=device) for _ in range(2)]
    return (sides[0], sides[1]) if kind == "NHD" else (sides[0].permute(0, 2, 1, 3), sides[1].permute(0, 2, 1, 3))


@pytest.mark.parametrize("flags", FLAGS)
@pytest.mark.parametrize("kind", ["NHD", "HND", "kv-tensor"])
@pytest.mark.parametrize(("heads", "head_size", "block_size", "dtype"), [
    (1, 64, 16, torch.bfloat16), (3, 128, 8, torch.float16), (8, 256, 16, torch.bfloat16)])
def test_the_triton_writer_is_bit_exact(flags: str, kind: str, heads: int, head_size: int, block_size: int,
                                        dtype: torch.dtype) -> None:
    contract = CONTRACT.under(FLAGS[flags])
    layout = mha_layout(contract, "nvfp4", heads, head_size)
    kernel = next(k for k in mha_indexer_kernels() if k.name == "triton-mha").bind(contract)
    g = torch.Generator().manual_seed(heads * head_size)
    rows, blocks = 11, 3
    qkv = torch.randn(rows, 4 * heads * head_size, generator=g) * torch.exp2(
        torch.randint(-6, 7, (rows, 1), generator=g).float())
    qkv[0, :16] = torch.tensor([1.40625, 0.5859375, -0.5859375, -0.0] + [0.0] * 12)  # the fingerprint witness
    qkv[1, 16:32] = 0.0  # a zero block: scale 0x00, the values' signed zeros
    qkv = qkv.to(dtype).to(DEVICE)
    key = qkv[:, 2 * heads * head_size: 3 * heads * head_size].view(rows, heads, head_size)  # strided views
    value = qkv[:, 3 * heads * head_size:].view(rows, heads, head_size)
    slots = torch.tensor([0, -1, blocks * block_size - 1, 5, block_size + 2, -1, 2 * block_size, 7, 4, 1])
    k_scale, v_scale = torch.tensor([1.0]), torch.tensor([0.37])
    want = _caches(kind, blocks, block_size, heads, layout.row_width, "cpu")
    got = _caches(kind, blocks, block_size, heads, layout.row_width, DEVICE)
    reference_reshape_and_cache_flash(layout, key.cpu(), value.cpu(), *want, slots, k_scale, v_scale)
    kernel(key, value, *got, slots.to(DEVICE), "nvfp4", k_scale.to(DEVICE), v_scale.to(DEVICE))
    for name, w, k in zip(("key_cache", "value_cache"), want, got, strict=True):
        differ = int((w != k.cpu()).sum())
        assert differ == 0, f"{name}: {differ} bytes differ from the reference"
    assert int((want[0] != CANARY).sum()) > 0

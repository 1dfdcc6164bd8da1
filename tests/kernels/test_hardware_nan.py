"""The CUDA MHA kernel keeps its conversion instruction's NaN: on a GPU whose platform table states what the
instruction writes for a NaN (``[hardware] fp8_nan``, cuda-sm90: e5m2 0x7F), every NaN input, of either sign and
with any payload, is stored as that pattern. This holds the table's fact to the hardware; GPU only (nvcc)."""

from __future__ import annotations

import pytest
import torch

from rtp_ref.contract import WriteContract
from rtp_ref.kernels.mha_indexer_builtin import mha_indexer_kernels
from rtp_ref.kv.mha_paged import mha_layout
from rtp_ref.ops import MHA_OP
from rtp_ref.platform import Platform, gpu_platform

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="the cuda kernels need a GPU")

#: bf16 NaNs: quiet of both signs, a signalling one, full payloads of both signs
NAN_INPUTS = (0x7FC0, 0xFFC0, 0x7F81, 0x7FFF, 0xFFFF)


def _table() -> Platform:
    table = gpu_platform(0)
    if table is None or not table.hardware_nan:
        pytest.skip("this GPU's platform table states no NaN of its fp8 conversion")
    return table


def test_the_cuda_mha_kernel_stores_the_nan_its_instruction_writes() -> None:
    table = _table()
    variants = {"e5m2": "fp8_e5m2", table.element_format.name: "fp8"}
    (kernel,) = [k for k in mha_indexer_kernels() if k.impl == "cuda" and k.op == MHA_OP]
    bound = kernel.bind(WriteContract.for_platform(table))
    for fmt, want in table.hardware_nan.items():
        layout = mha_layout(table, variants[fmt], 1, 16)
        key = torch.ones(len(NAN_INPUTS), 1, 16, dtype=torch.bfloat16)
        key.view(torch.int16)[:, 0, 3] = torch.tensor(NAN_INPUTS, dtype=torch.int32).to(torch.int16)
        caches = [layout.new_cache(1, 16, "NHD", torch.bfloat16, "cuda") for _ in range(2)]
        one = torch.ones(1, device="cuda")
        slots = torch.arange(len(NAN_INPUTS), device="cuda")
        bound(key.cuda(), key.cuda(), *caches, slots, variants[fmt], one, one)
        stored = caches[0].view(torch.uint8)[0, : len(NAN_INPUTS), 0, 3].cpu().tolist()
        assert stored == [want] * len(NAN_INPUTS), f"{fmt}: stored {[hex(c) for c in stored]}, table says {want:#x}"

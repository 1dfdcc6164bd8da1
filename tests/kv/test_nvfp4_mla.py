"""FlashMLA's NVFP4 MLA record with fp8 rope, ``nvfp4_fp8_ds_mla`` (352 B/token; vllm-project/FlashMLA PR #18, vLLM PR
#51724): its conventions (amax / 6 by division, the 2^-9 floor, nearest-even e4m3 bumped one code up, the scales
stored 8 x 4 transposed, the rope as e4m3 with no scale), a witness for each, the Triton writer following the
reciprocal convention vLLM's writer uses, and certification with a mutant per convention failing by its check.

The record's byte map and expected bytes are stated by hand in tests/kv/oracle.py (from FlashMLA's ``config.h`` and
``tests/quant.py``) and walked byte by byte by tests/kv/test_kv_writer.py, as every layout's are.
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch

from rtp_ref.cli import main
from rtp_ref.contract import WriteContract
from rtp_ref.kernels.triton_fp8 import interpreted
from rtp_ref.kernels.triton_mla import TritonMlaKernel
from rtp_ref.kv.entries import decode_entries, encode_entries
from rtp_ref.kv.layouts import layout_for_platform
from rtp_ref.platform import load_platform
from tests.kv import oracle
from tests.kv.fp4_certify import certify_record_and_mutants
from tests.mutants.fp4_mutants import NVFP4_EXPECTED

NAME = "nvfp4_fp8_ds_mla"
CPU = load_platform("cpu")
#: a tile whose amax 0.17578125 gives the bumped scale 0.029296875 (e4m3 0x0F), and a value whose quotient by it is
#: exactly 1.25, an E2M1 tie (to even: 1.0, code 2); vLLM's writer multiplies by the float32 1 / sf, which lands
#: above the tie (1.5, code 3): the fingerprint of fp4_value_quotient=reciprocal_mul
TIE_TILE = (0.17578125, 0.03662109375)


def _tokens(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    spread = torch.exp2(torch.randint(-8, 9, (rows, 1), generator=g).float())
    kv_c = (torch.randn(rows, 512, generator=g) * spread).to(torch.bfloat16)
    k_pe = (torch.randn(rows, 64, generator=g) * spread).to(torch.bfloat16)
    kv_c[0, :16] = torch.tensor(TIE_TILE + (0.0,) * 14)
    return kv_c, k_pe


def test_the_bump_and_the_order_show_in_ordinary_data() -> None:
    """Each convention the record states decides bytes of ordinary tokens: FlashMLA's bump moves some scales off the
    nearest e4m3 (a writer without it is caught on random data), and the transposed order moves every scale but the
    first and last off its tile's byte."""
    kv_c, _ = _tokens(8, 1)
    x = kv_c.float().numpy().reshape(-1, 16)
    bumped = [oracle.nvfp4_tile(tile)[1] for tile in x]
    nearest = [np.array([max(np.abs(t).max() / np.float32(6.0), 2.0**-9)], np.float32).astype(
        ml_dtypes.float8_e4m3fn).view(np.uint8)[0] for t in x]
    assert sum(int(a) != int(b) for a, b in zip(bumped, nearest, strict=True)) > len(x) // 4
    moved = [s for s in range(32) if 8 * (s & 3) + (s >> 2) != s]
    assert len(moved) == 30


def test_the_tie_witness_is_a_tie() -> None:
    amax, x = TIE_TILE
    codes, scale = oracle.nvfp4_tile(np.array([amax, x] + [0.0] * 14, np.float32))
    sf = float(np.array([scale], np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)[0])
    assert (int(scale), sf, x / sf) == (0x0F, 0.029296875, 1.25) and int(codes[1]) == 2
    assert float(np.float32(x) * (np.float32(1.0) / np.float32(sf))) > 1.25


def test_the_rope_is_the_input_converted_and_decodes_back() -> None:
    """The rope bytes are ml_dtypes' e4m3 of the inputs themselves (saturating at 448), and the reference's decode
    gives the nope within half an E2M1 step of each tile's scale."""
    kv_c, k_pe = _tokens(3, 2)
    k_pe[1, :2] = torch.tensor([1000.0, -1000.0])
    layout = layout_for_platform(CPU, NAME)
    entries = encode_entries(layout, kv_c, k_pe, torch.tensor([1.0]))
    rope = np.clip(k_pe.float().numpy(), -448.0, 448.0).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    assert np.array_equal(entries[:, 256:320].numpy(), rope)
    nope, _ = decode_entries(layout, entries, torch.tensor([1.0]))
    stored = entries[:, 320:].numpy().view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    scales = np.stack([stored[:, 8 * (s & 3) + (s >> 2)] for s in range(32)], axis=1)
    step = np.repeat(scales, 16, axis=1) * np.where(np.abs(nope.numpy()) < 2 * np.repeat(scales, 16, axis=1), 0.5, 2.0)
    assert np.all(np.abs(nope.numpy() - kv_c.float().numpy()) <= step / 2 + 1e-30)


@pytest.mark.skipif(not interpreted(), reason="runs the Triton writer in its interpreter (tox sets TRITON_INTERPRET=1)")
@pytest.mark.parametrize("flags", [{}, {"fp4_value_quotient": "reciprocal_mul"}], ids=["flashmla", "vllm-writer"])
def test_the_triton_writer_follows_flashmla_and_vllms_quotient(flags: dict[str, object]) -> None:
    """FlashMLA's quantizer divides (x / sf), vLLM's writer multiplies by 1 / sf: bound to either, the Triton writer
    stores the reference's bytes under it, and the two differ on the tie witness."""
    contract = WriteContract.for_platform(CPU).under(flags)
    layout = contract.layout(NAME, 512, 64)
    kv_c, k_pe = _tokens(3, 4)
    expected = encode_entries(layout, kv_c, k_pe, torch.tensor([1.0]))
    if flags:
        default = encode_entries(layout_for_platform(CPU, NAME), kv_c, k_pe, torch.tensor([1.0]))
        assert int(expected[0, 0]) == 0x37 and int(default[0, 0]) == 0x27, (expected[0, 0], default[0, 0])
    cache = torch.full((1, 4, 352), 0xA5, dtype=torch.uint8)
    TritonMlaKernel().bind(contract)(kv_c, k_pe, cache, torch.tensor([0, 1, 2]), NAME, torch.tensor([1.0]))
    assert torch.equal(cache[0, :3], expected)


def test_certify_the_writers_and_fail_each_mutant(tmp_path: Path) -> None:
    """The reference, torch-eager and the Triton writer certify the record bit-exact on the CPU table (torch-eager
    with its declared deviation where torch's CPU cast does not saturate); each NVFP4 mutant fails by the check that
    names its convention."""
    certify_record_and_mutants(NAME, "tests.mutants.fp4_mutants:nvfp4_mutants", NVFP4_EXPECTED, tmp_path)


def test_layouts_lists_it_and_a_golden_file_round_trips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["layouts", "--platform", "cpu", "--json"]) == 0
    shown = {layout["name"]: layout for layout in json.loads(capsys.readouterr().out)["layouts"]}
    assert shown[NAME]["bytes_per_token"] == 352
    golden = tmp_path / f"{NAME}.safetensors"
    assert main(["golden", "--layout", NAME, "--platform", "cpu", "--out", str(golden)]) == 0
    for kernel in ("reference", "torch-eager"):
        assert main(["golden-check", str(golden), "--kernel", kernel]) == 0, capsys.readouterr()

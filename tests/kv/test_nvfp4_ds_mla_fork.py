"""local-inference-lab/vllm's 432-byte ``nvfp4_ds_mla`` record, ``nvfp4_ds_mla_bf16rope`` here (PR #82): E2M1 nope,
32 e4m3 scales in tile order with no floor, 16 bytes written as 0, the bf16 rope copied; a zero scale stores zeros.

Its byte map and expected bytes are stated by hand in tests/kv/oracle.py (``fork432_tile``, from the fork's
``cvt_warp_fp16_to_fp4`` with a global scale of 1, in numpy and ml_dtypes) and walked byte by byte by
tests/kv/test_kv_writer.py, as every layout's are. Here: the conventions that set it apart show in its bytes, and a
certify run passes the built-in writers and fails each mutant by its check.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from rtp_ref.kv.entries import encode_entries
from rtp_ref.kv.layouts import layout_for_platform
from rtp_ref.platform import load_platform
from tests.kv import oracle
from tests.kv.fp4_certify import certify_record_and_mutants
from tests.mutants.fp4_mutants import FORK432_EXPECTED, ZeroBytesNotWritten

NAME = oracle.FORK432
LAYOUT = layout_for_platform(load_platform("cpu"), NAME)


def test_a_zero_tile_and_a_tiny_tile_store_scale_zero_and_zeros_of_their_sign() -> None:
    """No floor: a tile of zeros, and one whose amax * (1/6) is below half of e4m3's smallest subnormal (2^-10),
    store scale 0x00 and each value as a zero of its sign (0x8 for a negative one); FlashMLA's record, floored at
    2^-9, would store 0x01 and nonzero codes for the tiny one."""
    kv_c = torch.zeros(1, 512, dtype=torch.bfloat16)
    kv_c[0, 16:32] = torch.tensor([-3e-4, 2e-4] * 8, dtype=torch.bfloat16)
    kv_c[0, 1] = -0.0
    k_pe = torch.randn(1, 64).to(torch.bfloat16)
    entry = encode_entries(LAYOUT, kv_c, k_pe, torch.tensor([1.0]))[0]
    assert entry[256:258].tolist() == [0, 0]  # the two tiles' scales
    assert entry[0:8].tolist() == [0x80] + [0] * 7  # codes 0x0, 0x8 (value 1 is -0.0): low nibble first
    assert entry[8:16].tolist() == [0x08] * 8  # -3e-4 then 2e-4: 0x8, 0x0
    assert entry[288:304].tolist() == [0] * 16
    assert torch.equal(entry[304:432], k_pe[0].contiguous().view(torch.uint8))


def test_certify_the_writers_and_fail_each_mutant(tmp_path: Path) -> None:
    """The reference, torch-eager and the Triton writer certify the record bit-exact on the cpu table, and the
    reference gather reads it; each mutant fails by the check that names its fault."""
    report = certify_record_and_mutants(NAME, "tests.mutants.fp4_mutants:fork432_mutants", FORK432_EXPECTED, tmp_path)
    unwritten = [c for c in report["cases"] if c.get("kernel") == ZeroBytesNotWritten.name and c.get("failed_checks")]
    assert "not written" in json.dumps(unwritten[0]["checks"]), unwritten[0]["checks"]

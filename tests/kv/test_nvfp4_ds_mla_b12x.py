"""local-inference-lab/b12x's 368-byte ``nvfp4_ds_mla`` record (KV_FP8_ROPE=1, PR #35), ``nvfp4_ds_mla_fp8rope`` here:
the 432-byte record's nope and scales, then its own rope rule: one fp32 scale ``amax * float32(1/448)`` over the 64
rope values, each stored ``e4m3(v * (1 / scale))``, zeros where the scale is 0. Two tile rules in one record: the
nope's is the record's, the rope scale field carries its own (rtp_ref.kv.records.FieldRecord ``tile_rule``).

Its byte map and expected bytes are stated by hand in tests/kv/oracle.py (``b12x_rope``, numpy and ml_dtypes) and
walked byte by byte by tests/kv/test_kv_writer.py, as every layout's are. Here: the rope rule shows in the bytes
where it differs from the divisions every other fp8 record uses, and a certify run passes the reference and
torch-eager, the compiled writers refuse the record, and each mutant fails by its check.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from rtp_ref.kv.entries import encode_entries
from rtp_ref.kv.layouts import layout_for_platform
from rtp_ref.platform import load_platform
from tests.kv import oracle
from tests.kv.fp4_certify import certify_record_and_mutants
from tests.mutants.fp4_mutants import B12X_EXPECTED

NAME = oracle.B12X368
LAYOUT = layout_for_platform(load_platform("cpu"), NAME)


def _amax_where_multiply_and_divide_differ() -> np.float32:
    """A bf16 amax whose ``amax * float32(1/448)`` is not ``amax / 448`` correctly rounded (found by search)."""
    for bits in range(0x3F80, 0x4100):
        amax = np.array([bits << 16], np.uint32).view(np.float32)[0]
        if np.float32(amax * oracle.RCP_448) != np.float32(np.float64(amax) / 448.0):
            return amax
    raise AssertionError("no bf16 amax in [1, 8) tells the multiply from the division")


def test_the_rope_scale_is_a_multiply_by_the_rounded_reciprocal_and_a_zero_rope_stores_zeros() -> None:
    amax = _amax_where_multiply_and_divide_differ()
    k_pe = torch.zeros(3, 64, dtype=torch.bfloat16)
    k_pe[0] = torch.linspace(-1.0, 1.0, 64).to(torch.bfloat16) * float(amax)
    k_pe[0, 5] = -0.0
    k_pe[2, 7] = -0.0  # an all-zero rope, one of its zeros negative: every code 0x00 all the same
    k_pe[1] = torch.randn(64).to(torch.bfloat16)
    kv_c = torch.randn(3, 512).to(torch.bfloat16)
    entries = encode_entries(LAYOUT, kv_c, k_pe, torch.tensor([1.0]))
    scales = entries[:, 288:292].contiguous().view(torch.float32).flatten()
    assert scales[0].item() == float(np.float32(amax * oracle.RCP_448)) != float(np.float32(amax / 448.0))
    assert scales[2].item() == 0.0 and entries[2, 304:368].tolist() == [0] * 64
    assert entries[0, 304 + 5].item() == 0x80  # a -0.0 beside nonzero values keeps its sign
    for row in range(3):
        codes, scale = oracle.b12x_rope(k_pe[row].float().numpy())
        assert entries[row, 304:368].tolist() == codes.tolist() and scales[row].item() == float(scale)
    assert entries[:, 292:304].eq(0).all()


def test_certify_the_writers_and_fail_each_mutant(tmp_path: Path) -> None:
    """The reference and torch-eager certify the record bit-exact on the cpu table and the reference gather reads
    it; the Triton writer, which divides, does not claim it and refuses it; each mutant fails by its check."""
    certify_record_and_mutants(NAME, "tests.mutants.fp4_mutants:b12x_mutants", B12X_EXPECTED, tmp_path,
                               builtins=("reference", "torch-eager", "reference-gather"), unclaimed=("triton",))

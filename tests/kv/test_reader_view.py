"""What a platform's reader sees (rtp_ref.kv.reader_view, ``rtp-ref read-check``): tile scales and fp8 codes taken
as each target's attention reader takes them, against expectations derived another way (math.frexp for e8m0
toward zero, ml_dtypes for bf16 and for the fp8 formats), and the command on golden files written under the
``amax_div`` and ``pow2_ceil`` scale rules."""

from __future__ import annotations

import math
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch

from rtp_ref.cli import main
from rtp_ref.contract import WriteContract
from rtp_ref.fp8.formats import E4M3FN
from rtp_ref.kv.cache import reference_write
from rtp_ref.kv.reader_view import reader_changes, scale_as_read
from rtp_ref.platform import load_platform

SCALES = [1e-4, 0.0123, 0.25, 3.0, 448.0 / 3, 2.0**-20, 1.5 * 2.0**-126]


def test_e8m0_toward_zero_keeps_the_power_of_two_at_or_below() -> None:
    got = scale_as_read(torch.tensor(SCALES), "e8m0_toward_zero").tolist()
    # frexp: s = m * 2^e with 0.5 <= m < 1, so the power of two at or below s is 2^(e - 1)
    assert got == [math.ldexp(1.0, math.frexp(s)[1] - 1) for s in SCALES]


def test_bf16_is_nearest_even() -> None:
    got = scale_as_read(torch.tensor(SCALES), "bf16").numpy()
    want = np.array(SCALES, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(got, want)


def _written(layout_name: str, platform: str, **flags: str) -> tuple[object, torch.Tensor, torch.Tensor]:
    contract = WriteContract.for_platform(load_platform(platform), flags)
    layout = contract.layout(layout_name, 512, 64)
    g = torch.Generator().manual_seed(5)
    kv_c = (torch.randn(6, 512, generator=g) * 3).to(torch.bfloat16)
    k_pe = torch.randn(6, 64, generator=g).to(torch.bfloat16)
    cache = torch.zeros(layout.cache_shape(2, 8), dtype=layout.cache_dtype(torch.bfloat16))
    slots = torch.tensor([0, 3, -1, 9, 15, 4])
    reference_write(layout, kv_c, k_pe, cache, slots, torch.tensor([0.05]))
    return layout, cache, slots


def test_amax_div_scales_change_under_sm100_and_none_under_pow2() -> None:
    reader = load_platform("cuda-sm100").reader
    assert reader is not None
    layout, cache, slots = _written("fp8_ds_mla", "cuda-sm100", ds_mla_scale_rule="amax_div")
    scales, values = reader_changes(layout, cache, slots, reader)
    entries = cache.view(torch.uint8).reshape(16, -1)[slots[slots >= 0]].numpy()
    stored = entries[:, 512:528].copy().view(np.float32)
    mantissa = np.frexp(stored)[0]
    assert scales.total == stored.size and scales.changed == int((mantissa != 0.5).sum()) > 0
    assert 1 < scales.largest_factor < 2 and values.changed == 0
    layout, cache, slots = _written("fp8_ds_mla", "cuda-sm100")
    assert [c.changed for c in reader_changes(layout, cache, slots, reader)] == [0, 0]


def test_fnuz_codes_read_as_ocp_change_by_exactly_2x_where_finite() -> None:
    layout, cache, slots = _written("fp8", "rocm-gfx942")
    reader = load_platform("rocm-gfx942").reader
    assert reader is not None
    (same,) = reader_changes(layout, cache, slots, reader)
    assert same.changed == 0
    ocp = type(reader)("an OCP reader", "fp32", E4M3FN, "test")
    (values,) = reader_changes(layout, cache, slots, ocp)
    codes = cache.view(torch.uint8).reshape(16, -1)[slots[slots >= 0]].numpy()
    fnuz = codes.view(ml_dtypes.float8_e4m3fnuz).astype(np.float64)
    fn = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    differ = ~((fnuz == fn) | (np.isnan(fnuz) & np.isnan(fn)))
    assert values.changed == int(differ.sum()) and values.largest_factor == 2.0


@pytest.mark.parametrize(("rule", "code", "says"), [
    ("amax_div", 1, r"tile scales: \d+ of 96 change on read, by up to 1\.\d+x \(slot"),
    ("pow2_ceil", 0, r"tile scales: none of 96 change on read"),
])
def test_read_check_on_golden_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], rule: str, code: int,
                                    says: str) -> None:
    path = tmp_path / "ds_mla.safetensors"
    assert main(["golden", "--layout", "fp8_ds_mla", "--platform", "cuda-sm100", "--layout-flag",
                 f"ds_mla_scale_rule={rule}", "--out", str(path)]) == 0
    capsys.readouterr()
    assert main(["read-check", str(path), "--platform", "cuda-sm100"]) == code
    out = capsys.readouterr().out
    assert f"ds_mla_scale_rule {rule}" in out and "FlashMLA SM100" in out
    assert re.search(says, out), out


def test_read_check_refuses_a_layout_the_platforms_reader_does_not_read(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """gfx942's reader is AITER's mla_decode_fwd, which reads the 576-byte compact row, not the token-interleaved
    656-byte fp8_ds_mla (docs/sources.md#what-aiters-mla-decode-reads): no view is made up for a reader that does
    not exist."""
    for layout in ("fp8_ds_mla", "fp8_rocm_compact"):
        assert main(["golden", "--layout", layout, "--platform", "rocm-gfx942", "--out",
                     str(tmp_path / f"{layout}.safetensors")]) == 0
    capsys.readouterr()
    assert main(["read-check", str(tmp_path / "fp8_ds_mla.safetensors"), "--platform", "rocm-gfx942"]) == 2
    assert ("layout fp8_ds_mla is read by no reader of rocm-gfx942 (AITER mla_decode_fwd reads fp8, fp8_rocm_compact, "
            "fp8_ds_mla_3buffer); valid: a golden file of one of those layouts") in capsys.readouterr().err
    assert main(["read-check", str(tmp_path / "fp8_rocm_compact.safetensors"), "--platform", "rocm-gfx942"]) == 0
    assert "read by AITER mla_decode_fwd (rocm-gfx942" in capsys.readouterr().out

"""Hardware fp8 conversion is data in the platform tables (``[hardware]``), read by the kernels' selectors."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.formats import E4M3FN, E4M3FNUZ, E5M2, ConversionMode
from rtp_ref.kernels import cuda_build
from rtp_ref.platform import load_platform

REPO = Path(__file__).resolve().parents[2]

triton_fp8 = pytest.importorskip("rtp_ref.kernels.triton_fp8", reason="needs triton")


def test_each_table_states_what_triton_converts_in_hardware(monkeypatch: pytest.MonkeyPatch) -> None:
    assert triton_fp8.triton_hardware_format(load_platform("cuda-sm90")) is E4M3FN
    assert triton_fp8.triton_hardware_format(load_platform("rocm-gfx942")) is E4M3FNUZ
    assert triton_fp8.triton_hardware_format(load_platform("cpu")) is None
    monkeypatch.setattr(triton_fp8, "triton_version", lambda: (3, 6))
    assert triton_fp8.triton_hardware_format(load_platform("rocm-gfx950")) is None  # from triton 3.8 only
    monkeypatch.setattr(triton_fp8, "triton_version", lambda: (3, 8))
    assert triton_fp8.triton_hardware_format(load_platform("rocm-gfx950")) is E4M3FN


def test_a_table_without_the_instruction_sends_the_cuda_kernels_to_software(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda_build, "_gpu_fp8_conversion", lambda: ("e4m3fn",))
    assert cuda_build.hardware_converts(E4M3FN, ConversionMode.SATFINITE)
    assert not cuda_build.hardware_converts(E4M3FN, ConversionMode.NONSAT)
    assert not cuda_build.hardware_converts(E5M2, ConversionMode.SATFINITE)  # no kernel path for it
    monkeypatch.setattr(cuda_build, "_gpu_fp8_conversion", lambda: ())
    assert not cuda_build.hardware_converts(E4M3FN, ConversionMode.SATFINITE)


def test_a_bad_hardware_entry_names_file_key_and_valid_values(tmp_path: Path) -> None:
    text = (REPO / "platforms" / "cuda-sm90.toml").read_text()
    bad = tmp_path / "cuda-sm90.toml"
    bad.write_text(text.replace('triton_fp8_conversion = ["e4m3fn"]', 'triton_fp8_conversion = ["e4m3"]'))
    with pytest.raises(RtpRefError, match=r"\[hardware\]: key 'triton_fp8_conversion' has \['e4m3'\]"):
        load_platform(str(bad))
    bad.write_text(text.replace('triton_fp8_conversion = ["e4m3fn"]',
                                'triton_fp8_conversion = ["e4m3fn"]\ntriton_fp8_since = "three"'))
    with pytest.raises(RtpRefError, match=r"valid: a release as MAJOR\.MINOR"):
        load_platform(str(bad))

"""Hardware fp8 conversion is data in the platform tables (``[hardware]``), read by the kernels' selectors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.formats import E4M3FN, E4M3FNUZ, E5M2, ConversionMode
from rtp_ref.kernels import cuda_build
from rtp_ref.platform import load_platform

REPO = Path(__file__).resolve().parents[2]

triton_fp8 = pytest.importorskip("rtp_ref.kernels.triton_fp8", reason="needs triton")


def test_each_table_states_what_triton_converts_in_hardware(monkeypatch: pytest.MonkeyPatch) -> None:
    converts = triton_fp8.triton_converts
    assert converts(load_platform("cuda-sm90"), E4M3FN) and not converts(load_platform("cuda-sm90"), E4M3FNUZ)
    assert converts(load_platform("cuda-sm90"), E5M2) and converts(load_platform("cuda-sm100"), E5M2)
    assert not converts(load_platform("rocm-gfx942"), E5M2) and not converts(load_platform("rocm-gfx950"), E5M2)
    assert converts(load_platform("rocm-gfx942"), E4M3FNUZ) and not converts(load_platform("rocm-gfx942"), E4M3FN)
    assert not converts(load_platform("cpu"), E4M3FN)
    monkeypatch.setattr(triton_fp8, "triton_version", lambda: (3, 6))
    assert not converts(load_platform("rocm-gfx950"), E4M3FN)  # from triton 3.8 only
    monkeypatch.setattr(triton_fp8, "triton_version", lambda: (3, 8))
    assert converts(load_platform("rocm-gfx950"), E4M3FN)


def test_a_table_without_the_instruction_sends_the_cuda_kernels_to_software(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    """The GPU's table is read (detection stands in for the GPU this machine lacks): with the instructions
    listed, OCP e4m3 and e5m2 under satfinite convert in hardware, fnuz and every other mode in software; with
    ``fp8_conversion = []`` nothing does (and the instructions' NaN, ``fp8_nan``, goes with them)."""
    sm90 = load_platform("cuda-sm90")
    without = tmp_path / "cuda-sm90.toml"
    text = re.sub(r"^fp8_nan = .*\n", "", (REPO / "platforms" / "cuda-sm90.toml").read_text(), count=1, flags=re.M)
    without.write_text(re.sub(r"^fp8_conversion = .*$", "fp8_conversion = []", text, count=1, flags=re.M))
    convert, none = cuda_build.hardware_conversion, cuda_build.HARDWARE_NONE
    for table, listed in ((sm90, True), (load_platform(str(without)), False)):
        monkeypatch.setattr(cuda_build, "gpu_platform", lambda index, table=table: table)
        assert convert(E4M3FN, ConversionMode.SATFINITE) == (cuda_build.HARDWARE_E4M3 if listed else none)
        assert convert(E5M2, ConversionMode.SATFINITE) == (cuda_build.HARDWARE_E5M2 if listed else none)
        assert convert(E4M3FN, ConversionMode.NONSAT) == none
        assert convert(E4M3FNUZ, ConversionMode.SATFINITE) == none  # no kernel path for it


def test_a_bad_hardware_entry_names_file_key_and_valid_values(tmp_path: Path) -> None:
    text = (REPO / "platforms" / "cuda-sm90.toml").read_text()
    bad = tmp_path / "cuda-sm90.toml"
    bad.write_text(text.replace('triton_fp8_conversion = ["e4m3fn", "e5m2"]', 'triton_fp8_conversion = ["e4m3"]'))
    with pytest.raises(RtpRefError, match=r"\[hardware\]: key 'triton_fp8_conversion' has \['e4m3'\]"):
        load_platform(str(bad))
    bad.write_text(text.replace('triton_fp8_conversion = ["e4m3fn", "e5m2"]',
                                'triton_fp8_conversion = ["e4m3fn"]\ntriton_fp8_since = "three"'))
    with pytest.raises(RtpRefError, match=r"valid: a release as MAJOR\.MINOR"):
        load_platform(str(bad))


def test_a_table_written_before_hardware_existed_still_loads_and_converts_in_software(tmp_path: Path) -> None:
    text = (REPO / "platforms" / "cuda-sm90.toml").read_text()
    start = text.index("[hardware]")
    old = tmp_path / "cuda-sm90.toml"
    # its [sources] cites no [hardware] claim either (the table predates both)
    rest = "".join(line for line in text[text.index("[layouts]"):].splitlines(keepends=True)
                   if not line.startswith('"hardware.'))
    old.write_text(text[:start] + rest)
    table = load_platform(str(old))
    assert table.fp8_conversion == table.triton_fp8_conversion == () and table.triton_fp8_since is None
    assert not triton_fp8.triton_converts(table, E4M3FN)

"""The NaN facts and requirements of the platform tables: ``[hardware] fp8_nan`` (what the conversion instruction
writes for a NaN, a fact with its source) and ``[fp8] nan_pins`` (the one NaN a reader depends on, a requirement
with its source), validated on load and carried to the cases through the write contract."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtp_ref.contract import WriteContract
from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.elements import ANY_NAN, NanPolicy
from rtp_ref.platform import all_platforms, load_platform

REPO = Path(__file__).resolve().parents[2]
SM90 = (REPO / "platforms" / "cuda-sm90.toml").read_text()
HARDWARE_NAN_LINE = next(line for line in SM90.splitlines() if line.startswith("fp8_nan = "))
SCALES_LINE = 'scale_formats = ["fp32", "ue8m0"]'


def test_sm90_states_the_e5m2_nan_its_instruction_writes_and_no_table_pins_one() -> None:
    sm90 = load_platform("cuda-sm90")
    assert sm90.hardware_nan == {"e5m2": 0x7F}
    assert "issue 31" in sm90.raw["hardware"]["fp8_nan"]["source"]
    for table in all_platforms():
        assert table.nan_pins == {}, f"{table.name} pins a NaN"
        assert WriteContract.for_platform(table).nan_policy == ANY_NAN


def _table(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cuda-sm90.toml"
    path.write_text(text)
    return path


def test_a_pin_reaches_the_cases_through_the_contract(tmp_path: Path) -> None:
    text = SM90.replace(SCALES_LINE, f'{SCALES_LINE}\nnan_pins = {{ e5m2 = 0x7F, bf16 = 0x7FFF, source = "a reader" }}')
    table = load_platform(str(_table(tmp_path, text)))
    assert table.nan_pins == {"e5m2": 0x7F, "bf16": 0x7FFF}
    assert WriteContract.for_platform(table).nan_policy == NanPolicy((("bf16", 0x7FFF), ("e5m2", 0x7F)))


@pytest.mark.parametrize(("old", "new", "message"), [
    (SCALES_LINE, f'{SCALES_LINE}\nnan_pins = {{ e5m2 = 0x7C, source = "a reader" }}',
     r"\[fp8\]: key 'nan_pins' has .*0x7c is not a NaN of e5m2"),
    (SCALES_LINE, f'{SCALES_LINE}\nnan_pins = {{ e5m2 = 0x7F }}',
     r"\[fp8\]: key 'nan_pins' has .*needs a 'source'"),
    (SCALES_LINE, f'{SCALES_LINE}\nnan_pins = {{ pad = 0, source = "x" }}',
     r"unknown format 'pad'; valid formats: e4m3fn, .*bf16, fp16, fp32, ue8m0"),
    (SCALES_LINE, f'{SCALES_LINE}\nnan_pins = {{ e5m2 = "0x7F", source = "x" }}',
     r"e5m2 = '0x7F' is not a bit pattern"),
    (HARDWARE_NAN_LINE, 'fp8_nan = { e5m2 = 0x7F }', r"\[hardware\]: key 'fp8_nan' .*needs a 'source'"),
    (HARDWARE_NAN_LINE, 'fp8_nan = { bf16 = 0x7FFF, source = "x" }',
     r"unknown format 'bf16'; valid formats: e4m3fn, e4m3fnuz, e5m2, e5m2fnuz"),
    (HARDWARE_NAN_LINE, 'fp8_nan = { source = "x" }', r"names no format"),
    (HARDWARE_NAN_LINE, 'fp8_nan = { e4m3fnuz = 0x80, source = "x" }',
     r"key 'fp8_nan' names e4m3fnuz, which fp8_conversion does not list"),
])
def test_a_bad_nan_entry_names_file_section_and_what_is_valid(tmp_path: Path, old: str, new: str, message: str) -> None:
    assert SM90.count(old) == 1
    with pytest.raises(RtpRefError, match=message):
        load_platform(str(_table(tmp_path, SM90.replace(old, new))))

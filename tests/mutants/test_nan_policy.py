"""The NaN policy in real certify runs: kernels storing NaN as the hardware does are certified bit-exact on every
bundled table (none pins a NaN), kernels storing a NaN for a number or a number for a NaN fail on every one, and a
table that pins a NaN fails the other encoding, the reference's own included.

The kernels (tests/mutants/nan_kernels.py) are loaded through ``RTP_REF_KERNELS`` and certified by ``rtp-ref
certify`` in a process of its own, as a vendor's kernel would be; the test reads report.json. Only the ``edge`` cases
run (``-k edge``): they are the ones that hold NaN (every other case's bytes are the reference's).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rtp_ref.platform import load_platform, platform_names
from tests.mutants.nan_kernels import FAULTY, HARDWARE
from tests.mutants.test_mutation_score import certify

REPO = Path(__file__).resolve().parents[2]
KERNELS_ENV = "tests.mutants.nan_kernels:nan_kernels"
#: the layouts the kernels claim (the MHA e5m2 cache, the MLA caches whose edge reads hold NaN), and the edge cases
SELECTION = ["--layout", "fp8_e5m2", "--layout", "auto", "--layout", "fp8", "--", "-q", "-k", "edge"]


def _verdicts(report: dict[str, object], kernel: str) -> dict[str, tuple[str, str | None]]:
    """layout -> (verdict, lowest grade reached) of ``kernel``'s pairs of claimed layouts."""
    rows = report["summary"]["by_kernel_layout"]  # type: ignore[index]
    return {r["layout"]: (r["verdict"], r["min_grade"]) for r in rows
            if r["kernel"] == kernel and not r["layout"].endswith("(unclaimed)")}


def _failed_checks(report: dict[str, object], kernel: str, layout: str | None = None) -> set[str]:
    cases = report["cases"]
    assert isinstance(cases, list)
    return {name for c in cases if c["kernel"] == kernel and layout in (None, c["layout"])
            for name in c.get("failed_checks", [])}


def _certified(report: dict[str, object], kernel: str) -> bool:
    verdicts = _verdicts(report, kernel)
    return bool(verdicts) and all(v == ("certified", "bit_exact") for v in verdicts.values())


@pytest.mark.parametrize("platform", platform_names())
def test_hardware_nans_certify_and_nan_faults_fail_on_every_bundled_table(platform: str, tmp_path: Path) -> None:
    assert not load_platform(platform).nan_pins, "a bundled table pins a NaN: this test's premise is gone"
    names = [cls.name for cls in (*HARDWARE, *FAULTY)]
    report = certify(platform, names, tmp_path, extra=SELECTION, kernels_env=KERNELS_ENV)
    for cls in HARDWARE:
        assert _certified(report, cls.name), f"{cls.name} on {platform}: {_verdicts(report, cls.name)}, failed " \
                                             f"{sorted(_failed_checks(report, cls.name))}"
    for cls, check in FAULTY.items():
        verdicts = {verdict for verdict, _ in _verdicts(report, cls.name).values()}
        assert "failed" in verdicts and check in _failed_checks(report, cls.name), \
            f"{cls.name} on {platform}: {verdicts}, failed {sorted(_failed_checks(report, cls.name))}"


def _pinned_table(tmp_path: Path, pins: str) -> Path:
    """cuda-sm90's table with ``[fp8] nan_pins = {pins, source = ...}``, as a file of its own."""
    text = (REPO / "platforms" / "cuda-sm90.toml").read_text()
    anchor = 'scale_formats = ["fp32", "ue8m0"]\n'
    assert text.count(anchor) == 1
    pinned = f'{anchor}nan_pins = {{ {pins}, source = "a test table: a reader that compares NaN bits" }}\n'
    path = tmp_path / "cuda-sm90.toml"
    path.write_text(text.replace(anchor, pinned))
    assert load_platform(str(path)).nan_pins
    return path


def _nan_layout(kernel: str) -> str:
    """The layout whose edge cases hold the pinned NaNs: the MHA e5m2 cache, the MLA reader's ``auto`` rows (bf16 and
    fp16). (A pinned bf16 NaN fails the MHA ``auto`` copy of a -NaN input too, the reference's own included.)"""
    return "fp8_e5m2" if "mha" in kernel else "auto"


@pytest.mark.parametrize(("pins", "passing", "failing"), [
    ("e5m2 = 0x7E, bf16 = 0x7FC0, fp16 = 0x7E00", ("reference-mha", "reference-gather"),
     tuple(cls.name for cls in HARDWARE)),
    ("e5m2 = 0x7F, bf16 = 0x7FFF, fp16 = 0x7FFF", tuple(cls.name for cls in HARDWARE),
     ("reference-mha", "reference-gather")),
], ids=["pins-the-reference-s", "pins-the-hardware-s"])
def test_a_table_that_pins_a_nan_fails_the_other_encoding(pins: str, passing: tuple[str, ...],
                                                         failing: tuple[str, ...], tmp_path: Path) -> None:
    table = _pinned_table(tmp_path, pins)
    report = certify(str(table), [*passing, *failing], tmp_path / "report", extra=SELECTION, kernels_env=KERNELS_ENV)
    assert report["_exit_code"] == 1
    for name in passing:
        assert _verdicts(report, name)[_nan_layout(name)] == ("certified", "bit_exact"), _verdicts(report, name)
    for name in failing:
        layout = _nan_layout(name)
        assert _verdicts(report, name)[layout][0] == "failed", f"{name}: {_verdicts(report, name)}"
        assert _failed_checks(report, name, layout) == {"bit_exact.bytes"}, _failed_checks(report, name, layout)

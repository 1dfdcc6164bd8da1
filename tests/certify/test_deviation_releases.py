"""A known deviation of torch's own behaviour that a later torch release changed (``torch_before``) excuses a case
only under the releases before it: under a later one the same shortfall fails, and no stale entry fails a kernel
that no longer falls short."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from rtp_ref.certify import verdict
from rtp_ref.certify.verdict import matching_deviation
from rtp_ref.errors import RtpRefError
from rtp_ref.platform import load_platform

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Key:
    """What a deviation is matched on (rtp_ref.cases.op_cases.DeviationKey)."""

    layout: str
    kind: str
    tokens: int


def _edge(layout: str = "fp8") -> Key:
    return Key(layout=layout, kind="edge", tokens=8)


@pytest.mark.parametrize(("running", "covered"), [((2, 11), True), ((2, 12), True), ((2, 13), False),
                                                  ((3, 0), False)])
def test_the_cpu_tables_torch_eager_deviation_follows_the_release(monkeypatch: pytest.MonkeyPatch,
                                                                  running: tuple[int, int], covered: bool) -> None:
    """cpu.toml: torch's CPU cast stopped being non-saturating in 2.13 (docs/sources.md)."""
    monkeypatch.setattr(verdict, "torch_release", lambda: running)
    table = load_platform("cpu")
    found = matching_deviation(table, "torch-eager", "cpu", _edge())
    assert (found is not None) == covered
    if found is not None:
        assert table.deviations[found].torch_before == (2, 13)


def test_a_release_bound_deviation_is_still_only_its_kernel_layout_kind_and_device(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verdict, "torch_release", lambda: (2, 11))
    table = load_platform("cuda-sm90")
    cpu_entries = [i for i, d in enumerate(table.deviations) if d.devices == ("cpu",)]
    assert len(cpu_entries) == 1 and table.deviations[cpu_entries[0]].torch_before == (2, 13)
    assert matching_deviation(table, "torch-eager", "cpu", _edge()) == cpu_entries[0]
    assert matching_deviation(table, "torch-eager", "cpu", _edge("auto")) is None
    assert matching_deviation(table, "triton", "cpu", _edge()) is None
    assert matching_deviation(table, "torch-eager", "cpu", replace(_edge(), kind="random")) is None


def test_the_running_release_is_read_from_torch() -> None:
    import torch

    assert verdict.torch_release() == tuple(int(p) for p in torch.__version__.split(".")[:2])


def test_a_release_that_is_not_major_minor_is_refused(tmp_path: Path) -> None:
    text = (REPO / "platforms" / "cpu.toml").read_text().replace('torch_before = "2.13"', 'torch_before = "2.13.0"')
    (tmp_path / "cpu.toml").write_text(text)
    with pytest.raises(RtpRefError, match=r"torch_before.*MAJOR\.MINOR"):
        load_platform(str(tmp_path / "cpu.toml"))

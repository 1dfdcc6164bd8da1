"""``certify --platform all`` with several platforms at once: each platform's held output comes under a line naming
it, and a progress line says how far each running platform is, read from what its process has printed so far."""

from __future__ import annotations

import sys

import pytest

from rtp_ref.certify import platform_runs
from rtp_ref.certify.platform_runs import progress_of, run_platforms

#: pytest's output of an xdist run of 6 cases, as far as 4 of them (one failed)
SO_FAR = (b"============================= test session starts ==============================\n"
          b"created: 2/2 workers\n2 workers [6 items]\n\n..F.")


@pytest.mark.parametrize(("output", "shown"), [
    (b"", "starting"),
    (b"created: 2/2 workers\n", "starting"),
    (SO_FAR, "4/6 cases, 1 failed"),
    (SO_FAR + b"E.                                                              [100%]\n"
              b"============================= 4 passed, 1 failed, 1 error in 3.1s =====\n", "6/6 cases, 2 failed"),
    (b"collected 3 items\n\n.s.   [100%]\n", "3/3 cases"),
    # a platform's header line or a report row is no progress, whatever characters it starts with
    (b"1 worker [2 items]\n\n.\nrtp-ref: platform=cpu\n", "1/2 cases"),
])
def test_progress_is_read_from_pytest_output(output: bytes, shown: str) -> None:
    assert progress_of(output) == shown


#: a stand-in platform process: prints pytest-like progress for 6 cases, slowly, then one line of its own
CHILD = [sys.executable, "-c", "import sys, time\n"
         "out = sys.stdout\n"
         "out.write('2 workers [6 items]\\n\\n'); out.flush()\n"
         "for mark in '..F...':\n    time.sleep(0.3); out.write(mark); out.flush()\n"
         "out.write('  [100%]\\nthe platform block\\n')\n"]


def test_held_platforms_show_progress_and_their_blocks_under_their_name(monkeypatch: pytest.MonkeyPatch,
                                                                        capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(platform_runs, "PROGRESS_S", 0.5)
    codes: dict[str, int] = {}
    run_platforms([("one", CHILD), ("two", CHILD)], jobs=2, workers=1, codes=codes)
    assert codes == {"one": 0, "two": 0}
    lines = capfd.readouterr().out.splitlines()
    assert lines[:2] == ["rtp-ref: certifying platform one (its output follows when it ends)",
                         "rtp-ref: certifying platform two (its output follows when it ends)"]
    progress = [line for line in lines if line.startswith("rtp-ref: progress: ")]
    assert progress, lines
    assert all(line.startswith("rtp-ref: progress: one ") and "; two " in line for line in progress), progress
    assert any("/6 cases" in line for line in progress), progress
    for name in ("one", "two"):  # each block follows the line naming its platform
        header = lines.index(f"rtp-ref: platform {name} ended (exit 0); its output:")
        assert lines[header + 1] == "2 workers [6 items]"
        assert lines[header + 4] == "the platform block"

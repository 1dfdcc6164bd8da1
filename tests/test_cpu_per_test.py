"""scripts/cpu_per_test.py, the plugin docs/testing.md measures the suite's CPU with: a test's line counts the CPU
of the processes it started, not only its own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

_BURNS = '''
import subprocess, sys

def test_burns_in_a_child():
    spin = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.6: pass"
    subprocess.run([sys.executable, "-c", spin], check=True)

def test_idle():
    pass
'''


def test_a_tests_line_counts_the_cpu_of_the_process_it_started(pytester: pytest.Pytester, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "cpu"
    monkeypatch.setenv("CPU_PER_TEST_DIR", str(out))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(SCRIPTS), os.environ.get("PYTHONPATH")])))
    pytester.makepyfile(_BURNS)
    result = pytester.runpytest_subprocess("-p", "cpu_per_test", "-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(passed=2)
    lines = [line.split(" ", 1) for f in out.iterdir() for line in f.read_text().splitlines()]
    seconds = {node.rsplit("::", 1)[1]: float(cpu) for cpu, node in lines}
    assert seconds["test_burns_in_a_child"] >= 0.6 > seconds["test_idle"], seconds

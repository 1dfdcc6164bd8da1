"""certify runs its own suite, with its own pytest configuration, wherever it is installed and started;
and an environment that kills every worker ends the run in seconds with a message naming it."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from tests.processes import child_env
from tests.wheel import build_wheel

REPO = Path(__file__).resolve().parents[2]

#: a vendor project whose own pytest setup would break the suite: xdist off, stop at the first failure,
#: a conftest that cannot import, and the same through the environment
HOSTILE_INI = "[pytest]\naddopts = -p no:xdist -x -p no:rtp_ref --strict-config\nxfail_strict = false\n"
HOSTILE_CONFTEST = "raise ImportError('this conftest needs vendor_internal_tools, which is not installed')\n"


def _venv_with_wheel(project: Path, wheel: Path) -> Path:
    """``project/.venv`` with rtp-ref installed from ``wheel``; its other packages (torch, pytest...) come from
    this interpreter's site-packages through a .pth file (installing torch again would take minutes)."""
    venv = project / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(site),
                    str(wheel)], check=True)
    return python


@pytest.mark.slow
def test_certify_from_a_wheel_in_a_venv_inside_a_hostile_project(tmp_path: Path) -> None:
    project = tmp_path / "vendor-project"
    project.mkdir()
    (project / "pytest.ini").write_text(HOSTILE_INI)
    (project / "conftest.py").write_text(HOSTILE_CONFTEST)
    python = _venv_with_wheel(project, build_wheel(tmp_path / "build"))
    env = child_env(PYTEST_ADDOPTS="-p no:xdist -x", PYTEST_PLUGINS="no_such_plugin_module")
    env.pop("PYTHONPATH", None)  # only the venv: the checkout must not be importable
    argv = [str(python), "-m", "rtp_ref.cli", "certify", "--platform", "cpu", "--kernel", "reference",
            "--layout", "auto", "--report", str(project / "reports")]
    dry = subprocess.run([*argv, "--dry-run"], cwd=project, env=env, capture_output=True, text=True, check=True)
    assert f"{project}/.venv/" in dry.stdout  # the installed suite, inside the hostile project, is what runs
    proc = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((project / "reports" / "report.json").read_text())
    assert report["complete"] is True
    rows = {(r["kernel"], r["layout"]): r["verdict"] for r in report["summary"]["by_kernel_layout"]}
    assert rows[("reference", "auto")] == "certified"


#: a kernel module that imports in the controller but kills every xdist worker while it collects
WORKER_KILLER = """
import ctypes, os
from rtp_ref.kernels.reference import ReferenceKernel
if os.environ.get("PYTEST_XDIST_WORKER"):
    ctypes.string_at(0)
class Doomed(ReferenceKernel):
    name = "doomed"
def kernels():
    return [Doomed()]
"""


def test_workers_that_die_before_any_case_stop_the_run_in_seconds(tmp_path: Path) -> None:
    (tmp_path / "worker_killer.py").write_text(WORKER_KILLER)
    env = child_env(tmp_path, RTP_REF_KERNELS="worker_killer:kernels")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "rtp_ref.cli", "certify", "--platform", "cpu", "--kernel", "doomed",
                           "--layout", "auto", "--report", str(tmp_path / "out")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert elapsed < 60, f"{elapsed:.0f} s"
    named = (f"died before running any case, so the environment is at fault, not a kernel: Fatal Python error: "
             f"Segmentation fault at {tmp_path}/worker_killer.py:5 in <module> (while collecting the suite)")
    assert named in proc.stdout
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["complete"] is False
    assert report["stop_reason"].startswith("stopped: 2 xdist workers (gw0, gw1) died before running any case")

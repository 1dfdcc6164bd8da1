"""The example vendor package, built and installed for real, discovered through its entry point.

pip builds a copy of examples/vendor_kernel into a private target directory (no network, no effect on this
environment); a fresh process with that directory on its path runs ``rtp-ref certify`` on it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import child_env
from tests.vendor.install import install_example
from tests.zygote import shared_zygote


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_example("vendor_kernel", tmp_path_factory)


def test_entry_point_is_discovered(installed: Path) -> None:
    code = ("from rtp_ref.kernels.discovery import discover_kernels; "
            "e = discover_kernels(['acme-mla'])['acme-mla']; print(e.origin); print(sorted(e.kernel.kv_cache_dtypes))")
    out = subprocess.run([sys.executable, "-c", code], env=child_env(installed), capture_output=True, text=True,
                         check=True, timeout=120).stdout.splitlines()
    assert out[0] == "entry point acme = acme_mla:kernels (acme-mla 1.0.0)"
    assert out[1] == "['auto', 'fp8']"


def test_vendor_kernel_is_certified(installed: Path, tmp_path: Path) -> None:
    proc = shared_zygote().run(["certify", "--platform", "cpu", "--kernel", "acme-mla", "--report", str(tmp_path),
                                "-n", "0"],
                               child_env(installed), tmp_path, timeout=600)
    report = json.loads((tmp_path / "report.json").read_text())
    verdicts = {r["layout"]: r["verdict"] for r in report["summary"]["by_kernel_layout"] if r["kernel"] == "acme-mla"}
    assert verdicts["auto"] == "certified", proc.stdout[-2000:]
    assert verdicts["fp8"] == "certified", proc.stdout[-2000:]
    # the layouts it does not claim must raise, and do
    for layout in ("fp8_ds_mla (unclaimed)", "fp8_model1_mla (unclaimed)", "fp8_rocm_compact (unclaimed)"):
        assert verdicts[layout] == "raises as required"
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (tmp_path / "junit.xml").exists() and (tmp_path / "report.md").exists()

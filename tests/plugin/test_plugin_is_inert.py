"""The plugin loads in every pytest run of an environment with rtp-ref installed (entry point ``pytest11``),
and changes nothing in a project that did not ask for it: each test is a throwaway project run by a real inner
pytest, in a subprocess where hypothesis's global settings, the interpreter's imports or xdist are involved."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.plugin.test_pytest_plugin import ONE_GPU_CONFTEST

pytest_plugins = ["pytester"]

PROJECT_PROFILE_CONFTEST = """
from hypothesis import settings
settings.register_profile("project", max_examples=7)
settings.load_profile("project")
"""
PRINT_SETTINGS = """
from hypothesis import settings
def test_settings():
    print("PROFILE", settings.get_current_profile_name(), settings().max_examples)
"""


def test_a_projects_own_hypothesis_profile_is_kept(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(PROJECT_PROFILE_CONFTEST)
    pytester.makepyfile(PRINT_SETTINGS)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*PROFILE project 7*"])


def test_a_project_on_ci_keeps_hypothesis_own_ci_profile(pytester: pytest.Pytester,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """hypothesis loads its built-in ``ci`` profile on CI (100 examples); rtp-ref's ``ci`` (60) must not
    replace it, not even by being registered under the same name."""
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(PRINT_SETTINGS)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*PROFILE ci 100*"])


RECORD_WORKER_ENV = """
import os
import pytest
@pytest.mark.parametrize("n", range(4))
def test_record(n):
    with open("env.txt", "a") as f:
        f.write(f"{os.environ['PYTEST_XDIST_WORKER']} {os.environ.get('CUDA_VISIBLE_DEVICES')} "
                f"{os.environ.get('HIP_VISIBLE_DEVICES')};")
"""


def test_a_project_running_more_xdist_workers_than_gpus_runs_unpinned(pytester: pytest.Pytester,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``-n 2`` while the plugin sees one GPU: no UsageError, and no worker is pinned to a GPU."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    pytester.makeconftest(ONE_GPU_CONFTEST)
    pytester.makepyfile(RECORD_WORKER_ENV)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider", timeout=300)
    result.assert_outcomes(passed=4)
    records = (pytester.path / "env.txt").read_text().rstrip(";").split(";")
    assert len(records) == 4
    assert all(r.endswith(" None None") for r in records), records


OWN_PLATFORM_CONFTEST = """
def pytest_addoption(parser):
    parser.addoption("--platform", default="linux", help="the project's own option")
    parser.addoption("--kernel", action="store_true", help="the project's own flag")
"""
PRINT_OPTIONS = """
def test_options(pytestconfig, rtp_platform):
    print("OPTIONS", pytestconfig.getoption("platform"), pytestconfig.getoption("kernel"), rtp_platform.name)
"""


def test_a_project_with_its_own_platform_and_kernel_options_keeps_them(pytester: pytest.Pytester) -> None:
    """A project's conftest defines ``--platform`` and ``--kernel``: its run works, the options are its own,
    and rtp-ref's stay reachable under their ``--rtp-`` names."""
    pytester.makeconftest(OWN_PLATFORM_CONFTEST)
    pytester.makepyfile(PRINT_OPTIONS)
    result = pytester.runpytest("-s", "-p", "no:cacheprovider", "--platform", "arm", "--kernel",
                                "--rtp-platform", "rocm-gfx942")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*OPTIONS arm True rocm-gfx942*"])
    assert "--rtp-layout-flag" in pytester.runpytest("--help").stdout.str()


def test_a_project_sees_no_markers_skips_or_header_of_rtp_ref(pytester: pytest.Pytester) -> None:
    """The project's own ``gpu`` marker means what the project says (its test runs on a machine without a GPU);
    rtp-ref's markers are not registered and its header line is not printed."""
    pytester.makeini("[pytest]\nmarkers =\n    gpu: the project's own marker\n")
    pytester.makepyfile("""
        import pytest
        @pytest.mark.gpu
        def test_project_gpu_marker(): pass
    """)
    result = pytester.runpytest_subprocess("--strict-markers", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "rtp-ref:" not in result.stdout.str()
    markers = pytester.runpytest_subprocess("--markers", "-p", "no:cacheprovider").stdout.str()
    assert "gpu: the project's own marker" in markers
    assert "slow:" not in markers and "rocm:" not in markers


def test_importing_the_plugin_imports_neither_torch_nor_hypothesis() -> None:
    code = "import sys, rtp_ref.pytest_plugin; print(sorted({'torch', 'hypothesis'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


TEXT_PROPERTY = """
from hypothesis import given, strategies as st
@given(st.text())
def test_text(s):
    assert isinstance(s, str)
"""


def test_hypothesis_keeps_its_files_out_of_the_directory_under_test(pytester: pytest.Pytester,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Run with an rtp-ref option (the plugin active), hypothesis writes its database and caches under
    ``$RTP_REF_CACHE_DIR/hypothesis``, not ``./.hypothesis`` of the project; a run without one is untouched
    (hypothesis's own default, ``./.hypothesis``)."""
    cache = pytester.path.parent / "rtp-ref-cache"
    monkeypatch.setenv("RTP_REF_CACHE_DIR", str(cache))
    monkeypatch.delenv("HYPOTHESIS_STORAGE_DIRECTORY", raising=False)
    pytester.makepyfile(TEXT_PROPERTY)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--rtp-platform", "cpu")
    result.assert_outcomes(passed=1)
    assert not (pytester.path / ".hypothesis").exists()
    assert (cache / "hypothesis").is_dir()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert (pytester.path / ".hypothesis").is_dir()

"""The suite's and the package's hygiene, checked in real child processes where a process is the point:
what an import costs, and that seeded inputs are the same in every process."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import child_env

REPO = Path(__file__).resolve().parents[1]


def _child(code: str, **extra: str) -> str:
    """Run ``code`` in a fresh interpreter on this checkout; its stdout."""
    proc = subprocess.run([sys.executable, "-c", code], env=child_env(REPO, **extra), cwd=REPO,
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip()


def test_platform_tables_and_layout_flags_load_without_torch() -> None:
    """Reading platform tables and their layout flags is data only and must not pay torch's import (about a
    second): ``rtp_ref.fp8`` and ``rtp_ref.kv`` import their torch-based modules on first use."""
    code = ("import sys, rtp_ref.platform, rtp_ref.kv.flags\n"
            "rtp_ref.platform.all_platforms()\n"
            "print('torch' in sys.modules)\n")
    assert _child(code) == "False"


@pytest.mark.parametrize("package", ["rtp_ref.fp8", "rtp_ref.kv"])
def test_every_public_name_of_a_lazy_package_resolves(package: str) -> None:
    """``__all__`` and the table ``__getattr__`` imports from agree, and the table names each name's module."""
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(name for names in module._EXPORTS.values() for name in names)
    assert [name for name in module.__all__ if not hasattr(module, name)] == []


def test_random_oracle_seeds_are_the_same_in_every_process() -> None:
    """A failing random case must reproduce in the next run, whatever PYTHONHASHSEED the process got."""
    code = ("from tests.fp8.test_codec_oracles import FORMATS, MODES, random_seed\n"
            "print([random_seed(f, m) for f in FORMATS for m in MODES])\n")
    assert _child(code, PYTHONHASHSEED="1") == _child(code, PYTHONHASHSEED="2")


def test_the_tests_collected_first_exist() -> None:
    """Each of conftest.RUN_FIRST names a test function that exists: a renamed or moved test would otherwise drop
    out of the front of the collection unnoticed, and the GPU gate's run would end later again."""
    from tests.conftest import RUN_FIRST, first_rank

    for rank, nodeid in enumerate(RUN_FIRST):
        path, function = nodeid.split("::")
        assert f"def {function}(" in (REPO / path).read_text(), nodeid
        assert first_rank(f"{nodeid}[some-param]") == rank
    assert first_rank("tests/test_hygiene.py::test_the_tests_collected_first_exist") == len(RUN_FIRST)


def test_long_tests_go_first_each_in_a_pair_of_its_own() -> None:
    from tests.scheduling import long_tests_apart

    items = ["a", "L1", "b", "c", "L0", "d"]
    rank = {"L0": 0, "L1": 1}
    assert long_tests_apart(items, lambda i: rank.get(i, 2), 2) == ["L0", "a", "L1", "b", "c", "d"]
    # more long tests than others: the long ones left over follow
    assert long_tests_apart(["L1", "x", "L0"], lambda i: rank.get(i, 2), 2) == ["L0", "x", "L1"]


_ORDER = '''
from tests.scheduling import long_tests_apart

def pytest_collection_modifyitems(items):
    items[:] = long_tests_apart(items, lambda item: 0 if "long" in item.name else 1, 1)
'''
_DEALT = '''
import os, pathlib, pytest

@pytest.mark.parametrize("i", range(100))
def test_short(i): pass

@pytest.mark.parametrize("i", range(2))
def test_long(i):
    pathlib.Path(os.environ["DEALT"], f"long{i}").write_text(os.environ["PYTEST_XDIST_WORKER"])
'''


def test_xdist_load_deals_each_worker_one_long_test_first(tmp_path: Path) -> None:
    """What tox -e cuda relies on (tests/conftest.py RUN_FIRST): under ``--dist load --maxschedchunk 1`` xdist deals
    the first tests out two to each worker, so with the long tests paired each worker starts one. Without the option
    (xdist 3.8) the first worker gets a run of consecutive tests (a quarter of its share), both long ones among them:
    the GPU gate's 280 s on one worker of sixteen."""
    (tmp_path / "conftest.py").write_text(_ORDER)
    (tmp_path / "test_dealt.py").write_text(_DEALT)
    out = tmp_path / "dealt"
    out.mkdir()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2", "--dist", "load",
                           "--maxschedchunk", "1", "-p", "no:rtp_ref", str(tmp_path / "test_dealt.py")],
                          env=child_env(REPO, DEALT=str(out)), cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workers = [(out / f"long{i}").read_text() for i in range(2)]
    assert sorted(workers) == ["gw0", "gw1"], workers

"""The facts a report shares across its cases (rtp_ref.certify.session): each kernel's origin, of whatever op,
taken when the run starts (a kernel module that breaks later keeps it, a discovery that fails costs neither the
report nor the run: no pytest INTERNALERROR), the command as the user typed it, and the rtp-ref that ran."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import rtp_ref
from rtp_ref import __version__
from rtp_ref.certify import session
from tests.certify.scratch_vendor import KERNELS, ORIGIN, install_scratch_vendor
from tests.processes import child_env
from tests.zygote import shared_zygote

REPO = Path(__file__).resolve().parents[2]

#: a vendor kernel module whose discovery works until the kernel has run once, then fails (an entry point
#: that stopped loading half-way through a run, say): a discovery at the session's end would see it fail
VANISHING_KERNELS = '''
import os
from pathlib import Path

from rtp_ref.errors import RtpRefError
from rtp_ref.kernels.reference import ReferenceKernel

RAN = Path(os.environ["VANISHING_RAN"])


class Vanishing(ReferenceKernel):
    name = "vanishing"

    def bind(self, contract):
        return Vanishing(contract)

    def __call__(self, *args):
        RAN.touch()
        super().__call__(*args)


def kernels():
    if RAN.exists():
        raise RtpRefError("vanishing_kernels:kernels: the vendor extension is gone")
    return [Vanishing()]
'''


def test_a_kernel_module_that_breaks_during_the_run_keeps_its_origin(tmp_path: Path) -> None:
    (tmp_path / "vanishing_kernels.py").write_text(VANISHING_KERNELS)
    out = tmp_path / "rep"
    env = child_env(tmp_path, RTP_REF_KERNELS="vanishing_kernels:kernels", VANISHING_RAN=str(tmp_path / "ran"))
    proc = shared_zygote().run(["certify", "--platform", "cpu", "--kernel", "vanishing", "--layout", "auto",
                                "--report", str(out)], env, tmp_path, timeout=300)
    output = proc.stdout + proc.stderr
    assert "INTERNALERROR" not in output, output[-3000:]
    assert proc.returncode == 0, output[-3000:]
    assert (tmp_path / "ran").exists()  # the kernel ran, so a discovery now would fail
    report = json.loads((out / "report.json").read_text())
    origin = "RTP_REF_KERNELS item 'vanishing_kernels:kernels'"
    assert report["kernels"] == [{"name": "vanishing", "origin": origin}]
    assert f"- kernel vanishing: {origin}\n" in (out / "report.md").read_text()


class _Config:
    """What describe_run and discover_run_kernels read of a pytest config."""

    def __init__(self, **options: Any) -> None:
        self.rtp_ref_layout_flags: dict[str, str] = {}
        self.options = {"rtp_platform": "cpu", "rtp_kernel": [], "rtp_layout": [], "rtp_require_input_checks": False,
                        "rtp_require_hardening": False, **options}

    def getoption(self, name: str) -> Any:
        return self.options[name]


#: a vendor kernel module whose factory raises (its own exception, not an RtpRefError)
EXPLODING_KERNELS = """
def kernels():
    raise RuntimeError("the vendor's kernel factory needs a GPU")
"""


@pytest.mark.parametrize(("selected", "names"), [([], ["a", "b"]), (["b"], ["b"])])
def test_a_kernel_discovery_that_fails_when_the_run_starts_is_recorded(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, selected: list[str], names: list[str]) -> None:
    """Any error of the discovery (a vendor callable's own, too) is recorded, never raised: the kernels are
    those --kernel selected, else those the cases name, each with the reason as its origin."""
    (tmp_path / "exploding_kernels.py").write_text(EXPLODING_KERNELS)
    monkeypatch.syspath_prepend(tmp_path)
    monkeypatch.setenv("RTP_REF_KERNELS", "exploding_kernels:kernels")
    config = _Config(rtp_kernel=selected)
    found = session.discover_run_kernels(config)  # type: ignore[arg-type]
    cases = [{"kernel": "b"}, {"kernel": "a"}, {"kernel": "b"}, {"kernel": None}]
    described = session.describe_run(config, cases, 0.0, found)  # type: ignore[arg-type]
    why = ("unknown: kernel discovery failed when the run started: RTP_REF_KERNELS item 'exploding_kernels:kernels' "
           "failed to load: RuntimeError: the vendor's kernel factory needs a GPU")
    assert described["kernels"] == [{"name": name, "origin": why} for name in names]


def test_a_kernel_factory_that_raises_stops_certify_with_one_line_naming_it(tmp_path: Path) -> None:
    """Before any case runs, certify's own discovery fails on it: exit 2, the item named, no traceback."""
    (tmp_path / "exploding_kernels.py").write_text(EXPLODING_KERNELS)
    proc = shared_zygote().run(["certify", "--platform", "cpu", "--report", str(tmp_path / "rep")],
                               child_env(tmp_path, RTP_REF_KERNELS="exploding_kernels:kernels"), tmp_path,
                               timeout=300)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr == ("rtp-ref: error: RTP_REF_KERNELS item 'exploding_kernels:kernels' failed to load: "
                           "RuntimeError: the vendor's kernel factory needs a GPU\n")


@pytest.fixture(scope="module")
def scratch_vendor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``acme-kv`` distribution (tests.certify.scratch_vendor) installed; its site directory."""
    return install_scratch_vendor(tmp_path_factory.mktemp("acme-kv"))


def test_the_run_finds_the_origin_of_a_kernel_of_every_op(monkeypatch: pytest.MonkeyPatch,
                                                          scratch_vendor: Path) -> None:
    """A kernel of any op (the MLA, MHA and indexer writes, the two readers), selected or not, has its origin:
    the built-ins' rtp-ref version, a vendor's entry point with its distribution and version."""
    monkeypatch.syspath_prepend(scratch_vendor)
    monkeypatch.delenv("RTP_REF_KERNELS", raising=False)
    builtins = ["reference", "reference-mha", "reference-indexer", "reference-gather", "reference-indexer-gather"]
    selected = [*KERNELS.values(), *builtins]
    found = session.discover_run_kernels(_Config(rtp_kernel=selected))  # type: ignore[arg-type]
    assert found.failure is None
    assert found.for_report(selected, []) == {**dict.fromkeys(KERNELS.values(), ORIGIN),
                                              **dict.fromkeys(builtins, f"builtin (rtp-ref {__version__})")}
    every = session.discover_run_kernels(_Config()).for_report([], [])  # type: ignore[arg-type]
    assert {name: every.get(name) for name in selected} == found.for_report(selected, [])


def _checkout_head() -> str | None:
    """The commit of the checkout the imported rtp_ref package is, by git itself; None without git, or for an
    installed package (tox installs a wheel: its rtp_ref is not a checkout's, even when run from one)."""
    root = Path(rtp_ref.__file__).resolve().parents[1]
    if shutil.which("git") is None or not (root / ".git").exists():
        return None
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()


def test_a_vendors_mha_kernel_is_reported_with_its_package_the_typed_command_and_rtp_ref(
        scratch_vendor: Path, tmp_path: Path) -> None:
    """A real certify run of an installed vendor's reshape_and_cache_flash kernel: report.json and report.md
    name its entry point, distribution and version; the command is the one the user typed (as ``--platform
    all`` hands it to each platform's run); the rtp-ref that ran is named with its commit."""
    out = tmp_path / "rep"
    typed = "rtp-ref certify --platform all --kernel acme-mha --layout auto --report 'my reports'"
    proc = shared_zygote().run(["certify", "--platform", "cpu", "--kernel", "acme-mha", "--layout", "auto",
                                "--report", str(out)],
                               child_env(scratch_vendor, RTP_REF_TYPED_COMMAND=typed), tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    md = (out / "report.md").read_text()
    assert report["kernels"] == [{"name": "acme-mha", "origin": ORIGIN}]
    assert f"- kernel acme-mha: {ORIGIN}\n" in md
    assert report["run"]["command"] == typed
    assert f"`{typed}`" in md
    head = _checkout_head()
    build = report["run"]["rtp_ref"]
    assert (build["version"], build["commit"]) == (__version__, head)
    if head is None:
        assert build["dirty"] is None
        assert f"- rtp-ref {__version__}, torch " in md
    else:
        assert isinstance(build["dirty"], bool)
        assert f"- rtp-ref {__version__} (git commit {head[:12]}, " in md


@pytest.mark.parametrize(("argv", "environ", "command"), [
    (["/venv/bin/rtp-ref", "certify", "--report", "a b"], {}, "rtp-ref certify --report 'a b'"),
    (["/src/rtp_ref/cli.py", "certify"], {"RTP_REF_TYPED_COMMAND": ""}, "rtp-ref certify"),
    (["/venv/bin/pytest", "conformance"], {}, "/venv/bin/pytest conformance"),
    (["/src/rtp_ref/cli.py", "certify", "--platform", "cpu"],
     {"RTP_REF_TYPED_COMMAND": "rtp-ref certify --platform all"}, "rtp-ref certify --platform all"),
])
def test_the_command_is_the_one_the_user_typed(argv: list[str], environ: dict[str, str], command: str) -> None:
    """``$RTP_REF_TYPED_COMMAND`` wins when set (a ``--platform all`` child); else this process's command line,
    shell-quoted, rtp-ref's entry point named ``rtp-ref``."""
    assert session.run_command(argv, environ) == command


def test_execution_is_native_only_where_the_tables_detect_matches_this_machine(tmp_path: Path) -> None:
    """Native is decided by a table's [detect], not its name: a renamed copy of this machine's table is native,
    another machine's table emulated (on a CPU-only host: every GPU table)."""
    from rtp_ref.certify.session import execution_mode
    from rtp_ref.platform import all_platforms, detect_platform, load_platform

    here = detect_platform()
    copy = tmp_path / "renamed-copy.toml"
    copy.write_text(Path(here.source).read_text().replace(f'name = "{here.name}"', 'name = "renamed-copy"'))
    assert execution_mode(load_platform(str(copy))) == "native"
    others = [p for p in all_platforms() if p.name != here.name]
    assert others and all(execution_mode(p) == "emulated" for p in others if p.backend != "cpu")

"""The facts a report shares across its cases (rtp_ref.certify.session), gathered when the session ends: a
kernel discovery that fails then must cost neither the report nor the run (no pytest INTERNALERROR)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rtp_ref.certify import session
from tests.processes import child_env
from tests.zygote import shared_zygote

REPO = Path(__file__).resolve().parents[2]

#: a vendor kernel module whose discovery works until the kernel has run once, then fails (an entry point
#: that stopped loading half-way through a run, say): only the discovery at the session's end sees it fail
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


def test_a_kernel_discovery_that_fails_at_the_end_still_writes_the_report(tmp_path: Path) -> None:
    (tmp_path / "vanishing_kernels.py").write_text(VANISHING_KERNELS)
    out = tmp_path / "rep"
    env = child_env(tmp_path, RTP_REF_KERNELS="vanishing_kernels:kernels", VANISHING_RAN=str(tmp_path / "ran"))
    proc = shared_zygote().run(["certify", "--platform", "cpu", "--kernel", "vanishing", "--layout", "auto",
                                "--report", str(out)], env, tmp_path, timeout=300)
    output = proc.stdout + proc.stderr
    assert "INTERNALERROR" not in output, output[-3000:]
    assert proc.returncode == 0, output[-3000:]
    report = json.loads((out / "report.json").read_text())
    why = "unknown: kernel discovery failed at the end of the run: vanishing_kernels:kernels: the vendor extension " \
          "is gone"
    assert report["kernels"] == [{"name": "vanishing", "origin": why}]
    assert f"- kernel vanishing: {why}\n" in (out / "report.md").read_text()


class _Config:
    """What describe_run reads of a pytest config."""

    def __init__(self, **options: Any) -> None:
        self.rtp_ref_layout_flags: dict[str, str] = {}
        self.options = {"rtp_platform": "cpu", "rtp_kernel": [], "rtp_layout": [], "rtp_require_input_checks": False,
                        **options}

    def getoption(self, name: str) -> Any:
        return self.options[name]


@pytest.mark.parametrize(("selected", "names"), [([], ["a", "b"]), (["b"], ["b"])])
def test_a_kernel_that_raises_while_discovered_at_the_end_is_recorded(
        monkeypatch: pytest.MonkeyPatch, selected: list[str], names: list[str]) -> None:
    """Any error of the discovery (a vendor callable's own, too): the kernels are those --kernel selected, else
    those the cases name, each with the reason as its origin."""
    def broken(names: object = None) -> dict[str, object]:
        raise RuntimeError("the vendor's kernel factory needs a GPU")

    monkeypatch.setattr(session, "discover_kernels", broken)
    cases = [{"kernel": "b"}, {"kernel": "a"}, {"kernel": "b"}, {"kernel": None}]
    described = session.describe_run(_Config(rtp_kernel=selected), cases, 0.0)  # type: ignore[arg-type]
    why = ("unknown: kernel discovery failed at the end of the run: RuntimeError: the vendor's kernel factory "
           "needs a GPU")
    assert described["kernels"] == [{"name": name, "origin": why} for name in names]


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

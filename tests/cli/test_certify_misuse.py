"""``rtp-ref certify`` given a selection that leaves nothing to certify on this machine: exit 2 and one line naming
the argument, the value and what is valid, before any work (no report directory appears), instead of a run whose
every case is skipped and whose only finding is a pytest assertion that nothing ran.

Each row is one ``rtp-ref`` process forked from the zygote (tests/zygote.py). The controls beside the refusals
(``--dry-run``: the selection is checked before it prints the pytest command) show the rule refuses only when
NONE of several kernels, tables or layouts leaves a case, and that ``--tier all`` still runs on a CPU host.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from tests.processes import child_env
from tests.zygote import CliZygote

REPO = Path(__file__).resolve().parents[2]
MUTANTS = "tests.mutants.kernels:mutants"
UNBINDABLE = "tests.cli.unbindable_kernels:kernels"
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="on a CUDA host the graph tier has a device")


@dataclass(frozen=True)
class Misuse:
    """One refused selection: ``argv`` after ``rtp-ref certify``, the kernels module(s) it loads, and the texts
    the error line must hold (the first one starts it, after ``rtp-ref: error: ``)."""

    id: str
    argv: tuple[str, ...]
    kernels: str
    says: tuple[str, ...]


MISUSES = [
    Misuse("graph-tier-on-the-cpu-table", ("--platform", "cpu", "--kernel", "reference", "--layout", "auto",
                                           "--tier", "graph"), "",
           ("--tier graph: CUDA graphs need a CUDA device, and ", "valid: --tier regular, large or all")),
    pytest.param(Misuse("graph-tier-on-every-table-without-a-gpu", ("--platform", "all", "--tier", "graph"), "",
                        ("--tier graph: CUDA graphs need a CUDA device, and torch sees none here; valid: --tier "
                         "regular, large or all",)), marks=NO_GPU, id="graph-tier-on-every-table-without-a-gpu"),
    Misuse("stream-tier-on-the-cpu-table", ("--platform", "cpu", "--kernel", "reference", "--tier", "stream"), "",
           ("--tier stream: streams need a CUDA device, and ", "valid: --tier regular, large or all")),
    Misuse("stream-tier-of-a-reader", ("--platform", "cpu", "--kernel", "reference-gather", "--tier", "stream"), "",
           ("--tier stream: its cases are of the ops (concat_and_cache_mla, ", "valid: --tier regular or all")),
    Misuse("large-tier-of-a-reader", ("--platform", "cpu", "--kernel", "reference-gather", "--tier", "large"), "",
           ("--tier large: its cases are of the ops (concat_and_cache_mla, ", "valid: --tier regular or all")),
    Misuse("layout-the-kernel-does-not-claim", ("--platform", "cpu", "--kernel", "mutant-wrong-slot", "--layout",
                                                "fp8"), MUTANTS,
           ("--layout 'fp8': not claimed by --kernel 'mutant-wrong-slot'; valid: a layout it claims (auto, "
            "fp8_ds_mla), or a --kernel that claims fp8 (reference, torch-eager, ",)),
    Misuse("layout-no-kernel-of-several-claims", ("--platform", "cpu", "--kernel", "mutant-wrong-slot", "--kernel",
                                                  "mutant-tile64-in-ds-mla", "--layout", "fp8"), MUTANTS,
           ("--layout 'fp8': not claimed by --kernel 'mutant-wrong-slot', 'mutant-tile64-in-ds-mla'; valid: a layout "
            "they claim (auto, fp8_ds_mla)",)),
    Misuse("emulated-table-without-bind", ("--platform", "rocm-gfx942", "--kernel", "unbindable-cpu-writer"),
           UNBINDABLE,
           ("--kernel 'unbindable-cpu-writer': cannot be certified on platform rocm-gfx942 here (it has no "
            "bind(contract), so it cannot follow an emulated table's contract); valid: --platform cpu (where it can "
            "run here)",)),
    Misuse("emulated-table-and-several-unbindable-kernels", ("--platform", "cuda-sm90", "--kernel",
                                                             "unbindable-cpu-writer", "--kernel",
                                                             "unbindable-cpu-no-write"), UNBINDABLE,
           ("--kernel 'unbindable-cpu-writer', 'unbindable-cpu-no-write': cannot be certified on platform cuda-sm90 "
            "here (unbindable-cpu-writer: it has no bind(contract)", "valid: --platform cpu (where they can run")),
    Misuse("layout-claimed-only-by-a-kernel-that-cannot-run", ("--platform", "rocm-gfx942", "--kernel",
                                                               "unbindable-cpu-writer", "--kernel",
                                                               "mutant-tile64-in-ds-mla", "--layout", "auto"),
           f"{MUTANTS},{UNBINDABLE}",
           ("--layout 'auto': claimed only by selected kernels that cannot run on platform rocm-gfx942 here; valid: a "
            "layout the ones that can (mutant-tile64-in-ds-mla) claim (fp8_ds_mla)",)),
]

#: selections beside the refused ones that leave something to certify (checked with --dry-run)
ACCEPTED = {
    "every-tier-on-the-cpu-table": (("--platform", "cpu", "--kernel", "reference", "--layout", "auto", "--tier",
                                     "all"), ""),
    "one-of-two-kernels-claims-the-layout": (("--platform", "cpu", "--kernel", "mutant-wrong-slot", "--kernel",
                                              "mutant-byte-past-entry", "--layout", "fp8"), MUTANTS),
    "an-unbindable-kernel-on-its-own-table": (("--platform", "cpu", "--kernel", "unbindable-cpu-writer"), UNBINDABLE),
    "an-unbindable-kernel-beside-one-that-binds": (("--platform", "rocm-gfx942", "--kernel", "unbindable-cpu-writer",
                                                    "--kernel", "reference"), UNBINDABLE),
}


def _certify(zygote: CliZygote, argv: tuple[str, ...], kernels: str, tmp_path: Path, *extra: str) -> tuple[
        int, str, str]:
    env = child_env(REPO, **({"RTP_REF_KERNELS": kernels} if kernels else {}))
    done = zygote.run(["certify", *argv, "--report", str(tmp_path / "rep"), *extra], env, tmp_path)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("misuse", [m if not isinstance(m, Misuse) else pytest.param(m, id=m.id) for m in MISUSES])
def test_a_selection_that_leaves_nothing_to_certify_exits_2_with_one_line(misuse: Misuse, tmp_path: Path,
                                                                          cli_zygote: CliZygote) -> None:
    code, stdout, stderr = _certify(cli_zygote, misuse.argv, misuse.kernels, tmp_path)
    assert code == 2, f"exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"rtp-ref: error: {misuse.says[0]}"), lines[0]
    assert all(text in lines[0] for text in misuse.says), lines[0]
    assert stdout == ""
    assert os.listdir(tmp_path) == [], "the refused run wrote to the report directory"


@pytest.mark.parametrize(("argv", "kernels"), list(ACCEPTED.values()), ids=list(ACCEPTED))
def test_a_selection_that_leaves_a_case_is_not_refused(argv: tuple[str, ...], kernels: str, tmp_path: Path,
                                                       cli_zygote: CliZygote) -> None:
    code, stdout, stderr = _certify(cli_zygote, argv, kernels, tmp_path, "--dry-run")
    assert code == 0, f"exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    assert stdout.startswith("pytest ") and stderr == ""


def test_every_table_leaves_out_the_ones_an_unbindable_kernel_cannot_follow(tmp_path: Path,
                                                                           cli_zygote: CliZygote) -> None:
    """With --platform all, an unbindable kernel is certified on the table it can follow here; the others are
    left out with a line each (one child process runs)."""
    code, stdout, stderr = _certify(cli_zygote, ("--platform", "all", "--kernel", "unbindable-cpu-writer"),
                                    UNBINDABLE, tmp_path, "--dry-run")
    assert code == 0 and stderr == "", stderr
    children = [line for line in stdout.splitlines() if " -m rtp_ref.cli certify " in line]
    assert len(children) == 1 and "--platform cpu " in children[0], stdout
    assert "rtp-ref: platform rocm-gfx942: no selected kernel can run against it here: not certified" in stdout

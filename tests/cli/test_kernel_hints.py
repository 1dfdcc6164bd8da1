"""The one-line hints that name a vendor's fix: a kernel that forgets ``op`` although it evidently implements
another op than ``concat_and_cache_mla`` (rtp_ref/kernels/op_hint.py: refused at discovery, so in ``rtp-ref
kernels`` and in certify), and a kernel without ``bind(contract)`` selected against an emulated table
(rtp_ref/certify/selection.py: certify's refusal names both ways out).

The guesses are checked directly on kernels that fit each op and on ones that must get no hint; the commands run as
real processes forked from the zygote (tests/zygote.py), loading tests/cli/hint_kernels.py and
tests/cli/unbindable_kernels.py through ``$RTP_REF_KERNELS``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch

from rtp_ref.certify.selection import BIND_GUIDE
from rtp_ref.kernels.op_hint import likely_ops, missing_op_hint
from rtp_ref.ops import INDEXER_GATHER_OP, INDEXER_OP, MHA_OP, MLA_GATHER_OP
from tests.cli import hint_kernels
from tests.processes import child_env
from tests.zygote import CliRun, CliZygote

REPO = Path(__file__).resolve().parents[2]
HINTS = "tests.cli.hint_kernels"
UNBINDABLE = "tests.cli.unbindable_kernels:kernels"


class _StarIndexer:
    """Claims ``scale_fmts`` with a call Python cannot tell the arity of: either indexer op."""

    name = "star-indexer"
    scale_fmts = ("none",)
    devices = ("cpu",)

    def __call__(self, *args: object) -> None:
        raise NotImplementedError


class _StarMla:
    """MLA claims and a call of any arity: an MLA kernel (the default op), no hint."""

    name = "star-mla"
    kv_cache_dtypes = ("auto", "fp8")
    devices = ("cpu",)

    def __call__(self, *args: object) -> None:
        raise NotImplementedError


class _E5m2Mla(hint_kernels.OplessMla):
    """An MLA call claiming an MHA-only dtype: it fits no op (its claims fail the MLA protocol check as they
    should), so no op is guessed for it."""

    kv_cache_dtypes = ("auto", "fp8_e5m2")


class _IndexerWithOp(hint_kernels.OplessIndexer):
    """``OplessIndexer`` with the wrong ``op`` set: an ``op`` given is never second-guessed."""

    op = MHA_OP


@pytest.mark.parametrize(("kernel", "ops"), [
    (hint_kernels.OplessMha(), (MHA_OP,)),
    (hint_kernels.OplessIndexer(), (INDEXER_OP,)),
    (hint_kernels.OplessGather(), (MLA_GATHER_OP,)),
    (_StarIndexer(), (INDEXER_OP, INDEXER_GATHER_OP)),
    (hint_kernels.OplessMla(), ()),
    (_StarMla(), ()),
    (_E5m2Mla(), ()),
    (hint_kernels.FixedMha(), ()),
    (_IndexerWithOp(), ()),
], ids=["mha-8-args", "indexer-scale-fmts", "gather-by-parameter-names", "indexer-any-arity", "mla",
        "mla-any-arity", "mla-claiming-e5m2", "mha-with-op", "wrong-op-given"])
def test_the_op_a_kernel_without_op_looks_like(kernel: object, ops: tuple[str, ...]) -> None:
    assert likely_ops(kernel) == ops
    hint = missing_op_hint(kernel)
    if not ops:
        assert hint is None
    elif len(ops) == 1:
        assert hint is not None and hint.endswith(f": set op = {ops[0]!r}"), hint
        assert "\n" not in hint
    else:
        assert hint is not None and f"a kernel of {' or '.join(ops)}: set op to the one it implements" in hint


def test_the_hint_names_the_kernel_and_the_evidence() -> None:
    assert missing_op_hint(hint_kernels.OplessMha()) == (
        "kernel 'opless-mha' has no `op`, so it is taken as a concat_and_cache_mla kernel; it looks like a "
        "reshape_and_cache_flash kernel (kv_cache_dtypes auto, fp8; a call of 8 arguments): set op = "
        "'reshape_and_cache_flash'")


def _run(zygote: CliZygote, tmp_path: Path, kernels: str, *argv: str) -> CliRun:
    return zygote.run(list(argv), child_env(REPO, RTP_REF_KERNELS=kernels), tmp_path)


def test_rtp_ref_kernels_names_the_fix_of_each_kernel_without_op(tmp_path: Path, cli_zygote: CliZygote) -> None:
    """Each $RTP_REF_KERNELS item is its own source: each op-less kernel of another op is one problem line with its
    fix, and the MLA kernel without ``op`` is listed as one."""
    items = ",".join(f"{HINTS}:{attr}" for attr in ("mha", "indexer", "gather", "mla"))
    done = _run(cli_zygote, tmp_path, items, "kernels", "--json")
    assert done.returncode == 1, done.stderr
    listed = json.loads(done.stdout)
    fixes = {problem.split("'")[1]: problem.rsplit(": ", 1)[1] for problem in listed["problems"]}
    assert fixes == {f"{HINTS}:mha": f"set op = {MHA_OP!r}", f"{HINTS}:indexer": f"set op = {INDEXER_OP!r}",
                     f"{HINTS}:gather": f"set op = {MLA_GATHER_OP!r}"}, listed["problems"]
    assert all(p.startswith(f"kernel from RTP_REF_KERNELS item '{HINTS}:") for p in listed["problems"])
    rows = {row["name"]: row for row in listed["kernels"]}
    assert rows["opless-mla"]["op"] == "concat_and_cache_mla"
    assert not {"opless-mha", "opless-indexer", "opless-gather"} & set(rows)
    text = _run(cli_zygote, tmp_path, items, "kernels")
    problems = [line for line in text.stdout.splitlines() if line.startswith("problem: ")]
    assert len(problems) == 3 and all("has no `op`" in line for line in problems), text.stdout


def test_certify_refuses_a_kernel_without_op_with_the_fix_and_takes_it_fixed(tmp_path: Path,
                                                                          cli_zygote: CliZygote) -> None:
    done = _run(cli_zygote, tmp_path, f"{HINTS}:mha", "certify", "--platform", "cpu", "--kernel", "opless-mha",
                "--report", str(tmp_path / "rep"))
    assert done.returncode == 2, f"stdout: {done.stdout}\nstderr: {done.stderr}"
    assert done.stderr.splitlines() == [
        f"rtp-ref: error: kernel from RTP_REF_KERNELS item '{HINTS}:mha' does not satisfy the rtp-ref kernel "
        f"protocol: {missing_op_hint(hint_kernels.OplessMha())}"]
    assert not (tmp_path / "rep").exists()
    fixed = _run(cli_zygote, tmp_path, f"{HINTS}:fixed_mha", "certify", "--platform", "cpu", "--kernel",
                 "fixed-mha", "--report", str(tmp_path / "rep"), "--dry-run")
    assert fixed.returncode == 0 and fixed.stdout.startswith("pytest "), fixed.stderr


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a markdown page's headings."""
    headings = re.findall(r"^#{1,6} (.+)$", page.read_text(encoding="utf-8"), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_certify_names_bind_as_the_fix_of_an_unbindable_kernel_on_an_emulated_table(
        tmp_path: Path, cli_zygote: CliZygote) -> None:
    done = _run(cli_zygote, tmp_path, UNBINDABLE, "certify", "--platform", "cuda-sm90", "--kernel",
                "unbindable-cpu-writer", "--report", str(tmp_path / "rep"))
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.endswith("valid: --platform cpu (where it can run here), or add bind(contract) to "
                         f"unbindable-cpu-writer ({BIND_GUIDE})"), line
    page, anchor = BIND_GUIDE.split("#")
    assert anchor in _anchors(REPO / page), f"{BIND_GUIDE} names no heading of {page}"
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a CUDA host a CUDA-only kernel can run")
def test_no_bind_hint_where_bind_would_not_help(tmp_path: Path, cli_zygote: CliZygote) -> None:
    """A kernel that cannot run here for want of its device gets no bind hint: bind would not make it run."""
    done = _run(cli_zygote, tmp_path, f"{HINTS}:cuda_only", "certify", "--platform", "cpu", "--kernel",
                "cuda-only-mla", "--report", str(tmp_path / "rep"))
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert "(it runs on cuda only, and torch sees no such device here)" in line and "bind" not in line, line

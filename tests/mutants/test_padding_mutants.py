"""The engine padding conventions in a real certify run (docs/conformance.md#padding-conventions): under
``--layout-flag padding_slot=zero`` every write op's writer that stores a padding row in slot 0 fails
``layout.reserved_slot`` on its ``nan_padding`` case, the examples naming the slot and the NaN it stored, while the
built-in writers of every op, which follow the flag, certify bit-exact; and the same mutants pass under the
default convention, where slot 0 is a real slot and their padding tokens carry -1."""

from __future__ import annotations

from pathlib import Path

from tests.deviations import cpu_table_verdict
from tests.mutants.padding_mutants import PADDING_EXPECTED
from tests.mutants.test_mutation_score import certify

BUILTIN = ("reference", "reference-mha", "reference-indexer", "torch-eager", "torch-eager-mha", "torch-eager-indexer")


def _run(tmp_path: Path, name: str, flags: list[str], builtins: tuple[str, ...] = ()) -> dict[str, object]:
    kernels = [cls.name for cls in PADDING_EXPECTED] + list(builtins)
    return certify("cpu", kernels, tmp_path / name, extra=[*flags, "--", "-q"],
                   kernels_env="tests.mutants.padding_mutants:mutants")


def test_reserved_slot_writers_fail_by_name_and_builtins_follow_the_flag(tmp_path: Path) -> None:
    report = _run(tmp_path, "zero", ["--layout-flag", "padding_slot=zero"], BUILTIN)
    assert report["_exit_code"] == 1
    cases = report["cases"]
    assert isinstance(cases, list)
    for cls, check in PADDING_EXPECTED.items():
        failed = [c for c in cases if c.get("kernel") == cls.name and c.get("failed_checks")]
        assert failed, f"{cls.name} passed every case"
        assert {c["kind"] for c in failed} == {"nan_padding"}, [c["case"] for c in failed]
        for c in failed:
            assert check in c["failed_checks"], c["failed_checks"]
            detail = c["checks"][check]
            assert "slot 0 (the reserved padding slot)" in detail and "kernel nan" in detail, detail
    rows = report["summary"]["by_kernel_layout"]  # type: ignore[index]
    builtin = {(r["kernel"], r["layout"]): r["verdict"] for r in rows if r["kernel"] in BUILTIN}
    assert builtin and builtin == {key: cpu_table_verdict(*key) for key in builtin}, builtin
    flags = report["layout_flags"]
    assert isinstance(flags, dict) and flags["padding_slot"] == "zero"


def test_the_same_writers_pass_under_the_negative_convention(tmp_path: Path) -> None:
    # the mutants alone: the built-ins certify under the default convention in every certify run
    report = _run(tmp_path, "negative", [])
    assert report["_exit_code"] == 0, "the mutants follow the negative convention: nothing may fail"
    padding = [c for c in report["cases"] if c.get("kind") == "nan_padding"]  # type: ignore[union-attr]
    assert {c["kernel"] for c in padding} >= {cls.name for cls in PADDING_EXPECTED}
    assert all(c["outcome"] == "passed" for c in padding)

"""Hardening (the out-of-range slot, the empty call) is reported apart from the write; strided inputs, declared
requirements and declared input domains are honoured (all in real certify runs)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.mutants.test_mutation_score import certify, gpu_host_workers

#: these kernels raise at worst: workers only on a GPU host (a launch error there is the device's)
WORKERS = gpu_host_workers(2)

KERNELS = ["hardening-no-slot-check", "hardening-declares-contiguous", "hardening-assumes-contiguous",
           "hardening-launch-error-on-empty", "hardening-declares-rank-limit", "hardening-mha-no-slot-check",
           "reference-mha"]


def _rows(report: dict[str, object]) -> dict[tuple[str, str], dict[str, object]]:
    return {(r["kernel"], r["layout"]): r for r in report["summary"]["by_kernel_layout"]}  # type: ignore[index]


def _cases(report: dict[str, object], kernel: str) -> list[dict[str, object]]:
    cases = report["cases"]
    assert isinstance(cases, list)
    return [c for c in cases if c.get("kernel") == kernel]


def test_input_hardening_and_strided_inputs(tmp_path: Path) -> None:
    report = certify("cpu", KERNELS, tmp_path / "default", extra=["--layout", "auto", "--layout", "fp8", *WORKERS],
                     kernels_env="tests.mutants.hardening:kernels")
    rows = _rows(report)
    # a correct writer that validates nothing is certified for the write, with input checks unchecked, and the
    # report says where the out-of-range write went
    for layout in ("auto", "fp8"):
        row = rows[("hardening-no-slot-check", layout)]
        assert (row["verdict"], row["min_grade"], row["input_checks"]) == ("certified", "bit_exact", "unchecked")
    (bad,) = [c for c in _cases(report, "hardening-no-slot-check") if c.get("kind") == "bad_input"
              and c["layout"] == "auto"]
    # the stray entry: 1152 bytes from the first guard byte (a byte that happens to equal the canary is invisible)
    found = re.fullmatch(r"slot == capacity was accepted and wrote (\d+) byte\(s\) into the guard after kv_cache "
                         r"\(bytes \+0\.\.\+1151\)", str(bad["input_check_detail"]))
    assert found and 1100 < int(found[1]) <= 1152, bad["input_check_detail"]
    # the same for the MHA write: every op that writes through a slot mapping has the case; its stray K and V rows
    # land after each cache, and the reference, which validates its slots, is "validated"
    for layout in ("auto", "fp8"):
        row = rows[("hardening-mha-no-slot-check", layout)]
        assert (row["verdict"], row["min_grade"], row["input_checks"]) == ("certified", "bit_exact", "unchecked")
        assert rows[("reference-mha", layout)]["input_checks"] == "validated"
    (bad,) = [c for c in _cases(report, "hardening-mha-no-slot-check") if c.get("kind") == "bad_input"
              and c["layout"] == "fp8"]
    assert re.fullmatch(r"slot == capacity was accepted and wrote \d+ byte\(s\) into the guard after key_cache "
                        r"\(bytes \+\d+\.\.\+\d+\) and \d+ byte\(s\) into the guard after value_cache "
                        r"\(bytes \+\d+\.\.\+\d+\)", str(bad["input_check_detail"])), bad["input_check_detail"]
    # declared and refused: certified, the refusals listed, never graded as writes
    row = rows[("hardening-declares-contiguous", "auto")]
    assert row["verdict"] == "certified" and row["input_checks"] == "validated"
    assert row["refused"] == ["elem_aligned (contiguous)", "fused (contiguous)", "noncontig (contiguous)"]
    # a declared limit (supports(layout)): the cases past it are refused as declared, never graded as writes
    row = rows[("hardening-declares-rank-limit", "auto")]
    assert row["verdict"] == "certified" and row["min_grade"] == "bit_exact"
    assert row["refused"] == ["random (kv_lora_rank 256: it supports 512 only)"]
    # a kernel that ignores row strides fails exactly the strided cases (inputs strided on the device)
    failed = {c["kind"] for c in _cases(report, "hardening-assumes-contiguous") if c["outcome"] == "failed"}
    assert failed == {"noncontig", "fused", "elem_aligned"}
    assert rows[("hardening-assumes-contiguous", "auto")]["verdict"] == "failed"
    # a correct writer whose empty call leaves a launch error pending (vLLM's and rtp-llm's empty grid) is certified:
    # the error is named in the hardening column, from the 0-token cases, and on no case of the write
    row = rows[("hardening-launch-error-on-empty", "auto")]
    assert (row["verdict"], row["min_grade"], row["hardening"]) == ("certified", "bit_exact", "device error")
    empty = {c["case"]: c for c in _cases(report, "hardening-launch-error-on-empty") if c.get("kind") == "empty"}
    assert sorted(empty) == ["empty-t0-b16-bf16", "empty-t0-b16-fp16"]
    assert all(c["outcome"] == "passed" and "CUDA error: invalid argument" in c["hardening_detail"]
               for c in empty.values()), empty
    assert not any(c.get("failed_checks") for c in _cases(report, "hardening-launch-error-on-empty"))
    assert rows[("hardening-no-slot-check", "auto")]["hardening"] == "clean"
    assert report["_exit_code"] == 1


def test_required_hardening_fails_a_launch_error_on_empty(tmp_path: Path) -> None:
    report = certify("cpu", ["hardening-launch-error-on-empty", "hardening-no-slot-check"], tmp_path,
                     extra=["--layout", "auto", "--require-hardening"], kernels_env="tests.mutants.hardening:kernels")
    rows = _rows(report)
    row = rows[("hardening-launch-error-on-empty", "auto")]
    assert (row["verdict"], row["hardening"], row["failed_checks"]) == ("failed", "device error", ["input.empty_call"])
    # a clean empty call meets the requirement; the bad slot stays reported, not required
    row = rows[("hardening-no-slot-check", "auto")]
    assert (row["verdict"], row["hardening"], row["input_checks"]) == ("certified", "clean", "unchecked")
    assert report["platform"]["require_hardening"] is True and report["_exit_code"] == 1


def test_required_input_checks_fail_an_unchecked_kernel(tmp_path: Path) -> None:
    report = certify("cpu", ["hardening-no-slot-check"], tmp_path, extra=["--layout", "auto", "--require-input-checks"],
                     kernels_env="tests.mutants.hardening:kernels")
    row = _rows(report)[("hardening-no-slot-check", "auto")]
    assert row["verdict"] == "failed" and row["failed_checks"] == ["input.rejects_bad_slot"]
    assert report["_exit_code"] == 1


#: the readers and the MHA write of tests/mutants/hardening.py that refuse what production kernels refuse
DOMAIN_KERNELS = ["hardening-reader-int32-bf16", "hardening-reader-int32-bf16-undeclared",
                  "hardening-reader-fp32-only", "hardening-mha-same-scale-shapes"]


def test_declared_domains(tmp_path: Path) -> None:
    report = certify("cpu", DOMAIN_KERNELS, tmp_path, extra=["--layout", "auto", "--layout", "fp8", *WORKERS],
                     kernels_env="tests.mutants.hardening:kernels")
    rows = _rows(report)
    # vLLM's reader refusals, declared: certified, the domain listed beside the verdict, the refused cases named
    for layout in ("auto", "fp8"):
        row = rows[("hardening-reader-int32-bf16", layout)]
        assert (row["verdict"], row["min_grade"], row["domain"]) == ("certified", "bit_exact",
                                                                      "block_table int32, dst bf16")
        assert "random (block_table int64, declared int32)" in row["refused"]
        assert "random (dst fp32, declared bf16)" in row["refused"]
    markdown = (tmp_path / "report.md").read_text()
    assert "| hardening-reader-int32-bf16 | fp8 | certified for block_table int32, dst bf16 only (refuses " in markdown
    # the same reader without the declaration fails exactly the cases the declared one refused
    refused = {c["case"] for c in _cases(report, "hardening-reader-int32-bf16") if c.get("refused")}
    failed = {c["case"] for c in _cases(report, "hardening-reader-int32-bf16-undeclared") if c["outcome"] == "failed"}
    assert refused == failed and len(refused) >= 6, (refused, failed)
    row = rows[("hardening-reader-int32-bf16-undeclared", "fp8")]
    assert (row["verdict"], row["failed_checks"], row["domain"]) == ("failed", ["support.kernel_raised"], None)
    # a declared domain without what engines pass (a bf16 dst) fails, saying so, although every refusal is declared
    row = rows[("hardening-reader-fp32-only", "fp8")]
    assert (row["verdict"], row["failed_checks"]) == ("failed", ["support.declared_domain"])
    (domain,) = [c for c in _cases(report, "hardening-reader-fp32-only") if c.get("kind") == "domain"]
    assert "leaves out what engines pass: dst bf16 (vLLM gathers DeepSeek's MLA cache into bf16" in \
        domain["checks"]["support.declared_domain"]
    # a write op's domain: vLLM's MHA write refuses k and v scales of different shapes
    row = rows[("hardening-mha-same-scale-shapes", "fp8")]
    assert (row["verdict"], row["domain"]) == ("certified", "scales 0d/head/tensor")
    assert row["refused"] == ["random (scales mixed, declared 0d/head/tensor)"]
    assert report["_exit_code"] == 1

"""Accepted writer conventions (rtp_ref.platform ``[[conventions]]``, rtp_ref.certify.engine): a kernel following AMD
AITER's indexer arithmetic certifies on rocm-gfx942 and rocm-gfx950 with no flag override, its cases naming the
convention; the reference (vLLM's arithmetic, the tables' own flags) certifies beside it with none named; a divisor
no table accepts, and AITER's divisor without AITER's reciprocal multiply, still fail, with the scale search's
answer and the conventions the table accepts. The same AITER kernel fails a copy of the table without the entry,
and the loader refuses entries that are no writer convention.

The kernels are the reference indexer writer under flags each kernel states from its own rule (AITER divides by
its fp8 type's largest value: ``opus::finfo<cache_t>::max()``), not from the table's entry under test.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import torch

from rtp_ref.cases.mha_indexer_cases import indexer_specs
from rtp_ref.certify.engine import Subject, run_case
from rtp_ref.contract import WriteContract
from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.codec import encode
from rtp_ref.kv.flags import IndexerScaleApply, resolve_flags
from rtp_ref.kv.indexer import indexer_layout_for, reference_indexer_k_quant_and_cache, stored_tokens
from rtp_ref.ops import INDEXER_OP
from rtp_ref.platform import Platform, load_platform, parse_platform
from tests.mutants.mha_indexer_mutants import IndexerMutant
from tests.processes import child_env
from tests.zygote import shared_zygote

REPO = Path(__file__).resolve().parents[2]
ROCM = ("rocm-gfx942", "rocm-gfx950")


class _UnderOwnFlags(IndexerMutant):
    """The indexer reference under the flags a kernel's own arithmetic sets (``own_flags``), whatever the table."""

    name: ClassVar[str] = "own-flags-indexer"

    def own_flags(self, contract: WriteContract) -> dict[str, object]:
        """The flags the kernel's arithmetic sets in place of ``contract``'s (none: the reference itself)."""
        return {}

    def __call__(self, k: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor, quant_block_size: int,
                 scale_fmt: str) -> None:
        assert self.contract is not None
        contract = self.contract.under(self.own_flags(self.contract))
        layout = indexer_layout_for(contract, contract.flags, k.shape[1], quant_block_size)
        reference_indexer_k_quant_and_cache(layout, k, kv_cache, slot_mapping, scale_fmt)


class AiterIndexer(_UnderOwnFlags):
    """AITER: ``max(amax, 1e-4) / finfo(cache type).max`` and ``x * (1 / scale)``."""

    name = "aiter-arith-indexer"

    def own_flags(self, contract: WriteContract) -> dict[str, object]:
        return {"fp8_max_divisor": float(contract.element_format.max_value),
                "indexer_scale_apply": IndexerScaleApply.RECIPROCAL_MULTIPLY}


class Divide240Indexer(_UnderOwnFlags):
    """AITER's gfx942 divisor, but dividing as vLLM does: no table lists that pair."""

    name = "divide-240-indexer"

    def own_flags(self, contract: WriteContract) -> dict[str, object]:
        return {"fp8_max_divisor": 240.0}


class Divisor200Indexer(_UnderOwnFlags):
    """A divisor no writer uses."""

    name = "divisor-200-indexer"

    def own_flags(self, contract: WriteContract) -> dict[str, object]:
        return {"fp8_max_divisor": 200.0}


def kernels() -> list[_UnderOwnFlags]:
    """The kernels of this module, for ``RTP_REF_KERNELS``."""
    return [AiterIndexer(), Divisor200Indexer()]


def _run_all(kernel: _UnderOwnFlags, platform: Platform, variant: str) -> list[dict[str, object]]:
    """Every regular case of ``variant`` of ``kernel`` bound to ``platform``'s contract: the case records."""
    contract = WriteContract.for_platform(platform)
    subject = Subject(kernel.name, kernel.bind(contract), INDEXER_OP, "cpu", "native")
    return [run_case(subject, key, contract, platform, None).record for key in indexer_specs(variant)]


def _without_conventions(name: str) -> Platform:
    """A copy of a bundled ROCm table with its ``[[conventions]]`` entry taken out."""
    text = (REPO / "platforms" / f"{name}.toml").read_text()
    cut = re.sub(r"\[\[conventions\]\]\n(?:[a-z]+ = .*\n)+", "", text)
    assert cut != text
    return parse_platform(cut.encode(), f"copy of {name}.toml")


@pytest.mark.parametrize("name", ROCM)
@pytest.mark.parametrize("variant", ["none", "ue8m0"])
def test_aiters_arithmetic_certifies_on_the_rocm_tables_naming_the_convention(name: str, variant: str) -> None:
    records = _run_all(AiterIndexer(), load_platform(name), variant)
    assert [r for r in records if r["outcome"] != "passed"] == []
    named = {r.get("convention") for r in records}
    if (name, variant) == ("rocm-gfx950", "ue8m0"):  # same divisor, power-of-two scales: the same bytes as vLLM's
        assert named == {None}
    else:
        assert "AITER" in named and named <= {"AITER", None}, named


@pytest.mark.parametrize("name", ROCM)
def test_without_the_tables_entry_the_same_kernel_fails(name: str) -> None:
    records = _run_all(AiterIndexer(), _without_conventions(name), "none")
    assert any(r["outcome"] == "failed" for r in records)
    assert all("convention" not in r for r in records)


@pytest.mark.parametrize("name", ROCM)
@pytest.mark.parametrize("variant", ["none", "ue8m0"])
def test_vllms_arithmetic_the_reference_certifies_beside_it_with_no_convention(name: str, variant: str) -> None:
    records = _run_all(_UnderOwnFlags(), load_platform(name), variant)  # no flags of its own: the reference
    assert [r for r in records if r["outcome"] != "passed"] == []
    assert all("convention" not in r for r in records)


@pytest.mark.parametrize("name", ROCM)
def test_a_divisor_no_table_accepts_fails_with_the_scale_search_and_the_accepted_conventions(name: str) -> None:
    records = _run_all(Divisor200Indexer(), load_platform(name), "none")
    failed = [r for r in records if r["outcome"] == "failed"]
    assert failed and all("convention" not in r for r in records)
    diagnosis = str(failed[0]["diagnosis"])
    assert diagnosis.startswith("the scales match no known scale rule"), diagnosis
    assert "; this table also accepts AITER (" in diagnosis and "reciprocal_multiply" in diagnosis, diagnosis


def test_aiters_divisor_without_its_reciprocal_multiply_is_no_accepted_convention() -> None:
    records = _run_all(Divide240Indexer(), load_platform("rocm-gfx942"), "none")
    failed = [r for r in records if r["outcome"] == "failed"]
    assert failed
    assert "divisor 240: e4m3fnuz max, AITER gfx942" in str(failed[0]["diagnosis"])


def test_reciprocal_multiply_is_one_fp32_reciprocal_then_one_fp32_product() -> None:
    gfx942 = load_platform("rocm-gfx942")
    overrides = {"fp8_max_divisor": "240"}
    contract = WriteContract.for_platform(gfx942, overrides)
    divide = indexer_layout_for(contract, contract.flags, 128, 128)
    flags = resolve_flags(gfx942, {**overrides, "indexer_scale_apply": "reciprocal_multiply"})
    multiply = indexer_layout_for(contract, flags, 128, 128)
    assert (divide.scale_apply, multiply.scale_apply) == (IndexerScaleApply.DIVIDE,
                                                          IndexerScaleApply.RECIPROCAL_MULTIPLY)
    k = torch.randn(64, 128, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    written = []
    for layout in (divide, multiply):
        cache = torch.zeros(1, 64, layout.bytes_per_token, dtype=torch.uint8)
        reference_indexer_k_quant_and_cache(layout, k, cache, torch.arange(64), "none")
        written.append(stored_tokens(layout, cache, torch.arange(64))[0])
    assert not torch.equal(*written)  # one rounding or two: some codes differ
    # numpy's own float32 arithmetic, encoded by the codec: x / s for divide, x * float32(1 / s) for the other
    x = k.float().numpy()
    s = np.maximum(np.abs(x).max(axis=1, keepdims=True), np.float32(1e-4)) / np.float32(240)
    for got, want in zip(written, (x / s, x * (np.float32(1) / s)), strict=True):
        assert torch.equal(got, encode(torch.from_numpy(want), divide.element_format, divide.conversion_mode))


@pytest.mark.parametrize(("entry", "says"), [
    ('flags = { cache_fp8_format = "e4m3fn" }', "cache_fp8_format change(s) what a reader sees"),
    ('flags = { no_such_flag = 1.0 }', "unknown layout flag 'no_such_flag'"),
    ('flags = { fp8_max_divisor = -1.0 }', "flag 'fp8_max_divisor' has -1.0"),
    ('flags = {}', "key 'flags' has {}"),
])
def test_the_loader_refuses_an_entry_that_is_no_writer_convention(entry: str, says: str) -> None:
    text = (REPO / "platforms" / "rocm-gfx942.toml").read_text()
    bad = re.sub(r"^flags = \{ fp8_max_divisor = 240.0.*$", entry, text, flags=re.MULTILINE)
    assert bad != text
    with pytest.raises(RtpRefError, match=re.escape(says)):
        parse_platform(bad.encode(), "copy")
    parse_platform(text.encode(), "copy")  # the bundled entry itself loads


@pytest.mark.parametrize(("old", "new", "says"), [
    ('op = "indexer_k_quant_and_cache"', 'op = "cp_gather_indexer_k_quant_cache"', "key 'op' has"),
    ('source = "ROCm/aiter@', 'source = "AITER, cache_kernels.cu line 1357" # ', "key 'source' has"),
])
def test_a_reader_op_or_a_source_without_a_citation_is_refused(old: str, new: str, says: str) -> None:
    text = (REPO / "platforms" / "rocm-gfx942.toml").read_text()
    start = text.index("[[conventions]]")
    bad = text[:start] + text[start:].replace(old, new, 1)
    assert bad != text
    with pytest.raises(RtpRefError, match=re.escape(says)):
        parse_platform(bad.encode(), "copy")


def test_a_real_certify_run_names_the_convention_in_its_report(tmp_path: Path) -> None:
    out = tmp_path / "rep"
    env = child_env(REPO, RTP_REF_KERNELS="tests.certify.test_conventions:kernels")
    proc = shared_zygote().run(["certify", "--platform", "rocm-gfx942", "--kernel", AiterIndexer.name,
                                "--kernel", "reference-indexer", "--report", str(out), "-n", "0"], env, REPO,
                               timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    rows = {(r["kernel"], r["layout"]): r for r in json.loads((out / "report.json").read_text())["summary"][
        "by_kernel_layout"]}
    for variant in ("none", "ue8m0"):
        assert rows[(AiterIndexer.name, variant)]["verdict"] == "certified"
        assert rows[(AiterIndexer.name, variant)]["conventions"] == ["AITER"]
        assert rows[("reference-indexer", variant)]["conventions"] == []
    md = (out / "report.md").read_text()
    assert f"| {AiterIndexer.name} | none | certified (convention: AITER) |" in md, md
    assert "| reference-indexer | none | certified |" in md, md
    failing = shared_zygote().run(["certify", "--platform", "rocm-gfx942", "--kernel", Divisor200Indexer.name,
                                   "--layout", "none", "--report", str(tmp_path / "bad"), "-n", "0"], env, REPO,
                                  timeout=300)
    assert failing.returncode == 1, (failing.stdout + failing.stderr)[-3000:]
    assert "this table also accepts AITER" in (tmp_path / "bad" / "report.md").read_text()


def test_a_table_may_leave_the_scale_apply_flag_out_and_then_divides() -> None:
    text = (REPO / "platforms" / "cpu.toml").read_text()
    assert "indexer_scale_apply" not in text
    assert resolve_flags(load_platform("cpu")).indexer_scale_apply is IndexerScaleApply.DIVIDE
    stated = text.replace("[layout_flags]\n", '[layout_flags]\nindexer_scale_apply = "reciprocal_multiply"\n', 1)
    table = parse_platform(stated.encode(), "copy of cpu.toml")
    assert resolve_flags(table).indexer_scale_apply is IndexerScaleApply.RECIPROCAL_MULTIPLY
    with pytest.raises(RtpRefError, match="valid values: divide, reciprocal_multiply"):
        parse_platform(stated.replace('"reciprocal_multiply"', '"multiply"').encode(), "copy of cpu.toml")

"""Every claim of a bundled platform table cites a source (rtp_ref.platform: ``[sources]``, ``claim_keys``), and
docs/sources.md lists them; the ROCm tables claim no reader their sources do not show.

A claim is each key of ``[fp8]``, ``[hardware]``, ``[layout_flags]`` and ``[layout_bytes]``, each supported layout,
the ``[reader]`` and each ``[[deviations]]``. The checks below are shown failing on copies of a bundled table with
one citation taken out.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rtp_ref.cli import main
from rtp_ref.errors import RtpRefError
from rtp_ref.platform import Platform, all_platforms, load_platform, parse_platform
from tests.platforms import sources_doc

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
GFX942 = (REPO / "platforms" / "rocm-gfx942.toml").read_text()
#: the repositories docs/sources.md names as its sources, written here by hand
KNOWN_REPOSITORIES = {"deepseek-ai/FlashMLA", "vllm-project/vllm", "ROCm/aiter", "alibaba/rtp-llm",
                      "sgl-project/sglang", "ROCm/ATOM", "vllm-project/FlashMLA", "local-inference-lab/vllm",
                      "ROCm/composable_kernel", "local-inference-lab/b12x"}


def uncited(platforms: list[Platform]) -> list[str]:
    """``platform: claim`` for every claim that cites no source."""
    return [f"{p.name}: {claim}" for p in platforms for claim in p.uncited_claims()]


def _gfx942_without(line_start: str) -> Platform:
    """The bundled gfx942 table with the one line starting ``line_start`` taken out."""
    lines = GFX942.splitlines(keepends=True)
    kept = [line for line in lines if not line.startswith(line_start)]
    assert len(kept) == len(lines) - 1, line_start
    return parse_platform("".join(kept).encode(), "copy of rocm-gfx942.toml")


def test_every_bundled_claim_cites_a_source() -> None:
    assert uncited(all_platforms()) == []


@pytest.mark.parametrize(("line_start", "claim"), [
    ('"layout_bytes.fp8_ds_mla" = ', "layout_bytes.fp8_ds_mla"),
    ('"layout_flags.fp8_max_divisor" = ', "layout_flags.fp8_max_divisor"),
    ('"layouts.fp8_rocm_compact" = ', "layouts.fp8_rocm_compact"),
    ('"fp8.element_format" = ', "fp8.element_format"),
])
def test_a_copy_with_one_citation_removed_fails_the_check(line_start: str, claim: str) -> None:
    copy = _gfx942_without(line_start)
    assert uncited([copy]) == [f"rocm-gfx942: {claim}"]
    with pytest.raises(AssertionError):
        assert uncited([copy]) == []


def test_a_reader_or_deviation_source_without_a_citation_is_uncited() -> None:
    reader = re.search(r'^source = "ROCm/aiter@.*$', GFX942, re.MULTILINE)
    assert reader is not None
    text = GFX942.replace(reader.group(0), 'source = "ROCm/aiter mla_decode_fwd"')
    text = text.replace("docs/sources.md#torchs-own-fp8-casts-by-build (", "(")
    copy = parse_platform(text.encode(), "copy of rocm-gfx942.toml")
    assert uncited([copy]) == ["rocm-gfx942: reader", "rocm-gfx942: deviations.2"]


@pytest.mark.parametrize(("old", "new", "message"), [
    ('"layout_bytes.fp8_ds_mla" = ', '"layout_bytes.fp8_model1_mla" = ',
     r"\[sources\]: key 'layout_bytes.fp8_model1_mla' names no claim of this table; valid keys: fp8.element_format"),
    ('"layout_flags.fp8_max_divisor" = "vllm-project/vllm@00eb0c874eb5:csrc/libtorch_stable/cache_kernels.cu#L32-36"',
     '"layout_flags.fp8_max_divisor" = "vLLM PR #32976"',
     r"\[sources\] 'layout_flags.fp8_max_divisor': 'vLLM PR #32976' is not a citation; valid: one or a list of "
     r"owner/repo@commit:path\[#Lfirst\[-last\]\] or docs/PAGE.md#anchor"),
    ('"layout_bytes.auto" = "vllm-project/vllm@00eb0c874eb5:', '"layout_bytes.auto" = "vllm-project/vllm@main:',
     r"'vllm-project/vllm@main:csrc/libtorch_stable/cache_kernels.cu' is not a citation"),
    ('"hardware.triton_fp8_conversion" = "docs/sources.md#hardware-fp8-conversion-instructions"',
     '"hardware.triton_fp8_conversion" = []', r"'hardware.triton_fp8_conversion': \[\] is not a citation"),
])
def test_a_malformed_sources_table_is_refused(old: str, new: str, message: str) -> None:
    assert old in GFX942
    with pytest.raises(RtpRefError, match=message):
        parse_platform(GFX942.replace(old, new).encode(), "copy.toml")


def test_a_users_table_without_sources_loads_and_lists_its_uncited_claims(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "rocm-gfx942.toml"
    path.write_text(GFX942[: GFX942.index("[sources]")])
    platform = load_platform(str(path))
    assert platform.supported_layouts == load_platform("rocm-gfx942").supported_layouts
    assert "layouts.fp8_ds_mla" in platform.uncited_claims() and "reader" not in platform.uncited_claims()
    assert main(["platforms", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "sources:         4 of 30 claims cite one; without a source: fp8.element_format, " in out
    assert main(["platforms", "show", "rocm-gfx942"]) == 0
    assert "sources:         30 of 30 claims cite one\n" in capsys.readouterr().out


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a markdown page's headings."""
    headings = re.findall(r"^#{1,6} (.+)$", page.read_text(encoding="utf-8"), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_cited_docs_heading_exists_and_every_repository_is_a_named_source() -> None:
    cited = {c for p in all_platforms() for cites in p.citations.values() for c in cites}
    docs = [c for c in cited if c.startswith("docs/")]
    assert docs
    for citation in docs:
        page, anchor = citation.split("#")
        assert anchor in _anchors(REPO / page), citation
    repositories = {c.split("@")[0] for c in cited if not c.startswith("docs/")}
    assert repositories and repositories <= KNOWN_REPOSITORIES
    named = re.search(r"Repositories named below: (.+?)\.\n", (DOCS / "sources.md").read_text(), re.DOTALL)
    assert named is not None and repositories <= set(re.findall(r"`([\w.-]+/[\w.-]+)`", named.group(1)))


def test_the_anchor_check_catches_a_heading_that_is_gone() -> None:
    assert "what-aiters-mla-decode-reads" in _anchors(DOCS / "sources.md")
    assert "what-aiter-reads" not in _anchors(DOCS / "sources.md")


def test_docs_sources_lists_every_claim_as_the_tables_cite_it() -> None:
    """Regenerate with ``python -m tests.platforms.sources_doc`` after changing a table's claims or sources."""
    platforms = all_platforms()
    listed = sources_doc.current((DOCS / "sources.md").read_text(encoding="utf-8"))
    assert listed == sources_doc.render(platforms)
    for p in platforms:
        for claim in p.citations:
            assert f"| `{claim}` |" in listed.split(f"### {p.name}\n")[1].split("###")[0], (p.name, claim)
    stale = sources_doc.render([_gfx942_without('"layout_bytes.fp8_ds_mla" = ') if p.name == "rocm-gfx942" else p
                                for p in platforms])
    assert stale != listed and "| `layout_bytes.fp8_ds_mla` | `656` | **none** |" in stale


def test_the_rocm_readers_are_aiters_and_read_no_token_interleaved_ds_mla() -> None:
    """AITER's mla_decode_fwd reads fp8_rocm_compact (op_tests/test_mla_sparse.py, asm_mla.cu 816-829) and, on
    gfx942, the page-segmented ds3.2 cache; no AITER reader of the 656-byte token-interleaved fp8_ds_mla exists."""
    for name, page in (("rocm-gfx942", True), ("rocm-gfx950", False)):
        reader = load_platform(name).reader
        assert reader is not None and reader.name == "AITER mla_decode_fwd"
        assert "fp8_ds_mla" not in reader.reads and "fp8_rocm_compact" in reader.reads
        assert ("fp8_ds_mla_3buffer" in reader.reads) is page
        assert "op_tests/test_mla_sparse.py#L539-611" in reader.source
        assert "csrc/py_itfs_cu/asm_mla.cu#L816-829" in reader.source
    for name in ("cuda-sm90", "cuda-sm100"):
        reader = load_platform(name).reader
        assert reader is not None and set(reader.reads) == {"fp8_ds_mla", "fp8_model1_mla"}


def test_a_reader_may_read_only_layouts_that_exist() -> None:
    bad = GFX942.replace('reads = ["fp8", "fp8_rocm_compact", "fp8_ds_mla_3buffer"]', 'reads = ["fp8_ds_mla_4buffer"]')
    with pytest.raises(RtpRefError, match=r"\[reader\]: key 'reads' has \['fp8_ds_mla_4buffer'\]; unknown"):
        parse_platform(bad.encode(), "copy.toml")


def test_fp4_conversion_is_data_and_refuses_an_unknown_format(capsys: pytest.CaptureFixture[str]) -> None:
    """The tables of targets with an E2M1 conversion instruction say so; others list none; `platforms show`
    prints both conversions."""
    assert {p.name: p.fp4_conversion for p in all_platforms()} == {
        "cpu": (), "cuda-sm90": (), "cuda-sm100": ("e2m1",), "cuda-sm120": ("e2m1",), "rocm-gfx942": (),
        "rocm-gfx950": ("e2m1",)}
    with pytest.raises(RtpRefError, match=r"fp4_conversion.*unknown \['mxfp4'\]; valid values: e2m1"):
        parse_platform(GFX942.replace("fp4_conversion = []", 'fp4_conversion = ["mxfp4"]').encode(), "copy.toml")
    assert main(["platforms", "show", "cuda-sm100"]) == 0
    assert "  conversion:      fp8 e4m3fn, e5m2 in one instruction, fp4 e2m1 (else in software)\n" in \
        capsys.readouterr().out

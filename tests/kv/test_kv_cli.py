"""``rtp-ref layouts`` and ``rtp-ref golden`` through the real entry point (and a real subprocess for
golden determinism); golden contents checked with the tests' own byte walk."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from rtp_ref.cli import main
from tests.kv import oracle

DOCS = Path(__file__).resolve().parents[2] / "docs" / "layouts.md"


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def by_name(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {layout["name"]: layout for layout in document["layouts"]}


def test_rocm_and_cuda_print_different_fp8_tables(capsys: pytest.CaptureFixture[str]) -> None:
    rocm = run_json(capsys, "layouts", "--platform", "rocm-gfx942", "--json")
    cuda = run_json(capsys, "layouts", "--platform", "cuda-sm90", "--json")
    assert (rocm["fp8_format"], cuda["fp8_format"]) == ("e4m3fnuz", "e4m3fn")
    assert (rocm["sparse_fp8_layout"], cuda["sparse_fp8_layout"]) == ("fp8_rocm_compact", "fp8_ds_mla")
    rocm_ds, cuda_ds = by_name(rocm)["fp8_ds_mla"], by_name(cuda)["fp8_ds_mla"]
    assert rocm_ds["fields"][0]["element"] == "e4m3fnuz" and cuda_ds["fields"][0]["element"] == "e4m3fn"
    rocm_scale, cuda_scale = rocm_ds["fields"][1]["tile_scale"], cuda_ds["fields"][1]["tile_scale"]
    assert (rocm_scale["rule"], rocm_scale["divisor"]) == ("amax_div", 224.0)
    assert (cuda_scale["rule"], cuda_scale["divisor"], cuda_scale["floor"]) == ("pow2_ceil", 448.0, 1e-4)
    assert (by_name(rocm)["fp8_rocm_compact"]["supported"], by_name(cuda)["fp8_rocm_compact"]["supported"]) == (
        True,
        False,
    )
    for document in (rocm, cuda):  # every layout, the described ones last, with the byte counts of the sources
        assert list(by_name(document)) == list(oracle.LAYOUTS + oracle.DESCRIBED)
        assert [name for name, layout in by_name(document).items() if layout["described"]] == list(oracle.DESCRIBED)
        for name, layout in by_name(document).items():
            r, p = oracle.default_dims(name)
            assert layout["bytes_per_token"] == oracle.bytes_per_token(name, r, p)
            assert layout["bytes_per_block"] == 64 * layout["bytes_per_token"]
    rocm_text = _text(capsys, "layouts", "--platform", "rocm-gfx942")
    cuda_text = _text(capsys, "layouts", "--platform", "cuda-sm90")
    assert "max(amax/224, 1.17549e-38)" in rocm_text and "e4m3fnuz" in rocm_text
    assert "2^ceil(log2(max(amax/448, 0.0001)))" in cuda_text and "e4m3fnuz" not in cuda_text


def _text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_a_page_segmented_layout_shows_its_page_map(capsys: pytest.CaptureFixture[str]) -> None:
    """AITER's ds3.2 page at B = 64, offsets by hand: latent of token t at 512 t, its scales at 64 * 512 + 16 t, its
    rope at 64 * 528 + 128 t; read by gfx942's reader, not by gfx950's, certified by no op."""
    out = _text(capsys, "layouts", "--platform", "rocm-gfx942", "--layout", "fp8_ds_mla_3buffer")
    assert "fp8_ds_mla_3buffer  R=512 P=64: 656 B/token, 41984 B/block of 64 tokens  [described; certified by no " \
           "op; read by rocm-gfx942's reader]" in out
    assert re.search(r"^\s+0\s+512\s+e4m3fnuz\s+page_segment\s+nope\s", out, re.MULTILINE)
    for line in ("nope        0 + 512 t  (512 bytes)", "nope_scale  32768 + 16 t  (16 bytes)",
                 "rope        33792 + 128 t  (128 bytes)"):
        assert f"    {line}" in out
    gfx950 = by_name(run_json(capsys, "layouts", "--platform", "rocm-gfx950", "--json"))["fp8_ds_mla_3buffer"]
    assert (gfx950["supported"], gfx950["described"], gfx950["read_by_reader"]) == (False, True, False)
    assert [(m["field"], m["start"], m["per_token"]) for m in gfx950["page_map"]] == [
        ("nope", 0, 512), ("nope_scale", 32768, 16), ("rope", 33792, 128)]


def test_text_table_rows(capsys: pytest.CaptureFixture[str]) -> None:
    out = _text(capsys, "layouts", "--platform", "cpu", "--layout", "fp8_ds_mla", "--block-size", "16")
    assert "fp8_ds_mla  R=512 P=64: 656 B/token, 10496 B/block of 16 tokens  [supported by cpu]" in out
    assert re.search(r"^\s+512\s+16\s+fp32\s+per_token\s+nope_scale\s+4 x ", out, re.MULTILINE)
    assert "k 512 + v 128 + scale 16 + pad 0 B/token; k + v != block" in out


def test_flags_and_rank_options(capsys: pytest.CaptureFixture[str]) -> None:
    document = run_json(
        capsys,
        "layouts",
        "--platform",
        "cuda-sm90",
        "--layout",
        "fp8_ds_mla",
        "--kv-lora-rank",
        "100",
        "--layout-flag",
        "lora_alignment=round_up",
        "--json",
    )
    assert document["flags"]["lora_alignment"] == "round_up"
    assert by_name(document)["fp8_ds_mla"]["bytes_per_token"] == 100 + 4 + 128


def test_layouts_a_rank_does_not_fit_are_reported_inline(capsys: pytest.CaptureFixture[str]) -> None:
    layouts = by_name(run_json(capsys, "layouts", "--platform", "cpu", "--kv-lora-rank", "100", "--json"))
    assert "lora_alignment=round_up" in layouts["fp8_ds_mla"]["error"]
    assert "supports only kv_lora_rank=448" in layouts["fp8_model1_mla"]["error"]
    assert layouts["fp8"]["bytes_per_token"] == 164


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--layout", "fp8_ds_mla", "--kv-lora-rank", "100"], "kv_lora_rank=100 is not a multiple of 128"),
        (["--layout-flag", "lora_alignment=up"], "flag 'lora_alignment' has 'up'; valid values: strict, round_up"),
        (["--layout-flag", "scale_rule=amax_div"], "unknown layout flag 'scale_rule'; valid flags:"),
        (["--layout-flag", "round_up"], "expected KEY=VALUE"),
        (["--block-size", "0"], "argument --block-size: '0' is not valid; valid: an integer >= 1"),
    ],
)
def test_layouts_bad_input_exits_2(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    try:
        code = main(["layouts", "--platform", "cpu", *argv])
    except SystemExit as stop:  # argparse's own errors (a value its ``type`` refuses) exit from parse_args
        code = stop.code
    assert code == 2
    assert message in capsys.readouterr().err


GOLDEN_TENSORS = ["kv_c", "k_pe", "slot_mapping", "scale", "kv_cache_before", "kv_cache_expected"]


def documented_keys() -> set[str]:
    """Keys named in the first column of docs/layouts.md's golden-file tables."""
    section = DOCS.read_text().split("## Golden files", 1)[1]
    return {
        key
        for cell in re.findall(r"^\| (`[^|]+`) \|", section, re.MULTILINE)
        for key in re.findall(r"`([a-z0-9_]+)`", cell)
    }


@pytest.mark.parametrize(
    ("layout", "platform", "extra"),
    [
        ("fp8_ds_mla", "cuda-sm90", []),
        ("fp8_ds_mla", "rocm-gfx942", ["--input-dtype", "fp16"]),
        ("fp8_model1_mla", "cpu", ["--block-size", "3", "--num-blocks", "5", "--tokens", "13"]),
        ("fp8_rocm_compact", "rocm-gfx942", ["--kv-lora-rank", "256", "--rope-dim", "32"]),
        ("auto", "cpu", ["--tokens", "9"]),
        ("nvfp4_ds_mla_fp8rope", "cpu", ["--tokens", "11"]),
    ],
)
def test_golden_file_holds_inputs_and_the_byte_walked_expected_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], layout: str, platform: str, extra: list[str]
) -> None:
    out = tmp_path / "golden.safetensors"
    assert main(["golden", "--layout", layout, "--platform", platform, "--out", str(out), *extra]) == 0
    assert str(out) in capsys.readouterr().out
    tensors = load_file(str(out))
    with safe_open(str(out), "pt") as handle:
        metadata = handle.metadata()
    assert sorted(tensors) == sorted(GOLDEN_TENSORS)
    assert set(metadata) | set(GOLDEN_TENSORS) == documented_keys()
    assert metadata["layout"] == layout and metadata["platform"] == platform
    r, p, block_size = int(metadata["kv_lora_rank"]), int(metadata["rope_dim"]), int(metadata["block_size"])
    assert int(metadata["bytes_per_token"]) == oracle.bytes_per_token(layout, r, p)
    slots = tensors["slot_mapping"].tolist()
    assert slots[3::4] and all(s == -1 for s in slots[3::4])
    assert len({s for s in slots if s >= 0}) == len([s for s in slots if s >= 0])
    contract = oracle.CONTRACTS[platform]
    before = _bytes(tensors["kv_cache_before"])
    expected = before.copy()
    stride = block_size * oracle.bytes_per_token(layout, r, p)
    scale = float(tensors["scale"][0])
    for i, slot in enumerate(slots):
        if slot < 0:
            continue
        block, t = divmod(slot, block_size)
        entry = oracle.expected_entry(layout, contract, tensors["kv_c"][i], tensors["k_pe"][i], scale)
        for j in oracle.written_entry_bytes(layout, r, p):
            expected[block * stride + oracle.block_position(layout, r, p, block_size, t, j)] = entry[j]
    np.testing.assert_array_equal(_bytes(tensors["kv_cache_expected"]), expected)
    assert (expected != before).any()


def _bytes(tensor: torch.Tensor) -> npt.NDArray[np.uint8]:
    return tensor.contiguous().reshape(-1).view(torch.uint8).numpy()


def _golden_subprocess(path: Path, *extra: str) -> bytes:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "rtp_ref.cli",
            "golden",
            "--layout",
            "fp8_model1_mla",
            "--platform",
            "cpu",
            "--out",
            str(path),
            *extra,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return path.read_bytes()


def test_golden_is_deterministic_across_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = _golden_subprocess(tmp_path / "a.safetensors", "--seed", "5")
    second = _golden_subprocess(tmp_path / "b.safetensors", "--seed", "5")
    assert hashlib.sha256(first).digest() == hashlib.sha256(second).digest()
    in_process = {seed: tmp_path / f"seed{seed}.safetensors" for seed in ("5", "6")}
    for seed, path in in_process.items():
        argv = ["golden", "--layout", "fp8_model1_mla", "--platform", "cpu", "--seed", seed, "--out", str(path)]
        assert main(argv) == 0
    assert in_process["5"].read_bytes() == first
    assert in_process["6"].read_bytes() != first


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tokens", "65"], "tokens=65 do not fit the cache; valid: <= num_blocks x block_size = 64"),
        (["--tokens", "0"], "tokens=0 is not valid; valid: >= 1"),
        (["--kv-lora-rank", "512"], "layout fp8_model1_mla supports only kv_lora_rank=448"),
        (["--layout-flag", "fp8_max_divisor=0"], "valid values: a finite number > 0"),
    ],
)
def test_golden_bad_input_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    out = tmp_path / "never.safetensors"
    assert main(["golden", "--layout", "fp8_model1_mla", "--platform", "cpu", "--out", str(out), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_golden_unwritable_out_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "missing-dir" / "g.safetensors"
    assert main(["golden", "--layout", "fp8", "--platform", "cpu", "--out", str(out)]) == 2
    assert f"--out '{out}' cannot be written" in capsys.readouterr().err


def test_layouts_shows_every_family_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    document = run_json(capsys, "layouts", "--platform", "cuda-sm90", "--json")
    assert document["families"] == ["mla", "mha", "indexer"]
    assert {"layouts", "mha", "indexer"} <= set(document)
    only_mla = run_json(capsys, "layouts", "--platform", "cuda-sm90", "--layout", "fp8", "--json")
    assert only_mla["families"] == ["mla"] and "mha" not in only_mla


def test_the_indexer_family_states_132_bytes_a_token(capsys: pytest.CaptureFixture[str]) -> None:
    indexer = run_json(capsys, "layouts", "--platform", "cuda-sm90", "--family", "indexer", "--json")["indexer"]
    assert (indexer["bytes_per_token"], indexer["head_dim"], indexer["quant_block_size"]) == (132, 128, 128)
    # per block: values first, then the scales (block_size * 128 bytes, then block_size * 4)
    assert (indexer["value_bytes_per_block"], indexer["scale_bytes_per_block"]) == (64 * 128, 64 * 4)
    fields = [(f["name"], f["placement"], f["offset"], f["size"], f["element"], f["scale_field"])
              for f in indexer["fields"]]
    assert fields == [("k", "per_token", 0, 128, "e4m3fn", "k_scale"),
                      ("k_scale", "block_trailing", 0, 4, "fp32", None)]


@pytest.mark.parametrize(("heads", "tp", "head_size", "local"), [(8, 1, 128, 8), (8, 2, 64, 4), (1, 1, 256, 1)])
def test_the_mha_family_states_k_and_v_bytes_for_the_heads(capsys: pytest.CaptureFixture[str], heads: int, tp: int,
                                                           head_size: int, local: int) -> None:
    mha = run_json(capsys, "layouts", "--platform", "rocm-gfx942", "--family", "mha", "--num-kv-heads", str(heads),
                   "--tp-size", str(tp), "--head-size", str(head_size), "--json")["mha"]
    assert mha["local_kv_heads"] == local
    rows = {r["kv_cache_dtype"]: r for r in mha["layouts"]}
    assert rows["auto"]["k_bytes_per_token"] == rows["auto"]["v_bytes_per_token"] == local * head_size * 2
    assert rows["fp8"]["k_bytes_per_token"] == local * head_size and rows["fp8"]["element"] == "e4m3fnuz"
    assert rows["fp8_e5m2"]["element"] == "e5m2"
    # each variant's field table: K in key_cache, V in value_cache, each at byte 0 of its token's row; the fp8
    # variants name their external scale argument
    for name, element, size in (("auto", "bf16/fp16", 2), ("fp8", "e4m3fnuz", 1), ("fp8_e5m2", "e5m2", 1)):
        fields = {f["name"]: f for f in rows[name]["fields"]}
        scales = {"key": "k_scale", "value": "v_scale"} if size == 1 else {"key": None, "value": None}
        for field, cache in (("key", "key_cache"), ("value", "value_cache")):
            assert (fields[field]["area"], fields[field]["placement"], fields[field]["offset"],
                    fields[field]["size"], fields[field]["element"], fields[field]["scale_field"]) == (
                cache, "per_token", 0, local * head_size * size, element, scales[field])
        assert {n for n, f in fields.items() if f["placement"] == "external"} == (
            {"k_scale", "v_scale"} if size == 1 else set())

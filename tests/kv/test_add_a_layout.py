"""A new MLA layout is one record: a TOML table named by ``$RTP_REF_LAYOUTS`` adds it, with no code change, to
``rtp-ref layouts`` and to ``rtp-ref certify`` (the reference and torch-eager are certified on it), and a
mistaken record is refused with one line (docs/layouts.md "Adding a layout" says how to write one)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.processes import child_env
from tests.zygote import shared_zygote

REPO = Path(__file__).resolve().parents[2]
#: a made-up layout: fp8 nope in 64-value tiles, each tile's power-of-two fp32 scale inline, 16-bit rope
RECORD = """\
[[layout]]
name = "fp8_tile64_inline"
summary = "nope fp8 in tiles of 64 with inline fp32 power-of-two scales, 16-bit rope"
kv_split = "k + v != block: the inline scales belong to neither k nor v"
sources = "a layout made up for tests/kv/test_add_a_layout.py"
extra_certified_dims = [[256, 32]]
tile_rule = { tile = 64, rule = "pow2_ceil", floor = 1e-4 }
non_finite = { nan = "undefined", inf = "undefined", zero_tile = "scale 2^-13, values 0", source = "made up" }
fields = [
  { name = "nope", source = "kv_c", element = "fp8", count = "R", scale = "nope_scale" },
  { name = "nope_scale", source = "scale", element = "fp32", count = "tiles", note = "one per 64 nope values" },
  { name = "rope", source = "k_pe", element = "bf16/fp16", count = "P" },
]
"""
#: bytes per token at R 512, P 64, worked out by hand: 512 fp8 + 8 fp32 scales + 64 bf16
BYTES = 512 + 8 * 4 + 64 * 2


def _platform(tmp_path: Path) -> Path:
    """The CPU table under another name, supporting the new layout as well (its bytes stated by hand)."""
    text = (REPO / "platforms" / "cpu.toml").read_text().replace('name = "cpu"', 'name = "cpu-tile64"')
    text = text.replace('supported = ["auto",', 'supported = ["fp8_tile64_inline", "auto",')
    text = text.replace("[layout_bytes]\n", f"[layout_bytes]\nfp8_tile64_inline = {BYTES}\n")
    path = tmp_path / "cpu-tile64.toml"
    path.write_text(text)
    return path


def _table(tmp_path: Path, text: str) -> dict[str, str]:
    table = tmp_path / "layouts.toml"
    table.write_text(text)
    return child_env(REPO, RTP_REF_LAYOUTS=str(table))


def test_a_layout_record_in_a_table_is_laid_out_and_certified(tmp_path: Path) -> None:
    env = _table(tmp_path, RECORD)
    platform = _platform(tmp_path)
    shown = shared_zygote().run(["layouts", "--platform", str(platform), "--layout", "fp8_tile64_inline", "--json"],
                                env, tmp_path)
    assert shown.returncode == 0, shown.stderr
    (layout,) = json.loads(shown.stdout)["layouts"]
    assert layout["bytes_per_token"] == BYTES
    assert [(f["name"], f["offset"], f["size"]) for f in layout["fields"]] == [
        ("nope", 0, 512), ("nope_scale", 512, 32), ("rope", 544, 128)]
    out = tmp_path / "report"
    done = shared_zygote().run(["certify", "--platform", str(platform), "--report", str(out), "--kernel",
                                "reference", "--kernel", "torch-eager", "--layout", "fp8_tile64_inline", "-n", "0",
                                "--", "-q"],
                               env, tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    rows = {(r["kernel"], r["layout"]): (r["verdict"], r["min_grade"])
            for r in report["summary"]["by_kernel_layout"] if r["kernel"] not in ("-", "(suite)")}
    assert rows == {("reference", "fp8_tile64_inline"): ("certified", "bit_exact"),
                    ("torch-eager", "fp8_tile64_inline"): ("certified", "bit_exact")}
    # the published report names the table the layout came from, by its bytes
    table = tmp_path / "layouts.toml"
    assert report["environment"]["layout_table"] == {
        "path": str(table), "sha256": hashlib.sha256(table.read_bytes()).hexdigest(), "layouts": ["fp8_tile64_inline"]}


BAD = [
    (RECORD.replace('count = "R"', 'count = "Q"'), "count = 'Q'; valid: 'R', 'P', 'tiles' or an integer >= 1"),
    (RECORD.replace('name = "fp8_tile64_inline"', 'name = "fp8_ds_mla"'), "name 'fp8_ds_mla' is taken"),
    (RECORD.replace('rule = "pow2_ceil"', 'rule = "nearest"'), "rule = 'nearest'; valid: amax_div, pow2_ceil"),
    (RECORD.replace(', scale = "nope_scale"', ""), "fp8 field 'nope' declares no scale field (scale = None)"),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=["count", "taken", "rule", "no-scale"])
def test_a_mistaken_layout_record_is_refused_with_one_line(tmp_path: Path, text: str, message: str) -> None:
    done = shared_zygote().run(["layouts", "--platform", "cpu", "--json"], _table(tmp_path, text), tmp_path)
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr

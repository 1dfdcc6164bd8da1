"""Layout tables: fields, byte counts and the k + v statements against hand-written byte maps, and the
platform files' [layout_bytes] (a second, hand-written statement) against what the reference derives."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.kv.fields import Placement, Source
from rtp_ref.kv.layout_records import ALL_LAYOUT_NAMES, DESCRIBED_LAYOUT_NAMES
from rtp_ref.kv.layouts import MlaLayout, check_layout_bytes, layout_for_platform
from rtp_ref.platform import MLA_LAYOUT_NAMES, Platform, all_platforms, load_platform
from tests.kv import oracle

REPO = Path(__file__).resolve().parents[2]

# Byte maps at R=512/P=64 (model1 448/64) from the sources, per placement: (field, offset, size, element).
# fp8 elements are the platform's format, written "fp8" here.
SOURCE_MAPS = {
    "auto": {"per_token": [("nope", 0, 1024, "bf16/fp16"), ("rope", 1024, 128, "bf16/fp16")]},
    "fp8": {
        "per_token": [("nope", 0, 512, "fp8"), ("rope", 512, 64, "fp8")],
        "external": [("scale", 0, 4, "fp32")],
    },
    "fp8_ds_mla": {
        "per_token": [("nope", 0, 512, "fp8"), ("nope_scale", 512, 16, "fp32"), ("rope", 528, 128, "bf16/fp16")],
    },
    "fp8_model1_mla": {
        "per_token": [("nope", 0, 448, "fp8"), ("rope", 448, 128, "bf16/fp16")],
        "block_trailing": [("nope_scale", 0, 7, "ue8m0"), ("pad", 7, 1, "pad")],
    },
    "fp8_rocm_compact": {
        "per_token": [("nope", 0, 512, "fp8"), ("rope", 512, 64, "fp8")],
        "external": [("scale", 0, 4, "fp32")],
    },
    # sglang's V4.1 records (PR #39123, KVLayout): a data row of 448 nope + 64 rope values quantized alike, then a
    # scale row of 16 ue8m0 (one per 32) or 32 e4m3 (one per 16) scales, the nope's first
    "V41": {
        "per_token": [("nope", 0, 448, "fp8"), ("rope", 448, 64, "fp8")],
        "block_trailing": [("nope_scale", 0, 14, "ue8m0"), ("rope_scale", 14, 2, "ue8m0")],
    },
    # FlashMLA config.h (PR #18): [0, 256) E2M1 nope, [256, 320) e4m3 rope, [320, 352) e4m3 scales
    "nvfp4_fp8_ds_mla": {
        "per_token": [("nope", 0, 256, "e2m1"), ("rope", 256, 64, "fp8"), ("nope_scale", 320, 32, "e4m3fn")],
    },
    # local-inference-lab/vllm PR #82's 'nvfp4_ds_mla' (concat_and_cache_nvfp4_mla_kernel): [0, 256) E2M1 nope,
    # [256, 288) e4m3 scales, [288, 304) zeros, [304, 432) bf16 rope
    "nvfp4_ds_mla_bf16rope": {
        "per_token": [("nope", 0, 256, "e2m1"), ("nope_scale", 256, 32, "e4m3fn"), ("zero", 288, 16, "pad"),
                      ("rope", 304, 128, "bf16/fp16")],
    },
    # local-inference-lab/b12x PR #35's 'nvfp4_ds_mla' under KV_FP8_ROPE=1 (kv_cache.py): [0, 256) E2M1 nope,
    # [256, 288) e4m3 scales, [288, 292) fp32 rope scale, [292, 304) zeros, [304, 368) e4m3 rope
    "nvfp4_ds_mla_fp8rope": {
        "per_token": [("nope", 0, 256, "e2m1"), ("nope_scale", 256, 32, "e4m3fn"), ("rope_scale", 288, 4, "fp32"),
                      ("zero", 292, 12, "pad"), ("rope", 304, 64, "fp8")],
    },
    "V41_FP4": {
        "per_token": [("nope", 0, 224, "e2m1"), ("rope", 224, 32, "e2m1")],
        "block_trailing": [("nope_scale", 0, 28, "e4m3fn"), ("rope_scale", 28, 4, "e4m3fn")],
    },
    # AITER's ds3.2 page: offsets count a token's bytes over the page segments (latent, scales, rope)
    "fp8_ds_mla_3buffer": {
        "page_segment": [("nope", 0, 512, "fp8"), ("nope_scale", 512, 16, "fp32"), ("rope", 528, 128, "bf16/fp16")],
    },
}
# Whether k + v covers the block, from the byte maps above: only layouts with no scale or pad inside.
K_PLUS_V_IS_BLOCK = {"auto": True, "fp8": True, "fp8_ds_mla": False, "fp8_model1_mla": False, "fp8_rocm_compact": True,
                     "nvfp4_fp8_ds_mla": False, "nvfp4_ds_mla_bf16rope": False, "nvfp4_ds_mla_fp8rope": False,
                     "V41": False, "V41_FP4": False,
                     "fp8_ds_mla_3buffer": False}


def _fields_by_placement(layout: MlaLayout, fp8: str) -> dict[str, list[tuple[str, int, int, str]]]:
    table: dict[str, list[tuple[str, int, int, str]]] = {}
    for f in layout.fields:
        # a value in the cache's fp8 format is "fp8"; V41_FP4's e4m3 scales are OCP e4m3 on every platform
        element = "fp8" if f.element == fp8 and f.source is not Source.SCALE else f.element
        table.setdefault(f.placement.value, []).append((f.name, f.offset, f.size, element))
    return {k: sorted(v, key=lambda row: row[1]) for k, v in table.items()}


def test_every_layout_name_has_a_table() -> None:
    assert MLA_LAYOUT_NAMES == oracle.LAYOUTS
    assert DESCRIBED_LAYOUT_NAMES == oracle.DESCRIBED


@pytest.mark.parametrize("platform_name", ["cpu", "rocm-gfx942"])
@pytest.mark.parametrize("name", ALL_LAYOUT_NAMES)
def test_fields_match_the_sources(name: str, platform_name: str) -> None:
    platform = load_platform(platform_name)
    layout = layout_for_platform(platform, name)
    assert _fields_by_placement(layout, platform.element_format.name) == SOURCE_MAPS[name]


@pytest.mark.parametrize("name", ALL_LAYOUT_NAMES)
def test_byte_counts_are_the_sum_of_the_byte_map(name: str) -> None:
    layout = layout_for_platform(load_platform("cpu"), name)
    rows = [row for placement, rows in SOURCE_MAPS[name].items() if placement != "external" for row in rows]
    size = {field: n for field, _, n, _ in rows}
    assert layout.bytes_per_token == sum(size.values())
    assert layout.bytes_per_block(16) == 16 * sum(size.values())
    assert layout.k_bytes_per_token == size["nope"]
    assert layout.v_bytes_per_token == size["rope"]
    assert layout.scale_bytes_per_token == size.get("nope_scale", 0) + size.get("rope_scale", 0)
    assert layout.pad_bytes_per_token == size.get("pad", 0) + size.get("zero", 0)
    assert layout.written_bytes_per_token == layout.bytes_per_token - size.get("pad", 0)


@pytest.mark.parametrize("name", ALL_LAYOUT_NAMES)
def test_k_plus_v_statement(name: str) -> None:
    layout = layout_for_platform(load_platform("cpu"), name)
    holds = K_PLUS_V_IS_BLOCK[name]
    assert layout.k_plus_v_equals_block is holds
    assert layout.kv_split.startswith("k + v == block" if holds else "k + v != block")
    # why: what k + v misses is exactly the inline/trailing scale and pad bytes
    missing = layout.bytes_per_token - layout.k_bytes_per_token - layout.v_bytes_per_token
    assert missing == layout.scale_bytes_per_token + layout.pad_bytes_per_token


@pytest.mark.parametrize("platform", all_platforms(), ids=lambda p: p.name)
def test_platform_layout_bytes_agree_with_the_reference(platform: Platform) -> None:
    assert set(platform.layout_bytes) == set(platform.supported_layouts)
    for name, stated in platform.layout_bytes.items():
        r, p = oracle.default_dims(name)
        assert stated == layout_for_platform(platform, name).bytes_per_token == oracle.bytes_per_token(name, r, p)


@pytest.mark.parametrize("r", [64, 128, 100, 256, 384, 512, 1000])
@pytest.mark.parametrize("name", ["auto", "fp8", "fp8_ds_mla", "fp8_rocm_compact"])
def test_bytes_per_token_for_other_ranks(name: str, r: int) -> None:
    layout = layout_for_platform(
        load_platform("cpu"), name, kv_lora_rank=r, rope_dim=32, overrides={"lora_alignment": "round_up"}
    )
    assert layout.bytes_per_token == oracle.bytes_per_token(name, r, 32)
    assert {f.name: (layout.entry_offset(f), f.size) for f in layout.entry_fields} == oracle.byte_map(name, r, 32)


def test_cache_tensor_shape_and_dtype() -> None:
    cpu = load_platform("cpu")
    auto = layout_for_platform(cpu, "auto")
    assert auto.cache_shape(3, 16) == (3, 16, 576) and auto.cache_dtype(torch.float16) == torch.float16
    model1 = layout_for_platform(cpu, "fp8_model1_mla")
    assert model1.cache_shape(3, 16) == (3, 16, 584) and model1.cache_dtype(torch.bfloat16) == torch.uint8


def test_every_fp8_value_field_says_where_its_scale_lives() -> None:
    for name in MLA_LAYOUT_NAMES:
        layout = layout_for_platform(load_platform("cpu"), name)
        for source in (Source.KV_C, Source.K_PE):
            f = layout.value_field(source)
            if f.element == "e4m3fn" and name != "nvfp4_fp8_ds_mla":
                assert f.scale_field is not None and layout.field(f.scale_field).source is Source.SCALE
    # the one fp8 value field stored with no scale, FlashMLA's NVFP4 rope, says so
    rope = layout_for_platform(load_platform("cpu"), "nvfp4_fp8_ds_mla").value_field(Source.K_PE)
    assert rope.unscaled and rope.scale_field is None
    compact = layout_for_platform(load_platform("rocm-gfx942"), "fp8_rocm_compact")
    assert compact.external_scale is not None and compact.external_scale.placement is Placement.EXTERNAL
    assert "external per-tensor" in compact.summary and "scale" in compact.kv_split


def test_unknown_layout_lists_the_valid_ones() -> None:
    with pytest.raises(
        RtpRefError,
        match=r"unknown MLA layout 'fp8_compact'; valid layouts: auto, fp8, "
        r"fp8_ds_mla, fp8_model1_mla, fp8_rocm_compact",
    ):
        layout_for_platform(load_platform("cpu"), "fp8_compact")


def test_any_layout_builds_on_any_platform() -> None:
    for platform in all_platforms():
        for name in MLA_LAYOUT_NAMES:
            layout = layout_for_platform(platform, name)
            fp8_fields = [f for f in layout.fields
                          if f.element in ("e4m3fn", "e4m3fnuz") and f.source is not Source.SCALE]
            assert all(f.element == platform.element_format.name for f in fp8_fields)


def test_an_out_of_tree_table_with_wrong_layout_bytes_is_refused(tmp_path: Path) -> None:
    """Bundled tables are checked above; a table given by path is checked when it is used (certify, the suite)."""
    text = (REPO / "platforms" / "cuda-sm90.toml").read_text()
    assert "fp8_ds_mla = 656" in text
    path = tmp_path / "cuda-sm90.toml"
    path.write_text(text.replace("fp8_ds_mla = 656", "fp8_ds_mla = 576"))
    platform = load_platform(str(path))
    check_layout_bytes(load_platform("cuda-sm90"))  # the bundled one agrees
    with pytest.raises(RtpRefError, match=r"\[layout_bytes\]: fp8_ds_mla = 576, but the reference layout fp8_ds_mla "
                                          r"has 656 bytes per token .*valid: fp8_ds_mla = 656"):
        check_layout_bytes(platform)

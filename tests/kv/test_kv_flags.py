"""Layout flags: typed defaults from every platform file, --layout-flag overrides, errors listing what
is valid, and platform files with a wrong flag or [layout_bytes] table refused with file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.scales import FLT_MIN, ScaleRule
from rtp_ref.kv.flags import FLAG_DEFAULTS, FLAG_SPECS, LayoutFlags, LoraAlignment, parse_overrides, resolve_flags
from rtp_ref.platform import Platform, all_platforms, load_platform

REPO_PLATFORMS = Path(__file__).resolve().parents[2] / "platforms"
FLAG_NAMES = [
    "compact_fp8_for_sparse",
    "lora_alignment",
    "ds_mla_scale_rule",
    "ds_mla_scale_floor",
    "model1_scale_floor",
    "fp8_max_divisor",
    "cache_fp8_format",
    "indexer_scale_apply",
    "fp4_value_quotient",
    "fp4_negative_zero",
    "nvfp4_value_quotient",
    "nvfp4_v_scale_order",
    "padding_slot",
]

pytest_plugins = ["pytester"]


def test_the_registry_is_the_flags_dataclass() -> None:
    assert list(FLAG_SPECS) == FLAG_NAMES
    assert [spec.kind.value for spec in FLAG_SPECS.values()] == [
        "bool",
        "choice",
        "choice",
        "number",
        "number",
        "number",
        "choice",
        "choice",
        "choice",
        "choice",
        "choice",
        "choice",
        "choice",
    ]


def test_defaults_come_typed_from_the_platform_file() -> None:
    gfx942 = resolve_flags(load_platform("rocm-gfx942"))
    assert gfx942 == LayoutFlags(True, LoraAlignment.STRICT, ScaleRule.AMAX_DIV, FLT_MIN, 1e-4, 224.0, "platform")
    sm90 = resolve_flags(load_platform("cuda-sm90"))
    assert sm90 == LayoutFlags(False, LoraAlignment.STRICT, ScaleRule.POW2_CEIL, 1e-4, 1e-4, 448.0, "platform")
    assert gfx942.as_dict()["ds_mla_scale_rule"] == "amax_div"
    assert sm90.as_text().startswith("compact_fp8_for_sparse=false, lora_alignment=strict, ")


def test_overrides_are_typed_and_later_ones_win() -> None:
    overrides = parse_overrides(
        [
            "lora_alignment=strict",
            "lora_alignment = round_up",
            "fp8_max_divisor=240",
            "compact_fp8_for_sparse=TRUE",
            "ds_mla_scale_floor=1.17549435e-38",
        ]
    )
    flags = resolve_flags(load_platform("cuda-sm90"), overrides)
    assert flags.lora_alignment is LoraAlignment.ROUND_UP
    assert flags.fp8_max_divisor == 240.0 and flags.compact_fp8_for_sparse is True
    assert flags.ds_mla_scale_floor == 1.17549435e-38
    assert flags.ds_mla_scale_rule is ScaleRule.POW2_CEIL  # untouched: the platform's value


@pytest.mark.parametrize(("overrides", "fmt", "divisor"), [
    ({}, "e4m3fnuz", 224.0),
    ({"cache_fp8_format": "e4m3fn"}, "e4m3fn", 448.0),  # the clamp follows the cache's format
    ({"cache_fp8_format": "e4m3fnuz"}, "e4m3fnuz", 224.0),  # the platform's own: its flag stands
    ({"cache_fp8_format": "e4m3fn", "fp8_max_divisor": "300"}, "e4m3fn", 300.0),  # an explicit divisor wins
])
def test_a_cache_keeps_its_own_fp8_format(overrides: dict[str, str], fmt: str, divisor: float) -> None:
    """DeepSeek V4 on MI300 keeps one cache in e4m3fnuz and another in e4m3fn: each cache's flags name its
    format, and its divisor is that format's largest value unless a divisor is given too."""
    gfx942 = load_platform("rocm-gfx942")
    flags = resolve_flags(gfx942, overrides)
    assert (flags.cache_format(gfx942.element_format).name, flags.fp8_max_divisor) == (fmt, divisor)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "lora_alignmnet=round_up",
            r"--layout-flag: unknown layout flag 'lora_alignmnet'; valid flags: "
            r"compact_fp8_for_sparse, lora_alignment, ds_mla_scale_rule",
        ),
        ("lora_alignment=ceil", r"flag 'lora_alignment' has 'ceil'; valid values: strict, round_up"),
        ("ds_mla_scale_rule=pow2", r"valid values: amax_div, pow2_ceil"),
        ("compact_fp8_for_sparse=maybe", r"flag 'compact_fp8_for_sparse' has 'maybe'; valid values: true or false"),
        ("fp8_max_divisor=-448", r"flag 'fp8_max_divisor' has '-448'; valid values: a finite number > 0"),
        ("fp8_max_divisor=nan", r"valid values: a finite number > 0"),
        ("ds_mla_scale_floor=inf", r"valid values: a finite number > 0"),
        ("model1_scale_floor=tiny", r"flag 'model1_scale_floor' has 'tiny'"),
    ],
)
def test_bad_override_lists_what_is_valid(override: str, message: str) -> None:
    with pytest.raises(RtpRefError, match=message):
        resolve_flags(load_platform("cpu"), parse_overrides([override]))


def test_override_syntax() -> None:
    with pytest.raises(RtpRefError, match=r"--layout-flag 'round_up': expected KEY=VALUE"):
        parse_overrides(["round_up"])


@pytest.mark.parametrize("platform", all_platforms(), ids=lambda p: p.name)
def test_every_platform_file_states_every_flag_without_a_default(platform: Platform) -> None:
    # indexer_scale_apply, the FP4 flags and padding_slot have defaults (the sources' conventions, vLLM's padding): a
    # table states them only to differ (tests/certify/test_conventions.py)
    required = [name for name in FLAG_NAMES if name not in FLAG_DEFAULTS]
    assert [name for name in platform.layout_flags if name in required] == required
    # a flag with a default is stated only where the table's value differs (cuda-sm120's V-scale order)
    assert all(value != FLAG_DEFAULTS[name] for name, value in platform.layout_flags.items() if name not in required)
    assert FLAG_DEFAULTS == {"indexer_scale_apply": "divide", "fp4_value_quotient": "ieee_div",
                             "fp4_negative_zero": "keep", "nvfp4_value_quotient": "reciprocal_mul",
                             "nvfp4_v_scale_order": "swizzled_4_token", "padding_slot": "negative"}


def _variant(tmp_path: Path, old: str, new: str) -> Path:
    text = (REPO_PLATFORMS / "cpu.toml").read_text()
    assert old in text, old
    path = tmp_path / "cpu.toml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "lora_alignment = ",
            "lora_alignmnet = ",
            r"\[layout_flags\]: unknown layout flag 'lora_alignmnet'; "
            r"valid flags: compact_fp8_for_sparse",
        ),
        ('lora_alignment = "strict"\n', "", r"\[layout_flags\]: missing layout flag\(s\) lora_alignment"),
        ('lora_alignment = "strict"', "lora_alignment = 3", r"flag 'lora_alignment' has 3; valid values: strict"),
        ("compact_fp8_for_sparse = false", 'compact_fp8_for_sparse = "no"', r"valid values: true or false"),
        ("fp8_max_divisor = 448.0", "fp8_max_divisor = 0", r"flag 'fp8_max_divisor' has 0; valid values: a finite"),
        ("fp8_max_divisor = 448.0", "fp8_max_divisor = true", r"flag 'fp8_max_divisor' has True"),
        (
            "fp8_rocm_compact = 576",
            "",
            r"\[layout_bytes\]: must state the bytes per token of exactly the supported "
            r"layouts; missing: fp8_rocm_compact; not supported: none",
        ),
        (
            "fp8_rocm_compact = 576",
            "fp8_rocm_compact = 576.0",
            r"\[layout_bytes\]: key 'fp8_rocm_compact' has "
            r"576.0; expected a integer",
        ),
        ("fp8 = 576", "fp8 = 0", r"\[layout_bytes\]: key 'fp8' has 0; must be > 0"),
        ("fp8 = 576", "fp8_ds_mla_v2 = 576", r"\[layout_bytes\]: unknown key 'fp8_ds_mla_v2'"),
    ],
)
def test_platform_file_with_a_bad_flag_or_byte_table_names_file_and_key(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    path = _variant(tmp_path, old, new)
    with pytest.raises(RtpRefError, match=message) as info:
        load_platform(str(path))
    assert str(path) in str(info.value)


def test_layout_bytes_of_an_unsupported_layout_is_refused(tmp_path: Path) -> None:
    path = _variant(tmp_path, ', "V41_FP4"]', "]")
    with pytest.raises(RtpRefError, match=r"missing: none; not supported: V41_FP4"):
        load_platform(str(path))


INNER_TEST = """
from rtp_ref.kv.flags import resolve_flags

def test_flags(rtp_platform, layout_flag_overrides):
    print("RESOLVED", resolve_flags(rtp_platform, layout_flag_overrides).as_text())
"""


def test_pytest_layout_flag_reaches_the_resolved_flags(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(INNER_TEST)
    result = pytester.runpytest(
        "-s",
        "-p",
        "no:cacheprovider",
        "--platform",
        "rocm-gfx942",
        "--layout-flag",
        "lora_alignment=round_up",
        "--layout-flag",
        "fp8_max_divisor=240",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*RESOLVED compact_fp8_for_sparse=true, lora_alignment=round_up, "
            "ds_mla_scale_rule=amax_div, * fp8_max_divisor=240*"
        ]
    )
    bad = pytester.runpytest("-p", "no:cacheprovider", "--layout-flag", "lora_alignment=sometimes")
    bad.assert_outcomes(failed=1)
    bad.stdout.fnmatch_lines(["*flag 'lora_alignment' has 'sometimes'; valid values: strict, round_up*"])

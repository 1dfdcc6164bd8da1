"""Diagnosis a vendor can act on: which contract a failing kernel follows, and examples in failed checks.

Expectations are derived independently of rtp_ref.cases.diagnosis: each "kernel output" is the
reference writer's image under an alternative contract constructed here by hand (or bytes poked into
a correct image through the kv layer's own entry addressing), and each test says which alternative
must be named. The second half checks the examples grading.py puts in a failed check's detail.
"""

from __future__ import annotations

import dataclasses
import struct
import time

import pytest
import torch

from rtp_ref.cases.case_matrix import case_specs
from rtp_ref.cases.cases import CaseInputs, CaseSpec, build_case, cache_view, num_blocks_for
from rtp_ref.cases.diagnosis import MAX_ALTERNATIVES, NUMBER_FLAG_VALUES, Diagnosis, diagnose_contract
from rtp_ref.cases.grading import Grading, grade_write, reference_image
from rtp_ref.contract import WriteContract
from rtp_ref.fp8 import E4M3FN, E4M3FNUZ, ConversionMode, Pow2Rule, encode_ue8m0, quantize_tiles
from rtp_ref.fp8.scales import ScaleRule
from rtp_ref.kv.cache import gather_entries, reference_write, scatter_entries
from rtp_ref.kv.entries import encode_entries, tile_scales
from rtp_ref.kv.fields import Source, value_bits
from rtp_ref.kv.flags import FLAG_SPECS, FlagKind
from rtp_ref.kv.layouts import MlaLayout, default_dims
from rtp_ref.platform import load_platform
from tests.mutants.kernels import EXPECTED, Mutant
from tests.mutants.test_examples_every_op import assert_examples_read_well

FLT_MIN = 2.0**-126  # the smallest normal float32, written out rather than imported from the code under test


def contract_of(platform: str) -> WriteContract:
    return WriteContract.for_platform(load_platform(platform))


def with_flags(contract: WriteContract, **changes: object) -> WriteContract:
    return dataclasses.replace(contract, flags=dataclasses.replace(contract.flags, **changes))  # type: ignore[arg-type]


def make_case(contract: WriteContract, layout_name: str, kind: str = "random", dtype: torch.dtype = torch.bfloat16,
              seed: int = 7) -> tuple[MlaLayout, CaseInputs]:
    tokens = 8 if kind == "edge" else 37
    layout = contract.layout(layout_name, *default_dims(layout_name))
    spec = CaseSpec(layout_name, kind, tokens, 16, num_blocks_for(tokens, 16), dtype, seed)
    return layout, build_case(spec, layout, "cpu")


def blocks(inputs: CaseInputs) -> tuple[int, int]:
    """(num_blocks, block_size) of the case's cache."""
    return inputs.kv_cache.shape[0], inputs.kv_cache.shape[1]


def written_under(alt: WriteContract, layout_name: str, inputs: CaseInputs, kv_c: torch.Tensor | None = None,
                  k_pe: torch.Tensor | None = None) -> torch.Tensor:
    """The case storage after the reference writer ran under ``alt`` (optionally on other inputs)."""
    layout = alt.layout(layout_name, *default_dims(layout_name))
    storage = inputs.storage.clone()
    view = cache_view(layout, storage, *blocks(inputs), inputs.kv_c.dtype, inputs.padded_rows)
    reference_write(layout, inputs.kv_c if kv_c is None else kv_c, inputs.k_pe if k_pe is None else k_pe, view,
                    inputs.slot_mapping, inputs.scale)
    return storage


def diagnose(contract: WriteContract, layout_name: str, inputs: CaseInputs, after: torch.Tensor) -> Diagnosis:
    return diagnose_contract(layout_name, default_dims(layout_name), contract, inputs, after)


# ---- diagnose_contract: the alternative a kernel follows -------------------------------------------------

NAMED: list[tuple[str, str, str, torch.dtype, dict[str, object], str]] = [
    # (platform, layout, case kind, input dtype, the alternative's changes, the summary that must come out)
    ("cpu", "fp8_ds_mla", "edge", torch.bfloat16,
     {"ds_mla_scale_rule": ScaleRule.AMAX_DIV, "ds_mla_scale_floor": FLT_MIN},
     "the kernel follows ds_mla_scale_rule=amax_div, ds_mla_scale_floor=FLT_MIN; "
     "this table requires ds_mla_scale_rule=pow2_ceil, ds_mla_scale_floor=0.0001"),
    ("cpu", "fp8_ds_mla", "random", torch.float16, {"ds_mla_scale_rule": ScaleRule.AMAX_DIV},
     "the kernel follows ds_mla_scale_rule=amax_div; this table requires ds_mla_scale_rule=pow2_ceil"),
    ("cpu", "fp8_ds_mla", "random", torch.bfloat16, {"fp8_max_divisor": 224.0},
     "the kernel follows fp8_max_divisor=224; this table requires fp8_max_divisor=448"),
    ("rocm-gfx942", "fp8_ds_mla", "random", torch.bfloat16, {"fp8_max_divisor": 448.0},
     "the kernel follows fp8_max_divisor=448; this table requires fp8_max_divisor=224"),
    ("rocm-gfx942", "fp8_ds_mla", "edge", torch.bfloat16,
     {"ds_mla_scale_rule": ScaleRule.POW2_CEIL, "ds_mla_scale_floor": 1e-4},
     "the kernel follows ds_mla_scale_rule=pow2_ceil, ds_mla_scale_floor=0.0001; "
     "this table requires ds_mla_scale_rule=amax_div, ds_mla_scale_floor=FLT_MIN"),
    ("cpu", "fp8_model1_mla", "edge", torch.bfloat16, {"model1_scale_floor": FLT_MIN},
     "the kernel follows model1_scale_floor=FLT_MIN; this table requires model1_scale_floor=0.0001"),
    ("cpu", "fp8_model1_mla", "random", torch.float16, {"fp8_max_divisor": 224.0},
     "the kernel follows fp8_max_divisor=224; this table requires fp8_max_divisor=448"),
]


@pytest.mark.parametrize(("platform", "layout_name", "kind", "dtype", "changes", "summary"), NAMED,
                         ids=[f"{p}-{layout}-{'+'.join(c)}" for p, layout, _, _, c, _ in NAMED])
def test_names_the_flags_a_kernel_follows(platform: str, layout_name: str, kind: str, dtype: torch.dtype,
                                          changes: dict[str, object], summary: str) -> None:
    contract = contract_of(platform)
    _, inputs = make_case(contract, layout_name, kind, dtype)
    d = diagnose(contract, layout_name, inputs, written_under(with_flags(contract, **changes), layout_name, inputs))
    assert d.summary == summary
    assert not d.follows_platform and d.match is not None and d.scales_match is None
    for name, value in changes.items():
        shown = "FLT_MIN" if value == FLT_MIN else (value.value if isinstance(value, ScaleRule) else f"{value:g}")
        assert f"{name}={shown}" in d.match


@pytest.mark.parametrize("layout_name", ["fp8", "fp8_ds_mla", "fp8_rocm_compact"])
def test_fnuz_bytes_on_an_fn_table_are_named(layout_name: str) -> None:
    contract = contract_of("cpu")
    _, inputs = make_case(contract, layout_name)
    fnuz = dataclasses.replace(contract, element_format=E4M3FNUZ)
    d = diagnose(contract, layout_name, inputs, written_under(fnuz, layout_name, inputs))
    assert d.summary == "the kernel follows element_format=e4m3fnuz; this table requires element_format=e4m3fn"


def test_a_kernel_bound_to_another_platform_table_is_named() -> None:
    rocm = contract_of("rocm-gfx942")
    _, inputs = make_case(rocm, "fp8_ds_mla", "edge")  # the all-zero row makes the floor visible
    # what cuda-sm90's table states: OCP e4m3, FlashMLA's power-of-two scales with floor 1e-4, divisor 448
    cuda = with_flags(dataclasses.replace(rocm, element_format=E4M3FN), ds_mla_scale_rule=ScaleRule.POW2_CEIL,
                      ds_mla_scale_floor=1e-4, fp8_max_divisor=448.0)
    d = diagnose(rocm, "fp8_ds_mla", inputs, written_under(cuda, "fp8_ds_mla", inputs))
    assert d.summary == (
        "the kernel follows element_format=e4m3fn, ds_mla_scale_rule=pow2_ceil, ds_mla_scale_floor=0.0001, "
        "fp8_max_divisor=448; this table requires element_format=e4m3fnuz, ds_mla_scale_rule=amax_div, "
        "ds_mla_scale_floor=FLT_MIN, fp8_max_divisor=224")


def test_a_non_saturating_conversion_is_named() -> None:
    contract = contract_of("cpu")
    _, inputs = make_case(contract, "fp8", "edge")  # the edge case overflows on purpose
    nonsat = dataclasses.replace(contract, conversion_mode=ConversionMode.NONSAT)
    d = diagnose(contract, "fp8", inputs, written_under(nonsat, "fp8", inputs))
    assert d.summary == "the kernel follows conversion_mode=nonsat; this table requires conversion_mode=satfinite"


def _scales_from_bf16_bits(layout: MlaLayout, inputs: CaseInputs) -> torch.Tensor:
    """A kernel that took each tile's amax from the fp16 inputs' bits read as bf16, then divided the
    true fp16 values by those scales: written here from the fp8 primitives, not by the diagnosis."""
    keep = inputs.slot_mapping >= 0
    kv_c, k_pe = inputs.kv_c[keep], inputs.k_pe[keep]
    entries = encode_entries(layout, kv_c, k_pe, inputs.scale)
    nope, s_field = layout.value_field(Source.KV_C), layout.field("nope_scale")
    spec = s_field.tile_scale
    assert spec is not None and nope.count % spec.tile == 0
    scales = tile_scales(kv_c.view(torch.bfloat16), spec)
    codes = quantize_tiles(kv_c.float(), scales, spec.tile, layout.element_format, layout.conversion_mode)
    raw = scales.contiguous().view(torch.uint8) if s_field.element == "fp32" else encode_ue8m0(scales, Pow2Rule.CEIL)
    entries[:, layout.entry_offset(nope):layout.entry_offset(nope) + nope.size] = codes
    entries[:, layout.entry_offset(s_field):layout.entry_offset(s_field) + s_field.size] = raw
    storage = inputs.storage.clone()
    view = cache_view(layout, storage, *blocks(inputs), inputs.kv_c.dtype, inputs.padded_rows)
    scatter_entries(layout, entries, view, inputs.slot_mapping[keep])
    return storage


@pytest.mark.parametrize("layout_name", ["fp8_ds_mla", "fp8_model1_mla"])
def test_fp16_scales_from_bf16_read_bits_are_named(layout_name: str) -> None:
    contract = contract_of("cpu")
    layout, inputs = make_case(contract, layout_name, dtype=torch.float16)
    d = diagnose(contract, layout_name, inputs, _scales_from_bf16_bits(layout, inputs))
    assert d.summary == "the kernel follows scale_inputs_as=bf16; this table requires scale_inputs_as=fp16"


@pytest.mark.parametrize("layout_name", ["fp8", "fp8_ds_mla"])
def test_inputs_read_as_the_other_16bit_type_throughout_are_named(layout_name: str) -> None:
    contract = contract_of("cpu")
    _, inputs = make_case(contract, layout_name, dtype=torch.bfloat16)
    after = written_under(contract, layout_name, inputs, inputs.kv_c.view(torch.float16),
                          inputs.k_pe.view(torch.float16))
    d = diagnose(contract, layout_name, inputs, after)
    tiled = layout_name == "fp8_ds_mla"
    found = "scale_inputs_as=fp16, value_inputs_as=fp16" if tiled else "value_inputs_as=fp16"
    assert d.summary == f"the kernel follows {found}; this table requires {found.replace('fp16', 'bf16')}"


@pytest.mark.parametrize("layout_name", ["auto", "fp8", "fp8_ds_mla", "fp8_model1_mla"])
def test_a_correct_write_follows_the_platform(layout_name: str) -> None:
    contract = contract_of("cpu")
    _, inputs = make_case(contract, layout_name)
    d = diagnose(contract, layout_name, inputs, written_under(contract, layout_name, inputs))
    assert d.follows_platform and d.match is None and d.tried == 0
    assert d.summary == "the kernel's bytes on the footprint follow this table's contract"


def _footprint_filled(layout: MlaLayout, inputs: CaseInputs, fill: str) -> torch.Tensor:
    ref = reference_image(layout, inputs)
    after = inputs.storage.clone()
    n = int(ref.footprint.sum())
    g = torch.Generator().manual_seed(1)
    values = {"random": torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8),
              "nan": torch.full((n,), 0xFF, dtype=torch.uint8), "canary": after[ref.footprint]}
    after[ref.footprint] = values[fill]
    return after


@pytest.mark.parametrize("fill", ["random", "nan", "canary"])
@pytest.mark.parametrize(("platform", "layout_name"), [("cpu", "auto"), ("cpu", "fp8"), ("cpu", "fp8_ds_mla"),
                                                       ("cpu", "fp8_model1_mla"), ("rocm-gfx942", "fp8_rocm_compact")])
def test_garbage_matches_no_known_contract(platform: str, layout_name: str, fill: str) -> None:
    contract = contract_of(platform)
    layout, inputs = make_case(contract, layout_name)
    d = diagnose(contract, layout_name, inputs, _footprint_filled(layout, inputs, fill))
    assert not d.follows_platform and d.match is None and d.scales_match is None
    assert d.summary == f"matches no known contract (tried {d.tried})"
    assert (d.tried == 0) == (layout_name == "auto")  # auto copies bits: nothing to vary
    assert d.tried <= MAX_ALTERNATIVES


def _garbage_values(layout: MlaLayout, inputs: CaseInputs, after: torch.Tensor) -> torch.Tensor:
    """``after`` with every target's nope bytes replaced by random ones (the scale bytes left alone)."""
    after = after.clone()
    view = cache_view(layout, after, *blocks(inputs), inputs.kv_c.dtype, inputs.padded_rows)
    slots = inputs.slot_mapping[inputs.slot_mapping >= 0]
    entries = gather_entries(layout, view, slots)
    nope = layout.value_field(Source.KV_C)
    g = torch.Generator().manual_seed(2)
    entries[:, nope.offset:nope.end] = torch.randint(0, 256, (slots.numel(), nope.size), generator=g,
                                                     dtype=torch.uint8)
    scatter_entries(layout, entries, view, slots)
    return after


def test_scale_bytes_alone_are_named_when_nothing_else_matches() -> None:
    contract = contract_of("cpu")
    layout, inputs = make_case(contract, "fp8_ds_mla")
    amax_div = with_flags(contract, ds_mla_scale_rule=ScaleRule.AMAX_DIV)
    d = diagnose(contract, "fp8_ds_mla", inputs, _garbage_values(layout, inputs,
                                                                  written_under(amax_div, "fp8_ds_mla", inputs)))
    assert d.match is None and d.scales_match is not None and "ds_mla_scale_rule=amax_div" in d.scales_match
    assert d.summary == (f"matches no known contract (tried {d.tried}); its scale bytes follow "
                         "ds_mla_scale_rule=amax_div (this table requires ds_mla_scale_rule=pow2_ceil)")
    d = diagnose(contract, "fp8_ds_mla", inputs, _garbage_values(layout, inputs,
                                                                  written_under(contract, "fp8_ds_mla", inputs)))
    assert d.summary == f"matches no known contract (tried {d.tried}); its scale bytes follow this table's contract"
    assert d.scales_match == d.platform


@pytest.mark.parametrize(("platform", "layout_name", "absent"), [
    ("cpu", "fp8", "scale_"), ("cpu", "fp8_ds_mla", "model1"), ("cpu", "fp8_model1_mla", "ds_mla"),
    ("rocm-gfx942", "fp8_rocm_compact", "divisor"), ("cpu", "auto", "="),
])
def test_only_what_applies_to_the_layout_is_described(platform: str, layout_name: str, absent: str) -> None:
    contract = contract_of(platform)
    layout, inputs = make_case(contract, layout_name)
    d = diagnose(contract, layout_name, inputs, _footprint_filled(layout, inputs, "random"))
    assert absent not in d.platform
    assert "lora_alignment" not in d.platform and "compact_fp8_for_sparse" not in d.platform


def test_every_number_flag_has_values_to_try() -> None:
    numbers = {name for name, spec in FLAG_SPECS.items() if spec.kind is FlagKind.NUMBER}
    assert numbers <= set(NUMBER_FLAG_VALUES)


def test_a_diagnosis_takes_under_a_second_at_37_tokens() -> None:
    contract = contract_of("rocm-gfx942")
    layout, inputs = make_case(contract, "fp8_ds_mla")
    after = _footprint_filled(layout, inputs, "random")  # no match: every alternative is written
    diagnose(contract, "fp8_ds_mla", inputs, after)  # warm-up: torch's first calls are slow
    start = time.perf_counter()
    d = diagnose(contract, "fp8_ds_mla", inputs, after)
    assert time.perf_counter() - start < 1.0 and d.tried >= 10


def test_a_storage_of_the_wrong_shape_is_refused() -> None:
    contract = contract_of("cpu")
    _, inputs = make_case(contract, "fp8")
    with pytest.raises(ValueError, match="after: "):
        diagnose(contract, "fp8", inputs, inputs.storage[:-1].clone())


# ---- grading.py: examples in a failed check's detail -----------------------------------------------------

def grade(layout: MlaLayout, kind: str, inputs: CaseInputs, after: torch.Tensor) -> Grading:
    return grade_write(layout, kind, inputs, inputs.storage.clone(), after, reference_image(layout, inputs), 1.0)


def detail(grading: Grading, name: str) -> str:
    found = {c.name: c.detail for c in grading.checks if not c.passed}
    assert name in found, f"{name} did not fail; failed: {sorted(found)}"
    return found[name]


def poke(layout: MlaLayout, inputs: CaseInputs, storage: torch.Tensor, slot: int, field: str, index: int,
         raw: bytes) -> bytes:
    """Overwrite element ``index`` of ``field`` at ``slot`` through the kv layer's entry addressing;
    returns the bytes it held."""
    view = cache_view(layout, storage, *blocks(inputs), inputs.kv_c.dtype, inputs.padded_rows)
    slots = torch.tensor([slot])
    entry = gather_entries(layout, view, slots)
    f = layout.field(field)
    start = layout.entry_offset(f) + index * value_bits(f.element) // 8  # whole-byte elements here
    old = bytes(entry[0, start:start + len(raw)].tolist())
    entry[0, start:start + len(raw)] = torch.tensor(list(raw), dtype=torch.uint8)
    scatter_entries(layout, entry, view, slots)
    return old


def fp32_text(raw: bytes) -> str:
    return f"{struct.unpack('<f', raw)[0]:.6g} (0x{struct.unpack('<I', raw)[0]:08x})"


def test_bit_exact_names_token_slot_field_and_both_values_of_an_fp32_scale() -> None:
    contract = contract_of("cpu")
    layout, inputs = make_case(contract, "fp8_ds_mla")
    token = int(torch.nonzero(inputs.slot_mapping >= 0)[3])
    slot = int(inputs.slot_mapping[token])
    after = written_under(contract, "fp8_ds_mla", inputs)
    new = struct.pack("<f", 0.0123)
    old = poke(layout, inputs, after, slot, "nope_scale", 1, new)
    text = detail(grade(layout, "random", inputs, after), "bit_exact.bytes")
    assert text.startswith("4 of ")
    assert f"token {token} (slot {slot}) nope_scale[1]: kernel {fp32_text(new)} vs contract {fp32_text(old)}" in text
    assert "kernel 0.0123 (0x3c4985f0)" in text


def test_a_tile_scale_and_a_value_the_kernel_never_wrote_are_not_written_in_every_check() -> None:
    contract = contract_of("cpu")
    layout, inputs = make_case(contract, "fp8_ds_mla")
    token = int(torch.nonzero(inputs.slot_mapping >= 0)[2])
    slot = int(inputs.slot_mapping[token])
    after = written_under(contract, "fp8_ds_mla", inputs)
    poke(layout, inputs, after, slot, "nope_scale", 2, bytes([0xA5] * 4))  # left as the canary
    poke(layout, inputs, after, slot, "nope", 7, bytes([0xA5]))
    grading = grade(layout, "random", inputs, after)
    for check in ("numerics.scale_positive", "bit_exact.bytes"):
        assert f"token {token} (slot {slot}) nope_scale[2]: kernel not written (still 0xa5a5a5a5)" in \
            detail(grading, check)
    assert f"token {token} (slot {slot}) nope[7]: kernel not written (still 0xa5)" in \
        " ".join(c.detail for c in grading.checks)
    assert "-2.87" not in detail(grading, "numerics.scale_positive")  # the canary is never shown as a number


def test_bit_exact_maps_block_trailing_ue8m0_scales_in_padded_blocks() -> None:
    contract = contract_of("cpu")
    layout, inputs = make_case(contract, "fp8_model1_mla", kind="padded")
    token = int(torch.nonzero(inputs.slot_mapping >= 0)[-1])
    slot = int(inputs.slot_mapping[token])
    after = written_under(contract, "fp8_model1_mla", inputs)
    old = poke(layout, inputs, after, slot, "nope_scale", 3, bytes([0x7E]))  # 2^(126 - 127)
    poke(layout, inputs, after, slot, "nope", 5, bytes([0x38]))  # 1.0 in e4m3fn
    text = detail(grade(layout, "padded", inputs, after), "bit_exact.bytes")
    want = f"{2.0 ** (old[0] - 127):.6g} (0x{old[0]:02x})"
    assert f"token {token} (slot {slot}) nope_scale[3]: kernel 0.5 (0x7e) vs contract {want}" in text
    assert f"token {token} (slot {slot}) nope[5]: kernel 1 (0x38) vs contract " in text


def test_stray_bytes_name_the_slot_field_or_guard_they_hit() -> None:
    contract = contract_of("cpu")
    layout, inputs = make_case(contract, "fp8_ds_mla", kind="padded")
    after = written_under(contract, "fp8_ds_mla", inputs)
    used = set(inputs.slot_mapping.tolist())
    free = next(s for s in range(1000) if s not in used)
    poke(layout, inputs, after, free, "rope", 2, bytes([0x80, 0x3F]))  # bf16 1.0
    text = detail(grade(layout, "padded", inputs, after), "layout.untouched_bytes")
    assert f"slot {free} (no token) rope[2]: kernel 1 (0x3f80) vs untouched 0xa5a5" in text
    after[0] = 0
    after[-1] = 1
    text = detail(grade(layout, "padded", inputs, after), "layout.untouched_bytes")
    assert text.startswith("4 byte(s) outside the target entries changed, e.g. guard byte -256 (before the cache): "
                           "kernel 0x00 vs untouched 0xa5; ")
    assert text.endswith("; guard byte +255 (after the cache): kernel 0x01 vs untouched 0xa5")
    after = written_under(contract, "fp8_ds_mla", inputs)
    row = (16 + inputs.padded_rows) * layout.bytes_per_token + 16 * layout.bytes_per_token  # block 1's padding row
    after[256 + row + 3] = 0
    text = detail(grade(layout, "padded", inputs, after), "layout.untouched_bytes")
    assert text == (f"1 byte(s) outside the target entries changed, e.g. cache byte {row + 3} (padding row of "
                    "block 1): kernel 0x00 vs untouched 0xa5")


def _first_failing_case(cls: type[Mutant], platform: str, check: str) -> Grading:
    contract = contract_of(platform)
    kernel = cls().bind(contract)
    for layout_name in cls.kv_cache_dtypes:
        if layout_name not in load_platform(platform).supported_layouts:
            continue
        for spec, dims in case_specs(layout_name):
            if spec.tokens not in (5, 8, 20, 37) or spec.block_size != 16:
                continue
            layout = contract.layout(layout_name, *dims)
            inputs = build_case(spec, layout, "cpu")
            before = inputs.storage.clone()
            kernel(inputs.kv_c, inputs.k_pe, inputs.kv_cache, inputs.slot_mapping, layout_name, inputs.scale)
            grading = grade_write(layout, spec.kind, inputs, before, inputs.storage.clone(),
                                  reference_image(layout, inputs), 1.0)
            if check in grading.failed:
                return grading
    raise AssertionError(f"{cls.__name__} never failed {check}")


@pytest.mark.parametrize("cls", [c for c in EXPECTED if not EXPECTED[c][1].startswith("support.")],
                         ids=lambda c: c.name)  # a support check (no launch, no refusal) grades no bytes
def test_every_failed_check_carries_examples_on_one_short_line(cls: type[Mutant]) -> None:
    platform, check = EXPECTED[cls]
    assert_examples_read_well(_first_failing_case(cls, platform, check))

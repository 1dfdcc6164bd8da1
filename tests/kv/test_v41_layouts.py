"""DeepSeek V4.1's MLA cache records, V41 (528 B/token) and V41_FP4 (288 B/token; sglang PR #39123, vLLM PR #56893):
their FP4 conventions against rtp_ref.fp4's named sets, the reference writer's V41_FP4 bytes against a quantizer built
from rtp_ref.fp4 and against ml_dtypes, the fingerprints sglang names (which of them can show at the op, and the
check and diagnosis that name the others), a golden file per format, and certification on the CPU table, which lists
them (docs/layouts.md, "Where the FP4 records are certified").

The byte maps and expected bytes of both are stated by hand in tests/kv/oracle.py and walked byte by byte by
tests/kv/test_kv_writer.py, as every layout's are.
"""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch

from rtp_ref.cases.cases import CaseSpec, build_case
from rtp_ref.cases.diagnosis import diagnose_contract
from rtp_ref.cases.grading import grade_write, reference_image
from rtp_ref.cli import main
from rtp_ref.contract import WriteContract
from rtp_ref.fp4 import (
    V41_FP4,
    V41_FP4_TORCH,
    NegativeZero,
    PayloadDivision,
    ScaleElement,
    ScaleRounding,
    pack,
    quantize_row,
)
from rtp_ref.kernels.torch_eager import TorchEagerKernel
from rtp_ref.kv.entries import encode_entries
from rtp_ref.kv.flags import FP4_NEGATIVE_ZEROS, FP4_VALUE_QUOTIENTS
from rtp_ref.kv.layouts import MlaLayout, layout_for_platform
from rtp_ref.platform import load_platform
from tests.kv import oracle
from tests.mutants.fp4_mutants import EXPECTED, PositiveZero, ReciprocalMultiply
from tests.processes import child_env
from tests.zygote import shared_zygote

REPO = Path(__file__).resolve().parents[2]
V41_LAYOUTS = ("V41", "V41_FP4")
CPU = load_platform("cpu")
#: a V41_FP4 tile whose amax 5.625 gives the e4m3 scale 0.9375, and a value whose quotient by it is exactly 1.25, an
#: E2M1 tie (to even: 1.0, code 2); the float32 reciprocal of 0.9375 times 1.171875 lies above 1.25 (1.5, code 3)
TIE_TILE = (5.625, 1.171875)


def _v41_table(tmp_path: Path, conventions: str = "") -> Path:
    """The CPU table (which lists V41 and V41_FP4, their bytes stated by hand) under another name, plus
    ``conventions``."""
    text = (REPO / "platforms" / "cpu.toml").read_text().replace('name = "cpu"', 'name = "cpu-v41"')
    assert '"V41", "V41_FP4"]' in text and "V41 = 528" in text and "V41_FP4 = 288" in text
    path = tmp_path / "cpu-v41.toml"
    path.write_text(text + conventions)
    return path


def _fp4_layout(**flags: str) -> MlaLayout:
    return layout_for_platform(CPU, "V41_FP4", overrides=flags)


def test_the_fp4_flags_take_rtp_ref_fp4s_conventions() -> None:
    assert tuple(d.value for d in PayloadDivision) == FP4_VALUE_QUOTIENTS
    assert tuple(z.value for z in NegativeZero) == FP4_NEGATIVE_ZEROS


@pytest.mark.parametrize(("flags", "named"), [({}, V41_FP4_TORCH), ({"fp4_negative_zero": "positive"}, V41_FP4)],
                         ids=["torch-reference", "sglang-kernel"])
def test_the_record_builds_the_named_fp4_conventions(flags: dict[str, str], named: object) -> None:
    """The record's conventions are rtp_ref.fp4's: its torch reference's by default, its kernel's with +0.0."""
    for name in ("nope_scale", "rope_scale"):
        spec = _fp4_layout(**flags).field(name).tile_scale
        assert spec is not None and spec.fp4 is not None
        assert dataclasses.replace(spec.fp4, name="", source="") == dataclasses.replace(named, name="", source="")


def _tokens(rows: int, seed: int, dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor]:
    """Normal values with a power-of-two magnitude per row (2^-8 .. 2^8), the first row holding -0.0 and the tie."""
    g = torch.Generator().manual_seed(seed)
    spread = torch.exp2(torch.randint(-8, 9, (rows, 1), generator=g).float())
    kv_c = (torch.randn(rows, 448, generator=g) * spread).to(dtype)
    k_pe = (torch.randn(rows, 64, generator=g) * spread).to(dtype)
    kv_c[0, :16] = torch.tensor([*TIE_TILE, *([-0.0] * 14)])
    return kv_c, k_pe


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_v41_fp4_bytes_are_the_fp4_quantizers(dtype: torch.dtype) -> None:
    """The reference writer's entry: rtp_ref.fp4's codes of the 512 values, nope then rope, packed two a byte, then
    their scale codes; and, independently, ml_dtypes' e4m3 of ``amax * (1/6)`` clamped and e2m1 of ``x / s``."""
    kv_c, k_pe = _tokens(6, 3, dtype)
    entries = encode_entries(_fp4_layout(), kv_c, k_pe, torch.tensor([1.0]))
    quantized = quantize_row(torch.cat([kv_c, k_pe], dim=1), V41_FP4_TORCH)
    assert bool(quantized.defined.all())
    assert torch.equal(entries, torch.cat([pack(quantized.codes), quantized.scales], dim=1))
    contract = oracle.CONTRACTS["cpu"]
    for i in range(kv_c.shape[0]):
        assert entries[i].numpy().tolist() == oracle.expected_entry("V41_FP4", contract, kv_c[i], k_pe[i], 1.0).tolist()


def test_v41_fp4_dequantizes_within_half_an_e2m1_step() -> None:
    """What the reference gather reads back, decoded with ml_dtypes alone: each value times its tile's scale is the
    nearest E2M1 multiple of the scale (saturated at 6 x scale), within half a step of the grid."""
    kv_c, k_pe = _tokens(4, 5)
    entry = encode_entries(_fp4_layout(), kv_c, k_pe, torch.tensor([1.0])).numpy()
    codes = np.stack([entry[:, :256] & 0xF, entry[:, :256] >> 4], axis=-1).reshape(4, 512).astype(np.uint8)
    values = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    scales = np.repeat(entry[:, 256:].view(ml_dtypes.float8_e4m3fn).astype(np.float64), 16, axis=1)
    x = torch.cat([kv_c, k_pe], dim=1).double().numpy()
    quotient = np.minimum(np.abs(x / scales), 6.0)
    step = np.where(quotient < 2, 0.5, np.where(quotient < 4, 1.0, 2.0))
    assert np.all(np.abs(np.abs(values) - quotient) <= step / 2)


def _one_sixth_scale(amax: np.ndarray, by_reciprocal: bool) -> np.ndarray:
    """e4m3 bytes of ``clamp(amax * (1/6) or amax / 6, 2^-9, 448)``, in numpy float32 and ml_dtypes."""
    a = amax.astype(np.float32)
    q = a * np.float32(1.0 / 6.0) if by_reciprocal else a / np.float32(6.0)
    clamped = np.clip(q, np.float32(2.0**-9), np.float32(448.0)).astype(np.float32)
    out: np.ndarray = clamped.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    return out


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16], ids=["bf16", "fp16"])
def test_amax_over_six_cannot_show_at_the_op(dtype: type) -> None:
    """sglang's ``amax/6`` against ``amax * (1/6)`` fingerprint needs a float32 amax: a tile's amax is one of its
    values, and for every finite bf16 and fp16 magnitude both give the same scale byte, so no kernel's bytes at this op
    (16-bit inputs) tell them apart, and no mutant of it could fail. The float32 witness shows the test can tell."""
    bits = np.arange(0, 0x8000, dtype=np.uint16).view(dtype).astype(np.float32)
    finite = bits[np.isfinite(bits)]
    assert finite.size > 30000
    assert np.array_equal(_one_sixth_scale(finite, True), _one_sixth_scale(finite, False))
    witness = np.array([0x3DE3FFFF], np.uint32).view(np.float32)  # docs/fp8.md's float32 witness
    assert _one_sixth_scale(witness, True)[0] != _one_sixth_scale(witness, False)[0]


def test_the_tie_witness_is_a_tie() -> None:
    """``TIE_TILE``, exactly: the scale is 0.9375, the quotient 1.25 (midway between E2M1's 1.0 and 1.5), and the
    float32 product by the rounded reciprocal above it."""
    amax, x = TIE_TILE
    scale = float(np.array([np.float32(amax) * np.float32(1.0 / 6.0)], np.float32).astype(ml_dtypes.float8_e4m3fn)[0])
    assert scale == 0.9375 and Fraction(x) / Fraction(scale) == Fraction(5, 4)
    assert Fraction(float(np.float32(x) * (np.float32(1.0) / np.float32(scale)))) > Fraction(5, 4)


def _witness_case(contract: WriteContract) -> tuple[MlaLayout, object]:
    """A V41_FP4 write case whose first two tokens are the witnesses: the tie tile, and a tile of -0.0."""
    layout = contract.layout("V41_FP4", 448, 64)
    inputs = build_case(CaseSpec("V41_FP4", "random", 4, 4, 2, torch.bfloat16, seed=11), layout, "cpu")
    inputs.slot_mapping[:2] = torch.tensor([5, 2])
    inputs.kv_c[0, :16] = torch.tensor(TIE_TILE + (0.0,) * 14)
    inputs.kv_c[1, :16] = -0.0
    return layout, inputs


@pytest.mark.parametrize(("mutant", "flag"), [(ReciprocalMultiply, "fp4_value_quotient=reciprocal_mul"),
                                              (PositiveZero, "fp4_negative_zero=positive")],
                         ids=["reciprocal", "positive-zero"])
def test_a_fingerprint_fails_bit_exact_and_the_diagnosis_names_it(mutant: type, flag: str) -> None:
    contract = WriteContract.for_platform(CPU)
    layout, inputs = _witness_case(contract)
    before = inputs.storage.clone()
    mutant().bind(contract)(inputs.kv_c, inputs.k_pe, inputs.kv_cache, inputs.slot_mapping, "V41_FP4", inputs.scale)
    grading = grade_write(layout, "random", inputs, before, inputs.storage.clone(), reference_image(layout, inputs),
                          1.0)
    assert grading.failed == ["bit_exact.bytes"], grading.checks
    (check,) = [c for c in grading.checks if not c.passed]
    # the locator names the byte's two codes: token 0's nope[0,1] holds the amax (6, code 7) and the tie (code 2,
    # 1.0; the mutant's 3, 1.5), token 1's nope[0,1] two -0.0 (0x88; the mutant's 0x00)
    shown = "token 0 (slot 5) nope[0,1]: kernel 6 1.5 (0x37) vs contract 6 1 (0x27)" if mutant is ReciprocalMultiply \
        else "token 1 (slot 2) nope[0,1]: kernel 0 0 (0x00) vs contract -0 -0 (0x88)"
    assert shown in check.detail, check.detail
    diagnosis = diagnose_contract("V41_FP4", (448, 64), contract, inputs, inputs.storage)
    assert diagnosis.match is not None and flag in diagnosis.summary, diagnosis.summary


def test_a_tile_holding_nan_or_inf_stores_a_nan_scale_and_zero_codes() -> None:
    """V41_FP4's non-finite policy, sglang's torch reference's ("A NaN element poisons its tile: NaN scale, zero
    codes"): the tile's scale byte is e4m3's NaN, its codes 0; the other tiles are as without it."""
    kv_c, k_pe = _tokens(2, 9)
    clean = encode_entries(_fp4_layout(), kv_c, k_pe, torch.tensor([1.0]))
    kv_c[0, 20], kv_c[1, 40] = float("nan"), float("-inf")
    poisoned = encode_entries(_fp4_layout(), kv_c, k_pe, torch.tensor([1.0]))
    for row, tile in ((0, 1), (1, 2)):
        assert int(poisoned[row, 256 + tile]) == 0x7F
        assert poisoned[row, 8 * tile: 8 * tile + 8].tolist() == [0] * 8
        others = [b for b in range(288) if b != 256 + tile and not 8 * tile <= b < 8 * tile + 8]
        assert torch.equal(poisoned[row, others], clean[row, others])
    policy = layout_for_platform(CPU, "V41").non_finite
    assert policy is not None and not policy.defined("nan") and "undefined by its sources" in policy.text


def test_layouts_lists_both_with_their_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["layouts", "--platform", "cpu", "--json"]) == 0
    shown = {layout["name"]: layout for layout in json.loads(capsys.readouterr().out)["layouts"]}
    assert {name: shown[name]["bytes_per_token"] for name in V41_LAYOUTS} == {"V41": 528, "V41_FP4": 288}
    assert all(shown[name]["non_finite"] for name in V41_LAYOUTS)
    fp4 = shown["V41_FP4"]["fields"][2]["tile_scale"]["fp4"]
    assert fp4 == {"scale_element": "e4m3fn", "rounding": "rne", "amax_division": "mul_one_sixth",
                   "clamp": [2.0**-9, 448.0], "payload": "ieee_div", "negative_zero": "keep",
                   "non_finite_tile": "nan_scale_zero_codes"}


@pytest.mark.parametrize("layout", V41_LAYOUTS)
def test_a_golden_file_per_format(tmp_path: Path, layout: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``rtp-ref golden`` writes one call (its inputs, the cache before and after), which the reference, torch-eager
    and the Triton writer reproduce; a file whose expected cache has one written byte changed fails, naming the
    token's field."""
    table, golden = _v41_table(tmp_path), tmp_path / f"{layout}.safetensors"
    assert main(["golden", "--layout", layout, "--platform", str(table), "--out", str(golden)]) == 0
    for kernel in ("reference", "torch-eager", "triton"):
        assert main(["golden-check", str(golden), "--kernel", kernel]) == 0, capsys.readouterr()
    capsys.readouterr()
    raw = bytearray(golden.read_bytes())
    header = 8 + int.from_bytes(raw[:8], "little")
    offsets = {key: value["data_offsets"] for key, value in json.loads(raw[8:header]).items() if key != "__metadata__"}
    before, expected = (raw[header + offsets[k][0]: header + offsets[k][1]] for k in ("kv_cache_before",
                                                                                       "kv_cache_expected"))
    first = next(i for i, (b, e) in enumerate(zip(before, expected, strict=True)) if b != e)
    raw[header + offsets["kv_cache_expected"][0] + first] ^= 0x01
    golden.write_bytes(bytes(raw))
    assert main(["golden-check", str(golden)]) == 1
    out = capsys.readouterr().out
    assert "1 of" in out and "field nope byte" in out, out


def test_certified_on_a_table_that_lists_them(tmp_path: Path) -> None:
    """The reference, torch-eager, the Triton writer and the reference gather certify both layouts bit-exact on a
    CPU table listing them; the compiled readers (Triton's here) claim neither; each FP4 mutant fails by its check,
    its diagnosis naming the convention it follows."""
    env = child_env(REPO, RTP_REF_KERNELS="tests.mutants.fp4_mutants:mutants")
    mutants = [cls.name for cls in EXPECTED]
    argv = ["certify", "--platform", str(_v41_table(tmp_path)), "--report", str(tmp_path / "report"), "-n", "0"]
    for kernel in ("reference", "torch-eager", "reference-gather", "triton", "triton-gather", *mutants):
        argv += ["--kernel", kernel]
    done = shared_zygote().run([*argv, "--layout", "V41", "--layout", "V41_FP4", "--", "-q"], env, tmp_path,
                               timeout=600)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    rows = {(r["kernel"], r["layout"]): r["verdict"] for r in report["summary"]["by_kernel_layout"]
            if r["kernel"] not in ("-", "(suite)")}
    for kernel in ("reference", "torch-eager", "triton", "reference-gather"):
        verdicts = (rows[kernel, "V41"], rows[kernel, "V41_FP4"])
        assert verdicts == ("certified", "certified"), (kernel, verdicts)
    assert {rows["triton-gather", f"{layout} (unclaimed)"] for layout in V41_LAYOUTS} == {"raises as required"}, rows
    cases = [c for c in report["cases"] if c.get("kernel") in mutants]
    for cls, (check, flag) in EXPECTED.items():
        assert rows[cls.name, "V41_FP4"] == "failed", (cls.name, rows)
        mine = [c for c in cases if c["kernel"] == cls.name]
        assert any(check in c.get("failed_checks", []) for c in mine), cls.name
        if flag is not None:
            assert any(flag in c.get("diagnosis", "") for c in mine), cls.name


#: a table accepting sglang's newer kernel's -0 (0x0) beside its torch reference's (0x8)
POSITIVE_ZERO = """
[[conventions]]
name = "sglang kernel"
op = "concat_and_cache_mla"
flags = { fp4_negative_zero = "positive" }
source = "docs/fp8.md#fp4-e2m1-and-its-scales (sglang PR #39123: its kernel adds +0.0 before converting)"
"""


def test_a_table_may_accept_the_positive_zero_of_sglangs_kernel(tmp_path: Path) -> None:
    env = child_env(REPO, RTP_REF_KERNELS="tests.mutants.fp4_mutants:mutants")
    argv = ["certify", "--platform", str(_v41_table(tmp_path, POSITIVE_ZERO)), "--report", str(tmp_path / "r"),
            "--kernel", PositiveZero.name, "--layout", "V41_FP4", "-n", "0", "--", "-q"]
    done = shared_zygote().run(argv, env, tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    (row,) = [r for r in report["summary"]["by_kernel_layout"]
              if (r["kernel"], r["layout"]) == (PositiveZero.name, "V41_FP4")]
    assert (row["verdict"], row["conventions"]) == ("certified", ["sglang kernel"])


#: the FP4 part of V41_FP4's tile rule, as a table states it
FP4_RULE = (', fp4 = { rounding = "rne", ceiling = 448.0, amax_division = "mul_one_sixth", '
            'non_finite_tile = "nan_scale_zero_codes" }')
#: V41_FP4's record as a ``$RTP_REF_LAYOUTS`` table would state it, under another name
FP4_TABLE = """\
[[layout]]
name = "my_v41_fp4"
summary = "V41_FP4 stated out of tree"
kv_split = "k + v != block: the scales belong to neither k nor v"
sources = "sglang PR #39123"
non_finite = { nan = "as V41_FP4", inf = "as V41_FP4", zero_tile = "as V41_FP4", source = "sglang PR #39123" }
default_dims = [448, 64]
fixed_dims = true
tile_rule = { tile = 16, rule = "amax_div", floor = 0.001953125, divisor = 6.0FP4_RULE }
fields = [
  { name = "nope", source = "kv_c", element = "e2m1", count = "R", scale = "nope_scale" },
  { name = "rope", source = "k_pe", element = "e2m1", count = "P", scale = "rope_scale" },
  { name = "nope_scale", source = "scale", placement = "block_trailing", element = "e4m3fn", count = "tiles" },
  { name = "rope_scale", source = "scale", placement = "block_trailing", element = "e4m3fn", count = "tiles" },
]
""".replace("FP4_RULE", FP4_RULE)


def test_an_fp4_record_in_a_table_builds_the_same_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An out-of-tree table states an FP4 layout with the same keys: it is laid out as the bundled V41_FP4."""
    table = tmp_path / "layouts.toml"
    table.write_text(FP4_TABLE)
    done = shared_zygote().run(["layouts", "--platform", "cpu", "--layout", "my_v41_fp4", "--json"],
                               child_env(REPO, RTP_REF_LAYOUTS=str(table)), tmp_path)
    assert done.returncode == 0, done.stderr
    (mine,) = json.loads(done.stdout)["layouts"]
    assert main(["layouts", "--platform", "cpu", "--layout", "V41_FP4", "--json"]) == 0
    (bundled,) = json.loads(capsys.readouterr().out)["layouts"]
    assert [{k: v for k, v in f.items() if k != "note"} for f in mine["fields"]] == [
        {k: v for k, v in f.items() if k != "note"} for f in bundled["fields"]]
    assert mine["bytes_per_token"] == 288


def test_an_e2m1_field_without_fp4_conventions_is_refused(tmp_path: Path) -> None:
    table = tmp_path / "layouts.toml"
    table.write_text(FP4_TABLE.replace(FP4_RULE, ""))
    done = shared_zygote().run(["layouts", "--platform", "cpu", "--layout", "my_v41_fp4", "--json"],
                               child_env(REPO, RTP_REF_LAYOUTS=str(table)), tmp_path)
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.count("\n") == 1 and "E2M1 field 'nope' needs a computed scale field with FP4 conventions" \
        in done.stderr, done.stderr


def test_torch_eager_refuses_an_fp4_scale_it_does_not_round() -> None:
    """torch-eager rounds FP4 scales with torch's e4m3 cast (nearest even, then FlashMLA's bump where a layout says
    so): a table's FP4 layout whose scales are another element (ue8m0, MXFP4's) is refused as a limit,
    not written wrongly."""
    layout = _fp4_layout()
    spec = layout.field("nope_scale").tile_scale
    assert spec is not None and spec.fp4 is not None
    ue8m0 = dataclasses.replace(spec, fp4=dataclasses.replace(
        spec.fp4, scale=dataclasses.replace(spec.fp4.scale, element=ScaleElement.UE8M0,
                                            rounding=ScaleRounding.CEIL_LOG2_EXACT)))
    other = dataclasses.replace(layout, fields=tuple(
        dataclasses.replace(f, tile_scale=ue8m0, element="ue8m0") if f.name == "nope_scale" else f
        for f in layout.fields))
    assert TorchEagerKernel().supports(layout) is None
    assert "not ue8m0 by ceil_log2_exact (nope_scale of V41_FP4)" in (TorchEagerKernel().supports(other) or "")


#: V41's fields at any dims: a rope whose own scales count its tiles
FREE_V41 = """\
[[layout]]
name = "my_v41"
summary = "V41 at any dims"
kv_split = "k + v != block: the scales belong to neither k nor v"
sources = "sglang PR #39123"
tile_rule = { tile = 32, rule = "pow2_ceil", floor = 1e-4 }
non_finite = { nan = "undefined", inf = "undefined", zero_tile = "as V41", source = "sglang PR #39123" }
fields = [
  { name = "nope", source = "kv_c", element = "fp8", count = "R", scale = "nope_scale" },
  { name = "rope", source = "k_pe", element = "fp8", count = "P", scale = "rope_scale" },
  { name = "nope_scale", source = "scale", placement = "block_trailing", element = "ue8m0", count = "tiles" },
  { name = "rope_scale", source = "scale", placement = "block_trailing", element = "ue8m0", count = "tiles" },
]
"""


@pytest.mark.parametrize(("flag", "shown"), [
    ("lora_alignment=strict", "rope of layout my_v41 holds 40 values, not a multiple of its 32-value tile"),
    ("lora_alignment=round_up", '"bytes_per_token": 471'),  # 416 + 40 values, 13 + 2 scales: the last rope tile partial
])
def test_a_tile_scaled_rope_counts_its_own_tiles(tmp_path: Path, flag: str, shown: str) -> None:
    table = tmp_path / "layouts.toml"
    table.write_text(FREE_V41)
    done = shared_zygote().run(["layouts", "--platform", "cpu", "--layout", "my_v41", "--kv-lora-rank", "416",
                                "--rope-dim", "40", "--layout-flag", flag, "--json"],
                               child_env(REPO, RTP_REF_LAYOUTS=str(table)), tmp_path)
    assert shown in done.stdout + done.stderr, done.stdout + done.stderr
    assert done.returncode == (2 if flag.endswith("strict") else 0)

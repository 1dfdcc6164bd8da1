"""The DeepSeek indexer cache's ``mxfp4`` variant (``indexer_k_quant_and_cache``, scale_fmt ``mxfp4``: vLLM's MXFP4
indexer cache, 68 bytes a token at head_dim 128): its byte map and numerics held to an oracle written here from the
sources (vLLM's fused DeepSeek-V4 MXFP4 writer, vllm-project/vllm@e8f3d1e27521; DeepGEMM's ``ceil_to_ue8m0``,
deepseek-ai/DeepGEMM@38939a4c494c) with ml_dtypes' float4_e2m1fn, exact rationals and bit arithmetic, never rtp-ref's
own output; the float-log2 witness, and why no writer of this op can show it; the non-finite statement; the layout
on the command line; a golden file; certification of the writers and readers, and of mutants that follow another
MXFP4 quantizer, each failing with a diagnosis naming it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch

from rtp_ref.cli import main
from rtp_ref.contract import WriteContract
from rtp_ref.errors import RtpRefError
from rtp_ref.fp4.scales import ScaleRounding, scale_codes
from rtp_ref.kv.indexer import (
    MXFP4_INDEXER,
    indexer_layout,
    indexer_layout_for,
    reference_indexer_k_quant_and_cache,
)
from rtp_ref.ops import INDEXER_GATHER_OP, INDEXER_OP, supported_variants
from rtp_ref.platform import all_platforms, load_platform
from tests.mutants.fp4_mutants import MXFP4_EXPECTED, Mxfp4FloatLog2
from tests.processes import child_env
from tests.zygote import shared_zygote

REPO = Path(__file__).resolve().parents[2]
CPU = load_platform("cpu")
#: the float32 amax whose quotient float32 log2 puts one binade low: 96 + 2**-17 (2**4 for the exact 2**5)
WITNESS_AMAX_BITS = 0x42C00001
_F32_ONE_SIXTH = np.float32(1 / 6)


def _ceil_log2(q: Fraction) -> int:
    """The smallest integer e with 2**e >= q > 0, by comparing rationals."""
    e = q.numerator.bit_length() - q.denominator.bit_length()
    while Fraction(2) ** e < q:
        e += 1
    while Fraction(2) ** (e - 1) >= q:
        e -= 1
    return e


def _block(x: np.ndarray) -> tuple[list[int], int]:
    """The E2M1 codes and the ue8m0 byte of one block of 32 float32 values, as the sources state them: amax over
    |x| without NaN, q = float32(max(amax, 6 * 2^-126) * float32(1/6)), e = ceil(log2 q) clamped to 127 (+-inf: the
    clamp), each code ml_dtypes' float4_e2m1fn of float32(x * 2^-e), a NaN as 0x7."""
    finite_or_inf = [abs(float(v)) for v in x if not math.isnan(float(v))]
    amax = max(finite_or_inf, default=0.0)
    if math.isinf(amax):
        e = 127
    else:
        q = np.float32(max(amax, 6 * 2.0**-126)) * _F32_ONE_SIXTH  # one float32 rounding
        e = min(_ceil_log2(Fraction(float(q))), 127)
    step = np.float32(2.0**-e)  # exact: 2**-127 is a float32 subnormal
    codes = []
    for v in x:
        if math.isnan(float(v)):
            codes.append(0x7)
        else:
            codes.append(int(np.array([np.float32(v) * step], np.float32).astype(ml_dtypes.float4_e2m1fn)
                             .view(np.uint8)[0]))
    return codes, e + 127


def _oracle(k: torch.Tensor, slots: list[int], num_blocks: int, block_size: int, fill: int) -> np.ndarray:
    """The whole cache after the write: per block, token t's D/2 code bytes at t * D/2 (code 2i in the low nibble of
    byte i), then its D/32 scale bytes at B * D/2 + t * D/32."""
    d = k.shape[1]
    flat = np.full((num_blocks, block_size * (d // 2 + d // 32)), fill, np.uint8)
    x = k.float().numpy()
    for token, slot in enumerate(slots):
        if slot < 0:
            continue
        block, t = divmod(slot, block_size)
        for j in range(d // 32):
            codes, scale = _block(x[token, 32 * j: 32 * j + 32])
            for i in range(16):
                flat[block, t * d // 2 + 16 * j + i] = codes[2 * i] | (codes[2 * i + 1] << 4)
            flat[block, block_size * d // 2 + t * d // 32 + j] = scale
    return flat


def _tokens(dtype: torch.dtype, d: int, seed: int) -> torch.Tensor:
    """Random tokens of widely spread magnitudes, then rows of every kind the format must get right: all zero, -0.0
    and negatives rounding to zero, E2M1 ties at scale 1 (amax 6), an amax just above 6 (scale 2), input subnormals,
    the largest finite values, NaN and +-inf (one block of only NaN)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(14, d, generator=g) * torch.exp2(torch.randint(-20, 21, (14, 1), generator=g).float())
    x[0] = 0.0
    x[1, :32] = -0.0
    x[1, 32:64] = torch.linspace(-0.01, 0.01, 32)
    x[2, :32] = torch.tensor([6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0] * 4) * torch.tensor([1.0, -1.0]).repeat(16)
    x[3, :32] = torch.tensor([6.0625] + [3.0, 1.0, 0.5] * 10 + [-6.0625])
    finfo = torch.finfo(dtype)
    x[4] = finfo.smallest_normal / 8
    x[5, :32] = finfo.max
    x[5, 32:64] = -finfo.max / 3
    x = x.to(dtype)
    x[6, 0], x[6, 1], x[6, 40] = float("nan"), float("inf"), float("-inf")
    x[7, :32] = float("nan")
    return x


@pytest.mark.parametrize(("dtype", "d"), [(torch.bfloat16, 128), (torch.float16, 256), (torch.bfloat16, 64)])
def test_the_reference_writes_the_sources_bytes(dtype: torch.dtype, d: int) -> None:
    layout = indexer_layout(CPU, d, scale_fmt="mxfp4")
    assert (layout.bytes_per_token, layout.quant_block_size) == (d // 2 + d // 32, 32)
    k = _tokens(dtype, d, d)
    block_size, num_blocks = 4, 5
    slots = [13, 0, 7, 19, -1, 2, 8, 1, 4, 5, 17, -1, 3, 12]
    cache = torch.full((num_blocks, block_size, layout.bytes_per_token), 0xA5, dtype=torch.uint8)
    reference_indexer_k_quant_and_cache(layout, k, cache, torch.tensor(slots), "mxfp4")
    want = _oracle(k, slots, num_blocks, block_size, 0xA5)
    got = cache.reshape(num_blocks, -1).numpy()
    assert np.array_equal(got, want), np.argwhere(got != want)[:8]


def test_the_stated_constants_and_bytes() -> None:
    """The float32 1/6 is 0x3E2AAAAB; an all-zero block stores 2^-126 (byte 1) and codes 0; the tie row at scale 1
    rounds each tie to the even code; a block of only NaN gets the floor's scale and codes 0x7; a block with +-inf
    gets 2^127 (byte 254) and saturated codes."""
    assert int(_F32_ONE_SIXTH.view(np.uint32)) == 0x3E2AAAAB
    assert float(np.float32(6 * 2.0**-126) * _F32_ONE_SIXTH) == 2.0**-126
    layout = indexer_layout(CPU, scale_fmt="mxfp4")
    k = _tokens(torch.bfloat16, 128, 1)
    cache = torch.zeros(1, 8, 68, dtype=torch.uint8)
    reference_indexer_k_quant_and_cache(layout, k[:8], cache, torch.arange(8), "mxfp4")
    flat = cache.reshape(-1)

    def codes(t: int, j: int) -> list[int]:
        packed = flat[64 * t + 16 * j: 64 * t + 16 * j + 16].tolist()
        return [c for b in packed for c in (b & 0xF, b >> 4)]

    def scale(t: int, j: int) -> int:
        return int(flat[8 * 64 + 4 * t + j])

    assert [scale(0, j) for j in range(4)] == [1] * 4 and codes(0, 0) == [0] * 32
    assert codes(1, 0) == [0x8] * 32  # -0.0 keeps its sign
    # x = 6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5 (alternating signs) at scale 2^0: ties to the even code
    assert scale(2, 0) == 127 and codes(2, 0)[:8] == [0x7, 0x8, 0x2, 0xA, 0x4, 0xC, 0x6, 0xE]
    # amax 6.0625 just above 6: scale 2 (6.0625 / 2 rounds to 3), then 3 / 2, 1 / 2 and the tie 0.5 / 2 = 0.25 -> 0
    assert scale(3, 0) == 128 and codes(3, 0)[:4] == [0x5, 0x3, 0x1, 0x0]
    assert scale(6, 0) == 254 and codes(6, 0)[:2] == [0x7, 0x7] and codes(6, 1)[8] == 0xF
    assert scale(7, 0) == 1 and codes(7, 0) == [0x7] * 32


def test_the_float_log2_witness_and_why_no_writer_of_this_op_shows_it() -> None:
    """For the float32 amax 0x42C00001 (96 + 2^-17) a float32 log2 of the quotient is exactly 4.0, so vLLM's
    ``ceil(log2(q))`` takes 2^4 where the exact ceiling is 2^5, and the amax saturates. rtp_ref.fp4 states both rules
    (the contract's CEIL_LOG2_EXACT, FLOAT_LOG2); but this op takes bf16 and fp16 only, and no value of either
    lies in the window: both rules give every one of them the same byte."""
    amax = np.array([WITNESS_AMAX_BITS], np.uint32).view(np.float32)[0]
    q = amax * _F32_ONE_SIXTH
    assert float(np.log2(q)) == 4.0 and _ceil_log2(Fraction(float(q))) == 5
    float_log2 = dataclasses.replace(MXFP4_INDEXER.scale, rounding=ScaleRounding.FLOAT_LOG2)
    witness = torch.tensor([float(amax)], dtype=torch.float32)
    assert int(scale_codes(witness, MXFP4_INDEXER.scale)[0]) == 132
    assert int(scale_codes(witness, float_log2)[0]) == 131
    for dtype, top in ((torch.bfloat16, 0x7F80), (torch.float16, 0x7C00)):
        amaxes = torch.arange(top, dtype=torch.int32).to(torch.int16).view(dtype).float().numpy()
        q = np.maximum(amaxes, np.float32(6 * 2.0**-126)).astype(np.float32) * _F32_ONE_SIXTH
        bits = q.view(np.uint32).astype(np.int64)
        exact = ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0)  # q is normal: its exponent, up if not 2^k
        with np.errstate(divide="ignore"):
            assert np.array_equal(np.ceil(np.log2(q)).astype(np.int64), exact), dtype


def test_the_quant_block_is_the_formats_and_a_layout_serves_its_own_variants() -> None:
    contract = WriteContract.for_platform(CPU)
    with pytest.raises(RtpRefError, match="quant_block_size 64 with scale_fmt mxfp4; valid: 32"):
        indexer_layout_for(contract, contract.flags, 128, 64, scale_fmt="mxfp4")
    fp8 = indexer_layout(CPU)
    cache = torch.full((1, 16, fp8.bytes_per_token), 7, dtype=torch.uint8)
    with pytest.raises(RtpRefError, match="scale_fmt 'mxfp4' on a layout of none, ue8m0"):
        reference_indexer_k_quant_and_cache(fp8, torch.ones(1, 128, dtype=torch.bfloat16), cache,
                                            torch.tensor([0]), "mxfp4")
    assert bool((cache == 7).all())


def test_layouts_shows_68_bytes_a_token(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["layouts", "--platform", "cpu", "--family", "indexer", "--json"]) == 0
    variants = {v["scale_fmt"]: v for v in json.loads(capsys.readouterr().out)["indexer"]["variants"]}
    mxfp4 = variants["mxfp4"]
    assert (mxfp4["bytes_per_token"], mxfp4["quant_block_size"], mxfp4["element"], mxfp4["scale_element"]) == (
        68, 32, "e2m1", "ue8m0")
    assert [(f["name"], f["placement"], f["size"]) for f in mxfp4["fields"]] == [
        ("k", "per_token", 64), ("k_scale", "block_trailing", 4)]
    assert variants["none"]["bytes_per_token"] == variants["ue8m0"]["bytes_per_token"] == 132
    assert main(["layouts", "--platform", "cpu", "--family", "indexer"]) == 0
    assert "bytes per token: 68" in capsys.readouterr().out


def test_a_golden_file_is_checked_by_every_writer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    golden = tmp_path / "mxfp4.safetensors"
    assert main(["golden", "--family", "indexer", "--layout", "mxfp4", "--platform", "cpu", "--out",
                 str(golden)]) == 0
    kernels = ["reference-indexer", "torch-eager-indexer"]
    if torch.cuda.is_available() or _interpreted():
        kernels.append("triton-indexer")
    for kernel in kernels:
        assert main(["golden-check", str(golden), "--kernel", kernel]) == 0, capsys.readouterr()
    assert main(["golden", "--family", "indexer", "--layout", "mxfp4", "--platform", "cpu", "--quant-block-size",
                 "64", "--out", str(tmp_path / "bad.safetensors")]) == 2
    assert "valid: 32" in capsys.readouterr().err


def _interpreted() -> bool:
    try:
        from rtp_ref.kernels.triton_fp8 import interpreted
    except ImportError:
        return False
    return interpreted()


@pytest.mark.skipif(not _interpreted(), reason="certifies the Triton writer in its interpreter (tox sets "
                                               "TRITON_INTERPRET=1)")
def test_certify_the_writers_and_readers_and_fail_each_mutant(tmp_path: Path) -> None:
    """The reference, torch-eager and the Triton writer and the readers certify ``mxfp4`` bit-exact on the CPU table;
    each mutant following another MXFP4 quantizer fails by its check with a diagnosis naming that quantizer; the
    float-log2 writer writes the contract's bytes on every case (no 16-bit amax parts them) and is certified."""
    env = child_env(REPO, RTP_REF_KERNELS="tests.mutants.fp4_mutants:mxfp4_mutants")
    writers = ("reference-indexer", "torch-eager-indexer", "triton-indexer", "reference-indexer-gather",
               "triton-indexer-gather")
    argv = ["certify", "--platform", "cpu", "--report", str(tmp_path / "report"), "--layout", "mxfp4", "-n", "0"]
    for kernel in (*writers, *(cls.name for cls in MXFP4_EXPECTED), Mxfp4FloatLog2.name):
        argv += ["--kernel", kernel]
    done = shared_zygote().run([*argv, "--", "-q"], env, tmp_path, timeout=600)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    rows = {r["kernel"]: r["verdict"] for r in report["summary"]["by_kernel_layout"] if r["layout"] == "mxfp4"}
    assert {k: rows[k] for k in (*writers, Mxfp4FloatLog2.name)} == dict.fromkeys(
        (*writers, Mxfp4FloatLog2.name), "certified"), rows
    for cls, (check, named) in MXFP4_EXPECTED.items():
        assert rows[cls.name] == "failed", (cls.name, rows)
        mine = [c for c in report["cases"] if c.get("kernel") == cls.name]
        assert any(check in c.get("failed_checks", []) for c in mine), (cls.name, check)
        assert any(named in c.get("diagnosis", "") for c in mine), (cls.name, [c.get("diagnosis") for c in mine])


def test_only_the_tables_whose_readers_read_it_list_it(capsys: pytest.CaptureFixture[str]) -> None:
    """``[layouts] indexer`` lists mxfp4 on the cpu and SM100 tables (its readers, DeepGEMM's FP4 MQA logits, are
    SM100-only; gfx950's MXFP4 indexer is another page layout), the fp8 formats everywhere; a table without it refuses
    the variant by name, for the write and the read alike."""
    listing = {p.name: supported_variants(p, INDEXER_OP) for p in all_platforms()}
    fp8_only = ("none", "ue8m0")
    assert listing == {"cpu": (*fp8_only, "mxfp4"), "cuda-sm100": (*fp8_only, "mxfp4"), "cuda-sm120": fp8_only,
                       "cuda-sm90": fp8_only, "rocm-gfx942": fp8_only, "rocm-gfx950": fp8_only}
    assert all(supported_variants(p, INDEXER_GATHER_OP) == listing[p.name] for p in all_platforms())
    assert main(["certify", "--platform", "cuda-sm90", "--layout", "mxfp4", "--report", "unused"]) == 2
    assert "--layout 'mxfp4': platform cuda-sm90 does not support it" in capsys.readouterr().err

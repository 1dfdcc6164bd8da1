"""The NVFP4 MHA paged cache as a variant of ``reshape_and_cache_flash``: its layout from the record and the layout
flags, the reference's bytes against vLLM's offsets and the float32 / ml_dtypes oracle, what a call must look
like, and a real certify run failing each fingerprint mutant by the check (and diagnosis) that names it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from rtp_ref.cli import main
from rtp_ref.contract import WriteContract
from rtp_ref.errors import RtpRefError
from rtp_ref.fp4.nvfp4 import NVFP4_VLLM
from rtp_ref.kv.flags import NVFP4_SCALE_ORDERS
from rtp_ref.kv.mha_paged import mha_layout, reference_reshape_and_cache_flash
from rtp_ref.kv.nvfp4_page import ScaleOrder
from rtp_ref.ops import MHA_OP, supported_variants
from rtp_ref.platform import all_platforms, load_platform
from tests.fp4.test_nvfp4 import oracle_block
from tests.kv.test_nvfp4_page import vllm_offsets
from tests.mutants.nvfp4_mha_mutants import NVFP4_MHA_EXPECTED, SwizzlesVEverywhere
from tests.processes import child_env
from tests.zygote import shared_zygote

REPO = Path(__file__).resolve().parents[2]
CPU = WriteContract.for_platform(load_platform("cpu"))


def test_the_flag_choices_are_the_scale_orders() -> None:
    assert {o.value for o in ScaleOrder} == set(NVFP4_SCALE_ORDERS)


@pytest.mark.parametrize("order", ["NHD", "HND"])
@pytest.mark.parametrize("v_order", NVFP4_SCALE_ORDERS)
def test_the_reference_writes_the_oracles_bytes_at_vllms_offsets(order: str, v_order: str) -> None:
    """K's scales linear, V's in the flag's order; each block's bytes those of the float32 / ml_dtypes oracle."""
    T, H, D = 8, 2, 64
    layout = mha_layout(CPU.under({"nvfp4_v_scale_order": v_order}), "nvfp4", H, D)
    assert (layout.k_bytes_per_token(), layout.row_width) == (H * (D // 2 + D // 16), D // 2 + D // 16)
    key_cache, value_cache = (layout.new_cache(2, T, order, torch.bfloat16) for _ in range(2))
    g = torch.Generator().manual_seed(3)
    key, value = (torch.randn(5, H, D, generator=g).to(torch.bfloat16) for _ in range(2))
    slots = torch.tensor([0, 9, 15, -1, 4])
    reference_reshape_and_cache_flash(layout, key, value, key_cache, value_cache, slots, torch.tensor([0.7]),
                                      torch.tensor([1.3]))
    for cache, x, scale, swizzled in ((key_cache, key, 0.7, False), (value_cache, value, 1.3, v_order != "linear")):
        pages = cache.permute(0, 2, 1, 3).reshape(2, -1) if order == "HND" else cache.reshape(2, -1)
        want = torch.zeros_like(pages)
        for i, slot in enumerate(slots.tolist()):
            if slot < 0:
                continue
            block, t = divmod(slot, T)
            for h in range(H):
                codes_at, scales_at = vllm_offsets(t, h, T, H, D, order == "HND", swizzled)
                for j, at in enumerate(scales_at):
                    byte, codes = oracle_block(x[i, h, 16 * j:16 * j + 16].float().numpy().astype(np.float32),
                                               scale, NVFP4_VLLM)
                    want[block, at] = byte
                    for k in range(8):
                        want[block, codes_at[8 * j + k]] = codes[2 * k] | codes[2 * k + 1] << 4
        assert torch.equal(pages, want)


def test_a_call_the_variant_cannot_take_is_refused() -> None:
    layout = mha_layout(CPU, "nvfp4", 2, 64)
    key = torch.zeros(1, 2, 64, dtype=torch.bfloat16)
    slots, one = torch.tensor([0]), torch.ones(1)

    def caches(block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        return layout.new_cache(1, block_size, "NHD", torch.bfloat16), layout.new_cache(1, block_size, "NHD",
                                                                                       torch.bfloat16)
    with pytest.raises(RtpRefError, match=r"k_scale: .* 2 values; valid: float32 with 1 \(per tensor\)$"):
        reference_reshape_and_cache_flash(layout, key, key, *caches(16), slots, torch.ones(2), one)
    with pytest.raises(RtpRefError, match="block_size 6, head_size 64; valid for the swizzled_4_token"):
        reference_reshape_and_cache_flash(layout, key, key, *caches(6), slots, one, one)
    linear = mha_layout(CPU.under({"nvfp4_v_scale_order": "linear"}), "nvfp4", 2, 64)
    reference_reshape_and_cache_flash(linear, key, key, *caches(6), slots, one, one)
    with pytest.raises(RtpRefError, match="head_size 40; valid: a positive multiple of 16"):
        mha_layout(CPU, "nvfp4", 2, 40)


def test_certify_the_reference_and_fail_each_mutant(tmp_path: Path) -> None:
    """The reference and the Triton writer certify nvfp4 on the cpu table; each mutant fails by its named check, and a
    convention's diagnosis names the flag it follows."""
    env = child_env(REPO, RTP_REF_KERNELS="tests.mutants.nvfp4_mha_mutants:nvfp4_mha_mutants")
    argv = ["certify", "--platform", "cpu", "--report", str(tmp_path / "report"), "--layout", "nvfp4", "-n", "0",
            "--kernel", "reference-mha", "--kernel", "triton-mha",
            *(a for cls in NVFP4_MHA_EXPECTED for a in ("--kernel", cls.name))]
    done = shared_zygote().run([*argv, "--", "-q"], env, tmp_path, timeout=600)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    rows = {r["kernel"]: r["verdict"] for r in report["summary"]["by_kernel_layout"] if r["layout"] == "nvfp4"}
    assert rows["reference-mha"] == rows["triton-mha"] == "certified", rows
    for cls, (check, diagnosis) in NVFP4_MHA_EXPECTED.items():
        assert rows[cls.name] == "failed", (cls.name, rows)
        failed = [c for c in report["cases"] if c.get("kernel") == cls.name and check in c.get("failed_checks", [])]
        assert failed, (cls.name, check)
        if diagnosis is not None:
            assert any(f"the kernel follows {diagnosis}" in c.get("diagnosis", "") for c in failed), (cls.name, failed)


@pytest.mark.parametrize(("platform", "verdict"), [("cuda-sm100", "certified"), ("cuda-sm120", "failed")])
def test_a_writer_that_swizzles_v_everywhere_fails_only_where_readers_read_v_linearly(tmp_path: Path, platform: str,
                                                                                       verdict: str) -> None:
    """vLLM's writer before #55976 swizzles V for SM100 on every GPU: certified on SM100's table, failed on SM120's
    by ``layout.v_scale_order`` (vLLM #50084), where the reference, following the table, is certified."""
    env = child_env(REPO, RTP_REF_KERNELS="tests.mutants.nvfp4_mha_mutants:nvfp4_mha_mutants")
    argv = ["certify", "--platform", platform, "--report", str(tmp_path / "report"), "--layout", "nvfp4", "-n", "0",
            "--kernel", "reference-mha", "--kernel", SwizzlesVEverywhere.name]
    done = shared_zygote().run([*argv, "--", "-q"], env, tmp_path, timeout=600)
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    rows = {r["kernel"]: r["verdict"] for r in report["summary"]["by_kernel_layout"] if r["layout"] == "nvfp4"}
    assert rows == {"reference-mha": "certified", SwizzlesVEverywhere.name: verdict}, done.stdout[-3000:]
    assert done.returncode == (0 if verdict == "certified" else 1)
    if verdict == "failed":
        checks = {name for c in report["cases"] if c.get("kernel") == SwizzlesVEverywhere.name
                  for name in c.get("failed_checks", [])}
        assert "layout.v_scale_order" in checks, checks


def test_layouts_lists_d_half_plus_d_sixteenth_per_head(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["layouts", "--platform", "cpu", "--family", "mha", "--num-kv-heads", "8", "--head-size", "128",
                 "--json"]) == 0
    rows = {row["kv_cache_dtype"]: row for row in json.loads(capsys.readouterr().out)["mha"]["layouts"]}
    assert rows["nvfp4"]["k_bytes_per_token"] == rows["nvfp4"]["v_bytes_per_token"] == 8 * (64 + 8)
    assert rows["nvfp4"]["element"] == "e2m1"


def test_read_check_shows_an_sm100_ordered_v_cache_wrong_to_sm120s_readers(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A cache written for SM100 (V scales swizzled) reads back as written on SM100 and changes on SM120, whose
    readers read V linearly (vLLM #50084); K, linear everywhere, reads the same on both."""
    golden = tmp_path / "nvfp4.safetensors"
    assert main(["golden", "--family", "mha", "--layout", "nvfp4", "--platform", "cuda-sm100", "--num-kv-heads", "4",
                 "--head-size", "64", "--cache-order", "HND", "--out", str(golden)]) == 0
    capsys.readouterr()
    assert main(["read-check", str(golden), "--platform", "cuda-sm100", "--json"]) == 0
    same = json.loads(capsys.readouterr().out)
    assert not same["changed"] and [c["rel_l2"] for c in same["changes"]] == [0.0, 0.0]
    assert main(["read-check", str(golden), "--platform", "cuda-sm120", "--json"]) == 1
    other = json.loads(capsys.readouterr().out)
    key, value = other["changes"]
    assert (other["written_v_scale_order"], other["reader_v_scale_order"]) == ("swizzled_4_token", "linear")
    assert key["changed"] == 0 and value["changed"] > value["total"] // 2 and value["rel_l2"] > 0.5


def test_only_the_tables_of_fp4_gpus_list_it(capsys: pytest.CaptureFixture[str]) -> None:
    """``[layouts] mha`` lists nvfp4 on the cpu, SM100 and SM120 tables (the E2M1 conversion is sm_100a and later);
    a table without it refuses the variant by name."""
    listing = {p.name: "nvfp4" in supported_variants(p, MHA_OP) for p in all_platforms()}
    assert listing == {"cpu": True, "cuda-sm100": True, "cuda-sm120": True, "cuda-sm90": False, "rocm-gfx942": False,
                       "rocm-gfx950": False}
    assert main(["certify", "--platform", "cuda-sm90", "--layout", "nvfp4", "--report", "unused"]) == 2
    assert "--layout 'nvfp4': platform cuda-sm90 does not support it" in capsys.readouterr().err

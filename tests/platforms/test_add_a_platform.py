"""A new platform is one file: a table written from scratch is detected and certified, every op, with no
code change (README.md "Platform tables" says how to write one)."""

from __future__ import annotations

import json
from pathlib import Path

from rtp_ref.platform import load_platform, platform_for_device
from tests.processes import child_env
from tests.zygote import shared_zygote

REPO = Path(__file__).resolve().parents[2]
#: a made-up GPU target: OCP e4m3 under satfinite, a divisor of its own, two MLA layouts
TABLE = """\
schema_version = 1
name = "acme-x1"
description = "a hypothetical GPU target, written for this test"
backend = "cuda"

[detect]
cuda_capabilities = ["12.7"]

[fp8]
element_format = "e4m3fn"
conversion_mode = "satfinite"
scale_formats = ["fp32", "ue8m0"]

[layouts]
supported = ["fp8", "fp8_ds_mla"]

[layout_bytes]
fp8 = 576
fp8_ds_mla = 656

[layout_flags]
compact_fp8_for_sparse = false
lora_alignment = "strict"
ds_mla_scale_rule = "amax_div"
ds_mla_scale_floor = 1e-4
model1_scale_floor = 1e-4
fp8_max_divisor = 448.0
cache_fp8_format = "platform"

[tolerances]
numerics_max_ulp = 1.0
required_grade = "bit_exact"
"""


def test_a_platform_written_from_scratch_is_detected_and_certified(tmp_path: Path) -> None:
    path = tmp_path / "acme-x1.toml"
    path.write_text(TABLE)
    table = load_platform(str(path))
    assert platform_for_device("cuda", "12.7", [table]).name == "acme-x1"
    out = tmp_path / "report"
    argv = ["certify", "--platform", str(path), "--report", str(out),
            "--kernel", "reference", "--kernel", "reference-mha", "--kernel", "reference-indexer",
            "--layout", "fp8_ds_mla", "--layout", "fp8", "--layout", "none", "-n", "0", "--", "-q"]
    done = shared_zygote().run(argv, child_env(REPO), tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    rows = {(r["op"], r["kernel"], r["layout"]): (r["verdict"], r["min_grade"])
            for r in report["summary"]["by_kernel_layout"] if r["kernel"] != "(suite)"}
    assert rows == {
        ("concat_and_cache_mla", "reference", "fp8"): ("certified", "bit_exact"),
        ("concat_and_cache_mla", "reference", "fp8_ds_mla"): ("certified", "bit_exact"),
        ("reshape_and_cache_flash", "reference-mha", "fp8"): ("certified", "bit_exact"),
        ("indexer_k_quant_and_cache", "reference-indexer", "none"): ("certified", "bit_exact"),
    }
    assert report["platform"]["name"] == "acme-x1"

"""``rtp-ref bench`` end to end on the CPU (a real subprocess), and the torch.compile baseline's bytes.

Expected byte counts are derived here from the layout sizes in docs/layouts.md (R=512, P=64, bf16
inputs): inputs read once (2 bytes a value), an int64 slot read once, the entry written once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rtp_ref.cases.cases import CaseSpec, build_case, num_blocks_for
from rtp_ref.commands.bench import CompiledBaseline
from rtp_ref.contract import WriteContract
from rtp_ref.kernels.torch_eager import TorchEagerKernel
from rtp_ref.platform import load_platform
from tests.processes import child_env, interruptible
from tests.zygote import shared_zygote

#: entry bytes per token written by each MLA layout at R=512/P=64 (docs/layouts.md)
ENTRY_BYTES = {"fp8": 512 + 64, "fp8_ds_mla": 512 + 4 * 4 + 2 * 64}
#: bytes per token each op's bench write must move, from its shapes (MHA: 8 heads of 128, K and V, bf16 in,
#: fp8 out; indexer: 128 bf16 values in, 128 fp8 codes and one fp32 scale out), slots included (8 bytes)
TOKEN_BYTES = {
    ("concat_and_cache_mla", "fp8"): (512 + 64) * 2 + 8 + ENTRY_BYTES["fp8"],
    ("concat_and_cache_mla", "fp8_ds_mla"): (512 + 64) * 2 + 8 + ENTRY_BYTES["fp8_ds_mla"],
    ("reshape_and_cache_flash", "fp8"): 2 * 8 * 128 * 2 + 8 + 2 * 8 * 128,
    ("indexer_k_quant_and_cache", "none"): 128 * 2 + 8 + 128 + 4,
}


def test_bench_writes_table_json_and_chart_with_counted_bytes(tmp_path: Path) -> None:
    argv = ["bench", "--platform", "cpu", "--kernel", "torch-eager", "--kernel", "torch-eager-mha",
            "--kernel", "torch-eager-indexer", "--layout", "fp8", "--layout", "fp8_ds_mla", "--layout", "none",
            "--tokens", "64", "256", "--report", str(tmp_path)]
    proc = shared_zygote().run(argv, child_env(), tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert doc["roof_bytes_per_s"] > 0 and doc["launch_floor_s"] is None  # no graphs on the CPU
    rows = {(r["op"], r["layout"], r["tokens"]): r for r in doc["rows"]}
    assert set(rows) == {(op, layout, n) for op, layout in TOKEN_BYTES for n in (64, 256)}
    for (op, layout, tokens), row in rows.items():
        assert row["bytes"] == tokens * TOKEN_BYTES[(op, layout)], row
        assert row["seconds"] > 0 and row["note"] == "" and row["graph_seconds"] is None
        assert row["bandwidth"] == pytest.approx(row["bytes"] / row["seconds"])
        assert row["roof_fraction"] == pytest.approx(row["bandwidth"] / doc["roof_bytes_per_s"])
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (tmp_path / "bench.md").read_text()
    assert table.count("| torch-eager |") == 4 and table.count("| torch-eager-mha |") == 2


@pytest.mark.parametrize("layout", ["fp8", "fp8_ds_mla"])
def test_compiled_baseline_writes_what_torch_eager_writes(layout: str) -> None:
    """A baseline that wrote different bytes would be a meaningless speed reference."""
    contract = WriteContract.for_platform(load_platform("cpu"))
    layout_obj = contract.layout(layout, 512, 64)
    spec = CaseSpec(layout, "random", 37, 16, num_blocks_for(37, 16), torch.bfloat16, 3)
    eager_case, compiled_case = (build_case(spec, layout_obj, "cpu") for _ in range(2))
    eager = TorchEagerKernel(contract)
    for kernel, case in ((eager, eager_case), (CompiledBaseline(eager), compiled_case)):
        kernel(case.kv_c, case.k_pe, case.kv_cache, case.slot_mapping, layout, case.scale)
    assert torch.equal(eager_case.storage, compiled_case.storage)
    assert bool((eager_case.slot_mapping >= 0).any())  # the case writes something


def test_ctrl_c_during_bench_exits_130_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    report = tmp_path / "rep"
    # Sizes that keep it timing for seconds after its first line: the signal lands mid-run.
    argv = [sys.executable, "-m", "rtp_ref.cli", "bench", "--platform", "cpu", "--kernel", "torch-eager",
            "--layout", "fp8", "--tokens", *["65536"] * 8, "--report", str(report)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)
    assert proc.stdout is not None  # stdout=PIPE
    first = proc.stdout.readline()
    assert first.startswith("device copy roof: "), first  # the timing has begun
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stdout + stderr
    assert stderr == f"rtp-ref: interrupted: nothing was written to {report}\n"
    assert not report.exists()

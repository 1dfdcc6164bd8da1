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

from rtp_ref.certify.cases import CaseSpec, build_case, num_blocks_for
from rtp_ref.commands.bench import CompiledBaseline
from rtp_ref.kernels.contract import WriteContract
from rtp_ref.kernels.torch_eager import TorchEagerKernel
from rtp_ref.platform import load_platform
from tests.processes import child_env, interruptible
from tests.zygote import shared_zygote

#: entry bytes per token written by each layout at R=512/P=64 (docs/layouts.md)
ENTRY_BYTES = {"fp8": 512 + 64, "fp8_ds_mla": 512 + 4 * 4 + 2 * 64}


def test_bench_writes_table_json_and_chart_with_counted_bytes(tmp_path: Path) -> None:
    argv = ["bench", "--platform", "cpu", "--kernel", "torch-eager",
            "--layout", "fp8", "--layout", "fp8_ds_mla", "--tokens", "64", "256", "--report", str(tmp_path)]
    proc = shared_zygote().run(argv, child_env(), tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert doc["roof_bytes_per_s"] > 0
    rows = {(r["layout"], r["tokens"]): r for r in doc["rows"]}
    assert set(rows) == {(layout, n) for layout in ENTRY_BYTES for n in (64, 256)}
    for (layout, tokens), row in rows.items():
        assert row["bytes"] == tokens * ((512 + 64) * 2 + 8 + ENTRY_BYTES[layout]), row
        assert row["seconds"] > 0 and row["note"] == ""
        assert row["bandwidth"] == pytest.approx(row["bytes"] / row["seconds"])
        assert row["roof_fraction"] == pytest.approx(row["bandwidth"] / doc["roof_bytes_per_s"])
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (tmp_path / "bench.md").read_text()
    assert table.count("| torch-eager |") == 4


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

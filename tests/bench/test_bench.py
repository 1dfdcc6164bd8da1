"""``rtp-ref bench`` end to end on the CPU (a real subprocess), its integrity rules, and the torch.compile baseline's
bytes.

Expected byte counts are derived here from the layout sizes in docs/layouts.md (R=512, P=64, bf16
inputs): inputs read once (2 bytes a value), an int64 slot read once, the entry written once.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from rtp_ref import __version__
from rtp_ref.bench.integrity import ROOF_ALLOWANCE, invalid_figures, judge, non_monotonic, speed_limit
from rtp_ref.bench.measure import COLD_CALLS, copy_roof, time_call, time_cold
from rtp_ref.bench.rows import BenchRow
from rtp_ref.bench.verify import CacheCheck
from rtp_ref.bench.workloads import workload
from rtp_ref.cases.cases import CaseSpec, build_case, num_blocks_for
from rtp_ref.commands.bench import CompiledBaseline
from rtp_ref.contract import WriteContract
from rtp_ref.kernels.torch_eager import TorchEagerKernel
from rtp_ref.ops import MLA_OP
from rtp_ref.platform import load_platform
from tests.processes import child_env, interruptible
from tests.zygote import shared_zygote

REPO = Path(__file__).resolve().parents[2]
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
    assert doc["invalid"] == []
    rows = {(r["op"], r["layout"], r["tokens"]): r for r in doc["rows"]}
    assert set(rows) == {(op, layout, n) for op, layout in TOKEN_BYTES for n in (64, 256)}
    for (op, layout, tokens), row in rows.items():
        assert row["bytes"] == tokens * TOKEN_BYTES[(op, layout)], row
        assert row["seconds"] > 0 and row["note"] == "" and row["graph_seconds"] is None
        assert row["cold_seconds"] is None and row["host_seconds"] is None  # GPU figures
        assert row["bandwidth"] == pytest.approx(row["bytes"] / row["seconds"])
        assert row["roof_fraction"] == pytest.approx(row["bandwidth"] / doc["roof_bytes_per_s"])
        # every figure names its timer and cache state, shows its spread, and passed both integrity rules
        assert (row["timer"], row["l2"], row["invalid"]) == ("perf_counter", "CPU figures", "")
        assert row["seconds_low"] <= row["seconds"] <= row["seconds_high"]
        assert row["bandwidth"] <= row["limit_bytes_per_s"]
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (tmp_path / "bench.md").read_text()
    assert table.count("| torch-eager |") == 4 and table.count("| torch-eager-mha |") == 2
    # the header: when (UTC), which versions, which device, the command line, and the words of the table
    run = doc["run"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", run["started"]), run
    assert f"- run {run['started']} to {run['finished']} (UTC)" in table
    assert f"- rtp-ref {__version__}" in table and f", torch {torch.__version__}, triton " in table
    assert f"- device: {doc['device_name']}, torch device `cpu`" in table
    assert f"- command: `rtp-ref {' '.join(argv)}`" in table
    assert "- timer `perf_counter`: " in table and "- L2 `CPU figures`: " in table and "- INVALID: " in table
    assert "## Invalid figures" not in table


def test_a_kernel_that_skips_or_replays_its_write_fails_the_bench_naming_kernel_size_and_mode(tmp_path: Path) -> None:
    """Both cheats write torch-eager's bytes on their first call: without the poison before each timed sample, the
    first would pass (its cache keeps the first write), and without two input sets taken in turn, the second would
    (it writes bytes, the same ones). torch-eager, timed beside them on the same inputs, stays valid."""
    argv = ["bench", "--platform", "cpu", "--kernel", "first-call-only", "--kernel", "replays-first-write",
            "--kernel", "torch-eager", "--layout", "fp8", "--tokens", "64", "--report", str(tmp_path)]
    env = child_env(REPO, RTP_REF_KERNELS="tests.bench.cheating_kernels:kernels")
    proc = shared_zygote().run(argv, env, tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads((tmp_path / "bench.json").read_text())
    invalid = {r["kernel"]: r["invalid"] for r in doc["rows"]}
    assert "still hold the poison written before the sample" in invalid["first-call-only"]
    assert "a stale write" in invalid["replays-first-write"]
    assert invalid["torch-eager"] == ""
    lines = proc.stderr.splitlines()
    assert lines[0] == "rtp-ref: bench: 2 figure(s) are not measurements of the op:"
    assert [line.split(":")[0] for line in lines[1:]] == [
        "  first-call-only concat_and_cache_mla fp8 at 64 tokens, eager",
        "  replays-first-write concat_and_cache_mla fp8 at 64 tokens, eager"]
    table = (tmp_path / "bench.md").read_text()
    assert table.count("| INVALID |") == 2 and "## Invalid figures" in table


#: bytes per token each read op's bench read must move, from its shapes (docs/layouts.md: the fp8 MLA entry of 576
#: bytes read, 576 bf16 values written; the indexer's 132-byte entry read and its 128 codes and one fp32 scale
#: written), plus the int32 block table (16 blocks of 64 for a 1,024-token sequence) and cu_seq_lens (2 entries)
READ_BYTES = {("gather_and_maybe_dequant_cache", "fp8"): 576 + 576 * 2,
              ("cp_gather_indexer_k_quant_cache", "none"): 132 + 132}


def test_bench_times_the_readers_and_counts_their_bytes(tmp_path: Path) -> None:
    argv = ["bench", "--platform", "cpu", "--kernel", "reference-gather", "--kernel", "reference-indexer-gather",
            "--layout", "fp8", "--layout", "none", "--tokens", "1024", "--report", str(tmp_path)]
    proc = shared_zygote().run(argv, child_env(), tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((tmp_path / "bench.json").read_text())
    rows = {(r["op"], r["layout"]): r for r in doc["rows"]}
    assert set(rows) == set(READ_BYTES)
    for key, row in rows.items():
        assert row["bytes"] == 1024 * READ_BYTES[key] + 16 * 4 + 2 * 4, row
        assert row["seconds"] > 0 and row["invalid"] == "", row


def test_a_reader_that_skips_or_replays_its_read_fails_the_bench(tmp_path: Path) -> None:
    """The readers' cheats, timed beside the reference's read on the same source caches: the poison before each
    sample catches the one that reads once, the two source caches taken in turn the one that replays its rows."""
    argv = ["bench", "--platform", "cpu", "--kernel", "first-read-only", "--kernel", "replays-first-read",
            "--kernel", "reference-gather", "--layout", "fp8", "--tokens", "2000", "--report", str(tmp_path)]
    env = child_env(REPO, RTP_REF_KERNELS="tests.bench.cheating_kernels:kernels")
    proc = shared_zygote().run(argv, env, tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    invalid = {r["kernel"]: r["invalid"] for r in json.loads((tmp_path / "bench.json").read_text())["rows"]}
    assert "still hold the poison written before the sample" in invalid["first-read-only"]
    assert "a stale read" in invalid["replays-first-read"]
    assert invalid["reference-gather"] == ""


def test_a_figure_faster_than_the_copies_of_its_run_is_impossible() -> None:
    """A real measured figure of torch-eager passes; the same record with its time cut below what the copies
    measured in the same process allow is rejected, and one just inside the allowance is not."""
    cpu = torch.device("cpu")
    contract = WriteContract.for_platform(load_platform("cpu"))
    w = workload(MLA_OP, "fp8", 64, contract, cpu)
    check = CacheCheck(w)
    kernel = TorchEagerKernel(contract)
    measured = time_call(lambda: w.call(kernel), cpu, min_seconds=0.05, before=check.poison, after=check.mismatch)
    limit = speed_limit(copy_roof(cpu, 16 << 20), copy_roof(cpu, w.footprint // 2))
    assert judge(measured, w.nbytes, limit) == ""
    too_fast = replace(measured, seconds=w.nbytes / limit / 2)
    assert judge(too_fast, w.nbytes, limit).endswith("the copies measured in this run allow: impossible")
    assert judge(replace(measured, seconds=w.nbytes / limit * 1.01), w.nbytes, limit) == ""
    assert "impossible" in judge(replace(measured, seconds=0.0), w.nbytes, limit)  # a timer that saw nothing
    assert speed_limit(2.0, 3.0) == pytest.approx(3.0 * ROOF_ALLOWANCE)  # the faster copy sets the limit


def _row(tokens: int, low: float, high: float, invalid: str = "") -> BenchRow:
    return BenchRow("k", MLA_OP, "fp8", tokens, 1, (low + high) / 2, None, None, seconds_low=low,
                    seconds_high=high, invalid=invalid)


def test_a_series_slower_with_fewer_tokens_beyond_its_spread_is_warned_about() -> None:
    """64 tokens slower than 1024 happened on a loaded 2-core machine: noise, which the report must flag."""
    (warning,) = non_monotonic([_row(64, 2e-3, 3e-3), _row(1024, 1e-3, 1.5e-3)])
    assert warning.startswith("k concat_and_cache_mla fp8, eager: 64 tokens (fastest sample 2000.0 us) took longer "
                              "than 1024 tokens (slowest sample 1500.0 us)")
    # within the spread of both, or rising with the size: no warning; an invalid figure is no evidence either way
    assert non_monotonic([_row(64, 1e-3, 3e-3), _row(1024, 1.5e-3, 2e-3)]) == []
    assert non_monotonic([_row(64, 1e-3, 1.2e-3), _row(1024, 2e-3, 3e-3)]) == []
    assert non_monotonic([_row(64, 2e-3, 3e-3, invalid="stale"), _row(1024, 1e-3, 1.5e-3)]) == []


@pytest.mark.parametrize("layout", ["fp8", "fp8_ds_mla"])
def test_compiled_baseline_writes_what_torch_eager_writes(layout: str) -> None:
    """A baseline that wrote different bytes would be a meaningless speed reference."""
    import torch._inductor.config

    contract = WriteContract.for_platform(load_platform("cpu"))
    layout_obj = contract.layout(layout, 512, 64)
    spec = CaseSpec(layout, "random", 37, 16, num_blocks_for(37, 16), torch.bfloat16, 3)
    eager_case, compiled_case = (build_case(spec, layout_obj, "cpu") for _ in range(2))
    eager = TorchEagerKernel(contract)
    # compiled in this process: a pool of compile workers (one per core, each importing torch) costs a fresh
    # environment's first compile about 7 s more on two cores than it saves on this one small graph
    with torch._inductor.config.patch(compile_threads=1):
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


def test_a_cold_figure_flushes_before_every_call_and_times_the_call_alone() -> None:
    """The flush (here a 20 ms sleep) runs before each call and outside the timer; the calls (one per input set)
    are made in turn; the check hooks run once per sample of ``COLD_CALLS`` calls. A timer around the flush too
    would report at least 20 ms a call; calls without a flush between them would be warm."""
    made: list[str] = []

    def flush() -> None:
        made.append("flush")
        time.sleep(0.02)

    checks: list[str] = []
    timing = time_cold([lambda: made.append("a"), lambda: made.append("b")], flush, torch.device("cpu"),
                       min_seconds=0.0, before=lambda: checks.append("before"),
                       after=lambda: checks.append("after"))
    warm_up = ["a", "b"]
    assert made[:2] == warm_up
    timed = made[2:]
    assert timed == ["flush", "a", "flush", "b"] * (len(timed) // 4) and len(timed) == 2 * timing.reps
    assert timing.reps == 3 * COLD_CALLS and checks == ["before", "after"] * 3
    assert timing.high < 5e-3, timing


def test_a_figure_of_each_mode_is_named_when_invalid_and_in_its_own_series() -> None:
    """A cold figure is judged and named like the eager and graph ones; its series is warned about on its own."""
    cold = replace(_row(64, 1e-3, 1e-3), cold_seconds=1e-3, cold_seconds_low=2e-3, cold_seconds_high=3e-3,
                   cold_invalid="stale")
    assert invalid_figures([cold]) == ["k concat_and_cache_mla fp8 at 64 tokens, cold: stale"]
    small = replace(_row(64, 1e-3, 1e-3), cold_seconds_low=2e-3, cold_seconds_high=3e-3)
    large = replace(_row(1024, 1e-3, 1e-3), cold_seconds_low=1e-3, cold_seconds_high=1.5e-3)
    (warning,) = non_monotonic([small, large])
    assert warning.startswith("k concat_and_cache_mla fp8, cold: 64 tokens")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="cold L2 figures are GPU figures")
def test_on_a_gpu_every_figure_is_checked_cold_included(tmp_path: Path) -> None:
    """On a GPU each point has its cold figure (one graph replay at a time after an L2 flush) beside the eager and
    graph ones, all checked: the first-call-only cheat is invalid in every mode, the Triton writer valid in all,
    its cold call no faster than the copy roof allows."""
    argv = ["bench", "--platform", "auto", "--kernel", "first-call-only", "--kernel", "triton", "--layout", "fp8",
            "--tokens", "64", "16384", "--report", str(tmp_path)]
    env = child_env(REPO, RTP_REF_KERNELS="tests.bench.cheating_kernels:kernels")
    proc = shared_zygote().run(argv, env, tmp_path, timeout=600)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads((tmp_path / "bench.json").read_text())
    for row in doc["rows"]:
        if row["kernel"] == "first-call-only":
            # its graphs capture no kernel (its write happened before them): replayed, they leave the poison; were
            # an empty capture refused, the graph figure would be absent, named, never a time
            assert row["invalid"] and row["cold_invalid"] and (row["graph_invalid"] or row["graph_note"]), row
        else:
            assert (row["invalid"], row["graph_invalid"], row["cold_invalid"]) == ("", "", ""), row
            assert row["cold_timer"] == "cuda events per graph replay of one call, L2 flushed before it"
            assert row["cold_seconds"] >= row["bytes"] / (doc["roof_bytes_per_s"] * ROOF_ALLOWANCE)
            # the host's time per queued call: its checks and launch, never more than the calls took on the GPU
            # by more than the queue's slack (the host may run ahead, never behind by much)
            assert 0 < row["host_seconds"] < 2 * row["seconds"] + 1e-4, row
    assert "| cold L2 | of roof |" in (tmp_path / "bench.md").read_text()


def test_a_layered_write_counts_every_layer_and_checks_every_layer(tmp_path: Path) -> None:
    """``--layers 1 3``: each write point again as three layers' writes (one slot mapping, each layer its own caches
    and values): torch-eager in three calls, a grouped kernel in one; a grouped kernel that writes the first layer
    only is rejected by the check of the second, and its one-layer figures stand."""
    argv = ["bench", "--platform", "cpu", "--kernel", "torch-eager", "--kernel", "grouped-torch-eager", "--kernel",
            "grouped-first-layer-only", "--layout", "fp8", "--tokens", "64", "--layers", "1", "3", "--report",
            str(tmp_path)]
    env = child_env(REPO, RTP_REF_KERNELS="tests.bench.cheating_kernels:kernels")
    proc = shared_zygote().run(argv, env, tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = {(r["kernel"], r["layers"]): r for r in json.loads((tmp_path / "bench.json").read_text())["rows"]}
    one = 64 * TOKEN_BYTES[("concat_and_cache_mla", "fp8")]
    for kernel in ("torch-eager", "grouped-torch-eager", "grouped-first-layer-only"):
        assert (rows[(kernel, 1)]["bytes"], rows[(kernel, 1)]["invalid"]) == (one, "")
        assert rows[(kernel, 3)]["bytes"] == 3 * one
    assert [rows[(k, 3)]["launches"] for k in ("torch-eager", "grouped-torch-eager")] == [3, 1]
    assert rows[("torch-eager", 3)]["invalid"] == rows[("grouped-torch-eager", 3)]["invalid"] == ""
    assert rows[("grouped-first-layer-only", 3)]["invalid"].startswith("layer 1 of 3: after a timed sample")
    assert proc.stderr.splitlines()[1].startswith(
        "  grouped-first-layer-only concat_and_cache_mla fp8 at 64 tokens x3 layers, eager: layer 1 of 3")
    table = (tmp_path / "bench.md").read_text()
    assert "| 64 | 3 (1 launch) |" in table and "| 64 | 3 (3 launches) |" in table


def test_a_point_whose_inputs_cannot_be_made_is_an_invalid_row_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in making a point's inputs (one was a reference writer that put a CPU index beside CUDA tensors) is
    rtp-ref's, not the kernels': the point's rows say why and fail the run; the other points are still timed."""
    from rtp_ref.bench import run

    made = run._point

    def broken(op: str, variant: str, tokens: int, layers: int, contract: WriteContract,
               device: torch.device) -> object:
        if tokens == 64:
            raise RuntimeError("Expected all tensors to be on the same device")
        return made(op, variant, tokens, layers, contract, device)

    monkeypatch.setattr(run, "_point", broken)
    contract = WriteContract.for_platform(load_platform("cpu"))
    doc = run.run_bench(load_platform("cpu"), contract, [("torch-eager", TorchEagerKernel(contract))],
                        {MLA_OP: ["fp8"]}, [64, 128], torch.device("cpu"), progress=lambda _: None)
    rows = {r["tokens"]: r for r in doc["rows"]}
    assert rows[64]["invalid"] == ("not timed: this point's inputs could not be made: RuntimeError: Expected all "
                                   "tensors to be on the same device")
    assert rows[128]["seconds"] > 0 and rows[128]["invalid"] == ""
    assert doc["invalid"] == [f"torch-eager concat_and_cache_mla fp8 at 64 tokens, eager: {rows[64]['invalid']}"]

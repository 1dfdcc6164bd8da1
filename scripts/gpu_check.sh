#!/usr/bin/env bash
# One device-machine session: install rtp-ref next to the machine's own torch, then run a stage.
#   scripts/gpu_check.sh correctness   unit tests on CUDA (mutants and fault isolation included),
#                                      certify cuda-sm90 (native) and rocm-gfx942 (emulated), memcheck
#   scripts/gpu_check.sh kernels       the triton and cuda kernels' unit tests, then their bandwidth at 2M
#                                      tokens with the triton launch sweep (tests/kernels/bandwidth.py)
#   scripts/gpu_check.sh probe         kernel unit tests, scripts/perf_probe.py (random vs sequential slots,
#                                      scatter-copy roofs) and ncu's DRAM bytes for a few writes
#   scripts/gpu_check.sh final         kernel and mutant tests, certify (sm90 native, gfx942 emulated),
#                                      memcheck, the bandwidth sweep and rtp-ref bench (in one call)
#   scripts/gpu_check.sh quick         the cuda kernel's tests, certification and memcheck, then the
#                                      bandwidth table and rtp-ref bench (about 4 minutes with the start)
#   scripts/gpu_check.sh bench         rtp-ref bench at 16K and 2M tokens with the torch.compile baseline
#   scripts/gpu_check.sh pinning       -n 2 on a 2-GPU host: one GPU per xdist worker; then rtp-ref bench
#                                      (no compile baseline) for the table and chart
# Logs and reports go to $OUT (or ./gpu-out). Wheels the image lacks travel in .whl/.
set -uo pipefail
stage=${1:?stage: correctness, kernels, probe, final, quick, bench or pinning}
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
site=/tmp/rtp-site
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target "$site" . .whl/*.whl \
  >"$out/install.log" 2>&1 || { cat "$out/install.log"; exit 1; }
export PYTHONPATH="$site" PYTHONUNBUFFERED=1
export TORCH_EXTENSIONS_DIR=/tmp/torch-ext TRITON_CACHE_DIR=/tmp/triton-cache
rtp() { python3 -m rtp_ref.cli "$@"; }
python3 - <<'PY' | tee "$out/env.txt"
import torch, triton
print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)
print("devices", [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
PY
rtp platforms detect
case "$stage" in
correctness)
  # unit tests: all 8 workers share the one GPU (--platform cpu: no one-GPU-per-worker rule)
  python3 -m pytest -q -n 8 --platform cpu --maxfail 20 tests -p no:cacheprovider \
    2>&1 | tee "$out/unit.log" | tail -15
  rtp certify --platform cuda-sm90 --report "$out/cuda-sm90" --case-timeout 300 > "$out/certify-sm90.log" 2>&1
  tail -22 "$out/certify-sm90.log"
  rtp certify --platform rocm-gfx942 --report "$out/rocm-gfx942" --case-timeout 300 > "$out/certify-gfx942.log" 2>&1
  tail -22 "$out/certify-gfx942.log"
  compute-sanitizer --tool memcheck --error-exitcode 9 python3 scripts/sanitize_kernels.py > "$out/memcheck.log" 2>&1
  echo "memcheck exit $?"; grep -E "ERROR SUMMARY|kernels checked" "$out/memcheck.log"
  ;;
kernels)
  python3 -m pytest -q -n 8 --platform cpu tests/kernels -p no:cacheprovider 2>&1 | tee "$out/kernels.log" | tail -4
  python3 -m tests.kernels.bandwidth --sweep 2>&1 | tee "$out/bandwidth.log"
  ;;
probe)
  python3 -m pytest -q -n 8 --platform cpu tests/kernels -p no:cacheprovider 2>&1 | tee "$out/kernels.log" | tail -2
  rtp certify --platform cuda-sm90 --kernel triton --kernel cuda --report "$out/cuda-sm90" > "$out/certify-sm90.log" 2>&1
  tail -8 "$out/certify-sm90.log"
  python3 scripts/perf_probe.py 2>&1 | tee "$out/probe.log"
  metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_op_write.sum
  for lk in "fp8 triton" "fp8_ds_mla triton" "fp8 cuda" "fp8_ds_mla cuda"; do
    echo "== ncu $lk"
    ncu --clock-control none -k regex:mla_cache_write --metrics "$metrics" python3 scripts/perf_probe.py --one $lk 2>&1 \
      | grep -E "^\s+(gpu__|dram__|sm__|lts__)" | tee -a "$out/ncu.log"
  done
  ;;
final)
  # everything that must hold for the kernels as committed: tests, certification, memcheck, speed
  python3 -m pytest -q -n 8 --platform cpu tests/kernels tests/mutants -p no:cacheprovider 2>&1 | tee "$out/unit.log" | tail -2
  rtp certify --platform cuda-sm90 --report "$out/cuda-sm90" --case-timeout 300 > "$out/certify-sm90.log" 2>&1
  tail -14 "$out/certify-sm90.log"
  rtp certify --platform rocm-gfx942 --report "$out/rocm-gfx942" --case-timeout 300 > "$out/certify-gfx942.log" 2>&1
  tail -3 "$out/certify-gfx942.log"
  compute-sanitizer --tool memcheck --error-exitcode 9 python3 scripts/sanitize_kernels.py > "$out/memcheck.log" 2>&1
  echo "memcheck exit $?"; grep -E "ERROR SUMMARY|kernels checked" "$out/memcheck.log"
  python3 -m tests.kernels.bandwidth --sweep 2>&1 | tee "$out/bandwidth.log" | grep -v " t[0-9]"
  rtp bench --compile-baseline --report "$out/bench" 2>&1 | tee "$out/bench.log" | tail -24
  ;;
quick)
  # after a change to the cuda kernel alone: its tests, certification and memcheck, then the bench
  python3 -m pytest -q -n 8 --platform cpu tests/kernels/test_cuda.py -p no:cacheprovider 2>&1 | tail -2
  rtp certify --platform cuda-sm90 --kernel cuda --report /tmp/quick > "$out/certify.log" 2>&1; tail -6 "$out/certify.log"
  compute-sanitizer --tool memcheck --error-exitcode 9 python3 scripts/sanitize_kernels.py cuda > /tmp/memcheck.log 2>&1
  echo "memcheck exit $?"; grep -E "ERROR SUMMARY|kernels checked" /tmp/memcheck.log
  python3 -m tests.kernels.bandwidth 2>&1 | tee "$out/bandwidth.log"
  rtp bench --tokens 16384 2097152 --report "$out/bench" 2>&1 | tee "$out/bench.log"
  ;;
bench)
  rtp bench --compile-baseline --report "$out/bench" 2>&1 | tee "$out/bench.log" | tail -40
  ;;
pinning)
  # -n 2 on a 2-GPU host: one GPU per worker; -n 3 must refuse. Then the bench table and chart.
  rtp certify --platform cuda-sm90 --kernel cuda --kernel triton -n 2 --report /tmp/pin2 > "$out/pin2.log" 2>&1
  tail -12 "$out/pin2.log"
  python3 - /tmp/pin2/report.json <<'PY'
import collections, json, sys
cases = json.load(open(sys.argv[1]))["cases"]
seen = collections.defaultdict(set)
for c in cases:
    if c.get("worker"):
        seen[c["worker"]].add(c.get("visible_devices"))
print("worker -> CUDA_VISIBLE_DEVICES:", {w: sorted(map(str, v)) for w, v in sorted(seen.items())})
PY
  rtp certify --platform cuda-sm90 --kernel cuda --layout auto -n 3 --report /tmp/pin3 2>&1 | tail -2
  rtp bench --tokens 16384 2097152 --report "$out/bench" 2>&1 | tail -26
  ;;
*)
  echo "unknown stage $stage: correctness, kernels, probe, final, quick, bench or pinning" >&2; exit 2
  ;;
esac

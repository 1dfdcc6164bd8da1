#!/usr/bin/env bash
# One device-machine session: install rtp-ref next to the machine's own torch, then run stages.
#   scripts/gpu_check.sh correctness   unit tests on CUDA (mutants and fault isolation included), certify
#                                      cuda-sm90 (native) and rocm-gfx942 (emulated), memcheck of triton+cuda
#   scripts/gpu_check.sh sweep         tests/kernels/bandwidth.py with every launch-tuning variant
#   scripts/gpu_check.sh bench         rtp-ref bench at 16K and 2M tokens with the torch.compile baseline
#   scripts/gpu_check.sh probe         kernel tests, the bandwidth table with random and sequential slots,
#                                      and ncu's DRAM bytes and instruction counts for a few writes
#   scripts/gpu_check.sh quick         after a cuda-kernel change: its tests, certification and memcheck,
#                                      then the bandwidth table and rtp-ref bench (about 4 minutes with the start)
#   scripts/gpu_check.sh tune          after a kernel change: the triton and cuda kernel tests, then the
#                                      bandwidth table with every launch-tuning variant
#   scripts/gpu_check.sh pinning       -n 2 on a 2-GPU host: one GPU per xdist worker; -n 3 refused
#   scripts/gpu_check.sh vendor        the CUDA C++ example vendor package (examples/cuda_vendor_kernel): built,
#                                      certified next to its crashing variant, its GPU test, and memcheck over both
#   scripts/gpu_check.sh families      the MHA paged and indexer kernels (triton, cuda) against their references, the
#                                      same under compute-sanitizer, the MLA kernels' tests, and certify of every
#                                      op's built-in kernels on cuda-sm90 (native) and rocm-gfx942 (emulated)
#   scripts/gpu_check.sh records       a layout added as a record in a TOML table ($RTP_REF_LAYOUTS, the one of
#                                      tests/kv/test_add_a_layout.py): triton and cuda certified on it natively
#   scripts/gpu_check.sh large         the large-address tier (caches past 4 GiB) of every op's GPU kernels, native
#   scripts/gpu_check.sh formats       every op's GPU kernels certified with the cache in another fp8 format than
#                                      the platform's (cache_fp8_format=e4m3fnuz on cuda-sm90, e4m3fn on gfx942)
#   scripts/gpu_check.sh lean          the built-in kernels' call path: their tests, every op certified natively,
#                                      rtp-ref bench of their kernels at every size (eager, graph, launch floor)
#   scripts/gpu_check.sh cudamutant    the large tier against its CUDA C++ int32-offset mutant (built at first use)
#   scripts/gpu_check.sh reader        the readers (the MLA and indexer gathers): their kernel tests, the same
#                                      under compute-sanitizer, certify of the readers with the triton and cuda writers
#                                      (round trips) on cuda-sm90 (native) and rocm-gfx942 (emulated)
#   scripts/gpu_check.sh mhaperf       after an MHA kernel change: the MHA and indexer kernel tests, the same under
#                                      compute-sanitizer, cuda-mha certified (cuda-sm90 native, rocm-gfx942 emulated)
#                                      and in the graph tier, and rtp-ref bench of the MHA kernels at every size
#   scripts/gpu_check.sh famncu        ncu's bytes, instructions, occupancy and stalls of every MHA and indexer kernel variant at
#                                      2M tokens (two calls each), the full output to $OUT/ncu-families.log
#   scripts/gpu_check.sh final         after kernel work: rtp-ref bench of every built-in writer at every size (the
#                                      table and chart of docs/performance.md), every kernel test on the GPU, every
#                                      built-in writer certified (cuda-sm90 native, rocm-gfx942 emulated)
#   scripts/gpu_check.sh gate          README's GPU gate as tox -e cuda runs it, each command timed: certify
#                                      --platform auto --tier all, then the unit tests (workers share the GPU, the 40
#                                      slowest listed)
#   scripts/gpu_check.sh verify        certify --platform all (every table, this host's GPU), then compute-sanitizer
#                                      over every built-in GPU kernel of every op
#   scripts/gpu_check.sh sanitize      compute-sanitizer over every built-in GPU kernel of every op (verify's second half)
#   scripts/gpu_check.sh coldbench     the bench's tests on the GPU, then rtp-ref bench of every built-in writer and reader
#                                      at every size: cold L2, eager and graph figures, each verified
#   scripts/gpu_check.sh hostprof      each built-in GPU writer's host time per eager call at one token, profiled
#                                      (scripts/host_profile.py), beside an empty torch op's and a Triton launch's
#   scripts/gpu_check.sh readbench     rtp-ref bench of the MLA and indexer readers (Triton, CUDA) at every size
#   scripts/gpu_check.sh gateall       gate, then certify --platform all in what is left of GATE_ALL_BOUND seconds
#   scripts/gpu_check.sh gatetests     the unit tests as tox -e cuda runs them, timed, the 40 slowest listed
#   scripts/gpu_check.sh all           certify --platform all (every table on this host's GPU), timed
#   scripts/gpu_check.sh fp4           V41, V41_FP4 and nvfp4_fp8_ds_mla: triton and torch-eager certified on cuda-sm100
#                                      (emulated), then the FP4 kernel tests
#   scripts/gpu_check.sh nvfp4         rcp.approx probed, the NVFP4 MHA Triton writer certified on cuda-sm100 and
#                                      cuda-sm120 (emulated on sm90), mxfp4 indexer writers and readers, their tests
#   scripts/gpu_check.sh fork432       the Triton MLA writer on nvfp4_ds_mla_bf16rope (its kernel tests) and the
#                                      NVFP4 MHA writer's graph tier on cuda-sm100
#   scripts/gpu_check.sh gatediag      the unit tests as gatetests runs them, each bounded by --timeout (stacks of a hang)
#   scripts/gpu_check.sh padding       every built-in GPU writer certified natively under padding_slot=zero (every
#                                      tier)
#   scripts/gpu_check.sh gateshort     certify --platform auto --tier all, then the GPU tests of what changed lately
#   scripts/gpu_check.sh gatecertify   certify --platform auto --tier all (tox -e cuda's second command), timed, then
#                                      certify --platform cpu on this host
#   scripts/gpu_check.sh graph         the CUDA-graph tier: every op's built-in kernels on cuda-sm90 (native) and
#                                      rocm-gfx942 (emulated), and the graph mutants (tests/mutants/test_graph_mutants.py)
# Several stages run in order: scripts/gpu_check.sh correctness sweep bench.
# Logs and the bench chart go to $OUT (or ./gpu-out), at most 8 files (the device tool returns no more);
# full reports stay under /tmp/rtp-reports. Wheels the image lacks travel in .whl/.
set -uo pipefail
[ $# -gt 0 ] || { echo "usage: $0 STAGE...: correctness, sweep, bench, probe, quick, tune, pinning, vendor, families, records, formats, large, graph, reader, mhaperf, famperf, famncu, final, lean, cudamutant, gate, gateall, gateshort, gatetests, all, padding, gatecertify, fp4, nvfp4, fork432, gatediag, sanitize, readbench, coldbench, hostprof or verify" >&2; exit 2; }
out=${OUT:-$PWD/gpu-out}
reports=/tmp/rtp-reports
mkdir -p "$out" "$reports"
# installed as tox installs it: into the machine's own python environment (beside its torch, triton and pytest),
# run through the console scripts, so the tests that spawn `rtp-ref` or read the install find what tox gives them
B=$(dirname "$(python3 -c 'import sys; print(sys.executable)')")
python3 -m pip install -q --no-index --no-deps --no-build-isolation . $(ls .whl/*.whl 2>/dev/null) \
  >"$reports/install.log" 2>&1 || { cat "$reports/install.log"; exit 1; }
export PYTHONUNBUFFERED=1
export TORCH_EXTENSIONS_DIR=/tmp/torch-ext TRITON_CACHE_DIR=/tmp/triton-cache
# as tox -e cuda leaves it: no thread count (tests/conftest.py gives each unit-test worker one torch thread)
RTP=$B/rtp-ref
PYTEST=$B/pytest
rtp() { "$RTP" "$@"; }
python3 - <<'PY' | tee "$out/env.txt"
import torch, triton
print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)
print("devices", [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
PY
rtp platforms detect

# unit tests on the GPU: all workers share it (--platform cpu: no one-GPU-per-worker rule)
unit_tests() { "$PYTEST" -q -n 8 --platform cpu -p no:cacheprovider "$@" 2>&1 | tee -a "$out/unit.log" | tail -2; }
# certify PLATFORM [certify options]: the log to $OUT, the reports under /tmp
certify() {
  rtp certify --platform "$1" --report "$reports/$1" --case-timeout 300 "${@:2}" > "$reports/$1.log" 2>&1
  grep -E "passed|failed" "$reports/$1.log" | tail -1 | tee -a "$out/certify.log"
  tail -45 "$reports/$1.log" | tee -a "$out/certify.log"
}
# memcheck [KERNEL ...]: rtp-ref memcheck (compute-sanitizer over one call of every conformance case) of the
# kernels on cuda-sm90 (default: triton and cuda); log and report under /tmp, every row but the clean ones shown
memcheck() {
  local kernel kernels=()
  [ $# -gt 0 ] || set -- triton cuda
  for kernel in "$@"; do kernels+=(--kernel "$kernel"); done
  rtp memcheck "${kernels[@]}" --platform cuda-sm90 --case-timeout 300 --report "$reports/memcheck" \
    > "$reports/memcheck.log" 2>&1
  echo "memcheck exit $?"; grep -vE "  clean$" "$reports/memcheck.log" | tail -40
}
bandwidth() { python3 -m tests.kernels.bandwidth "$@" 2>&1 | tee "$out/bandwidth.log"; }
bench() { rtp bench --report "$out/bench" "$@" 2>&1 | tee "$out/bench.log"; }

for stage in "$@"; do
  case "$stage" in
  gate)
    # README's GPU gate as tox -e cuda runs it, on a cold machine: certify --platform auto --tier all (it builds the
    # kernels), then the unit tests without the CPU large tests, each timed and bounded (SIGINT lets pytest print
    # its summary and the slowest tests even when it is cut off)
    start=$(date +%s)
    { time timeout -s INT 280 "$RTP" certify --platform auto --tier all --report "$reports/auto"; } \
      > "$out/gate-certify.log" 2>&1
    grep -vE " certified +bit_exact| raises as required" "$out/gate-certify.log" | tail -40
    { time timeout -s INT ${GATE_TESTS_BOUND:-270} "$PYTEST" -q -p no:cacheprovider -n auto --dist load --maxschedchunk 1 \
        --platform cpu -m "not large" --durations=60 --durations-min=3 tests; } > "$out/gate-tests.log" 2>&1
    grep -E "^(FAILED|ERROR)|passed|failed|^real|^[0-9.]+s " "$out/gate-tests.log" | tail -90
    echo "gate total: $(( $(date +%s) - start )) s"
    ;;
  verify)
    # every built-in kernel on every table on this GPU, then (the sanitize stage) compute-sanitizer over every
    # built-in GPU kernel of every op on this GPU's table
    { time timeout -s INT 330 "$RTP" certify --platform all --report "$reports/all"; } \
      > "$out/certify-all.log" 2>&1
    grep -vE " certified +bit_exact| raises as required" "$out/certify-all.log" | tail -50
    "$0" sanitize
    ;;
  sanitize)
    { time timeout -s INT 150 "$RTP" memcheck --kernel triton --kernel cuda --platform auto \
        --case-timeout 120 --report "$reports/memcheck"; } > "$out/memcheck.log" 2>&1
    echo "memcheck exit $?"; grep -vE "  clean$" "$out/memcheck.log" | tail -20
    # the other ops' GPU kernels and the FP4 Triton writers: their kernel tests under the sanitizer
    { time timeout -s INT 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$PYTEST" -q \
        -p no:cacheprovider --platform cpu tests/kernels/test_mha_indexer_kernels.py tests/kernels/test_gather_kernels.py \
        tests/kernels/test_triton_fp4.py tests/kernels/test_triton_nvfp4_mha.py -k "cuda or triton or fp4"; } \
        > "$out/sanitizer.log" 2>&1
    echo "compute-sanitizer exit $?"; grep -E "ERROR SUMMARY|passed|failed|^real" "$out/sanitizer.log" | tail -8
    ;;
  gateall)
    # one short lease for everything the GPU must show: README's gate as tox -e cuda runs it (certify --platform
    # auto --tier all: every tier, the stream tier included, then the unit tests), each timed; then certify
    # --platform all (every table on this GPU) in what is left of GATE_ALL_BOUND
    start=$(date +%s)
    { time timeout -s INT ${GATE_CERTIFY_BOUND:-170} "$RTP" certify --platform auto --tier all \
        --report "$reports/auto" -- --durations=${GATE_CERTIFY_DURATIONS:-12}; } > "$out/gate-certify.log" 2>&1
    echo "gate certify exit $?"; grep -vE " certified +bit_exact| raises as required" "$out/gate-certify.log" | tail -45
    { time timeout -s INT ${GATE_TESTS_BOUND:-200} "$PYTEST" -q -p no:cacheprovider -n auto --dist load --maxschedchunk 1 \
        --platform cpu -m "not large" --durations=${GATE_DURATIONS:-25} --durations-min=${GATE_DURATIONS_MIN:-3} tests; } > "$out/gate-tests.log" 2>&1
    echo "gate tests exit $?"; grep -E "^(FAILED|ERROR)|passed|failed|^real" "$out/gate-tests.log" | tail -40
    echo "gate total: $(( $(date +%s) - start )) s"
    left=$(( ${GATE_ALL_BOUND:-480} - ($(date +%s) - start) ))
    if [ "$left" -gt 30 ]; then
      { time timeout -s INT "$left" "$RTP" certify --platform all --report "$reports/all"; } \
        > "$out/certify-all.log" 2>&1
      echo "certify all exit $?"; grep -vE " certified +bit_exact| raises as required" "$out/certify-all.log" | tail -40
    fi
    ;;
  gatetests)
    # the unit tests as tox -e cuda runs them (after certify built the kernels, or building them), timed, bounded
    { time timeout -s INT ${GATE_TESTS_BOUND:-270} "$PYTEST" -q -p no:cacheprovider -n auto --dist load --maxschedchunk 1 \
        --platform cpu -m "not large" --durations=40 --durations-min=4 tests; } > "$out/gate-tests.log" 2>&1
    echo "gate tests exit $?"; grep -E "^(FAILED|ERROR)|passed|failed|^real|^user|^[0-9.]+s " "$out/gate-tests.log" | tail -60
    ;;
  all)
    # certify --platform all (every table, this host's GPU), timed, bounded
    { time timeout -s INT ${CERTIFY_ALL_BOUND:-330} "$RTP" certify --platform all --report "$reports/all"; } \
      > "$out/certify-all.log" 2>&1
    echo "certify all exit $?"; grep -vE " certified +bit_exact| raises as required|certified \(bit_exact\)" \
      "$out/certify-all.log" | tail -50
    ;;
  fp4)
    # the FP4 and V4.1 records (docs/layouts.md, "Where the FP4 records are certified"): the Triton writer compiled
    # for this GPU (E2M1 in software) and torch-eager certified on cuda-sm100 (emulated on sm90), then their tests
    { time timeout -s INT ${FP4_BOUND:-150} "$RTP" certify --platform cuda-sm100 --kernel triton --kernel torch-eager \
        --layout V41 --layout V41_FP4 --layout nvfp4_fp8_ds_mla --report "$reports/fp4"; } > "$out/fp4.log" 2>&1
    echo "fp4 certify exit $?"; grep -vE " certified +bit_exact| raises as required|^SKIPPED" "$out/fp4.log" | tail -25
    timeout -s INT 120 "$PYTEST" -q -p no:cacheprovider -n 4 --platform cpu tests/kernels/test_triton_fp4.py tests/kernels/test_triton.py \
      tests/kv/test_nvfp4_mla.py 2>&1 | tail -15
    ;;
  nvfp4)
    # the NVFP4 MHA variant and the MXFP4 indexer on this GPU: whether rcp.approx.ftz.f32 is correctly rounded
    # (scripts/probe_rcp.py), the Triton writers compiled here certified on the tables that list them (emulated on
    # sm90), the readers' round trips of mxfp4, then their kernel tests
    timeout 120 python3 scripts/probe_rcp.py 2>&1 | tee "$out/rcp.txt"
    for table in cuda-sm100 cuda-sm120; do
      { time timeout -s INT ${FP4_BOUND:-150} "$RTP" certify --platform $table --kernel triton-mha --layout nvfp4 \
          --tier all --report "$reports/nvfp4-$table"; } > "$out/nvfp4-$table.log" 2>&1
      echo "nvfp4 $table exit $?"; grep -vE " certified +bit_exact| raises as required|^SKIPPED" "$out/nvfp4-$table.log" | tail -15
    done
    { time timeout -s INT ${FP4_BOUND:-150} "$RTP" certify --platform cuda-sm100 --kernel triton-indexer --kernel cuda-indexer \
        --kernel triton-indexer-gather --kernel cuda-indexer-gather --layout mxfp4 --tier all --report "$reports/mxfp4"; } > "$out/mxfp4.log" 2>&1
    echo "mxfp4 exit $?"; grep -vE " certified +bit_exact| raises as required|^SKIPPED" "$out/mxfp4.log" | tail -15
    timeout -s INT 150 "$PYTEST" -q -p no:cacheprovider -n 8 --platform cpu tests/kernels/test_triton_nvfp4_mha.py \
      tests/kernels/test_mha_indexer_kernels.py tests/kernels/test_gather_kernels.py tests/kv/test_nvfp4_mha.py \
      tests/kv/test_mxfp4_indexer.py 2>&1 | tail -15
    ;;
  fork432)
    # after the fork's 432-byte NVFP4 MLA record and the nvfp4 graph case: the Triton MLA writer compiled here against
    # the reference on that record, and the NVFP4 MHA writer in the graph tier (emulated on sm90)
    { time timeout -s INT 60 "$RTP" certify --platform cuda-sm100 --kernel triton-mha --layout nvfp4 --tier graph \
        --report "$reports/nvfp4-graph"; } > "$out/nvfp4-graph.log" 2>&1
    echo "nvfp4 graph exit $?"; tail -6 "$out/nvfp4-graph.log"
    timeout -s INT 90 "$PYTEST" -q -p no:cacheprovider -n 4 --platform cpu tests/kernels/test_triton.py \
      -k bf16rope 2>&1 | tail -4
    ;;
  gatediag)
    # the unit tests as gatetests runs them, each test bounded (pytest-timeout dumps the stacks of one that hangs),
    # every result line with its worker, and what the machine runs at 30, 90 and 150 s (the busiest processes), to
    # find what keeps tox -e cuda's tests past their 5 minutes
    for at in 30 90 150; do
      (sleep $at; echo "== processes at $at s"; ps -eo pid,ppid,pcpu,etimes,args --sort=-pcpu | cut -c1-220 | head -25) \
        >> "$out/gate-ps.log" 2>&1 &
    done
    # each result line stamped with the seconds since the start: per worker, when it was busy and with what
    started=$(date +%s.%N)
    { time timeout -s INT ${GATE_TESTS_BOUND:-200} "$PYTEST" -v -p no:cacheprovider -n auto --dist load --maxschedchunk 1 \
        --platform cpu -m "not large" --timeout ${TEST_TIMEOUT:-90} --timeout-method thread -rfE \
        --durations=0 --durations-min=0.5 tests; } 2>&1 | while IFS= read -r line; do
          printf '%.1f %s\n' "$(echo "$(date +%s.%N) - $started" | bc)" "$line"; done > "$out/gate-diag.log"
    echo "gate diag exit $?"; grep -E " (FAILED|ERROR)|Timeout|passed|failed|real|user" "$out/gate-diag.log" | tail -40
    wait
    ;;
  padding)
    # the engine padding conventions natively (docs/conformance.md#padding-conventions): every built-in GPU writer
    # certified with padding_slot=zero (slot 0 the reserved sink), every tier, timed, bounded
    { time timeout -s INT ${PADDING_BOUND:-200} "$RTP" certify --platform auto --kernel triton --kernel triton-mha \
        --kernel triton-indexer --kernel cuda --kernel cuda-mha --kernel cuda-indexer --tier all \
        --layout-flag padding_slot=zero --report "$reports/padding"; } > "$out/padding.log" 2>&1
    echo "padding zero exit $?"; grep -vE " certified +bit_exact| raises as required" "$out/padding.log" | tail -30
    ;;
  gateshort)
    # a short lease: certify --platform auto --tier all (tox -e cuda's first command, every tier), then the GPU
    # tests of the kernels and tiers changed since the last GPU run, each bounded
    { time timeout -s INT ${GATE_CERTIFY_BOUND:-140} "$RTP" certify --platform auto --tier all \
        --report "$reports/auto"; } > "$out/gate-certify.log" 2>&1
    echo "gate certify exit $?"; grep -vE " certified +bit_exact| raises as required" "$out/gate-certify.log" | tail -40
    { time timeout -s INT ${GATE_TESTS_BOUND:-100} "$PYTEST" -q -p no:cacheprovider -n 4 --platform cpu \
        tests/kernels/test_hardware_nan.py tests/kernels/test_mha_indexer_kernels.py tests/kernels/test_gather_kernels.py \
        tests/mutants/test_stream_mutants.py; } > "$out/gate-tests.log" 2>&1
    echo "gpu tests exit $?"; grep -E "^(FAILED|ERROR)|passed|failed|^real|^E " "$out/gate-tests.log" | tail -40
    ;;
  gatecertify)
    # tox -e cuda's second command (every tier on this host's own table), timed; then the cpu table on this host
    { time timeout -s INT 240 "$RTP" certify --platform auto --tier all --report "$reports/auto"; } \
      > "$out/certify-auto.log" 2>&1
    grep -vE " certified +bit_exact| raises as required" "$out/certify-auto.log" | tail -60
    { time timeout -s INT 120 "$RTP" certify --platform cpu --report "$reports/cpu"; } \
      > "$out/certify-cpu.log" 2>&1
    grep -vE " certified +bit_exact| raises as required" "$out/certify-cpu.log" | tail -30
    ;;
  correctness)
    unit_tests --maxfail 20 tests
    certify cuda-sm90
    certify rocm-gfx942
    memcheck
    ;;
  sweep)
    bandwidth --sweep
    ;;
  bench)
    bench --compile-baseline
    ;;
  probe)
    unit_tests tests/kernels
    bandwidth --sequential
    metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_op_write.sum
    for lk in "fp8 triton" "fp8_ds_mla triton" "fp8 cuda" "fp8_ds_mla cuda"; do
      echo "== ncu $lk" | tee -a "$out/ncu.log"
      ncu --clock-control none -k regex:mla_cache_write --metrics "$metrics" python3 -m tests.kernels.bandwidth --one $lk 2>&1 \
        | grep -E "^\s+(gpu__|dram__|sm__|lts__)" | tee -a "$out/ncu.log"
    done
    ;;
  quick)
    unit_tests tests/kernels/test_cuda.py
    certify cuda-sm90 --kernel cuda
    memcheck cuda
    bandwidth
    bench --tokens 16384 2097152
    ;;
  tune)
    unit_tests tests/kernels/test_cuda.py tests/kernels/test_triton.py
    bandwidth --sweep
    ;;
  pinning)
    certify cuda-sm90 --kernel cuda --kernel triton -n 2
    python3 - "$reports/cuda-sm90/report.json" <<'PY' | tee -a "$out/certify.log"
import collections, json, sys
cases = json.load(open(sys.argv[1]))["cases"]
seen = collections.defaultdict(set)
for c in cases:
    if c.get("worker"):
        seen[c["worker"]].add(c.get("visible_devices"))
print("worker -> CUDA_VISIBLE_DEVICES:", {w: sorted(map(str, v)) for w, v in sorted(seen.items())})
PY
    rtp certify --platform cuda-sm90 --kernel cuda --layout auto -n 3 --report "$reports/pin3" 2>&1 | tail -3
    ;;
  vendor)
    python3 -m pip install -q --no-index --no-deps --no-build-isolation ./examples/cuda_vendor_kernel \
      >>"$reports/install.log" 2>&1 || { tail -20 "$reports/install.log"; exit 1; }
    { time python3 -c "import acme_cuda_mla; acme_cuda_mla.build()"; } 2>&1 | tail -3 | tee -a "$out/vendor.log"
    { time rtp certify --platform cuda-sm90 --kernel acme-cuda --kernel acme-cuda-crashy --case-timeout 120 \
        --report "$out/vendor-report"; } > "$reports/vendor-certify.log" 2>&1
    echo "certify exit $?" | tee -a "$out/vendor.log"; tail -16 "$reports/vendor-certify.log" | tee -a "$out/vendor.log"
    "$PYTEST" -q -p no:cacheprovider --platform cpu tests/vendor/test_cuda_example_package.py 2>&1 \
      | tail -15 | tee -a "$out/vendor.log"
    memcheck acme-cuda acme-cuda-crashy | tee -a "$out/vendor.log"
    ;;
  families)
    unit_tests tests/kernels/test_mha_indexer_kernels.py tests/kernels/test_triton.py tests/kernels/test_cuda.py
    compute-sanitizer --tool memcheck --error-exitcode 9 "$PYTEST" -q -p no:cacheprovider --platform cpu \
      tests/kernels/test_mha_indexer_kernels.py -k "HND or indexer" 2>&1 | tail -6 | tee -a "$out/sanitizer.log"
    echo "compute-sanitizer exit ${PIPESTATUS[0]}" | tee -a "$out/sanitizer.log"
    fam=(--kernel reference-mha --kernel torch-eager-mha --kernel triton-mha --kernel cuda-mha
         --kernel reference-indexer --kernel torch-eager-indexer --kernel triton-indexer --kernel cuda-indexer)
    certify cuda-sm90 --kernel triton --kernel cuda "${fam[@]}"
    certify rocm-gfx942 "${fam[@]}"
    ;;
  records)
    # a layout record added in a table (tests/kv/test_add_a_layout.py's), certified natively with the GPU kernels
    python3 -c "from tests.kv.test_add_a_layout import RECORD; print(RECORD, end='')" > /tmp/layouts.toml
    sed -e 's/^name = "cuda-sm90"/name = "cuda-sm90-tile64"/' \
        -e 's/^supported = \["auto",/supported = ["fp8_tile64_inline", "auto",/' \
        -e 's/^\[layout_bytes\]$/[layout_bytes]\nfp8_tile64_inline = 672/' platforms/cuda-sm90.toml \
        > ./cuda-sm90-tile64.toml
    RTP_REF_LAYOUTS=/tmp/layouts.toml certify ./cuda-sm90-tile64.toml --kernel triton --kernel cuda \
      --kernel reference --layout fp8_tile64_inline
    ;;
  formats)
    # a cache kept in another fp8 format than the platform's (layout flag cache_fp8_format), every op
    gpu=(--kernel triton --kernel cuda --kernel triton-mha --kernel cuda-mha --kernel triton-indexer
         --kernel cuda-indexer)
    certify cuda-sm90 "${gpu[@]}" --layout-flag cache_fp8_format=e4m3fnuz
    certify rocm-gfx942 "${gpu[@]}" --layout-flag cache_fp8_format=e4m3fn
    ;;
  large)
    # the large-address tier: every op's GPU kernels on caches past 4 GiB (native)
    gpu=(--kernel triton --kernel cuda --kernel triton-mha --kernel cuda-mha --kernel triton-indexer
         --kernel cuda-indexer --kernel reference)
    start=$SECONDS
    rtp certify --platform cuda-sm90 --tier large --report "$reports/large" --case-timeout 300 "${gpu[@]}" \
      > "$reports/large.log" 2>&1
    echo "large tier: exit $?, $((SECONDS - start)) s" | tee -a "$out/certify.log"
    grep -E "passed|failed" "$reports/large.log" | tail -1 | tee -a "$out/certify.log"
    tail -25 "$reports/large.log" | tee -a "$out/certify.log"
    python3 -c "import json; d = json.load(open('$reports/large/report.json'))
for c in d['cases']:
    print(c['kernel'], c['layout'], c.get('grade'), c.get('duration_s'), c.get('failed_checks'))" | tee -a "$out/certify.log"
    # the Triton mutant whose row offset is an int32 (tests/mutants/large_mutants.py) must fail it
    RTP_REF_KERNELS=tests.mutants.large_mutants:large_mutants PYTHONPATH="$PWD" "$RTP" certify --platform cuda-sm90 \
      --tier large --report "$reports/large-mutant" --kernel mutant-large-triton-int32-offsets > "$reports/large-mutant.log" 2>&1
    echo "large tier, triton int32 mutant: exit $? (1: caught)" | tee -a "$out/certify.log"
    python3 -c "import json; d = json.load(open('$reports/large-mutant/report.json'))
for c in d['cases']:
    print(c['kernel'], c['layout'], c.get('grade'), c.get('checks'))" | tee -a "$out/certify.log"
    ;;
  cudamutant)
    # the large tier's CUDA C++ int32-offset mutant (tests/mutants/cuda_large_mutant.py), built at first use
    RTP_REF_KERNELS=tests.mutants.cuda_large_mutant:mutants PYTHONPATH="$PWD" "$RTP" certify --platform cuda-sm90 \
      --tier large --report "$reports/large-cuda-mutant" --kernel mutant-large-cuda-int32-offsets \
      > "$reports/large-cuda-mutant.log" 2>&1
    echo "large tier, cuda int32 mutant: exit $? (1: caught)" | tee -a "$out/certify.log"
    tail -5 "$reports/large-cuda-mutant.log" | tee -a "$out/certify.log"
    python3 -c "import json; d = json.load(open('$reports/large-cuda-mutant/report.json'))
for c in d['cases']:
    print(c['kernel'], c['layout'], c.get('grade'), c.get('checks'))" | tee -a "$out/certify.log"
    ;;
  lean)
    # the built-in kernels' call path: their tests, every op certified natively, the bench of every op and size
    unit_tests tests/kernels/test_triton.py tests/kernels/test_cuda.py tests/kernels/test_mha_indexer_kernels.py
    certify cuda-sm90 --kernel triton --kernel cuda --kernel triton-mha --kernel cuda-mha --kernel triton-indexer \
      --kernel cuda-indexer
    bench --kernel triton --kernel cuda --kernel triton-mha --kernel cuda-mha --kernel triton-indexer \
      --kernel cuda-indexer
    ;;
  coldbench)
    # the bench's own GPU test (cold figures checked, a cheat invalid in every mode), then rtp-ref bench of every
    # built-in writer, then of every reader, at every size (or $COLDBENCH_TOKENS), each run bounded (a bench cut
    # short writes nothing: two runs, so the first's figures stay)
    timeout -s INT 150 "$PYTEST" -q -p no:cacheprovider tests/bench -k "gpu or cold" 2>&1 | tail -5
    { time timeout -s INT ${COLDBENCH_BOUND:-300} "$RTP" bench --kernel triton --kernel cuda --kernel triton-mha \
        --kernel cuda-mha --kernel triton-indexer --kernel cuda-indexer ${COLDBENCH_TOKENS:+--tokens $COLDBENCH_TOKENS} \
        ${COLDBENCH_LAYERS:+--layers $COLDBENCH_LAYERS} --report "$out/bench"; } > "$out/coldbench.log" 2>&1
    echo "writers bench exit $?"; grep -vE "^\s*$" "$out/coldbench.log" | tail -90
    { time timeout -s INT ${READBENCH_BOUND:-150} "$RTP" bench --kernel triton-gather --kernel cuda-gather \
        --kernel triton-indexer-gather --kernel cuda-indexer-gather ${COLDBENCH_TOKENS:+--tokens $COLDBENCH_TOKENS} \
        --report "$reports/readbench"; } > "$out/readbench.log" 2>&1
    echo "readers bench exit $?"; tail -40 "$out/readbench.log"; cp "$reports/readbench/bench.json" "$out/readbench.json"
    ;;
  hostprof)
    # where each built-in GPU writer's host time per eager call goes at one token (scripts/host_profile.py): the
    # time per call queued back to back, cProfile's top functions, and two floors (an empty torch op, a Triton launch)
    timeout -s INT ${HOSTPROF_BOUND:-200} python3 scripts/host_profile.py ${HOSTPROF_ARGS:-} > "$out/hostprof.log" 2>&1
    echo "hostprof exit $?"; grep -A40 "^host time per eager call" "$out/hostprof.log"
    ;;
  readbench)
    # the readers in the bench (the MLA and indexer gathers, Triton and CUDA) at every size (or $READBENCH_TOKENS),
    # each figure verified, timed and bounded
    { time timeout -s INT ${READBENCH_BOUND:-420} "$RTP" bench --kernel triton-gather --kernel cuda-gather \
        --kernel triton-indexer-gather --kernel cuda-indexer-gather ${READBENCH_TOKENS:+--tokens $READBENCH_TOKENS} \
        --report "$out/bench"; } > "$out/readbench.log" 2>&1
    echo "read bench exit $?"; tail -60 "$out/readbench.log"
    ;;
  mhaperf)
    unit_tests tests/kernels/test_mha_indexer_kernels.py
    compute-sanitizer --tool memcheck --error-exitcode 9 "$PYTEST" -q -p no:cacheprovider --platform cpu \
      tests/kernels/test_mha_indexer_kernels.py -k "cuda and mha" 2>&1 | tail -3 | tee -a "$out/sanitizer.log"
    echo "compute-sanitizer exit ${PIPESTATUS[0]}" | tee -a "$out/sanitizer.log"
    certify cuda-sm90 --kernel cuda-mha --tier all
    certify rocm-gfx942 --kernel cuda-mha
    bench --kernel cuda-mha --tokens 64 16384 2097152
    ;;
  famperf)
    # the MHA and indexer kernels after a change: tests, sanitizer, certify (all tiers natively), the sweeps, the bench
    unit_tests tests/kernels/test_mha_indexer_kernels.py
    compute-sanitizer --tool memcheck --error-exitcode 9 "$PYTEST" -q -p no:cacheprovider --platform cpu \
      tests/kernels/test_mha_indexer_kernels.py -k "cuda or triton" 2>&1 | tail -3 | tee -a "$out/sanitizer.log"
    echo "compute-sanitizer exit ${PIPESTATUS[0]}" | tee -a "$out/sanitizer.log"
    fam=(--kernel cuda-mha --kernel triton-mha --kernel cuda-indexer --kernel triton-indexer)
    certify cuda-sm90 "${fam[@]}" --tier all
    certify rocm-gfx942 "${fam[@]}"
    PYTHONPATH="$PWD" python3 -m tests.kernels.mha_indexer_bandwidth --sweep 2>&1 | tee -a "$out/sweep.log"
    bench "${fam[@]}" --tokens 1 64 16384 2097152
    ;;
  final)
    writers=(--kernel triton --kernel cuda --kernel triton-mha --kernel cuda-mha --kernel triton-indexer
             --kernel cuda-indexer)
    bench "${writers[@]}"
    unit_tests tests/kernels
    certify cuda-sm90 "${writers[@]}"
    certify rocm-gfx942 "${writers[@]}"
    ;;
  famncu)
    metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_read.sum
    metrics+=,lts__t_sectors_op_write.sum,smsp__inst_executed.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed
    metrics+=,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active
    metrics+=,launch__registers_per_thread,smsp__issue_active.avg.pct_of_peak_sustained_active
    metrics+=,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct
    metrics+=,smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct
    metrics+=,smsp__warp_issue_stalled_drain_per_warp_active.pct,smsp__warp_issue_stalled_wait_per_warp_active.pct
    PYTHONPATH="$PWD" ncu --clock-control none -k "regex:indexer|reshape_and_cache|mha_paged" --metrics "$metrics" \
      python3 -m tests.kernels.mha_indexer_bandwidth 2097152 --once > "$out/ncu-families.log" 2>&1
    echo "ncu exit $?"
    # kernel lines whole, metric lines as name, unit and value
    grep -E "^  [_a-z].*\(|called|^\s+(gpu__|dram__|lts__|smsp__|sm__|launch__)" "$out/ncu-families.log" | \
      awk '/^    [a-z]/ {print "    " $1, $2, $NF; next} {print}' | tail -600 > "$out/ncu-brief.log"
    ;;
  reader)
    unit_tests tests/kernels/test_gather_kernels.py
    compute-sanitizer --tool memcheck --error-exitcode 9 "$PYTEST" -q -p no:cacheprovider --platform cpu \
      tests/kernels/test_gather_kernels.py -k "cuda or triton" 2>&1 | tail -4 | tee -a "$out/sanitizer.log"
    echo "compute-sanitizer exit ${PIPESTATUS[0]}" | tee -a "$out/sanitizer.log"
    readers=(--kernel reference-gather --kernel triton-gather --kernel cuda-gather --kernel triton --kernel cuda
             --kernel reference-indexer-gather --kernel triton-indexer-gather --kernel cuda-indexer-gather)
    certify cuda-sm90 "${readers[@]}"
    certify rocm-gfx942 "${readers[@]}"
    ;;
  graph)
    # the CUDA-graph tier: capture, new inputs in place, replay; the reference and torch-eager decline it
    gpu=(--kernel triton --kernel cuda --kernel triton-mha --kernel cuda-mha --kernel triton-indexer
         --kernel cuda-indexer --kernel reference --kernel torch-eager)
    for platform in cuda-sm90 rocm-gfx942; do
      start=$SECONDS
      certify "$platform" --tier graph "${gpu[@]}"
      echo "graph tier $platform: $((SECONDS - start)) s" | tee -a "$out/certify.log"
    done
    PYTHONPATH="$PWD" "$PYTEST" -q -p no:cacheprovider --platform cpu tests/mutants/test_graph_mutants.py \
      2>&1 | tail -25 | tee -a "$out/graph-mutants.log"
    ;;
  *)
    echo "unknown stage $stage: correctness, sweep, bench, probe, quick, tune, pinning, vendor, families, records, formats, large, graph, reader, mhaperf, famperf, famncu, final, lean, cudamutant, gate, gateall, gateshort, gatetests, all, padding, gatecertify, fp4, nvfp4, fork432, gatediag, sanitize, readbench, coldbench, hostprof or verify" >&2; exit 2
    ;;
  esac
done

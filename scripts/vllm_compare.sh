#!/usr/bin/env bash
# vLLM's KV-cache CUDA kernels beside rtp-ref's own, on one GPU machine, from the repository root:
#   1. rtp-ref installed as scripts/gpu_check.sh installs it, then the adapter scripts/vllm_kernels
#      (package rtp-ref-vllm-kernels: vllm-mla, vllm-mha, vllm-indexer, vllm-gather, vllm-indexer-gather)
#   2. vLLM's cache ops built once from $VLLM_SRC (default ./.vllm-src: vLLM's csrc/cache_kernels.cu and its headers,
#      never committed, so the device call must carry it), timed; a failed build prints the compiler's errors and stops
#   3. rtp-ref kernels, then rtp-ref certify --platform cuda-sm90 of each vLLM kernel
#   4. rtp-ref bench of rtp-ref's GPU kernels (triton, cuda) and vLLM's at 1 to 2M tokens, on the variants vLLM
#      implements: the writers, then the readers (two runs: a bench cut short writes no table); the tables last
# Every step is bounded and the whole fits $VLLM_COMPARE_BUDGET seconds (default 530). To $OUT (the device tool
# brings back 8 files at most): vllm-summary.log, vllm-certify.log, vllm-bench.log, bench-writers.json,
# bench-readers.json, bench-writers.png; the build log and full reports stay in /tmp/vllm-reports.
#   VLLM_SRC=... VLLM_COMPARE_BUDGET=... VLLM_TOKENS="1 64 ..." VLLM_CERTIFY="vllm-mha:55 ..." scripts/vllm_compare.sh
set -uo pipefail
start=$(date +%s)
budget=${VLLM_COMPARE_BUDGET:-530}
out=${OUT:-$PWD/vllm-out}
reports=/tmp/vllm-reports
mkdir -p "$out" "$reports"
summary="$out/vllm-summary.log"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
elapsed() { echo $(( $(date +%s) - start )); }
# bound NOMINAL RESERVE: NOMINAL seconds, or less so that RESERVE seconds of the budget are left after it
bound() { local left=$(( budget - $(elapsed) - $2 )); [ "$left" -lt "$1" ] && echo "$left" || echo "$1"; }

export PYTHONUNBUFFERED=1
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/torch-ext} TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
export VLLM_SRC=${VLLM_SRC:-$PWD/.vllm-src}
[ -f "$VLLM_SRC/csrc/cache_kernels.cu" ] || {
  say "vLLM's source is not at VLLM_SRC=$VLLM_SRC (csrc/cache_kernels.cu missing): carry .vllm-src with the call"; exit 1; }

# --- 1. install (rtp-ref exactly as scripts/gpu_check.sh installs it, beside the machine's torch) ---
B=$(dirname "$(python3 -c 'import sys; print(sys.executable)')")
RTP=$B/rtp-ref
timeout 120 python3 -m pip install -q --no-index --no-deps --no-build-isolation . $(ls .whl/*.whl 2>/dev/null) \
  >"$reports/install.log" 2>&1 || { cat "$reports/install.log"; say "rtp-ref install failed"; exit 1; }
timeout 60 python3 -m pip install -q --no-index --no-deps --no-build-isolation scripts/vllm_kernels \
  >>"$reports/install.log" 2>&1 || { cat "$reports/install.log"; say "adapter install failed"; exit 1; }
say "installed in $(elapsed) s; vLLM source: $VLLM_SRC ($(head -1 "$VLLM_SRC/COMMIT" 2>/dev/null), $(sed -n 2p "$VLLM_SRC/COMMIT" 2>/dev/null | cut -d' ' -f1-2))"

# --- 2. build vLLM's cache ops once (the certify workers and the bench reuse the library); meanwhile rtp-ref's own
# CUDA kernels are built in the background, so that the bench does not spend its time building them ---
timeout 300 python3 - > "$reports/prebuild-rtp-ref.log" 2>&1 <<'PY' &
import time, torch
from rtp_ref.kernels.cuda_build import arch_of, build_library
arch = arch_of(torch.device("cuda", 0))
for source in ("mla_cache.cu", "mha_indexer.cu", "gather.cu"):
    start = time.perf_counter()
    try:
        build_library(source, arch)
        print(f"rtp-ref {source} built in {time.perf_counter() - start:.1f} s")
    except Exception as exc:  # the bench builds it at first use instead
        print(f"rtp-ref {source} not prebuilt: {type(exc).__name__}: {exc}"[:400])
PY
prebuild=$!
build_log="$reports/vllm-build.log"
timeout -s INT "$(bound 240 200)" python3 - > "$build_log" 2>&1 <<'PY'
import shutil, subprocess, time
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "device", torch.cuda.get_device_name(0),
      "capability", torch.cuda.get_device_capability(0))
print(subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1])
import rtp_ref_vllm_kernels as v
from rtp_ref_vllm_kernels import _build
from torch.utils.cpp_extension import CUDA_HOME
print("CUDA_HOME", CUDA_HOME, "| cublas_v2.h in the toolkit:", _build._cuda_has_cublas_header(),
      "| driver link flags:", _build._libcuda_ldflags() or "none (libcuda.so.1 preloaded)", "| ninja:", shutil.which("ninja"))
print("flags (cxx, nvcc):", _build.build_flags(_build.arch_of(*torch.cuda.get_device_capability())))
start = time.perf_counter()
ops = v.load_ops(verbose=True)
print(f"vLLM cache ops built and loaded in {time.perf_counter() - start:.1f} s: "
      f"{sorted(n for n in dir(ops) if not n.startswith('_'))}")
PY
status=$?
if [ $status -ne 0 ]; then
  kill "$prebuild" 2>/dev/null
  say "BUILD FAILED (exit $status) after $(elapsed) s; the compiler's errors:"
  grep -nE "error|Error|undefined|FAILED" "$build_log" | tail -40 | tee -a "$summary"
  echo "--- last lines of $build_log ---"; tail -40 "$build_log"
  exit 1
fi
grep -E "^torch |^Cuda|^CUDA_HOME|^flags|built and loaded" "$build_log" | tee -a "$summary"
say "vLLM build step done at $(elapsed) s (rtp-ref's own CUDA kernels go on building in the background)"

# --- 3. discovery and certification ---
timeout 60 "$RTP" kernels > "$reports/kernels.log" 2>&1
say "rtp-ref kernels exit $?:"; grep -E "vllm|^entry|problem" "$reports/kernels.log" | tee -a "$summary"
# each kernel on the machine's table, every case of every claimed variant; the bench keeps $bench_reserve seconds
bench_reserve=${VLLM_BENCH_RESERVE:-250}
for spec in ${VLLM_CERTIFY:-vllm-mla:70 vllm-mha:55 vllm-indexer:40 vllm-gather:55 vllm-indexer-gather:35}; do
  k=${spec%%:*}; t=$(bound "${spec##*:}" "$bench_reserve")
  log="$reports/vllm-certify-${k#vllm-}.log"
  if [ "$t" -lt 15 ]; then say "certify $k: skipped (budget)"; continue; fi
  { time timeout -s INT -k 10 "$t" "$RTP" certify --platform cuda-sm90 --kernel "$k" --case-timeout 120 \
      --report "$reports/certify-$k"; } > "$log" 2>&1
  status=$?
  say "certify $k: exit $status ($( [ $status -eq 124 ] && echo "cut at $t s" || grep -E "^real" "$log" ))"
  grep -E "^  $k |NOT CERTIFIED|all claimed layouts certified|^rtp-ref: (error|.*interrupted)" "$log" | tail -12 \
    | tee -a "$summary"
  cat "$log" >> "$out/vllm-certify.log"
done
say "certify done at $(elapsed) s"

# --- 4. bench: rtp-ref's GPU kernels and vLLM's, the variants vLLM implements ---
wait "$prebuild"; grep -E "^rtp-ref " "$reports/prebuild-rtp-ref.log" | tee -a "$summary"
say "rtp-ref's CUDA kernels prebuilt by $(elapsed) s"
tokens=${VLLM_TOKENS:-1 64 1024 16384 262144 2097152}
layouts=(--layout auto --layout fp8 --layout fp8_ds_mla --layout fp8_e5m2 --layout none --layout ue8m0)
bench_log="$out/vllm-bench.log"
: > "$bench_log"
bench() {  # bench NAME BOUND KERNEL...
  local name=$1 t=$2; shift 2
  local args=() k
  for k in "$@"; do args+=(--kernel "$k"); done
  if [ "$t" -lt 20 ]; then say "bench $name: skipped (budget)"; return; fi
  echo "=== bench $name (bound $t s): $* ===" >> "$bench_log"
  { time timeout -s INT -k 15 "$t" "$RTP" bench --platform cuda-sm90 "${args[@]}" "${layouts[@]}" --tokens $tokens \
      --report "$reports/bench-$name"; } >> "$bench_log" 2>&1
  say "bench $name: exit $? at $(elapsed) s"
}
bench writers "$(bound 250 95)" triton cuda triton-mha cuda-mha triton-indexer cuda-indexer vllm-mla vllm-mha vllm-indexer
bench readers "$(bound 200 5)" triton-gather cuda-gather triton-indexer-gather cuda-indexer-gather vllm-gather \
  vllm-indexer-gather
say "total $(elapsed) s"
# the data and chart of each run (docs/performance.md's tables and chart are made from them)
for name in writers readers; do
  [ -f "$reports/bench-$name/bench.json" ] && cp "$reports/bench-$name/bench.json" "$out/bench-$name.json"
done
[ -f "$reports/bench-writers/bench.png" ] && cp "$reports/bench-writers/bench.png" "$out/bench-writers.png"
# the full tables (bench.md) into the log; on the terminal, last, one line per point with every kernel side by side
for name in writers readers; do
  if [ -f "$reports/bench-$name/bench.md" ]; then
    { echo; echo "=== bench $name: $reports/bench-$name/bench.md ==="; cat "$reports/bench-$name/bench.md"; } \
      >> "$bench_log"
  else
    echo; echo "=== bench $name: no table (cut short or failed); its last lines ==="
    grep -A100000 "=== bench $name" "$bench_log" | tail -25
  fi
done
python3 - "$reports/bench-writers/bench.json" "$reports/bench-readers/bench.json" <<'PY' | tee -a "$summary"
import json, os, sys
from collections import defaultdict

def us(seconds):
    return "-" if seconds is None else f"{seconds * 1e6:.1f}"

for path in sys.argv[1:]:
    if not os.path.exists(path):
        continue
    doc = json.load(open(path))
    rows = doc["rows"]
    device = doc.get("environment", {}).get("device", doc.get("device"))
    print(f"\n{os.path.basename(os.path.dirname(path))} on {device} ({doc.get('platform')}): cold-L2 / graph-replay "
          f"microseconds per call (eager where there is no cold figure); '!' invalid, '-' not timed")
    by_op = defaultdict(list)
    for r in rows:
        by_op[r["op"]].append(r)
    for op, op_rows in by_op.items():
        kernels = list(dict.fromkeys(r["kernel"] for r in op_rows))
        cells = {(r["layout"], r["tokens"], r["kernel"]): r for r in op_rows}
        print(f"\n{op}\n{'layout':<15}{'tokens':>8}  " + "".join(f"{k:>22}" for k in kernels))
        for layout, tokens in dict.fromkeys((r["layout"], r["tokens"]) for r in op_rows):
            line = f"{layout:<15}{tokens:>8}  "
            for k in kernels:
                r = cells.get((layout, tokens, k))
                if r is None:
                    line += f"{'':>22}"
                    continue
                first = r.get("cold_seconds") if r.get("cold_seconds") is not None else r.get("seconds")
                bad = "!" if r.get("invalid") or r.get("cold_invalid") or r.get("graph_invalid") else ""
                line += f"{us(first) + ' / ' + us(r.get('graph_seconds')) + bad:>22}"
            print(line)
PY

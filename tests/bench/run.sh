#!/usr/bin/env bash
# Runs the benchmarks behind docs/PERFORMANCE.md and prints their numbers.
#   tests/bench/run.sh [build-dir]     (default: build-bench, configured RelWithDebInfo)
# Environment: LAUNCHES (default 200000), REPEATS (default 5), RECORDS (decode_join, default
# 2000000). Numbers vary with the machine; run on an idle one.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
build=${1:-build-bench}
launches=${LAUNCHES:-200000}
repeats=${REPEATS:-5}
records=${RECORDS:-2000000}

if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build" -j "$(nproc)" >/dev/null

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
type=$(grep -m1 '^CMAKE_BUILD_TYPE' "$build/CMakeCache.txt" | cut -d= -f2)
echo "build:   $build (${type:-RelWithDebInfo, the project default})"

# ---- decode + join throughput (agent internals, one core) ----
if [[ -x $build/bin/bench_decode_join ]]; then
  echo
  echo "== decode_join: records decoded and joined per second, one thread"
  for i in $(seq "$repeats"); do
    taskset -c 0 "$build/bin/bench_decode_join" "$records"
  done
else
  echo "bench_decode_join was not built (needs the agent's internal library)" >&2
fi

# ---- launch overhead ----
lib=$build/fakegpu/lib
agent=$build/lib/libgpuprof.so
null=$build/lib/libbench_null_injection.so
prog=$build/bin/bench_launch_overhead
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# The three configurations are interleaved (a b c a b c ...) so that drift in the machine's
# speed (a VM's neighbours) hits all of them alike; each line is one run, then per
# configuration the median over the runs of their median and of their mean. Two modes:
# `launch` times cuLaunchKernel; `callbacks` times only the simulator's bracket of a runtime
# launch call (the subscriber's ENTER and EXIT callbacks, no driver work, no records).
one() { # one MODE <VAR=value>...
  local mode=$1
  shift
  env -u CUDA_INJECTION64_PATH LD_LIBRARY_PATH="$lib" GPUPROF_OUTPUT_DIR="$out" \
    GPUPROF_STACKS=off "$@" "$prog" "$launches" 100 "$mode"
}

for mode in launch callbacks; do
  echo
  echo "== launch_overhead, mode $mode: host ns per launch ($launches in batches of 100)"
  for i in $(seq "$repeats"); do
    echo "a $(one "$mode")"
    echo "b $(one "$mode" CUDA_INJECTION64_PATH="$null")"
    echo "c $(one "$mode" CUDA_INJECTION64_PATH="$agent")"
  done | tee "$out/$mode.txt"
  python3 - "$out/$mode.txt" "$mode" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    cfg, rest = line.split(" ", 1)
    runs.setdefault(cfg, []).append({k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", rest)})
what = "cuLaunchKernel" if sys.argv[2] == "launch" else "callback bracket"
labels = {"a": f"(a) {what}, no subscriber",
          "b": f"(b) {what} + do-nothing CUPTI subscriber",
          "c": f"(c) {what} + gpuprof, GPUPROF_STACKS=off"}
stat = {}
for cfg in "abc":
    med = statistics.median(r["median_ns"] for r in runs[cfg])
    mean = statistics.median(r["mean_ns"] for r in runs[cfg])
    lo = min(r["median_ns"] for r in runs[cfg])
    hi = max(r["median_ns"] for r in runs[cfg])
    stat[cfg] = (med, mean)
    print(f"{labels[cfg]:52} median {med:7.1f} ns  mean {mean:7.1f} ns  (run medians {lo:.0f}-{hi:.0f})")
print(f"{'simulator callback dispatch (b) - (a)':52} median {stat['b'][0] - stat['a'][0]:7.1f} ns  "
      f"mean {stat['b'][1] - stat['a'][1]:7.1f} ns")
print(f"{'agent share (c) - (b)':52} median {stat['c'][0] - stat['b'][0]:7.1f} ns  "
      f"mean {stat['c'][1] - stat['b'][1]:7.1f} ns")
PY
done

# ---- Python frames (ctypes on the simulated runtime; Debian's python3 when present) ----
echo
echo "== bench_python: host ns per cudaMalloc / cudaFree from 30 Python frames"
python3 tests/bench/bench_python.py --build "$build" --repeats "$repeats"

# ---- CUDA graphs: capture-time cost per node, node-map lookup per replayed record ----
if [[ -x $build/bin/bench_graphs ]]; then
  echo
  echo "== bench_graphs: 100 graphs x 500 nodes captured 30 frames deep (without / with the agent)"
  for i in $(seq "$repeats"); do
    echo "without $(env -u CUDA_INJECTION64_PATH LD_LIBRARY_PATH="$lib" "$build/bin/bench_graphs" 100 500 30 | head -1)"
    echo "with    $(env LD_LIBRARY_PATH="$lib" GPUPROF_OUTPUT_DIR="$out" CUDA_INJECTION64_PATH="$agent" \
      "$build/bin/bench_graphs" 100 500 30 | head -1)"
  done
  env -u CUDA_INJECTION64_PATH LD_LIBRARY_PATH="$lib" "$build/bin/bench_graphs" 100 500 30 | tail -1
fi

#!/usr/bin/env bash
# Analyze throughput (docs/PERFORMANCE.md, "Analyzing traces"): one bench-sized trace per format
# (tests/trace/bench_trace.c --keep: N kernels with their launch calls and flows), read by
# `gpuprof analyze --json`; prints input MB/s (file bytes), events/s (kernels + launch calls /
# wall time) and the peak RSS. A benchmark, not a test: nothing is asserted.
# Needs /usr/bin/time (Debian package time).
# usage: tests/analyze/bench_analyze.sh [BUILD_DIR] [EVENTS]   (default build, 1000000)
set -euo pipefail
build=${1:-build}
events=${2:-1000000}
dir=$(mktemp -d /tmp/gpuprof-bench-analyze.XXXXXX)
trap 'rm -rf "$dir"' EXIT

for fmt in json json.gz pftrace; do
  "$build/bin/bench_trace" --events "$events" --dir "$dir" --format "$fmt" --keep >/dev/null
  f="$dir/bench_trace_launch.$fmt"
  start=$(date +%s.%N)
  /usr/bin/time -f %M -o "$dir/rss" "$build/bin/gpuprof" analyze --json "$dir/report.json" "$f" \
    >/dev/null
  end=$(date +%s.%N)
  read -r kernels calls < <(python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))["traces"][0]
print(sum(g["kernels"] for g in t["gpus"]), sum(r["count"] for r in t["api_calls"]))' \
    "$dir/report.json")
  awk -v f="$fmt" -v b="$(stat -c %s "$f")" -v k="$kernels" -v c="$calls" -v s="$start" \
    -v t="$end" -v r="$(cat "$dir/rss")" 'BEGIN {
      w = t - s
      printf "%-8s input %7.1f MB  kernels %8d  calls %8d  %6.2f s  %7.1f MB/s  %5.2f M events/s  RSS %6.1f MB\n",
        f, b / 1e6, k, c, w, b / 1e6 / w, (k + c) / 1e6 / w, r / 1024 }'
  rm -f "$f" "$dir"/bench_trace_*
done

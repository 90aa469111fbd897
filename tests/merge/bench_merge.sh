#!/usr/bin/env bash
# Merge throughput (docs/PERFORMANCE.md, "Merging traces"): two bench-sized traces per format
# (tests/trace/bench_trace.c --keep: N kernels and their launches, flows), merged with
# `gpuprof merge`; prints input MB/s (file bytes, as read) and events/s (merged events / wall
# time). A benchmark, not a test: nothing is asserted.
# usage: tests/merge/bench_merge.sh [BUILD_DIR] [EVENTS]   (default build, 1000000)
set -euo pipefail
build=${1:-build}
events=${2:-1000000}
dir=$(mktemp -d /tmp/gpuprof-bench-merge.XXXXXX)
trap 'rm -rf "$dir"' EXIT

for fmt in json json.gz pftrace; do
  for i in 1 2; do
    mkdir -p "$dir/$i"
    "$build/bin/bench_trace" --events "$events" --dir "$dir/$i" --format "$fmt" --keep >/dev/null
  done
  a="$dir/1/bench_trace_launch.$fmt"
  b="$dir/2/bench_trace_launch.$fmt"
  bytes=$(($(stat -c %s "$a") + $(stat -c %s "$b")))
  start=$(date +%s.%N)
  "$build/bin/gpuprof" merge -o "$dir/merged.$fmt" "$a" "$b" 2>"$dir/log" >/dev/null
  end=$(date +%s.%N)
  merged_events=$(sed -n 's/.* traces, \([0-9]*\) events.*/\1/p' "$dir/log")
  awk -v f="$fmt" -v b="$bytes" -v e="$merged_events" -v s="$start" -v t="$end" \
    -v o="$(stat -c %s "$dir/merged.$fmt")" 'BEGIN {
      w = t - s
      printf "%-8s inputs %7.1f MB  events %9d  %6.2f s  %7.1f MB/s  %5.2f M events/s  output %7.1f MB\n",
        f, b / 1e6, e, w, b / 1e6 / w, e / 1e6 / w, o / 1e6 }'
  rm -f "$dir/merged.$fmt"
done

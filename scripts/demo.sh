#!/usr/bin/env bash
# The main job: builds gpuprof, runs sample CUDA workloads under the agent (on the real GPU
# when there is one, else on the simulated GPU) and says where the outputs are.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

scripts/install-deps.sh
echo "demo: building"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" >/dev/null

samples=(streams leak memcpy)
for s in "${samples[@]}"; do
  if [[ ! -x build/samples/$s ]]; then
    echo "demo: build/samples/$s was not built (the samples need nvcc from the CUDA 13 toolkit)" >&2
    exit 1
  fi
done

if nvidia-smi -L >/dev/null 2>&1; then
  where="the real GPU ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1))"
  libpath=${LD_LIBRARY_PATH:-}
else
  where="the simulated GPU (no NVIDIA GPU here; tests/fakegpu stands in for the driver and CUPTI)"
  libpath=$root/build/fakegpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

out=$root/gpuprof-out
rm -rf "$out"
mkdir -p "$out"
echo "demo: running ${samples[*]} on $where"
for s in "${samples[@]}"; do
  echo
  echo "---- samples/$s under gpuprof ----"
  # A trace of the whole run (the capture ends with the process), plus the pprof windows the
  # agent writes in its default continuous mode (the last, partial one at exit). The samples
  # launch only a few kernels: take a stack for every launch (the default samples 1 in 16,
  # which can leave a short run with no sampled launch and so no GPU-time profile).
  LD_LIBRARY_PATH=$libpath GPUPROF_CAPTURE_ON_START=60s GPUPROF_STACK_SAMPLE_EVERY=1 \
    build/bin/gpuprof run --output "$out" --log info -- "build/samples/$s"
  if [[ $s == streams ]]; then  # its capture, for gpuprof analyze below
    streams_trace=$(ls -t "$out"/gpuprof-*-capture.* 2>/dev/null | grep -v '\.pb\.gz$' | head -n1 || true)
  fi
done

list() {  # list <glob> <what> [optional]
  local f found=0
  for f in "$out"/$1; do
    [[ -e $f ]] || continue
    ((found)) || echo "  $2:"
    found=1
    echo "    $f"
  done
  ((found)) || [[ -n ${3:-} ]] || echo "  $2: none written (see the messages above)"
}

echo
echo "---- gpuprof analyze: what the streams sample's capture says ----"
# The answers the UI would take a while to find: busy time, idle gaps and the host calls
# under them, top kernels and calls (docs/ANALYZE.md).
if [[ -n ${streams_trace:-} ]]; then
  build/bin/gpuprof analyze "$streams_trace"
fi

echo
echo "demo: outputs in $out"
list '*-capture.json*' "traces (Chrome/Perfetto JSON)"
list '*-capture.pftrace' "traces (native Perfetto)" optional
list '*.pb.gz' "pprof profiles (GPU time, GPU memory, memcpy by host stack)"
list '*-summary.json' "capture summaries"
cat <<MSG

How to open them:
  traces    https://ui.perfetto.dev -> "Open trace file" (the file stays on your machine):
            one track per CPU thread with its CUDA API calls, one process per GPU with a track
            per stream, arrows from each launch to its kernel, GPU memory in use as a counter.
            (docs/TRACES.md)
  profiles  go tool pprof -http=:8080 FILE.pb.gz   (Debian: golang-go), or a flame graph in
            Grafana/Pyroscope when GPUPROF_PYROSCOPE_URL is set. gpu_time: GPU nanoseconds by
            the host stack that launched the kernel (leaf "[gpu] kernel"); gpu_memory: bytes
            allocated and in use by allocating stack; memcpy: bytes by direction.
            (docs/PROFILES.md)
  summaries the numbers printed above, as JSON (docs/SUMMARY.md).
  analysis  build/bin/gpuprof analyze TRACE... (one per process; every rank's for NCCL hangs)
            (docs/ANALYZE.md)

Profile your own program the same way:
  build/bin/gpuprof run --output DIR --log info -- ./your_cuda_program
capture a running one:   build/bin/gpuprof list; build/bin/gpuprof capture --pid N --duration 30s
or, in a pod, set CUDA_INJECTION64_PATH=/path/to/libgpuprof.so (docs/KUBERNETES.md).
MSG

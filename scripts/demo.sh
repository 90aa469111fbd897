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
  LD_LIBRARY_PATH=$libpath build/bin/gpuprof run --output "$out" --log info -- "build/samples/$s"
done

echo
echo "demo: outputs in $out:"
ls -1 "$out" | sed 's/^/  /'
cat <<MSG

What you are looking at:
  *-summary.json   the capture summary of each process (format: docs/SUMMARY.md); the same
                   numbers were printed above because of --log info.
Profile your own program the same way:
  build/bin/gpuprof run --output DIR --log info -- ./your_cuda_program
or, in a pod, set CUDA_INJECTION64_PATH=/path/to/libgpuprof.so (docs/CONFIGURATION.md).
MSG

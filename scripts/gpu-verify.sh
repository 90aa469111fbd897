#!/usr/bin/env bash
# Real-GPU verification: builds gpuprof and the samples, runs every sample under the agent in
# each mode (continuous, capture, GPU-only), checks the outputs against samples/expectations.json,
# measures the agent's launch overhead, and prints a table (docs/GPU-VERIFICATION.md).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

usage() {
  cat <<USAGE
usage: scripts/gpu-verify.sh [--simulator] [--build DIR] [--no-build] [--work DIR]
                             [--samples a,b] [--modes continuous,capture,gpu-only]
                             [--launches N] [--repeat K] [--require summary,pprof,trace] [-v]

  --simulator  run on the simulated GPU (tests/fakegpu; no NVIDIA GPU needed, no overhead goal;
               NCCL and PyTorch samples are left out)
  --build DIR  build directory (default: build-verify); --no-build uses it as it is
  --work DIR   where the outputs of every run go (default: DIR/verify-out)
  --samples    only these samples (names in samples/expectations.json)
  --launches   launches of the overhead loop (default 200000; 20000 with --simulator)
  --repeat     overhead runs per side, medians compared (default 5; 0: no overhead run)
  --require    features whose missing outputs fail instead of reading N/A (default: all)
  -v           print every check, not only failures
USAGE
}

simulator=0 build=build-verify do_build=1 work="" pass=()
while (($#)); do
  case $1 in
    --simulator) simulator=1 ;;
    --build) build=$2; shift ;;
    --no-build) do_build=0 ;;
    --work) work=$2; shift ;;
    --samples|--modes|--launches|--repeat|--require) pass+=("$1" "$2"); shift ;;
    -v|--verbose) pass+=(-v) ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-verify: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
[[ $build = /* ]] || build=$root/$build
work=${work:-$build/verify-out}
start=$SECONDS

if ((simulator)); then
  where="the simulated GPU (tests/fakegpu)"
else
  if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-verify: nvidia-smi finds no GPU; run on a GPU machine or pass --simulator" >&2
    exit 2
  fi
  where=$(nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader |
    sed 's/^/  GPU /')
  echo "gpu-verify: GPUs:"
  echo "$where"
  nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/gpu-verify: driver supports CUDA \1/p' | head -n1
fi

if ((do_build)); then
  echo "gpu-verify: building in $build"
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build.cmake.log" 2>&1 ||
    { tail -n 30 "$build.cmake.log" >&2; echo "gpu-verify: cmake failed (log: $build.cmake.log)" >&2; exit 1; }
  cmake --build "$build" -j "$(nproc)" >"$build.build.log" 2>&1 ||
    { tail -n 30 "$build.build.log" >&2; echo "gpu-verify: build failed (log: $build.build.log)" >&2; exit 1; }
  echo "gpu-verify: built in $((SECONDS - start)) s"
fi
for f in bin/gpuprof lib/libgpuprof.so samples/streams samples/launch_loop; do
  if [[ ! -e $build/$f ]]; then
    echo "gpu-verify: $build/$f is missing (the samples need nvcc from the CUDA 13 toolkit)" >&2
    exit 1
  fi
done

# The checker decodes pprof files with python3-protobuf, which Debian installs for its own
# python3: prefer the interpreter that has it.
checker_py=""
for py in /usr/bin/python3 python3; do
  if command -v "$py" >/dev/null && "$py" -c 'import google.protobuf' 2>/dev/null; then
    checker_py=$py
    break
  fi
done
if [[ -z $checker_py ]]; then
  checker_py=python3
  echo "gpu-verify: no python3 with google.protobuf (Debian: python3-protobuf): pprof checks read N/A" >&2
fi
# The PyTorch sample runs with whichever python3 has torch (a virtualenv first on PATH).
torch_py=$(command -v python3 || true)

args=(--build "$build" --work "$work" --python "${torch_py:-python3}")
if ((simulator)); then
  export LD_LIBRARY_PATH=$build/fakegpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  unset FAKEGPU_DEVICES FAKEGPU_KERNEL_NS FAKEGPU_CUPTI_VERSION FAKEGPU_CUPTI_FAULT
  args+=(--simulator --launches 20000)
fi

echo "gpu-verify: running the samples on ${where%%$'\n'*}"
rc=0
"$checker_py" scripts/verify_samples.py "${args[@]}" ${pass[@]+"${pass[@]}"} \
  --json "$work/results.json" || rc=$?
echo "gpu-verify: $((SECONDS - start)) s in all; outputs and results.json in $work"
exit $rc

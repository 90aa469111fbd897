#!/usr/bin/env bash
# Real-GPU verification: builds gpuprof and the samples, runs every sample under the agent in
# each mode (continuous, capture, GPU-only), checks the outputs against samples/expectations.json,
# measures the agent's launch overhead, and prints a table (docs/GPU-VERIFICATION.md). With
# --bundle it runs a folder that scripts/gpu-bundle.sh built elsewhere, with no build here.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

usage() {
  cat <<USAGE
usage: scripts/gpu-verify.sh [--simulator] [--build DIR] [--no-build] [--bundle DIR] [--work DIR]
                             [--samples a,b] [--modes continuous,capture,gpu-only]
                             [--launches N] [--repeat K] [--require summary,pprof,trace]
                             [--run-timeout S] [--budget S] [-v]

  --simulator  run on the simulated GPU (tests/fakegpu; no NVIDIA GPU needed, no overhead goal;
               the PyTorch sample is left out; nccl_allreduce runs on the NCCL double)
  --build DIR  build directory (default: build-verify); --no-build uses it as it is
  --bundle DIR a prebuilt bundle (scripts/gpu-bundle.sh; no cmake here): checks first that
               nvidia-smi, libcudart.so.13, libcupti.so.13 and a python3 with google.protobuf
               are there, and puts the CUDA libraries it finds on LD_LIBRARY_PATH
  --fakegpu DIR  with --simulator --bundle: the simulated GPU's libraries (default:
               build/fakegpu/lib)
  --work DIR   where the outputs of every run go (default: DIR/verify-out)
  --samples    only these samples (names in samples/expectations.json)
  --launches   launches of the overhead loop (default 200000; 20000 with --simulator)
  --repeat     timed overhead runs per side after one untimed each, in alternating order,
               medians compared (default 7; 0: no overhead run)
  --require    features whose missing outputs fail instead of reading N/A (default: all)
  --run-timeout  seconds one sample run may take before it is killed and fails (default 120)
  --budget S   seconds for all runs (default 480, 0: none): later runs are not started (NOT RUN,
               a failure), so the table comes out within a GPU session's 600 s command limit
  -v           print every check, not only failures
USAGE
}

simulator=0 build=build-verify do_build=1 bundle=0 fakegpu=build/fakegpu/lib work="" pass=()
samples_given=0
while (($#)); do
  case $1 in
    --simulator) simulator=1 ;;
    --build) build=$2; shift ;;
    --no-build) do_build=0 ;;
    --bundle) build=$2 bundle=1 do_build=0; shift ;;
    --fakegpu) fakegpu=$2; shift ;;
    --work) work=$2; shift ;;
    --samples) pass+=("$1" "$2") samples_given=1; shift ;;
    --modes|--launches|--repeat|--require|--run-timeout|--budget) pass+=("$1" "$2"); shift ;;
    -v|--verbose) pass+=(-v) ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-verify: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
[[ $build = /* ]] || build=$root/$build
[[ $fakegpu = /* ]] || fakegpu=$root/$fakegpu
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

# The checker decodes pprof files with python protobuf (go tool pprof is not needed), which
# Debian installs for its own python3: prefer the interpreter that has it.
checker_py=""
for py in /usr/bin/python3 python3; do
  if command -v "$py" >/dev/null && "$py" -c 'import google.protobuf' 2>/dev/null; then
    checker_py=$py
    break
  fi
done
# The PyTorch sample runs with whichever python3 has torch (a virtualenv first on PATH).
torch_py=$(command -v python3 || true)

args=(--build "$build" --work "$work" --python "${torch_py:-python3}")
if ((simulator)); then
  fg=$build/fakegpu/lib
  ((bundle)) && fg=$fakegpu
  if [[ ! -e $fg/libcudart.so.13 || ! -e $fg/libcupti.so.13 ]]; then
    echo "gpu-verify: no simulated GPU in $fg (build the fakegpu_* targets, or pass --fakegpu DIR)" >&2
    exit 2
  fi
  export LD_LIBRARY_PATH=$fg${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  unset FAKEGPU_DEVICES FAKEGPU_KERNEL_NS FAKEGPU_CUPTI_VERSION FAKEGPU_CUPTI_FAULT
  args+=(--simulator --launches 20000)
fi

# Where a CUDA library is: sets found (its folder) and how. Order: the library path, the
# loader's cache, the nvidia-* wheels of the pythons here (what PyTorch loads), the toolkit.
find_lib() {
  local name=$1 d sp py sub
  local -a dirs=() sites=()
  found="" how=""
  IFS=: read -ra dirs <<<"${LD_LIBRARY_PATH:-}"
  for d in "${dirs[@]}"; do
    [[ -n $d && -e $d/$name ]] && { found=$d how="on LD_LIBRARY_PATH"; return 0; }
  done
  d=$(ldconfig -p 2>/dev/null | awk -v n="$name" '$1 == n && /x86-64/ {print $NF; exit}')
  [[ -n $d ]] && { found=${d%/*} how="in the loader's cache"; return 0; }
  for py in "$torch_py" "$checker_py"; do
    [[ -n $py ]] || continue
    mapfile -t -O "${#sites[@]}" sites < <("$py" -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null)
  done
  sites+=(/opt/*/.venv/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages)
  for sp in "${sites[@]}"; do
    for sub in nvidia/cu13/lib nvidia/cuda_runtime/lib nvidia/cuda_cupti/lib nvidia/nccl/lib; do
      [[ -e $sp/$sub/$name ]] && { found=$sp/$sub how="from a Python wheel"; return 0; }
    done
  done
  for d in /usr/local/cuda /usr/local/cuda-13*; do
    for sub in lib64 targets/x86_64-linux/lib extras/CUPTI/lib64 lib; do
      [[ -e $d/$sub/$name ]] && { found=$d/$sub how="in the toolkit"; return 0; }
    done
  done
  return 1
}

use_lib() {  # what the bundle needs from this machine: one line each
  local name=$1 why=$2
  if find_lib "$name"; then
    if [[ $how != "on LD_LIBRARY_PATH" && $how != "in the loader's cache" ]]; then
      export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$found
      how+=", added to LD_LIBRARY_PATH"
    fi
    echo "gpu-verify: ok: $name in $found ($how)"
    return 0
  fi
  echo "gpu-verify: MISSING: $name ($why; looked on LD_LIBRARY_PATH, in ldconfig -p, the nvidia-* wheels of python3, /usr/local/cuda*)" >&2
  return 1
}

if ((bundle)); then
  echo "gpu-verify: checking what the bundle $build needs here"
  missing=0
  ((simulator)) || echo "gpu-verify: ok: nvidia-smi lists $(nvidia-smi -L | wc -l) GPU(s)"
  use_lib libcudart.so.13 "the samples link it" || missing=1
  use_lib libcupti.so.13 "the agent loads it" || missing=1
  if ((!simulator)) && [[ -e $build/samples/nccl_allreduce ]] &&
    ! use_lib libnccl.so.2 "only nccl_allreduce needs it: left out"; then
    if ((!samples_given)) && [[ -n $checker_py ]]; then
      pass+=(--samples "$("$checker_py" -c 'import json, sys
print(",".join(n for n in json.load(open(sys.argv[1]))["samples"] if n != "nccl_allreduce"))' samples/expectations.json)")
    fi
  fi
  if [[ -n $checker_py ]]; then
    echo "gpu-verify: ok: $checker_py has google.protobuf $("$checker_py" -c 'import google.protobuf as g; print(g.__version__)') (decodes pprof with $build/share/profile.desc; go tool pprof is not needed)"
  else
    echo "gpu-verify: MISSING: a python3 with google.protobuf (the pprof checks need it; pip package protobuf)" >&2
    missing=1
  fi
  [[ -e $build/share/profile.desc ]] ||
    { echo "gpu-verify: MISSING: $build/share/profile.desc (rebuild the bundle: scripts/gpu-bundle.sh)" >&2; missing=1; }
  # The programs come from the bundle, the expectations from this checkout: they must match.
  made=$(sed -n 's/^sources: \([0-9a-f]*\).*/\1/p' "$build/BUNDLE.txt" 2>/dev/null | head -n1)
  here=$(scripts/gpu-bundle.sh --sources)
  if [[ $made == "$here" ]]; then
    echo "gpu-verify: ok: the bundle was made from this checkout's sources ($here)"
  else
    echo "gpu-verify: MISSING: a bundle of this checkout: $build was made from other sources" \
      "(${made:-no sources line in BUNDLE.txt}, here $here); re-run scripts/gpu-bundle.sh" >&2
    missing=1
  fi
  if check=$(scripts/gpu-bundle.sh --check "$build" 2>&1); then
    echo "gpu-verify: ok: every program and library of the bundle loads (ldd)"
  else
    printf '%s\n' "$check" >&2
    echo "gpu-verify: MISSING: libraries of the bundle do not load here (lines above)" >&2
    missing=1
  fi
  if ((missing)); then
    echo "gpu-verify: prerequisites missing: nothing was run" >&2
    exit 2
  fi
fi
if [[ -z $checker_py ]]; then
  checker_py=python3
  echo "gpu-verify: no python3 with google.protobuf (Debian: python3-protobuf): pprof checks read N/A" >&2
fi

echo "gpu-verify: running the samples on ${where%%$'\n'*}"
rc=0
"$checker_py" scripts/verify_samples.py "${args[@]}" ${pass[@]+"${pass[@]}"} \
  --json "$work/results.json" || rc=$?
echo "gpu-verify: $((SECONDS - start)) s in all; outputs and results.json in $work"
exit $rc

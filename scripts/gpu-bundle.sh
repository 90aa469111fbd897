#!/usr/bin/env bash
# Packs gpuprof, the CUDA samples and every shared library they need beyond glibc, libstdc++ and
# CUDA into one self-contained folder that a GPU session carries to the device and runs
# scripts/gpu-verify.sh --bundle on, with no build there (docs/GPU-VERIFICATION.md).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

usage() {
  cat <<USAGE
usage: scripts/gpu-bundle.sh [--build DIR] [--no-build] [--out DIR] [--keep-debug]
       scripts/gpu-bundle.sh --check DIR
       scripts/gpu-bundle.sh --sources

  --build DIR   build directory (default: build-bundle; RelWithDebInfo, samples for sm_90 + PTX)
  --no-build    pack DIR as it is (it must hold bin/gpuprof, lib/libgpuprof.so, samples/)
  --out DIR     the bundle (default: .gpu-bundle, which git ignores); replaced every time
  --keep-debug  keep DWARF debug info (by default it is stripped; symbol tables stay)
  --check DIR   only check that DIR's programs and libraries load nothing from outside DIR
                except the system libraries below; run it with the library path the programs
                will run with. Exit 1 on a library missing or resolved outside the bundle.
  --sources     print the fingerprint of the sources a bundle is built from (BUNDLE.txt's
                "sources:" line, which gpu-verify.sh --bundle compares with its checkout)

Left to the machine that runs the bundle: glibc (libc, libm, libdl, libpthread, librt, ld-linux),
libstdc++, libgcc_s, and CUDA (libcuda.so.1 from the driver; libcudart.so.13, libcupti.so.13 and
libnccl.so.2 from the toolkit or the nvidia-* Python wheels: gpu-verify.sh --bundle finds them).
USAGE
}

# Libraries the bundle never carries: the C/C++ runtime every Linux machine has, and CUDA's,
# which must match the machine's driver.
system_re='^(linux-vdso\.so|ld-linux[-a-z0-9_]*\.so|lib(c|m|mvec|dl|pthread|rt|resolv|util|anl)\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libcudart\.so|libcupti\.so|libnccl\.so|libnvidia-)'

is_elf() { [[ -f $1 && ! -L $1 ]] && [[ $(head -c 4 "$1" | od -An -c | tr -d ' ') == 177ELF ]]; }

bundle_elves() {
  local d=$1 f
  for f in "$d"/bin/* "$d"/lib/* "$d"/samples/*; do
    is_elf "$f" && printf '%s\n' "$f"
  done
  return 0
}

# Prints one line per problem; returns 1 when a library is missing or comes from outside. A
# library of the bundle must find its whole closure inside (or among the system's); a program
# only its own direct needs, since what a system library such as libcudart.so.13 needs in turn
# is the system's business (the simulated GPU's libcudart needs the system's libelf, say).
check_bundle() {
  local dir errors=0 f line name path needed
  dir=$(cd "$1" && pwd -P)
  while IFS= read -r f; do
    # Without binutils (objdump) programs get only the not-found check; libraries the full one.
    needed=" $(objdump -p "$f" 2>/dev/null | awk '$1 == "NEEDED" {print $2}' | tr '\n' ' ') "
    while IFS= read -r line; do
      if [[ $line == *"not found (required by"* ]]; then
        # An older glibc or libstdc++ than the bundle was built against.
        echo "gpu-bundle: ${f#"$dir"/}: ${line#*: }" >&2
        errors=1
        continue
      fi
      [[ $line =~ ^[[:space:]]*([^[:space:]]+)\ =\>\ (.*)$ ]] || continue
      name=${BASH_REMATCH[1]} path=${BASH_REMATCH[2]%% (*}
      if [[ $path == "not found" ]]; then
        if [[ $name =~ $system_re ]]; then
          echo "gpu-bundle: ${f#"$dir"/} needs $name from this machine: not found on the library path" >&2
        else
          echo "gpu-bundle: ${f#"$dir"/} needs $name, which the bundle lacks" >&2
          errors=1
        fi
      elif [[ $(readlink -f "$path") != "$dir"/* && ! $name =~ $system_re ]] &&
        [[ $f == "$dir"/lib/* || $needed == *" $name "* ]]; then
        echo "gpu-bundle: ${f#"$dir"/} loads $name from outside the bundle: $path" >&2
        errors=1
      fi
    done < <(ldd "$f" 2>&1)
  done < <(bundle_elves "$dir")
  return $errors
}

# A fingerprint of what the programs are built from. The bundle runs against the checkout it
# travels with (samples/expectations.json, the checker): gpu-verify.sh --bundle refuses a
# bundle made from other sources, which would fail, or pass, on the device for no real reason.
sources_hash() {
  find CMakeLists.txt agent cupti export cli include cmake samples -type f \( -name '*.c' \
    -o -name '*.h' -o -name '*.cu' -o -name '*.proto' -o -name CMakeLists.txt -o -name '*.cmake' \) \
    -print0 2>/dev/null | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
}

build=build-bundle out=.gpu-bundle do_build=1 keep_debug=0
while (($#)); do
  case $1 in
    --build) build=$2; shift ;;
    --no-build) do_build=0 ;;
    --out) out=$2; shift ;;
    --keep-debug) keep_debug=1 ;;
    --check)
      [[ -d ${2:-} ]] || { echo "gpu-bundle: --check needs a bundle folder" >&2; exit 2; }
      check_bundle "$2" && echo "gpu-bundle: $2 is self-contained" && exit 0
      exit 1 ;;
    --sources) sources_hash; exit 0 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-bundle: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
[[ $build = /* ]] || build=$root/$build
[[ $out = /* ]] || out=$root/$out
for tool in patchelf ldd strip objdump protoc; do
  command -v $tool >/dev/null ||
    { echo "gpu-bundle: $tool not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
done
start=$SECONDS

if ((do_build)); then
  echo "gpu-bundle: building in $build"
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  mkdir -p "$build"  # the logs go inside it, where git ignores them
  # No tests (the simulated GPU never ships); samples/CMakeLists.txt builds sm_90 machine code
  # plus compute_90 PTX, which H100 and H200 both run.
  cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF \
    -DGPUPROF_BUILD_SAMPLES=ON -DGPUPROF_SANITIZE= >"$build/gpu-bundle-cmake.log" 2>&1 ||
    { tail -n 30 "$build/gpu-bundle-cmake.log" >&2; echo "gpu-bundle: cmake failed (log: $build/gpu-bundle-cmake.log)" >&2; exit 1; }
  cmake --build "$build" -j "${GPUPROF_JOBS:-$(nproc)}" >"$build/gpu-bundle-build.log" 2>&1 ||
    { tail -n 30 "$build/gpu-bundle-build.log" >&2; echo "gpu-bundle: build failed (log: $build/gpu-bundle-build.log)" >&2; exit 1; }
  echo "gpu-bundle: built in $((SECONDS - start)) s"
fi
for f in bin/gpuprof lib/libgpuprof.so samples/streams samples/launch_loop; do
  [[ -e $build/$f ]] ||
    { echo "gpu-bundle: $build/$f is missing (the samples need nvcc from the CUDA 13 toolkit)" >&2; exit 1; }
done

rm -rf "$out"
mkdir -p "$out"/bin "$out"/lib "$out"/samples "$out"/share
cp "$build"/bin/gpuprof "$out"/bin/
cp "$build"/lib/libgpuprof.so "$out"/lib/
for f in "$build"/samples/*; do
  is_elf "$f" && [[ -x $f ]] && cp "$f" "$out"/samples/
done

# ldd lists the whole closure (dependencies of dependencies too), as resolved here.
while IFS= read -r f; do
  while IFS= read -r line; do
    [[ $line =~ ^[[:space:]]*([^[:space:]]+)\ =\>\ (.*)$ ]] || continue
    name=${BASH_REMATCH[1]} path=${BASH_REMATCH[2]%% (*}
    [[ $name =~ $system_re || -e $out/lib/$name ]] && continue
    if [[ $path == "not found" ]]; then
      echo "gpu-bundle: ${f#"$out"/} needs $name, which is not installed here" >&2
      exit 1
    fi
    cp -L "$path" "$out/lib/$name"
    chmod u+w "$out/lib/$name"
  done < <(ldd "$f")
done < <(bundle_elves "$out")

while IFS= read -r f; do
  ((keep_debug)) || strip --strip-debug "$f"
  # RUNPATH serves only an object's own dependencies, so every library gets one as well.
  # shellcheck disable=SC2016  # $ORIGIN is for the loader, not the shell
  case $f in
    "$out"/lib/*) patchelf --set-rpath '$ORIGIN' "$f" ;;
    *) patchelf --set-rpath '$ORIGIN/../lib' "$f" ;;
  esac
done < <(bundle_elves "$out")

# The checker decodes pprof with python protobuf; the device may have no protoc, so the schema
# travels compiled (a FileDescriptorSet that any protobuf version reads).
protoc --proto_path=export/proto --include_imports --descriptor_set_out="$out"/share/profile.desc \
  profile.proto

glibc_max=$(while IFS= read -r f; do objdump -T "$f"; done < <(bundle_elves "$out") |
  grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n1)
glibcxx_max=$(while IFS= read -r f; do objdump -T "$f"; done < <(bundle_elves "$out") |
  grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -n1)
{
  echo "gpuprof GPU bundle"
  echo "source: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "sources: $(sources_hash) (scripts/gpu-bundle.sh --sources)"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(sed -n 's/^PRETTY_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' /etc/os-release), $(ldd --version | head -n1)"
  echo "needs: ${glibc_max:-GLIBC_?} or newer, libstdc++ with ${glibcxx_max:-GLIBCXX_?}, an NVIDIA driver for CUDA 13, libcudart.so.13 and libcupti.so.13"
  # What nvcc was told to generate: sm_90 machine code and compute_90 PTX (newer GPUs JIT it).
  echo "samples: nvcc $(grep -rhos 'generate-code=[^ ]*' "$build"/build.ninja "$build"/samples/CMakeFiles |
    sort -u | tr '\n' ' ')"
  echo "files:"
  (cd "$out" && find . -type f ! -name BUNDLE.txt -printf '  %P %s\n' | sort)
} >"$out"/BUNDLE.txt

check_bundle "$out" || { echo "gpu-bundle: the bundle is not self-contained" >&2; exit 1; }
size_kib=$(du -sk "$out" | cut -f1)
if ((size_kib > 48 * 1024)); then
  echo "gpu-bundle: $out is $((size_kib / 1024)) MiB; the device takes 64 MiB with the repository" >&2
  exit 1
fi
echo "gpu-bundle: $out: $(find "$out" -type f | wc -l) files, $((size_kib / 1024)).$(((size_kib % 1024) * 10 / 1024)) MiB, needs ${glibc_max:-GLIBC_?}; $((SECONDS - start)) s"

#!/usr/bin/env bash
# Installs the Debian packages that building and testing gpuprof need; safe to run again.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libunwind-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler
  libcurl4-openssl-dev zlib1g-dev libelf-dev liblz4-dev libzstd-dev libiberty-dev libjson-c-dev
  python3 python3-yaml python3-protobuf golang-go patchelf strace
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo=sudo
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "install-deps: Debian packages already installed"
fi

# The CUDA 13 toolkit is not a Debian package: check that it is there.
cuda=${CUDAToolkit_ROOT:-/usr/local/cuda}
if [[ ! -f $cuda/include/cupti.h || ! -f $cuda/include/cuda.h ]]; then
  cat >&2 <<MSG
install-deps: the CUDA 13 toolkit was not found at $cuda (no include/cupti.h).
Install the CUDA 13 toolkit (https://developer.nvidia.com/cuda-downloads) or set
CUDAToolkit_ROOT to where it is installed, then run this script again.
MSG
  exit 1
fi
version=$(sed -n 's/^#define CUDA_VERSION \([0-9]*\).*/\1/p' "$cuda/include/cuda.h")
if [[ -z $version || $version -lt 13000 ]]; then
  echo "install-deps: $cuda is CUDA ${version:-unknown}; gpuprof needs CUDA 13 (set CUDAToolkit_ROOT)" >&2
  exit 1
fi
echo "install-deps: CUDA toolkit $version at $cuda"

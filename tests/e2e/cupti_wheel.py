#!/usr/bin/env python3
"""The CUPTI search of a PyTorch-style install: libcupti.so.13 only inside a wheel directory.

Usage (from ctest, which sets the agent's environment):
    cupti_wheel.py --fakegpu-lib DIR --case cu13|cuda_cupti|none

Builds, under E2E_WORKDIR, a fake installation the way pip lays out CUDA 13 wheels:
    lib/libcuda.so.1                                   the driver (the simulator's)
    venv/lib/python3/site-packages/nvidia/<runtime>/lib/libcudart.so.13
    venv/lib/python3/site-packages/nvidia/<case>/lib/libcupti.so.13   (not for "none")
where <runtime> is cu13 (the single cu13 wheel) or cuda_runtime (the per-component wheels
that ship cuda_cupti). A Python child loads libcudart from site-packages first (as importing
torch does), then the driver, and launches three kernels. The library search path holds only
lib/, and GPUPROF_TEST_CUPTI_WHEELS_ONLY=1 hides this machine's own CUPTI (its toolkit, the
ld.so cache), so the agent can find CUPTI only through the wheel search. The summary must name
the wheel's library and count the kernels; without a wheel CUPTI the agent must stay inactive,
name both wheel paths it tried, and the program must run on.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

N_LAUNCHES = 3


def child(cudart):
    """The application: runs with the agent injected."""
    import ctypes

    ctypes.CDLL(cudart, mode=ctypes.RTLD_GLOBAL)
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(res, what):
        if res != 0:
            print(f"cupti_wheel child: {what} returned {res}", file=sys.stderr)
            sys.exit(1)

    check(cuda.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cuda.cuCtxCreate_v4(ctypes.byref(ctx), None, 0, dev), "cuCtxCreate")
    mod = ctypes.c_void_p()
    names = (ctypes.c_char_p * 1)(b"wheel_kernel")
    check(cuda.fakegpu_module_from_names(ctypes.byref(mod), names, 1), "module_from_names")
    fn = ctypes.c_void_p()
    check(cuda.cuModuleGetFunction(ctypes.byref(fn), mod, b"wheel_kernel"), "cuModuleGetFunction")
    u = ctypes.c_uint
    for _ in range(N_LAUNCHES):
        check(cuda.cuLaunchKernel(fn, u(1), u(1), u(1), u(32), u(1), u(1), u(0), None, None, None),
              "cuLaunchKernel")
    check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    print("cupti_wheel child: done")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fakegpu-lib")
    ap.add_argument("--case", choices=("cu13", "cuda_cupti", "none"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child)

    work = os.path.join(os.environ["E2E_WORKDIR"], "tree")
    shutil.rmtree(work, ignore_errors=True)
    lib = os.path.join(work, "lib")
    site = os.path.join(work, "venv", "lib", "python3", "site-packages")
    runtime_dir = os.path.join(site, "nvidia", "cu13" if args.case == "cu13" else "cuda_runtime", "lib")
    os.makedirs(lib)
    os.makedirs(runtime_dir)
    # Copies, as pip installs them (the summary names the path the agent opened).
    shutil.copy(os.path.join(args.fakegpu_lib, "libcuda.so.1"), lib)
    cudart = os.path.join(runtime_dir, "libcudart.so.13")
    shutil.copy(os.path.join(args.fakegpu_lib, "libcudart.so.13"), cudart)
    want_cupti = ""
    if args.case != "none":
        cupti_dir = os.path.join(site, "nvidia", args.case, "lib")
        os.makedirs(cupti_dir, exist_ok=True)
        want_cupti = os.path.join(cupti_dir, "libcupti.so.13")
        shutil.copy(os.path.join(args.fakegpu_lib, "libcupti.so.13"), want_cupti)

    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = lib
    env["GPUPROF_TEST_CUPTI_WHEELS_ONLY"] = "1"
    summary_path = env["GPUPROF_SUMMARY_FILE"]
    if os.path.exists(summary_path):
        os.unlink(summary_path)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", cudart], env=env,
                          capture_output=True, text=True, timeout=60)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    failures = []
    if proc.returncode != 0:
        failures.append(f"the program exited with {proc.returncode}")
    try:
        with open(summary_path) as f:
            s = json.load(f)
    except (OSError, ValueError) as e:
        print(f"cupti_wheel: {args.case}: no summary: {e}")
        return 1
    if args.case == "none":
        reason = s.get("inactive_reason", "")
        if s.get("state") != "inactive":
            failures.append(f"state {s.get('state')!r}, expected 'inactive'")
        for sub in ("nvidia/cu13/lib/libcupti.so.13", "nvidia/cuda_cupti/lib/libcupti.so.13"):
            tried = os.path.join(site, sub)
            if tried not in reason:
                failures.append(f"inactive_reason does not name {tried}: {reason!r}")
        lines = [l for l in proc.stderr.splitlines() if l.startswith("gpuprof")]
        if len(lines) != 1:
            failures.append(f"{len(lines)} gpuprof lines on stderr, expected 1: {lines}")
    else:
        if s.get("state") != "active":
            failures.append(f"state {s.get('state')!r} ({s.get('inactive_reason')!r}), expected 'active'")
        if s.get("cupti_path") != want_cupti:
            failures.append(f"cupti_path {s.get('cupti_path')!r}, expected {want_cupti!r}")
        count = s.get("kernels", {}).get("count")
        if count != N_LAUNCHES:
            failures.append(f"kernels.count {count}, expected {N_LAUNCHES}")
    for msg in failures:
        print(f"cupti_wheel: {args.case}: {msg}")
    if failures:
        return 1
    print(f"cupti_wheel: {args.case}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

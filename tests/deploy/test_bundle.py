#!/usr/bin/env python3
"""Proves that a GPU bundle (scripts/gpu-bundle.sh) is self-contained and runs.

    test_bundle.py SOURCE_DIR BUILD_DIR REQUIRE

Packs BUILD_DIR (no build) into BUILD_DIR/tests/deploy/bundle, then checks with ldd, run with
an empty environment, that every program and library of the bundle resolves everything outside
glibc, libstdc++, libgcc_s and CUDA inside the bundle; that the bundled libraries are exactly
the agent's dependencies beyond those; that RUNPATHs are $ORIGIN-relative; that the bundle's
own --check fails when a library is taken out; runs scripts/gpu-verify.sh --simulator
--bundle on two samples (the simulated GPU's libraries from BUILD_DIR/fakegpu/lib); and that
gpu-verify.sh refuses a bundle whose recorded sources differ from the checkout's.
"""

import json
import os
import re
import shutil
import subprocess
import sys

# What the machine that runs the bundle provides (the docs' allow-list).
SYSTEM = re.compile(r"^(linux-vdso\.so|ld-linux[-a-z0-9_]*\.so|lib(c|m|mvec|dl|pthread|rt|resolv|"
                    r"util|anl)\.so|libstdc\+\+\.so|libgcc_s\.so)")
CUDA = {"libcuda.so.1", "libcudart.so.13", "libcupti.so.13", "libnccl.so.2"}
CLEAN_ENV = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": ""}

failures = []


def check(ok, text):
    print(("ok   " if ok else "FAIL ") + text)
    if not ok:
        failures.append(text)


def is_elf(path):
    if os.path.islink(path) or not os.path.isfile(path):
        return False
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def ldd(path, env=CLEAN_ENV):
    """{soname: resolved path or None} of path's whole closure."""
    out = subprocess.run(["ldd", path], env=env, capture_output=True, text=True).stdout
    deps = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (.*?)(?: \(0x[0-9a-f]+\))?$", line)
        if m:
            deps[m.group(1)] = None if m.group(2) == "not found" else os.path.realpath(m.group(2))
    return deps


def runpath(path):
    out = subprocess.run(["objdump", "-p", path], capture_output=True, text=True).stdout
    m = re.search(r"^\s*(?:RUNPATH|RPATH)\s+(\S+)", out, re.M)
    return m.group(1) if m else None


def elves(root):
    for sub in ("bin", "lib", "samples"):
        d = os.path.join(root, sub)
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if is_elf(os.path.join(d, name)):
                yield f"{sub}/{name}"


def main():
    src, build, require = sys.argv[1], sys.argv[2], sys.argv[3]
    out = os.path.join(build, "tests", "deploy", "bundle")
    bundler = os.path.join(src, "scripts", "gpu-bundle.sh")
    r = subprocess.run([bundler, "--no-build", "--build", build, "--out", out],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"gpu-bundle.sh --no-build exits 0 ({(r.stdout + r.stderr).strip()})")
    if r.returncode != 0:
        return 1
    real_out = os.path.realpath(out)

    # What the bundle must carry, computed from the build (not from the bundle): the closure of
    # the agent and of the gpuprof command (json-c for `gpuprof merge`) minus the system's and
    # CUDA's libraries.
    want_libs = {n for f in (os.path.join(build, "lib", "libgpuprof.so"),
                             os.path.join(build, "bin", "gpuprof"))
                 for n, p in ldd(f).items() if not SYSTEM.match(n) and n not in CUDA}
    check(want_libs >= {"libunwind.so.8", "libprotobuf-c.so.1", "libelf.so.1", "libz.so.1"},
          f"the agent's own dependencies are found in the build: {sorted(want_libs)}")
    have_libs = set(os.listdir(os.path.join(out, "lib"))) - {"libgpuprof.so"}
    check(have_libs == want_libs, f"bundle lib/ holds exactly those: {sorted(have_libs)}")
    want_samples = {n for n in os.listdir(os.path.join(build, "samples"))
                    if is_elf(os.path.join(build, "samples", n))}
    have_samples = set(os.listdir(os.path.join(out, "samples")))
    check(have_samples == want_samples and "streams" in have_samples,
          f"bundle samples/ holds every built sample: {sorted(have_samples)}")
    check(os.path.getsize(os.path.join(out, "share", "profile.desc")) > 0,
          "share/profile.desc (the compiled pprof schema) is there")

    for rel in elves(out):
        path = os.path.join(out, rel)
        want_rp = "$ORIGIN" if rel.startswith("lib/") else "$ORIGIN/../lib"
        check(runpath(path) == want_rp, f"{rel}: RUNPATH {runpath(path)!r} == {want_rp!r}")
        bad = []
        for name, where in ldd(path).items():
            inside = where is not None and where.startswith(real_out + os.sep)
            if SYSTEM.match(name) or name in CUDA:
                if inside:
                    bad.append(f"{name} is a system library but comes from the bundle")
            elif not inside:
                bad.append(f"{name} => {where or 'not found'}")
        check(not bad, f"{rel}: with an empty environment, everything else resolves inside the "
                       f"bundle{': ' + '; '.join(bad) if bad else ''}")
    deps = ldd(os.path.join(out, "lib", "libgpuprof.so"))
    check(all(deps[n] == os.path.join(real_out, "lib", n) for n in want_libs if n in deps) and
          {"libunwind.so.8", "libprotobuf-c.so.1", "libelf.so.1", "libz.so.1"} <= set(deps),
          "lib/libgpuprof.so loads libunwind, libprotobuf-c, libelf, libz... from bundle/lib")

    # The bundle's own check (which gpu-verify.sh --bundle runs on the device) must catch a
    # library taken out: the system's copy would be loaded instead.
    broken = out + "-broken"
    shutil.rmtree(broken, ignore_errors=True)
    shutil.copytree(out, broken, symlinks=True)
    os.remove(os.path.join(broken, "lib", "libz.so.1"))
    r = subprocess.run([bundler, "--check", broken], capture_output=True, text=True)
    check(r.returncode == 1 and "lib/libgpuprof.so loads libz.so.1 from outside the bundle"
          in r.stderr, f"--check fails without lib/libz.so.1 (exit {r.returncode}: "
                       f"{r.stderr.strip().splitlines()[:1]})")
    shutil.rmtree(broken, ignore_errors=True)
    r = subprocess.run([bundler, "--check", out], capture_output=True, text=True)
    check(r.returncode == 0, f"--check passes on the bundle ({(r.stdout + r.stderr).strip()})")

    # Run it on the simulated GPU, with nothing from the build but the simulator.
    work = os.path.join(build, "tests", "deploy", "bundle-verify")
    shutil.rmtree(work, ignore_errors=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_INJECTION64_PATH", "LD_LIBRARY_PATH", "LD_PRELOAD")}
    r = subprocess.run([os.path.join(src, "scripts", "gpu-verify.sh"), "--simulator", "--bundle",
                        out, "--fakegpu", os.path.join(build, "fakegpu", "lib"), "--samples",
                        "streams,leak", "--repeat", "0", "--work", work, "--require", require],
                       env=env, capture_output=True, text=True)
    print(r.stdout + r.stderr)
    check(r.returncode == 0, f"gpu-verify.sh --simulator --bundle exits 0 (got {r.returncode})")
    check("gpu-verify: ok: every program and library of the bundle loads (ldd)" in r.stdout,
          "gpu-verify.sh --bundle checked the bundle first")
    try:
        with open(os.path.join(work, "results.json")) as f:
            results = json.load(f)["results"]
    except (OSError, ValueError, KeyError) as e:
        results = []
        check(False, f"results.json: {e}")
    got = sorted((x["sample"], x["mode"], x["status"]) for x in results)
    want = sorted((s, m, "PASS") for s in ("streams", "leak")
                  for m in ("continuous", "capture", "gpu-only"))
    check(got == want, f"every sample and mode passed: {got}")
    pprof = [c for x in results for c in x["checks"] if c["text"].startswith("pprof")]
    if "pprof" in require.split(","):
        check(bool(pprof) and all(c["status"] == "PASS" for c in pprof),
              f"pprof checks ran through the bundle's profile.desc and passed: {len(pprof)}")

    # A bundle made from other sources than the checkout it runs in (a sample or the agent
    # changed after packing) is refused before anything runs on the device.
    stale = out + "-stale"
    shutil.rmtree(stale, ignore_errors=True)
    shutil.copytree(out, stale, symlinks=True)
    info = os.path.join(stale, "BUNDLE.txt")
    with open(info) as f:
        text = f.read()
    check(re.search(r"^sources: [0-9a-f]{16} ", text, re.M) is not None,
          "BUNDLE.txt records the sources' fingerprint")
    with open(info, "w") as f:
        f.write(re.sub(r"^sources: [0-9a-f]{16}", "sources: 0123456789abcdef", text, flags=re.M))
    r = subprocess.run([os.path.join(src, "scripts", "gpu-verify.sh"), "--simulator", "--bundle",
                        stale, "--fakegpu", os.path.join(build, "fakegpu", "lib"), "--samples",
                        "streams", "--repeat", "0", "--work", work + "-stale"],
                       env=env, capture_output=True, text=True)
    check(r.returncode == 2 and "was made from other sources (0123456789abcdef" in r.stderr and
          "nothing was run" in r.stderr,
          f"gpu-verify.sh --bundle refuses a stale bundle (exit {r.returncode}: "
          f"{r.stderr.strip().splitlines()[-2:]})")
    shutil.rmtree(stale, ignore_errors=True)

    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

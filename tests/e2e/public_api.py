#!/usr/bin/env python3
"""The public C API (include/gpuprof/gpuprof.h) as its documentation promises it.

Runs the C and the C++ build of public_api.c: with the agent preloaded (the documented way to
bind the weak symbols), with CUDA_INJECTION64_PATH only (the symbols stay NULL, the program
runs unprofiled), preloaded with GPUPROF_MODE=off, racing cuInit, and from an exit handler
that runs after the agent's. Also checks that libgpuprof.so exports only the documented
symbols: anything else could bind to an application's own symbol of the same name.
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys

failures = []

ENODEV, EBUSY, ENOENT, EINVAL = 19, 16, 2, 22

EXPORTED = {"InitializeInjection", "gpuprof_capture_start", "gpuprof_capture_stop",
            "ncclProfiler_v5", "ncclProfiler_v4", "ncclProfiler_v3",
            "InitializeInjectionNvtx2"}


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print(f"FAIL: {msg}", file=sys.stderr)
    return cond


def run(prog, mode, preload, extra=None):
    env = dict(os.environ)
    env.update(extra or {})
    if preload:
        env["LD_PRELOAD"] = preload
        if "ASAN_OPTIONS" in env:  # the agent is preloaded before the sanitizer runtime
            env["ASAN_OPTIONS"] += ":verify_asan_link_order=0"
    out_dir = env["GPUPROF_OUTPUT_DIR"]
    shutil.rmtree(out_dir, ignore_errors=True)
    r = subprocess.run([prog, mode], env=env, capture_output=True, text=True, timeout=60)
    sys.stderr.write(r.stderr)
    traces = sorted(f for f in glob.glob(os.path.join(out_dir, "gpuprof-*-capture*"))
                    if f.endswith((".json", ".json.gz", ".pftrace")))
    return r.returncode, r.stdout, traces


def lines(*pairs):
    return "".join(f"{k} {v}\n" for k, v in pairs)


def check_prog(prog, agent):
    name = os.path.basename(prog)

    rc, out, traces = run(prog, "calls", agent)
    want = lines(("before cuInit: start", -ENODEV), ("before cuInit: stop", -ENOENT),
                 ("bad flags", -EINVAL), ("25 hours", -EINVAL), ("start", 0),
                 ("start again", -EBUSY), ("stop", 0), ("stop again", -ENOENT),
                 ("gpu-only start", 0), ("gpu-only stop", 0)) + "done\n"
    check(rc == 0 and out == want, f"{name} calls (preloaded): rc {rc}, {out!r}, want {want!r}")
    check(len(traces) == 2, f"{name} calls: two capture files expected, found {traces}")

    # Not preloaded: the driver loads the agent with RTLD_LOCAL long after the weak
    # references were resolved, so they stay NULL and the program runs on.
    rc, out, traces = run(prog, "calls", None)
    check(rc == 0 and out == "api absent\ndone\n",
          f"{name} calls (injection only): rc {rc}, {out!r}")
    check(traces == [], f"{name} calls (injection only): a capture was written: {traces}")

    rc, out, traces = run(prog, "calls", agent, {"GPUPROF_MODE": "off"})
    want = lines(("before cuInit: start", -ENODEV), ("before cuInit: stop", -ENOENT),
                 ("bad flags", -EINVAL), ("25 hours", -ENODEV), ("start", -ENODEV),
                 ("start again", -ENODEV), ("stop", -ENOENT), ("stop again", -ENOENT),
                 ("gpu-only start", -ENODEV), ("gpu-only stop", -ENOENT)) + "done\n"
    check(rc == 0 and out == want, f"{name} calls (GPUPROF_MODE=off): rc {rc}, {out!r}")

    rc, out, traces = run(prog, "race", agent)
    want = lines(("race: start after", 0), ("race: stop after", 0)) + "done\n"
    check(rc == 0 and out == want, f"{name} race: rc {rc}, {out!r}")

    # The agent's exit handler ran first: the late start is refused with -ENODEV (the agent
    # has stopped), nothing hangs or crashes, and the capture that was running was finished
    # by the agent's exit.
    rc, out, traces = run(prog, "atexit", agent)
    want = lines(("start", 0)) + "done\n" + lines(("atexit: start", -ENODEV),
                                                  ("atexit: stop", -ENOENT))
    check(rc == 0 and out == want, f"{name} atexit: rc {rc}, {out!r}, want {want!r}")
    check(len(traces) == 1, f"{name} atexit: one capture file expected, found {traces}")

    # Without LD_PRELOAD the functions are reached through dlopen(RTLD_NOLOAD) + dlsym after
    # cuInit; calling InitializeInjection again, five times at once, changes nothing.
    rc, out, traces = run(prog, "dlsym", None)
    want = lines(("dlsym: InitializeInjection again returned 1", 5), ("dlsym: start", 0),
                 ("dlsym: stop", 0)) + "done\n"
    check(rc == 0 and out == want, f"{name} dlsym: rc {rc}, {out!r}, want {want!r}")
    check(len(traces) == 1, f"{name} dlsym: one capture file expected, found {traces}")


def check_closed_stderr(prog, agent):
    # stderr is a pipe whose reader has exited: the agent's lines (GPUPROF_LOG=info adds the
    # start line and the exit summary) must not kill the program with SIGPIPE.
    env = dict(os.environ, GPUPROF_LOG="info", LD_PRELOAD=agent)
    if "ASAN_OPTIONS" in env:
        env["ASAN_OPTIONS"] += ":verify_asan_link_order=0"
    shutil.rmtree(env["GPUPROF_OUTPUT_DIR"], ignore_errors=True)
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([prog, "calls"], env=env, stdout=subprocess.PIPE, stderr=w,
                           text=True, timeout=60)
    finally:
        os.close(w)
    check(p.returncode == 0 and p.stdout.endswith("done\n"),
          f"{os.path.basename(prog)} with a closed stderr: rc {p.returncode}, {p.stdout!r}")


def check_exports(agent, nm):
    r = subprocess.run([nm, "-D", "--defined-only", agent], capture_output=True, text=True)
    if not check(r.returncode == 0, f"{nm} failed: {r.stderr}"):
        return
    # AddressSanitizer gives each exported global (the ncclProfiler_v* structs) an
    # "__odr_asan.<name>" indicator symbol: instrumentation, not part of the interface.
    syms = {l.split()[-1] for l in r.stdout.splitlines()
            if l.strip() and not l.split()[-1].startswith("__odr_asan.")}
    check(syms == EXPORTED, f"libgpuprof.so exports {sorted(syms - EXPORTED)} beyond the "
          f"documented symbols, or lacks {sorted(EXPORTED - syms)}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", required=True)
    ap.add_argument("--nm", default="nm")
    ap.add_argument("progs", nargs="+")
    a = ap.parse_args()
    check_exports(a.agent, a.nm)
    for prog in a.progs:
        check_prog(prog, a.agent)
    check_closed_stderr(a.progs[0], a.agent)
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("public API: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Runs tests/oom/oom_prog.c under the agent and checks the GPU out-of-memory snapshot: the
profile (read with `go tool pprof`, through tests/pprof/check_pprof.py), its comment, the one
stderr line, and the summary's `oom` section, all against what the program did.

Usage (from ctest; tests/lib/GpuprofTest.cmake sets the agent's environment):
    check_oom.py --case NAME -- PROGRAM [ARGS...]

oom_prog holds 36 MiB from hold_weights (4 x 9) and 30 MiB from hold_cache (4 x 10, one freed)
on GPU 0, asks for 16 MiB in grow_batch (fails: 82 > 80 MiB), frees the cache, holds 33 MiB
more from after_oom (3 x 11) and asks for 12 MiB in retry_batch (fails again).
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pprof"))
import check_pprof as cp  # noqa: E402

MIB = 1 << 20
LINE_RE = re.compile(r"^gpuprof: GPU out of memory: .*$", re.M)


def first_failure(api):
    return {"api": api, "bytes": 16 * MIB, "device": 0}


def expected_snapshots(case, api):
    """[(request, stderr line without the path, {chain: [0, 0, objects, bytes]})], in order.
    The simulated runtime's own frames stay in the profile's stacks (docs/PROFILES.md); the
    stderr line names the innermost function outside it."""
    rt = ("rt_begin", "cudaMalloc") if api == "cudaMalloc" else ()
    at_first = (f"{api} of 16.0 MiB failed on GPU 0 at grow_batch; 66.0 MiB in use by the "
                "process there; top holders: hold_weights 36.0 MiB, hold_cache 30.0 MiB",
                {(api,) + rt + ("hold_weights", "main"): [0, 0, 4, 36 * MIB],
                 (api,) + rt + ("hold_cache", "main"): [0, 0, 3, 30 * MIB]})
    if case in ("off", "ondemand"):
        return []
    if case == "nostacks":
        return [(16 * MIB,
                 f"{api} of 16.0 MiB failed on GPU 0 at an unknown caller (no stack); 66.0 MiB "
                 f"in use by the process there; top holders: {api} (no stack) 66.0 MiB",
                 {(api,): [0, 0, 7, 66 * MIB]})]
    snaps = [(16 * MIB,) + at_first]
    if case == "interval":
        snaps.append((12 * MIB,
                      f"{api} of 12.0 MiB failed on GPU 0 at retry_batch; 69.0 MiB in use by "
                      "the process there; top holders: hold_weights 36.0 MiB, after_oom 33.0 MiB",
                      {(api,) + rt + ("hold_weights", "main"): [0, 0, 4, 36 * MIB],
                       (api,) + rt + ("after_oom", "main"): [0, 0, 3, 33 * MIB]}))
    return snaps


def check(c, case, api, r, pid):
    c.eq("exit status", r.returncode, 0)
    c.eq("the program's report", r.stdout,
         "oom_prog: grow_batch: out of memory\noom_prog: retry_batch: out of memory\n"
         "oom_prog: done\n")
    want = expected_snapshots(case, api)
    files = cp.profile_files(pid, "gpu_memory_oom")
    lines = LINE_RE.findall(r.stderr)
    c.eq("snapshot files", len(files), len(want))
    c.eq("stderr lines", len(lines), len(want))
    for i, (request, text, chains) in enumerate(want):
        if i >= len(files) or i >= len(lines):
            break
        path = files[i]
        c.eq(f"stderr line {i}", lines[i], f"gpuprof: GPU out of memory: {text}; profile: {path}")
        prof = cp.read_profile(path)
        if case == "nostacks":
            # No frame, so no mapping: go tool pprof shows a placeholder one without [FN].
            c.eq("sample types", prof.get("types"), cp.TYPES["gpu_memory"])
            c.eq("default sample type", prof.get("default"), "inuse_space")
        else:
            cp.check_common(c, "gpu_memory", prof)
        got = cp.by_chain(prof)
        c.eq(f"snapshot {i}: chains and values", got, chains)
        for s in prof["samples"]:
            c.eq(f"snapshot {i}: gpu label of {s['functions']}", s["labels"].get("gpu"), "0")
        comment = [x for x in prof["comments"] if x.startswith("GPU out of memory: ")]
        c.eq(f"snapshot {i}: one OOM comment", len(comment), 1)
        if comment:
            c.true(f"snapshot {i}: comment {comment[0]!r} names the request",
                   comment[0].startswith(f"GPU out of memory: {api} of {request} bytes "
                                         f"({request // MIB}.0 MiB) failed on GPU 0 at "))
            c.true(f"snapshot {i}: comment {comment[0]!r} names the thread",
                   f", thread {pid};" in comment[0])
    with open(os.path.join(os.environ["E2E_WORKDIR"], "summary.json")) as f:
        oom = json.load(f).get("oom")
    if oom is None:
        c.failures.append("the summary has no oom section")
        return
    first = oom.get("first", {})
    c.eq("summary oom", {k: v for k, v in oom.items() if k != "first"},
         {"failed_allocations": 2, "snapshots": len(want), "skipped": 2 - len(want),
          "errors": 0})
    c.eq("summary oom.first", {k: first.get(k) for k in ("api", "bytes", "device")},
         first_failure(api))
    c.eq("summary oom.first.tid (the main thread)", first.get("tid"), pid)
    if files:
        c.eq("the first snapshot's stamp is the first failure's second",
             cp.stamp_of(files[0]), first.get("time_ns", 0) // 1000000000)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True,
                    choices=["runtime", "driver", "off", "interval", "nostacks", "bad_interval",
                             "ondemand"])
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    out_dir = os.environ["GPUPROF_OUTPUT_DIR"]
    for f in glob.glob(os.path.join(out_dir, "gpuprof-*")):
        os.unlink(f)
    summary = os.path.join(os.environ["E2E_WORKDIR"], "summary.json")
    if os.path.exists(summary):
        os.unlink(summary)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=120)
    sys.stderr.write(stderr)
    r = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    c = cp.Check()
    if a.case == "bad_interval":
        # One line naming the variable and value; then the default (60 s) applies.
        c.eq("the bad value's line",
             re.findall(r"^gpuprof: .*GPUPROF_OOM_INTERVAL.*$", stderr, re.M),
             ["gpuprof: GPUPROF_OOM_INTERVAL='500ms' is not 0 (no snapshots) or a duration of "
              "at least 1s; using 60s"])
        a.case = "runtime"
    check(c, a.case, "cuMemAlloc" if "driver" in cmd[1:] else "cudaMalloc", r, proc.pid)
    c.eq("temporary files left behind", glob.glob(os.path.join(out_dir, "*.tmp")), [])
    return c.exit_status(f"check_oom {a.case}")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Tests of the verification checker (scripts/verify_samples.py) itself: it must fail.

Usage: test_verify.py BUILD_DIR

1. Its trace, pprof-free summary and option logic on synthetic inputs: right values pass,
   wrong ones fail with a message naming the value.
2. A real run of the streams and leak samples on the simulated GPU against expectations that
   are wrong by one (a kernel count, the leaked bytes): the checker exits 1 and names both.
3. Runs that must not pass quietly on a GPU machine: a hung sample (killed after
   --run-timeout), a crashed one (the signal and its last stderr line named), PyTorch skipping
   for want of a GPU; and samples/pytorch/workload.py with a torch that is installed but does
   not import (an error, not a skip).
4. A run that hangs everything stops at --budget with the table printed (later runs NOT RUN).
5. The overhead measurement with stand-in programs: untimed first runs, alternating order, the
   agent's default window, and a verdict that tells a miss within the noise from a real one.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import verify_samples as vs  # noqa: E402

failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)


def statuses(o):
    return [s for s, _ in o.items]


def synthetic():
    ctx = {"mode": "capture", "launches": 10}
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "app"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "GPU 0 (H100)"}},
    ]
    for i in range(11):
        events.append({"ph": "X", "name": "empty_kernel", "pid": 2, "tid": 7, "ts": i, "dur": 1,
                       "args": {"graph_id": 5, "graph_node_id": 100 + i % 3}})
    for tid in (11, 12):
        events.append({"ph": "X", "name": "cudaLaunchKernel", "pid": 1, "tid": tid, "ts": 0, "dur": 1})
    events.append({"ph": "X", "name": "Memcpy HtoD", "pid": 2, "tid": 7, "ts": 20, "dur": 1,
                   "args": {"bytes": 4096}})
    events.append({"ph": "C", "name": "GPU memory", "pid": 2, "ts": 1, "args": {"in_use_bytes": 300}})
    # NVTX: two "step" ranges on thread 11, a "fwd" range of domain "d" inside the first one
    # around its launch call, one outside any step; a mark; a start/end range across threads.
    events += [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 0xf0000000,
         "args": {"name": "NVTX start/end"}},
        {"ph": "X", "cat": "nvtx", "name": "step", "pid": 1, "tid": 11, "ts": -1, "dur": 3},
        {"ph": "X", "cat": "d", "name": "fwd", "pid": 1, "tid": 11, "ts": -0.5, "dur": 2},
        {"ph": "X", "cat": "nvtx", "name": "step", "pid": 1, "tid": 11, "ts": 5, "dur": 1},
        {"ph": "X", "cat": "d", "name": "fwd", "pid": 1, "tid": 11, "ts": 7, "dur": 1},
        {"ph": "i", "s": "t", "cat": "nvtx", "name": "done", "pid": 1, "tid": 11, "ts": 4},
        {"ph": "X", "cat": "nvtx", "name": "io", "pid": 1, "tid": 0xf0000000, "ts": 0, "dur": 9,
         "args": {"start_tid": 11, "end_tid": 12}},
        {"ph": "X", "cat": "nvtx", "name": "io2", "pid": 1, "tid": 12, "ts": 0, "dur": 9,
         "args": {"start_tid": 12, "end_tid": 12}},
    ]
    t = vs.Trace(events)
    api = {"name_re": "^cudaLaunch", "count": 1}
    nvtx_cases = [
        ({"kind": "trace_nvtx_range", "name": "step", "cat": "nvtx", "count": 2, "threads": 1},
         ["PASS", "PASS"]),
        ({"kind": "trace_nvtx_range", "name": "step", "cat": "d", "count": 2}, ["FAIL"]),
        ({"kind": "trace_nvtx_range", "name": "fwd", "cat": "d", "count": 2, "api_inside": api},
         ["PASS", "FAIL"]),
        ({"kind": "trace_nvtx_range", "name": "fwd", "cat": "d", "count": 2,
          "inside": {"name": "step", "cat": "nvtx"}}, ["PASS", "FAIL"]),
        ({"kind": "trace_nvtx_mark", "name": "done", "cat": "nvtx", "count": 1}, ["PASS"]),
        ({"kind": "trace_nvtx_mark", "name": "done", "cat": "nvtx", "count": 2}, ["FAIL"]),
        ({"kind": "trace_nvtx_span", "name": "io", "cat": "nvtx", "count": 1, "cross_thread": True},
         ["PASS", "PASS"]),
        # Not on an "NVTX start/end" track.
        ({"kind": "trace_nvtx_span", "name": "io2", "cat": "nvtx", "count": 1}, ["FAIL"]),
    ]
    cases = [
        ({"kind": "trace_kernel", "name": "empty_kernel", "count": "{launches+1}"}, ["PASS"]),
        ({"kind": "trace_kernel", "name": "empty_kernel", "count": 10}, ["FAIL"]),
        ({"kind": "trace_kernel_match", "name_re": "empty", "at_least": 11}, ["PASS"]),
        ({"kind": "trace_memcpy", "direction": "HtoD", "count": 1, "bytes": 4096}, ["PASS"]),
        ({"kind": "trace_memcpy", "direction": "HtoD", "count": 1, "bytes": 4097}, ["FAIL"]),
        ({"kind": "trace_graph", "names": ["empty_kernel"], "graphs": 1, "nodes": 3}, ["PASS"] * 3),
        ({"kind": "trace_graph", "names": ["empty_kernel"], "graphs": 1, "nodes": 4},
         ["PASS", "PASS", "FAIL"]),
        ({"kind": "trace_api_threads", "name_re": "^cudaLaunch", "threads": 2}, ["PASS"]),
        ({"kind": "trace_api_threads", "name_re": "^cudaLaunch", "threads": 4}, ["FAIL"]),
        ({"kind": "trace_gpu_tracks", "min_streams": 1}, ["PASS"]),
        ({"kind": "trace_memory_counter", "max_at_least": 301}, ["FAIL"]),
    ] + nvtx_cases
    for c, want in cases:
        o = vs.Outcome()
        vs.check_trace(c, t, o, ctx)
        expect(statuses(o) == want, f"trace check {c}: {o.items}, expected {want}")

    summary = {"kernels": {"count": 3, "by_name": [
        {"name": "k", "count": 3, "apis": {"__cudaLaunchKernel": 3}, "devices": [0],
         "streams": [[0, 1, 13]]},
        {"name": "_Z4stepv", "demangled": "step()", "count": 0, "apis": {}, "devices": [0],
         "streams": []}]},
        "memcpy": {"HtoD": {"count": 1, "bytes": 8}},
        "memory": [{"device": 0, "allocs": 2, "in_use": 5}],
        "stacks": {"by_memory_in_use": [{"bytes": 5, "allocations": 1,
                                         "frames": [{"function": "cudaMalloc"},
                                                    {"function": "grow(int)"}]}]},
        "losses": {"cupti_dropped_records": 0, "unknown_frees": 2}}
    ctx = {"mode": "continuous", "launches": 0}
    cases = [
        ({"kind": "kernel", "name": "k", "count": 3, "streams": 1, "api": "__cudaLaunchKernel"},
         ["PASS"] * 3),
        ({"kind": "kernel", "name": "k", "count": 3, "api": "cudaGraphLaunch"}, ["PASS", "FAIL"]),
        ({"kind": "kernel", "name": "missing", "count": 3}, ["FAIL"]),
        ({"kind": "memcpy", "direction": "HtoD", "count": 1, "bytes": 8}, ["PASS"]),
        ({"kind": "memcpy", "direction": "DtoH", "absent": True}, ["PASS"]),
        ({"kind": "memory", "device": 0, "allocs": 2, "in_use": 6}, ["PASS", "FAIL"]),
        ({"kind": "in_use_stack", "rank": 1, "function_re": "^grow\\b", "bytes": 5}, ["PASS", "PASS"]),
        ({"kind": "in_use_stack", "rank": 1, "function_re": "^shrink\\b"}, ["FAIL"]),
        ({"kind": "losses_zero"}, ["FAIL"]),
        # Without a count (graph's informational stream check): only the streams are judged.
        ({"kind": "kernel", "name": "k", "streams": 1}, ["PASS"]),
        ({"kind": "kernel", "name": "k", "streams": 2}, ["FAIL"]),
        # "name" stays mangled; "demangled" is only in entries whose name demangles.
        ({"kind": "kernel", "name": "_Z4stepv", "demangled": "step()"}, ["PASS"]),
        ({"kind": "kernel", "name": "_Z4stepv", "demangled": "step(int)"}, ["FAIL"]),
        ({"kind": "kernel", "name": "k", "demangled": "k()"}, ["FAIL"]),
    ]
    for c, want in cases:
        o = vs.Outcome()
        vs.check_summary(c, summary, o, ctx)
        expect(statuses(o) == want, f"summary check {c}: {o.items}, expected {want}")


def overhead_runs():
    """The overhead measurement with stand-in programs: one untimed run of each side first (a
    cold first process must not count for either side), then pairs in alternating order, the
    agent's default window; and its verdict tells a miss within the noise from a real one."""
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "bin"))
        os.makedirs(os.path.join(tmp, "samples"))
        log = os.path.join(tmp, "runs.log")
        with open(os.path.join(tmp, "bin", "gpuprof"), "w") as f:
            f.write('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done; shift\n'
                    'FAKE_SIDE=with exec "$@"\n')
        # The first run of each side is slow (1000 ms), as a cold first process can be.
        with open(os.path.join(tmp, "samples", "launch_loop"), "w") as f:
            f.write('#!/bin/sh\nside=${FAKE_SIDE:-without}\n'
                    f'n=$(grep -c "^$side " {log} 2>/dev/null)\n'
                    f'echo "$side ${{GPUPROF_WINDOW-default}}" >> {log}\n'
                    'ms=100; [ "$side" = with ] && ms=101; [ "${n:-0}" = 0 ] && ms=1000\n'
                    'echo "launch_loop: $1 launches in $ms.000 ms (0.5 us per launch)"\n')
        for x in ("bin/gpuprof", "samples/launch_loop"):
            os.chmod(os.path.join(tmp, x), 0o755)
        a = type("A", (), {"build": tmp, "work": os.path.join(tmp, "work"), "launches": 7,
                           "repeat": 3, "run_timeout": 20})()
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPROF_")}
        ov = vs.overhead(a, env)
        expect(ov.get("without_ms") == [100.0] * 3 and ov.get("with_ms") == [101.0] * 3,
               f"overhead: the untimed first runs are counted: {ov}")
        with open(log) as f:
            runs = f.read().split("\n")[:-1]
        want = ["without default", "with default"] + ["without default", "with default",
                                                      "with default", "without default",
                                                      "without default", "with default"]
        expect(runs == want, f"overhead: runs in the order {runs}, expected {want}")
        expect(abs(ov.get("slowdown_pct", 0) - 1.0) < 1e-9 and ov.get("noise_pct") == 0.0,
               f"overhead: slowdown/noise {ov}")
    cases = [({"slowdown_pct": 1.5, "noise_pct": 4.0}, "meets the goal of <= 2%"),
             ({"slowdown_pct": 3.0, "noise_pct": 1.5}, "MISSES the goal of <= 2% by less than "
              "the run-to-run noise (1.50% without the agent): not conclusive"),
             ({"slowdown_pct": 6.0, "noise_pct": 1.5}, "MISSES the goal of <= 2%")]
    for ov, want in cases:
        got = vs.overhead_verdict(ov, 2.0, False)
        expect(got.startswith(want) and (want != "MISSES the goal of <= 2%" or got == want),
               f"overhead verdict of {ov}: {got!r}, expected {want!r}")


def real_run(build):
    with open(os.path.join(ROOT, "samples", "expectations.json")) as f:
        spec = json.load(f)
    for c in spec["samples"]["streams"]["checks"]:
        if c["kind"] == "kernel" and c["name"] == "add_kernel":
            c["count"] = 51
    for c in spec["samples"]["leak"]["checks"]:
        if c["kind"] == "memory":
            c["in_use"] = 20971521
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "expectations.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.path.join(build, "fakegpu", "lib") + \
            (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "verify_samples.py"),
                            "--build", build, "--work", os.path.join(tmp, "work"), "--simulator",
                            "--samples", "streams,leak", "--modes", "continuous", "--repeat", "0",
                            "--require", "summary", "--expectations", path],
                           env=env, capture_output=True, text=True, timeout=120)
        out = r.stdout + r.stderr
        expect(r.returncode == 1, f"wrong expectations: exit status {r.returncode}, expected 1\n{out}")
        expect("kernel add_kernel count: 50, expected 51" in out,
               f"the wrong kernel count is not named:\n{out}")
        expect("memory device 0 in_use: 20971520, expected 20971521" in out,
               f"the wrong in-use bytes are not named:\n{out}")


def run_workload(tmp, torch_init):
    """samples/pytorch/workload.py with a stand-in torch package (torch_init: its __init__)."""
    pkg = os.path.join(tmp, "torch")
    os.makedirs(pkg, exist_ok=True)
    with open(os.path.join(pkg, "__init__.py"), "w") as f:
        f.write(torch_init)
    env = dict(os.environ, PYTHONPATH=tmp)
    return subprocess.run([sys.executable, os.path.join(ROOT, "samples", "pytorch", "workload.py")],
                          env=env, capture_output=True, text=True, timeout=60)


def workload_skips():
    """A torch that is installed but does not load is an error, not "PyTorch is not installed"
    (a skip, which the verification does not count as a failure)."""
    with tempfile.TemporaryDirectory() as tmp:
        r = run_workload(tmp, "raise OSError('libcudart.so.13: cannot open shared object file')\n")
        expect(r.returncode == 1 and "skipped" not in r.stdout and
               "PyTorch is installed but does not import" in r.stderr and
               "libcudart.so.13" in r.stderr and "Traceback" not in r.stderr,
               f"broken torch (OSError): exit {r.returncode}, stdout {r.stdout!r}, stderr {r.stderr!r}")
    with tempfile.TemporaryDirectory() as tmp:
        r = run_workload(tmp, "import numpy_that_is_not_there\n")
        expect(r.returncode == 1 and "skipped" not in r.stdout and
               "numpy_that_is_not_there" in r.stderr,
               f"broken torch (a module of its own missing): exit {r.returncode}, "
               f"stdout {r.stdout!r}, stderr {r.stderr!r}")
    with tempfile.TemporaryDirectory() as tmp:
        r = run_workload(tmp, "class cuda:\n    @staticmethod\n    def is_available():\n"
                         "        return False\n")
        expect(r.returncode == 0 and r.stdout.startswith(
            "workload: skipped: torch.cuda.is_available() is False"),
            f"torch without a GPU: exit {r.returncode}, stdout {r.stdout!r}")


def hang_and_skip(build):
    """Off the simulator: a hung sample is killed after --run-timeout and fails (with the
    results so far in --json); PyTorch skipping for want of a GPU fails; PyTorch skipping for
    want of torch is listed as not verified."""
    why_gpu = "workload: skipped: torch.cuda.is_available() is False (no GPU or no driver)"
    spec = {"samples": {
        "hang": {"argv": ["/bin/sleep", "60"], "checks": []},
        "crash": {"argv": ["/bin/sh", "-c", "echo 'crash.cu:9: cudaMalloc failed: "
                           "cudaErrorNoKernelImageForDevice' >&2; kill -SEGV $$"], "checks": []},
        "nogpu": {"argv": ["/bin/echo", why_gpu], "skip_stdout": "^workload: skipped",
                  "skip_fails_on_gpu": "is_available\\(\\) is False", "checks": []},
        "notorch": {"argv": ["/bin/echo", "workload: skipped: PyTorch is not installed"],
                    "skip_stdout": "^workload: skipped",
                    "skip_fails_on_gpu": "is_available\\(\\) is False", "checks": []}}}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "expectations.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        results = os.path.join(tmp, "results.json")
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "verify_samples.py"),
                            "--build", build, "--work", os.path.join(tmp, "work"),
                            "--samples", "hang,crash,nogpu,notorch", "--modes", "continuous",
                            "--repeat", "0", "--require", "", "--run-timeout", "2",
                            "--expectations", path, "--json", results],
                           capture_output=True, text=True, timeout=50)
        out = r.stdout + r.stderr
        expect(r.returncode == 1, f"hang/skip run: exit status {r.returncode}, expected 1\n{out}")
        expect("exit status: 'timeout', expected 0 (killed after 2 s)" in out,
               f"the hung run is not named:\n{out}")
        # A crash says which signal and what the program last wrote, in the check and the table.
        why = ("exit status: -11, expected 0 (killed by SIGSEGV); last stderr line: "
               "'crash.cu:9: cudaMalloc failed: cudaErrorNoKernelImageForDevice'")
        expect(why in out, f"the crash is not explained:\n{out}")
        expect(any(l.startswith("crash ") and "FAIL" in l and why[:60] in l
                   for l in out.splitlines()), f"the table does not name the failure:\n{out}")
        expect(f"skipped although this machine has a GPU: {why_gpu!r}" in out,
               f"PyTorch without a GPU on a GPU machine does not fail:\n{out}")
        expect("NOT VERIFIED (skipped on this machine): notorch (workload: skipped: PyTorch is "
               "not installed)" in out, f"the skip is not listed as not verified:\n{out}")
        try:
            with open(results) as f:
                got = {x["sample"]: x["status"] for x in json.load(f)["results"]}
        except (OSError, ValueError) as e:
            got = repr(e)
        expect(got == {"hang": "FAIL", "crash": "FAIL", "nogpu": "FAIL", "notorch": "SKIP"},
               f"results.json: {got}")


def budget(build):
    """Every run hanging must not keep the table from being printed inside a GPU session's
    command limit: the run that reaches --budget is cut there, later ones are NOT RUN."""
    spec = {"samples": {n: {"argv": ["/bin/sleep", "60"], "checks": []} for n in ("h1", "h2")}}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "expectations.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        results = os.path.join(tmp, "results.json")
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "verify_samples.py"),
                            "--build", build, "--work", os.path.join(tmp, "work"),
                            "--samples", "h1,h2", "--modes", "continuous", "--repeat", "0",
                            "--require", "", "--run-timeout", "30", "--budget", "3",
                            "--expectations", path, "--json", results],
                           capture_output=True, text=True, timeout=50)
        secs = time.monotonic() - t0
        out = r.stdout + r.stderr
        expect(r.returncode == 1 and secs < 20,
               f"budget: exit {r.returncode} after {secs:.1f} s\n{out}")
        expect("NOT RUN (time budget of 3 s used up; see the seconds column): h2/continuous" in out
               and "exit status: 'timeout', expected 0 (killed after 3 s)" in out,
               f"budget: the cut runs are not named:\n{out}")
        try:
            with open(results) as f:
                got = {x["sample"]: x["status"] for x in json.load(f)["results"]}
        except (OSError, ValueError) as e:
            got = repr(e)
        expect(got == {"h1": "FAIL", "h2": "NOT RUN"}, f"budget: results.json: {got}")


def main():
    synthetic()
    workload_skips()
    overhead_runs()
    if len(sys.argv) > 1:
        real_run(os.path.abspath(sys.argv[1]))
        hang_and_skip(os.path.abspath(sys.argv[1]))
        budget(os.path.abspath(sys.argv[1]))
    for f in failures:
        print("FAIL:", f)
    print(f"test_verify: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

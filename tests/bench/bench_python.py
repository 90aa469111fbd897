#!/usr/bin/env python3
"""Benchmark (not a test): host time the agent adds per runtime allocation call made from
Python with 30 Python frames on the stack, and the stack table's memory per distinct Python
stack, on the simulated GPU. Numbers go to docs/PERFORMANCE.md.

    bench_python.py [--build DIR] [--python PY] [--repeats N] [--calls N] [--depth N]
                    [--distinct N] [--smoke]

Each configuration is a separate process (the agent reads its settings once, at cuInit) that
calls cudaMalloc and cudaFree of the simulated runtime through ctypes from exactly --depth
Python frames, timing batches of --batch back-to-back calls with time.perf_counter_ns (one
clock pair per batch). Configurations are interleaved (a b c ... a b c ...) so that drift in
the machine's speed hits all alike; per configuration the median over the runs of each run's
median batch is printed. Through ctypes.PyDLL the call keeps the GIL, so the agent merges the
Python frames; through ctypes.CDLL the GIL is released around the call and the agent keeps the
native stack (it reads Python frames only from a thread that holds the GIL).

Each run also checks, from the agent's summary, that the stack of its last allocation (kept
live) has exactly the Python frames that configuration should have, so a configuration that
silently measured something else cannot pass as a result. --smoke: one short run of each.
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ALLOC_BYTES = 256

# name: (ctypes loader, environment for the agent; None = no agent), in the printed order
CONFIGS = {
    "no_agent": ("pydll", None),
    "stacks_off": ("pydll", {"GPUPROF_STACKS": "off"}),
    "python_off": ("pydll", {"GPUPROF_STACK_PYTHON": "0"}),
    "python_on": ("pydll", {}),
    "cdll_stacks_off": ("cdll", {"GPUPROF_STACKS": "off"}),
    "cdll_python_off": ("cdll", {"GPUPROF_STACK_PYTHON": "0"}),
    "cdll_python_on": ("cdll", {}),
}


# ---- child: the measured process ----

def child(a):
    loader = ctypes.PyDLL if a.child == "pydll" else ctypes.CDLL
    rt = loader("libcudart.so.13")
    rt.cudaFree(None)  # initializes the runtime (and, under the agent, cuInit injects it)
    ptrs = [ctypes.c_void_p() for _ in range(a.batch)]
    refs = [ctypes.byref(p) for p in ptrs]
    size = ctypes.c_size_t(ALLOC_BYTES)
    malloc, free = rt.cudaMalloc, rt.cudaFree
    result = {}

    def measure():
        # The innermost frame: the calls below see exactly a.depth Python frames.
        n, f = 0, sys._getframe()
        while f:
            n, f = n + 1, f.f_back
        result["python_frames"] = n
        batches = max(1, a.calls // a.batch)
        allocs, frees = [], []
        for b in range(batches + 1):  # batch 0 warms up (interning the stack) and is dropped
            t0 = time.perf_counter_ns()
            for r in refs:
                malloc(r, size)
            t1 = time.perf_counter_ns()
            for p in ptrs:
                free(p)
            t2 = time.perf_counter_ns()
            if b:
                allocs.append((t1 - t0) / a.batch)
                frees.append((t2 - t1) / a.batch)
        result["alloc_ns"] = statistics.median(allocs)
        result["free_ns"] = statistics.median(frees)
        malloc(refs[0], size)  # kept live: its stack is in the summary's by_memory_in_use
        # Distinct stacks: one new function allocating per stack, called from here (same
        # prefix); the frees share one stack.
        for i in range(a.distinct):
            ns = {"malloc": malloc, "ref": refs[1], "size": size}
            exec(f"def site_{i}():\n    malloc(ref, size)\n", ns)
            ns[f"site_{i}"]()
            free(ptrs[1])
        with open("/proc/self/status") as f:
            result["rss_kib"] = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))

    def nest(k):
        if k:
            nest(k - 1)
        else:
            measure()

    nest(a.depth - 5)  # depth - 4 nest() frames + <module>, main(), child() and measure()
    print(json.dumps(result))


# ---- parent: runs and summarizes ----

def python_frames_of_kept(summary_path):
    """Python frames in the stack of the one live ALLOC_BYTES allocation, or None."""
    try:
        with open(summary_path) as f:
            s = json.load(f)
    except (OSError, ValueError):
        return None
    for e in s.get("stacks", {}).get("by_memory_in_use", []):
        if e.get("bytes") == ALLOC_BYTES and e.get("allocations") == 1:
            return sum(1 for fr in e["frames"] if "file" in fr)
    return None


def run_one(a, name, distinct=0):
    loader, agent_env = CONFIGS[name]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPUPROF_", "CUDA_INJECTION64_PATH"))}
    env["LD_LIBRARY_PATH"] = os.path.join(a.build, "fakegpu", "lib")
    tmp = tempfile.mkdtemp(prefix="bench_python.")
    summary = os.path.join(tmp, "summary.json")
    if agent_env is not None:
        env.update(agent_env)
        env["CUDA_INJECTION64_PATH"] = os.path.join(a.build, "lib", "libgpuprof.so")
        env["GPUPROF_OUTPUT_DIR"] = tmp
        env["GPUPROF_PROFILE_FILES"] = "0"
        env["GPUPROF_SUMMARY_FILE"] = summary
    cmd = [a.python, os.path.abspath(__file__), "--child", loader, "--depth", str(a.depth),
           "--calls", str(a.calls), "--batch", str(a.batch), "--distinct", str(distinct)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode:
        sys.exit(f"bench_python: {name} failed ({r.returncode}): {r.stderr.strip()}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if out["python_frames"] != a.depth:
        sys.exit(f"bench_python: {name}: {out['python_frames']} Python frames, not {a.depth}")
    if agent_env is not None:
        with open(summary) as f:
            out["table"] = json.load(f).get("stacks", {}).get("table", {})
        want = (a.depth if name == "python_on" else 0) if agent_env.get("GPUPROF_STACKS") != "off" \
            else None
        got = python_frames_of_kept(summary)
        if got != want:
            sys.exit(f"bench_python: {name}: the kept allocation's stack has {got} Python frames,"
                     f" expected {want}")
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    os.rmdir(tmp)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", choices=["pydll", "cdll"], help=argparse.SUPPRESS)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--python", default="/usr/bin/python3" if os.path.exists("/usr/bin/python3")
                    else sys.executable, help="the interpreter to measure (default Debian's)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20000, help="timed calls of each kind per run")
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--depth", type=int, default=30, help="Python frames at the call (>= 5)")
    ap.add_argument("--distinct", type=int, default=10000,
                    help="distinct Python stacks for the memory figure (0: skip)")
    ap.add_argument("--smoke", action="store_true", help="one short run of each configuration")
    a = ap.parse_args()
    if a.depth < 5:
        ap.error("--depth must be at least 5")
    if a.child:
        child(a)
        return 0
    a.build = os.path.abspath(a.build)
    if a.smoke:
        a.repeats, a.calls, a.distinct = 1, 1000, 100

    ver = subprocess.run([a.python, "-c", "import sys; print(sys.version.split()[0])"],
                         capture_output=True, text=True).stdout.strip()
    print(f"python: {a.python} ({ver}), {a.depth} Python frames at each call, "
          f"{a.calls} calls per run in batches of {a.batch}, {a.repeats} runs, build {a.build}",
          flush=True)
    runs = {name: [] for name in CONFIGS}
    for i in range(a.repeats):
        for name in CONFIGS:
            out = run_one(a, name)
            runs[name].append(out)
            print(f"  run {i + 1} {name:16} alloc {out['alloc_ns']:8.1f} ns  "
                  f"free {out['free_ns']:8.1f} ns", flush=True)

    med = {name: {k: statistics.median(r[k] for r in rs) for k in ("alloc_ns", "free_ns")}
           for name, rs in runs.items()}
    print("\nmedian over runs of each run's median, ns per call:")
    for name in CONFIGS:
        print(f"  {name:16} cudaMalloc {med[name]['alloc_ns']:8.1f}   "
              f"cudaFree {med[name]['free_ns']:8.1f}")
    print("differences, ns per call:")
    for what, x, y in [
            ("Python frames, GIL held (python_on - python_off)", "python_on", "python_off"),
            ("whole stack with Python (python_on - stacks_off)", "python_on", "stacks_off"),
            ("native stack only (python_off - stacks_off)", "python_off", "stacks_off"),
            ("GIL released, Python on vs off (cdll)", "cdll_python_on", "cdll_python_off"),
            ("GIL released, stack vs none (cdll)", "cdll_python_on", "cdll_stacks_off")]:
        print(f"  {what:50} cudaMalloc {med[x]['alloc_ns'] - med[y]['alloc_ns']:7.1f}   "
              f"cudaFree {med[x]['free_ns'] - med[y]['free_ns']:7.1f}")

    if a.distinct:
        base = run_one(a, "python_on", 0)
        more = run_one(a, "python_on", a.distinct)
        off = run_one(a, "python_off", a.distinct)
        ds = more["table"]["stacks"] - base["table"]["stacks"]
        table = (more["table"]["bytes"] - base["table"]["bytes"]) / max(ds, 1)
        print(f"\nstack table, {a.distinct} distinct Python stacks (one new function each, "
              f"same {a.depth}-frame prefix): {ds} new stacks, "
              f"{more['table']['nodes'] - base['table']['nodes']} new nodes, "
              f"{table:.1f} bytes per new stack")
        # Without Python frames the N call sites share one native stack; the RSS difference is
        # the stack table's growth plus the Python frame tables (names and files copied).
        rss = (more["rss_kib"] - off["rss_kib"]) * 1024 / a.distinct
        print(f"process RSS, python_on - python_off after the same {a.distinct} distinct stacks: "
              f"{rss:.0f} bytes per stack (stack table {table:.0f}, Python frame tables and "
              f"malloc overhead the rest; RSS is page-granular and noisy)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Runs one stack test program under the agent and compares the summary's symbolized stacks
with the chains the program is known to have, frame for frame.

Usage (from ctest; tests/lib/GpuprofTest.cmake sets the agent's environment):
    check_stacks.py --case NAME -- PROGRAM [ARGS...]

Stacks in the summary are leaf first. A chain is compared up to and including the outermost
frame the program itself names (main, or the Python <module>); frames beyond it must belong to
the C library (thread start, libc start).
"""

import argparse
import json
import os
import subprocess
import sys

AGENT_MODULES = ("libgpuprof.so", "libcupti.so", "libcuda.so")
KERNEL_NS = 2000  # the simulator's duration for a 1x32-thread launch without shared memory


class Check:
    def __init__(self):
        self.failures = []

    def eq(self, what, got, want):
        if got != want:
            self.failures.append(f"{what}: got {got!r}, expected {want!r}")

    def true(self, what, cond):
        if not cond:
            self.failures.append(what)


def functions(entry):
    return [f.get("function", f.get("kernel")) for f in entry["frames"] if "kernel" not in f]


def native_chain(entry, until):
    """The function names up to and including `until`; the rest must be the C library's."""
    names = functions(entry)
    if until not in names:
        return names, []
    i = names.index(until) + 1
    return names[:i], entry["frames"][len(entry["frames"]) - len(names) + i:]


def find(entries, key, value):
    return [e for e in entries if e.get(key) == value]


def no_agent_frames(c, stacks):
    for section in ("by_kernel_time", "by_memory_in_use", "by_memcpy_bytes"):
        for e in stacks[section]:
            for f in e["frames"]:
                mod = f.get("module", "")
                c.true(f"{section}: agent/driver frame {f} in stack {e['stack']}",
                       not mod.startswith(AGENT_MODULES))


def expect_chain(c, stacks, section, key, value, chain, until="main", tail_libc=True, **counts):
    entries = find(stacks[section], key, value) if key else stacks[section]
    entries = [e for e in entries if native_chain(e, until)[0] == chain]
    c.eq(f"{section} entries for {value} with chain {chain}", len(entries), 1)
    if len(entries) != 1:
        return None
    e = entries[0]
    _, tail = native_chain(e, until)
    if tail_libc:
        for f in tail:
            c.true(f"{section} {value}: frame {f} beyond {until} is not the C library's",
                   f.get("module", "").startswith(("libc.so", "ld-linux")) or f.get("function") == "_start")
    for k, v in counts.items():
        c.eq(f"{section} {value} {k}", e[k], v)
    return e


# Kernels launched from frames without unwind information (stacks_nounwind.c) -> their leaf.
BAD_FRAMES = [("stk_kernel_nounwind", "stk_nounwind_launch", "main")] + [
    (k, "stk_bad_fp_launch", "stk_bad_frames")
    for k in ("stk_kernel_corrupt", "stk_kernel_fp_prot_none", "stk_kernel_fp_chain",
              "stk_kernel_fp_noncanonical", "stk_kernel_fp_loop")]
N_KERNELS = 8 + len(BAD_FRAMES)  # 3 path, 1 recursion, 3 threads, 1 plugin


def case_native(c, s, alloc_only=False):
    st = s["stacks"]
    no_agent_frames(c, st)
    path = ["stk_path_leaf", "stk_path_mid", "stk_path_top", "main"]
    rec = ["stk_recurse"] * 4 + ["main"]
    plug = ["stk_plugin_inner", "stk_plugin_entry", "stk_call_plugin", "main"]
    thr = ["stk_thread_work", "stk_thread_main"]
    if alloc_only:
        c.eq("policy", st["policy"], "alloc")
        c.eq("kernels with a stack", st["by_kernel_time"], [])
        c.eq("kernels without a stack", st["kernels_without_stack"]["launches"], N_KERNELS)
    else:
        c.eq("policy", st["policy"], "all")
        expect_chain(c, st, "by_kernel_time", "kernel", "stk_kernel_path", path,
                     launches=3, sampled=3, gpu_time_ns=3 * KERNEL_NS)
        expect_chain(c, st, "by_kernel_time", "kernel", "stk_kernel_recurse", rec,
                     launches=1, gpu_time_ns=KERNEL_NS)
        e = expect_chain(c, st, "by_kernel_time", "kernel", "stk_kernel_plugin", plug, launches=1)
        if e:
            c.eq("plugin frame module", e["frames"][1].get("module"), "libstacks_plugin.so")
            c.eq("synthetic kernel leaf", e["frames"][0], {"kernel": "stk_kernel_plugin"})
        # All three threads share one stack: same call sites.
        expect_chain(c, st, "by_kernel_time", "kernel", "stk_kernel_thread", thr,
                     until="stk_thread_main", launches=3)
        # Frames libunwind cannot step through end the stack, or (a frame pointer that happens
        # to be right) continue with the real caller; never with garbage frames.
        for kernel, leaf, caller in BAD_FRAMES:
            es = find(st["by_kernel_time"], "kernel", kernel)
            c.eq(f"{kernel} entries", len(es), 1)
            if es:
                names = functions(es[0])
                c.true(f"{kernel}: chain {names} does not start at {leaf}",
                       names[:1] == [leaf])
                c.true(f"{kernel}: chain {names} continues wrongly",
                       names[1:] == [] or native_chain(es[0], "main")[0][1:] in ([caller], [caller, "main"]))
                c.eq(f"{kernel} launches", es[0]["launches"], 1)
        c.eq("kernels without a stack", st["kernels_without_stack"]["launches"], 0)
    expect_chain(c, st, "by_memory_in_use", None, None, plug, bytes=2 << 20, allocations=1)
    expect_chain(c, st, "by_memory_in_use", None, None, rec, bytes=1 << 20, allocations=1)
    c.eq("memory stacks", len(st["by_memory_in_use"]), 2)
    expect_chain(c, st, "by_memcpy_bytes", None, None, thr, until="stk_thread_main",
                 bytes=3 * 4096, count=3)
    t = st["table"]
    c.true(f"table stats {t}", t["stacks"] >= 5 and t["nodes"] >= t["stacks"] and t["drops"] == 0
           and 0 < t["bytes"] <= t["max_bytes"])


def case_gpu_only(c, s):
    c.true("GPUPROF_GPU_ONLY=1 must write no stacks section", "stacks" not in s)
    c.eq("kernels still counted", s["kernels"]["count"], N_KERNELS)


def case_cpp(c, s):
    st = s["stacks"]
    no_agent_frames(c, st)
    expect_chain(c, st, "by_kernel_time", "kernel", "void stk::kernel<float>(float*, int)",
                 ["stk::model::Layer<float>::forward(int)", "stk::run_model()", "main"],
                 launches=4)
    expect_chain(c, st, "by_kernel_time", "kernel", "stk_kernel_lambda",
                 ["stk::run_lambda(CUfunc_st*)::{lambda()#1}::operator()() const",
                  "stk::run_lambda(CUfunc_st*)", "main"], launches=2)
    expect_chain(c, st, "by_memory_in_use", None, None,
                 ["unsigned long long stk::allocate_for<double>(unsigned long)", "main"],
                 bytes=8000, allocations=1)


def case_sampling(c, s):
    st = s["stacks"]
    truth = {"stk_sample_a": 8000, "stk_sample_b": 4000, "stk_sample_c": 4000}
    c.eq("policy", st["policy"], "sampled")
    c.eq("sample period", st["sample_every"], 16)
    got, sampled = {}, 0
    for e in st["by_kernel_time"]:
        names = functions(e)
        c.eq("sampled chain leaf", names[:1], ["stk_sample_launch"])
        got[names[1]] = got.get(names[1], 0) + e["launches"]
        sampled += e["sampled"]
        c.eq("weight", e["launches"], 16 * e["sampled"])
    # Every launch is either sampled or counted without a stack.
    c.eq("sampled + unsampled", sampled + st["kernels_without_stack"]["launches"], 16000)
    # 1-in-16 of 16000: ~250 samples for B and C, so one standard deviation is ~6% of their
    # count; 20% is over three. The seed is fixed, so this is deterministic anyway.
    for name, want in truth.items():
        est = got.get(name, 0)
        c.true(f"{name}: weighted launches {est} not within 20% of {want}",
               abs(est - want) <= 0.2 * want)


def case_python(c, s):
    st = s["stacks"]
    no_agent_frames(c, st)

    def py_chain(entry):
        return [f["function"] for f in entry["frames"] if "file" in f]

    def check_py(section, key, value, chain, **counts):
        es = [e for e in (find(st[section], key, value) if key else st[section])
              if py_chain(e) == chain]
        c.eq(f"{section} {value} entries with Python chain {chain}", len(es), 1)
        if len(es) != 1:
            return
        e = es[0]
        frames = [f for f in e["frames"] if "kernel" not in f]
        first_py = next(i for i, f in enumerate(frames) if "file" in f)
        # Leaf side: only ctypes/libffi frames between the driver call and the Python code.
        for f in frames[:first_py]:
            c.true(f"{section} {value}: unexpected leaf frame {f}",
                   f.get("module", "").startswith(("libffi", "_ctypes")))
        for f in frames[first_py:first_py + len(chain)]:
            c.true(f"{section} {value}: frame {f} is not from stacks_python.py",
                   f["file"].endswith("stacks_python.py") and f["line"] > 0)
        for k, v in counts.items():
            c.eq(f"{section} {value} {k}", e[k], v)

    check_py("by_kernel_time", "kernel", "py_model_kernel",
             ["launch", "Model.forward", "main", "<module>"], launches=2)
    check_py("by_kernel_time", "kernel", "py_nested_kernel",
             ["launch", "py_inner_step", "py_outer_step", "main", "<module>"], launches=1)
    check_py("by_memory_in_use", None, None, ["Model.__init__", "main", "<module>"],
             bytes=3 << 20, allocations=1)


def case_python_subinterp(c, s):
    st = s["stacks"]
    no_agent_frames(c, st)
    released = find(st["by_kernel_time"], "kernel", "py_released_kernel")
    c.eq("py_released_kernel entries", len(released), 1)
    for e in released:
        c.eq("py_released_kernel launches", e["launches"], 1)
        c.eq("py_released_kernel: Python frames of a thread without the GIL",
             [f for f in e["frames"] if "file" in f], [])
    held = find(st["by_kernel_time"], "kernel", "py_held_kernel")
    c.eq("py_held_kernel entries", len(held), 1)
    for e in held:
        c.eq("py_held_kernel Python chain",
             [f["function"] for f in e["frames"] if "file" in f],
             ["launch", "launch_with_gil", "main", "<module>"])


def case_python_gc(c, s):
    # The program itself fails when a collection ran inside a driver call; the Python frames
    # must still be merged with the collector paused.
    st = s["stacks"]
    es = find(st["by_kernel_time"], "kernel", "py_gc_kernel")
    c.eq("py_gc_kernel entries", len(es), 1)
    for e in es:
        c.eq("py_gc_kernel Python chain", [f["function"] for f in e["frames"] if "file" in f],
             ["gc_launch", "main", "<module>"])


def case_fakepy(c, s, free_threaded=False):
    st = s["stacks"]
    es = find(st["by_kernel_time"], "kernel", "stk_kernel_fakepy")
    c.eq("stk_kernel_fakepy entries", len(es), 1)
    for e in es:
        got = [(f["function"], f["file"], f["line"]) for f in e["frames"] if "file" in f]
        c.eq("stk_kernel_fakepy Python frames", got,
             [] if free_threaded else [("fake_python_function", "fake.py", 7)])


CASES = {
    "native": case_native,
    "native_alloc": lambda c, s: case_native(c, s, alloc_only=True),
    "native_fast": case_native,
    "gpu_only": case_gpu_only,
    "cpp": case_cpp,
    "sampling": case_sampling,
    "python": case_python,
    "python_subinterp": case_python_subinterp,
    "python_gc": case_python_gc,
    "fakepy": case_fakepy,
    "fakepy_free_threaded": lambda c, s: case_fakepy(c, s, free_threaded=True),
    "fakepy_unsupported": lambda c, s: case_fakepy(c, s, free_threaded=True),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("argv", nargs="+")
    args = ap.parse_args()
    path = os.environ["GPUPROF_SUMMARY_FILE"]
    if os.path.exists(path):
        os.unlink(path)
    proc = subprocess.run(args.argv, capture_output=True, text=True, timeout=60)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        print(f"check_stacks: {args.argv[0]} exited with {proc.returncode}")
        return 1
    with open(path) as f:
        summary = json.load(f)
    c = Check()
    CASES[args.case](c, summary)
    for msg in c.failures:
        print(f"check_stacks: {args.case}: {msg}")
    if c.failures:
        print(json.dumps(summary.get("stacks"), indent=1))
        return 1
    print(f"check_stacks: {args.case}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

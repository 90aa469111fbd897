#!/usr/bin/env python3
"""Runs nested_prog under the agent (one nesting mode, from the environment) and checks exact
values that must not depend on the mode: the summary's kernels, copies, sets, memory, API and
join counts and stacks; the trace's API slices (only the user's calls, strictly nested), GPU
slices and flows; the capture's profiles by leaf."""

import argparse
import collections
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "capture"))
import check_capture as cc  # noqa: E402

MIB = 1024 * 1024
SCALE, REDUCE, STEP = "_Z5scalePf", "_Z6reducePf", "_Z4stepPf"
NS = {SCALE: 5000, REDUCE: 20000, STEP: 3000}
# Demangled (binutils' c++filt, written out), as the summary's "demangled", its stacks, the
# profiles and the trace's kernel slices name them.
DEMANGLED = {SCALE: "scale(float*)", REDUCE: "reduce(float*)", STEP: "step(float*)"}


def t_copy(n, bw=12):
    return 1500 + n // bw


def t_set(n):
    return 1000 + n // 1000


# What nested_prog did, call by call (tests/nested/nested_prog.c).
KERNELS = {SCALE: (3, {"__cudaLaunchKernel": 3}), REDUCE: (2, {"cudaLaunchKernel": 2}),
           STEP: (2, {"cudaGraphLaunch": 2})}
MEMCPY = {"HtoD": {"count": 1, "bytes": 65536, "gpu_time_ns": t_copy(65536)},
          "DtoH": {"count": 1, "bytes": 65536, "gpu_time_ns": t_copy(65536)}}
MEMSET = {"count": 2, "bytes": 4096 + 8192, "gpu_time_ns": t_set(4096) + t_set(8192)}
# Traced API calls (cupti/cbids.c): 2 cudaMalloc, 2 cudaMemcpy, cudaMemset, cudaMemsetAsync,
# 3 + 1 (while capturing) __cudaLaunchKernel, 2 cudaLaunchKernel, cudaGraphInstantiate,
# 2 cudaGraphLaunch, cudaStreamSynchronize, cudaFree, cudaDeviceSynchronize.
API_SLICES = collections.Counter({
    ("main", "cudaMalloc"): 2, ("main", "cudaMemcpy"): 2, ("main", "cudaMemset"): 1,
    ("main", "cudaMemsetAsync"): 1, ("main", "__cudaLaunchKernel"): 4,
    ("main", "cudaLaunchKernel"): 2, ("main", "cudaGraphInstantiate"): 1,
    ("main", "cudaGraphLaunch"): 2,
    ("main", "cudaStreamSynchronize"): 1, ("main", "cudaFree"): 1,
    ("main", "cudaDeviceSynchronize"): 1,
})
FLOWS = collections.Counter({
    ("main", "__cudaLaunchKernel", "stream 13", DEMANGLED[SCALE]): 3,
    ("main", "cudaLaunchKernel", "stream 13", DEMANGLED[REDUCE]): 2,
    ("main", "cudaMemcpy", "stream 7", "Memcpy HtoD"): 1,
    ("main", "cudaMemcpy", "stream 7", "Memcpy DtoH"): 1,
})
GPU = collections.Counter({
    ("stream 13", DEMANGLED[SCALE], 5000): 3, ("stream 13", DEMANGLED[REDUCE], 20000): 2,
    ("stream 13", DEMANGLED[STEP], 3000): 2,
    ("stream 7", "Memcpy HtoD", t_copy(65536)): 1, ("stream 7", "Memcpy DtoH", t_copy(65536)): 1,
    ("stream 7", "Memset", t_set(4096)): 1, ("stream 13", "Memset", t_set(8192)): 1,
})
# The leaf function of the user's code under each kernel / copy / allocation (step's stack is
# that of its launch while capturing or that of cudaGraphLaunch: both in run_graph).
KERNEL_SITE = {"scale(float*)": "run_kernels", "reduce(float*)": "run_kernels",
               "step(float*)": "run_graph"}


def frames_have(frames, fn):
    return any(fn == (f.get("function") if isinstance(f, dict) else f) or
               fn in str(f) for f in frames)


def check_summary(dump):
    s = cc.summary()
    if dump:
        import json
        print(json.dumps({k: s.get(k) for k in ("kernels", "memcpy", "memset", "memory", "api",
                                                 "joins", "stacks", "losses")}, indent=1))
    k = s.get("kernels", {})
    got = {e["name"]: (e.get("demangled"), e["count"], e["gpu_time_ns"], e["apis"])
           for e in k.get("by_name", [])}
    want = {n: (DEMANGLED[n], c, c * NS[n], apis) for n, (c, apis) in KERNELS.items()}
    cc.check(got == want, f"kernels {got}, expected {want}")
    cc.check(s.get("memcpy") == MEMCPY, f"memcpy {s.get('memcpy')}, expected {MEMCPY}")
    cc.check(s.get("memset") == MEMSET, f"memset {s.get('memset')}, expected {MEMSET}")
    mem = [m for m in s.get("memory", []) if m.get("device") == 0]
    cc.check(len(mem) == 1 and mem[0].get("allocs") == 2 and mem[0].get("frees") == 1 and
             mem[0].get("bytes_allocated") == MIB + 65536 and mem[0].get("in_use") == MIB,
             f"memory {s.get('memory')}")
    # One API call per user call, all runtime; every device record joined to a runtime call.
    cc.check(s.get("api", {}).get("driver") == 0, f"api {s.get('api')}: driver calls counted")
    cc.check(s.get("api", {}).get("runtime") == sum(API_SLICES.values()),
             f"api {s.get('api')}, expected runtime {sum(API_SLICES.values())}")
    joins = {"runtime": 7 + 2 + 2 + 3, "driver": 0, "unknown": 0}
    cc.check(s.get("joins") == joins, f"joins {s.get('joins')}, expected {joins}")
    st = s.get("stacks", {})
    by_kernel = collections.Counter()
    for e in st.get("by_kernel_time", []):
        name = e.get("kernel", "")
        fn = KERNEL_SITE.get(name)
        by_kernel[name] += e.get("launches", 0)
        cc.check(fn is not None and frames_have(e.get("frames", []), fn),
                 f"kernel {name} stack without {fn}: {e.get('frames')}")
    want = {DEMANGLED[n]: c for n, (c, _) in KERNELS.items()}
    cc.check(by_kernel == want, f"launches by stack {dict(by_kernel)}, expected {want}")
    cc.check(st.get("kernels_without_stack", {}).get("launches") == 0,
             f"kernels without stack {st.get('kernels_without_stack')}")
    inuse = st.get("by_memory_in_use", [])
    cc.check(len(inuse) == 1 and inuse[0].get("bytes") == MIB and
             inuse[0].get("allocations") == 1 and frames_have(inuse[0].get("frames", []),
                                                             "alloc_buffers"),
             f"memory in use by stack {inuse}")
    copies = sorted((e.get("bytes"), e.get("count"),
                     "copy_in" if frames_have(e.get("frames", []), "copy_in") else
                     "copy_out" if frames_have(e.get("frames", []), "copy_out") else "?")
                    for e in st.get("by_memcpy_bytes", []))
    cc.check(copies == [(65536, 1, "copy_in"), (65536, 1, "copy_out")],
             f"memcpy by stack {copies}")


def check_trace(dump):
    path = cc.one_trace(".json")
    if not path or cc.validate(path) is None:
        return
    c = cc.content_json(path)
    if dump:
        print("api", dict(c["api"]), "\nflows", dict(c["flows"]), "\ngpu", dict(c["gpu"]))
    cc.check(c["api"] == API_SLICES, f"API slices: missing {dict(API_SLICES - c['api'])}, "
             f"extra {dict(c['api'] - API_SLICES)}")
    cc.check(c["flows"] == FLOWS, f"flows: missing {dict(FLOWS - c['flows'])}, "
             f"extra {dict(c['flows'] - FLOWS)}")
    cc.check(c["gpu"] == GPU, f"GPU slices: missing {dict(GPU - c['gpu'])}, "
             f"extra {dict(c['gpu'] - GPU)}")
    # API slices of one thread are strictly nested: disjoint, or one inside the other.
    pid = c["doc"]["metadata"]["pid"]
    by_tid = collections.defaultdict(list)
    for e in c["events"]:
        if e.get("ph") == "X" and e["pid"] == pid:
            by_tid[e["tid"]].append((cc.ns_of(e["ts"]), cc.ns_of(e["ts"]) + cc.ns_of(e["dur"]),
                                     e["name"]))
    for tid, sl in by_tid.items():
        sl.sort()
        open_ = []
        for b, e, n in sl:
            while open_ and open_[-1][1] <= b:
                open_.pop()
            cc.check(not open_ or e <= open_[-1][1],
                     f"thread {tid}: API slice {n} [{b},{e}] overlaps {open_[-1] if open_ else ''}")
            open_.append((b, e, n))
    leaf = {
        "gpu_time": {f"[gpu] {DEMANGLED[SCALE]}": [3, 15000],
                     f"[gpu] {DEMANGLED[REDUCE]}": [2, 40000],
                     f"[gpu] {DEMANGLED[STEP]}": [2, 6000]},
        "memcpy": {"[gpu] memcpy HtoD": [1, cc.COPY_NS, 65536],
                   "[gpu] memcpy DtoH": [1, cc.COPY_NS, 65536],
                   "[gpu] memset": [2, t_set(4096) + t_set(8192), 4096 + 8192]},
    }
    cc.check_pprof_values(path, cc.PROFILE_KINDS, leaf, path,
                          memory={"cudaMalloc": [2, MIB + 65536, 1, MIB]})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prog", required=True)
    ap.add_argument("--dump", action="store_true")
    a = ap.parse_args()
    rc, out, err = cc.run([], a.prog, {})
    cc.check(rc == 0 and "nested_prog: done" in out, f"program exited {rc}: {out!r}")
    check_summary(a.dump)
    check_trace(a.dump)
    mode = os.environ.get("FAKEGPU_NESTED", "") or "none"
    if cc.failures:
        print(f"nested ({mode}): {len(cc.failures)} checks failed", file=sys.stderr)
        return 1
    print(f"nested ({mode}): all checks passed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

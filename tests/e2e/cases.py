"""Expectations of the end-to-end cases: what each program caused, as exact summary values.

Every number here follows from the program's source (tests/e2e/*.c, *.cu): sizes it copied,
launches it made, durations it set through fakegpu_set_kernel_duration_ns or FAKEGPU_KERNEL_NS
(the simulator's kernel durations are exact). Ids the simulator picks (contexts, streams) are
V(...) bindings: the checks still require that each id is used consistently and that distinct
objects have distinct ids.

Two counters depend on what the agent traces (cupti/cbids.c):
  api.{runtime,driver}  calls of the traced APIs (launches, graph launches, allocations, frees,
                        VMM reserve/map/unmap/free/retain, pools, copies, sets, synchronizations);
                        not cuInit, context/stream/module management, cuMemSetAccess, ...
  joins.*               device events joined to their API call: kernels, copies, memsets and
                        the MEMORY2 allocation/release records (the simulator writes those for
                        cuMemAlloc*/cuMemFree*, pinned and stream-ordered memory, not for VMM).
"""

import json
import re
import os

from expect import Unordered, V

MIB = 1024 * 1024
LOSSES_NONE = {
    "cupti_dropped_records": 0, "zero_timestamps": 0, "invalid_records": 0,
    "unknown_correlation": 0, "unknown_frees": 0, "buffer_pool_exhausted": 0,
    "lost_buffers": 0, "exit_incomplete": False,
}


class Case:
    def __init__(self, check, rc=0):
        self.check = check
        self.rc = rc


CASES = {}


def case(name, rc=0):
    def register(fn):
        CASES[name] = Case(fn, rc)
        return fn
    return register


# ---- shared checks ----

def summary_header(f, run, state="active", window=True):
    """The summary exists, is version 1, names the program's pid and the expected state, and its
    window lies inside the run on the CUPTI clock (CLOCK_REALTIME ns)."""
    s = run.summary
    if not f.check(s is not None, "the agent run wrote no summary"):
        return None
    f.eq("summary.version", s.get("version"), 1)
    f.eq("summary.pid (the program's pid)", s.get("pid"), run.pid)
    f.eq("summary.state", s.get("state"), state)
    if state == "active":
        f.eq("summary.inactive_reason", s.get("inactive_reason"), "")
    if state == "active" and window:
        w = s.get("window", {})
        start, end = w.get("start_ns", 0), w.get("end_ns", 0)
        # The program ran between the runner's two clock reads; 10 s of slack for simulated
        # GPU work queued ahead of the host clock. This checks the clock domain, not speed.
        f.check(run.t_start_ns <= start <= end <= run.t_end_ns + 10 * 10**9,
                f"summary.window {w} is not inside the run [{run.t_start_ns}, {run.t_end_ns}] "
                f"on CLOCK_REALTIME")
    return s


def consistency(f, s):
    """Totals that must agree with their breakdowns in any active summary."""
    k = s.get("kernels", {})
    by_name = k.get("by_name", [])
    f.eq("kernels.count == sum of by_name counts", k.get("count"),
         sum(e.get("count", 0) for e in by_name))
    f.eq("kernels.gpu_time_ns == sum of by_name gpu_time_ns", k.get("gpu_time_ns"),
         sum(e.get("gpu_time_ns", 0) for e in by_name))
    order = [(-e.get("gpu_time_ns", 0), e.get("name", "")) for e in by_name]
    f.check(order == sorted(order), "kernels.by_name is sorted by gpu_time_ns desc, then name")
    for e in by_name:
        f.eq(f"sum of apis of {e.get('name')}", sum(e.get("apis", {}).values()), e.get("count"))
    streams = s.get("streams", [])
    f.eq("sum of streams[].kernels", sum(x.get("kernels", 0) for x in streams), k.get("count"))
    f.eq("sum of streams[].memcpys", sum(x.get("memcpys", 0) for x in streams),
         sum(m.get("count", 0) for m in s.get("memcpy", {}).values()))
    f.eq("sum of streams[].memsets", sum(x.get("memsets", 0) for x in streams),
         s.get("memset", {}).get("count", 0))
    for m in s.get("memory", []):
        f.eq(f"memory device {m.get('device')}: in_use == bytes_allocated - bytes_freed",
             m.get("in_use"), m.get("bytes_allocated", 0) - m.get("bytes_freed", 0))
        f.eq(f"memory device {m.get('device')}: sum of by_kind == bytes_allocated",
             sum(m.get("by_kind", {}).values()), m.get("bytes_allocated"))


def no_agent_lines(f, run):
    f.eq("gpuprof lines on stderr (none expected at the default log level)", run.agent_lines, [])


# The summary's "demangled" of each mangled kernel name the programs use, from binutils'
# c++filt (run once; written out so that the check does not demangle with the agent's code).
DEMANGLED = {
    "_ZN3ops4gemmIfEEvPT_i": "void ops::gemm<float>(float*, int)",
    "_Z6addOnePfi": "addOne(float*, int)",
    "_Z6workerPfi": "worker(float*, int)",
    "_Z8consumerPf": "consumer(float*)",
    "_Z9transformPf": "transform(float*)",
    "_Z8producerPf": "producer(float*)",
    "_Z5smallPf": "small(float*)",
    "_Z5stormv": "storm()",
    "_Z6wrap_av": "wrap_a()",
    "_Z6wrap_bv": "wrap_b()",
    "_Z9afterForkv": "afterFork()",
    "_Z10beforeForkv": "beforeFork()",
    "_Z4stepv": "step()",
}


def kernel(name, count, ns_each, apis, streams, devices=(0,)):
    """A kernels.by_name entry: "demangled" only for a mangled name (DEMANGLED must know it)."""
    k = {"name": name}
    if name.startswith("_Z"):
        k["demangled"] = DEMANGLED[name]
    k.update({"count": count, "gpu_time_ns": count * ns_each, "apis": apis,
              "devices": list(devices), "streams": streams})
    return k


# The simulator's copy and set timing (tests/fakegpu/driver_exec.c): a fixed latency plus
# bytes / bandwidth in bytes per ns, per direction and host memory kind.
BW_PAGEABLE, BW_PINNED, BW_DTOD, BW_PTOP = 12, 25, 1000, 50


def t_copy(nbytes, bw):
    return 1500 + nbytes // bw


def t_set(nbytes):
    return 1000 + nbytes // 1000


def copy(*ops):
    """A memcpy direction or the memset bucket from its operations' (bytes, ns) pairs."""
    return {"count": len(ops), "bytes": sum(b for b, _ in ops), "gpu_time_ns": sum(t for _, t in ops)}


def hd(nbytes, bw=BW_PAGEABLE):
    return (nbytes, t_copy(nbytes, bw))


def dd(nbytes, bw=BW_DTOD):
    return (nbytes, t_copy(nbytes, bw))


def setop(nbytes):
    return (nbytes, t_set(nbytes))


NO_MEMSET = {"count": 0, "bytes": 0, "gpu_time_ns": 0}


def mem(device, allocs, nbytes, peak, by_kind, frees=None, freed=None):
    frees = allocs if frees is None else frees
    freed = nbytes if freed is None else freed
    return {"device": device, "allocs": allocs, "frees": frees, "bytes_allocated": nbytes,
            "bytes_freed": freed, "in_use": nbytes - freed, "peak_in_use": peak,
            "by_kind": by_kind}


def capture(f, run, kernels, streams, memcpy, memset, memory, joins, api, state="active",
            losses=None):
    """The common shape of a capture case: header, consistency and the exact sections."""
    s = summary_header(f, run, state)
    if s is None:
        return None, None
    consistency(f, s)
    total = sum(k["count"] for k in kernels)
    f.eq("kernels.count", s.get("kernels", {}).get("count"), total)
    f.eq("kernels.gpu_time_ns", s.get("kernels", {}).get("gpu_time_ns"),
         sum(k["gpu_time_ns"] for k in kernels))
    # One match for both, streams first: their counts pin the simulator's ids down, and the
    # kernels' [device, context, stream] triples must then use the same ids.
    b = f.match("streams and kernels.by_name",
                {"streams": s.get("streams"), "by_name": s.get("kernels", {}).get("by_name")},
                {"streams": Unordered(streams), "by_name": kernels})
    f.match("memcpy", s.get("memcpy"), memcpy)
    f.match("memset", s.get("memset"), memset)
    f.match("memory", s.get("memory"), Unordered(memory))
    f.match("joins", s.get("joins"), joins)
    f.match("api", s.get("api"), api)
    f.match("losses", s.get("losses"), LOSSES_NONE if losses is None else losses)
    no_agent_lines(f, run)
    return s, b


# ---- capture cases ----

@case("driver_basic")
def _(f, run, env):
    ctx = V("ctx:c")
    s1, s2, null = V("stream:s1"), V("stream:s2"), V("stream:null")
    kernels = [
        kernel("_ZN3ops4gemmIfEEvPT_i", 5, 120000, {"cuLaunchKernel": 5},
               Unordered([[0, ctx, s2], [0, ctx, null]])),
        kernel("scale_kernel", 5, 5000, {"cuLaunchKernel": 5},
               Unordered([[0, ctx, s1], [0, ctx, s2]])),
    ]
    streams = [
        {"device": 0, "context": ctx, "stream": s1, "kernels": 3, "memcpys": 2, "memsets": 0},
        {"device": 0, "context": ctx, "stream": s2, "kernels": 6, "memcpys": 1, "memsets": 1},
        {"device": 0, "context": ctx, "stream": null, "kernels": 1, "memcpys": 5, "memsets": 1},
    ]
    memcpy = {"HtoD": copy(hd(MIB), hd(4096), hd(65536)),
              "DtoH": copy(hd(MIB), hd(12288), hd(65536)),
              "DtoD": copy(dd(8192), dd(16384))}
    memory = [mem(0, 4, 2 * MIB + 65536 + 32768, 2 * MIB + 65536,
                  {"device": 2 * MIB + 65536 + 32768})]
    # Joins: 10 kernels + 8 copies + 2 memsets + 8 memory records (4 allocs, 4 frees).
    # API calls: 4 allocs, 4 frees, 8 copies, 2 memsets, 10 launches, 4 cuStreamSynchronize,
    # 1 cuCtxSynchronize.
    capture(f, run, kernels, streams, memcpy, copy(setop(1000), setop(1024)), memory,
            {"runtime": 0, "driver": 28, "unknown": 0}, {"runtime": 0, "driver": 33})


@case("runtime_basic")
def _(f, run, env):
    ctx = V("ctx:c")
    s1, s2, null = V("stream:s1"), V("stream:s2"), V("stream:null")
    kernels = [
        kernel("_ZN3ops4gemmIfEEvPT_i", 2, 90000, {"__cudaLaunchKernel": 2}, [[0, ctx, null]]),
        kernel("_Z6addOnePfi", 4, 7000, {"__cudaLaunchKernel": 3, "cudaLaunchKernel": 1},
               Unordered([[0, ctx, s1], [0, ctx, s2]])),
        kernel("fill_kernel", 2, 3000, {"__cudaLaunchKernel": 2}, [[0, ctx, s1]]),
    ]
    streams = [
        {"device": 0, "context": ctx, "stream": s1, "kernels": 3, "memcpys": 1, "memsets": 0},
        {"device": 0, "context": ctx, "stream": s2, "kernels": 3, "memcpys": 1, "memsets": 1},
        {"device": 0, "context": ctx, "stream": null, "kernels": 2, "memcpys": 3, "memsets": 1},
    ]
    # The async copies use pinned host memory, the sync ones pageable.
    memcpy = {"HtoD": copy(hd(MIB), hd(65536, BW_PINNED)),
              "DtoH": copy(hd(65536, BW_PINNED), hd(MIB)), "DtoD": copy(dd(4096))}
    device_bytes = MIB + 256 * 1024 + 4096
    memory = [
        mem(0, 4, device_bytes + 131072, device_bytes + 131072,
            {"device": device_bytes, "async": 131072}),
        mem(-1, 1, 65536, 65536, {"pinned": 65536}),
    ]
    # Joins, all to runtime calls (the runtime double reaches the driver internally, without
    # DRIVER callbacks, as the real libcudart does): 8 kernels + 5 copies + 2 memsets +
    # 10 memory records (3 cudaMalloc, 1 cudaMallocHost, 1 cudaMallocAsync and their frees).
    # API calls: 3 cudaMalloc, 1 cudaMallocHost, 3 cudaMemcpy, 2 cudaMemcpyAsync,
    # 4 cudaStreamSynchronize, 1 cudaMemset, 1 cudaMemsetAsync, 8 launches,
    # 1 cudaDeviceSynchronize, 1 cudaMallocAsync, 1 cudaFreeAsync, 3 cudaFree, 1 cudaFreeHost.
    capture(f, run, kernels, streams, memcpy, copy(setop(4096), setop(8192)), memory,
            {"runtime": 25, "driver": 0, "unknown": 0}, {"runtime": 30, "driver": 0})


@case("multi")
def _(f, run, env):
    c0, c1 = V("ctx:c0"), V("ctx:c1")
    # Stream ids are unique within a context only: one V namespace per context.
    thread_streams = [V(f"stream{i % 2}:t{i}") for i in range(8)]
    peer, null0, null1 = V("stream0:peer"), V("stream0:null"), V("stream1:null")
    ctx = [c0, c1]
    kernels = [
        kernel("_Z6workerPfi", 188, 1500, {"cuLaunchKernel": 188},
               Unordered([[i % 2, ctx[i % 2], thread_streams[i]] for i in range(8)]),
               devices=(0, 1)),
    ]
    streams = [{"device": i % 2, "context": ctx[i % 2], "stream": thread_streams[i],
                "kernels": 20 + i, "memcpys": 0, "memsets": 0} for i in range(8)]
    streams += [
        {"device": 0, "context": c0, "stream": peer, "kernels": 0, "memcpys": 1, "memsets": 0},
        {"device": 0, "context": c0, "stream": null0, "kernels": 0, "memcpys": 1, "memsets": 0},
        {"device": 1, "context": c1, "stream": null1, "kernels": 0, "memcpys": 1, "memsets": 0},
    ]
    memcpy = {"HtoD": copy(hd(262144)), "PtoP": copy(dd(262144, BW_PTOP)),
              "DtoH": copy(hd(262144))}
    # Threads on device 0 allocate 2 x (1,3,5,7) x 4096, on device 1 2 x (2,4,6,8) x 4096, all
    # alive together at the barrier, plus one 256 KiB peer buffer per device.
    memory = [
        mem(0, 9, 131072 + 262144, 131072 + 262144, {"device": 131072 + 262144}),
        mem(1, 9, 163840 + 262144, 163840 + 262144, {"device": 163840 + 262144}),
    ]
    # Joins: 188 kernels + 3 copies + 36 memory records (18 allocs, 18 frees).
    # API calls: per thread 2 allocs, 2 frees, 20 + i launches, 1 sync (228 in all); main
    # 2 allocs, 3 copies, 1 sync, 2 frees.
    capture(f, run, kernels, streams, memcpy, NO_MEMSET, memory,
            {"runtime": 0, "driver": 188 + 3 + 36, "unknown": 0}, {"runtime": 0, "driver": 236})


@case("graph")
def _(f, run, env):
    ctx, st = V("ctx:c"), V("stream:s")
    replays = 12
    kernels = [
        kernel("_Z8consumerPf", replays, 11000, {"cuGraphLaunch": replays}, [[0, ctx, st]]),
        kernel("_Z9transformPf", replays, 7000, {"cuGraphLaunch": replays}, [[0, ctx, st]]),
        kernel("_Z8producerPf", replays + 1, 3000, {"cuGraphLaunch": replays, "cuLaunchKernel": 1},
               [[0, ctx, st]]),
    ]
    streams = [{"device": 0, "context": ctx, "stream": st, "kernels": 3 * replays + 1,
                "memcpys": 0, "memsets": 0}]
    # API calls: 3 launches while capturing (they make nodes, not kernels), 1 cuGraphInstantiate
    # (traced to recognize the creation of its clones, cupti/subscriber.c), 12 cuGraphLaunch,
    # 1 direct launch, 1 cuStreamSynchronize.
    capture(f, run, kernels, streams, {}, NO_MEMSET, [],
            {"runtime": 0, "driver": 3 * replays + 1, "unknown": 0},
            {"runtime": 0, "driver": 3 + 1 + replays + 1 + 1})


@case("async_vmm_pinned")
def _(f, run, env):
    asyncb = MIB + MIB // 2 + MIB // 4
    memory = [
        mem(0, 5, 4096 + 2 * MIB + asyncb, 4096 + 2 * MIB + MIB + MIB // 2,
            {"device": 4096, "vmm": 2 * MIB, "async": asyncb}),
        mem(-1, 2, 65536 + 131072, 65536 + 131072, {"pinned": 65536 + 131072}),
    ]
    # Joins: MEMORY2 records of cuMemAlloc/cuMemFree (2), async (6) and pinned (4); VMM has
    # none. API calls: cuMemAlloc, cuMemCreate, cuMemAddressReserve, cuMemMap, 3 cuMemAllocAsync,
    # 3 cuMemFreeAsync, cuStreamSynchronize, cuMemUnmap, cuMemRelease, cuMemAddressFree,
    # cuMemFree, cuMemAllocHost, cuMemHostAlloc, 2 cuMemFreeHost.
    capture(f, run, [], [], {}, NO_MEMSET, memory, {"runtime": 0, "driver": 12, "unknown": 0},
            {"runtime": 0, "driver": 19})


@case("vmm_lifetime")
def _(f, run, env):
    # VMM memory is freed when its handle is released *and* its last mapping is gone: A is
    # released while mapped twice and stays in use until its second cuMemUnmap, so the peak is
    # A + the 8192-byte block allocated between the two unmaps. B is created after A's memory
    # is gone (2 MiB again, never both at once) and its retained reference keeps it alive past
    # the first release. D and E (2 MiB each, mapped with gaps around them in one reservation)
    # are both freed by the one cuMemUnmap over the whole reservation; together they are the
    # peak. No release is an unknown free. C is host memory (a host NUMA node): device -1, like
    # pinned memory.
    memory = [mem(0, 7, 8 * MIB + 4096 + 8192 + 4096, 4 * MIB,
                  {"device": 4096 + 8192 + 4096, "vmm": 8 * MIB}),
              mem(-1, 1, 2 * MIB, 2 * MIB, {"vmm": 2 * MIB})]
    # Joins: the MEMORY2 records of the three cuMemAlloc/cuMemFree pairs; VMM has none. API
    # calls: 5 cuMemCreate, 4 cuMemAddressReserve, 5 cuMemMap, 1 cuMemRetainAllocationHandle,
    # 6 cuMemRelease, 3 cuMemAlloc, 3 cuMemFree, 4 cuMemUnmap, 4 cuMemAddressFree
    # (cuMemSetAccess is not traced).
    capture(f, run, [], [], {}, NO_MEMSET, memory, {"runtime": 0, "driver": 6, "unknown": 0},
            {"runtime": 0, "driver": 35})


# ---- the small workload, under various configurations ----

SMALL_KERNELS_NS = 4000


def small_capture(f, run, timed=True, losses=None):
    """The small workload's exact summary. timed=False: the simulator wrote its GPU records
    without timestamps (all GPU times 0)."""
    ctx, st, null = V("ctx:c"), V("stream:s"), V("stream:null")
    ns = SMALL_KERNELS_NS if timed else 0
    kernels = [kernel("_Z5smallPf", 6, ns, {"cuLaunchKernel": 6}, [[0, ctx, st]])]
    streams = [
        {"device": 0, "context": ctx, "stream": st, "kernels": 6, "memcpys": 1, "memsets": 0},
        {"device": 0, "context": ctx, "stream": null, "kernels": 0, "memcpys": 1, "memsets": 0},
    ]
    memcpy = {"HtoD": copy(hd(8192)), "DtoH": copy(hd(8192))}
    if not timed:
        memcpy = {k: dict(v, gpu_time_ns=0) for k, v in memcpy.items()}
    memory = [mem(0, 1, 8192, 8192, {"device": 8192})]
    # Joins: 6 kernels, 2 copies, 2 memory records. API calls: cuMemAlloc, cuMemcpyHtoD,
    # 6 launches, cuMemcpyDtoHAsync, cuStreamSynchronize, cuMemFree.
    return capture(f, run, kernels, streams, memcpy, NO_MEMSET, memory,
                   {"runtime": 0, "driver": 10, "unknown": 0}, {"runtime": 0, "driver": 11},
                   losses=losses)


def inactive(f, run, reason_words):
    """The agent stayed inactive: one stderr line, the same text as inactive_reason, which
    names what it found; nothing captured."""
    s = summary_header(f, run, "inactive")
    f.eq("number of gpuprof lines on stderr", len(run.agent_lines), 1)
    if s is None:
        return
    reason = s.get("inactive_reason", "")
    for w in reason_words:
        f.check(w in reason, f"inactive_reason {reason!r} names {w!r}")
        if run.agent_lines:
            f.check(w in run.agent_lines[0], f"stderr line {run.agent_lines[0]!r} names {w!r}")
    if run.agent_lines:
        f.check(reason and reason in run.agent_lines[0],
                f"stderr line {run.agent_lines[0]!r} carries inactive_reason {reason!r}")
    f.eq("kernels.count while inactive", s.get("kernels", {}).get("count"), 0)


@case("small")
def _(f, run, env):
    small_capture(f, run)


# ---- overload (tests/e2e/overload.c) ----

STORM_LAUNCHES = 20000
KERNEL_NS_32_THREADS = 2000  # the simulator's default: 2000 ns + 32 threads / 64 (rounded down)


@case("overload_storm")
def _(f, run, env):
    # 20000 launches against one 64 KiB buffer (GPUPROF_BUFFER_LIMIT = GPUPROF_BUFFER_SIZE).
    # A stream holds 1024 pending ops, so when the buffer fills the host is ~1024 launches
    # ahead of the GPU and its records drop until the buffer's last kernel has run and the
    # worker returned it: drops are certain, their number is the simulator's business. Every
    # launch is either a kernel in the summary or a dropped record, counted once; nothing is
    # lost in the agent. No other GPU record follows context creation, whose records (2
    # DEVICE, CONTEXT, STREAM) go into the first buffer, so the drops are all kernels. That
    # needs GPUPROF_FLUSH_INTERVAL long: a periodic flush (at 1 ms) could take the only
    # buffer between two of those records and drop the second (seen in about 1 of 75 runs on
    # a loaded machine: kernels + drops = 20004).
    s = summary_header(f, run)
    if s is None:
        return
    consistency(f, s)
    k, losses = s.get("kernels", {}), s.get("losses", {})
    count, dropped = k.get("count", 0), losses.get("cupti_dropped_records", 0)
    f.eq("kernels.count + losses.cupti_dropped_records", count + dropped, STORM_LAUNCHES)
    f.check(dropped > 0 and losses.get("buffer_pool_exhausted", 0) > 0,
            f"the one-buffer pool ran dry (losses {losses})")
    f.eq("api (every launch counted at its callback)", s.get("api"),
         {"runtime": 0, "driver": STORM_LAUNCHES})
    f.eq("joins (every decoded kernel joined, none to an unknown call)", s.get("joins"),
         {"runtime": 0, "driver": count, "unknown": 0})
    f.match("kernels.by_name", k.get("by_name"),
            [{"name": "_Z5stormv", "demangled": DEMANGLED["_Z5stormv"], "count": count,
              "gpu_time_ns": k.get("gpu_time_ns"), "apis": {"cuLaunchKernel": count},
              "devices": [0], "streams": [[0, V("ctx"), V("s")]]}])
    # Kernels still running at the exit flush arrive without timestamps and add no time.
    zero = losses.get("zero_timestamps", 0)
    f.eq("kernels.gpu_time_ns", k.get("gpu_time_ns"), (count - zero) * KERNEL_NS_32_THREADS)
    f.match("losses (besides drops and untimed kernels)", losses,
            dict(LOSSES_NONE, cupti_dropped_records=dropped, zero_timestamps=zero,
                 buffer_pool_exhausted=losses.get("buffer_pool_exhausted")))
    st = s.get("stacks", {})
    sampled = sum(e.get("sampled", 0) for e in st.get("by_kernel_time", []))
    f.eq("stacks: sampled + kernels_without_stack.launches == kernels.count",
         sampled + st.get("kernels_without_stack", {}).get("launches", 0), count)
    # The pool running dry is said once.
    f.eq("number of gpuprof lines on stderr", len(run.agent_lines), 1)
    if run.agent_lines:
        f.check("GPUPROF_BUFFER_LIMIT" in run.agent_lines[0],
                f"line {run.agent_lines[0]!r} names GPUPROF_BUFFER_LIMIT")


@case("overload_wrap")
def _(f, run, env):
    # GPUPROF_CORR_TABLE_SIZE=1K (1024 slots) and every record decoded at exit. Correlation ids
    # are consecutive: A1 = x..x+1023 (cuLaunchKernel, main thread), x+1024 thread B's
    # cuCtxSetCurrent (not traced: no slot written), B = x+1025..x+2048 (cuLaunchKernelEx,
    # thread B), A2 = x+2049..x+2560, x+2561 cuCtxSynchronize. A call's slot still holds it at
    # exit unless a traced call 1024k ids later took it: A1 all lost (x+i to B or, for i = 0,
    # to x+2048), B's first 513 (to A2 and the synchronize), none of A2. A lost join counts as
    # unknown ("?"); a wrong one would give a kernel the other's API or stack.
    s = summary_header(f, run)
    if s is None:
        return
    consistency(f, s)
    ctx, null = V("ctx"), V("stream:null")
    ns = KERNEL_NS_32_THREADS
    f.match("kernels.by_name", s.get("kernels", {}).get("by_name"), [
        kernel("_Z6wrap_av", 1536, ns, {"?": 1024, "cuLaunchKernel": 512}, [[0, ctx, null]]),
        kernel("_Z6wrap_bv", 1024, ns, {"?": 513, "cuLaunchKernelEx": 511}, [[0, ctx, null]]),
    ])
    f.eq("joins", s.get("joins"), {"runtime": 0, "driver": 512 + 511, "unknown": 1024 + 513})
    f.eq("api", s.get("api"), {"runtime": 0, "driver": 1024 + 1024 + 512 + 1})
    f.match("losses", s.get("losses"), dict(LOSSES_NONE, unknown_correlation=1024 + 513))
    # GPUPROF_STACKS=all: each joined kernel carries its own call's stack (its launcher, on its
    # thread); the unknown ones have none.
    st = s.get("stacks", {})
    # e2e_launch (a static inline helper) is a frame of its own where it is not inlined (-O0).
    got = sorted((e.get("kernel"), e.get("launches"), e.get("sampled"),
                  [n for n in (fr.get("function", "").split(".")[0] for fr in e.get("frames", []))
                   if n != "e2e_launch"][1:3])
                 for e in st.get("by_kernel_time", []))
    f.eq("stacks.by_kernel_time (kernel, launches, sampled, the two callers)", got,
         [("wrap_a()", 512, 512, ["wrap_launch_a", "wrap"]),
          ("wrap_b()", 511, 511, ["wrap_launch_b", "wrap_thread_b"])])
    f.eq("stacks.kernels_without_stack.launches", st.get("kernels_without_stack", {}).get("launches"),
         1024 + 513)
    no_agent_lines(f, run)


HUNG_LAUNCHES = 3000
KERNEL_RECORD_BYTES = 216  # the simulator writes CUpti_ActivityKernel10 (CUDA 13.0 headers)
HUNG_BUFFER_BYTES = 64 * 1024  # GPUPROF_BUFFER_SIZE=64K


@case("hung_flush")
def _(f, run, env):
    # FAKEGPU_CUPTI_FAULT=hung_flush, GPUPROF_FLUSH_INTERVAL=1ms: the worker's first periodic
    # flush never returns, before the program launches anything. The program's exit status and
    # stdout are the baseline's (run_case.py) and it ends well inside the runner's hang guard:
    # the exit path waits 2 s for the flush, skips the forced one, waits 5 s for the worker.
    s = summary_header(f, run, window=False)
    if s is None:
        return
    # Nothing was decoded: the 3000 launches and the synchronize were seen as API calls only.
    f.eq("api", s.get("api"), {"runtime": 0, "driver": HUNG_LAUNCHES + 1})
    f.eq("kernels", s.get("kernels"), {"count": 0, "gpu_time_ns": 0, "by_name": []})
    f.eq("joins", s.get("joins"), {"runtime": 0, "driver": 0, "unknown": 0})
    # One shared CUPTI buffer at a time (PER_THREAD_ACTIVITY_BUFFER=0): each full 64 KiB buffer
    # holds 303 kernel records; the context's few earlier records take less than the last
    # buffer's slack (3030 - 3000 records), so 9 buffers were completed and queued, never read.
    # The last, partial one stays inside CUPTI: only exit_incomplete accounts for it.
    full = HUNG_LAUNCHES // (HUNG_BUFFER_BYTES // KERNEL_RECORD_BYTES)
    f.match("losses", s.get("losses"), dict(LOSSES_NONE, lost_buffers=full, exit_incomplete=True))
    f.eq("gpuprof lines on stderr", run.agent_lines, [
        "gpuprof: worker: cuptiActivityFlushAll did not return within 2000 ms; skipping the final "
        "flush, so records CUPTI still holds are lost and the summary is incomplete",
        "gpuprof: worker: the worker thread did not finish within 5000 ms; writing the summary "
        f"without it ({full} completed buffers unread)",
    ])


@case("wedged_forced")
def _(f, run, env):
    # cupti_wedge.c: the exit path's forced flush never returns; GPUPROF_FLUSH_INTERVAL=1h, so
    # no periodic flush ran and the small workload's records all stayed inside CUPTI. The
    # program's exit status and stdout are the baseline's (run_case.py): the exit waited 2 s
    # for the flush and skipped cuptiFinalize (it would wait on the same GPU).
    s = summary_header(f, run, window=False)
    if s is None:
        return
    f.eq("api", s.get("api"), {"runtime": 0, "driver": 11})
    f.eq("kernels", s.get("kernels"), {"count": 0, "gpu_time_ns": 0, "by_name": []})
    f.match("losses", s.get("losses"), dict(LOSSES_NONE, exit_incomplete=True))
    f.eq("gpuprof lines on stderr", run.agent_lines, [
        "gpuprof: the final cuptiActivityFlushAll did not return within 2000 ms; records CUPTI "
        "still holds are lost and the summary is incomplete",
    ])


@case("wedged_finalize")
def _(f, run, env):
    # cupti_wedge.c: cuptiFinalize never returns. It comes after the summary was written, which
    # is the small workload's whole one; the exit waited 2 s for Finalize, then went on.
    f.eq("gpuprof lines on stderr", run.agent_lines, [
        "gpuprof: cuptiFinalize did not return within 2000 ms; exiting without it",
    ])
    run.agent_lines = []  # checked above; small_capture wants none besides it
    small_capture(f, run)


@case("wedged_disable")
def _(f, run, env):
    # cupti_wedge.c: cuptiActivityDisable, the exit path's first CUPTI call, never returns. The
    # exit waited 2 s for it, then skipped the forced flush and cuptiFinalize (they would wait on
    # the same GPU): the records CUPTI held (GPUPROF_FLUSH_INTERVAL=1h: all of them) are lost.
    s = summary_header(f, run, window=False)
    if s is None:
        return
    f.eq("api", s.get("api"), {"runtime": 0, "driver": 11})
    f.eq("kernels", s.get("kernels"), {"count": 0, "gpu_time_ns": 0, "by_name": []})
    f.match("losses", s.get("losses"), dict(LOSSES_NONE, exit_incomplete=True))
    f.eq("gpuprof lines on stderr", run.agent_lines, [
        "gpuprof: cuptiActivityDisable did not return within 2000 ms; records CUPTI still holds "
        "are lost and the summary is incomplete",
    ])


@case("cupti_other_subscriber")
def _(f, run, env):
    inactive(f, run, ["nsys"])


@case("version_mismatch")
def _(f, run, env):
    inactive(f, run, ["120800", "12.8", "13.0"])


@case("bad_config")
def _(f, run, env):
    # One line per bad variable, naming it and its value; the defaults are used and the
    # capture is complete.
    bad = {"GPUPROF_WINDOW": "abc", "GPUPROF_LOG": "loud", "GPUPROF_BUFFER_SIZE": "-1"}
    for var, value in bad.items():
        lines = [l for l in run.agent_lines if var in l]
        f.eq(f"gpuprof lines naming {var}", len(lines), 1)
        if lines:
            f.check(value in lines[0], f"line {lines[0]!r} names the value {value!r}")
    f.eq("number of gpuprof lines on stderr", len(run.agent_lines), len(bad))
    agent_lines, run.agent_lines = run.agent_lines, []
    small_capture(f, run)
    run.agent_lines = agent_lines


@case("log_debug_upper")
def _(f, run, env):
    # Log levels are case-insensitive, the load-time line too: GPUPROF_LOG=DEBUG says the
    # library was loaded before anything else (before cuInit called InitializeInjection).
    loaded = [l for l in run.agent_lines if "loaded into pid" in l]
    f.eq("gpuprof lines saying the library was loaded", len(loaded), 1)
    if run.agent_lines:
        f.check("loaded into pid" in run.agent_lines[0],
                f"the first gpuprof line {run.agent_lines[0]!r} is the load-time one")
    agent_lines, run.agent_lines = run.agent_lines, []
    small_capture(f, run)
    run.agent_lines = agent_lines


@case("unwritable_output")
def _(f, run, env):
    out = env["GPUPROF_OUTPUT_DIR"]
    f.eq("number of gpuprof lines on stderr", len(run.agent_lines), 1)
    if run.agent_lines:
        f.check(out in run.agent_lines[0], f"line {run.agent_lines[0]!r} names {out}")
    f.check(run.summary is None, "no summary can have been written")


@case("no_buffers")
def _(f, run, env):
    # The simulator hands every buffer the agent gives it straight back unused: each record is
    # dropped and counted. The agent's pool (GPUPROF_BUFFER_LIMIT / GPUPROF_BUFFER_SIZE = 16
    # buffers by default) runs dry after 16 requests, which it says once on stderr. The
    # allocation is still tracked (from callbacks); no GPU record arrives, so the window is empty.
    s = summary_header(f, run, window=False)
    if s is None:
        return
    consistency(f, s)
    f.eq("window", s.get("window"), {"start_ns": 0, "end_ns": 0})
    f.eq("kernels.count (every record dropped)", s.get("kernels", {}).get("count"), 0)
    f.eq("memcpy (every record dropped)", s.get("memcpy"), {})
    f.match("memory (from callbacks)", s.get("memory"), [mem(0, 1, 8192, 8192, {"device": 8192})])
    f.eq("api", s.get("api"), {"runtime": 0, "driver": 11})
    f.eq("joins", s.get("joins"), {"runtime": 0, "driver": 0, "unknown": 0})
    # Records the run makes: 6 kernels, 2 copies, 2 memory (alloc, release), 1 stream sync,
    # 2 STREAM (legacy + created), 1 CONTEXT, and 4 DEVICE (the simulator's 2 devices, once
    # dumped by cuptiActivityEnableAndDump and once at driver init).
    f.match("losses", s.get("losses"), dict(LOSSES_NONE, cupti_dropped_records=18,
                                            buffer_pool_exhausted=18 - 16))
    f.eq("number of gpuprof lines on stderr", len(run.agent_lines), 1)
    if run.agent_lines:
        f.check("GPUPROF_BUFFER_LIMIT" in run.agent_lines[0],
                f"line {run.agent_lines[0]!r} names GPUPROF_BUFFER_LIMIT")


@case("kinds_refused")
def _(f, run, env):
    # CUPTI refuses every activity kind (callbacks work): one stderr line names every kind and
    # its error and says no GPU records will come; API calls and allocations are still counted
    # from callbacks, and nothing else is said.
    s = summary_header(f, run, window=False)
    if s is None:
        return
    f.eq("kernels.count (no records)", s.get("kernels", {}).get("count"), 0)
    f.eq("memcpy (no records)", s.get("memcpy"), {})
    f.match("memory (from callbacks)", s.get("memory"), [mem(0, 1, 8192, 8192, {"device": 8192})])
    f.eq("api", s.get("api"), {"runtime": 0, "driver": 11})
    f.eq("number of gpuprof lines on stderr", len(run.agent_lines), 1)
    if run.agent_lines:
        line = run.agent_lines[0]
        for kind in ("CONCURRENT_KERNEL", "MEMCPY", "MEMCPY2", "MEMSET", "MEMORY2", "MEMORY_POOL",
                     "SYNCHRONIZATION", "OVERHEAD", "DEVICE", "CONTEXT", "STREAM"):
            f.check(f"{kind} (CUPTI_ERROR_NOT_SUPPORTED)" in line, f"line {line!r} names {kind}")
        f.check("without any GPU records" in line, f"line {line!r} says no GPU records come")


@case("zero_timestamps")
def _(f, run, env):
    # The simulator writes every GPU record with start == end == 0 (what CUPTI does when its
    # device buffer overflows): counts and bytes stay exact, times are 0, and each of the 8
    # GPU records (6 kernels, 2 copies) is counted as a loss.
    small_capture(f, run, timed=False, losses=dict(LOSSES_NONE, zero_timestamps=8))


@case("unknown_kind")
def _(f, run, env):
    # The simulator appends a record of unknown kind 999 to every completed buffer. With a
    # flush interval longer than the run, only the exit flush completes a buffer: one
    # unreadable record, after all the real ones (so the capture is complete), and one line.
    agent_lines, run.agent_lines = run.agent_lines, []
    small_capture(f, run, losses=dict(LOSSES_NONE, invalid_records=1))
    run.agent_lines = agent_lines
    f.eq("number of gpuprof lines on stderr", len(run.agent_lines), 1)
    if run.agent_lines:
        f.check("invalid_records" in run.agent_lines[0],
                f"line {run.agent_lines[0]!r} names the invalid_records counter")


@case("missing_injection")
def _(f, run, env):
    f.check(run.summary is None, "no summary without the agent")
    f.eq("gpuprof lines on stderr", run.agent_lines, [])
    f.eq("files in GPUPROF_OUTPUT_DIR", run.output_files, [])


@case("mode_off")
def _(f, run, env):
    f.check(run.summary is None, "GPUPROF_MODE=off writes no summary")
    f.eq("stderr with GPUPROF_MODE=off", run.stderr, "")
    f.eq("files in GPUPROF_OUTPUT_DIR", run.output_files, [])


# ---- process lifecycle ----

def summaries(run):
    return [n for n in run.output_files if n.endswith("-summary.json")]


def pids_in_names(run):
    """The pid in every output file name: gpuprof-<host>-<pid>-<what>."""
    pids = set()
    for n in run.output_files:
        m = re.match(r"gpuprof-.*?-(\d+)-(summary\.json|gpu_time|gpu_memory|memcpy)", n)
        pids.add(int(m.group(1)) if m else n)
    return pids


@case("fork_after_init")
def _(f, run, env):
    # Only the parent writes a summary (named by its pid); the child, which left through
    # exit() with the agent's atexit handler inherited, writes nothing.
    # Only the parent writes outputs (its summary and its pprof windows); the child's pid
    # appears in no file name.
    f.eq("summaries in GPUPROF_OUTPUT_DIR (the parent's only)", len(summaries(run)), 1)
    f.eq("pids in output file names", pids_in_names(run), {run.pid})
    ctx, st = V("ctx:c"), V("stream:s")
    kernels = [
        kernel("_Z9afterForkv", 3, 9000, {"cuLaunchKernel": 3}, [[0, ctx, st]]),
        kernel("_Z10beforeForkv", 4, 6000, {"cuLaunchKernel": 4}, [[0, ctx, st]]),
    ]
    streams = [{"device": 0, "context": ctx, "stream": st, "kernels": 7, "memcpys": 0,
                "memsets": 0}]
    # Joins: 7 kernels + 2 memory records. API calls: alloc, 7 launches, 2 syncs, free.
    capture(f, run, kernels, streams, {}, NO_MEMSET, [mem(0, 1, 4096, 4096, {"device": 4096})],
            {"runtime": 0, "driver": 9, "unknown": 0}, {"runtime": 0, "driver": 11})


@case("child_processes")
def _(f, run, env):
    # Three processes used CUDA, so three agents each wrote their own summary: the parent
    # (the program's pid), a child forked before the parent initialised CUDA, and a child
    # started with exec after it. Each summary holds exactly its own process's kernels.
    f.eq("summaries in GPUPROF_OUTPUT_DIR (one per process)", len(summaries(run)), 3)
    by_kernel = {}
    for name in summaries(run):
        with open(os.path.join(env["GPUPROF_OUTPUT_DIR"], name), encoding="utf-8") as fh:
            s = json.load(fh)
        kernels = s.get("kernels", {}).get("by_name", [])
        f.eq(f"{name}: kernel names", len(kernels), 1)
        if kernels:
            by_kernel[kernels[0]["name"]] = (s, kernels[0])
    for kname, count, ns, parent in (("_Z10parentWorkv", 4, 3000, True),
                                     ("_Z9forkChildv", 3, 5000, False),
                                     ("_Z9execChildv", 2, 7000, False)):
        if not f.check(kname in by_kernel, f"a summary with the kernels {kname}"):
            continue
        s, k = by_kernel[kname]
        f.eq(f"{kname}: state", s.get("state"), "active")
        f.eq(f"{kname}: count", k.get("count"), count)
        f.eq(f"{kname}: gpu_time_ns", k.get("gpu_time_ns"), count * ns)
        f.eq(f"{kname}: joins", s.get("joins"), {"runtime": 0, "driver": count, "unknown": 0})
        f.check((s.get("pid") == run.pid) == parent,
                f"{kname}: written by the {'parent' if parent else 'child'} (pid {s.get('pid')}, "
                f"program pid {run.pid})")
    pids = {s.get("pid") for s, _ in by_kernel.values()}
    f.eq("distinct pids of the summaries", len(pids), 3)
    f.eq("pids in output file names (each process's own files)", pids_in_names(run), pids)


def exit_capture(f, run):
    ctx, st = V("ctx:c"), V("stream:s")
    kernels = [kernel("_Z4stepv", 5, 2500, {"cuLaunchKernel": 5}, [[0, ctx, st]])]
    streams = [{"device": 0, "context": ctx, "stream": st, "kernels": 5, "memcpys": 0,
                "memsets": 0}]
    # The 4 KiB allocation is never freed: in use at exit.
    # Joins: 5 kernels + 1 memory record. API calls: alloc, 5 launches, 1 sync.
    capture(f, run, kernels, streams, {}, NO_MEMSET, [mem(0, 1, 4096, 4096, {"device": 4096}, 0, 0)],
            {"runtime": 0, "driver": 6, "unknown": 0}, {"runtime": 0, "driver": 7})


@case("exit_paths_exit", rc=3)
def _(f, run, env):
    exit_capture(f, run)


@case("exit_paths_return", rc=3)
def _(f, run, env):
    exit_capture(f, run)


@case("exit_paths__exit", rc=3)
def _(f, run, env):
    # _exit skips atexit handlers: no summary, and no crash.
    f.check(run.summary is None, "_exit() runs no exit handler, so no summary")
    f.eq("gpuprof lines on stderr", run.agent_lines, [])


@case("exit_paths_thread", rc=3)
def _(f, run, env):
    # A thread still launching while main calls exit(3): the summary is written, the five
    # launches of main are exact, and the spinner's launches (at least 200 before exit) are
    # counted as kernels or, if still queued at the final flush, as zero-timestamp records.
    s = summary_header(f, run)
    if s is None:
        return
    consistency(f, s)
    by = {e.get("name"): e for e in s.get("kernels", {}).get("by_name", [])}
    step = by.get("_Z4stepv", {})
    f.eq("_Z4stepv count", step.get("count"), 5)
    f.eq("_Z4stepv gpu_time_ns", step.get("gpu_time_ns"), 5 * 2500)
    spun = by.get("_Z7spinnerv", {}).get("count", 0) + s.get("losses", {}).get("zero_timestamps", 0)
    f.check(spun >= 200, f"spinner launches counted ({spun}) >= the 200 made before exit")
    f.eq("joins.unknown", s.get("joins", {}).get("unknown"), 0)
    no_agent_lines(f, run)

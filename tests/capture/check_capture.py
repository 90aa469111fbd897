#!/usr/bin/env python3
"""Runs capture_prog under the agent on the simulated GPU and checks the capture it wrote.

Every trace goes through tests/trace/validate_trace.py (JSON) or protoc --decode against
export/proto/perfetto_trace.proto (native). The middle phase of capture_prog (its basic()
workload, BASIC below) must appear exactly: each kernel, copy and set once on its stream with
its duration, each API call once on its thread, one flow per launch and per copy from the
call to its GPU slice, syncs on their tracks, the memory counter's values in order.

Each finished capture also writes the pprof of its window next to the trace
(<stem>-gpu_time.pb.gz, -gpu_memory, -memcpy): they are read with `go tool pprof -raw`
(tests/pprof/check_pprof.py) and must hold exactly the GPU work that started inside the
window (BASIC_PPROF), and for the `memory` program exactly its allocation sequence (MEMORY).

Usage: check_capture.py --case NAME --prog capture_prog --proto PROTO [--protoc P] --agent SO
                        [--gpuprof CLI]
The environment (LD_LIBRARY_PATH, CUDA_INJECTION64_PATH, GPUPROF_OUTPUT_DIR, ...) comes from
ctest (tests/lib/GpuprofTest.cmake).
"""

import argparse
import collections
import decimal
import glob
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "trace"))
sys.path.insert(0, os.path.join(HERE, "..", "pprof"))
import check_pprof  # noqa: E402
import check_traces  # noqa: E402
import validate_trace  # noqa: E402

MIB = 1024 * 1024
GPU0 = "GPU 0 (Fake H100 (simulated))"

# (track name, slice name, duration ns) -> count. The simulator's copy model: 1500 ns +
# bytes / 12 (pageable, GB/s = bytes/ns); sets 1000 ns + bytes / 1000.
BASIC_GPU = collections.Counter({
    ("stream 13", "k_small", 5000): 3,
    ("stream 7", "k_big", 50000): 2,
    ("stream 14", "k_thread", 7000): 4,
    ("stream 7", "Memcpy HtoD", 1500 + MIB // 12): 1,
    ("stream 7", "Memcpy DtoH", 1500 + MIB // 12): 1,
    ("stream 7", "Memset", 1000 + 4096 // 1000): 1,
})
BASIC_SYNC = collections.Counter({
    ("stream 13 sync", "cudaStreamSynchronize"): 1,
    ("stream 14 sync", "cudaStreamSynchronize"): 1,
    ("context sync", "cudaDeviceSynchronize"): 1,
})
BASIC_API = collections.Counter({
    ("main", "cuMemAlloc"): 2, ("main", "cuMemcpyHtoD"): 1, ("main", "cuMemsetD8"): 1,
    ("main", "cuLaunchKernel"): 5, ("main", "cuStreamSynchronize"): 1,
    ("main", "cuMemcpyDtoH"): 1, ("main", "cuCtxSynchronize"): 1, ("main", "cuMemFree"): 2,
    ("launcher", "cuLaunchKernel"): 4, ("launcher", "cuStreamSynchronize"): 1,
})
BASIC_FLOWS = collections.Counter({
    ("main", "cuLaunchKernel", "stream 13", "k_small"): 3,
    ("main", "cuLaunchKernel", "stream 7", "k_big"): 2,
    ("launcher", "cuLaunchKernel", "stream 14", "k_thread"): 4,
    ("main", "cuMemcpyHtoD", "stream 7", "Memcpy HtoD"): 1,
    ("main", "cuMemcpyDtoH", "stream 7", "Memcpy DtoH"): 1,
})
BASIC_MEMORY = [MIB, MIB + 65536, 65536, 0]
# The capture's pprof of basic(): {leaf: values} (gpu_time: launches, ns; memcpy: count, ns,
# bytes). Exact: every launch is counted (GPUPROF_STACKS=all, or GPU-only without stacks).
COPY_NS = 1500 + MIB // 12
BASIC_PPROF = {
    "gpu_time": {"[gpu] k_small": [3, 15000], "[gpu] k_big": [2, 100000],
                 "[gpu] k_thread": [4, 28000]},
    "memcpy": {"[gpu] memcpy HtoD": [1, COPY_NS, MIB], "[gpu] memcpy DtoH": [1, COPY_NS, MIB],
               "[gpu] memset": [1, 1000 + 4096 // 1000, 4096]},
}
PROFILE_KINDS = ("gpu_time", "gpu_memory", "memcpy")

# capture_prog memory: 4 MiB allocated before the capture and freed in it; a (1 MiB) allocated
# and freed in it; b (64 KiB) and c (8 KiB) allocated in it and freed after it.
MEMORY_ALLOC = [3, MIB + 65536 + 8192]
MEMORY_INUSE = [2, 65536 + 8192]
# The trace's counter: on demand it starts at 0 and the free of pre cannot take it below 0
# (nor can the free of a, after that); in continuous mode it starts at pre's 4 MiB.
MEMORY_COUNTER = {
    "ondemand": [MIB, MIB + 65536, 0, 0, 8192],
    "continuous": [4 * MIB, 5 * MIB, 5 * MIB + 65536, MIB + 65536, 65536, 65536 + 8192],
}

failures = []


def fail(msg):
    failures.append(msg)
    print(f"FAIL: {msg}", file=sys.stderr)


def check(cond, msg):
    if not cond:
        fail(msg)
    return cond


def ns_of(v):
    return int((decimal.Decimal(str(v)) * 1000).to_integral_value())


def out_dir():
    return os.environ["GPUPROF_OUTPUT_DIR"]


def run(args, prog, env_extra, kill_after_line=None, preload=None):
    env = dict(os.environ)
    env.update(env_extra)
    if preload:
        env["LD_PRELOAD"] = preload
        if "ASAN_OPTIONS" in env:  # the agent is preloaded before the sanitizer runtime
            env["ASAN_OPTIONS"] += ":verify_asan_link_order=0"
    shutil.rmtree(out_dir(), ignore_errors=True)
    if kill_after_line is None:
        r = subprocess.run([prog] + args, env=env, capture_output=True, text=True, timeout=120)
        sys.stderr.write(r.stderr)
        return r.returncode, r.stdout, r.stderr
    p = subprocess.Popen([prog] + args, env=env, stdout=subprocess.PIPE, text=True)
    out = ""
    for line in p.stdout:
        out += line
        if line.strip() == kill_after_line:
            break
    time.sleep(2.0)  # a few flush intervals: the records reach the file
    p.send_signal(signal.SIGKILL)
    p.wait()
    return p.returncode, out, ""


def traces():
    return sorted(f for f in glob.glob(os.path.join(out_dir(), "gpuprof-*-capture*"))
                  if not f.endswith((".tmp", ".pb.gz")))


def stem_of(trace):
    for suffix in (".json.gz", ".json", ".pftrace"):
        if trace.endswith(suffix):
            return trace[:-len(suffix)]
    return trace


def capture_profiles(trace):
    """{kind: path} of the capture's profiles found next to the trace."""
    stem = stem_of(trace)
    return {k: f"{stem}-{k}.pb.gz" for k in PROFILE_KINDS
            if os.path.exists(f"{stem}-{k}.pb.gz")}


def by_leaf(prof):
    out = {}
    for smp in prof["samples"]:
        vals = out.setdefault(smp["functions"][0], [0] * len(smp["values"]))
        for i, v in enumerate(smp["values"]):
            vals[i] += v
    return out


def read_capture_profile(path, kind):
    """The profile through go tool pprof -raw, with the checks every profile passes."""
    c = check_pprof.Check()
    prof = check_pprof.read_profile(path)
    # A profile without mappings (leaf-only samples) gets an empty, unnamed one from go's
    # reader; the agent's own mappings always have a file.
    prof["mappings"] = [m for m in prof["mappings"] if not re.match(r"\d+: 0x0/0x0/0x0\s*$", m)]
    check_pprof.check_common(c, kind, prof)
    for f in c.failures:
        fail(f"{path}: {f}")
    return prof


def check_pprof_values(trace, kinds, want, where, leaf_only=False, memory=None):
    """The capture's profiles: exactly kinds exist; by leaf they hold want[kind] (memory:
    the gpu_memory values {leaf: [alloc_objects, alloc_space, inuse_objects, inuse_space]})."""
    found = capture_profiles(trace)
    check(sorted(found) == sorted(kinds), f"{where}: profiles {sorted(found)}, expected "
          f"{sorted(kinds)}")
    for kind, path in sorted(found.items()):
        prof = read_capture_profile(path, kind)
        got = by_leaf(prof)
        exp = memory if kind == "gpu_memory" else want.get(kind)
        if exp is not None:
            if kind == "memcpy":  # copy times are the model's, checked in BASIC_GPU
                got = {k: [v[0], COPY_NS if k.startswith("[gpu] memcpy") else v[1], v[2]]
                       for k, v in got.items()}
            check(got == exp, f"{where}: {kind} by leaf {got}, expected {exp}")
        for smp in prof["samples"]:
            if leaf_only:
                check(len(smp["functions"]) == 1,
                      f"{where}: {kind}: GPU-only sample with a stack {smp['functions']}")
            else:
                check("main" in smp["functions"] or "start_thread" in smp["functions"],
                      f"{where}: {kind}: sample without its host stack {smp['functions']}")


def summary():
    with open(os.environ["GPUPROF_SUMMARY_FILE"]) as f:
        return json.load(f)


def check_reported_size(path, err):
    """Every size the agent reports for a finished capture is the file's size on disk: the
    summary's captures.last.bytes and the stderr line "capture N finished: E events, B bytes
    in PATH" (the writer's own count misses the last buffer and the gzip trailer)."""
    size = os.path.getsize(path)
    last = summary().get("captures", {}).get("last", {})
    check(last.get("bytes") == size,
          f"{path}: summary captures.last.bytes {last.get('bytes')}, file size {size}")
    said = re.findall(r"capture \d+ finished: \d+ events, (\d+) bytes in (\S+)", err)
    check(said == [(str(size), path)], f"{path}: finished lines {said}, file size {size}")


# ---------------------------------------------------------------- normalized content

def content_json(path):
    raw = open(path, "rb").read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw, parse_float=decimal.Decimal)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    tnames = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
              if e.get("ph") == "M" and e["name"] == "thread_name"}
    pnames = {e["pid"]: e["args"]["name"] for e in events
              if e.get("ph") == "M" and e["name"] == "process_name"}
    c = {"gpu": collections.Counter(), "sync": collections.Counter(),
         "api": collections.Counter(), "flows": collections.Counter(), "memory": [],
         "events": events, "doc": doc, "tnames": tnames, "pnames": pnames}
    slice_at = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        tn = tnames.get((e["pid"], e["tid"]), f"thread {e['tid']}")
        slice_at[(e["pid"], e["tid"], ns_of(e["ts"]))] = (tn, e)
        if e["pid"] == doc["metadata"]["pid"]:
            c["api"][(tn, e["name"])] += 1
        elif e["cat"] == "cuda_sync":
            c["sync"][(tn, e["name"])] += 1
        else:
            c["gpu"][(tn, e["name"], ns_of(e["dur"]))] += 1
    starts = {e["id"]: e for e in events if e.get("ph") == "s"}
    for e in events:
        if e.get("ph") != "f":
            continue
        s = starts.get(e["id"])
        if not check(s is not None, f"{path}: flow {e['id']} has no start"):
            continue
        a = slice_at.get((s["pid"], s["tid"], ns_of(s["ts"])))
        g = slice_at.get((e["pid"], e["tid"], ns_of(e["ts"])))
        if not check(a and g, f"{path}: flow {e['id']} not at a slice start"):
            continue
        check(a[1]["args"].get("correlation") == e["id"] == g[1]["args"].get("correlation"),
              f"{path}: flow {e['id']} joins correlation {a[1]['args'].get('correlation')} to "
              f"{g[1]['args'].get('correlation')}")
        c["flows"][(a[0], a[1]["name"], g[0], g[1]["name"])] += 1
    c["memory"] = [v for _, v in sorted((ns_of(e["ts"]), e["args"]["in_use_bytes"])
                                         for e in events if e.get("ph") == "C")]
    return c


def content_pftrace(path, proto, protoc):
    trace = check_traces.decode_pftrace(path, proto, protoc)
    if trace is None:
        return None
    tracks, slices, counters, instants, open_ = check_traces.rebuild(trace, path)
    check(not any(open_.values()), f"{path}: slices left open")
    procs = [check_traces.one(d, "process") for d in tracks.values() if "process" in d]
    pid = check_traces.one(procs[0], "pid") if procs else None

    def tname(uuid):
        d = tracks[uuid]
        if "thread" in d:
            return check_traces.one(check_traces.one(d, "thread"), "thread_name")
        return check_traces.one(d, "name")

    c = {"gpu": collections.Counter(), "sync": collections.Counter(),
         "api": collections.Counter(), "flows": collections.Counter(), "memory": [],
         "instants": instants}
    fstart, fend = {}, {}
    for uuid, lst in slices.items():
        d = tracks[uuid]
        tn = tname(uuid)
        for name, s, e, b in lst:
            if "thread" in d and check_traces.one(check_traces.one(d, "thread"), "pid") == pid:
                c["api"][(tn, name)] += 1
            elif tn.endswith("sync"):
                c["sync"][(tn, name)] += 1
            else:
                c["gpu"][(tn, name, e - s)] += 1
            for f in b["flow"]:
                fstart[f] = (tn, name)
            for f in b["term"]:
                fend[f] = (tn, name)
    check(set(fstart) == set(fend), f"{path}: unpaired flows {set(fstart) ^ set(fend)}")
    for f in fstart.keys() & fend.keys():
        c["flows"][fstart[f] + fend[f]] += 1
    for uuid, lst in counters.items():
        c["memory"] += [v for _, v in sorted(lst)]
    return c


def validate(path, want_truncated=False):
    rep = validate_trace.Report()
    s = validate_trace.validate(path, rep)
    for e in rep.errors:
        fail(f"{path}: validator: {e}")
    if s is not None:
        check(bool(s["truncated"]) == want_truncated,
              f"{path}: truncated={s['truncated']}, expected {want_truncated}")
    return s


def check_basic(c, where, gpu_only=False):
    check(c["gpu"] == BASIC_GPU, f"{where}: GPU slices differ: missing "
          f"{dict(BASIC_GPU - c['gpu'])}, extra {dict(c['gpu'] - BASIC_GPU)}")
    check(c["sync"] == BASIC_SYNC, f"{where}: sync slices {dict(c['sync'])}")
    want_api = collections.Counter() if gpu_only else BASIC_API
    check(c["api"] == want_api, f"{where}: API slices differ: missing "
          f"{dict(want_api - c['api'])}, extra {dict(c['api'] - want_api)}")
    want_flows = collections.Counter() if gpu_only else BASIC_FLOWS
    check(c["flows"] == want_flows, f"{where}: flows {dict(c['flows'])}")
    check(c["memory"] == BASIC_MEMORY, f"{where}: memory counter {c['memory']}")


def check_json_basic(path, trigger, gpu_only=False, mode="continuous"):
    s = validate(path)
    if s is None:
        return None
    c = content_json(path)
    check_basic(c, path, gpu_only)
    meta = c["doc"]["metadata"]
    pid = meta["pid"]
    # GPU-only traces have no host track, hence no host process.
    check(gpu_only or c["pnames"].get(pid, "").startswith("capture_prog ("),
          f"{path}: process name")
    gpu_pids = [p for p, n in c["pnames"].items() if n == GPU0]
    check(len(gpu_pids) == 1, f"{path}: GPU process names {c['pnames']}")
    want = {"capture_trigger": trigger, "gpu_only": int(gpu_only), "mode": mode,
            "dropped_records": 0, "dropped_api_calls": 0, "agent": "gpuprof 0.1.0",
            "capture_id": 1}
    for k, v in want.items():
        check(meta.get(k) == v, f"{path}: metadata {k}={meta.get(k)!r}, expected {v!r}")
    check(meta.get("capture_start_ns") == meta.get("base_time_ns")
          and meta.get("capture_end_ns", 0) > meta.get("capture_start_ns", 0),
          f"{path}: capture window {meta.get('capture_start_ns')}..{meta.get('capture_end_ns')}")
    # Kernel arguments as launched (e2e_launch: 1 block of 32 threads).
    for e in c["events"]:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            check(e["args"].get("grid") == [1, 1, 1] and e["args"].get("block") == [32, 1, 1],
                  f"{path}: kernel args {e['args']}")
        if e.get("ph") == "X" and e["name"].startswith("Memcpy"):
            check(e["args"].get("bytes") == MIB, f"{path}: copy bytes {e['args']}")
    return c


def one_trace(suffix):
    t = traces()
    if not check(len(t) == 1 and t[0].endswith(suffix), f"expected one *{suffix} trace, got {t}"):
        return None
    return t[0]


# ---------------------------------------------------------------- cases

def case_basic_json(a):
    # Every launch with its stack: with sampled stacks a kernel none of whose launches was
    # sampled is absent from the gpu_time profile (and with it, maybe the whole file).
    rc, out, err = run(["basic"], a.prog, {"GPUPROF_CAPTURE_ON_START": "60s",
                                           "GPUPROF_LOG": "info",
                                           "GPUPROF_TRACE_FORMAT": "json",
                                           "GPUPROF_STACKS": "all"})
    check(rc == 0 and "basic: done" in out, f"program exited {rc}")
    path = one_trace(".json")
    if path:
        # The process exited 59 s before the capture's end: its file was finished at exit.
        check_json_basic(path, "start")
        check_reported_size(path, err)
    st = summary().get("captures", {})
    want = [path] + [f"{stem_of(path)}-{k}.pb.gz" for k in PROFILE_KINDS] if path else None
    check(st.get("count") == 1 and st.get("last", {}).get("files") == want and
          st["last"].get("truncated") is False, f"summary captures {st}, files {want}")


def case_gzip(a):
    rc, out, err = run(["basic"], a.prog, {"GPUPROF_CAPTURE_ON_START": "60s",
                                           "GPUPROF_LOG": "info",
                                           "GPUPROF_TRACE_FORMAT": "json.gz"})
    check(rc == 0, f"program exited {rc}")
    path = one_trace(".json.gz")
    if path:
        check_json_basic(path, "start")
        check_reported_size(path, err)


def case_perfetto(a):
    """The native encoding of a run has the content of the JSON encoding of the same run."""
    rc, out, err = run(["basic"], a.prog, {"GPUPROF_CAPTURE_ON_START": "60s",
                                           "GPUPROF_LOG": "info",
                                           "GPUPROF_TRACE_FORMAT": "perfetto"})
    check(rc == 0, f"program exited {rc}")
    path = one_trace(".pftrace")
    if path:
        check_reported_size(path, err)
    if not path or not check(a.protoc, "protoc not found (Debian package protobuf-compiler)"):
        return
    c = content_pftrace(path, a.proto, a.protoc)
    if c is None:
        return
    check_basic(c, path)
    end = next((i for i in c["instants"] if i["name"] == "trace end"), None)
    if check(end is not None, f"{path}: no trace end instant"):
        check(end["args"].get("capture_trigger") == "start" and
              end["args"].get("dropped_api_calls") == 0, f"{path}: metadata {end['args']}")


def case_gpu_only_ondemand(a):
    rc, out, err = run(["after"], a.prog, {"GPUPROF_MODE": "ondemand", "GPUPROF_GPU_ONLY": "1",
                                           "GPUPROF_CAPTURE_ON_START": "1s",
                                           "GPUPROF_TRACE_FORMAT": "json"})
    check(rc == 0, f"program exited {rc}")
    path = one_trace(".json")
    if path:
        c = check_json_basic(path, "start", gpu_only=True, mode="ondemand")
        if c:
            check(not any(e.get("ph") in ("s", "f") for e in c["events"]), f"{path}: flows")
        # k_after ran after the window: not in it. GPU-only: no stacks, every record counted.
        check_pprof_values(path, PROFILE_KINDS, BASIC_PPROF, path, leaf_only=True,
                           memory={"device": [2, MIB + 65536, 0, 0]})
    s = summary()
    # No API callback was ever enabled, and nothing was collected after the capture.
    check(s["api"] == {"runtime": 0, "driver": 0}, f"summary api {s['api']}")
    names = {k["name"]: k["count"] for k in s["kernels"]["by_name"]}
    check(names == {"k_small": 3, "k_big": 2, "k_thread": 4}, f"summary kernels {names}")


def case_size_cap(a):
    rc, out, err = run(["many", "20000"], a.prog, {"GPUPROF_CAPTURE_ON_START": "60s",
                                                   "GPUPROF_TRACE_FORMAT": "json",
                                                   "GPUPROF_TRACE_MAX_SIZE": "1M"})
    check(rc == 0 and "many: 20000 launches" in out, f"program exited {rc}")
    check("GPUPROF_TRACE_MAX_SIZE" in err, "no size cap line on stderr")
    path = one_trace(".json")
    if not path:
        return
    size = os.path.getsize(path)
    check(MIB // 2 < size <= MIB, f"{path}: {size} bytes for a 1 MiB cap")
    s = validate(path)
    if s:
        meta = s["metadata"] or {}
        check("size cap" in str(meta.get("truncated", "")), f"{path}: no truncation note")
        check(meta.get("size_cap_bytes") == MIB, f"{path}: size_cap_bytes")
        check(meta.get("discarded_events", 0) > 0, f"{path}: discarded_events")
    st = summary().get("captures", {}).get("last", {})
    check(st.get("truncated") is True and st.get("dropped", 0) > 0, f"summary captures {st}")


def case_killed(a):
    rc, out, _ = run(["many", "20000", "sleep"], a.prog,
                     {"GPUPROF_CAPTURE_ON_START": "60s", "GPUPROF_TRACE_FORMAT": "json"},
                     kill_after_line="sleeping")
    check(rc == -signal.SIGKILL, f"program was not killed: {rc}")
    path = one_trace(".json")
    if path:
        s = validate(path, want_truncated=True)
        if s:
            check(s["form"] == "array", f"{path}: form {s['form']}")
            check(s["slices"] > 5000, f"{path}: only {s['slices']} slices survived")


def case_signal(a):
    rc, out, err = run(["signal"], a.prog, {"GPUPROF_CAPTURE_SIGNAL": "SIGUSR2",
                                            "GPUPROF_TRACE_FORMAT": "json"})
    check(rc == 0 and "basic: done" in out, f"program exited {rc}")
    path = one_trace(".json")
    if path:
        check_json_basic(path, "signal")


def case_own_handler(a):
    rc, out, err = run(["own-handler"], a.prog, {"GPUPROF_CAPTURE_SIGNAL": "SIGUSR2",
                                                 "GPUPROF_TRACE_FORMAT": "json"})
    check(rc == 0 and "own handler: 1 calls" in out, f"program exited {rc}: {out!r}")
    check("already has a handler" in err, "no refusal line on stderr")
    check(traces() == [], f"a capture was written: {traces()}")


def case_api(a):
    rc, out, err = run(["api"], a.prog, {"GPUPROF_TRACE_FORMAT": "json",
                                         "GPUPROF_STACKS": "all"}, preload=a.agent)
    check(rc == 0, f"program exited {rc}")
    check("api: start 0, again -16" in out and "api: stop 0, again -2" in out,
          f"API results: {out!r}")
    path = one_trace(".json")
    if path:
        check_json_basic(path, "api")
        # k_before and k_after ran outside the window: only basic()'s work is in it.
        check_pprof_values(path, PROFILE_KINDS, BASIC_PPROF, path,
                           memory={"cuMemAlloc": [2, MIB + 65536, 0, 0]})


def case_fork(a):
    # A fork child's stop must neither wait for nor report the parent's capture (whose worker
    # is not in the child), and its start is refused: the agent is dormant there.
    rc, out, err = run(["fork"], a.prog, {"GPUPROF_TRACE_FORMAT": "json",
                                          "GPUPROF_STACKS": "all"}, preload=a.agent)
    check(rc == 0, f"program exited {rc}")
    check("fork: start 0\n" in out and "fork: child stop -2, start -19\n" in out and
          "fork: child exited 0\n" in out and "fork: stop 0\n" in out, f"fork results: {out!r}")
    path = one_trace(".json")
    if path:
        check_json_basic(path, "api")


def case_api_absent(a):
    rc, out, err = run(["api"], a.prog, {"GPUPROF_TRACE_FORMAT": "json"})
    check(rc == 0 and "api: not available" in out and "basic: done" in out,
          f"program exited {rc}: {out!r}")
    check(traces() == [], f"a capture was written: {traces()}")


def memory_case(a, mode, gpu_only):
    env = {"GPUPROF_TRACE_FORMAT": "json", "GPUPROF_MODE": mode}
    if gpu_only:
        env["GPUPROF_GPU_ONLY"] = "1"
    rc, out, err = run(["memory"], a.prog, env, preload=a.agent)
    check(rc == 0 and "memory: start 0" in out and "memory: stop 0" in out,
          f"program exited {rc}: {out!r}")
    path = one_trace(".json")
    if not path or validate(path) is None:
        return
    c = content_json(path)
    check(c["memory"] == MEMORY_COUNTER[mode], f"{path}: memory counter {c['memory']}, "
          f"expected {MEMORY_COUNTER[mode]}")
    # Allocated during the capture and live at its end, by the allocating call (GPU-only: by
    # kind, no stack). pre is in use in neither: freed inside the window.
    leaf = "device" if gpu_only else "cuMemAlloc"
    check_pprof_values(path, ["gpu_memory"], {}, path, leaf_only=gpu_only,
                       memory={leaf: MEMORY_ALLOC + MEMORY_INUSE})


def case_memory_ondemand(a):
    memory_case(a, "ondemand", False)


def case_memory_continuous(a):
    memory_case(a, "continuous", False)


def case_memory_gpu_only(a):
    memory_case(a, "ondemand", True)


def case_run_cli(a):
    """`gpuprof run --output DIR -- prog` with a capture at start: the trace and its three
    profiles land in DIR, under one stem."""
    if not check(a.gpuprof, "--gpuprof not given"):
        return
    out = os.path.join(os.path.dirname(out_dir()), "run-output")
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, GPUPROF_CAPTURE_ON_START="60s", GPUPROF_TRACE_FORMAT="json",
               GPUPROF_STACKS="all")
    env.pop("CUDA_INJECTION64_PATH", None)  # gpuprof run sets it
    r = subprocess.run([a.gpuprof, "run", "--output", out, "--", a.prog, "basic"], env=env,
                       capture_output=True, text=True, timeout=120)
    sys.stderr.write(r.stderr)
    check(r.returncode == 0 and "basic: done" in r.stdout, f"gpuprof run exited {r.returncode}")
    files = sorted(os.listdir(out)) if os.path.isdir(out) else []
    trace = [f for f in files if f.endswith("-capture.json")]
    if not check(len(trace) == 1, f"{out}: capture files {files}"):
        return
    path = os.path.join(out, trace[0])
    stem = trace[0][:-len(".json")]
    check([f for f in files if f.startswith(stem)] ==
          sorted([trace[0]] + [f"{stem}-{k}.pb.gz" for k in PROFILE_KINDS]),
          f"{out}: files of the capture {files}")
    check_json_basic(path, "start")
    check_pprof_values(path, PROFILE_KINDS, BASIC_PPROF, path,
                       memory={"cuMemAlloc": [2, MIB + 65536, 0, 0]})


# capture_prog late: n k_many launches in the window, of which CUPTI's worker hands the first
# full buffers over only after the end's first flush returned (FAKEGPU_CUPTI_FAULT=
# late_delivery: at the next flush). 64 KiB buffers hold about 250 launches, so the held ones
# are several hundred of the n; k_after bursts around the stop are not counted.
LATE_LAUNCHES = 2000


def case_late_delivery(a):
    rc, out, err = run(["late", str(LATE_LAUNCHES)], a.prog, {
        "GPUPROF_TRACE_FORMAT": "json", "GPUPROF_STACKS": "all",
        "GPUPROF_BUFFER_SIZE": "64K", "GPUPROF_FLUSH_INTERVAL": "60s",
        "FAKEGPU_CUPTI_FAULT": "late_delivery"}, preload=a.agent)
    check(rc == 0, f"program exited {rc}")
    # Held (1) when the stop began: the end's flushes are the first ones after the take.
    check("late: start 0\n" in out and "late: held 1\n" in out and "late: stop 0\n" in out
          and f"late: {LATE_LAUNCHES} launches\n" in out, f"late results: {out!r}")
    path = one_trace(".json")
    if not path or validate(path) is None:
        return
    c = content_json(path)
    got = c["gpu"][("stream 7", "k_many", 2000)]
    check(got == LATE_LAUNCHES, f"{path}: {got} k_many kernels, expected {LATE_LAUNCHES} "
          f"(the late buffers missed the capture)")
    flows = c["flows"][("main", "cuLaunchKernel", "stream 7", "k_many")]
    check(flows == LATE_LAUNCHES, f"{path}: {flows} launch flows to k_many, expected "
          f"{LATE_LAUNCHES}")
    meta = c["doc"]["metadata"]
    check(meta.get("dropped_records") == 0, f"{path}: dropped_records "
          f"{meta.get('dropped_records')}")
    prof = capture_profiles(path).get("gpu_time")
    if check(prof is not None, f"{path}: no gpu_time profile"):
        got = by_leaf(read_capture_profile(prof, "gpu_time")).get("[gpu] k_many")
        want = [LATE_LAUNCHES, LATE_LAUNCHES * 2000]
        check(got == want, f"{prof}: k_many {got}, expected {want}")


CASES = {n[5:]: f for n, f in globals().items() if n.startswith("case_")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("--prog", required=True)
    ap.add_argument("--proto", required=True)
    ap.add_argument("--protoc", default="")
    ap.add_argument("--agent", required=True)
    ap.add_argument("--gpuprof", default="")
    a = ap.parse_args()
    if not a.protoc or a.protoc.endswith("NOTFOUND"):
        a.protoc = shutil.which("protoc")
    CASES[a.case](a)
    if failures:
        print(f"{len(failures)} checks failed", file=sys.stderr)
        return 1
    print(f"capture case {a.case}: all checks passed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

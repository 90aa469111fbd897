#!/usr/bin/env python3
"""Runs nvtx_prog under the agent on the simulated GPU and checks the NVTX in its capture.

nvtx_prog (same directory) uses NVIDIA's nvtx3 headers with NVTX_INJECTION64_PATH set to the
agent, and takes one public-API capture. Every NVTX range, mark and start/end range it makes
inside the capture must be in the trace exactly once, with its name, category (the domain;
"nvtx" for the default one), track, nesting with the thread's API calls and duration bounds;
nothing from before the capture (before cuInit, a range open at its start), after it, or still
open at its end. The JSON goes through tests/trace/validate_trace.py (strict nesting on every
track), the .pftrace through protoc --decode against export/proto/perfetto_trace.proto.

Cases: json, perfetto (the same checks in both encodings), ondemand (GPUPROF_MODE=ondemand),
gpu_only (a GPU-only capture: no NVTX, no NVTX event callbacks), disabled (GPUPROF_NVTX=0:
the gate is never installed), uninjected (no NVTX_INJECTION64_PATH).

Usage: check_nvtx.py --case NAME --prog nvtx_prog --proto PROTO [--protoc P] --agent SO
"""

import argparse
import collections
import decimal
import glob
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "trace"))
import check_traces  # noqa: E402
import validate_trace  # noqa: E402
from check_traces import check, fail, failures, ns_of  # noqa: E402

MS = 1000000

# (track, category, name) of the push/pop ranges, each exactly once; minimum durations (ns)
# from the sleeps inside them. Upper bound for all: the capture (seconds, not minutes).
RANGES = collections.Counter({("main", "nvtx", "step"): 1, ("main", "nvtx", "inner"): 1,
                              ("main", "NCCL", "ncclAllReduce"): 1,
                              ("main", "nvtx", "ex_range"): 1,
                              ("main", "nvtx", "[nvtx: unicode message]"): 1})
MIN_NS = {"step": 3 * MS, "inner": 1 * MS, "ex_range": 1 * MS, "ncclAllReduce": 1,
          "cross": 3 * MS, "span2": 2 * MS}
MARKS = collections.Counter({("main", "nvtx", "mark_a"): 1, ("main", "NCCL", "nccl_mark"): 1,
                             ("main", "nvtx", "[nvtx: unicode message]"): 1})
# (lane track, category, name, start thread, end thread)
SPANS = collections.Counter({("NVTX start/end", "nvtx", "cross", "main", "ender"): 1,
                             ("NVTX start/end 2", "NCCL", "span2", "main", "main"): 1})
NEVER = {"before_cuinit", "open_at_start", "open_at_end", "after"}


def run(a, env_extra, args=()):
    env = dict(os.environ)
    out = env["GPUPROF_OUTPUT_DIR"]
    shutil.rmtree(out, ignore_errors=True)
    env["LD_PRELOAD"] = a.agent
    if "ASAN_OPTIONS" in env:  # the agent is preloaded before the sanitizer runtime
        env["ASAN_OPTIONS"] += ":verify_asan_link_order=0"
    env["NVTX_INJECTION64_PATH"] = a.agent
    # The real CUPTI 13.0 crashes in its NVTX calls without a session: the agent must not
    # pass any on before it is active (agent/nvtx.h).
    env["FAKEGPU_CUPTI_FAULT"] = "nvtx_needs_session"
    env.update(env_extra)
    for k in [k for k, v in env_extra.items() if v is None]:
        del env[k]
    r = subprocess.run([a.prog] + list(args), env=env, capture_output=True, text=True,
                       timeout=60)
    sys.stderr.write(r.stderr)
    check(r.returncode == 0, f"nvtx_prog exited with {r.returncode}")
    check("fork child: 0" in r.stdout, "a forked child's NVTX calls did not return")
    check("FATAL" not in r.stderr, "the simulator reported a rule violation")
    files = sorted(f for f in glob.glob(os.path.join(out, "gpuprof-*-capture*"))
                   if not f.endswith(".pb.gz"))
    check(len(files) == 1, f"expected one capture file, found {files}")
    lines = dict(line.split(": ", 1) for line in r.stdout.splitlines() if ": " in line)
    return (files[0] if files else None), lines


def inside(a, b):
    """Slice a = (start, end) lies within b."""
    return b[0] <= a[0] and a[1] <= b[1]


def check_content(c, where):
    """c: {"ranges": {(track, cat, name): [(s, e)]}, "api": {(track, name): [(s, e)]},
    "marks": Counter, "spans": {(lane, cat, name, st, et): [(s, e)]}}."""
    got = collections.Counter({k: len(v) for k, v in c["ranges"].items()})
    check(got == RANGES, f"{where}: NVTX ranges: missing {dict(RANGES - got)}, "
          f"extra {dict(got - RANGES)}")
    check(c["marks"] == MARKS, f"{where}: NVTX marks {dict(c['marks'])}")
    got = collections.Counter({k: len(v) for k, v in c["spans"].items()})
    check(got == SPANS, f"{where}: NVTX start/end ranges: missing {dict(SPANS - got)}, "
          f"extra {dict(got - SPANS)}")
    names = {k[-3] if len(k) == 5 else k[2] for k in list(c["ranges"]) + list(c["spans"])}
    check(not names & NEVER, f"{where}: ranges from outside the capture: {names & NEVER}")
    for k, lst in list(c["ranges"].items()) + list(c["spans"].items()):
        name = k[2]
        for s, e in lst:
            check(MIN_NS.get(name, 0) <= e - s < 10 ** 10,
                  f"{where}: {name} lasts {e - s} ns, expected at least {MIN_NS.get(name)}")
    if got != SPANS or collections.Counter({k: len(v) for k, v in c["ranges"].items()}) != RANGES:
        return
    step = c["ranges"][("main", "nvtx", "step")][0]
    inner = c["ranges"][("main", "nvtx", "inner")][0]
    allreduce = c["ranges"][("main", "NCCL", "ncclAllReduce")][0]
    check(inside(inner, step) and inner != step, f"{where}: inner {inner} not inside step {step}")
    wide = c["ranges"][("main", "nvtx", "[nvtx: unicode message]")][0]
    ex = c["ranges"][("main", "nvtx", "ex_range")][0]
    check(inside(wide, ex) and ex[1] > wide[1], f"{where}: the wide range {wide} not inside "
          f"ex_range {ex}")
    api = c["api"]
    for call in ("cuMemAlloc", "cuMemFree"):
        check(any(inside(x, inner) for x in api.get(("main", call), [])),
              f"{where}: {call} not inside the range inner")
    launches = sorted(api.get(("main", "cuLaunchKernel"), []))
    check(len(launches) == 2, f"{where}: cuLaunchKernel slices {launches}")
    if len(launches) == 2:
        check(inside(launches[0], step) and not inside(launches[0], inner),
              f"{where}: the first launch is not inside step (outside inner)")
        check(inside(launches[1], allreduce),
              f"{where}: the NCCL launch is not inside the ncclAllReduce range")
    check(any(inside(x, step) for x in api.get(("main", "cuStreamSynchronize"), [])),
          f"{where}: cuStreamSynchronize not inside step")
    cross = c["spans"][("NVTX start/end", "nvtx", "cross", "main", "ender")][0]
    span2 = c["spans"][("NVTX start/end 2", "NCCL", "span2", "main", "main")][0]
    check(span2[0] < cross[1] < span2[1], f"{where}: span2 {span2} does not overlap cross {cross}")


def content_json(path):
    doc = json.loads(open(path, "rb").read(), parse_float=decimal.Decimal)
    events = doc["traceEvents"]
    pid = doc["metadata"]["pid"]
    tnames = {e["tid"]: e["args"]["name"] for e in events
              if e.get("ph") == "M" and e["name"] == "thread_name" and e["pid"] == pid}
    c = {"ranges": collections.defaultdict(list), "api": collections.defaultdict(list),
         "marks": collections.Counter(), "spans": collections.defaultdict(list),
         "meta": doc["metadata"]}
    for e in events:
        if e.get("pid") != pid or e.get("ph") not in ("X", "i"):
            continue
        tn = tnames.get(e["tid"], f"thread {e['tid']}")
        if e["ph"] == "i":
            c["marks"][(tn, e["cat"], e["name"])] += 1
            continue
        s = ns_of(e["ts"])
        iv = (s, s + ns_of(e["dur"]))
        if e["cat"] == "cuda_api":
            c["api"][(tn, e["name"])].append(iv)
        elif tn.startswith("NVTX start/end"):
            c["spans"][(tn, e["cat"], e["name"], tnames.get(e["args"]["start_tid"]),
                        tnames.get(e["args"]["end_tid"]))].append(iv)
        else:
            c["ranges"][(tn, e["cat"], e["name"])].append(iv)
    return c


def content_pftrace(path, proto, protoc):
    trace = check_traces.decode_pftrace(path, proto, protoc)
    if trace is None:
        return None
    tracks, slices, counters, instants, open_ = check_traces.rebuild(trace, path)
    check(not any(open_.values()), f"{path}: slices left open")
    one = check_traces.one
    threads = {one(one(d, "thread"), "tid"): one(one(d, "thread"), "thread_name")
               for d in tracks.values() if "thread" in d}

    def tname(uuid):
        d = tracks[uuid]
        return one(one(d, "thread"), "thread_name") if "thread" in d else one(d, "name")

    c = {"ranges": collections.defaultdict(list), "api": collections.defaultdict(list),
         "marks": collections.Counter(), "spans": collections.defaultdict(list)}
    for uuid, lst in slices.items():
        tn = tname(uuid)
        if tn.startswith("stream") or tn.startswith("context") or "GPU" in tn:
            continue
        for name, s, e, b in lst:
            if b["cat"] == "cuda_api":
                c["api"][(tn, name)].append((s, e))
            elif tn.startswith("NVTX start/end"):
                c["spans"][(tn, b["cat"], name, threads.get(int(b["args"]["start_tid"])),
                            threads.get(int(b["args"]["end_tid"])))].append((s, e))
            elif b["cat"] not in ("cuda_sync", "kernel", "gpu_memcpy", "gpu_memset", "nccl"):
                c["ranges"][(tn, b["cat"], name)].append((s, e))
    for ins in instants:
        if ins.get("track") in tracks and "thread" in tracks[ins["track"]]:
            c["marks"][(tname(ins["track"]), ins["cat"], ins["name"])] += 1
    return c


def validate(path):
    rep = validate_trace.Report()
    s = validate_trace.validate(path, rep)
    for e in rep.errors:
        fail(f"{path}: validator: {e}")
    return s


def check_enables(lines, before, during, after):
    got = [lines.get(f"nvtx enables {w}", "?") for w in ("before", "during", "after")]
    check(got == [str(before), str(during), str(after)],
          f"NVTX callbacks enabled before/during/after the capture: {got}, expected "
          f"{[before, during, after]}")


def full_case(a, env, fmt):
    path, lines = run(a, dict(env, GPUPROF_TRACE_FORMAT=fmt))
    check(lines.get("capture start") == "0" and lines.get("capture stop") == "0",
          f"capture start/stop: {lines}")
    # The two registration callbacks always; during the capture also the 16 event ones.
    check_enables(lines, 2, 18, 2)
    if not path:
        return
    if fmt == "json":
        validate(path)
        c = content_json(path)
        check_content(c, path)
        meta = c["meta"]
        check((meta.get("nvtx_unmatched"), meta.get("nvtx_crossed"), meta.get("nvtx_dropped")) ==
              (1, 0, 0), f"{path}: nvtx metadata {meta}")
    else:
        if not check(a.protoc, "protoc not found (Debian package protobuf-compiler)"):
            return
        c = content_pftrace(path, a.proto, a.protoc)
        if c is not None:
            check_content(c, path)


def no_nvtx_case(a, env, args, enables):
    path, lines = run(a, dict(env, GPUPROF_TRACE_FORMAT="json"), args)
    check(lines.get("capture start") == "0", f"capture start: {lines}")
    check_enables(lines, *enables)
    if not path or validate(path) is None:
        return
    c = content_json(path)
    n = sum(len(v) for v in c["ranges"].values()) + sum(c["marks"].values()) + \
        sum(len(v) for v in c["spans"].values())
    check(n == 0, f"{path}: NVTX in the trace: {dict(c['ranges'])} {dict(c['marks'])} "
          f"{dict(c['spans'])}")
    if args:  # GPU-only: no API slices either
        check(not c["api"], f"{path}: API slices in a GPU-only capture")
    else:
        check(c["api"], f"{path}: no API slices")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True)
    ap.add_argument("--prog", required=True)
    ap.add_argument("--proto", required=True)
    ap.add_argument("--protoc", default="")
    ap.add_argument("--agent", required=True)
    a = ap.parse_args()
    if not a.protoc or a.protoc.endswith("NOTFOUND"):
        a.protoc = shutil.which("protoc")
    if a.case == "json":
        full_case(a, {}, "json")
    elif a.case == "perfetto":
        full_case(a, {}, "perfetto")
    elif a.case == "ondemand":
        full_case(a, {"GPUPROF_MODE": "ondemand"}, "json")
    elif a.case == "gpu_only":
        no_nvtx_case(a, {}, ["gpu-only"], (2, 2, 2))
    elif a.case == "disabled":
        no_nvtx_case(a, {"GPUPROF_NVTX": "0"}, [], (0, 0, 0))
    elif a.case == "uninjected":
        no_nvtx_case(a, {"NVTX_INJECTION64_PATH": None}, [], (2, 18, 2))
    else:
        fail(f"unknown case {a.case}")
    if failures:
        print(f"{len(failures)} failure(s)", file=sys.stderr)
        return 1
    print(f"nvtx {a.case}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Runs sync_overlap under the agent (a capture from the start) and checks its trace: THREADS
threads synchronize one stream at the same time, ROUNDS times.

* JSON: validate_trace.py's rules (Perfetto's importer: every track strictly nested);
  .pftrace: decoded with protoc and rebuilt with the importer's rules (check_traces.rebuild).
* Every cuStreamSynchronize call of thread syncer<i> is one API slice on that thread's track,
  and exactly one cudaStreamSynchronize sync slice with the same correlation id, on a track of
  the kernels' stream ("stream N sync", "stream N sync 2", ...), inside the call's slice.
* The waits of a round all overlap (the simulator's 300 ms kernel makes each one wait), so the
  stream has THREADS sync tracks, and no two slices of a sync track overlap or nest.

Usage: check_sync_overlap.py --prog sync_overlap --format json|perfetto --threads N --rounds R
                             --proto PROTO [--protoc P]
The environment (LD_LIBRARY_PATH, CUDA_INJECTION64_PATH, GPUPROF_OUTPUT_DIR, ...) comes from
ctest (tests/lib/GpuprofTest.cmake).
"""

import argparse
import collections
import glob
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "trace"))
import check_traces  # noqa: E402
import validate_trace  # noqa: E402

fail, check, one = check_traces.fail, check_traces.check, check_traces.one


def json_slices(path):
    """[(track name, process name, name, start ns, end ns, correlation)] of every slice."""
    rep = validate_trace.Report()
    summary = validate_trace.validate(path, rep)
    for e in rep.errors:
        fail(f"{path}: validator: {e}")
    if summary is None:
        return []
    events = check_traces.load_json_events(path)["traceEvents"]
    base = int(check_traces.load_json_events(path)["metadata"]["base_time_ns"])
    pname = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    tname = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    out = []
    for e in events:
        if e["ph"] != "X":
            continue
        s = base + check_traces.ns_of(e["ts"])
        out.append((tname.get((e["pid"], e["tid"]), "?"), pname.get(e["pid"], "?"), e["name"], s,
                    s + check_traces.ns_of(e["dur"]), e.get("args", {}).get("correlation")))
    return out


def pftrace_slices(path, proto, protoc):
    trace = check_traces.decode_pftrace(path, proto, protoc)
    if trace is None:
        return []
    tracks, slices, counters, instants, open_ = check_traces.rebuild(trace, path)
    check(not any(open_.values()), f"{path}: slices left open")
    out = []
    for uuid, lst in slices.items():
        d = tracks[uuid]
        if "thread" in d:
            tn, pn = one(one(d, "thread"), "thread_name"), "host"
        else:
            tn = one(d, "name")
            pn = one(tracks.get(one(d, "parent_uuid"), {}), "name", "?")
        for name, s, e, b in lst:
            corr = b["args"].get("correlation", b["corr"])
            out.append((tn, pn, name, s, e, int(corr) if corr is not None else None))
    return out


def check_trace(path, got, threads, rounds):
    calls = [g for g in got if g[0].startswith("syncer") and g[2] == "cuStreamSynchronize"]
    per_thread = collections.Counter(g[0] for g in calls)
    want = {f"syncer{i}": rounds for i in range(threads)}
    check(dict(per_thread) == want, f"{path}: cuStreamSynchronize calls per thread "
          f"{dict(per_thread)}, expected {want}")
    kernels = {g[0] for g in got if g[2] == "k_wait"}
    check(len(kernels) == 1, f"{path}: k_wait on tracks {kernels}")
    stream = next(iter(kernels), "stream ?")
    syncs = collections.defaultdict(list)
    for g in got:
        if g[2] == "cudaStreamSynchronize":
            syncs[g[5]].append(g)
    check(len(syncs) == threads * rounds and
          sum(len(v) for v in syncs.values()) == threads * rounds,
          f"{path}: {sum(len(v) for v in syncs.values())} sync slices with {len(syncs)} "
          f"correlation ids, expected {threads * rounds}")
    for tn, pn, name, s, e, corr in calls:
        lst = syncs.pop(corr, [])
        if not check(len(lst) == 1, f"{path}: {tn}'s call {corr} has {len(lst)} sync slices"):
            continue
        stn, spn, _, ss, se, _ = lst[0]
        check(stn == f"{stream} sync" or stn.startswith(f"{stream} sync "),
              f"{path}: {tn}'s sync {corr} on track {stn}, not one of {stream}'s")
        check(spn.startswith("GPU 0"), f"{path}: {tn}'s sync {corr} in process {spn}")
        check(s <= ss and se <= e, f"{path}: {tn}'s sync {corr} [{ss}, {se}] outside its call "
              f"[{s}, {e}]")
    check(not syncs, f"{path}: sync slices of no call: {sorted(syncs)[:5]}")
    tracks = collections.defaultdict(list)
    for g in got:
        if g[2] == "cudaStreamSynchronize":
            tracks[g[0]].append((g[3], g[4], g[5]))
    check(len(tracks) == threads, f"{path}: {len(tracks)} sync tracks {sorted(tracks)}, "
          f"expected {threads} (one per wait in progress at once)")
    for tn, spans in tracks.items():
        spans.sort()
        for a, b in zip(spans, spans[1:]):
            check(b[0] >= a[1], f"{path}: {tn}: sync {b[2]} overlaps sync {a[2]}")
    # The overlap the test is about: the waits of each round share an instant.
    waits = sorted((g[3], g[4]) for g in got if g[2] == "cudaStreamSynchronize")
    for r in range(rounds):
        rnd = waits[r * threads:(r + 1) * threads]
        check(rnd and max(s for s, e in rnd) < min(e for s, e in rnd),
              f"{path}: the waits of round {r} do not overlap: {rnd}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prog", required=True)
    ap.add_argument("--format", choices=("json", "perfetto"), required=True)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--proto", required=True)
    ap.add_argument("--protoc", default="protoc")
    a = ap.parse_args()
    if not a.protoc or a.protoc.endswith("NOTFOUND"):
        a.protoc = shutil.which("protoc")
    out = os.environ["GPUPROF_OUTPUT_DIR"]
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, GPUPROF_CAPTURE_ON_START="60s", GPUPROF_TRACE_FORMAT=a.format)
    r = subprocess.run([a.prog, str(a.threads), str(a.rounds)], env=env, capture_output=True,
                       text=True, timeout=120)
    sys.stderr.write(r.stderr)
    check(r.returncode == 0 and "sync_overlap: done" in r.stdout, f"program exited {r.returncode}")
    suffix = ".json" if a.format == "json" else ".pftrace"
    files = [f for f in glob.glob(os.path.join(out, "gpuprof-*-capture*" + suffix))]
    if check(len(files) == 1, f"capture files {files}"):
        if a.format == "json":
            got = json_slices(files[0])
        elif check(a.protoc, "protoc not found: the .pftrace cannot be checked"):
            got = pftrace_slices(files[0], a.proto, a.protoc)
        else:
            got = []
        check_trace(files[0], got, a.threads, a.rounds)
    if check_traces.failures:
        print(f"{len(check_traces.failures)} failure(s)", file=sys.stderr)
        return 1
    print("sync overlap: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

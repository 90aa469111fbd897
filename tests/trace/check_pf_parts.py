#!/usr/bin/env python3
"""Runs trace_pf_parts and checks its native Perfetto trace slice by slice: the protobuf writer
assembles hot packets from cached parts (export/perfetto.c), and every slice must still carry
exactly what was written: its track, name, start and end, category, correlation id, launch
string (or graph arguments) and flow, as the importer rebuilds them (check_traces.rebuild).
Both the parts path and the whole-message fallbacks must have been taken."""

import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_traces  # noqa: E402

BASE = check_traces.BASE
PID = check_traces.PID
gpu_pid = check_traces.gpu_pid
fail, check = check_traces.fail, check_traces.check
PARTS_CACHE = 512  # export/perfetto.c BODY_SETS * BODY_WAYS


def expected(log):
    """(pid, tid, corr) -> what the slice must show."""
    want = {}
    for e in log:
        if e["kind"] == "kernel":
            key = (gpu_pid(0), e["stream"], e["corr"])
            g, b = e["grid"], e["block"]
            args = {"launch": f"grid [{g[0]},{g[1]},{g[2]}] block [{b[0]},{b[1]},{b[2]}] "
                              f"registers {e['regs']} shared_mem {e['smem']}"}
            if e["graph"]:
                args.update(graph_id=e["graph"], graph_node_id=e["corr"])
            flows = {"flow": [], "term": [e["flow"]] if e["flow"] else []}
            cat = "kernel"
        else:
            key = (PID, e["tid"], e["corr"])
            args = {}
            flows = {"flow": [e["flow"]] if e["flow"] else [], "term": []}
            cat = "cuda_api"
        check(key not in want, f"log: {key} twice")
        want[key] = {"name": e["name"], "start": e["start"], "end": e["end"], "cat": cat,
                     "args": args, **flows}
    return want


def main():
    a = check_traces.run_writer_program("parts")
    log = [json.loads(line) for line in open(os.path.join(a.outdir, "parts.log"))]
    want = expected(log)
    kernels = [e for e in log if e["kind"] == "kernel" and not e["graph"]]
    pairs = {(e["name"], tuple(e["grid"]), tuple(e["block"]), e["regs"], e["smem"])
             for e in kernels}
    # The program must overflow the parts cache, or eviction goes untested.
    check(len(pairs) > PARTS_CACHE, f"only {len(pairs)} distinct (name, launch) pairs")
    if not a.protoc:
        fail("protoc not found: install the Debian package protobuf-compiler")
        return 1

    path = os.path.join(a.outdir, "parts.pftrace")
    trace = check_traces.decode_pftrace(path, a.proto, a.protoc)
    if trace is None:
        return 1
    tracks, slices, counters, instants, open_ = check_traces.rebuild(trace, path)
    stats = check_traces.rebuild.stats
    check(not any(open_.values()), f"{path}: slices left open")
    got = {}
    for uuid, lst in slices.items():
        jt = check_traces.json_track_of(tracks, uuid)
        for name, start, end, b in lst:
            key = (jt[0], jt[1], b["corr"])
            check(key not in got, f"{path}: slice {key} twice")
            got[key] = {"name": name, "start": start - BASE, "end": end - BASE, "cat": b["cat"],
                        "args": b["args"], "flow": [int(f) for f in b["flow"]],
                        "term": [int(f) for f in b["term"]]}
    check(len(got) == len(want), f"{path}: {len(got)} slices, {len(want)} written")
    bad = [(k, want[k], got.get(k)) for k in want if got.get(k) != want[k]]
    for k, w, g in bad[:5]:
        fail(f"{path}: slice {k}: wrote {w}, reads {g}")
    check(not bad, f"{path}: {len(bad)} slices differ from what was written")

    # Both paths taken: timestamps on the tracks' clocks (the parts) and absolute ones (the
    # whole messages of late and enclosing slices), plus graph kernels.
    late = sum(1 for e in log if e["kind"] == "kernel") // 37 // 2
    check(stats["delta"] > 10000, f"{path}: only {stats['delta']} delta timestamps")
    check(stats["absolute"] > late, f"{path}: only {stats['absolute']} absolute timestamps")
    check(sum(1 for e in log if e.get("graph")) > 50, "few graph kernels")
    counts = collections.Counter(k[0] for k in got)
    print(json.dumps({"slices": dict(counts), "pairs": len(pairs), **stats}), file=sys.stderr)
    if check_traces.failures:
        print(f"{len(check_traces.failures)} checks failed", file=sys.stderr)
        return 1
    print("all parts checks passed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

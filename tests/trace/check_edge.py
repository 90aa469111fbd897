#!/usr/bin/env python3
"""Runs trace_edge and checks its traces: ties on a track, invalid UTF-8, the size cap at a new
track, and files whose writes failed part-way (they must still load)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_traces  # noqa: E402
import validate_trace  # noqa: E402

BASE = check_traces.BASE
PID = check_traces.PID
gpu_pid = check_traces.gpu_pid
fail, check, one = check_traces.fail, check_traces.check, check_traces.one

# trace_edge.c's ties(): name -> (track, start, end) in ns after BASE, as the importer must
# show them. The second slice of each pair was written after the first and touches it.
TIES = {
    "r1": ((gpu_pid(0), 1), 1000, 2000), "n1": ((gpu_pid(0), 1), 500, 999),
    "z2": ((gpu_pid(0), 2), 3000, 3000), "n2": ((gpu_pid(0), 2), 3001, 4000),
    "r3": ((gpu_pid(0), 3), 5000, 6000), "n3": ((gpu_pid(0), 3), 6000, 7000),
    "apiR": ((PID, PID), 9000, 9500), "apiN": ((PID, PID), 8000, 8999),
}
# trace_edge.c's flowties(): name -> (stream, start, end) after BASE. The second kernel of each
# stream starts in the same ns as the first, written before it: a non-empty one starts 1 ns
# later (else it would sort before the first one's flow end and take its arrow); an empty one
# stays (it sorts after that flow end, by file position).
FLOWTIES = {
    "long1": (1, 10000, 11000), "short1": (1, 10001, 10500),
    "long2": (2, 20000, 21000), "empty2": (2, 20000, 20000),
    "same3a": (3, 30000, 31000), "same3b": (3, 30001, 31000),
}
# trace_edge.c's utf8(): each byte of an invalid sequence becomes '?'.
UTF8_NAMES = {"sur???g", "over???long", "big????", "cut??", "ok\u20ac\U0001F600\x7f\x01",
              "x" * 4095 + "?", "cudaLaunchKernel"}


def validate(path, allow=()):
    rep = validate_trace.Report()
    summary = validate_trace.validate(path, rep)
    for e in rep.errors:
        if not any(a in e for a in allow):
            fail(f"{path}: validator: {e}")
    check(summary is not None, f"{path}: not loadable")
    return summary


def json_slices(summary):
    out = {}
    for r in summary["_parsed"]:
        if r["ph"] == "X":
            out[r["name"]] = r
    return out


def check_ties_json(path):
    s = validate(path)
    if not s:
        return
    ev = check_traces.load_json_events(path)["traceEvents"]
    got = {e["name"]: ((e["pid"], e["tid"]), check_traces.ns_of(e["ts"]),
                       check_traces.ns_of(e["ts"]) + check_traces.ns_of(e["dur"]))
           for e in ev if e["ph"] == "X"}
    check(got == TIES, f"{path}: slices {got}")


def check_ties_pftrace(path, proto, protoc):
    trace = check_traces.decode_pftrace(path, proto, protoc)
    if trace is None:
        return
    tracks, slices, counters, instants, open_ = check_traces.rebuild(trace, path)
    got = {}
    for uuid, lst in slices.items():
        jt = check_traces.json_track_of(tracks, uuid)
        for name, s, e, b in lst:
            got[name] = (jt, s - BASE, e - BASE)
    check(got == TIES, f"{path}: slices as the importer builds them: {got}")


def check_flowties_json(path):
    """validate() checks that each flow end binds to its own kernel as Perfetto binds it."""
    s = validate(path)
    if not s:
        return
    got = {r["name"]: (r["tid"], r["ts"] - 0, r["end"])
           for r in s["_parsed"] if r["ph"] == "X" and r["pid"] == gpu_pid(0)}
    check(got == FLOWTIES, f"{path}: kernels {got}")
    check(s["flows"] == 6, f"{path}: {s['flows']} flows")


def check_flowties_pftrace(path, proto, protoc):
    trace = check_traces.decode_pftrace(path, proto, protoc)
    if trace is None:
        return
    tracks, slices, counters, instants, open_ = check_traces.rebuild(trace, path)
    got, term = {}, {}
    for uuid, lst in slices.items():
        jt = check_traces.json_track_of(tracks, uuid)
        for name, st, e, b in lst:
            if jt[0] == gpu_pid(0):
                got[name] = (jt[1], st - BASE, e - BASE)
                term[name] = b["term"]
    check(got == FLOWTIES, f"{path}: kernels {got}")
    want = {n: [i + 1] for i, n in enumerate(FLOWTIES)}
    check(term == want, f"{path}: flow ends {term}")


def check_utf8(path):
    s = validate(path)
    if not s:
        return
    names = {r["name"] for r in s["_parsed"] if r["ph"] == "X"}
    check(names == UTF8_NAMES, f"{path}: names {sorted(names, key=len)[:6]}")
    check("th???" in s["threads"].values(), f"{path}: thread names {s['threads']}")


def check_utf8_pftrace(path, proto, protoc):
    """Protobuf strings must be UTF-8: the same '?' replacements as in JSON, in interned names
    and in the thread's descriptor."""
    with open(path, "rb") as f:
        raw = f.read()
    trace = check_traces.decode_pftrace(path, proto, protoc)
    if trace is None:
        return
    tracks, slices, counters, instants, open_ = check_traces.rebuild(trace, path)
    names = {name for lst in slices.values() for name, st, e, b in lst}
    check(names == UTF8_NAMES, f"{path}: names {sorted(names, key=len)[:6]}")
    thr = {one(one(d, "thread"), "thread_name") for d in tracks.values() if "thread" in d}
    check(thr == {"th???"}, f"{path}: thread names {thr}")
    for bad in (b"\xed\xa0\x80", b"\xe0\x80\xaf", b"\xf4\x90\x80\x80", b"\xed\xbf\xbf"):
        check(bad not in raw, f"{path}: invalid UTF-8 {bad!r} in the file")


def check_loadable(path, proto, protoc, outdir, limit=None):
    """A file whose writer failed part-way: whole events only, loadable as it is."""
    size = os.path.getsize(path)
    if limit is not None:
        check(size <= limit, f"{path}: {size} bytes, over the {limit}-byte limit")
    if path.endswith(".pftrace"):
        trace = check_traces.decode_pftrace(path, proto, protoc)
        if trace is not None:
            tracks, slices, counters, instants, open_ = check_traces.rebuild(trace, path)
            check(not any(open_.values()), f"{path}: slices left open")
            check(sum(len(v) for v in slices.values()) > 1000, f"{path}: few slices")
        return
    if path.endswith(".gz"):
        d, summary = check_traces.check_repaired_gz(path, outdir, 1000)
        check(not d.unused_data, f"{path}: bytes after the gzip stream")
        check(summary is not None, f"{path}: not loadable")
        return
    s = validate(path)
    if s:
        check(s["slices"] > 1000, f"{path}: only {s['slices']} slices")
        check(open(path, "rb").read().rstrip().endswith(b"}"),
              f"{path}: does not end on a whole event")


def main():
    a = check_traces.run_writer_program("edge")
    out = lambda n: os.path.join(a.outdir, n)  # noqa: E731

    for suffix in (".json", ".json.gz"):
        check_ties_json(out("ties" + suffix))
        check_utf8(out("utf8" + suffix))
        check_flowties_json(out("flowties" + suffix))
        for pad in range(4):
            validate(out(f"capnew-{pad}{suffix}"))
            validate(out(f"capnew2-{pad}{suffix}"))
    if a.protoc:
        check_ties_pftrace(out("ties.pftrace"), a.proto, a.protoc)
        check_flowties_pftrace(out("flowties.pftrace"), a.proto, a.protoc)
        check_utf8_pftrace(out("utf8.pftrace"), a.proto, a.protoc)
        for pad in range(4):
            for stem in ("capnew", "capnew2"):
                t = check_traces.decode_pftrace(out(f"{stem}-{pad}.pftrace"), a.proto, a.protoc)
                if t is not None:
                    check_traces.rebuild(t, out(f"{stem}-{pad}.pftrace"))
    else:
        fail("protoc not found: install the Debian package protobuf-compiler")
    for suffix in (".json", ".json.gz", ".pftrace"):
        if suffix != ".pftrace" or a.protoc:
            check_loadable(out("wfail" + suffix), a.proto, a.protoc, a.outdir, 300000 + 777)
    check_loadable(out("tailfail.json"), a.proto, a.protoc, a.outdir)

    failures = check_traces.failures
    if failures:
        print(f"{len(failures)} checks failed", file=sys.stderr)
        return 1
    print("all edge-case trace checks passed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Runs trace_sync_lanes and checks its traces: concurrent synchronization waits of one stream
never overlap or nest on a track (each wait is another thread's: none is the parent of
another), none is lost, and every one keeps its times and correlation.

JSON and gzip JSON: validate_trace.py's rules (Perfetto's importer), then each logged sync
exactly once, on a track of its stream ("stream 7 sync", "stream 7 sync 2", ...), with its
start, end, name and correlation; the slices of each sync track are disjoint; the number of
tracks per stream is the largest number of its waits in progress at once (capped at 255); the
extra tracks sort right after the stream's first sync track. Native Perfetto: rebuilt from the
packets with the importer's rules (check_traces.rebuild) and compared with the JSON.
"""

import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_traces  # noqa: E402
import validate_trace  # noqa: E402

BASE = check_traces.BASE
PID = check_traces.PID
gpu_pid = check_traces.gpu_pid
fail, check = check_traces.fail, check_traces.check
LANES = 255


def track_base(name):
    """'stream 7 sync 3' -> ('stream 7 sync', 3); 'context sync' -> ('context sync', 1)."""
    parts = name.split()
    if parts[-1].isdigit() and parts[-2] == "sync":
        return " ".join(parts[:-1]), int(parts[-1])
    return name, 1


def expected_tracks(log):
    """{(device, base track name): number of tracks} from the largest overlap per stream."""
    by = collections.defaultdict(list)
    for e in log:
        base = "context sync" if e["stream"] == 0xFFFFFFFF else f"stream {e['stream']} sync"
        by[(e["device"], base)].append((e["start"], e["end"]))
    out = {}
    for k, spans in by.items():
        most = max(sum(1 for s, e in spans if s <= t < e or s == e == t) for t, _ in spans)
        out[k] = min(most, LANES)
    return out


def check_slices(path, got, log):
    """got: [(device, track name, name, start, end, corr)] of every sync slice in the file."""
    by_corr = collections.defaultdict(list)
    for g in got:
        by_corr[g[5]].append(g)
    for e in log:
        lst = by_corr.pop(e["corr"], [])
        if not check(len(lst) == 1, f"{path}: sync {e['corr']} appears {len(lst)} times"):
            continue
        dev, track, name, s, en, _ = lst[0]
        base = "context sync" if e["stream"] == 0xFFFFFFFF else f"stream {e['stream']} sync"
        check(dev == e["device"] and track_base(track)[0] == base and name == e["name"],
              f"{path}: sync {e['corr']} is {name} on GPU {dev} {track}, not on {base}")
        if e["exact"]:
            check((s, en) == (e["start"], e["end"]),
                  f"{path}: sync {e['corr']} at [{s}, {en}], written [{e['start']}, {e['end']}]")
        else:
            check(en == e["end"] and s >= e["start"],
                  f"{path}: clamped sync {e['corr']} at [{s}, {en}] from [{e['start']}, "
                  f"{e['end']}]")
    check(not by_corr, f"{path}: syncs nobody wrote: {sorted(by_corr)[:10]}")
    per_track = collections.defaultdict(list)
    for dev, track, name, s, en, corr in got:
        per_track[(dev, track)].append((s, en, corr))
    for k, spans in per_track.items():
        spans.sort()
        for a, b in zip(spans, spans[1:]):
            # Disjoint; touching only when the earlier one is not empty (an empty slice at
            # the start of another one would be drawn inside it).
            check(b[0] > a[1] or (b[0] == a[1] and a[0] < a[1]),
                  f"{path}: GPU {k[0]} {k[1]}: sync {b[2]} [{b[0]}, {b[1]}] overlaps sync "
                  f"{a[2]} [{a[0]}, {a[1]}]")
    lanes = collections.Counter()
    names = collections.defaultdict(set)
    for dev, track in per_track:
        base, k = track_base(track)
        lanes[(dev, base)] += 1
        names[(dev, base)].add(k)
    want = expected_tracks(log)
    check(dict(lanes) == want, f"{path}: tracks per stream {dict(lanes)}, expected {want}")
    for k, ks in names.items():
        check(ks == set(range(1, len(ks) + 1)), f"{path}: {k} tracks numbered {sorted(ks)}")


def check_json(path, log):
    rep = validate_trace.Report()
    summary = validate_trace.validate(path, rep)
    for e in rep.errors:
        fail(f"{path}: validator: {e}")
    if summary is None:
        return None
    events = check_traces.load_json_events(path)["traceEvents"]
    tname = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    tsort = {(e["pid"], e["tid"]): e["args"]["sort_index"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_sort_index"}
    got = []
    for e in events:
        if e["ph"] != "X":
            continue
        check(e.get("cat") == "cuda_sync", f"{path}: {e['name']} has category {e.get('cat')}")
        dev = e["pid"] & 0xFF
        check(e["pid"] == gpu_pid(dev), f"{path}: sync on pid {e['pid']}")
        s = check_traces.ns_of(e["ts"])
        got.append((dev, tname.get((e["pid"], e["tid"]), "?"), e["name"], s,
                    s + check_traces.ns_of(e["dur"]), e["args"].get("correlation")))
    check_slices(path, got, log)
    # Sort order: a stream's sync tracks in their number order, after the stream, before the
    # next stream; context-wide ones last.
    ranks = {}
    for k, n in tname.items():
        if k in tsort:
            ranks[(k[0] & 0xFF, n)] = tsort[k]
    for (dev, n), r in ranks.items():
        base, k = track_base(n)
        if k > 1:
            check(ranks.get((dev, base), r) < r, f"{path}: {n} sorts before {base}")
            prev = f"{base} {k - 1}" if k > 2 else base
            check(ranks.get((dev, prev), r) < r, f"{path}: {n} sorts before {prev}")
    for dev, strm in ((0, 7), (0, 9)):
        nxt = (strm + 1) * 256
        for (d, n), r in ranks.items():
            if d == dev and n.startswith(f"stream {strm} sync"):
                check(r < nxt, f"{path}: {n} rank {r} not below stream {strm + 1}'s")
    ctx = [r for (d, n), r in ranks.items() if d == 1 and n.startswith("context sync")]
    others = [r for (d, n), r in ranks.items() if not n.startswith("context sync")]
    check(ctx and others and min(ctx) > max(others), f"{path}: context sync not sorted last")
    return sorted(got)


def check_pftrace(path, json_got, proto, protoc):
    trace = check_traces.decode_pftrace(path, proto, protoc)
    if trace is None:
        return
    tracks, slices, counters, instants, open_ = check_traces.rebuild(trace, path)
    check(not any(open_.values()), f"{path}: slices left open")
    got = []
    for uuid, lst in slices.items():
        d = tracks[uuid]
        parent = tracks.get(check_traces.one(d, "parent_uuid"), {})
        dev = int(check_traces.one(parent, "name", "GPU -1").split()[1])
        for name, s, e, b in lst:
            corr = b["args"].get("correlation", b["corr"])
            got.append((dev, check_traces.one(d, "name"), name, s - BASE, e - BASE,
                        int(corr) if corr is not None else None))
    if json_got is not None:
        check(sorted(got) == json_got,
              f"{path}: differs from the JSON: {sorted(set(got) ^ set(json_got))[:6]}")


def main():
    a = check_traces.run_writer_program("lanes")
    lines = [json.loads(ln) for ln in open(os.path.join(a.outdir, "syncs.log"))]
    log = [e for e in lines if "corr" in e]
    check(len(log) == 24 + 2 + 100 + 1 + 3 + 260, f"{len(log)} syncs logged")
    got = check_json(os.path.join(a.outdir, "syncs.json"), log)
    got_gz = check_json(os.path.join(a.outdir, "syncs.json.gz"), log)
    check(got == got_gz, "syncs.json.gz differs from syncs.json")
    if a.protoc:
        check_pftrace(os.path.join(a.outdir, "syncs.pftrace"), got, a.proto, a.protoc)
    else:
        fail("protoc not found: the .pftrace cannot be checked")
    if check_traces.failures:
        print(f"{len(check_traces.failures)} failure(s)", file=sys.stderr)
        return 1
    print("sync lanes: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Tests of `gpuprof merge` (cli/merge.c) and `gpuprof capture --all --merge`.

Usage:
  check_merge.py captures --gpuprof BIN --workload BIN --validator PY --proto P [--protoc B]
  check_merge.py fixture  --gpuprof BIN --fixture BIN --validator PY --proto P [--protoc B] --outdir D
  check_merge.py errors   --gpuprof BIN --fixture BIN --outdir D
  check_merge.py hostile  --gpuprof BIN --fixture BIN --outdir D [--proto P --protoc B]
  check_merge.py fuzz     --gpuprof BIN --fixture BIN --outdir D [--proto P --protoc B]

captures  two workload processes (tests/control/workload.c) under the agent are captured with
          `capture --all --merge` in json, json.gz and perfetto; each merged trace is checked
          against its inputs: every slice of each input appears once, on its input's process
          and track, with its name and absolute time in ns; every flow binds the same two
          slices as before, under an id no other input uses; GPU processes are named with
          their input's pid; validate_trace.py accepts every JSON file.
fixture   tests/trace/trace_fixture's trace (the same content in all three formats, pid 4242)
          merged with a copy of itself: the two pid-4242 inputs stay two processes; a copy
          with its base moved by 1 234 567 ns lands that much later, to the ns; the merged
          .pftrace (decoded with protoc) holds the same slices and flows as the merged JSON.
errors    inputs that are not the agent's traces, unfinished JSON, mixed families, a bad -o:
          exit status 2 and one line naming the file; a .pftrace cut inside its last packet
          is merged without that packet, with a warning.
hostile   crafted values: null/negative/overflowing times and bases, ids outside 1..2^32-1,
          track uuids and sequence ids past the writer's, pids that are not the input's: each
          refused with exit 2, one line naming the file, nothing left behind.
fuzz      mutated JSON lines (values, cuts, bytes, NULs, nesting) and .pftrace bytes (truncated
          varints, huge lengths, wrong wire types, nested garbage): exit 2 or a valid merge,
          never a crash, hang or sanitizer report (GPUPROF_FUZZ_SEED, GPUPROF_FUZZ_ITERS).
"""

import argparse
import collections
import decimal
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "trace"))
sys.path.insert(0, os.path.join(HERE, "..", "control"))
import check_traces  # noqa: E402

SEQ_STRIDE = 65536 + 3
ID_SHIFT = 32
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL: " + msg, file=sys.stderr)
    return cond


def gpu_pid(host, dev):
    return 0x40000000 | ((host & 0x3FFFFF) << 8) | (dev & 0xFF)


def ns_of(text):
    return int((decimal.Decimal(str(text)) * 1000).to_integral_value())


def load_json(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data, parse_float=decimal.Decimal)


def validate(args, path):
    r = subprocess.run([sys.executable, args.validator, path], capture_output=True, text=True)
    check(r.returncode == 0, "%s does not validate: %s %s" % (path, r.stdout[-1500:],
                                                              r.stderr[-1500:]))


def json_content(events, base, pid_map=None, id_map=None):
    """Slices and flows of a JSON trace with absolute ns times.

    slices: Counter of (pid, tid, name, cat, start, dur, correlation)
    flows: {id: (s slice, f slice)}, each end bound to the X written just before it on its
    track (the writer writes a flow right after its slice)."""
    pid_map = pid_map or (lambda p: p)
    id_map = id_map or (lambda i: i)
    slices = collections.Counter()
    flows = collections.defaultdict(dict)
    last = {}
    for e in events:
        ph = e.get("ph")
        if e.get("tid") is None:  # the importer's rule
            e = dict(e, tid=e["pid"])
        if ph == "X":
            key = (pid_map(e["pid"]), e["tid"], e["name"], e.get("cat"),
                   base + ns_of(e["ts"]), ns_of(e["dur"]),
                   id_map(e.get("args", {}).get("correlation", 0)))
            slices[key] += 1
            last[(e["pid"], e["tid"])] = key
        elif ph in ("s", "f"):
            fid = id_map(e["id"])
            check(ph not in flows[fid], "flow id %d has two %s ends" % (fid, ph))
            flows[fid][ph] = last.get((e["pid"], e["tid"]))
            check(flows[fid][ph] is not None and flows[fid][ph][4] == base + ns_of(e["ts"]),
                  "flow %d %s does not follow its slice" % (fid, ph))
    return slices, dict(flows)


def check_json_merge(args, merged, inputs):
    """Every input slice and flow is in the merged JSON, remapped, and nothing else is."""
    validate(args, merged)
    m = load_json(merged)
    meta = m["metadata"]
    base = int(meta["base_time_ns"])
    check(len(meta["inputs"]) == len(inputs), "%s lists %d inputs" % (merged, len(meta["inputs"])))
    want_s, want_f = collections.Counter(), {}
    for k, path in enumerate(inputs):
        t = load_json(path)
        ent = meta["inputs"][k]
        check(os.path.samefile(ent["file"], path), "input %d is %s" % (k, ent["file"]))
        for key in ("pid", "base_time_ns", "events", "command_line", "capture_end_ns"):
            check(ent["metadata"].get(key) == t["metadata"].get(key),
                  "input %d metadata %s: %r, file has %r" % (k, key, ent["metadata"].get(key),
                                                             t["metadata"].get(key)))
        check(int(meta["base_time_ns"]) <= int(t["metadata"]["base_time_ns"]),
              "merged base after input %d's" % k)
        pid, new = t["metadata"]["pid"], ent["merged_pid"]

        def pmap(p, pid=pid, new=new):
            if p == pid:
                return new
            check(p == gpu_pid(pid, p & 0xFF), "input pid %d" % p)
            return gpu_pid(new, p & 0xFF)

        s, f = json_content(t["traceEvents"], int(t["metadata"]["base_time_ns"]), pmap,
                            lambda i, k=k: (k << ID_SHIFT) + i if i else 0)
        check(sum(s.values()) > 0, "input %s has no slices" % path)
        want_s.update(s)
        for fid, ends in f.items():
            check(fid not in want_f, "flow id %d used by two inputs after the merge" % fid)
            want_f[fid] = ends
        names = {e["pid"]: e["args"]["name"] for e in m["traceEvents"]
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
        for p, nm in names.items():
            if p >> 30 and ((p >> 8) & 0x3FFFFF) == (new & 0x3FFFFF):
                check(("pid %d" % pid) in nm, "GPU process %r lacks 'pid %d'" % (nm, pid))
    got_s, got_f = json_content(m["traceEvents"], base)
    check(got_s == want_s, "%s: slices differ from the inputs': missing %s, extra %s" % (
        merged, list((want_s - got_s).items())[:3], list((got_s - want_s).items())[:3]))
    check(got_f == want_f, "%s: flows differ from the inputs' (%d vs %d)" % (
        merged, len(got_f), len(want_f)))
    return m


def pf_content(path, args, kmap=None):
    """Slices and flows of a .pftrace, keyed by track uuid mapped through kmap."""
    trace = check_traces.decode_pftrace(path, args.proto, args.protoc)
    tracks, slices, counters, instants, open_ = check_traces.rebuild(trace, path)
    kmap = kmap or (lambda u: u)
    out = collections.Counter()
    flows = collections.defaultdict(dict)
    for uuid, lst in slices.items():
        for name, start, end, b in lst:
            key = (kmap(uuid), name, start, end, b["corr"] or 0)  # NVTX slices have none
            out[key] += 1
            for f in b["flow"]:
                flows[f]["s"] = key
            for f in b["term"]:
                flows[f]["f"] = key
    return tracks, out, dict(flows), instants


def check_pf_merge(args, merged, inputs):
    if not args.protoc:
        check(False, "protoc not found: install protobuf-compiler")
        return None
    mtracks, got_s, got_f, instants = pf_content(merged, args)
    # merge writes its packets in deflated chunks, as the agent does (cli/merge.c chunk_flush):
    # every packet of these inputs is far below a chunk, so none stands outside one.
    layout = {}
    with open(merged, "rb") as f:
        check_traces.inflate_pftrace(f.read(), merged, layout)
    check(layout.get("chunks") and not layout.get("plain"),
          "%s: chunks and plain packets %s, expected deflated chunks only" % (merged, layout))
    want_s, want_f = collections.Counter(), {}
    pids = {}
    for k, path in enumerate(inputs):
        tracks, s, f, inst = pf_content(path, args, lambda u, k=k: k * SEQ_STRIDE + u)
        for (u, name, start, end, corr), c in s.items():
            want_s[(u, name, start, end, (k << ID_SHIFT) + corr if corr else corr)] += c
        for fid, ends in f.items():
            ends = {p: (e[0], e[1], e[2], e[3], (k << ID_SHIFT) + e[4] if e[4] else e[4])
                    for p, e in ends.items()}
            nid = (k << ID_SHIFT) + fid
            check(nid not in want_f, "flow id collides")
            want_f[nid] = ends
        for uuid, d in tracks.items():
            nd = mtracks.get(k * SEQ_STRIDE + uuid)
            if not check(nd is not None, "track %d of input %d missing" % (uuid, k)):
                continue
            proc = check_traces.one(d, "process")
            if proc is not None:
                pids[k] = check_traces.one(check_traces.one(nd, "process"), "pid")
            name = check_traces.one(d, "name", "")
            if name.startswith("GPU ") and "parent_uuid" not in d:
                start = [i for i in inst if i["name"] == "trace start"][0]
                check("pid %d" % start["args"]["pid"] in check_traces.one(nd, "name"),
                      "GPU track %r not named with its pid" % check_traces.one(nd, "name"))
    check(got_s == want_s, "%s: slices differ from the inputs': missing %s, extra %s" % (
        merged, list((want_s - got_s).items())[:3], list((got_s - want_s).items())[:3]))
    check(got_f == want_f, "%s: flows differ (%d vs %d)" % (merged, len(got_f), len(want_f)))
    check(len(set(pids.values())) == len(inputs), "host pids not distinct: %r" % pids)
    merge = [i for i in instants if i["name"] == "merged traces"]
    check(len(merge) == 1 and merge[0]["args"].get("inputs") == len(inputs),
          "no 'merged traces' instant listing %d inputs" % len(inputs))
    return mtracks, got_s, got_f


def run(args, *argv, expect=0):
    r = subprocess.run([args.gpuprof] + list(argv), capture_output=True, text=True, timeout=300)
    print("$ gpuprof %s -> %d\n%s%s" % (" ".join(argv), r.returncode, r.stdout, r.stderr))
    check(r.returncode == expect, "gpuprof %s exited %d, expected %d" % (
        " ".join(argv), r.returncode, expect))
    return r


# ---- captures ----

def scenario_captures(args):
    import run_capture  # tests/control: the workloads and the command's driver
    run_capture.WAIT_S = 30

    class A:
        pass
    a = A()
    a.gpuprof, a.workload, a.validator = args.gpuprof, args.workload, args.validator
    w = run_capture.Workloads(a, 2)
    try:
        for fmt in ("json", "json.gz", "perfetto"):
            r = w.gpuprof("capture", "--all", "--merge", "--duration", "1500ms", "--format", fmt,
                          "--output", os.path.join(w.traces, fmt))
            files = r.stdout.splitlines()
            traces = [f for f in files[:-1] if not f.endswith(".pb.gz")]
            merged = files[-1]
            check(len(traces) == 2, "%s: capture printed %d traces" % (fmt, len(traces)))
            check(os.path.basename(merged).startswith("gpuprof-merged-"),
                  "%s: last line %s is not the merged file" % (fmt, merged))
            for p in w.pids():
                mine = [f for f in traces if "-%d-" % p in os.path.basename(f)]
                check(len(mine) == 1, "%s: pid %d has %d traces" % (fmt, p, len(mine)))
            if fmt == "perfetto":
                check(merged.endswith(".pftrace"), "merged %s" % merged)
                check_pf_merge(args, merged, traces)
            else:
                check(merged.endswith(".json.gz" if fmt == "json.gz" else ".json"),
                      "merged %s" % merged)
                for t in traces:
                    validate(args, t)
                m = check_json_merge(args, merged, traces)
                pids = sorted(e["merged_pid"] for e in m["metadata"]["inputs"])
                check(pids == sorted(w.pids()), "merged pids %r, processes %r" % (pids, w.pids()))
                kernels = collections.Counter(e["name"] for e in m["traceEvents"]
                                              if e.get("cat") == "kernel")
                for kn in run_capture.KERNELS:
                    check(kernels[kn] >= 2, "%s: kernel %s %d times" % (fmt, kn, kernels[kn]))
    finally:
        w.finish()


# ---- fixture ----

def shifted_copy(src, dst, shift):
    """A copy of a closed .json trace whose base_time_ns is later by shift ns."""
    with open(src) as f:
        text = f.read()
    head, sep, tail = text.partition('"metadata":{"base_time_ns":')
    num = tail.split(",", 1)[0]
    with open(dst, "w") as f:
        f.write(head + sep + str(int(num) + shift) + tail[len(num):])


def scenario_fixture(args):
    out = args.outdir
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    r = subprocess.run([args.fixture, out], capture_output=True, text=True)
    check(r.returncode == 0, "trace_fixture failed: %s" % r.stderr[-500:])
    fx = lambda s: os.path.join(out, "fixture" + s)  # noqa: E731
    shutil.copy(fx(".json.gz"), os.path.join(out, "copy.json.gz"))
    shutil.copy(fx(".pftrace"), os.path.join(out, "copy.pftrace"))
    shifted_copy(fx(".json"), os.path.join(out, "shifted.json"), 1234567)

    # Two pid-4242 inputs, JSON and gzip JSON: two processes, ids apart.
    mj = os.path.join(out, "same.json")
    run(args, "merge", "-o", mj, fx(".json"), os.path.join(out, "copy.json.gz"))
    m = check_json_merge(args, mj, [fx(".json"), os.path.join(out, "copy.json.gz")])
    pids = [e["merged_pid"] for e in m["metadata"]["inputs"]]
    check(pids[0] == 4242 and pids[1] != 4242, "same-pid inputs merged as pids %r" % pids)
    procs = {e["pid"]: e["args"]["name"] for e in m["traceEvents"]
             if e.get("ph") == "M" and e["name"] == "process_name"}
    check(len(procs) == 6, "6 processes expected (2 x host + 2 GPUs): %r" % procs)
    check(procs.get(pids[1], "").endswith("(pid 4242)"), "renamed host: %r" % procs)
    sort = {e["pid"]: e["args"]["sort_index"] for e in m["traceEvents"]
            if e.get("ph") == "M" and e["name"] == "process_sort_index"}
    check(max(v for p, v in sort.items() if p in (pids[0], gpu_pid(pids[0], 0), gpu_pid(pids[0], 1)))
          < min(v for p, v in sort.items() if p in (pids[1], gpu_pid(pids[1], 0),
                                                    gpu_pid(pids[1], 1))),
          "processes not grouped per input: %r" % sort)

    # A later base: the second input's slices land 1 234 567 ns later, to the ns.
    ms = os.path.join(out, "shifted.json.gz")
    run(args, "merge", "-o", ms, fx(".json"), os.path.join(out, "shifted.json"))
    check_json_merge(args, ms, [fx(".json"), os.path.join(out, "shifted.json")])
    first = min(int(e["ts"].replace(".", "")) if isinstance(e["ts"], str) else ns_of(e["ts"])
                for e in load_json(ms)["traceEvents"] if e.get("ph") == "X" and
                e["pid"] != 4242 and e["pid"] >> 30 == 0)
    check(first >= 1234567, "shifted input starts at %d ns" % first)

    # The same inputs as .pftrace: the same slices and flows as the merged JSON.
    mp = os.path.join(out, "same.pftrace")
    run(args, "merge", "-o", mp, fx(".pftrace"), os.path.join(out, "copy.pftrace"))
    res = check_pf_merge(args, mp, [fx(".pftrace"), os.path.join(out, "copy.pftrace")])
    if res:
        mtracks, pf_s, pf_f = res
        js, jf = json_content(m["traceEvents"], int(m["metadata"]["base_time_ns"]))
        norm_j = collections.Counter()
        for (pid, tid, name, cat, start, dur, corr), c in js.items():
            norm_j[(pid, tid, name, start, start + dur, corr)] += c
        local = {}
        for u, d in mtracks.items():  # each input's tracks under their own uuids
            d2 = dict(d)
            if "parent_uuid" in d:
                d2["parent_uuid"] = [d["parent_uuid"][0] % SEQ_STRIDE]
            local.setdefault(u // SEQ_STRIDE, {})[u % SEQ_STRIDE] = d2
        norm_p = collections.Counter()
        for (uuid, name, start, end, corr), c in pf_s.items():
            k = uuid // SEQ_STRIDE
            track = check_traces.json_track_of(local[k], uuid % SEQ_STRIDE)
            if track is None:
                continue
            p, t = track
            if p >> 30:  # json_track_of assumes pid 4242: the merged GPU pid of input k
                p = gpu_pid(pids[k], p & 0xFF)
            else:
                p = pids[k]
            norm_p[(p, t, name, start, end, corr)] += c
        check(norm_j == norm_p, "merged .pftrace slices differ from the merged JSON's: %s / %s" % (
            list((norm_j - norm_p).items())[:3], list((norm_p - norm_j).items())[:3]))
        check(sorted(pf_f) == sorted(jf), "merged .pftrace flow ids differ from the JSON's")


# ---- errors ----

def scenario_errors(args):
    out = args.outdir
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    r = subprocess.run([args.fixture, out], capture_output=True, text=True)
    check(r.returncode == 0, "trace_fixture failed")
    p = lambda n: os.path.join(out, n)  # noqa: E731
    with open(p("notes.txt"), "w") as f:
        f.write("hello\n")
    with open(p("other.json"), "w") as f:
        json.dump({"traceEvents": [], "metadata": {"base_time_ns": 1}}, f)
    open(p("empty.json"), "w").close()
    with open(p("fixture.json")) as f:
        lines = f.read().split("\n")
    lines[5] = lines[5][:20]
    with open(p("corrupt.json"), "w") as f:
        f.write("\n".join(lines))
    pf = plain_pftrace(p("fixture.pftrace"))
    with open(p("cut.pftrace"), "wb") as f:
        f.write(pf[:-3])

    cases = [
        (["notes.txt", "fixture.json"], "notes.txt", "not a gpuprof trace"),
        (["fixture.json", "other.json"], "other.json", "not a gpuprof trace"),
        (["fixture.json", "empty.json"], "empty.json", "empty file"),
        (["fixture.json", "killed.json"], "killed.json", "was not finished"),
        (["fixture.json", "killed.json.gz"], "killed.json.gz", "was not finished"),
        (["fixture.json", "corrupt.json"], "corrupt.json", "line 6"),
        (["fixture.json", "fixture.pftrace"], "fixture.pftrace", "not both"),
        (["-o", p("x.pftrace"), "fixture.json", "fixture.json.gz"], "x.pftrace", "not converted"),
        (["-o", p("fixture.json"), "fixture.json", "fixture.json.gz"], "fixture.json",
         "is one of the inputs"),
        (["fixture.json", "fixture.json"], "fixture.json", "given twice"),
    ]
    for argv, who, what in cases:
        argv = [a if a.startswith("-") or os.path.isabs(a) else p(a) for a in argv]
        r = run(args, "merge", *argv, expect=2)
        lines = r.stderr.splitlines()
        check(len(lines) == 1 and who in lines[0] and what in lines[0],
              "merge %s: stderr %r, expected one line naming %s: %s" % (argv, r.stderr, who, what))
        check(r.stdout == "", "merge %s printed %r" % (argv, r.stdout))
    leftovers = [n for n in os.listdir(out) if n.startswith(".gpuprof-merge") or
                 n.startswith("gpuprof-merged") or n == "x.pftrace"]
    check(not leftovers, "failed merges left %r" % leftovers)
    r = run(args, "merge", expect=2)
    check("no trace files" in r.stderr, "no usage error without files")

    # A .pftrace cut inside its last packet: merged without it, one warning.
    r = run(args, "merge", "-o", p("cut-merged.pftrace"), p("fixture.pftrace"), p("cut.pftrace"))
    check("cut.pftrace: warning: the file ends inside a packet" in r.stderr,
          "no warning for the cut packet: %r" % r.stderr)
    check(r.stdout.strip() == p("cut-merged.pftrace"), "printed %r" % r.stdout)
    # The default name: next to the first input.
    r = run(args, "merge", p("fixture.json"), p("fixture.json.gz"))
    name = r.stdout.strip()
    check(os.path.dirname(name) == out and os.path.basename(name).startswith("gpuprof-merged-")
          and name.endswith(".json"), "default name %r" % name)
    validate(args, name)
    check_durable(args, out)


def check_durable(args, out):
    """Each format's merged file reaches the disk (fsync of its descriptor) before a rename or
    link gives it its name: a crash right after the merge leaves the old name or a whole file.
    Traced with strace (Debian package strace)."""
    strace = shutil.which("strace")
    if not check(strace, "strace not found (Debian package strace)"):
        return
    p = lambda n: os.path.join(out, n)  # noqa: E731
    env = dict(os.environ)
    # LeakSanitizer cannot run under ptrace (the ASan build): leaks are checked everywhere else.
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    for suffix in ("json", "json.gz", "pftrace"):
        src = "fixture." + ("json" if suffix == "json.gz" else suffix)
        other = p("durable-copy." + src.split(".", 1)[1])
        shutil.copy(p(src), other)
        dst = p("durable." + suffix)
        log = p("durable-%s.strace" % suffix)
        r = subprocess.run([strace, "-f", "-qq", "-o", log, "-e", "trace=openat,fsync,rename,link",
                            args.gpuprof, "merge", "-o", dst, p(src), other],
                           capture_output=True, text=True, timeout=120, env=env)
        check(r.returncode == 0, "merge -o %s under strace exited %d: %s" % (
            dst, r.returncode, r.stderr[-500:]))
        calls = open(log).read().splitlines()
        os.unlink(log)
        tmp_fd = None
        synced = named = False
        for c in calls:
            if "openat(" in c and ".gpuprof-merge-" in c and "= " in c:
                tmp_fd = c.rsplit("= ", 1)[1].split()[0]
            elif " fsync(" in c and tmp_fd is not None and not named:
                synced = True  # of the temporary file or its duplicate
            elif (" rename(" in c or " link(" in c) and dst in c:
                named = True
                check(synced, "%s: named before its data was fsynced: %s" % (dst, c))
        check(tmp_fd is not None and named, "%s: no temporary file renamed: %r" % (dst, calls))


# ---- hostile inputs ----

pb_varint = check_traces.encode_varint


def pb_uint(num, v):
    return pb_varint(num << 3) + pb_varint(v)


def pb_fixed64(num, v):
    return pb_varint(num << 3 | 1) + v.to_bytes(8, "little")


def pb_msg(num, body):
    return pb_varint(num << 3 | 2) + pb_varint(len(body)) + body


def pf_packet(body):
    """One Trace.packet: the .pftrace framing of a TracePacket's bytes."""
    return pb_msg(1, body)


def pf_event(seq=1, uuid=1, extra=b""):
    """A TracePacket holding an instant TrackEvent on track uuid, sequence seq."""
    return pf_packet(pb_uint(8, 1700000000000000001) + pb_uint(10, seq) +
                     pb_msg(11, pb_uint(9, 3) + pb_uint(11, uuid) + extra))


def pf_packets(data):
    """Splits a .pftrace into its packets' framed bytes."""
    return [framed for _, framed, _ in check_traces.split_packets(data, "pftrace")]


def plain_pftrace(path):
    """A .pftrace's packets with its compressed chunks inflated: the agent writes chunks, the
    cases here edit packets (and merge reads both)."""
    with open(path, "rb") as f:
        raw = f.read()
    stats = {}
    data = check_traces.inflate_pftrace(raw, path, stats)
    check(stats.get("chunks"), "%s: written without compressed chunks" % path)
    return data


def pf_chunk(packets, level=1):
    """One compressed_packets packet holding packets (framed Trace bytes), as the agent writes."""
    return pf_packet(pb_msg(50, zlib.compress(packets, level)))


def merge_expect(args, out, argv, rc, who=None, what=None):
    """gpuprof merge argv: exit status rc; on 2 one stderr line naming who (and what), no
    stdout, no output or temporary file left in out."""
    before = set(os.listdir(out))
    r = subprocess.run([args.gpuprof, "merge"] + argv, capture_output=True, text=True,
                       timeout=60)
    tag = "merge %s" % " ".join(os.path.basename(a) for a in argv)
    check(r.returncode == rc, "%s exited %d, expected %d: %s" % (tag, r.returncode, rc,
                                                                  r.stderr[-800:]))
    if rc == 2:
        lines = r.stderr.splitlines()
        check(len(lines) == 1 and (who is None or who in lines[0]) and
              (what is None or what in lines[0]),
              "%s: stderr %r, expected one line naming %s: %s" % (tag, r.stderr, who, what))
        check(r.stdout == "", "%s printed %r" % (tag, r.stdout))
        new = set(os.listdir(out)) - before
        check(not new, "%s left %r" % (tag, sorted(new)))
    return r


def scenario_hostile(args):
    """Inputs crafted to hit the merge's arithmetic and its id ranges: each is refused (exit
    2, one line naming the file, nothing left) or, where stated, merged exactly."""
    out = args.outdir
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    r = subprocess.run([args.fixture, out], capture_output=True, text=True)
    check(r.returncode == 0, "trace_fixture failed")
    p = lambda n: os.path.join(out, n)  # noqa: E731
    with open(p("fixture.json")) as f:
        text = f.read()
    base = '"base_time_ns":1700000000000000000'
    ev = '"ts":1.123,"dur":3.456,"args":{"correlation":100}'
    check(base in text and ev in text, "the fixture changed: update scenario_hostile")

    def json_case(name, old, new, what):
        with open(p(name), "w") as f:
            f.write(text.replace(old, new, 1))
        merge_expect(args, out, ["-o", p("m.json"), p("fixture.json"), p(name)], 2, name, what)

    # Values the metadata or an event may hold that no number of ns can come from.
    json_case("base-null.json", base, '"base_time_ns":null', "base_time_ns")
    json_case("base-neg.json", base, '"base_time_ns":-5', "base_time_ns")
    json_case("base-space.json", base, '"base_time_ns":" 17"', "base_time_ns")
    json_case("ts-null.json", ev, ev.replace("1.123", "null"), "ts")
    # 10^17 us: its ns do not fit 64 bits.
    json_case("ts-huge.json", ev, ev.replace("1.123", "99999999999999999"), "ts")
    # A base near 2^64 with a ts that carries it past: its absolute time does not exist.
    with open(p("ts-carry.json"), "w") as f:
        f.write(text.replace(base, '"base_time_ns":18000000000000000000', 1)
                .replace(ev, ev.replace("1.123", "1000000000000000.000"), 1))
    merge_expect(args, out, ["-o", p("m.json"), p("fixture.json"), p("ts-carry.json")], 2,
                 "ts-carry.json", "ts")
    # Ids outside 1 .. 2^32 - 1 would meet another input's after the k * 2^32 offset.
    json_case("corr-big.json", ev, ev.replace(":100}", ":4294967296}"), "correlation")
    json_case("corr-neg.json", ev, ev.replace(":100}", ":-1}"), "correlation")
    flow = '"cat":"ac2g","name":"ac2g","id":'
    check(flow in text, "the fixture has no flow")
    idx = text.index(flow) + len(flow)
    num = text[idx:].split(",", 1)[0]
    for name, v in (("id-null.json", "null"), ("id-neg.json", "-7"), ("id-zero.json", "0")):
        with open(p(name), "w") as f:
            f.write(text[:idx] + v + text[idx + len(num):])
        merge_expect(args, out, ["-o", p("m.json"), p("fixture.json"), p(name)], 2, name, "id")
    srt = '"sort_index":1}'
    check(srt in text, "the fixture has no host sort index")
    json_case("sort-huge.json", srt, '"sort_index":9223372036854775807}', "sort_index")
    # A base 40 days later than the other's: exact to the ns (validate_trace.py checks that
    # Perfetto's double reads each ts to its ns). 2^63 ns later, or 60 days: past 2^42 us,
    # where a JSON ts cannot keep its ns: refused.
    for name, shift, rc in (("late40d.json", 40 * 86400 * 10**9, 0),
                            ("late60d.json", 60 * 86400 * 10**9, 2),
                            ("late2e63.json", 2**63, 2)):
        with open(p(name), "w") as f:
            f.write(text.replace(base, '"base_time_ns":%d' % (1700000000000000000 + shift), 1))
        merge_expect(args, out, ["-o", p("late-m.json"), p("fixture.json"), p(name)], rc, name,
                     "2^42")
        if rc == 0:
            m = check_json_merge(args, p("late-m.json"), [p("fixture.json"), p(name)])
            check(int(m["metadata"]["base_time_ns"]) == 1700000000000000000, "late merge base")
    # An event without tid is on thread pid (the importer's rule): when the merge moves a
    # same-pid input to another pid, the event stays on its thread.
    with open(p("no-tid.json"), "w") as f:
        f.write(text.replace('"pid":4242,"tid":4242,' + ev, '"pid":4242,' + ev, 1))
    check(text != open(p("no-tid.json")).read(), "no event to take the tid from")
    merge_expect(args, out, ["-o", p("no-tid-m.json"), p("fixture.json"), p("no-tid.json")], 0)
    check_json_merge(args, p("no-tid-m.json"), [p("fixture.json"), p("no-tid.json")])
    # Invalid UTF-8 in a name: a merged trace no JSON reader takes.
    with open(p("utf8.json"), "wb") as f:
        f.write(text.replace('"name":"cudaLaunchKernel"', '"name":"cudaXLaunch"', 1)
                .encode("utf-8").replace(b"cudaXLaunch", b"cuda\xe9Launch"))
    merge_expect(args, out, ["-o", p("m.json"), p("fixture.json"), p("utf8.json")], 2,
                 "utf8.json", "line")

    # .pftrace: ids the arithmetic cannot keep apart, pids that are not the input's.
    pf = plain_pftrace(p("fixture.pftrace"))
    seq_stride = SEQ_STRIDE
    pf_cases = [
        ("term-flow.pftrace", pf_event(extra=pb_fixed64(48, (1 << 32) + 7)), "flow id"),
        ("flow-zero.pftrace", pf_event(extra=pb_fixed64(47, 0)), "flow id"),
        ("corr-big.pftrace", pf_event(extra=pb_uint(52, 1 << 32)), "correlation"),
        ("track-big.pftrace", pf_event(uuid=seq_stride + 2), "track uuid"),
        ("seq-big.pftrace", pf_event(seq=seq_stride + 1), "sequence"),
        ("defaults-big.pftrace",
         pf_packet(pb_uint(10, 1) + pb_msg(59, pb_msg(11, pb_uint(11, seq_stride + 2)))),
         "track uuid"),
        ("pid-other.pftrace",
         pf_packet(pb_uint(10, 1) + pb_msg(60, pb_uint(1, 900) + pb_msg(3, pb_uint(1, 999)))),
         "pid 999"),
        ("tid-other.pftrace",
         pf_packet(pb_uint(10, 1) + pb_msg(60, pb_uint(1, 901) + pb_msg(4, pb_uint(1, 998)))),
         "pid 998"),
    ]
    for name, extra, what in pf_cases:
        with open(p(name), "wb") as f:
            f.write(pf + extra)
        merge_expect(args, out, ["-o", p("m.pftrace"), p(name), p("fixture.pftrace")], 2, name,
                     what)
    # A file cut inside its first packet: refused in one line (no warning before it).
    with open(p("cut0.pftrace"), "wb") as f:
        f.write(pf[:3])
    merge_expect(args, out, ["-o", p("m.pftrace"), p("fixture.pftrace"), p("cut0.pftrace")], 2,
                 "cut0.pftrace", "not a gpuprof trace")
    # Compressed chunks (how the agent writes a .pftrace): damaged ones are refused in one
    # line; the same packets in chunks of any size merge as they would plain.
    body = pf_packets(pf)
    head, rest = b"".join(body[:3]), b"".join(body[3:])
    z = zlib.compress(rest, 1)
    chunk_cases = [
        ("chunk-cut-zlib.pftrace", head + pf_packet(pb_msg(50, z[:len(z) // 2])), "inflate"),
        ("chunk-bad-zlib.pftrace", head + pf_packet(pb_msg(50, z[:40] + bytes(20) + z[60:])),
         "inflate"),
        ("chunk-trailing.pftrace", head + pf_packet(pb_msg(50, z + b"xyz")), "inflate"),
        ("chunk-raw-deflate.pftrace", head + pf_packet(pb_msg(50, z[2:-4])), "inflate"),
        ("chunk-cut-packet.pftrace", head + pf_chunk(rest[:-5]), "cut packet"),
        ("chunk-not-packet.pftrace", head + pf_chunk(b"\x12\x01x" + rest), "cut packet"),
        ("chunk-nested.pftrace", head + pf_chunk(pf_chunk(rest)), "inside a compressed chunk"),
        ("chunk-extra-field.pftrace", head + pf_packet(pb_msg(50, z) + pb_uint(10, 1)),
         "other fields"),
        ("chunk-bomb.pftrace", head + pf_chunk(pf_packet(pb_msg(11, bytes(70 << 20)))),
         "over"),
    ]
    for name, data, what in chunk_cases:
        with open(p(name), "wb") as f:
            f.write(data)
        merge_expect(args, out, ["-o", p("m.pftrace"), p("fixture.pftrace"), p(name)], 2, name,
                     what)
    merged = []
    for name, data in (("chunked-each.pftrace", b"".join(pf_chunk(b) for b in body)),
                       ("chunked-one.pftrace", head + pf_chunk(rest, 9)),
                       ("plain.pftrace", pf)):
        with open(p(name), "wb") as f:
            f.write(data)
        merge_expect(args, out, ["-o", p("c-m.pftrace"), p(name), p("fixture.pftrace")], 0)
        trace = check_traces.decode_pftrace(p("c-m.pftrace"), args.proto, args.protoc)
        if trace is not None:
            merged.append((name, check_traces.rebuild(trace, p("c-m.pftrace"))[1]))
        os.unlink(p("c-m.pftrace"))
    for name, slices in merged[1:]:
        check(slices == merged[0][1], "%s merged to other slices than %s" % (name, merged[0][0]))
    # The same packet with ids in range merges.
    with open(p("ok.pftrace"), "wb") as f:
        f.write(pf + pf_event(extra=pb_fixed64(48, 7) + pb_uint(52, 0xFFFFFFFF)))
    merge_expect(args, out, ["-o", p("ok-m.pftrace"), p("ok.pftrace"), p("fixture.pftrace")], 0)


def scenario_fuzz(args):
    """Mutated JSON lines and .pftrace bytes merged with an intact trace: exit 2 (or 0 with a
    well-formed result), never a crash, a hang, a sanitizer report or a file left behind."""
    import random
    out = args.outdir
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    r = subprocess.run([args.fixture, out], capture_output=True, text=True)
    check(r.returncode == 0, "trace_fixture failed")
    p = lambda n: os.path.join(out, n)  # noqa: E731
    rnd = random.Random(int(os.environ.get("GPUPROF_FUZZ_SEED", "37")))
    iters = int(os.environ.get("GPUPROF_FUZZ_ITERS", "150"))
    with open(p("fixture.json"), encoding="latin-1") as f:  # bytes as they are, any mutation
        lines = f.read().split("\n")
    packets = pf_packets(plain_pftrace(p("fixture.pftrace")))
    values = ["null", "-1", "0", "1e308", "-0.0", "18446744073709551616", "1.0000", "\"x\"",
              "[]", "{}", "9223372036854775807", "-9223372036854775808", "4294967296",
              "[" * 200 + "]" * 200, "{\"a\":" * 100 + "1" + "}" * 100, "true", "1.5e3",
              "18446744073709551.615", "\"\\u0000\""]
    import re
    number = re.compile(r'(?<=[:\[,])-?[0-9][0-9.eE+-]*')

    def mutate_json():
        ls = list(lines)
        i = rnd.randrange(len(ls))
        op = rnd.randrange(7)
        s = ls[i]
        if op == 0 and s:  # a value replaced
            ms = list(number.finditer(s))
            if ms:
                mm = rnd.choice(ms)
                s = s[:mm.start()] + rnd.choice(values) + s[mm.end():]
        elif op == 1:  # cut
            s = s[:rnd.randrange(len(s) + 1)]
        elif op == 2:  # bytes flipped
            b = bytearray(s.encode())
            for _ in range(rnd.randrange(1, 4)):
                if b:
                    b[rnd.randrange(len(b))] = rnd.randrange(1, 256)
            s = b.decode("latin-1")
        elif op == 3:  # a line duplicated or removed
            if rnd.random() < 0.5:
                ls.insert(i, s)
            else:
                del ls[i]
                return ls
        elif op == 4:  # a NUL or a long run
            at = rnd.randrange(len(s) + 1)
            s = s[:at] + rnd.choice(["\0", "x" * 600000, "\\", "\"", "\n"]) + s[at:]
        elif op == 5:  # the file cut anywhere
            text = "\n".join(ls)
            return [text[:rnd.randrange(len(text))]]
        else:  # a key's value replaced
            keys = re.findall(r'"([a-z_]+)":', s)
            if keys:
                k = rnd.choice(keys)
                val = '"%s":%s' % (k, rnd.choice(values))
                s = re.sub('"%s":[^,}]*' % k, lambda _: val, s, count=1)
        ls[i] = s
        return ls

    def mutate_pf():
        ps = list(packets)
        i = rnd.randrange(1, len(ps))
        b = bytearray(ps[i])
        op = rnd.randrange(8)
        if op == 0:  # bytes flipped inside a packet
            for _ in range(rnd.randrange(1, 4)):
                b[rnd.randrange(len(b))] = rnd.randrange(256)
        elif op == 1:  # a huge length
            b = bytearray(b"\x0a" + pb_varint(rnd.choice([1 << 26, 1 << 40, (1 << 64) - 1])) +
                          bytes(b[2:]))
        elif op == 2:  # a varint cut inside a packet
            b = bytearray(pf_packet(bytes(b[2:]) + b"\x08" + b"\xff" * rnd.randrange(1, 12)))
        elif op == 3:  # a wrong wire type
            body = bytearray(pf_packets(bytes(b))[0][2:] if b[1] < 0x80 else b[3:])
            if body:
                body[0] = (body[0] & ~7) | rnd.choice([1, 3, 4, 5, 6, 7])
            b = bytearray(pf_packet(bytes(body)))
        elif op == 4:  # nested garbage: a field inside a field inside ...
            inner = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 40)))
            for _ in range(rnd.randrange(1, 60)):
                inner = pb_msg(rnd.choice([4, 11, 12, 59, 60, 3, 1]), inner)
            b = bytearray(pf_packet(inner))
        elif op == 5:  # the file cut anywhere
            data = b"".join(ps)
            return data[:rnd.randrange(1, len(data))]
        elif op == 6:  # the packets from i on in a compressed chunk, its bytes damaged
            z = bytearray(zlib.compress(b"".join(ps[i:]), 1))
            for _ in range(rnd.randrange(1, 4)):
                z[rnd.randrange(len(z))] = rnd.randrange(256)
            if rnd.random() < 0.3:
                z = z[:rnd.randrange(1, len(z))]
            return b"".join(ps[:i]) + pf_packet(pb_msg(50, bytes(z)))
        else:  # a field of a huge declared length inside the packet
            body = pb_varint(11 << 3 | 2) + pb_varint(rnd.choice([1 << 31, 1 << 62, 300]))
            b = bytearray(pf_packet(body + bytes(rnd.randrange(256) for _ in range(8))))
        ps[i] = bytes(b)
        return b"".join(ps)

    ok = {"json": 0, "pftrace": 0}
    refused = {"json": 0, "pftrace": 0}
    validated = 0
    for it in range(iters):
        fam = "json" if it % 2 == 0 else "pftrace"
        name = p("fuzz.%s" % fam)
        if fam == "json":
            data = "\n".join(mutate_json()).encode("latin-1")
            if rnd.random() < 0.25:
                data = gzip.compress(data)
                if rnd.random() < 0.5:
                    data = data[:rnd.randrange(1, len(data))]
                name = p("fuzz.json.gz")
        else:
            data = mutate_pf()
        with open(name, "wb") as f:
            f.write(data)
        dst = p("merged.%s" % fam)
        if os.path.exists(dst):
            os.unlink(dst)
        before = set(os.listdir(out))
        argv = ["-o", dst, p("fixture.%s" % fam), name] if it % 4 < 2 else \
            ["-o", dst, name, p("fixture.%s" % fam)]
        try:
            r = subprocess.run([args.gpuprof, "merge"] + argv, capture_output=True, text=True,
                               timeout=60, errors="replace")
        except subprocess.TimeoutExpired:
            check(False, "iteration %d (%s) hung" % (it, fam))
            shutil.copy(name, p("hang-%d-%s" % (it, os.path.basename(name))))
            continue
        good = r.returncode in (0, 2) and "Sanitizer" not in r.stderr and \
            "runtime error" not in r.stderr
        if not check(good, "iteration %d (%s): exit %d: %s" % (it, fam, r.returncode,
                                                                 r.stderr[-3000:])):
            shutil.copy(name, p("crash-%d-%s" % (it, os.path.basename(name))))
            continue
        left = set(os.listdir(out)) - before - {os.path.basename(dst)}
        check(not left, "iteration %d left %r" % (it, sorted(left)))
        if r.returncode == 2:
            refused[fam] += 1
            check(not os.path.exists(dst), "iteration %d: refused but wrote %s" % (it, dst))
            check(r.stdout == "" and len(r.stderr.splitlines()) == 1,
                  "iteration %d: refusal stdout %r stderr %r" % (it, r.stdout, r.stderr))
            continue
        ok[fam] += 1
        check(r.stdout.strip() == dst, "iteration %d printed %r" % (it, r.stdout))
        if fam == "json":
            try:
                load_json(dst)
            except ValueError as e:
                check(False, "iteration %d: merged JSON does not parse: %s" % (it, e))
                shutil.copy(name, p("bad-%d-%s" % (it, os.path.basename(name))))
                continue
            # A mutation the validator still accepts (a number changed in range) must merge
            # into a trace it accepts; the merge does not repair what the input broke.
            v = subprocess.run([sys.executable, args.validator, name], capture_output=True)
            if v.returncode == 0:
                validated += 1
                nfail = len(failures)
                validate(args, dst)
                if len(failures) > nfail:
                    shutil.copy(name, p("invalid-%d-%s" % (it, os.path.basename(name))))
        elif args.protoc and ok[fam] <= 5:
            check_traces.decode_pftrace(dst, args.proto, args.protoc)
    print("fuzz: merged %r, refused %r, %d valid JSON inputs validated after the merge" % (
        ok, refused, validated))
    check(refused["json"] and refused["pftrace"], "no mutation was refused")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=["captures", "fixture", "errors", "hostile", "fuzz"])
    ap.add_argument("--gpuprof", required=True)
    ap.add_argument("--workload")
    ap.add_argument("--fixture")
    ap.add_argument("--validator", default=os.path.join(HERE, "..", "trace", "validate_trace.py"))
    ap.add_argument("--proto")
    ap.add_argument("--protoc", default="protoc")
    ap.add_argument("--outdir", default=tempfile.mkdtemp(prefix="gpuprof-merge-"))
    args = ap.parse_args()
    if not args.protoc or args.protoc.endswith("NOTFOUND"):
        args.protoc = shutil.which("protoc")
    {"captures": scenario_captures, "fixture": scenario_fixture,
     "errors": scenario_errors, "hostile": scenario_hostile,
     "fuzz": scenario_fuzz}[args.scenario](args)
    if failures:
        print("%d failure(s)" % len(failures), file=sys.stderr)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Runs trace_fixture and checks every trace it wrote against what it submitted.

JSON and gzip JSON: validate_trace.py's rules, then each kernel, copy, memset, API call and
sync appears exactly once on the right (pid, tid) track with its name, start and duration to
the nanosecond (after the µs conversion), its arguments and its flow; names, sort order,
counters and metadata. Native Perfetto: decoded with `protoc --decode` against the project's
schema, rebuilt into slices (BEGIN/END per track, interned names resolved, flows, counters)
and compared with the JSON of the same run. Then the size-capped and the killed traces.
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
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import validate_trace  # noqa: E402

BASE = 1700000000000000000
PID = 4242
CAP = 256 * 1024
KERNEL_NAMES = ["_Z10sgemm_128x64PfS_S_i", "elementwise_add", "reduce<float, 256>",
                "weird\"name\\with\tctl", "k\u00e9rnel_utf8"]
COPY_NAMES = {1: "Memcpy HtoD", 2: "Memcpy DtoH", 10: "Memcpy PtoP"}
MEMORY_KINDS = {1: "pageable", 2: "pinned", 3: "device", 4: "array", 5: "managed",
                6: "device_static", 7: "managed_static"}
GPU_NAMES = {0: "GPU 0 (NVIDIA H100 80GB HBM3)", 1: "GPU 1 (NVIDIA A100-SXM4-40GB)"}

failures = []


def fail(msg):
    failures.append(msg)
    print(f"FAIL: {msg}", file=sys.stderr)


def check(cond, msg):
    if not cond:
        fail(msg)
    return cond


def gpu_pid(dev):
    return 0x40000000 | ((PID & 0x3FFFFF) << 8) | dev


def sync_tid(stream):
    return 0xFFFFFFFF if stream == 0xFFFFFFFF else (0x80000000 | stream)


def ns_of(text):
    """µs text (or float) -> exact ns."""
    return int((decimal.Decimal(str(text)) * 1000).to_integral_value())


# ---------------------------------------------------------------- expectations from the log

def expected(log):
    """Slices, flows and counters the fixture's submissions should produce."""
    slices = []  # dicts: pid, tid, name, start, end, cat, args (subset), corr
    flows = []   # (id, (pid, tid, ts) start, (pid, tid, ts) end)
    counters = collections.defaultdict(list)
    api_by_flow = {}
    gpus = []
    overlap_a = None
    for e in log:
        if e["type"] == "api":
            if e["rc"] != 0:
                continue
            start = max(e["start"], BASE)
            slices.append({"pid": PID, "tid": e["tid"], "name": e["name"], "start": start,
                           "end": e["end"], "cat": "cuda_api", "corr": e["corr"]})
            if e["flow"]:
                api_by_flow[e["flow"]] = (PID, e["tid"], start)
        elif e["type"] == "gpu":
            gpus.append(e)
            if e["start"] == BASE + 2000000:
                overlap_a = e
        elif e["type"] == "sync":
            slices.append({"pid": gpu_pid(e["device"]), "tid": sync_tid(e["stream"]),
                           "name": ("cudaStreamSynchronize" if e["stream"] != 0xFFFFFFFF
                                    else "cudaDeviceSynchronize"),
                           "start": e["start"], "end": e["end"], "cat": "cuda_sync"})
        elif e["type"] == "memory":
            counters[gpu_pid(e["device"])].append((e["ts"] - BASE, e["bytes"]))
        elif e["type"] == "nvtx" and e["kind"] == "range":
            slices.append({"pid": PID, "tid": e["tid"], "name": e["name"], "start": e["start"],
                           "end": e["end"], "cat": e["domain"] or "nvtx"})
        elif e["type"] == "nvtx" and e["kind"] == "span":
            slices.append({"pid": PID, "tid": 0xF0000000 + e["lane"], "name": e["name"],
                           "start": e["start"], "end": e["end"], "cat": e["domain"] or "nvtx",
                           "args": {"start_tid": e["tid"], "end_tid": e["end_tid"]}})
    for e in gpus:
        start, end = e["start"], e["end"]
        # The deliberate overlaps (trace_fixture.c): B starts at A's end; C, written after A,
        # ends 1 ns before A's start (ending at it would close A in the protobuf importer).
        if overlap_a and e["corr"] == overlap_a["corr"] + 1:
            start = overlap_a["end"]
        if overlap_a and e["corr"] == overlap_a["corr"] + 2:
            end = overlap_a["start"] - 1
        s = {"pid": gpu_pid(e["device"]), "tid": e["stream"], "start": start, "end": end,
             "corr": e["corr"]}
        # The device is the slice's process, not an argument; zero shared memory is left out.
        args = {"correlation": e["corr"], "stream": e["stream"], "device": None}
        if e["kind"] == 1:
            s["name"] = KERNEL_NAMES[e["kernel"]]
            s["cat"] = "kernel"
            args.update(grid=e["grid"], block=e["block"], regs=e["registers"],
                        smem=e["shared_mem"] or None)
        elif e["kind"] == 2:
            s["name"] = COPY_NAMES[e["copy_kind"]]
            s["cat"] = "gpu_memcpy"
            args["bytes"] = e["bytes"]
            args["bandwidth_gbps"] = (e["bytes"] * 1000 // (end - start)) / 1000
            if e["copy_kind"] == 10:
                args.update(src_device=0, dst_device=1)
            # Memory kinds by name; unknown (0) ones are left out.
            for side in ("src_kind", "dst_kind"):
                if e.get(side):
                    args[side] = MEMORY_KINDS[e[side]]
        else:
            s["name"] = "Memset"
            s["cat"] = "gpu_memset"
            args["bytes"] = e["bytes"]
            args["bandwidth_gbps"] = (e["bytes"] * 1000 // (end - start)) / 1000
        if e["graph_id"]:
            args.update(graph_id=e["graph_id"], graph_node_id=17)
        s["args"] = args
        slices.append(s)
        if e["flow"]:
            flows.append((e["flow"], api_by_flow[e["flow"]], (s["pid"], s["tid"], start)))
    return slices, flows, counters


# ---------------------------------------------------------------- JSON checks

def load_json_events(path):
    raw = open(path, "rb").read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw, parse_float=decimal.Decimal)


def check_json(path, log, stats):
    rep = validate_trace.Report()
    summary = validate_trace.validate(path, rep)
    for e in rep.errors:
        fail(f"{path}: validator: {e}")
    if summary is None:
        return None
    check(summary["form"] == "object" and not summary["truncated"],
          f"{path}: expected a complete object-form trace")
    doc = load_json_events(path)
    events = doc["traceEvents"]
    meta = doc["metadata"]
    exp_slices, exp_flows, exp_counters = expected(log)

    xs = [e for e in events if e["ph"] == "X"]
    by_key = collections.defaultdict(list)
    for e in xs:
        by_key[(e["pid"], e["tid"], e["name"], ns_of(e["ts"]))].append(e)
    check(len(xs) == len(exp_slices), f"{path}: {len(xs)} X slices, expected {len(exp_slices)}")
    for s in exp_slices:
        key = (s["pid"], s["tid"], s["name"], s["start"] - BASE)
        got = by_key.get(key, [])
        if not check(len(got) == 1, f"{path}: slice {s['name']!r} at {key}: found {len(got)}"):
            continue
        g = got[0]
        check(ns_of(g["dur"]) == s["end"] - s["start"],
              f"{path}: {s['name']!r} dur {g['dur']} µs, expected {s['end'] - s['start']} ns")
        check(g["cat"] == s["cat"], f"{path}: {s['name']!r} cat {g['cat']}")
        if "corr" in s:
            check(g["args"].get("correlation") == s["corr"],
                  f"{path}: {s['name']!r} correlation {g['args'].get('correlation')}")
        for k, v in s.get("args", {}).items():
            gv = g["args"].get(k)
            if isinstance(v, float):
                ok = gv is not None and abs(float(gv) - v) < 1e-9
            else:
                ok = gv == v
            check(ok, f"{path}: {s['name']!r} arg {k}={gv!r}, expected {v!r}")

    # NVTX marks: instants on their thread's track.
    want_marks = [(PID, e["tid"], e["name"], e["domain"], e["start"] - BASE) for e in log
                  if e["type"] == "nvtx" and e["kind"] == "mark"]
    got_marks = [(e["pid"], e["tid"], e["name"], e["cat"], ns_of(e["ts"])) for e in events
                 if e["ph"] == "i" and e.get("s") == "t"]
    check(got_marks == want_marks, f"{path}: NVTX marks {got_marks}, expected {want_marks}")

    # Flows: each expected pair exactly once, same id/cat/name, bp e on the end.
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    check(len(starts) == len(exp_flows) and len(ends) == len(exp_flows),
          f"{path}: {len(starts)} flow starts / {len(ends)} ends, expected {len(exp_flows)}")
    for fid, (sp, st, sts), (dp, dt, dts) in exp_flows:
        s, f = starts.get(fid), ends.get(fid)
        if not check(s is not None and f is not None, f"{path}: flow {fid} missing"):
            continue
        check((s["pid"], s["tid"], ns_of(s["ts"])) == (sp, st, sts - BASE),
              f"{path}: flow {fid} start at {s['pid']}/{s['tid']}/{s['ts']}")
        check((f["pid"], f["tid"], ns_of(f["ts"])) == (dp, dt, dts - BASE),
              f"{path}: flow {fid} end at {f['pid']}/{f['tid']}/{f['ts']}")
        check(s["cat"] == f["cat"] == "ac2g" and s["name"] == f["name"] == "ac2g"
              and f.get("bp") == "e", f"{path}: flow {fid} cat/name/bp")

    # Names and order.
    procs = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    psort = {e["pid"]: e["args"]["sort_index"] for e in events
             if e["ph"] == "M" and e["name"] == "process_sort_index"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    check(procs.get(PID) == "fixture (4242)", f"{path}: host process name {procs.get(PID)!r}")
    for d, n in GPU_NAMES.items():
        check(procs.get(gpu_pid(d)) == n, f"{path}: GPU {d} process name {procs.get(gpu_pid(d))!r}")
        check(psort.get(gpu_pid(d), -1) > psort.get(PID, 1 << 40),
              f"{path}: GPU {d} not sorted after the host")
    check(psort.get(gpu_pid(0), 0) < psort.get(gpu_pid(1), 0), f"{path}: GPU 0 after GPU 1")
    want_threads = {(PID, PID): "main", (PID, PID + 1): "worker",
                    (gpu_pid(0), 7): "stream 7", (gpu_pid(0), 13): "stream 13",
                    (gpu_pid(1), 7): "stream 7", (gpu_pid(0), sync_tid(7)): "stream 7 sync",
                    (gpu_pid(1), 0xFFFFFFFF): "context sync"}
    for k, v in want_threads.items():
        check(threads.get(k) == v, f"{path}: thread {k} named {threads.get(k)!r}, expected {v!r}")

    # Counters.
    got_c = collections.defaultdict(list)
    for e in events:
        if e["ph"] == "C":
            check(e["name"] == "GPU memory" and list(e["args"]) == ["in_use_bytes"],
                  f"{path}: counter {e['name']} {e['args']}")
            got_c[e["pid"]].append((ns_of(e["ts"]), e["args"]["in_use_bytes"]))
    check(dict(got_c) == dict(exp_counters), f"{path}: counters {dict(got_c)}")

    # Metadata.
    want_meta = {"base_time_ns": BASE, "agent": "gpuprof test", "pid": PID,
                 "command_line": 'trace_fixture --known "events"', "hostname": "testhost",
                 "clamped_slices": 3, "invalid_events": 1, "dropped_records": 3,
                 "capture_end_ns": BASE + 3000000, "capture_trigger": "test",
                 "events": stats["events"]}
    for k, v in want_meta.items():
        check(meta.get(k) == v, f"{path}: metadata {k}={meta.get(k)!r}, expected {v!r}")
    check("truncated" not in meta, f"{path}: truncated note without a cap")
    return events


# ---------------------------------------------------------------- protobuf checks

def parse_text_format(text):
    """protoc's text format -> nested dicts of lists."""
    root = collections.defaultdict(list)
    stack = [root]
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line == "}":
            stack.pop()
            continue
        if line.endswith("{"):
            node = collections.defaultdict(list)
            stack[-1][line[:-1].strip()].append(node)
            stack.append(node)
            continue
        key, _, val = line.partition(": ")
        if val.startswith('"'):
            val = unescape(val[1:-1])
        elif val.lstrip("-").isdigit():
            val = int(val)
        stack[-1][key].append(val)
    return root


def unescape(s):
    out = bytearray()
    i = 0
    simple = {"n": 10, "t": 9, "r": 13, '"': 34, "'": 39, "\\": 92, "a": 7, "b": 8, "f": 12,
              "v": 11}
    while i < len(s):
        c = s[i]
        if c != "\\":
            out += c.encode()
            i += 1
            continue
        n = s[i + 1]
        if n in simple:
            out.append(simple[n])
            i += 2
        elif n.isdigit():
            j = i + 1
            while j < len(s) and j < i + 4 and s[j] in "01234567":
                j += 1
            out.append(int(s[i + 1:j], 8))
            i = j
        elif n == "x":
            j = i + 2
            while j < len(s) and j < i + 4 and s[j] in "0123456789abcdefABCDEF":
                j += 1
            out.append(int(s[i + 2:j], 16))
            i = j
        else:
            out += n.encode()
            i += 2
    return out.decode("utf-8", "replace")


def one(node, key, default=None):
    v = node.get(key)
    return v[0] if v else default


def read_varint(data, i):
    """(value, next index); raises ValueError past the end or beyond 10 bytes."""
    v = shift = 0
    for n in range(10):
        if i >= len(data):
            raise ValueError("a varint runs past the end")
        b = data[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i
    raise ValueError("a varint of more than 10 bytes")


def split_packets(data, where):
    """A Trace's bytes -> [(offset, framed packet, packet bytes)]: every field must be packet
    (1, bytes) and the data must end on a whole packet."""
    out, i = [], 0
    while i < len(data):
        if data[i] != 0x0A:
            raise ValueError(f"{where}: byte {i} is 0x{data[i]:02x}, not a Trace.packet key")
        n, j = read_varint(data, i + 1)
        if j + n > len(data):
            raise ValueError(f"{where}: the packet at byte {i} ends past the data")
        out.append((i, data[i:j + n], data[j:j + n]))
        i = j + n
    return out


def inflate_pftrace(data, where, stats=None):
    """A .pftrace's bytes with each compressed_packets packet replaced by the packets it holds,
    as Perfetto's tokenizer reads them (proto_trace_tokenizer.cc: a zlib stream of whole
    Trace.packet fields). Strict where the writer must be: a chunk is a packet holding that one
    field and nothing else, inflates completely with nothing after the stream, holds whole
    packets and no chunk inside. stats, if given, counts "chunks" and "plain" packets."""
    out = bytearray()
    for off, framed, pkt in split_packets(data, where):
        if pkt[:2] != b"\x92\x03":
            out += framed
            if stats is not None:
                stats["plain"] = stats.get("plain", 0) + 1
            continue
        n, j = read_varint(pkt, 2)
        if j + n != len(pkt):
            raise ValueError(f"{where}: the chunk at byte {off} holds more than compressed_packets")
        d = zlib.decompressobj()  # zlib wrapper, as Perfetto's service writes (deflateInit)
        inner = d.decompress(pkt[j:])
        if not d.eof or d.unused_data:
            raise ValueError(f"{where}: the chunk at byte {off} is not one whole zlib stream")
        for _, _, ipkt in split_packets(inner, f"{where}: chunk at byte {off}"):
            if ipkt[:2] == b"\x92\x03":
                raise ValueError(f"{where}: a chunk inside the chunk at byte {off}")
        out += inner
        if stats is not None:
            stats["chunks"] = stats.get("chunks", 0) + 1
    return bytes(out)


def encode_varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def decode_pftrace(path, proto, protoc, stats=None):
    """The file's packets (compressed chunks inflated) decoded by protoc against the schema."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        data = inflate_pftrace(data, path, stats)
    except ValueError as e:
        fail(str(e))
        return None
    r = subprocess.run([protoc, f"--proto_path={os.path.dirname(proto)}",
                        "--decode=gpuprof.perfetto.Trace", proto],
                       input=data, capture_output=True)
    if not check(r.returncode == 0, f"{path}: protoc --decode failed: {r.stderr.decode()[:500]}"):
        return None
    text = r.stdout.decode()
    check("compressed_packets:" not in text, f"{path}: compressed_packets left after inflating")
    return parse_text_format(text)


def rebuild(trace, path):
    """Packets -> tracks, slices, flows, counters, metadata instants.

    Applies the importer's sequence rules: interned names, categories, annotation names and
    strings, trace_packet_defaults (timestamp clock, default track) and incremental clocks are
    scoped to a trusted_packet_sequence_id and reset by SEQ_INCREMENTAL_STATE_CLEARED; a
    timestamp on an incremental clock is a delta from the previous one on that clock (the
    first from the clock snapshot's reading), converted through the snapshot's REALTIME pair.
    """
    seqs = {}
    tracks = {}
    open_ = collections.defaultdict(list)
    slices = collections.defaultdict(list)  # uuid -> [(name, start, end, ev)]
    counters = collections.defaultdict(list)
    instants = []
    ordered = []  # (ts, file position, type, track uuid, event) of slice BEGIN/END
    seq_ok = True
    stats = {"delta": 0, "absolute": 0}

    def fresh():
        return {"names": {}, "strings": {}, "ann_names": {}, "cats": {}, "clock": None,
                "track": None, "inc": {}, "offset": {}}

    packets = trace.get("packet", [])
    for i, p in enumerate(packets):
        seq = one(p, "trusted_packet_sequence_id")
        if not seq:
            seq_ok = False
        if i == 0:
            check(seq == 1 and one(p, "sequence_flags") == 1
                  and one(p, "first_packet_on_sequence") == "true",
                  f"{path}: first packet does not clear the incremental state of sequence 1")
            check(one(one(p, "trace_packet_defaults", {}), "timestamp_clock_id") == 1,
                  f"{path}: sequence clock is not REALTIME")
            clocks = {one(c, "clock_id") for c in one(p, "clock_snapshot", {}).get("clocks", [])}
            check(clocks == {1, 6}, f"{path}: clock snapshot has clocks {clocks}")
        if (one(p, "sequence_flags", 0) & 1) or seq not in seqs:
            check(one(p, "sequence_flags", 0) & 1,
                  f"{path}: sequence {seq} used before its state was cleared")
            seqs[seq] = fresh()
        st = seqs[seq]
        for d in p.get("trace_packet_defaults", []):
            st["clock"] = one(d, "timestamp_clock_id", st["clock"])
            ted = one(d, "track_event_defaults")
            if ted is not None:
                st["track"] = one(ted, "track_uuid")
        for idata in p.get("interned_data", []):
            for key, table, field in (("event_names", "names", "name"),
                                      ("debug_annotation_string_values", "strings", "str"),
                                      ("debug_annotation_names", "ann_names", "name"),
                                      ("event_categories", "cats", "name")):
                for n in idata.get(key, []):
                    check(one(n, "iid") not in st[table],
                          f"{path}: sequence {seq}: {key} iid {one(n, 'iid')} defined twice")
                    st[table][one(n, "iid")] = one(n, field)
        for snap in p.get("clock_snapshot", []):
            real = next((one(c, "timestamp") for c in snap.get("clocks", [])
                         if one(c, "clock_id") == 1), None)
            for c in snap.get("clocks", []):
                cid = one(c, "clock_id")
                if cid >= 64:
                    check(one(c, "is_incremental") == "true" and real is not None,
                          f"{path}: sequence {seq}: clock {cid} not incremental against REALTIME")
                    st["inc"][cid] = one(c, "timestamp")
                    st["offset"][cid] = (real or 0) - one(c, "timestamp")
        for d in p.get("track_descriptor", []):
            tracks[one(d, "uuid")] = d
        for ev in p.get("track_event", []):
            uuid = one(ev, "track_uuid", st["track"])
            check(uuid in tracks, f"{path}: event on undescribed track {uuid}")
            name = one(ev, "name")
            if name is None and one(ev, "name_iid") is not None:
                name = st["names"].get(one(ev, "name_iid"))
                check(name is not None, f"{path}: sequence {seq}: name iid "
                      f"{one(ev, 'name_iid')} not interned")
            cats = [st["cats"].get(c) for c in ev.get("category_iids", [])]
            check(None not in cats, f"{path}: sequence {seq}: category iid not interned")
            cats += ev.get("categories", [])  # NVTX domains, inline
            ts = one(p, "timestamp")
            clock = one(p, "timestamp_clock_id", st["clock"])
            if clock is not None and clock >= 64:
                check(clock in st["inc"], f"{path}: sequence {seq}: clock {clock} undefined")
                st["inc"][clock] = st["inc"].get(clock, 0) + ts
                ts = st["inc"][clock] + st["offset"].get(clock, 0)
                stats["delta"] += 1
            else:
                check(clock in (None, 1), f"{path}: timestamp on clock {clock}")
                stats["absolute"] += 1
            typ = one(ev, "type")
            args = {}
            for a in ev.get("debug_annotations", []):
                an = one(a, "name") or st["ann_names"].get(one(a, "name_iid"))
                if one(a, "string_value_iid") is not None:
                    val = st["strings"].get(one(a, "string_value_iid"))
                    check(val is not None, f"{path}: sequence {seq}: string iid not interned")
                else:
                    val = next((one(a, k) for k in ("uint_value", "int_value", "double_value",
                                                    "string_value") if k in a), None)
                args[an] = val
            rec = {"name": name, "ts": ts, "flow": ev.get("flow_ids", []),
                   "term": ev.get("terminating_flow_ids", []), "args": args,
                   "corr": one(ev, "correlation_id"), "cat": ",".join(cats)}
            if typ in ("TYPE_SLICE_BEGIN", "TYPE_SLICE_END"):
                ordered.append((ts, len(ordered), typ, uuid, rec))
            elif typ == "TYPE_COUNTER":
                counters[uuid].append((ts, one(ev, "counter_value")))
            elif typ == "TYPE_INSTANT":
                instants.append(dict(rec, track=uuid))
    check(seq_ok, f"{path}: packet without a trusted_packet_sequence_id")
    # The importer sorts events by timestamp, equal timestamps in file order (TraceSorter
    # compares (ts, position)), and only then matches each END with the innermost open slice
    # of its track: a slice written after a neighbour it touches can close the wrong one.
    ordered.sort(key=lambda x: (x[0], x[1]))
    active = set()  # flow ids started and not yet terminated, in the importer's order
    for ts, _, typ, uuid, rec in ordered:
        if typ == "TYPE_SLICE_BEGIN":
            open_[uuid].append(rec)
            # track_event_parser + flow_tracker.cc: a flow id not active begins a flow, an
            # active one steps it (an arrow from the previous slice); a terminating id that is
            # not active is dropped (flow_end_without_start).
            for f in rec["flow"]:
                check(f not in active, f"{path}: flow {f} started again while active: Perfetto "
                      "draws an arrow from the earlier slice")
                active.add(f)
            for f in rec["term"]:
                check(f in active, f"{path}: flow {f} terminates before it starts in the "
                      "sorted stream: Perfetto drops it")
                active.discard(f)
        elif check(open_[uuid], f"{path}: END without BEGIN on track {uuid}"):
            b = open_[uuid].pop()
            check(ts >= b["ts"], f"{path}: END before BEGIN")
            slices[uuid].append((b["name"], b["ts"], ts, b))
    rebuild.stats = stats
    return tracks, slices, counters, instants, open_


def json_track_of(tracks, uuid):
    """The (pid, tid) the JSON writer uses for the protobuf track uuid."""
    d = tracks[uuid]
    if "thread" in d:
        t = one(d, "thread")
        return (one(t, "pid"), one(t, "tid"))
    name = one(d, "name")
    if name and name.startswith("NVTX start/end"):  # lane k: "NVTX start/end k + 1"
        parts = name.split()
        return (PID, 0xF0000000 + (int(parts[2]) - 1 if len(parts) > 2 else 0))
    parent = tracks.get(one(d, "parent_uuid"), {})
    pname = one(parent, "name", "")
    if not pname.startswith("GPU "):
        return None
    dev = int(pname.split()[1])
    if name == "context sync":
        return (gpu_pid(dev), 0xFFFFFFFF)
    if name.endswith(" sync"):
        return (gpu_pid(dev), sync_tid(int(name.split()[1])))
    if name.startswith("context sync "):  # lane k + 1 of the context-wide waits
        return (gpu_pid(dev), 0xFFFFFFFF - (int(name.split()[2]) - 1))
    if name.startswith("stream ") and " sync " in name:  # "stream 7 sync 2": lane 1
        lane = int(name.split()[3]) - 1
        return (gpu_pid(dev), 0x80000000 | (lane << 22) | (int(name.split()[1]) & 0x3FFFFF))
    if name.startswith("stream "):
        return (gpu_pid(dev), int(name.split()[1]))
    if name == "GPU memory in use":
        return (gpu_pid(dev), "memory")
    return None


def check_pftrace(path, json_events, proto, protoc, stats, log):
    layout = {}
    trace = decode_pftrace(path, proto, protoc, layout)
    if trace is None:
        return
    # The writer deflates its packets in chunks; a trace this small is one chunk.
    check(layout == {"chunks": 1}, f"{path}: chunks and plain packets {layout}, expected 1 chunk")
    tracks, slices, counters, instants, open_ = rebuild(trace, path)
    check(not any(open_.values()), f"{path}: slices left open")

    # Slices per track, as in the JSON of the same run.
    got = collections.Counter()
    for uuid, lst in slices.items():
        jt = json_track_of(tracks, uuid)
        check(jt is not None, f"{path}: unexpected track {one(tracks[uuid], 'name')}")
        for name, s, e, b in lst:
            got[(jt, name, s, e, b["cat"], b["corr"] or 0)] += 1
    want = collections.Counter()
    for e in json_events:
        if e["ph"] == "X":
            s = BASE + ns_of(e["ts"])
            want[((e["pid"], e["tid"]), e["name"], s, s + ns_of(e["dur"]), e["cat"],
                  e.get("args", {}).get("correlation", 0))] += 1
    check(got == want, f"{path}: slices differ from the JSON: missing "
          f"{list((want - got).items())[:5]}, extra {list((got - want).items())[:5]}")

    # Timestamps are deltas on the tracks' incremental clocks except for the two metadata
    # instants and eight packets earlier than the last one on their track: the late
    # overlapping kernel C (BEGIN and clamped END), the outer cudaMemcpy (BEGIN; written after
    # its inner driver call), cudaGetDevice, clamped to the base (BEGIN and END), the NVTX
    # ranges ncclAllReduce and step (BEGINs, written after what they contain) and the NVTX mark
    # (inside step, written after it).
    st = rebuild.stats
    check(st["absolute"] == 10 and st["delta"] == 208,
          f"{path}: {st['absolute']} absolute and {st['delta']} delta-encoded timestamps")

    # Kernel launch arguments are one interned string, exactly the submitted configuration.
    for uuid, lst in slices.items():
        for name, s, e, b in lst:
            if name in KERNEL_NAMES:
                launch = str(b["args"].get("launch", ""))
                k = next((k for k in log if k["type"] == "gpu" and k["kind"] == 1
                          and k["corr"] == b["corr"]), None)
                want_l = k and ("grid [%d,%d,%d] block [%d,%d,%d] registers %d shared_mem %d"
                                % tuple(k["grid"] + k["block"] + [k["registers"],
                                                                  k["shared_mem"]]))
                check(launch == want_l, f"{path}: kernel {name!r} launch {launch!r}, "
                      f"expected {want_l!r}")

    # Flows: same pairs as the JSON.
    fstart, fend = {}, {}
    for uuid, lst in slices.items():
        for name, s, e, b in lst:
            for f in b["flow"]:
                fstart[f] = (json_track_of(tracks, uuid), s)
            for f in b["term"]:
                fend[f] = (json_track_of(tracks, uuid), s)
    jstart = {e["id"]: ((e["pid"], e["tid"]), BASE + ns_of(e["ts"]))
              for e in json_events if e["ph"] == "s"}
    jend = {e["id"]: ((e["pid"], e["tid"]), BASE + ns_of(e["ts"]))
            for e in json_events if e["ph"] == "f"}
    check(fstart == jstart, f"{path}: flow starts differ from the JSON")
    check(fend == jend, f"{path}: flow ends differ from the JSON")

    # Counters.
    got_c = collections.defaultdict(list)
    for uuid, lst in counters.items():
        jt = json_track_of(tracks, uuid)
        check("counter" in tracks[uuid], f"{path}: counter on a track without counter{{}}")
        got_c[jt[0]] += [(ts - BASE, v) for ts, v in lst]
    want_c = collections.defaultdict(list)
    for e in json_events:
        if e["ph"] == "C":
            want_c[e["pid"]].append((ns_of(e["ts"]), e["args"]["in_use_bytes"]))
    check(dict(got_c) == dict(want_c), f"{path}: counters differ from the JSON")

    # Names.
    tnames = {one(d, "name") for d in tracks.values() if "name" in d}
    for n in GPU_NAMES.values():
        check(n in tnames, f"{path}: no track named {n!r}")
    thr = {one(one(d, "thread"), "thread_name") for d in tracks.values() if "thread" in d}
    check({"main", "worker"} <= thr, f"{path}: thread names {thr}")
    procs = [one(d, "process") for d in tracks.values() if "process" in d]
    check(len(procs) == 1 and one(procs[0], "pid") == PID
          and one(procs[0], "process_name") == "fixture (4242)", f"{path}: process {procs}")

    # The NVTX mark: an instant on the main thread's track, the domain as category.
    marks = [(json_track_of(tracks, i["track"]), i["name"], i["cat"], i["ts"]) for i in instants
             if i["name"] not in ("trace start", "trace end")]
    want_m = [((e["pid"], e["tid"]), e["name"], e["cat"], BASE + ns_of(e["ts"]))
              for e in json_events if e["ph"] == "i"]
    check(marks == want_m and len(marks) == 1, f"{path}: NVTX marks {marks}, JSON {want_m}")

    # Metadata instants.
    start = next((i for i in instants if i["name"] == "trace start"), None)
    end = next((i for i in instants if i["name"] == "trace end"), None)
    if check(start and end, f"{path}: metadata instants missing"):
        check(start["args"].get("base_time_ns") == str(BASE), f"{path}: base_time_ns")
        check(end["args"].get("clamped_slices") == 3, f"{path}: clamped_slices {end['args']}")
        check(end["args"].get("dropped_records") == 3, f"{path}: dropped_records")
        check(end["args"].get("events") == stats["events"], f"{path}: events")
    return trace


# ---------------------------------------------------------------- capped and killed

def check_capped(path, proto, protoc, stats):
    size = os.path.getsize(path)
    check(size <= CAP, f"{path}: {size} bytes, over the {CAP}-byte cap")
    check(size >= CAP // 2, f"{path}: {size} bytes, far below the cap")
    check(stats["stopped"] == 1 and stats["discarded"] >= 2, f"{path}: stats {stats}")
    if path.endswith(".pftrace"):
        trace = decode_pftrace(path, proto, protoc)
        if trace is None:
            return
        tracks, slices, counters, instants, open_ = rebuild(trace, path)
        check(not any(open_.values()), f"{path}: a slice was cut at the cap")
        end = next((i for i in instants if i["name"] == "trace end"), {"args": {}})
        check("size cap" in str(end["args"].get("truncated", "")),
              f"{path}: no truncation note: {end['args']}")
        check(end["args"].get("discarded_events") == stats["discarded"], f"{path}: discarded")
        return
    rep = validate_trace.Report()
    summary = validate_trace.validate(path, rep)
    for e in rep.errors:
        fail(f"{path}: validator: {e}")
    if summary:
        meta = summary["metadata"] or {}
        check("size cap" in str(meta.get("truncated", "")), f"{path}: no truncation note")
        check(meta.get("discarded_events") == stats["discarded"], f"{path}: discarded_events")
        check(meta.get("size_cap_bytes") == CAP, f"{path}: size_cap_bytes")
        check(summary["slices"] > 500, f"{path}: only {summary['slices']} slices")


def check_repaired_gz(path, outdir, min_slices, start=None):
    """A .json.gz whose stream has no end (killed, or a failed write): what its sync-flushed
    blocks hold, closed with "]}", must validate (but for the missing metadata object) and keep
    more than min_slices slices. Returns the decompressor (its unused_data for the caller) and
    the validator's summary of the repaired file (None: not loadable)."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    text = d.decompress(open(path, "rb").read())
    if start is not None:
        check(text.startswith(start), f"{path}: unexpected start")
    repaired = os.path.join(outdir, os.path.basename(path) + "-repaired.json")
    with open(repaired, "wb") as f:
        f.write(text.rstrip().rstrip(b",") + b"\n]}")
    rep = validate_trace.Report()
    summary = validate_trace.validate(repaired, rep)
    # The repaired object has no metadata object: that is the one expected error.
    for e in rep.errors:
        if "metadata" not in e:
            fail(f"{repaired}: validator: {e}")
    if summary:
        check(summary["slices"] > min_slices, f"{repaired}: only {summary['slices']} slices")
    return d, summary


def run_writer_program(flag):
    """Parses --<flag> PROGRAM --outdir --proto [--protoc], runs PROGRAM OUTDIR in a fresh
    OUTDIR and checks its exit status; returns the arguments (protoc None when not found)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--" + flag, required=True)
    ap.add_argument("--outdir", required=True)
    ap.add_argument("--proto", required=True)
    ap.add_argument("--protoc", default="protoc")
    a = ap.parse_args()
    if not a.protoc or a.protoc.endswith("NOTFOUND"):
        a.protoc = shutil.which("protoc")
    shutil.rmtree(a.outdir, ignore_errors=True)
    os.makedirs(a.outdir)
    prog = getattr(a, flag)
    r = subprocess.run([prog, a.outdir])
    check(r.returncode == 0, f"{os.path.basename(prog)} exited {r.returncode}")
    return a


def whole_packets(data):
    """How many leading bytes of data are whole Trace packets."""
    i = 0
    while i < len(data) and data[i] == 0x0A:
        try:
            n, j = read_varint(data, i + 1)
        except (IndexError, ValueError):
            break
        if j + n > len(data):
            break
        i = j + n
    return i


def check_killed(path, proto, protoc, outdir):
    if path.endswith(".pftrace"):
        # The compressor thread writes each chunk with one write(2); a SIGKILL that lands during
        # it can stop it at a page boundary (the kernel checks for fatal signals between the
        # pages it copies), so the file may end inside its last chunk. All before that write
        # must be whole packets, and only that one write (a chunk: at most CAP) may be cut.
        with open(path, "rb") as f:
            data = f.read()
        whole = whole_packets(data)
        if whole < len(data):
            check(len(data) - whole <= CAP + 16,
                  f"{path}: cut at byte {whole} of {len(data)}, not inside its last write")
            path = os.path.join(outdir, "killed-whole.pftrace")
            with open(path, "wb") as f:
                f.write(data[:whole])
        trace = decode_pftrace(path, proto, protoc)
        if trace is not None:
            tracks, slices, counters, instants, open_ = rebuild(trace, path)
            n = sum(len(v) for v in slices.values())
            check(n > 1000, f"{path}: only {n} slices survived the kill")
        return
    if path.endswith(".gz"):
        check_repaired_gz(path, outdir, 1000, start=b'{"traceEvents":[')
        return
    rep = validate_trace.Report()
    summary = validate_trace.validate(path, rep)
    for e in rep.errors:
        fail(f"{path}: validator: {e}")
    if summary:
        check(summary["form"] == "array" and summary["truncated"],
              f"{path}: expected a truncated array-form trace, got {summary['form']}")
        check(summary["slices"] > 500, f"{path}: only {summary['slices']} slices")
        text = open(path, "rb").read()
        check(text.rstrip().endswith(b"}"), f"{path}: does not end on a whole event")


def main():
    a = run_writer_program("fixture")
    log = [json.loads(l) for l in open(os.path.join(a.outdir, "fixture.log"))]
    stats = {os.path.basename(e["file"]): e for e in log if e["type"] == "stats"}

    ev_json = check_json(os.path.join(a.outdir, "fixture.json"), log, stats["fixture.json"])
    ev_gz = check_json(os.path.join(a.outdir, "fixture.json.gz"), log, stats["fixture.json.gz"])
    if ev_json is not None and ev_gz is not None:
        check(ev_json == ev_gz, "fixture.json and fixture.json.gz differ")
    if a.protoc:
        if ev_json is not None:
            check_pftrace(os.path.join(a.outdir, "fixture.pftrace"), ev_json, a.proto, a.protoc,
                          stats["fixture.pftrace"], log)
    else:
        fail("protoc not found: install the Debian package protobuf-compiler")
    for suffix in (".json", ".json.gz", ".pftrace"):
        check_capped(os.path.join(a.outdir, "capped" + suffix), a.proto, a.protoc,
                     stats["capped" + suffix])
        check_killed(os.path.join(a.outdir, "killed" + suffix), a.proto, a.protoc, a.outdir)

    sizes = {f: os.path.getsize(os.path.join(a.outdir, f)) for f in sorted(os.listdir(a.outdir))}
    print(json.dumps(sizes, indent=1), file=sys.stderr)
    if failures:
        print(f"{len(failures)} checks failed", file=sys.stderr)
        return 1
    print("all trace checks passed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Runs trace_fixture and reads its traces back through cli/trace_read.h (tr_dump).

The three encodings of the fixture's trace must give the same events, thread and device
names and metadata (one key excepted, below), and those must be what trace_fixture.c
submitted: counts and names of kernels, copies, syncs, NVTX ranges and counters, exact
arguments of chosen slices. Then the ends of files: the capped traces (finished, holding the
fixed content), the killed .pftrace and a copy cut inside a packet (return 1, their events
delivered), a .pftrace with its chunks inflated (the same events), garbage (-EINVAL in one
stderr line) and mutated copies of the plain .pftrace (an error line or a read, never a
crash; run under the ASan build, never a sanitizer report).
"""

import argparse
import collections
import json
import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trace"))
import check_traces  # noqa: E402
from check_traces import check, fail, failures  # noqa: E402

BASE = 1700000000000000000
PID = 4242
EINVAL = 22
KERNEL_NAMES = ["_Z10sgemm_128x64PfS_S_i", "elementwise_add", "reduce<float, 256>",
                "weird\"name\\with\tctl", "k\u00e9rnel_utf8"]
# The metadata key the encodings really differ in: the writer's event count. JSON counts its
# name and sort-index records ("ph":"M") and flow records as events; the protobuf writer counts
# slices and flows, not the track descriptors that name its tracks (perfetto.c emit(w, pkt, 0)).
META_DIFFERS = {"events"}



def dump(tool, path, *flags):
    """tr_dump's exit status, stdout lines and stderr lines."""
    p = subprocess.run([tool, *flags, path], capture_output=True, timeout=60)
    if p.returncode < 0 or p.returncode > 2:
        fail(f"{path}: tr_dump died with status {p.returncode}: {p.stderr.decode(errors='replace')}")
    out = p.stdout.decode("utf-8", errors="strict").splitlines()
    err = p.stderr.decode("utf-8", errors="replace").splitlines()
    return p.returncode, out, err


class Dump:
    """A dump's parts: events (as lines and parsed), names, metadata, return value."""

    def __init__(self, lines):
        self.lines = lines
        self.events = []
        self.parsed = []
        self.threads = []
        self.devices = []
        self.meta = []
        self.rc = None
        for line in lines:
            kind, _, rest = line.partition(" ")
            if kind == "event":
                self.events.append(line)
                self.parsed.append(parse_event(rest))
            elif kind == "thread":
                self.threads.append(rest)
            elif kind == "device":
                self.devices.append(rest)
            elif kind == "meta":
                self.meta.append(json.loads(rest))
            elif kind == "rc":
                self.rc = int(rest)
            else:
                fail(f"unknown dump line {line!r}")


def parse_event(rest):
    """'slice stream 0 7 "kernel" "name" ts dur value args' as a dict."""
    dec = json.JSONDecoder()
    kind, track, device, ident, rest = rest.split(" ", 4)
    cat, i = dec.raw_decode(rest)
    name, j = dec.raw_decode(rest, i + 1)
    ts, dur, value, args = rest[j + 1:].split(" ", 3)
    return {"kind": kind, "track": track, "device": int(device), "id": int(ident), "cat": cat,
            "name": name, "ts": int(ts), "dur": int(dur), "value": int(value),
            "args": None if args == "-" else json.loads(args)}


def read_ok(tool, path, expect_rc=0, *flags):
    status, out, err = dump(tool, path, *flags)
    d = Dump(out)
    check(d.rc == expect_rc and status == expect_rc,
          f"{path}: returned {d.rc} (exit {status}), expected {expect_rc}; stderr {err}")
    check(not err, f"{path}: stderr {err}")
    check(len(d.meta) == 1 and out and out[-2].startswith("meta "),
          f"{path}: meta not called once, after the last event")
    return d


def check_same(a, b, what, differs=META_DIFFERS):
    """Identical events (in any order), names and metadata but for differs."""
    ea, eb = collections.Counter(a.events), collections.Counter(b.events)
    for line in (ea - eb):
        fail(f"{what}: only in the first: {line}")
    for line in (eb - ea):
        fail(f"{what}: only in the second: {line}")
    check(a.threads == b.threads, f"{what}: threads {a.threads} != {b.threads}")
    check(a.devices == b.devices, f"{what}: devices {a.devices} != {b.devices}")
    ma = {k: v for k, v in a.meta[0].items() if k not in differs}
    mb = {k: v for k, v in b.meta[0].items() if k not in differs}
    check(ma == mb, f"{what}: metadata {ma} != {mb}")
    for k in META_DIFFERS:
        check(k in a.meta[0] and k in b.meta[0], f"{what}: metadata without {k}")


def check_content(d, what):
    """What trace_fixture.c's feed() submitted."""
    ev = d.parsed
    by = collections.defaultdict(list)
    for e in ev:
        by[(e["kind"], e["cat"])].append(e)

    kernels = by[("slice", "kernel")]
    check(len(kernels) == 43, f"{what}: {len(kernels)} kernel slices, expected 40 + 3")
    names = collections.Counter(k["name"] for k in kernels)
    want = {KERNEL_NAMES[0]: 9, KERNEL_NAMES[1]: 9, KERNEL_NAMES[2]: 9, KERNEL_NAMES[3]: 8,
            KERNEL_NAMES[4]: 8}
    check(names == want, f"{what}: kernel names {dict(names)}")
    check(all(k["track"] == "stream" for k in kernels), f"{what}: a kernel off a stream track")
    streams = collections.Counter((k["device"], k["id"]) for k in kernels)
    check(streams == {(0, 7): 14, (0, 13): 13, (1, 7): 16}, f"{what}: kernels per stream {streams}")
    # Kernel 3: launched at BASE + 31123 on stream 0/7, no shared memory (no "smem").
    k3 = [k for k in kernels if k["args"]["correlation"] == 103]
    if check(len(k3) == 1, f"{what}: kernel 103 {k3}"):
        k = k3[0]
        check(k["name"] == KERNEL_NAMES[3] and k["ts"] == BASE + 1000 + 30000 + 123 + 20007 and
              k["dur"] == 5000 + 21 - 7 and (k["device"], k["id"]) == (0, 7) and
              k["args"] == {"correlation": 103, "stream": 7, "grid": [83, 2, 1],
                            "block": [256, 1, 1], "regs": 35},
              f"{what}: kernel 103 {k}")
    k4 = [k for k in kernels if k["args"]["correlation"] == 104]
    check(len(k4) == 1 and k4[0]["args"].get("smem") == 1024 + 512 and
          k4[0]["name"] == KERNEL_NAMES[4], f"{what}: kernel 104 {k4}")
    check(sum("smem" not in k["args"] for k in kernels) == 4,
          f"{what}: kernels without shared memory")
    # The overlaps on device 1 stream 7 (clamped by the writer).
    late = [k for k in kernels if k["args"]["correlation"] in (146, 147, 148)]
    t = BASE + 2000000
    check(sorted((k["ts"], k["dur"]) for k in late) ==
          [(t - 2000, 1999), (t, 10000), (t + 10000, 10000)], f"{what}: clamped kernels {late}")

    copies = sorted(by[("slice", "gpu_memcpy")], key=lambda e: e["ts"])
    check([c["name"] for c in copies] == ["Memcpy HtoD", "Memcpy DtoH", "Memcpy PtoP"],
          f"{what}: copies {copies}")
    if len(copies) == 3:
        check(copies[0]["args"] == {"correlation": 140, "stream": 13, "bytes": 1 << 20,
                                    "bandwidth_gbps": 26.214, "src_kind": "pinned",
                                    "dst_kind": "device"}, f"{what}: HtoD {copies[0]}")
        check(copies[1]["args"].get("src_kind") == "device" and
              copies[1]["args"].get("dst_kind") == "pageable", f"{what}: DtoH {copies[1]}")
        check("src_kind" not in copies[2]["args"] and "dst_kind" not in copies[2]["args"],
              f"{what}: PtoP kinds unknown, not written {copies[2]}")
        check(copies[2]["args"].get("src_device") == 0 and copies[2]["args"].get("dst_device") == 1
              and copies[2]["args"].get("bandwidth_gbps") == 419.43, f"{what}: PtoP {copies[2]}")
    sets = by[("slice", "gpu_memset")]
    check(len(sets) == 1 and sets[0]["args"] == {
        "correlation": 143, "stream": 13, "bytes": 65536, "bandwidth_gbps": 65.536, "value": 0,
        "graph_id": 3, "graph_node_id": 17}, f"{what}: memset {sets}")

    syncs = sorted(by[("slice", "cuda_sync")], key=lambda e: e["device"])
    check([(s["track"], s["device"], s["id"], s["name"], s["dur"], s["args"]) for s in syncs] ==
          [("sync", 0, 7, "cudaStreamSynchronize", 10000, {"correlation": 144}),
           ("sync", 1, 0xFFFFFFFF, "cudaDeviceSynchronize", 20000, {"correlation": 145})],
          f"{what}: syncs {syncs}")

    api = by[("slice", "cuda_api")]
    check(len(api) == 51, f"{what}: {len(api)} API slices, expected 51")
    check(all(a["track"] == "thread" and a["id"] in (PID, PID + 1) for a in api),
          f"{what}: an API slice off the host threads")
    check(not [a for a in api if a["name"] == "cudaBroken"], f"{what}: the refused call is there")
    clamped = [a for a in api if a["name"] == "cudaGetDevice"]
    check([(a["ts"], a["dur"], a["id"], a["args"]) for a in clamped] ==
          [(BASE, 500, PID + 1, {"correlation": 9000})], f"{what}: clamped call {clamped}")

    t = BASE + 2500000
    ranges = sorted((e for e in ev if e["kind"] == "slice" and e["cat"] in ("nvtx", "NCCL")),
                    key=lambda e: e["ts"])
    check([(r["track"], r["id"], r["cat"], r["name"], r["ts"] - t, r["dur"], r["args"])
           for r in ranges] ==
          [("thread", PID, "nvtx", "step", -1000, 9000, None),
           ("thread", PID, "NCCL", "ncclAllReduce", 0, 5000, None),
           ("nvtx", 0, "nvtx", "span_a", 10000, 3000, {"start_tid": PID, "end_tid": PID + 1}),
           ("nvtx", 1, "NCCL", "span_b", 11000, 4000, {"start_tid": PID + 1, "end_tid": PID + 1}),
           ("nvtx", 0, "nvtx", "span_c", 14000, 2000, {"start_tid": PID, "end_tid": PID})],
          f"{what}: NVTX ranges {ranges}")
    marks = [e for e in ev if e["kind"] == "instant"]
    check([(m["track"], m["id"], m["cat"], m["name"], m["ts"] - t, m["dur"], m["args"])
           for m in marks] == [("thread", PID, "NCCL", "nccl_mark", 6000, 0, None)],
          f"{what}: NVTX marks {marks}")

    counters = sorted((e["device"], e["ts"] - BASE, e["value"], e["name"], e["track"], e["args"])
                      for e in ev if e["kind"] == "counter")
    check(counters == [(0, 5000, 1 << 20, "GPU memory", "memory", None),
                       (0, 105000, 3 << 20, "GPU memory", "memory", None),
                       (0, 205000, 2 << 20, "GPU memory", "memory", None),
                       (1, 7000, 4 << 20, "GPU memory", "memory", None),
                       (1, 107000, 0, "GPU memory", "memory", None)],
          f"{what}: counters {counters}")
    check(len(ev) == 43 + 3 + 1 + 2 + 51 + 5 + 1 + 5, f"{what}: {len(ev)} events")

    check(d.threads == ['4242 "main"', '4243 "worker"'], f"{what}: threads {d.threads}")
    check(d.devices == ['0 "GPU 0 (NVIDIA H100 80GB HBM3)"', '1 "GPU 1 (NVIDIA A100-SXM4-40GB)"'],
          f"{what}: devices {d.devices}")
    m = d.meta[0]
    want = {"base_time_ns": BASE, "trace_writer": "gpuprof trace 2", "agent": "gpuprof test",
            "pid": PID, "process_name": "fixture (4242)",
            "command_line": "trace_fixture --known \"events\"", "hostname": "testhost",
            "clamped_slices": 3, "invalid_events": 1, "dropped_records": 3,
            "capture_end_ns": BASE + 3000000, "capture_trigger": "test"}
    check({k: m.get(k) for k in want} == want, f"{what}: metadata {m}")
    check(set(m) == set(want) | {"events"}, f"{what}: metadata keys {sorted(m)}")


def check_edge(tool, edge, outdir):
    """tr_write_edge.c's shapes: the same in every encoding, and as written."""
    p = lambda name: os.path.join(outdir, name)  # noqa: E731
    subprocess.run([edge, outdir], check=True, timeout=60)
    dumps = {f: read_ok(tool, p("edge" + f)) for f in (".json", ".json.gz", ".pftrace")}
    check_same(dumps[".json"], dumps[".json.gz"], "edge.json vs edge.json.gz")
    check_same(dumps[".json"], dumps[".pftrace"], "edge.json vs edge.pftrace")
    for f, d in dumps.items():
        what = "edge" + f
        ev = {(e["name"] if len(e["name"]) < 64 else "long", e["ts"] - BASE): e for e in d.parsed}
        check(d.threads == ['4242 "main"', '4242 "renamed w?("', '4244 "thread 4244"'],
              f"{what}: threads {d.threads}")
        check(d.devices == ['0 "GPU 0 (Sim? GPU)"', '2 "GPU 2"'], f"{what}: devices {d.devices}")
        check(ev.get(("cudaFree", 100), {}).get("args") == {"correlation": 0},
              f"{what}: a zero correlation id")
        long = ev.get(("long", 5000), {})
        check(long.get("name") == "x" * 4095 + "?" and long.get("args", {}).get("grid") ==
              [-1, 1, 1] and "smem" not in long.get("args", {}), f"{what}: the long name")
        check(ev.get(("bad?name\x01", 1000), {}).get("dur") == 1000, f"{what}: the late kernel")
        nccl = sorted((e for e in d.parsed if e["cat"] == "nccl"), key=lambda e: e["ts"])
        want = [{"correlation": 40, "count": 1024, "datatype": "ncclBfloat16", "bytes": 2048,
                 "peer": 0, "seq": 12, "algo": "RING", "proto": "LL", "nChannels": 4,
                 "comm": "feedface12345678", "rank": 1, "nranks": 2, "stream": 5,
                 "group_ops": 3, "kernel_ns": 900},
                {"correlation": 41, "count": 1024, "datatype": "ncclBfloat16", "bytes": 2048,
                 "seq": 12, "comm": "feedface12345678", "rank": 1, "nranks": 2,
                 "state": "launched, not finished", "posted_ns": BASE + 19990},
                {"count": 1024, "datatype": "ncclBfloat16", "bytes": 2048,
                 "comm": "feedface12345678", "rank": 1, "nranks": 2, "state": "not launched",
                 "posted_ns": BASE + 19991}]
        check([e["args"] for e in nccl] == want and
              all((e["track"], e["device"], e["id"]) == ("nccl", 0, 0) for e in nccl),
              f"{what}: NCCL {nccl}")
        syncs = sorted((e["id"], e["ts"] - BASE) for e in d.parsed if e["track"] == "sync")
        check(syncs == [(3, 40000), (3, 41000), (0xFFFFFFFF, 40000), (0xFFFFFFFF, 42000)],
              f"{what}: sync lanes {syncs}")
        check([(e["ts"] - BASE, e["value"]) for e in d.parsed if e["kind"] == "counter"] ==
              [(9000, 4096), (8000, 8192)], f"{what}: counters")
        m = d.meta[0]
        check("process_name" not in m and m.get("hostname") == "h\u00e9st?" and
              m.get("note") == "v?" and m.get("big") == 2**64 - 1, f"{what}: metadata {m}")


def check_lanes(tool, lanes, outdir):
    """trace_sync_lanes's waits: the same in every encoding, on one id per stream. It writes no
    host track, so its .pftrace has no process descriptor, the only place that encoding holds
    the process name: the JSON encoding's "process_name" has nothing to match there."""
    subprocess.run([lanes, outdir], check=True, timeout=60)
    dumps = {f: read_ok(tool, os.path.join(outdir, "syncs" + f))
             for f in (".json", ".json.gz", ".pftrace")}
    check_same(dumps[".json"], dumps[".json.gz"], "syncs.json vs syncs.json.gz")
    check_same(dumps[".json"], dumps[".pftrace"], "syncs.json vs syncs.pftrace",
               META_DIFFERS | {"process_name"})
    ids = collections.Counter((e["device"], e["id"]) for e in dumps[".pftrace"].parsed)
    check(ids == {(0, 7): 127, (0, 9): 260, (1, 0xFFFFFFFF): 3}, f"syncs: waits per stream {ids}")


def check_error(tool, path, what):
    """-EINVAL, one line on stderr naming the file, no callback."""
    status, out, err = dump(tool, path)
    check(status == 2 and out == [f"rc {-EINVAL}"],
          f"{what}: exit {status}, output {out[:3]}, expected rc -{EINVAL} and nothing else")
    check(len(err) == 1 and path in err[0] and err[0].startswith("tr_dump: "),
          f"{what}: stderr {err}")


def fuzz(tool, plain, outdir, rounds):
    """Mutated and cut copies of a plain .pftrace: a read or one error line, nothing else."""
    rng = random.Random(4242)
    path = os.path.join(outdir, "fuzz.pftrace")
    outcomes = collections.Counter()
    for r in range(rounds):
        data = bytearray(plain)
        if r % 4 == 0:
            data = data[:rng.randrange(1, len(data))]
        else:
            for _ in range(rng.randrange(1, 8)):
                i = rng.randrange(len(data))
                data[i] = rng.choice([0, 0xFF, 0x80, 0x0A, rng.randrange(256), data[i] ^ 1])
        with open(path, "wb") as f:
            f.write(data)
        status, out, err = dump(tool, path)
        outcomes[status] += 1
        if status == 2:
            check(len(err) == 1 and path in err[0], f"fuzz round {r}: stderr {err}")
        else:
            check(not err and out and out[-1] == f"rc {status}",
                  f"fuzz round {r}: exit {status}, stderr {err}")
    print(f"fuzz: {rounds} rounds, exit statuses {dict(outcomes)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dump", required=True, help="tr_dump")
    ap.add_argument("--fixture", required=True, help="trace_fixture")
    ap.add_argument("--lanes", required=True, help="trace_sync_lanes")
    ap.add_argument("--edge", required=True, help="tr_write_edge")
    ap.add_argument("--outdir", required=True)
    ap.add_argument("--fuzz", type=int, default=300, help="mutated copies to read")
    a = ap.parse_args()

    shutil.rmtree(a.outdir, ignore_errors=True)
    os.makedirs(a.outdir)
    subprocess.run([a.fixture, a.outdir], check=True, timeout=120)
    p = lambda name: os.path.join(a.outdir, name)  # noqa: E731

    dumps = {f: read_ok(a.dump, p("fixture" + f)) for f in (".json", ".json.gz", ".pftrace")}
    for f, d in dumps.items():
        check_content(d, "fixture" + f)
    check_same(dumps[".json"], dumps[".json.gz"], "fixture.json vs fixture.json.gz")
    check_same(dumps[".json"], dumps[".pftrace"], "fixture.json vs fixture.pftrace")
    direct = read_ok(a.dump, p("fixture.pftrace"), 0, "--pftrace")
    check(direct.lines == dumps[".pftrace"].lines, "trace_read and trace_read_pftrace differ")

    # The same packets without their compressed chunks (a .pftrace as Perfetto's own tools
    # write it): the same callbacks in the same order.
    with open(p("fixture.pftrace"), "rb") as f:
        plain = check_traces.inflate_pftrace(f.read(), "fixture.pftrace")
    with open(p("plain.pftrace"), "wb") as f:
        f.write(plain)
    check(read_ok(a.dump, p("plain.pftrace")).lines == dumps[".pftrace"].lines,
          "plain.pftrace differs from fixture.pftrace")

    # Capped: finished files (rc 0) with the whole fixed content before the flood's kernels.
    fixed = collections.Counter(dumps[".json"].events)
    for f in (".json", ".json.gz", ".pftrace"):
        d = read_ok(a.dump, p("capped" + f))
        check(not (fixed - collections.Counter(d.events)), f"capped{f}: fixed events missing")
        check(d.meta[0].get("truncated") == "size cap reached: later events were not written"
              and d.meta[0].get("size_cap_bytes") == 256 * 1024, f"capped{f}: meta {d.meta}")

    # Killed: cut after a whole chunk, without "trace end": 1, the events written, the "trace
    # start" keys (and the process name) as the metadata.
    d = read_ok(a.dump, p("killed.pftrace"), 1)
    check(not (fixed - collections.Counter(d.events)) and len(d.events) > len(fixed),
          f"killed.pftrace: {len(d.events)} events, not all the fixed ones")
    check(d.meta[0] == {"base_time_ns": BASE, "trace_writer": "gpuprof trace 2",
                        "agent": "gpuprof test", "pid": PID, "process_name": "fixture (4242)",
                        "command_line": "trace_fixture --known \"events\"",
                        "hostname": "testhost"}, f"killed.pftrace: meta {d.meta}")
    killed_events = len(d.events)
    # Cut again inside a packet (a chunk): fewer events, still 1.
    with open(p("killed.pftrace"), "rb") as f:
        data = f.read()
    with open(p("cut.pftrace"), "wb") as f:
        f.write(data[:len(data) * 2 // 3])
    d = read_ok(a.dump, p("cut.pftrace"), 1)
    check(not (fixed - collections.Counter(d.events)) and len(d.events) < killed_events,
          f"cut.pftrace: {len(d.events)} events of the killed file's {killed_events}")
    d = read_ok(a.dump, p("killed.json.gz"), 1)
    check(len(d.events) > len(fixed), f"killed.json.gz: {len(d.events)} events")
    # A killed plain JSON starts with the spaces its writer leaves for the header and has no
    # metadata (so no base: its times stay relative to the capture's start).
    d = read_ok(a.dump, p("killed.json"), 1)
    check(len(d.events) > len(fixed) and d.meta == [{}], f"killed.json: {len(d.events)} events, "
          f"meta {d.meta}")

    # Not a trace: garbage, garbage that starts like a packet, empty, a JSON-looking file,
    # the fixture's first packet alone (no "trace start").
    rng = random.Random(1)
    cases = {"garbage.bin": bytes(rng.randrange(256) for _ in range(4096)),
             "packetlike.pftrace": b"\x0a\x05hello" + bytes(100),
             "empty.pftrace": b"",
             "notjson.json": b"{\"hello\": 1}\n",
             "first.pftrace": check_traces.split_packets(plain, "plain.pftrace")[0][1]}
    for name, data in cases.items():
        with open(p(name), "wb") as f:
            f.write(data)
        check_error(a.dump, p(name), name)
    status, out, err = dump(a.dump, p("garbage.bin"), "--pftrace")
    check(status == 2 and len(err) == 1, f"garbage.bin read as .pftrace: exit {status}, {err}")

    check_edge(a.dump, a.edge, a.outdir)
    check_lanes(a.dump, a.lanes, a.outdir)
    fuzz(a.dump, plain, a.outdir, a.fuzz)

    if failures:
        print(f"{len(failures)} checks failed", file=sys.stderr)
        return 1
    print("readback: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Self-test of validate_trace.py: a valid trace passes, each broken variant fails for its reason."""

import copy
import gzip
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VALIDATOR = os.path.join(HERE, "validate_trace.py")

GOOD = {
    "traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 10, "args": {"name": "app"}},
        {"ph": "M", "name": "thread_name", "pid": 10, "tid": 11, "args": {"name": "main"}},
        {"ph": "M", "name": "process_name", "pid": 1073741824, "args": {"name": "GPU 0"}},
        {"ph": "M", "name": "process_sort_index", "pid": 1073741824, "args": {"sort_index": 10}},
        {"ph": "M", "name": "thread_name", "pid": 1073741824, "tid": 7,
         "args": {"name": "stream 7"}},
        {"ph": "X", "cat": "cuda_api", "name": "cudaLaunchKernel", "pid": 10, "tid": 11,
         "ts": "RAW:10.000", "dur": "RAW:5.125", "args": {"correlation": 1}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 10, "tid": 11,
         "ts": "RAW:10.000"},
        {"ph": "X", "cat": "cuda_api", "name": "inner", "pid": 10, "tid": 11,
         "ts": "RAW:10.500", "dur": "RAW:1.000"},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 1073741824, "tid": 7,
         "ts": "RAW:30.500", "dur": "RAW:60.250"},
        {"ph": "f", "bp": "e", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 1073741824,
         "tid": 7, "ts": "RAW:30.500"},
        {"ph": "X", "cat": "kernel", "name": "k2", "pid": 1073741824, "tid": 7,
         "ts": "RAW:90.750", "dur": "RAW:1.000"},
        {"ph": "C", "name": "GPU memory", "pid": 1073741824, "ts": "RAW:0.000",
         "args": {"in_use_bytes": 1024}},
    ],
    "metadata": {"base_time_ns": 1700000000000000000},
}


def dump(doc):
    """JSON with "RAW:<text>" strings written as bare number text (to control decimals)."""
    return re.sub(r'"RAW:([^"]*)"', r"\1", json.dumps(doc))


def run(workdir, name, content, expect_ok, reason, extra=()):
    path = os.path.join(workdir, name)
    mode = "wb" if isinstance(content, bytes) else "w"
    with open(path, mode) as f:
        f.write(content)
    r = subprocess.run([sys.executable, VALIDATOR, path, *extra], capture_output=True, text=True)
    ok = r.returncode == 0
    if ok != expect_ok or (not expect_ok and reason not in r.stderr):
        print(f"FAIL {name}: exit {r.returncode}, expected {'ok' if expect_ok else reason!r}\n"
              f"{r.stderr}", file=sys.stderr)
        return 1
    print(f"ok   {name}", file=sys.stderr)
    return 0


def variant(mutate):
    doc = copy.deepcopy(GOOD)
    mutate(doc)
    return dump(doc)


def ev(doc, name):
    return next(e for e in doc["traceEvents"] if e.get("name") == name)


def pftrace_flow_order():
    """check_traces.rebuild replays .pftrace flows in the importer's order: a kernel whose
    terminating flow id sorts before the launch that starts it loses its arrow."""
    sys.path.insert(0, HERE)
    import check_traces  # noqa: E402

    def pkt(ts, typ, uuid, extra=""):
        return (f"packet {{\n trusted_packet_sequence_id: 1\n timestamp: {ts}\n"
                f" track_event {{\n type: {typ}\n track_uuid: {uuid}\n name: \"x\"\n"
                f" {extra}\n }}\n}}\n")
    text = ("packet {\n trusted_packet_sequence_id: 1\n sequence_flags: 1\n"
            " first_packet_on_sequence: true\n"
            " trace_packet_defaults {\n timestamp_clock_id: 1\n }\n"
            " clock_snapshot {\n clocks {\n clock_id: 1\n timestamp: 0\n }\n"
            " clocks {\n clock_id: 6\n timestamp: 0\n }\n }\n}\n"
            "packet {\n trusted_packet_sequence_id: 1\n"
            " track_descriptor {\n uuid: 1\n }\n}\n"
            "packet {\n trusted_packet_sequence_id: 1\n track_descriptor {\n uuid: 2\n }\n}\n")
    text += pkt(100, "TYPE_SLICE_BEGIN", 1, "flow_ids: 5") + pkt(110, "TYPE_SLICE_END", 1)
    text += pkt(90, "TYPE_SLICE_BEGIN", 2, "terminating_flow_ids: 5")
    text += pkt(95, "TYPE_SLICE_END", 2)
    check_traces.failures.clear()
    check_traces.rebuild(check_traces.parse_text_format(text), "backwards.pftrace")
    if not any("terminates before it starts" in f for f in check_traces.failures):
        print("FAIL backwards.pftrace: flow ending before its start not reported",
              file=sys.stderr)
        return 1
    print("ok   backwards.pftrace", file=sys.stderr)
    return 0


def main():
    workdir = sys.argv[1]
    os.makedirs(workdir, exist_ok=True)
    bad = 0
    bad += run(workdir, "good.json", dump(GOOD), True, "")
    bad += run(workdir, "good.json.gz", gzip.compress(dump(GOOD).encode()), True, "")

    # Array form: complete, and cut after an event (a killed writer).
    arr = dump(GOOD["traceEvents"])
    bad += run(workdir, "array.json", arr, True, "")
    cut = arr[: arr.rindex(', {"ph": "C"')] + ",\n"
    exp_trunc = os.path.join(workdir, "exp-truncated.json")
    with open(exp_trunc, "w") as f:
        f.write('{"truncated": true}')
    bad += run(workdir, "array-cut.json", cut, True, "", extra=["--expect-json", exp_trunc])
    bad += run(workdir, "object-cut.json", dump(GOOD)[:-40], False, "not complete JSON")
    bad += run(workdir, "array-space.json", "[ \n" + arr[1:], False, "does not start with")

    def overlap(d):
        ev(d, "k2")["ts"] = "RAW:90.000"  # starts inside k (ends 90.750), ends after it
    bad += run(workdir, "overlap.json", variant(overlap), False, "without nesting")

    bad += run(workdir, "no-dur.json", variant(lambda d: ev(d, "k").pop("dur")), False,
               "X without dur")
    bad += run(workdir, "neg-dur.json", variant(lambda d: ev(d, "k").update(dur="RAW:-1.000")),
               False, "negative dur")

    def decimals(d):
        ev(d, "k")["ts"] = "RAW:30.5001"
    bad += run(workdir, "decimals.json", variant(decimals), False, "more than 3 decimals")

    def epoch(d):
        for e in d["traceEvents"]:
            if "ts" in e:
                e["ts"] = "RAW:1700000000000010.250"
    bad += run(workdir, "epoch.json", variant(epoch), False, "cannot hold it to the nanosecond")

    # Below 2^53 ns, yet Perfetto's double (int part + fraction, then llround(x * 1000)) makes
    # 4472316077137023 ns of it: the old "< 2^53 ns" rule let this through.
    bad += run(workdir, "double-rounding.json",
               variant(lambda d: ev(d, "k2").update(ts="RAW:4472316077137.022")), False,
               "becomes 4472316077137023 ns")

    # json_trace_tokenizer.cc: "tid": 0 means no tid, and becomes the pid, so these two
    # slices share the thread track (10, 10) and overlap there.
    def tid_zero(d):
        d["traceEvents"] += [
            {"ph": "M", "name": "thread_name", "pid": 10, "tid": 0, "args": {"name": "zero"}},
            {"ph": "M", "name": "thread_name", "pid": 10, "tid": 10, "args": {"name": "ten"}},
            {"ph": "X", "name": "a", "pid": 10, "tid": 0, "ts": "RAW:1.000", "dur": "RAW:2.000"},
            {"ph": "X", "name": "b", "pid": 10, "tid": 10, "ts": "RAW:2.000",
             "dur": "RAW:2.000"}]
    bad += run(workdir, "tid-zero.json", variant(tid_zero), False, "without nesting")

    bad += run(workdir, "empty-event.json", variant(lambda d: d["traceEvents"].append({})),
               False, "empty event")

    # A flow id used twice: Perfetto drops the second start (flow_duplicate_id) and draws the
    # second end from the first start's slice.
    def flow_reuse(d):
        d["traceEvents"] += [
            {"ph": "X", "cat": "cuda_api", "name": "again", "pid": 10, "tid": 11,
             "ts": "RAW:200.000", "dur": "RAW:1.000"},
            {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 10, "tid": 11,
             "ts": "RAW:200.000"},
            {"ph": "X", "cat": "kernel", "name": "k3", "pid": 1073741824, "tid": 7,
             "ts": "RAW:210.000", "dur": "RAW:1.000"},
            {"ph": "f", "bp": "e", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 1073741824,
             "tid": 7, "ts": "RAW:210.000"}]
    bad += run(workdir, "flow-reuse.json", variant(flow_reuse), False, "id reused")

    # The GPU end sorted before the launch: FlowTracker::End finds no start.
    def flow_backwards(d):
        ev(d, "k")["ts"] = "RAW:5.000"
        next(e for e in d["traceEvents"] if e["ph"] == "f")["ts"] = "RAW:5.000"
    bad += run(workdir, "flow-backwards.json", variant(flow_backwards), False,
               "ends before it starts")

    # Same ts on both ends: equal timestamps keep file order, so the end written first is
    # processed first.
    def flow_same_ts_end_first(d):
        evs = d["traceEvents"]
        s = next(e for e in evs if e["ph"] == "s")
        evs.remove(s)
        evs.append(s)
        ev(d, "k")["ts"] = "RAW:10.000"
        next(e for e in evs if e["ph"] == "f")["ts"] = "RAW:10.000"
    bad += run(workdir, "flow-same-ts.json", variant(flow_same_ts_end_first), False,
               "ends before it starts")

    # Integers beyond int64 become doubles (util/json_parser.h ParseNumber): a flow id loses
    # its id (flow_invalid_id), an argument is shown rounded.
    def flow_big_id(d):
        for e in d["traceEvents"]:
            if e["ph"] in "sf":
                e["id"] = 2**63
    bad += run(workdir, "flow-big-id.json", variant(flow_big_id), False,
               "without an integer id")
    bad += run(workdir, "arg-big.json",
               variant(lambda d: ev(d, "k").update(args={"bytes": 2**64 - 1})), False,
               "beyond int64")

    # A character outside the BMP written as a \u surrogate pair: Perfetto refuses it.
    bad += run(workdir, "surrogate.json",
               variant(lambda d: ev(d, "k2").update(name="k\U0001F600")), False,
               "surrogate escape")
    bad += run(workdir, "bmp-escape.json",
               variant(lambda d: ev(d, "k2").update(name="k\u00e9\u20ac")), True, "")

    def flow_unmatched(d):
        d["traceEvents"].remove(next(e for e in d["traceEvents"] if e["ph"] == "s"))
    bad += run(workdir, "flow-unmatched.json", variant(flow_unmatched), False,
               "end without a start")

    def flow_open(d):
        d["traceEvents"].remove(next(e for e in d["traceEvents"] if e["ph"] == "f"))
    bad += run(workdir, "flow-open.json", variant(flow_open), True, "")

    def flow_cat(d):
        next(e for e in d["traceEvents"] if e["ph"] == "f")["cat"] = "other"
    bad += run(workdir, "flow-cat.json", variant(flow_cat), False, "end without a start")

    def flow_bp(d):
        next(e for e in d["traceEvents"] if e["ph"] == "f").pop("bp")
    bad += run(workdir, "flow-bp.json", variant(flow_bp), False, '"bp":"e"')

    def flow_outside(d):
        next(e for e in d["traceEvents"] if e["ph"] == "s")["ts"] = "RAW:20.000"
    bad += run(workdir, "flow-outside.json", variant(flow_outside), False, "not inside any slice")

    def unnamed(d):
        d["traceEvents"] = [e for e in d["traceEvents"]
                            if not (e["ph"] == "M" and e["name"] == "thread_name"
                                    and e["tid"] == 7)]
    bad += run(workdir, "unnamed-track.json", variant(unnamed), False, "no thread_name")

    bad += run(workdir, "phase.json",
               variant(lambda d: d["traceEvents"].append(
                   {"ph": "S", "name": "x", "pid": 10, "tid": 11, "ts": 1})),
               False, "silently ignored")
    bad += run(workdir, "counter-noargs.json",
               variant(lambda d: d["traceEvents"].append(
                   {"ph": "C", "name": "c", "pid": 10, "ts": 1})),
               False, "C without args")
    bad += run(workdir, "pid-negative.json",
               variant(lambda d: ev(d, "k").update(pid=-1)), False, "pid must be")
    bad += run(workdir, "no-base.json", variant(lambda d: d["metadata"].pop("base_time_ns")),
               False, "base_time_ns")
    bad += run(workdir, "empty.json", "[]", False, "does not start with")

    # Expectations.
    exp = os.path.join(workdir, "exp.json")
    with open(exp, "w") as f:
        json.dump({"slices": [{"cat": "kernel", "pid": 1073741824, "tid": 7, "count": 2}],
                   "flows": 1, "processes": ["GPU 0"], "threads": ["stream 7"],
                   "counters": [{"name": "GPU memory in_use_bytes", "count": 1}],
                   "metadata": {"base_time_ns": 1700000000000000000}, "truncated": False}, f)
    bad += run(workdir, "expect-ok.json", dump(GOOD), True, "", extra=["--expect-json", exp])
    with open(exp, "w") as f:
        json.dump({"slices": [{"name": "k", "count": 2}]}, f)
    bad += run(workdir, "expect-fail.json", dump(GOOD), False, "found 1",
               extra=["--expect-json", exp])

    bad += pftrace_flow_order()

    print(f"{bad} self-test cases failed" if bad else "validator self-test passed",
          file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

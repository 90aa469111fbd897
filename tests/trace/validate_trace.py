#!/usr/bin/env python3
r"""gpuprof's trace validator: Perfetto's Chrome-JSON import rules, applied offline.

Usage: validate_trace.py FILE [--expect-json EXPECTATIONS] [--summary]

FILE is a .json or .json.gz trace (gzip is recognised by its magic bytes). The checks follow
how Perfetto's JSON importer reads a trace (shared/reference/formats.md section 3) plus the
rules gpuprof's writer promises (docs/TRACES.md):

  file     starts with {" or [{" after whitespace; object form must be complete and have a
           traceEvents array and a metadata object with base_time_ns; array form may lack its
           closing bracket and have a trailing comma (a killed writer) -- reported as truncated
  events   no empty {} events; ph is a phase Perfetto imports; ts on every non-M event, a
           number or numeric string, non-negative, at most 3 decimals, and Perfetto's double
           (int part + fraction, then llround(x * 1000)) gives back the exact ns (write
           relative to a base); X has dur >= 0; pid/tid are integers in [0, 2^32), a tid of 0
           is the pid's (one track); no argument integer beyond int64 (it becomes a double);
           no \u surrogate escapes (the parser rejects them)
  M        process_name/thread_name with a non-empty args.name, *_sort_index with an integer
           args.sort_index; every process and thread track that has events is named
  C        a non-empty args object whose values are all numbers
  nesting  slices (X, and B/E pairs) on each (pid, tid) track nest strictly: a slice that
           starts inside another ends inside it ([start, end) intervals); depth <= 512
  flows    s/t/f carry id (an integer up to 2^63 - 1, or a hex string), cat and name and
           pair up by (id, cat, name), each used once; an f without an s, or sorted before
           its s ((ts, file order)), is an error (an s without an f only a warning: the GPU
           side may lie outside the capture); f has "bp":"e"; each flow point lies inside a slice
           of its track and binds, as Perfetto binds it, to a slice that contains its ts --
           to the X written just before it on that track when that X starts at the flow's
           ts (gpuprof writes each flow event right after its slice). Perfetto binds
           s and f+bp:e to the topmost slice open on the track at the flow event's place in
           the sorted stream: at one ts, X events come first, longer ones first, then the
           rest (zero-length X, flows) in file order; a slice leaves the stack only when a
           later slice begins (SliceTracker::MaybeCloseStack, FlowTracker::End). So a
           slice written later that starts at the same ts inside the flow's slice (non-empty,
           or empty and written before the flow event) takes the arrow.

Where each rule comes from in google/perfetto (re-check these after Perfetto changes):
  src/trace_processor/util/json_parser.h: ParseNumber (int64, else double), StringToDouble,
    UnescapeString (\u surrogates refused), ScanString
  src/trace_processor/importers/json/json_trace_tokenizer.cc: CoerceToTs (llround),
    ParseTraceEventContents (no ph, no ts, tid 0 -> pid, pid/tid CoerceToUint32, ExtractId:
    int64 or string ids only), HandleTraceEvent (trailing comma, missing ]),
    HandleDictionaryKey (traceEvents; displayTimeUnit counted and ignored; other keys,
    metadata included, skipped), OnPushDataToSorter ("JSON trace file is incomplete")
  src/trace_processor/importers/json/json_trace_parser.cc: ParseJsonPacket (phases, X needs
    dur, C args, M names and sort_index, i scopes, s/t/f MaybeExtractFlowIdentifier: hex
    strings), MaybeAddFlow (v2)
  src/trace_processor/importers/common/flow_tracker.cc: Begin (flow_duplicate_id), End
    (flow_end_without_start; v1 flows never closed), GetFlowIdForV1Event ((id, cat, name))
  src/trace_processor/importers/common/slice_tracker.cc: MaybeCloseStack, GetTopmostSliceOnTrack
  src/trace_processor/sorter/trace_sorter.h: tie order at equal ts

--expect-json takes a JSON file of expectations (all keys optional):
  {"truncated": false,
   "metadata": {"key": value, ...},            exact values in the metadata object
   "metadata_keys": ["key", ...],              keys that must exist
   "processes": ["name", ...], "threads": ["name", ...],   M names that must exist
   "slices": [{"name": "...", "name_re": "...", "cat": "...", "pid": N, "tid": N,
               "count": N, "min_count": N, "max_count": N}],
   "counters": [{"name": "...", "pid": N, "count": N, "min_count": N}],
   "flows": N  or  {"min": N, "max": N},
   "min_events": N}

Exit status 0 when the trace is valid and meets the expectations, 1 otherwise, 2 on usage
errors. --summary prints a JSON summary (events by phase, tracks, flows, metadata) on stdout.
"""

import argparse
import bisect
import collections
import gzip
import json
import math
import re
import sys

PHASES = set("XBEiIRCbensftMPT")
IGNORED_BY_PERFETTO = set("SFpONDVvc()")
M_NAMES = {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}
MAX_DEPTH = 512
INT64_MAX = 2**63 - 1  # larger JSON integers become doubles (util/json_parser.h ParseNumber)


class Number:
    """A JSON number kept as its text, so that decimals can be checked."""

    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text

    def value(self):
        return float(self.text)


def parse_json(text):
    return json.loads(text, parse_float=Number, parse_int=Number)


def plain(v):
    """Converts parsed values (with Number) back to Python numbers, recursively."""
    if isinstance(v, Number):
        t = v.text
        return int(t) if re.fullmatch(r"-?\d+", t) else float(t)
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


class Report:
    def __init__(self):
        self.errors = []
        self.warnings = []

    def error(self, msg):
        if len(self.errors) < 200:
            self.errors.append(msg)
        elif len(self.errors) == 200:
            self.errors.append("... (more errors left out)")

    def warn(self, msg):
        if len(self.warnings) < 50:
            self.warnings.append(msg)


def load(path, rep):
    """Returns (events, metadata, form, truncated) or None."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            rep.error(f"gzip: {e}")
            return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        rep.error(f"not UTF-8: {e}")
        return None
    if "\\u" in text:
        # util/json_parser.h UnescapeString refuses \uD800-\uDFFF (no surrogate pairs): the
        # event fails to parse. Write such characters as raw UTF-8.
        m = re.search(r"(?<!\\)(?:\\\\)*\\u[dD][89abAB][0-9a-fA-F]{2}", text)
        if m:
            rep.error(f"surrogate escape {m.group(0).lstrip(chr(92))!r} at offset {m.start()}: "
                      "Perfetto's JSON parser rejects it")
    s = text.lstrip()
    if s.startswith('{"'):
        try:
            doc = parse_json(s)
        except json.JSONDecodeError as e:
            rep.error(f"object-form trace is not complete JSON ({e}); Perfetto refuses it "
                      "(\"JSON trace file is incomplete\")")
            return None
        if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
            rep.error("object-form trace without a traceEvents array")
            return None
        meta = doc.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            rep.error("metadata is not an object")
            meta = None
        if "displayTimeUnit" in doc:
            rep.warn("displayTimeUnit is ignored by Perfetto")
        return doc["traceEvents"], meta, "object", False
    if s.startswith('[{"'):
        body = s.rstrip()
        truncated = False
        try:
            events = parse_json(body)
        except json.JSONDecodeError:
            # Perfetto accepts a missing closing bracket and a trailing comma.
            truncated = True
            repaired = body.rstrip().rstrip(",")
            try:
                events = parse_json(repaired + "]")
            except json.JSONDecodeError as e:
                rep.error(f"array-form trace does not parse even with its closing bracket "
                          f"restored: {e}")
                return None
        if not isinstance(events, list):
            rep.error("array-form trace is not an array")
            return None
        if not truncated and re.search(r",\s*\]\s*$", body):
            truncated = True
        return events, None, "array", truncated
    rep.error("file does not start with {\" or [{\" (Perfetto's JSON sniffing); an empty [] "
              "is not recognised either")
    return None


def huge_int(v, key="args"):
    """The key of the first integer in v outside int64, else None."""
    if isinstance(v, Number):
        if re.fullmatch(r"-?\d+", v.text) and not -2**63 <= int(v.text) <= INT64_MAX:
            return key
    elif isinstance(v, dict):
        for k, x in v.items():
            r = huge_int(x, f"{key}.{k}")
            if r:
                return r
    elif isinstance(v, list):
        for i, x in enumerate(v):
            r = huge_int(x, f"{key}[{i}]")
            if r:
                return r
    return None


def as_int(v):
    if isinstance(v, Number) and re.fullmatch(r"\d+", v.text):
        return int(v.text)
    return None


def ts_ns(v, rep, where, field):
    """Parses a ts/dur value into integer ns, checking the precision rules."""
    if isinstance(v, str):
        text = v
    elif isinstance(v, Number):
        text = v.text
    else:
        rep.error(f"{where}: {field} is not a number")
        return None
    m = re.fullmatch(r"(-?)(\d+)(?:\.(\d*))?(?:[eE]([+-]?\d+))?", text)
    if not m:
        rep.error(f"{where}: {field} {text!r} is not numeric")
        return None
    if m.group(4):
        rep.error(f"{where}: {field} {text} uses an exponent; write fixed-point microseconds")
        return None
    frac = m.group(3) or ""
    if len(frac) > 3:
        rep.error(f"{where}: {field} {text} has more than 3 decimals (Perfetto rounds to ns)")
    frac = (frac + "000")[:3]
    ns = int(m.group(2)) * 1000 + int(frac)
    if m.group(1):
        ns = -ns
    if ns < 0:
        rep.error(f"{where}: negative {field} {text}")
        return None
    if m.group(3) is not None and perfetto_ns(m.group(2), m.group(3)) != ns:
        rep.error(f"{where}: {field} {text} becomes {perfetto_ns(m.group(2), m.group(3))} ns "
                  f"in Perfetto, not {ns}: a double cannot hold it to the nanosecond; write "
                  "timestamps relative to a base")
    return ns


def perfetto_ns(int_text, frac_text):
    """The ns Perfetto's importer makes of a non-negative decimal "<int>.<frac>" (µs).

    util/json_parser.h StringToDouble: double(int part) + double(fraction digits) / 10^n,
    then json_trace_tokenizer.cc CoerceToTs: a whole double times 1000, else
    llround(value * 1000.0). Python floats are the same IEEE doubles, so this is exact."""
    v = float(int(int_text))
    if frac_text:
        v += float(int(frac_text)) / float(10 ** len(frac_text))
    if v == math.trunc(v):
        return int(v) * 1000
    x = v * 1000.0
    f = math.floor(x)
    return int(f) + (1 if x - f >= 0.5 else 0)  # llround: halves away from zero


def validate(path, rep):
    loaded = load(path, rep)
    if loaded is None:
        return None
    events, meta, form, truncated = loaded
    summary = {
        "form": form,
        "truncated": truncated,
        "phases": collections.Counter(),
        "metadata": plain(meta) if meta else None,
    }
    if form == "object":
        if meta is None:
            rep.error("no metadata object (gpuprof writes base_time_ns there)")
        elif as_int(meta.get("base_time_ns")) is None:
            rep.error("metadata.base_time_ns missing or not a non-negative integer")

    proc_names, thread_names = {}, {}
    proc_sort, thread_sort = {}, {}
    slices = collections.defaultdict(list)  # (pid, tid) -> [(start, end, idx)]
    last_x = {}  # (pid, tid) -> index of the last X written on the track
    flow_pts = collections.defaultdict(list)  # (pid, tid) -> [(ts, idx)] of s/t/f events
    open_b = collections.defaultdict(list)
    flows = collections.defaultdict(lambda: {"s": [], "f": [], "t": []})
    counters = collections.defaultdict(list)
    used_pids, used_tracks = set(), set()
    parsed = []

    for i, ev in enumerate(events):
        where = f"event {i}"
        if not isinstance(ev, dict):
            rep.error(f"{where}: not an object")
            continue
        if not ev:
            rep.error(f"{where}: empty event (Perfetto counts json_tokenizer_failure)")
            continue
        ph = ev.get("ph")
        if not isinstance(ph, str) or not ph:
            rep.error(f"{where}: missing ph")
            continue
        ph = ph[0]
        summary["phases"][ph] += 1
        if ph in IGNORED_BY_PERFETTO or ph not in PHASES:
            rep.error(f"{where}: phase {ph!r} is silently ignored by Perfetto")
            continue
        pid = as_int(ev.get("pid"))
        if pid is None or pid >= 2**32:
            rep.error(f"{where}: pid must be an integer in [0, 2^32) (got {plain(ev.get('pid'))!r})")
            continue
        tid = ev.get("tid")
        if tid is None:
            tid = pid
        else:
            tid = as_int(tid)
            if tid is None or tid >= 2**32:
                rep.error(f"{where}: tid must be an integer in [0, 2^32)")
                continue
            if tid == 0 and pid != 0:
                # json_trace_tokenizer.cc ParseTraceEventContents: a tid of 0 is "not set" and
                # becomes the pid, so (pid, 0) and (pid, pid) are one thread track.
                tid = pid
        name = ev.get("name")
        args = ev.get("args")
        if args is not None and not isinstance(args, dict):
            rep.error(f"{where}: args is not an object")
            args = None
        big = huge_int(args)
        if big is not None:
            rep.error(f"{where}: argument {big} is beyond int64; Perfetto stores it as a rounded "
                      "double")

        if ph == "M":
            if name not in M_NAMES:
                rep.warn(f"{where}: M event {name!r} is ignored by Perfetto")
                continue
            if args is None:
                rep.error(f"{where}: M {name} without args")
                continue
            if name.endswith("_name"):
                n = args.get("name")
                if not isinstance(n, str) or not n:
                    rep.error(f"{where}: M {name} needs a non-empty args.name")
                    continue
                (proc_names if name == "process_name" else thread_names)[
                    pid if name == "process_name" else (pid, tid)] = n
            else:
                si = args.get("sort_index")
                if not isinstance(si, Number) or not re.fullmatch(r"-?\d+", si.text):
                    rep.error(f"{where}: M {name} needs an integer args.sort_index")
                    continue
                if name == "process_sort_index":
                    proc_sort[pid] = int(si.text)
                else:
                    thread_sort[(pid, tid)] = int(si.text)
            continue

        if "ts" not in ev:
            rep.error(f"{where}: {ph} event without ts (Perfetto drops it)")
            continue
        ts = ts_ns(ev["ts"], rep, where, "ts")
        if ts is None:
            continue
        used_pids.add(pid)
        rec = {"i": i, "ph": ph, "pid": pid, "tid": tid, "ts": ts, "name": name,
               "cat": ev.get("cat"), "args": args}
        parsed.append(rec)

        if ph == "X":
            if "dur" not in ev:
                rep.error(f"{where}: X without dur")
                continue
            dur = ts_ns(ev["dur"], rep, where, "dur")
            if dur is None:
                continue
            if not isinstance(name, str):
                rep.warn(f"{where}: X without a name (shown as [No name])")
            rec["end"] = ts + dur
            slices[(pid, tid)].append((ts, ts + dur, i))
            last_x[(pid, tid)] = i
            used_tracks.add((pid, tid))
        elif ph == "B":
            open_b[(pid, tid)].append((ts, i))
            used_tracks.add((pid, tid))
        elif ph == "E":
            stack = open_b[(pid, tid)]
            if not stack:
                rep.error(f"{where}: E without a matching B on track {pid}/{tid}")
                continue
            start, bi = stack.pop()
            if ts < start:
                rep.error(f"{where}: E before its B")
                continue
            slices[(pid, tid)].append((start, ts, bi))
        elif ph == "C":
            if not args:
                rep.error(f"{where}: C without args (Perfetto reports an error)")
                continue
            for k, v in args.items():
                if isinstance(v, str):
                    try:
                        float(v)
                    except ValueError:
                        rep.error(f"{where}: counter value {k}={v!r} is not numeric")
                        continue
                elif not isinstance(v, Number):
                    rep.error(f"{where}: counter value {k} is not numeric")
                    continue
                counters[(pid, f"{name} {k}")].append((ts, plain(v)))
        elif ph in "stf":
            fid = ev.get("id")
            if isinstance(fid, Number) and re.fullmatch(r"\d+", fid.text) and \
                    int(fid.text) <= INT64_MAX:
                fid = int(fid.text)
            elif isinstance(fid, str):
                try:
                    fid = int(fid, 16)
                except ValueError:
                    rep.error(f"{where}: flow id {fid!r} is not hex (flow_invalid_id)")
                    continue
            else:
                rep.error(f"{where}: flow event without an integer id")
                continue
            if not isinstance(ev.get("cat"), str) or not isinstance(name, str):
                rep.error(f"{where}: flow event needs cat and name (they identify the flow)")
                continue
            if ph == "f" and ev.get("bp") != "e":
                rep.error(f"{where}: flow end without \"bp\":\"e\" binds to the next slice, "
                          "not the enclosing one")
            rec["slice"] = last_x.get((pid, tid))
            flows[(fid, ev["cat"], name)][ph].append(rec)
            flow_pts[(pid, tid)].append((ts, i))
            used_tracks.add((pid, tid))
        elif ph in "iIR":
            s = ev.get("s", "t")
            if s == "t":
                used_tracks.add((pid, tid))

    for track, b in open_b.items():
        for ts, bi in b:
            rep.warn(f"event {bi}: B without E on track {track} (shown as 'Did not end')")

    # Strict nesting per track.
    intervals = {}
    max_depth = 0
    for track, lst in slices.items():
        lst.sort(key=lambda x: (x[0], -(x[1] - x[0])))
        stack = []
        for start, end, idx in lst:
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack and end > stack[-1][1]:
                rep.error(f"event {idx}: slice [{start}, {end}) ns overlaps event "
                          f"{stack[-1][2]} [{stack[-1][0]}, {stack[-1][1]}) on track "
                          f"pid {track[0]} tid {track[1]} without nesting")
                continue
            stack.append((start, end, idx))
            max_depth = max(max_depth, len(stack))
        intervals[track] = lst
    if max_depth > MAX_DEPTH:
        rep.error(f"slice nesting depth {max_depth} exceeds Perfetto's {MAX_DEPTH}")

    starts = {track: [x[0] for x in lst] for track, lst in intervals.items()}

    def inside(track, ts):
        lst = intervals.get(track, ())
        i = bisect.bisect_right(starts.get(track, ()), ts) - 1
        # Walk back from the last slice starting at or before ts: the enclosing one is the
        # nearest that has not ended (bounded: deep nesting is rare, long walks rarer).
        for j in range(i, max(-1, i - 10000), -1):
            start, end, _ = lst[j]
            if start <= ts < end or start == end == ts:
                return True
        return False

    # Where Perfetto binds each flow event: replay the track in the importer's order.
    bound = {}
    for track, pts in flow_pts.items():
        evs = [(start, 2**62 - (end - start), idx, end) for start, end, idx in
               slices.get(track, ())]
        evs += [(ts, 2**62, idx, None) for ts, idx in pts]
        evs.sort(key=lambda x: (x[0], x[1], x[2]))
        stack = []
        for ts, _, idx, end in evs:
            if end is None:
                bound[idx] = stack[-1][0] if stack else None
                continue
            while stack and (stack[-1][1] < ts or (stack[-1][1] == ts and
                                                   not (stack[-1][2] == ts and end == ts))):
                stack.pop()
            stack.append((idx, end, ts))

    parsed_at = {r["i"]: r for r in parsed if r["ph"] == "X" and "end" in r}

    # Flows: matched pairs, bound to slices.
    nflows = 0
    for key, pts in flows.items():
        if not pts["s"]:
            rep.error(f"flow id {key[0]} cat {key[1]!r}: end without a start")
        if not pts["f"]:
            # Harmless (Perfetto draws nothing): the GPU side of a launch can fall outside a
            # capture window or a size cap.
            rep.warn(f"flow id {key[0]} cat {key[1]!r}: start without an end")
        if len(pts["s"]) > 1 or len(pts["f"]) > 1:
            # flow_tracker.cc: a v1 flow is never closed, so a second s is dropped
            # (flow_duplicate_id) and a second f draws an arrow from the first s's slice.
            rep.error(f"flow id {key[0]} cat {key[1]!r}: id reused "
                      f"({len(pts['s'])} starts, {len(pts['f'])} ends); Perfetto drops the "
                      "second start and links later ends to the first")
        for ph in "stf":
            for r in pts[ph]:
                if not inside((r["pid"], r["tid"]), r["ts"]):
                    rep.error(f"event {r['i']}: flow {ph} at {r['ts']} ns is not inside any "
                              f"slice of track pid {r['pid']} tid {r['tid']}")
                elif r["slice"] is not None and parsed_at[r["slice"]]["ts"] == r["ts"]:
                    if bound.get(r["i"]) != r["slice"]:
                        rep.error(f"event {r['i']}: flow {ph} id {key[0]} binds to event "
                                  f"{bound.get(r['i'])} in Perfetto, not to its slice (event "
                                  f"{r['slice']}, written just before it)")
                else:
                    b = parsed_at.get(bound.get(r["i"]))
                    if b is None or not (b["ts"] <= r["ts"] < b["end"] or
                                         b["ts"] == b["end"] == r["ts"]):
                        rep.error(f"event {r['i']}: flow {ph} id {key[0]} binds to event "
                                  f"{bound.get(r['i'])} in Perfetto, a slice that has ended "
                                  "(a slice leaves the stack only when a later one begins)")
        if pts["s"] and pts["f"]:
            nflows += 1
            s0, f0 = pts["s"][0], pts["f"][0]
            if (f0["ts"], f0["i"]) < (s0["ts"], s0["i"]):
                # The sorted stream reaches the end first: FlowTracker::End finds no start
                # (flow_end_without_start) and the arrow is lost.
                rep.error(f"event {f0['i']}: flow id {key[0]} ends before it starts "
                          f"(end at {f0['ts']} ns, start event {s0['i']} at {s0['ts']} ns); "
                          "Perfetto drops it")

    # Names for everything that has events.
    for pid in sorted(used_pids):
        if pid not in proc_names:
            rep.error(f"process {pid} has events but no process_name M event")
    for track in sorted(used_tracks):
        if track not in thread_names:
            rep.error(f"track pid {track[0]} tid {track[1]} has slices but no thread_name M event")

    summary.update({
        "events": len(parsed),
        "slices": sum(len(v) for v in slices.values()),
        "tracks": len(slices),
        "flows": nflows,
        "processes": proc_names,
        "process_sort_index": proc_sort,
        "threads": {f"{k[0]}/{k[1]}": v for k, v in thread_names.items()},
        "thread_sort_index": {f"{k[0]}/{k[1]}": v for k, v in thread_sort.items()},
        "counters": {f"{k[0]}/{k[1]}": len(v) for k, v in counters.items()},
        "max_depth": max_depth,
    })
    summary["_parsed"] = parsed
    summary["_counters"] = counters
    return summary


def check_expectations(summary, exp, rep):
    if "truncated" in exp and bool(exp["truncated"]) != summary["truncated"]:
        rep.error(f"expected truncated={exp['truncated']}, got {summary['truncated']}")
    meta = summary["metadata"] or {}
    for k, v in exp.get("metadata", {}).items():
        if meta.get(k) != v:
            rep.error(f"metadata.{k}: expected {v!r}, got {meta.get(k)!r}")
    for k in exp.get("metadata_keys", []):
        if k not in meta:
            rep.error(f"metadata.{k} missing")
    for n in exp.get("processes", []):
        if n not in summary["processes"].values():
            rep.error(f"no process named {n!r}")
    for n in exp.get("threads", []):
        if n not in summary["threads"].values():
            rep.error(f"no thread named {n!r}")
    if summary["events"] < exp.get("min_events", 0):
        rep.error(f"{summary['events']} events, expected at least {exp['min_events']}")
    for sx in exp.get("slices", []):
        n = 0
        for r in summary["_parsed"]:
            if r["ph"] not in "XB":
                continue
            if "name" in sx and r["name"] != sx["name"]:
                continue
            if "name_re" in sx and not re.search(sx["name_re"], r["name"] or ""):
                continue
            if "cat" in sx and r["cat"] != sx["cat"]:
                continue
            if "pid" in sx and r["pid"] != sx["pid"]:
                continue
            if "tid" in sx and r["tid"] != sx["tid"]:
                continue
            n += 1
        if "count" in sx and n != sx["count"]:
            rep.error(f"slices {sx}: found {n}")
        if n < sx.get("min_count", 0) or n > sx.get("max_count", n):
            rep.error(f"slices {sx}: found {n}")
    for cx in exp.get("counters", []):
        n = sum(len(v) for (pid, name), v in summary["_counters"].items()
                if name == cx.get("name", name) and pid == cx.get("pid", pid))
        if "count" in cx and n != cx["count"]:
            rep.error(f"counters {cx}: found {n}")
        if n < cx.get("min_count", 0):
            rep.error(f"counters {cx}: found {n}")
    fx = exp.get("flows")
    if isinstance(fx, int) and summary["flows"] != fx:
        rep.error(f"{summary['flows']} flows, expected {fx}")
    elif isinstance(fx, dict):
        if summary["flows"] < fx.get("min", 0) or summary["flows"] > fx.get("max", summary["flows"]):
            rep.error(f"{summary['flows']} flows, expected {fx}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--expect-json", help="JSON file of expectations (see --help text)")
    ap.add_argument("--summary", action="store_true", help="print a JSON summary on stdout")
    args = ap.parse_args(argv)
    rep = Report()
    try:
        summary = validate(args.file, rep)
    except OSError as e:
        print(f"validate_trace: {e}", file=sys.stderr)
        return 2
    if summary is not None and args.expect_json:
        with open(args.expect_json) as f:
            check_expectations(summary, json.load(f), rep)
    for w in rep.warnings:
        print(f"warning: {w}", file=sys.stderr)
    for e in rep.errors:
        print(f"error: {e}", file=sys.stderr)
    if summary is not None and args.summary:
        out = {k: v for k, v in summary.items() if not k.startswith("_")}
        out["phases"] = dict(out["phases"])
        out["processes"] = {str(k): v for k, v in out["processes"].items()}
        out["process_sort_index"] = {str(k): v for k, v in out["process_sort_index"].items()}
        print(json.dumps(out, indent=1, sort_keys=True))
    status = "ok" if not rep.errors and summary is not None else "INVALID"
    if summary is not None:
        print(f"{args.file}: {status}: {summary['events']} events, {summary['slices']} slices on "
              f"{summary['tracks']} tracks, {summary['flows']} flows, form {summary['form']}"
              f"{' (truncated)' if summary['truncated'] else ''}", file=sys.stderr)
    else:
        print(f"{args.file}: {status}", file=sys.stderr)
    return 0 if status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Runs the samples under the gpuprof agent in each mode and checks what the outputs show.

Called by scripts/gpu-verify.sh (which builds, finds the GPU or the simulator, and sets the
library path); usable alone:

    verify_samples.py --build BUILD_DIR --work DIR [--simulator] [--samples a,b] [--modes m,n]
                      [--launches N] [--repeat K] [--require summary,pprof,trace] [--json FILE]
                      [--run-timeout SECONDS] [--budget SECONDS]

For every sample in samples/expectations.json and every mode it runs the sample with
`gpuprof run` and checks the agent's outputs against the sample's stated properties:

  continuous  GPUPROF_MODE=continuous, GPUPROF_WINDOW=1s: the exit summary (docs/SUMMARY.md)
              and the pprof windows (<output>/gpuprof-<host>-<pid>-<kind>-<start>.pb.gz)
  capture     plus GPUPROF_CAPTURE_ON_START=60s: a trace of the whole run
              (gpuprof-<host>-<pid>-<ts>-capture.json.gz), validated by
              tests/trace/validate_trace.py, then its slices counted
  gpu-only    plus GPUPROF_GPU_ONLY=1: the same trace without API calls; checks marked
              "gpu_only": false (they need API callbacks or stacks) are left out, and the
              trace must hold no API slices

then measures overhead: samples/launch_loop run --repeat times without and with the agent
(continuous mode, the agent's default window and stack sampling), after one untimed run of
each, in alternating order; median wall time of its loop, slowdown in percent, and the
run-to-run spread without the agent (a miss smaller than that is reported as not conclusive).

A sample's "stderr_expect" lists regexes of agent lines it causes on purpose (each must match
exactly one line); any other line starting with "gpuprof" on stderr fails the run.

Check kinds (fields of a check in expectations.json; numbers may be "{launches}" or
"{launches+1}"):
  summary:  kernel {name (mangled), demangled?, count?, streams?, api?, devices?};
            kernel_match {name_re, count? | at_least?, devices?}; kernels_total {count? |
            at_least?}; distinct_streams {names};
            stream_kernels {name_count, kernels_each}; memcpy {direction, count, bytes |
            absent}; memset {count, bytes}; memory {device, allocs?, frees?, bytes_allocated?,
            bytes_freed?, in_use?, peak_in_use?, by_kind?, allocs_at_least?,
            in_use_at_least?}; in_use_stack {rank, function_re, bytes?, allocations?};
            oom {failed_allocations?, snapshots?, first_api?}; losses_zero; nccl {comms?,
            ops?, ops_joined?, funcs? {func: {ops?, bytes?}}} (the summary's nccl block)
  pprof:    pprof_total {profile, sample_type[], value | value_at_least} summed over windows;
            pprof_inuse {profile, sample_type[], value | value_at_least, top_function_re?} of
            the last window; pprof_leaf {profile, sample_type[], leaf_re, value} summed over
            windows for samples whose leaf frame matches; pprof_stack {profile, sample_type[],
            leaf_re, frames_re[], without_re?, value}: the same, for samples whose stack also
            has a frame matching each of frames_re and none matching without_re
  trace:    trace_kernel {name, count}; trace_kernel_match {name_re, count | at_least} (trace
            kernel names are demangled: "mul_kernel(float*, float, int)", not "_Z10mul_...");
            trace_memcpy {direction, count, bytes}; trace_memset {count, bytes};
            trace_graph {names, graphs, nodes}; trace_api_threads {name_re, threads};
            trace_gpu_tracks {min_streams}; trace_memory_counter {max_at_least};
            trace_nccl {func, count, tracks?} (slices of category nccl on the communicator
            tracks, each inside the kernel slice of its correlation id);
            trace_nvtx_range {name, cat, count, threads?, api_inside? {name_re, count} (API
            slices on its thread inside each), inside? {name, cat} (each within such a range
            on its thread)}; trace_nvtx_mark {name, cat, count}; trace_nvtx_span {name, cat,
            count, cross_thread?} (on an "NVTX start/end" track; ended on another thread)

A result is PASS, FAIL, N/A (the agent produced no output of that kind at all: the feature is
missing from this build; a failure when the feature is in --require) or SKIP (the sample cannot
run here: one GPU for NCCL, no torch; "skip_stdout" matches the line that says so). Off the
simulator a skip whose line matches "skip_fails_on_gpu" fails instead (PyTorch finding no GPU
where gpu-verify.sh found one), and skips are listed as not verified. A run that takes longer
than --run-timeout (120 s) is killed and fails; runs that would start after --budget (480 s
for all runs) are NOT RUN, which fails, so that the table is printed inside a GPU session's
command limit even when every run hangs. Exit status: 0 when nothing failed, 1 otherwise, 2 on
usage errors.
"""

import argparse
import glob
import gzip
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("continuous", "capture", "gpu-only")
# A hang guard for one sample run, not a performance limit. A GPU session's command is killed
# after 600 s: two hung runs must not use all of it before the table is printed.
RUN_TIMEOUT_S = 120
API_NAME = re.compile(r"^(cuda|cu[A-Z]|__cuda|nccl)")
LOUD = "!!"


# ---------------------------------------------------------------------------------------------
# Reading the outputs


def load_summary(outdir):
    files = sorted(glob.glob(os.path.join(outdir, "gpuprof-*-summary.json")))
    if not files:
        return None, "no gpuprof-*-summary.json in " + outdir
    if len(files) > 1:
        return None, f"{len(files)} summaries in {outdir} (one process expected)"
    try:
        with open(files[0]) as f:
            return json.load(f), None
    except (OSError, ValueError) as e:
        return None, f"{files[0]}: {e}"


class PprofReader:
    """Decodes pprof files with python3-protobuf and the project's own profile.proto."""

    def __init__(self, workdir, desc=None):
        self.error = None
        self.mod = None
        if desc and os.path.exists(desc):
            self.from_descriptor_set(desc)
            return
        proto_dir = os.path.join(ROOT, "export", "proto")
        out = os.path.join(workdir, "pyproto")
        os.makedirs(out, exist_ok=True)
        protoc = shutil.which("protoc")
        if not protoc:
            self.error = "protoc not found (Debian package protobuf-compiler)"
            return
        r = subprocess.run([protoc, f"--proto_path={proto_dir}", f"--python_out={out}",
                            "profile.proto"], capture_output=True, text=True)
        if r.returncode != 0:
            self.error = "protoc --python_out failed: " + r.stderr.strip()
            return
        sys.path.insert(0, out)
        try:
            import profile_pb2  # noqa: E402  (generated just above)
        except ImportError as e:
            self.error = (f"cannot import the generated pprof module ({e}); this checker needs "
                          "python3-protobuf: run it with /usr/bin/python3 on Debian")
            return
        self.mod = profile_pb2

    def from_descriptor_set(self, desc):
        """The schema compiled by protoc elsewhere (a GPU bundle's share/profile.desc): needs no
        protoc here and no generated code, which a newer protobuf runtime may refuse."""
        try:
            from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
        except ImportError as e:
            self.error = f"no python protobuf ({e}); run the checker with a python3 that has it"
            return
        try:
            with open(desc, "rb") as f:
                fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
            pool = descriptor_pool.DescriptorPool()
            for fd in fds.file:
                pool.AddSerializedFile(fd.SerializeToString())
            d = pool.FindMessageTypeByName("perftools.profiles.Profile")
            if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.21
                cls = message_factory.GetMessageClass(d)
            else:
                cls = message_factory.MessageFactory(pool).GetPrototype(d)
        except Exception as e:  # any protobuf version's error: report it as the reader's
            self.error = f"cannot load the pprof schema from {desc}: {e}"
            return
        self.mod = type("ProfileModule", (), {"Profile": cls})

    def read(self, path):
        with open(path, "rb") as f:
            raw = f.read()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        p = self.mod.Profile()
        p.ParseFromString(raw)
        return p


def pprof_files(outdir, profile):
    """Window files of one kind, oldest window first (the name ends in the window start)."""
    # The window start is a UTC time like 20261121T194038Z (or a number): both sort as text
    # of one length.
    pat = re.compile(r"^gpuprof-.+-(\d+)-" + re.escape(profile) + r"-([0-9A-Z]+)\.pb\.gz$")
    found = []
    for name in os.listdir(outdir) if os.path.isdir(outdir) else []:
        m = pat.match(name)
        if m:
            found.append((m.group(2), os.path.join(outdir, name)))
    return [p for _, p in sorted(found)]


def pprof_index(p, sample_types):
    names = [p.string_table[st.type] for st in p.sample_type]
    for want in sample_types:
        if want in names:
            return names.index(want), names
    return None, names


def pprof_frames(p, sample):
    """Function names of a sample's stack, leaf first."""
    locs = {loc.id: loc for loc in p.location}
    funcs = {fn.id: fn for fn in p.function}
    frames = []
    for lid in sample.location_id:
        loc = locs.get(lid)
        if loc is None:
            frames.append("?")
            continue
        for line in loc.line:  # inlined frames come first within a location
            fn = funcs.get(line.function_id)
            frames.append(p.string_table[fn.name] if fn else "?")
    return frames


def trace_files(outdir):
    return sorted(glob.glob(os.path.join(outdir, "gpuprof-*-capture.json*")) +
                  glob.glob(os.path.join(outdir, "gpuprof-*-capture.pftrace")))


def load_trace(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


class Trace:
    """The slices of a JSON trace, split into the host process and the GPU processes."""

    def __init__(self, events):
        self.proc_names = {}
        for e in events:
            if e.get("ph") == "M" and e.get("name") == "process_name":
                self.proc_names[e.get("pid")] = e.get("args", {}).get("name", "")
        self.gpu_pids = {pid for pid, n in self.proc_names.items() if n.startswith("GPU ")}
        self.thread_names = {}
        for e in events:
            if e.get("ph") == "M" and e.get("name") == "thread_name":
                self.thread_names[(e.get("pid"), e.get("tid"))] = e.get("args", {}).get("name", "")
        gpu = [e for e in events if e.get("ph") == "X" and e.get("pid") in self.gpu_pids]
        # NCCL operations sit on communicator tracks in the GPU processes: not GPU work.
        self.gpu = [e for e in gpu if e.get("cat") != "nccl"]
        self.nccl = [e for e in gpu if e.get("cat") == "nccl"]
        self.host = [e for e in events if e.get("ph") == "X" and e.get("pid") not in self.gpu_pids]
        self.instants = [e for e in events if e.get("ph") == "i" and e.get("pid") not in self.gpu_pids]
        self.counters = [e for e in events if e.get("ph") == "C"]


# ---------------------------------------------------------------------------------------------
# Checks


def expand(v, ctx):
    if isinstance(v, str) and v.startswith("{") and v.endswith("}"):
        expr = v[1:-1]
        if expr == "launches":
            return ctx["launches"]
        if expr == "launches+1":
            return ctx["launches"] + 1
    return v


class Outcome:
    def __init__(self):
        self.items = []  # (status, text)

    def add(self, status, text):
        self.items.append((status, text))

    def eq(self, what, got, want):
        self.add("PASS" if got == want else "FAIL", f"{what}: {got!r}" +
                 ("" if got == want else f", expected {want!r}"))

    def at_least(self, what, got, want):
        ok = got is not None and got >= want
        self.add("PASS" if ok else "FAIL", f"{what}: {got!r}" + ("" if ok else f", expected >= {want!r}"))


def kernels_by_name(s):
    return {k["name"]: k for k in s.get("kernels", {}).get("by_name", [])}


def check_summary(c, s, o, ctx):
    kind = c["kind"]
    g = lambda k: expand(c.get(k), ctx)  # noqa: E731
    if kind == "kernel":
        k = kernels_by_name(s).get(c["name"])
        if k is None:
            o.add("FAIL", f"kernel {c['name']}: not in the summary (kernels: "
                  f"{sorted(kernels_by_name(s))[:8]})")
            return
        if "demangled" in c:
            o.eq(f"kernel {c['name']} demangled", k.get("demangled"), c["demangled"])
        if "count" in c:
            o.eq(f"kernel {c['name']} count", k["count"], g("count"))
        if "streams" in c:
            o.eq(f"kernel {c['name']} distinct streams", len(k.get("streams", [])), c["streams"])
        if "api" in c and ctx["mode"] != "gpu-only":
            o.eq(f"kernel {c['name']} joined APIs", k.get("apis"),
                 {c["api"]: g("count") if "count" in c else k["count"]})
        if "devices" in c:
            o.eq(f"kernel {c['name']} devices", sorted(k.get("devices", [])), c["devices"])
    elif kind == "kernel_match":
        rx = re.compile(c["name_re"])
        ks = [k for k in s.get("kernels", {}).get("by_name", []) if rx.search(k["name"])]
        total = sum(k["count"] for k in ks)
        if "count" in c:
            o.eq(f"kernels matching /{c['name_re']}/", total, g("count"))
        if "at_least" in c:
            o.at_least(f"kernels matching /{c['name_re']}/", total, g("at_least"))
        if "devices" in c:
            devs = sorted({d for k in ks for d in k.get("devices", [])})
            o.eq(f"devices of kernels matching /{c['name_re']}/", devs, c["devices"])
    elif kind == "kernels_total":
        n = s.get("kernels", {}).get("count")
        if "count" in c:
            o.eq("kernels in all", n, g("count"))
        if "at_least" in c:
            o.at_least("kernels in all", n, g("at_least"))
    elif kind == "distinct_streams":
        ks = kernels_by_name(s)
        streams = [tuple(ks[n]["streams"][0]) for n in c["names"] if n in ks and ks[n]["streams"]]
        o.eq(f"distinct streams of {len(c['names'])} kernels", len(set(streams)), len(c["names"]))
    elif kind == "stream_kernels":
        per = sorted(st["kernels"] for st in s.get("streams", []) if st.get("kernels"))
        o.eq("kernels per stream", per, [c["kernels_each"]] * c["name_count"])
    elif kind == "memcpy":
        m = s.get("memcpy", {}).get(c["direction"])
        if c.get("absent"):
            o.eq(f"memcpy {c['direction']}", m, None)
            return
        got = (m or {}).get("count"), (m or {}).get("bytes")
        o.eq(f"memcpy {c['direction']} (count, bytes)", got, (g("count"), g("bytes")))
    elif kind == "memset":
        m = s.get("memset", {})
        o.eq("memset (count, bytes)", (m.get("count"), m.get("bytes")), (g("count"), g("bytes")))
    elif kind == "memory":
        ent = next((m for m in s.get("memory", []) if m.get("device") == c["device"]), None)
        if ent is None:
            o.add("FAIL", f"memory of device {c['device']}: no entry in the summary")
            return
        for key in ("allocs", "frees", "bytes_allocated", "bytes_freed", "in_use", "peak_in_use",
                    "by_kind"):
            if key in c:
                o.eq(f"memory device {c['device']} {key}", ent.get(key), g(key))
        if "allocs_at_least" in c:
            o.at_least(f"memory device {c['device']} allocs", ent.get("allocs"), c["allocs_at_least"])
        if "in_use_at_least" in c:
            o.at_least(f"memory device {c['device']} in_use", ent.get("in_use"), c["in_use_at_least"])
    elif kind == "in_use_stack":
        stacks = s.get("stacks", {}).get("by_memory_in_use", [])
        rank = c.get("rank", 1)
        if len(stacks) < rank:
            o.add("FAIL", f"in-use stack #{rank}: the summary lists {len(stacks)} in-use stacks")
            return
        st = stacks[rank - 1]
        names = [f.get("function", f.get("kernel", "?")) for f in st.get("frames", [])]
        rx = re.compile(c["function_re"])
        hit = any(rx.search(n) for n in names)
        o.add("PASS" if hit else "FAIL", f"in-use stack #{rank} has a frame matching "
              f"/{c['function_re']}/" + ("" if hit else f": frames {names[:10]}"))
        if "bytes" in c:
            o.eq(f"in-use stack #{rank} bytes", st.get("bytes"), c["bytes"])
        if "allocations" in c:
            o.eq(f"in-use stack #{rank} allocations", st.get("allocations"), c["allocations"])
    elif kind == "oom":
        oom = s.get("oom")
        if oom is None:
            o.add("FAIL", "oom: no oom section in the summary (no failed allocation seen)")
            return
        for k in ("failed_allocations", "snapshots"):
            if k in c:
                o.eq(f"oom {k}", oom.get(k), c[k])
        if "first_api" in c:
            o.eq("oom first failed API", oom.get("first", {}).get("api"), c["first_api"])
    elif kind == "nccl":
        n = s.get("nccl")
        if n is None:
            o.add("FAIL", "nccl: no nccl block in the summary (NCCL_PROFILER_PLUGIN not loaded?)")
            return
        for k in ("comms", "ops", "ops_joined"):
            if k in c:
                o.eq(f"nccl {k}", n.get(k), c[k])
        for func, want in c.get("funcs", {}).items():
            got = n.get("funcs", {}).get(func, {})
            for k, v in want.items():
                o.eq(f"nccl {func} {k}", got.get(k), v)
    elif kind == "losses_zero":
        losses = {k: v for k, v in s.get("losses", {}).items() if v}
        o.eq("losses (non-zero counters)", losses, {})
    else:
        o.add("FAIL", f"unknown summary check kind {kind!r} in expectations.json")


def check_pprof(c, outdir, reader, o, ctx):
    files = pprof_files(outdir, c["profile"])
    label = f"pprof {c['profile']}"
    if not files:
        o.add("N/A", f"{label}: no gpuprof-*-{c['profile']}-*.pb.gz written")
        return
    if reader.mod is None:
        o.add("N/A", f"{label}: {len(files)} files, but no reader: {reader.error}")
        return
    profiles = []
    for f in files:
        try:
            profiles.append(reader.read(f))
        except Exception as e:  # a broken file is a failure of the agent
            o.add("FAIL", f"{label}: {os.path.basename(f)} does not decode: {e}")
            return
    for p in profiles:
        if not p.string_table or p.string_table[0] != "":
            o.add("FAIL", f"{label}: string_table[0] is not empty")
            return
    want = expand(c.get("value"), ctx)
    kind = c["kind"]
    if kind in ("pprof_total", "pprof_leaf"):
        total, found = 0, False
        rx = re.compile(c["leaf_re"]) if kind == "pprof_leaf" else None
        for p in profiles:
            idx, names = pprof_index(p, c["sample_type"])
            if idx is None:
                continue
            found = True
            for smp in p.sample:
                if rx:
                    fr = pprof_frames(p, smp)
                    if not fr or not rx.search(fr[0]):
                        continue
                total += smp.value[idx]
        if not found:
            o.add("FAIL", f"{label}: no sample type {c['sample_type']} (has {names})")
            return
        what = f"{label} {c['sample_type'][0]}" + (f" with leaf /{c['leaf_re']}/" if rx else "") \
            + f" over {len(profiles)} windows"
        if want is not None:
            o.eq(what, total, want)
        else:
            o.at_least(what, total, c["value_at_least"])
    elif kind == "pprof_stack":
        # Samples whose leaf matches leaf_re and whose stack has a frame matching each of
        # frames_re (and none matching without_re): their values add up to value.
        leaf = re.compile(c["leaf_re"])
        need = [re.compile(r) for r in c["frames_re"]]
        bad = re.compile(c["without_re"]) if "without_re" in c else None
        total = 0
        for p in profiles:
            idx, names = pprof_index(p, c["sample_type"])
            if idx is None:
                o.add("FAIL", f"{label}: no sample type {c['sample_type']} (has {names})")
                return
            for smp in p.sample:
                fr = pprof_frames(p, smp)
                if not fr or not leaf.search(fr[0]):
                    continue
                if all(any(rx.search(n) for n in fr[1:]) for rx in need) and \
                        not (bad and any(bad.search(n) for n in fr[1:])):
                    total += smp.value[idx]
        what = (f"{label} {c['sample_type'][0]} with leaf /{c['leaf_re']}/ under "
                + ", ".join(f"/{r}/" for r in c["frames_re"])
                + (f", not /{c['without_re']}/" if bad else ""))
        o.eq(what, total, want)
    elif kind == "pprof_inuse":
        p = profiles[-1]
        idx, names = pprof_index(p, c["sample_type"])
        if idx is None:
            o.add("FAIL", f"{label}: no sample type {c['sample_type']} (has {names})")
            return
        total = sum(smp.value[idx] for smp in p.sample)
        what = f"{label} {c['sample_type'][0]} in the last window"
        if want is not None:
            o.eq(what, total, want)
        else:
            o.at_least(what, total, c["value_at_least"])
        if "top_function_re" in c and p.sample:
            top = max(p.sample, key=lambda smp: smp.value[idx])
            fr = pprof_frames(p, top)
            rx = re.compile(c["top_function_re"])
            hit = any(rx.search(n) for n in fr)
            o.add("PASS" if hit else "FAIL", f"{label}: the top in-use stack has a frame matching "
                  f"/{c['top_function_re']}/" + ("" if hit else f": {fr[:10]}"))
    else:
        o.add("FAIL", f"unknown pprof check kind {kind!r}")


def within(inner, outer):
    """Whether slice `inner` lies inside slice `outer` (JSON microseconds, ns precision)."""
    return (outer["ts"] - 1e-3 <= inner["ts"] and
            inner["ts"] + inner.get("dur", 0) <= outer["ts"] + outer.get("dur", 0) + 1e-3)


def check_trace(c, t, o, ctx):
    kind = c["kind"]
    g = lambda k: expand(c.get(k), ctx)  # noqa: E731
    if kind == "trace_kernel":
        n = sum(1 for e in t.gpu if e.get("name") == c["name"])
        o.eq(f"trace: slices of kernel {c['name']}", n, g("count"))
    elif kind == "trace_kernel_match":
        rx = re.compile(c["name_re"])
        n = sum(1 for e in t.gpu if rx.search(e.get("name", "")))
        if "count" in c:
            o.eq(f"trace: kernel slices matching /{c['name_re']}/", n, g("count"))
        else:
            o.at_least(f"trace: kernel slices matching /{c['name_re']}/", n, g("at_least"))
    elif kind in ("trace_memcpy", "trace_memset"):
        if kind == "trace_memcpy":
            rx = re.compile(r"^Memcpy " + re.escape(c["direction"]) + r"\b")
            what = f"trace: Memcpy {c['direction']} (count, bytes)"
        else:
            rx = re.compile(r"^Memset\b")
            what = "trace: Memset (count, bytes)"
        sl = [e for e in t.gpu if rx.search(e.get("name", ""))]
        o.eq(what, (len(sl), sum(int(e.get("args", {}).get("bytes", 0)) for e in sl)),
             (g("count"), g("bytes")))
    elif kind == "trace_graph":
        sl = [e for e in t.gpu if e.get("name") in c["names"]]
        missing = sum(1 for e in sl if "graph_id" not in e.get("args", {}))
        o.eq("trace: graph kernels without graph_id", missing, 0)
        o.eq("trace: distinct graph ids", len({e["args"].get("graph_id") for e in sl
                                               if "graph_id" in e.get("args", {})}), c["graphs"])
        o.eq("trace: distinct graph node ids", len({e["args"].get("graph_node_id") for e in sl
                                                    if "graph_node_id" in e.get("args", {})}),
             c["nodes"])
    elif kind == "trace_api_threads":
        rx = re.compile(c["name_re"])
        tids = {e.get("tid") for e in t.host if rx.search(e.get("name", ""))}
        o.eq(f"trace: host threads with API slices /{c['name_re']}/", len(tids), c["threads"])
    elif kind == "trace_gpu_tracks":
        tracks = {(e.get("pid"), e.get("tid")) for e in t.gpu}
        o.at_least("trace: GPU tracks with slices", len(tracks), c["min_streams"])
    elif kind == "trace_nccl":
        sl = [e for e in t.nccl if e.get("name") == c["func"]]
        o.eq(f"trace: NCCL {c['func']} slices", len(sl), g("count"))
        if "tracks" in c:
            o.eq(f"trace: tracks with NCCL {c['func']} slices",
                 len({(e.get("pid"), e.get("tid")) for e in sl}), c["tracks"])
        kernels = {(e.get("pid"), e.get("args", {}).get("correlation")): e for e in t.gpu}
        outside = 0
        for e in sl:
            k = kernels.get((e.get("pid"), e.get("args", {}).get("correlation")))
            if k is None or e["ts"] < k["ts"] or e["ts"] + e["dur"] > k["ts"] + k["dur"] + 1e-3:
                outside += 1
        o.eq(f"trace: NCCL {c['func']} slices not inside their kernel", outside, 0)
    elif kind == "trace_nvtx_range":
        what = f"trace: NVTX range {c['name']!r} ({c['cat']})"
        sl = [e for e in t.host if e.get("name") == c["name"] and e.get("cat") == c["cat"]]
        o.eq(f"{what}: slices", len(sl), g("count"))
        if "threads" in c:
            o.eq(f"{what}: threads", len({e.get("tid") for e in sl}), c["threads"])
        if "api_inside" in c:
            rx = re.compile(c["api_inside"]["name_re"])
            got = sorted({sum(1 for a in t.host if a.get("tid") == e.get("tid") and
                              rx.search(a.get("name", "")) and within(a, e)) for e in sl})
            o.eq(f"{what}: API slices /{c['api_inside']['name_re']}/ inside each", got,
                 [c["api_inside"]["count"]] if sl else [])
        if "inside" in c:
            outer = [e for e in t.host if e.get("name") == c["inside"]["name"] and
                     e.get("cat") == c["inside"]["cat"]]
            alone = sum(1 for e in sl if not any(x.get("tid") == e.get("tid") and within(e, x)
                                                 for x in outer))
            o.eq(f"{what}: slices not inside a {c['inside']['name']!r} range", alone, 0)
    elif kind == "trace_nvtx_mark":
        n = sum(1 for e in t.instants if e.get("name") == c["name"] and e.get("cat") == c["cat"])
        o.eq(f"trace: NVTX mark {c['name']!r} ({c['cat']})", n, g("count"))
    elif kind == "trace_nvtx_span":
        sl = [e for e in t.host if e.get("name") == c["name"] and e.get("cat") == c["cat"] and
              t.thread_names.get((e.get("pid"), e.get("tid")), "").startswith("NVTX start/end")]
        o.eq(f"trace: NVTX start/end range {c['name']!r} ({c['cat']}) on an 'NVTX start/end' "
             "track", len(sl), g("count"))
        if c.get("cross_thread"):
            same = sum(1 for e in sl if e.get("args", {}).get("start_tid") ==
                       e.get("args", {}).get("end_tid"))
            o.eq(f"trace: NVTX start/end range {c['name']!r} ended on its starting thread", same, 0)
    elif kind == "trace_memory_counter":
        vals = [v for e in t.counters if "memory" in e.get("name", "").lower()
                for v in e.get("args", {}).values() if isinstance(v, (int, float))]
        o.at_least("trace: GPU memory counter maximum", max(vals) if vals else None,
                   c["max_at_least"])
    else:
        o.add("FAIL", f"unknown trace check kind {kind!r}")


# ---------------------------------------------------------------------------------------------
# Running


def check_analyze(a, path, trace, o):
    """`gpuprof analyze` of the same trace counts what the trace holds (docs/ANALYZE.md)."""
    p = subprocess.run([os.path.join(a.build, "bin", "gpuprof"), "analyze", "--json", "-", path],
                       capture_output=True, text=True)
    if p.returncode != 0:
        o.add("FAIL", f"trace: gpuprof analyze exited {p.returncode}: {p.stderr.strip()[-300:]}")
        return
    try:
        (t,) = json.loads(p.stdout)["traces"]
    except (ValueError, KeyError) as e:
        o.add("FAIL", f"trace: gpuprof analyze --json: {e}")
        return
    kernels = sum(1 for e in trace.gpu if e.get("cat") == "kernel")
    copies = [e for e in trace.gpu if e.get("cat") == "gpu_memcpy"]
    finished = [e for e in trace.nccl if "state" not in e.get("args", {})]
    o.eq("trace: gpuprof analyze kernels", sum(g["kernels"] for g in t["gpus"]), kernels)
    o.eq("trace: gpuprof analyze copy bytes", sum(g["copy_bytes"] for g in t["gpus"]),
         sum(e.get("args", {}).get("bytes", 0) for e in copies))
    o.eq("trace: gpuprof analyze NCCL ops", sum(c["ops"] for c in t["nccl"]), len(finished))
    # Busy time is the union of the GPU's work: never more than its sum.
    over = [g["device"] for g in t["gpus"]
            if g["busy_ns"] > g["kernel_ns"] + g["copy_ns"] + g["set_ns"]]
    o.eq("trace: gpuprof analyze GPUs busier than their work", over, [])


def run(argv, env, timeout=RUN_TIMEOUT_S):
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, env=env, capture_output=True, timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = "timeout", e.stdout or b"", e.stderr or b""
    return rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), time.monotonic() - t0


def exit_text(rc, err, timeout, outdir):
    """Why a run did not exit 0, in one line: the signal or the time limit, and the program's
    last stderr line (a CUDA error such as "no kernel image is available" says it there)."""
    if rc == "timeout":
        why = f"exit status: 'timeout', expected 0 (killed after {timeout:.0f} s)"
    elif rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        why = f"exit status: {rc}, expected 0 (killed by {name})"
    else:
        why = f"exit status: {rc}, expected 0"
    last = [l for l in err.splitlines() if l.strip()]
    if last:
        why += f"; last stderr line: {last[-1][-200:]!r}"
    return why + f" (stdout.txt, stderr.txt in {outdir})"


def sample_argv(spec, a):
    subst = {"samples": os.path.join(a.build, "samples"), "source": ROOT,
             "python": a.python or sys.executable, "launches": str(a.launches)}
    return [re.sub(r"\{(\w+)\}", lambda m: subst[m.group(1)], x) for x in spec["argv"]]


def mode_env(mode, base, outdir, overhead=False):
    env = dict(base)
    for k in list(env):
        if k.startswith("GPUPROF_"):
            del env[k]  # the verification decides every setting
    # PyTorch's allocator as the pytorch sample states it (the native caching allocator): a
    # machine-wide backend:cudaMallocAsync would free the leaked tensors at interpreter exit,
    # before the summary, and fail its in-use checks for a reason that is not the agent's.
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    env.update({"GPUPROF_MODE": "continuous", "GPUPROF_WINDOW": "1s", "GPUPROF_LOG": "warn",
                "GPUPROF_OUTPUT_DIR": outdir, "GPUPROF_TRACE_FORMAT": "json.gz",
                "GPUPROF_RUN_DIR": os.path.join(outdir, "run")})
    if overhead:
        # The agent's defaults are what the goal is about. Windows end on wall-clock
        # boundaries: with 1 s windows a flush falls inside the half-second loop in about
        # every other run, which adds noise of its own; with the default 15 s, in about one
        # run in 30, which the median absorbs.
        del env["GPUPROF_WINDOW"]
    else:
        # A stack for every launch: sampled launches are weighted estimates, and the checks
        # compare launch counts in the pprof files exactly. The overhead run keeps the default.
        env["GPUPROF_STACK_SAMPLE_EVERY"] = "1"
    # The agent is NCCL's profiler plugin and the NVTX injection too (docs/CONFIGURATION.md),
    # as `gpuprof run` sets them.
    env.pop("NCCL_PROFILER_PLUGIN", None)
    env.pop("NVTX_INJECTION64_PATH", None)
    if env.get("CUDA_INJECTION64_PATH"):
        env["NCCL_PROFILER_PLUGIN"] = env["CUDA_INJECTION64_PATH"]
        env["NVTX_INJECTION64_PATH"] = env["CUDA_INJECTION64_PATH"]
    if mode in ("capture", "gpu-only"):
        env["GPUPROF_CAPTURE_ON_START"] = "60s"
    if mode == "gpu-only":
        env["GPUPROF_GPU_ONLY"] = "1"
    return env


def verify_run(name, spec, mode, a, env_base, reader, timeout=None):
    """One sample in one mode: returns (status, Outcome, seconds, note). timeout: this run's
    limit in seconds (default --run-timeout)."""
    timeout = a.run_timeout if timeout is None else timeout
    ctx = {"mode": mode, "launches": a.launches}
    outdir = os.path.join(a.work, name, mode)
    shutil.rmtree(outdir, ignore_errors=True)
    os.makedirs(outdir)
    gpuprof = os.path.join(a.build, "bin", "gpuprof")
    argv = [gpuprof, "run", "--output", outdir, "--"] + sample_argv(spec, a)
    rc, out, err, secs = run(argv, mode_env(mode, env_base, outdir), timeout)
    with open(os.path.join(outdir, "stdout.txt"), "w") as f:
        f.write(out)
    with open(os.path.join(outdir, "stderr.txt"), "w") as f:
        f.write(err)
    o = Outcome()
    if spec.get("skip_stdout") and re.search(spec["skip_stdout"], out, re.M) and rc == 0:
        line = next(l for l in out.splitlines() if re.search(spec["skip_stdout"], l))
        # Some reasons to skip cannot hold on a GPU machine (gpu-verify.sh found one with
        # nvidia-smi): there the agent or the library path broke CUDA in the process, which a
        # SKIP would hide.
        bad = spec.get("skip_fails_on_gpu")
        if not a.simulator and bad and re.search(bad, line):
            o.add("FAIL", f"skipped although this machine has a GPU: {line!r} (stderr.txt in "
                  f"{outdir})")
            return "FAIL", o, secs, line
        return "SKIP", o, secs, line
    if rc != 0:
        o.add("FAIL", exit_text(rc, err, timeout, outdir))
    else:
        o.add("PASS", "exit status: 0")
    pat = spec.get("stdout_sim" if a.simulator else "stdout_gpu")
    if pat:
        pat = pat.replace("{launches}", str(a.launches))
        o.add("PASS" if re.search(pat, out, re.M) else "FAIL",
              f"stdout has a line matching /{pat}/" + ("" if re.search(pat, out, re.M)
                                                       else f": {out[-300:]!r}"))
    agent_lines = [l for l in err.splitlines() if l.startswith("gpuprof")]
    # Lines the sample causes on purpose (stderr_expect: regexes, each matching one line).
    for rx in spec.get("stderr_expect", []):
        hits = [l for l in agent_lines if re.search(rx, l)]
        o.eq(f"agent lines on stderr matching /{rx}/", len(hits), 1)
        agent_lines = [l for l in agent_lines if l not in hits]
    o.eq("agent warnings on stderr", agent_lines, [])

    summary, why = load_summary(outdir)
    checks = []
    for c in spec["checks"]:
        if "when_stdout" in c and not re.search(c["when_stdout"], out):
            continue
        if mode == "gpu-only" and c.get("gpu_only") is False:
            continue
        if "modes" in c and mode not in c["modes"]:
            continue
        checks.append(c)
    if summary is None:
        o.add("FAIL", "summary: " + why)
    elif summary.get("state") != "active":
        o.add("FAIL", f"summary: agent {summary.get('state')}: {summary.get('inactive_reason')}")
        summary = None

    trace = None
    if mode != "continuous":
        tfiles = trace_files(outdir)
        if not tfiles:
            o.add("N/A", "trace: no gpuprof-*-capture.* file written (captures missing from "
                  "this agent build?)")
        elif len(tfiles) > 1:
            o.add("FAIL", f"trace: {len(tfiles)} capture files, expected 1: {tfiles}")
        elif tfiles[0].endswith(".pftrace"):
            o.add("FAIL", "trace: a .pftrace was written although GPUPROF_TRACE_FORMAT=json.gz")
        else:
            v = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "trace",
                                                             "validate_trace.py"), tfiles[0]],
                               capture_output=True, text=True)
            o.add("PASS" if v.returncode == 0 else "FAIL",
                  f"trace: validate_trace.py {os.path.basename(tfiles[0])}" +
                  ("" if v.returncode == 0 else ": " + (v.stdout + v.stderr).strip()[-600:]))
            try:
                trace = Trace(load_trace(tfiles[0]))
            except (OSError, ValueError, KeyError) as e:
                o.add("FAIL", f"trace: cannot read {tfiles[0]}: {e}")
            if trace is not None:
                check_analyze(a, tfiles[0], trace, o)
            if trace is not None and mode == "gpu-only":
                api = sum(1 for e in trace.host if API_NAME.match(e.get("name", "")))
                o.eq("trace (GPU-only): API slices", api, 0)
                # Nor NVTX ranges and marks, nor anything else of the host process.
                o.eq("trace (GPU-only): host-process slices and instants",
                     len(trace.host) + len(trace.instants), 0)

    for c in checks:
        k = c["kind"]
        sub = Outcome()
        if k.startswith("pprof_"):
            if mode != "continuous":
                continue
            check_pprof(c, outdir, reader, sub, ctx)
        elif k.startswith("trace_"):
            if trace is None:
                continue
            check_trace(c, trace, sub, ctx)
        else:
            if summary is None:
                continue
            check_summary(c, summary, sub, ctx)
        for st, text in sub.items:
            if c.get("informational") and st == "FAIL":
                st = "INFO"
            o.add(st, text)

    required = set(a.require)
    final = []
    for st, text in o.items:
        feature = "pprof" if text.startswith("pprof") else "trace" if text.startswith("trace") \
            else "summary"
        if st == "N/A" and feature in required:
            st, text = "FAIL", text + f" [required: --require {feature}]"
        final.append((st, text))
    o.items = final
    sts = {st for st, _ in o.items}
    status = "FAIL" if "FAIL" in sts else "N/A" if "N/A" in sts else "PASS"
    return status, o, secs, ""


def loop_ms(out):
    m = re.search(r"launches in ([0-9.]+) ms", out)
    return float(m.group(1)) if m else None


def time_left(deadline):
    return None if deadline is None else deadline - time.monotonic()


def overhead(a, env_base, deadline=None):
    """Median loop time of launch_loop without and with the agent (continuous mode); runs
    stop at deadline (time.monotonic()), and the medians are of the runs made by then."""
    prog = os.path.join(a.build, "samples", "launch_loop")
    gpuprof = os.path.join(a.build, "bin", "gpuprof")
    outdir = os.path.join(a.work, "overhead")
    os.makedirs(outdir, exist_ok=True)
    base_env = {k: v for k, v in env_base.items() if k != "CUDA_INJECTION64_PATH"}
    with_env = mode_env("continuous", env_base, outdir, overhead=True)
    sides = {"without": ([prog, str(a.launches)], base_env),
             "with": ([gpuprof, "run", "--output", outdir, "--", prog, str(a.launches)], with_env)}
    times = {"without": [], "with": []}
    # First one untimed run of each side: the first processes pay for cold files, a GPU that
    # idles at low clocks and, without persistence mode, the driver's start; counted, that
    # cost would go to whichever side ran first. Then pairs in alternating order (ABBA), so
    # that drift over the runs (clocks, heat, other load) falls on both sides alike.
    order = [("without", False), ("with", False)]
    for i in range(a.repeat):
        pair = ["without", "with"] if i % 2 == 0 else ["with", "without"]
        order += [(side, True) for side in pair]
    cut = False
    for side, timed in order:
        left = time_left(deadline)
        if left is not None and left < 1:
            cut = True
            break
        argv, env = sides[side]
        limit = a.run_timeout if left is None else min(a.run_timeout, left)
        rc, out, err, _ = run(argv, env, limit)
        ms = loop_ms(out)
        if rc != 0 or ms is None:
            return {"error": f"launch_loop {side} the agent failed (exit {rc}): "
                             f"{err.strip()[-300:]}"}
        if timed:
            times[side].append(ms)
    without, with_ = times["without"], times["with"]
    if not without or not with_:
        return {"error": "not measured: the time budget (--budget) was used up before it"}
    m0, m1 = statistics.median(without), statistics.median(with_)
    # The run-to-run spread without the agent: a slowdown closer to the goal than this is not
    # told apart from noise by these runs.
    noise = (max(without) - min(without)) / m0 * 100.0 if m0 > 0 else None
    return {"launches": a.launches, "repeat": a.repeat, "without_ms": without, "with_ms": with_,
            "median_without_ms": m0, "median_with_ms": m1,
            "slowdown_pct": (m1 - m0) / m0 * 100.0 if m0 > 0 else None, "noise_pct": noise,
            "cut_short": cut}


def overhead_verdict(ov, goal, simulator):
    """The overhead line's verdict: the goal is met, missed, or missed by less than the noise."""
    pct, noise = ov["slowdown_pct"], ov.get("noise_pct")
    if simulator:
        return "(simulated GPU: no goal)"
    if pct is None:
        return "(no loop time without the agent)"
    if pct <= goal:
        return f"meets the goal of <= {goal:g}%"
    if noise is not None and pct - goal <= noise:
        return (f"MISSES the goal of <= {goal:g}% by less than the run-to-run noise "
                f"({noise:.2f}% without the agent): not conclusive, repeat with a larger --repeat")
    return f"MISSES the goal of <= {goal:g}%"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True, help="build directory (bin/gpuprof, samples/)")
    ap.add_argument("--work", required=True, help="scratch directory for outputs")
    ap.add_argument("--simulator", action="store_true", help="the simulated GPU: no overhead goal")
    ap.add_argument("--samples", default="", help="comma-separated names (default: all that can run)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--launches", type=int, default=200000, help="launch_loop's launches")
    ap.add_argument("--repeat", type=int, default=7,
                    help="timed overhead runs per side, after one untimed each (0: no overhead)")
    ap.add_argument("--goal", type=float, default=2.0, help="overhead goal in percent (GPU only)")
    ap.add_argument("--require", default="summary,pprof,trace",
                    help="features whose absence fails (others are reported N/A)")
    ap.add_argument("--python", default="", help="python for the PyTorch sample")
    ap.add_argument("--expectations", default=os.path.join(ROOT, "samples", "expectations.json"))
    ap.add_argument("--json", default="", help="write all results to this file (after every run)")
    ap.add_argument("--run-timeout", type=float, default=RUN_TIMEOUT_S,
                    help="seconds one sample run may take before it is killed and fails")
    ap.add_argument("--budget", type=float, default=480,
                    help="seconds for all runs (0: no limit); runs past it are not started")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every check")
    a = ap.parse_args(argv)
    # Line by line even into a pipe (tee): a GPU session killed at its time limit keeps what
    # was printed up to then.
    sys.stdout.reconfigure(line_buffering=True)
    a.require = [x for x in a.require.split(",") if x]
    modes = [m for m in a.modes.split(",") if m]
    if any(m not in MODES for m in modes):
        ap.error(f"--modes: choose from {','.join(MODES)}")
    with open(a.expectations) as f:
        spec = json.load(f)["samples"]
    names = [n for n in a.samples.split(",") if n] or \
        [n for n, s in spec.items() if s.get("simulator") or not a.simulator]
    for n in names:
        if n not in spec:
            ap.error(f"--samples: {n} is not in {a.expectations}")
    os.makedirs(a.work, exist_ok=True)
    # A GPU bundle (scripts/gpu-bundle.sh) brings the schema compiled; a build compiles it here.
    reader = PprofReader(tempfile.mkdtemp(prefix="pyproto-", dir=a.work),
                         desc=os.path.join(a.build, "share", "profile.desc"))
    env_base = dict(os.environ)
    if a.simulator:
        # launch_loop measures the host cost of a launch because a GPU finishes an empty kernel
        # before the host has launched the next; the simulator's default kernel (2 us) would
        # make its bounded stream queue (tests/fakegpu/README.md) pace the loop instead.
        env_base["FAKEGPU_KERNEL_NS"] = "empty_kernel=500"

    rows, results, failed = [], [], False

    def save(ov=None):
        if a.json:  # after every run too: a session killed midway keeps the results so far
            with open(a.json + ".tmp", "w") as f:
                json.dump({"simulator": a.simulator, "results": results, "overhead": ov}, f,
                          indent=1)
            os.replace(a.json + ".tmp", a.json)

    # The whole run must end, table printed, inside the GPU session's command limit even if
    # every run hangs until its --run-timeout: runs that would start past the budget are not
    # started (NOT RUN, a failure), and the last one's limit is what is left.
    deadline = time.monotonic() + a.budget if a.budget > 0 else None
    for n in names:
        for mode in modes:
            left = time_left(deadline)
            if left is not None and left < 2:
                o = Outcome()
                o.add("FAIL", f"not run: the time budget of {a.budget:g} s (--budget) was used up")
                status, secs, note = "NOT RUN", 0.0, ""
            else:
                status, o, secs, note = verify_run(
                    n, spec[n], mode, a, env_base, reader,
                    a.run_timeout if left is None else min(a.run_timeout, left))
            counts = {st: sum(1 for s, _ in o.items if s == st) for st in ("PASS", "FAIL", "N/A", "INFO")}
            if status in ("FAIL", "N/A", "NOT RUN") and not note:
                # The table names the first failed check: what broke, without scrolling back.
                bad = [t for s, t in o.items if s == ("FAIL" if status == "NOT RUN" else status)]
                note = bad[0] if len(bad[0]) <= 80 else bad[0][:77] + "..."
                if len(bad) > 1:
                    note += f" (+{len(bad) - 1} more)"
            rows.append((n, mode, status, counts, secs, note))
            results.append({"sample": n, "mode": mode, "status": status, "seconds": round(secs, 3),
                            "note": note, "checks": [{"status": s, "text": t} for s, t in o.items]})
            failed |= status in ("FAIL", "NOT RUN")
            for st, text in o.items:
                if a.verbose or st in ("FAIL", "N/A", "INFO"):
                    mark = LOUD if st in ("FAIL", "N/A") else "  "
                    print(f"{mark} {n:14} {mode:10} {st:4}  {text}")
            save()

    print()
    print(f"{'sample':15}{'mode':12}{'result':8}{'checks':>8}{'failed':>8}{'n/a':>6}{'seconds':>9}  note")
    for n, mode, status, c, secs, note in rows:
        total = c["PASS"] + c["FAIL"] + c["N/A"]
        print(f"{n:15}{mode:12}{status:8}{total:>8}{c['FAIL']:>8}{c['N/A']:>6}{secs:>9.2f}  {note}")

    ov = None
    if a.repeat > 0 and "launch_loop" in spec and os.path.exists(os.path.join(a.build, "samples", "launch_loop")):
        ov = overhead(a, env_base, deadline)
        print()
        if "error" in ov:
            print(f"{LOUD} overhead: {ov['error']}")
            failed = True
        else:
            pct = ov["slowdown_pct"]
            verdict = overhead_verdict(ov, a.goal, a.simulator)
            ov["verdict"] = verdict
            # The ranges show the noise the medians stand against (a shared host, clocks).
            runs = f"{len(ov['without_ms'])}" if len(ov["without_ms"]) == len(ov["with_ms"]) \
                else f"{len(ov['without_ms'])} without and {len(ov['with_ms'])} with"
            cut = f", cut short by --budget from {ov['repeat']}" if ov["cut_short"] else ""
            print(f"overhead: launch_loop {ov['launches']} launches, median of {runs} "
                  f"(after 1 untimed run each{cut}): "
                  f"{ov['median_without_ms']:.2f} ms without the agent, {ov['median_with_ms']:.2f} ms "
                  f"with it (continuous): {pct:+.2f}% {verdict}; runs "
                  f"{min(ov['without_ms']):.2f}..{max(ov['without_ms']):.2f} ms without, "
                  f"{min(ov['with_ms']):.2f}..{max(ov['with_ms']):.2f} ms with")
    notrun = [f"{r['sample']}/{r['mode']}" for r in results if r["status"] == "NOT RUN"]
    if notrun:
        print(f"{LOUD} NOT RUN (time budget of {a.budget:g} s used up; see the seconds column): "
              f"{', '.join(notrun)}")
    na = sorted({f"{r['sample']}/{r['mode']}" for r in results if r["status"] == "N/A"})
    if na:
        print(f"{LOUD} NOT VERIFIED (outputs this agent build does not produce): {', '.join(na)}")
    skipped = sorted({f"{r['sample']} ({r['note']})" for r in results if r["status"] == "SKIP"})
    if skipped and not a.simulator:
        print(f"{LOUD} NOT VERIFIED (skipped on this machine): {', '.join(skipped)}")
    save(ov)
    print("verify: " + ("FAILED" if failed else "passed" + (" (with N/A items)" if na else "")))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

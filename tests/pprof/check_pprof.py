#!/usr/bin/env python3
"""Runs a pprof test program under the agent, reads every profile it produced with a real reader
(`go tool pprof -symbolize=none -raw`) and checks the values against what the program did.

Usage (from ctest; tests/lib/GpuprofTest.cmake sets the agent's environment):
    check_pprof.py --case NAME -- PROGRAM [ARGS...]

Stacks are compared by function name, leaf first, up to and including `main`; the frames
beyond it belong to the C library. Samples with the same chain are summed (one call site per
loop, but two call sites in one function are two stacks). The python cases compare the Python
frames of each stack by (function, line), the lines found by markers in the program's source.
"""

import argparse
import calendar
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

KINDS = ("gpu_time", "gpu_memory", "memcpy")
TYPES = {
    "gpu_time": ["launches/count", "gpu_time/nanoseconds"],
    "gpu_memory": ["alloc_objects/count", "alloc_space/bytes", "inuse_objects/count",
                   "inuse_space/bytes"],
    "memcpy": ["memcpy_count/count", "memcpy_time/nanoseconds", "memcpy_bytes/bytes"],
}
DEFAULT = {"gpu_time": "gpu_time", "gpu_memory": "inuse_space", "memcpy": "memcpy_bytes"}
PERIOD = {"gpu_time": "gpu_time nanoseconds", "gpu_memory": "space bytes",
          "memcpy": "memcpy_bytes bytes"}
MIB = 1 << 20


class Check:
    def __init__(self):
        self.failures = []

    def eq(self, what, got, want):
        if got != want:
            self.failures.append(f"{what}: got {got!r}, expected {want!r}")

    def true(self, what, cond):
        if not cond:
            self.failures.append(what)

    def exit_status(self, name):
        """Prints the failures (or that `name` passed) and returns the script's exit status."""
        for f in self.failures:
            print("FAIL:", f)
        if not self.failures:
            print(f"{name}: ok")
        return 1 if self.failures else 0


LOC_RE = re.compile(r"^\s*(\d+): (0x[0-9a-f]+)(?: M=(\d+))?(?: (.*) (\S*):(-?\d+) s=(-?\d+)(?:\(.*\))?)?\s*$")
SAMPLE_RE = re.compile(r"^\s*((?:-?\d+\s+)+)-?\d+: ([\d ]*)$")


def go_env():
    env = dict(os.environ)
    home = os.path.join(os.environ.get("E2E_WORKDIR", "/tmp"), "gohome")
    os.makedirs(home, exist_ok=True)
    env.setdefault("HOME", home)
    return env


def pyroscope_rules(path):
    """What `go tool pprof` does not check but Pyroscope does (tests/pyroscope/receiver.py):
    sample type names, UTF-8 strings, size and sample limits, every string index; and what it
    would silently drop (negative values, numeric labels, locations it cannot resolve)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyroscope"))
    from receiver import Reject, check_pprof
    with open(path, "rb") as f:
        raw = f.read()
    try:
        # The window time is checked at upload (the files of a test may be read much later),
        # the sample limit there too (large windows are pushed in parts).
        res = check_pprof(raw, 1 << 62, check_time=False)
    except Reject as e:
        raise AssertionError(f"{path}: Pyroscope would refuse it ({e.status}): {e}")
    if res["lost"]:
        raise AssertionError(f"{path}: Pyroscope would drop data: {res['lost']}")


def read_profile(path):
    """go tool pprof -raw, parsed: header, sample types, samples (values, functions, labels)."""
    if not shutil.which("go"):
        print("SKIP: `go` is not installed (Debian golang-go; scripts/install-deps.sh)")
        sys.exit(0)
    r = subprocess.run(["go", "tool", "pprof", "-symbolize=none", "-raw", path],
                       capture_output=True, text=True, env=go_env(), timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"go tool pprof -raw {path} failed ({r.returncode}): {r.stderr}")
    pyroscope_rules(path)
    prof = {"path": path, "comments": [], "samples": [], "locations": {}, "mappings": [],
            "mapping_paths": {}}
    section = "header"
    raw_samples = []
    for line in r.stdout.splitlines():
        if line == "Samples:":
            section = "types"
            continue
        if line == "Locations":
            section = "locations"
            continue
        if line == "Mappings":
            section = "mappings"
            continue
        if section == "header":
            key, _, val = line.partition(": ")
            if key == "Comment":
                prof["comments"].append(val)
            else:
                prof[key] = val
        elif section == "types":
            types = line.split()
            prof["default"] = next((t.split("/")[0] for t in types if t.endswith("[dflt]")), None)
            prof["types"] = [t.replace("[dflt]", "") for t in types]
            section = "samples"
        elif section == "samples":
            m = SAMPLE_RE.match(line + (" " if line.endswith(":") else ""))
            if m and ":[" not in line:
                nums = line.split(":")[0].split()
                ids = [int(x) for x in line.split(":")[1].split()]
                raw_samples.append({"values": [int(x) for x in nums], "locs": ids, "labels": {}})
            elif raw_samples and ":[" in line:
                for key, val in re.findall(r"(\w+):\[([^\]]*)\]", line):
                    raw_samples[-1]["labels"][key] = val
            elif line.strip():
                raise AssertionError(f"{path}: unparsed sample line {line!r}")
        elif section == "locations":
            m = LOC_RE.match(line)
            if not m:
                raise AssertionError(f"{path}: unparsed location line {line!r}")
            prof["locations"][int(m.group(1))] = {
                "address": int(m.group(2), 16), "mapping": int(m.group(3) or 0),
                "function": m.group(4), "file": m.group(5), "line": int(m.group(6) or 0)}
        elif section == "mappings" and line.strip():
            prof["mappings"].append(line)
            fields = line.split()
            prof["mapping_paths"][int(fields[0].rstrip(":"))] = fields[2] if len(fields) > 2 else ""
    for s in raw_samples:
        s["functions"] = [prof["locations"][i]["function"] for i in s["locs"]]
        prof["samples"].append(s)
    return prof


def chain(sample, until="main"):
    names = sample["functions"]
    return tuple(names[:names.index(until) + 1]) if until in names else tuple(names)


def by_chain(prof, label=None):
    """{chain: summed values}; with label, {(chain, label value): values}."""
    out = {}
    for s in prof["samples"]:
        key = chain(s) if label is None else (chain(s), s["labels"].get(label))
        vals = out.setdefault(key, [0] * len(s["values"]))
        for i, v in enumerate(s["values"]):
            vals[i] += v
    return out


def profile_files(pid, kind):
    host = socket.gethostname().replace("/", "_")
    pattern = os.path.join(os.environ["GPUPROF_OUTPUT_DIR"], f"gpuprof-{host}-{pid}-{kind}-*.pb.gz")
    return sorted(glob.glob(pattern))


def stamp_of(path):
    m = re.search(r"-(\d{8}T\d{6}Z)\.pb\.gz$", path)
    return calendar.timegm(time.strptime(m.group(1), "%Y%m%dT%H%M%SZ")) if m else None


def check_common(c, kind, prof):
    c.eq(f"{kind}: sample types", prof.get("types"), TYPES[kind])
    c.eq(f"{kind}: default sample type", prof.get("default"), DEFAULT[kind])
    c.eq(f"{kind}: period type", prof.get("PeriodType"), PERIOD[kind])
    for t in prof.get("types", []):
        c.true(f"{kind}: sample type {t} has a '-'", "-" not in t)
    # A profile whose samples have only synthetic leaves has no mapping at all; `pprof -raw`
    # then shows the empty one it makes up for them (no file, no addresses), never written.
    mappings = prof["mappings"]
    if len(mappings) == 1 and mappings[0].split() == ["1:", "0x0/0x0/0x0"]:
        mappings = []
    for m in mappings:
        c.true(f"{kind}: mapping without functions: {m}", m.endswith("[FN]"))
    # pprof takes mapping 1 for the binary ("File:"): the program, never a library.
    first = prof["mapping_paths"].get(1, "")
    c.true(f"{kind}: mapping 1 is the program, not the library {first}",
           ".so" not in os.path.basename(first))
    ids = sorted(prof["locations"])
    c.eq(f"{kind}: location ids dense", ids, list(range(1, len(ids) + 1)))
    for s in prof["samples"]:
        c.true(f"{kind}: sample {s['functions']} has no gpu label", "gpu" in s["labels"])
        for f in s["functions"][1:]:
            c.true(f"{kind}: agent/driver frame {f} in {s['functions']}",
                   not f.startswith(("libgpuprof.so", "libcupti", "libcuda")))


def load_single(c, pid, kind):
    files = profile_files(pid, kind)
    c.eq(f"{kind}: number of files", len(files), 1)
    if len(files) != 1:
        return None
    prof = read_profile(files[0])
    check_common(c, kind, prof)
    return prof


def expect_values(c, kind, got, want, what=None):
    what = what or kind
    c.eq(f"{what}: chains", sorted(got), sorted(want))
    for key, vals in want.items():
        if key in got:
            for i, v in enumerate(vals):
                if v is not None:
                    c.eq(f"{what}: {key} {TYPES[kind][i]}", got[key][i], v)


def case_basic(c, r, pid):
    prof = load_single(c, pid, "gpu_time")
    if prof:
        got = by_chain(prof)
        expect_values(c, "gpu_time", got, {
            ("[gpu] pp_kernel_a", "pp_launch_a", "main"): [3, 15000],
            ("[gpu] pp_kernel_a", "pp_launch_b", "main"): [2, 10000],
            ("[gpu] pp_kernel_b", "pp_launch_b", "main"): [1, 7000],
        })
        for s in prof["samples"]:
            c.eq(f"gpu_time: label of {s['functions']}", s["labels"].get("gpu"), "0")
        c.eq("gpu_time: Duration", prof.get("Duration") is not None, True)
    prof = load_single(c, pid, "gpu_memory")
    if prof:
        got = by_chain(prof)
        expect_values(c, "gpu_memory", got, {
            ("cuMemAlloc", "pp_alloc_keep", "main"): [3, 3 * MIB + 4096, 2, 3 * MIB],
            ("cuMemAlloc", "pp_alloc_free", "main"): [3, 3 * 8192, 0, 0],
            ("cuMemAllocHost", "pp_alloc_pinned", "main"): [1, 16384, 1, 16384],
            ("cuMemAllocManaged", "pp_alloc_managed", "main"): [1, 65536, 1, 65536],
            ("cuMemAlloc", "pp_copy", "main"): [2, 8192, 0, 0],
        })
        labels = by_chain(prof, "gpu")
        c.true("gpu_memory: pinned memory is labelled gpu=host",
               (("cuMemAllocHost", "pp_alloc_pinned", "main"), "host") in labels)
        # In use reconciles with the live-allocation map, as the summary reports it.
        summary = os.path.join(os.environ["E2E_WORKDIR"], "summary.json")
        if os.path.exists(summary):
            with open(summary) as f:
                s = json.load(f)
            live = sum(e["bytes"] for e in s["stacks"]["by_memory_in_use"])
            live += s["stacks"]["memory_in_use_without_stack"]["bytes"]
            c.eq("gpu_memory: inuse_space total vs the summary's live allocations",
                 sum(v[3] for v in got.values()), live)
    prof = load_single(c, pid, "memcpy")
    if prof:
        got = by_chain(prof)
        expect_values(c, "memcpy", got, {
            ("[gpu] memcpy HtoD", "pp_copy", "main"): [2, None, 8192],
            ("[gpu] memcpy DtoH", "pp_copy", "main"): [1, None, 1000],
            ("[gpu] memcpy DtoD", "pp_copy", "main"): [1, None, 2048],
            ("[gpu] memset", "pp_copy", "main"): [1, None, 512],
        })
        for key, vals in got.items():
            c.true(f"memcpy: {key} has no GPU time", vals[1] > 0)


def case_windows(c, r, pid):
    secs = dict(re.findall(r"^(window[12]) (\d+)$", r.stdout, re.M))
    if len(secs) != 2:
        c.failures.append(f"program did not report its windows: {r.stdout!r}")
        return
    w1, w2 = int(secs["window1"]), int(secs["window2"])
    c.eq("the program's windows are consecutive seconds", w2, w1 + 1)
    want = {
        "gpu_time": {
            w1: {("[gpu] pp_kernel_w1", "pp_window_one", "main"): [2, 6000]},
            w2: {("[gpu] pp_kernel_w2", "pp_window_two", "main"): [3, 9000]},
        },
        "gpu_memory": {
            w1: {("cuMemAlloc", "pp_window_one", "main"): [1, 1000, 1, 1000]},
            w2: {("cuMemAlloc", "pp_window_one", "main"): [0, 0, 1, 1000],
                 ("cuMemAlloc", "pp_window_two", "main"): [1, 2000, 1, 2000]},
        },
    }
    for kind, windows in want.items():
        files = profile_files(pid, kind)
        stamps = [stamp_of(f) for f in files]
        c.eq(f"{kind}: windows written", stamps, [w1, w2])
        for path, stamp in zip(files, stamps):
            if stamp not in windows:
                continue
            prof = read_profile(path)
            check_common(c, kind, prof)
            expect_values(c, kind, by_chain(prof), windows[stamp], f"{kind}@{stamp}")
            if stamp == w1:
                c.eq(f"{kind}@{stamp}: Duration", prof.get("Duration"), "1s")
    c.eq("memcpy: files", profile_files(pid, "memcpy"), [])


def case_reload(c, r, pid):
    secs = dict(re.findall(r"^(window[12]) (\d+)$", r.stdout, re.M))
    bases = dict(re.findall(r"^base ([ab]) (\S+)$", r.stdout, re.M))
    if len(secs) != 2 or len(bases) != 2:
        c.failures.append(f"program did not report its windows and bases: {r.stdout!r}")
        return
    w1, w2 = int(secs["window1"]), int(secs["window2"])
    c.true("window 2 comes after window 1", w2 > w1)
    # Otherwise the case would not test a module replaced at the same addresses.
    c.eq("plugin b loaded where plugin a was", bases["b"], bases["a"])
    want = {
        w1: {("[gpu] pp_kernel_r", "pp_reload_inner_a", "pp_reload_entry", "pp_reload",
                 "main"): [1, 3000]},
        w2: {("[gpu] pp_kernel_r", "pp_reload_inner_b", "pp_reload_entry", "pp_reload",
                 "main"): [1, 3000]},
    }
    files = profile_files(pid, "gpu_time")
    stamps = [stamp_of(f) for f in files]
    c.eq("gpu_time: windows written", stamps, [w1, w2])
    for path, stamp in zip(files, stamps):
        if stamp in want:
            prof = read_profile(path)
            check_common(c, "gpu_time", prof)
            expect_values(c, "gpu_time", by_chain(prof), want[stamp], f"gpu_time@{stamp}")


def case_sampled(c, r, pid):
    prof = load_single(c, pid, "gpu_time")
    if not prof:
        return
    got = by_chain(prof)
    key = ("[gpu] pp_kernel_s", "pp_sampled", "main")
    c.eq("gpu_time: chains (every sample has the launching stack)", sorted(got), [key])
    if key in got:
        launches, ns = got[key]
        c.eq("gpu_time: launches are a multiple of the sample period", launches % 4, 0)
        c.true(f"gpu_time: weighted launches {launches} far from the 400 made",
               320 <= launches <= 480)
        c.eq("gpu_time: weighted time = launches x 1000 ns", ns, launches * 1000)
    for s in prof["samples"]:
        c.eq(f"gpu_time: each sample stands for 4 launches ({s['functions']})",
             s["values"][0] % 4, 0)
    c.true("gpu_time: the comment counts the unsampled launches",
           any("unsampled launches" in x for x in prof["comments"]))


def case_sampled_full(c, r, pid):
    """Sampled launches whose stack the full stack table could not keep still stand for the
    launches their sampler skipped: weighted / period + unsampled = the 400 made."""
    with open(os.path.join(os.environ["E2E_WORKDIR"], "summary.json")) as f:
        table = json.load(f)["stacks"]["table"]
    c.true(f"the stack table was full (drops {table['drops']})", table["drops"] > 0)
    prof = load_single(c, pid, "gpu_time")
    if not prof:
        return
    got = by_chain(prof)
    key = ("[gpu] pp_kernel_s",)
    c.eq("gpu_time: chains (leaf only: no stack was kept)", sorted(got), [key])
    launches, ns = got.get(key, (0, 0))
    unsampled = [int(m.group(1)) for x in prof["comments"]
                 for m in [re.search(r"(\d+) unsampled launches", x)] if m]
    c.eq("gpu_time: the comment counts the unsampled launches", len(unsampled), 1)
    c.eq("gpu_time: launches are a multiple of the sample period", launches % 4, 0)
    c.eq("gpu_time: sampled + unsampled launches = the 400 made",
         launches // 4 + sum(unsampled), 400)
    c.eq("gpu_time: weighted time = launches x 1000 ns", ns, launches * 1000)


def case_none(c, r, pid):
    files = glob.glob(os.path.join(os.environ["GPUPROF_OUTPUT_DIR"], "gpuprof-*.pb.gz*"))
    c.eq("profile files", files, [])


def case_unwritable(c, r, pid):
    lines = [l for l in r.stderr.splitlines() if "cannot write the profile" in l]
    c.eq("warnings about the profiles", len(lines), 1)
    if lines:
        c.true("the warning names GPUPROF_OUTPUT_DIR", "GPUPROF_OUTPUT_DIR" in lines[0])


def python_sites(script):
    """{site name: line} from the `# site:NAME` markers of the Python test program."""
    with open(script) as f:
        return {m.group(1): n for n, text in enumerate(f, 1)
                for m in [re.search(r"# site:(\w+)\s*$", text)] if m}


def python_stacks(c, prof, script):
    """{(leaf, ((function, line), ...)): summed values}, Python frames leaf first. Checks each
    stack's shape: only the API's own library and ctypes/libffi between the leaf and the first
    Python frame, every Python frame from the script, none interleaved with native frames."""
    out = {}
    for s in prof["samples"]:
        locs = [prof["locations"][i] for i in s["locs"]]
        names = s["functions"]
        py = [i for i, l in enumerate(locs) if l["mapping"] == 0 and l["file"]]
        for i in py:
            c.eq(f"{prof['path']}: file of Python frame {names[i]} in {names}",
                 os.path.realpath(locs[i]["file"]), os.path.realpath(script))
        c.eq(f"{prof['path']}: Python frames of {names} are contiguous",
             py, list(range(py[0], py[0] + len(py))) if py else [])
        if py:
            for l in locs[1:py[0]]:
                lib = os.path.basename(prof["mapping_paths"].get(l["mapping"], ""))
                c.true(f"{prof['path']}: native frame {l['function']} ({lib}) between the leaf "
                       f"and the Python frames of {names}",
                       lib.startswith(("libffi", "_ctypes", "libcudart")))
        key = (names[0], tuple((names[i], locs[i]["line"]) for i in py))
        vals = out.setdefault(key, [0] * len(s["values"]))
        for i, v in enumerate(s["values"]):
            vals[i] += v
    return out


def case_python(c, r, pid):
    script = next(a for a in r.args if a.endswith(".py"))
    line = python_sites(script)
    module = ("<module>", line["module"])
    # Frames are named by co_qualname from 3.11 on, by co_name before (the method alone).
    ver = re.search(r"Python (\d+)\.(\d+)", r.stdout)
    method = (lambda q: q) if ver and (int(ver[1]), int(ver[2])) >= (3, 11) else \
        (lambda q: q.split(".")[-1])

    def load_all(kind):
        """The run's windows of one kind in time order (normally one; two if it straddled
        a window boundary)."""
        files = profile_files(pid, kind)
        c.true(f"{kind}: no profile written", files)
        profs = [read_profile(f) for f in files]
        for p in profs:
            check_common(c, kind, p)
        return profs

    # Allocations: alloc_* summed over the windows, inuse_* as of the last one.
    got = {}
    profs = load_all("gpu_memory")
    for n, prof in enumerate(profs):
        for key, vals in python_stacks(c, prof, script).items():
            acc = got.setdefault(key, [0, 0, 0, 0])
            acc[0] += vals[0]
            acc[1] += vals[1]
            if n == len(profs) - 1:
                acc[2:] = vals[2:]
    expect_values(c, "gpu_memory", got, {
        ("cudaMalloc", ((method("KVCache.grow"), line["cache_grow"]),
                        (method("KVCache.__init__"), line["cache_init"]),
                        ("main", line["main_cache"]), module)): [3, 3 * MIB, 3, 3 * MIB],
        ("cuMemAlloc", (("scratch", line["scratch"]), ("main", line["main_scratch"]),
                        module)): [2, 2 * 8192, 0, 0],
        # CDLL released the GIL: the native stack alone, no Python frame.
        ("cudaMalloc", ()): [1, 4096, 1, 4096],
    })
    for prof in profs:
        for s in prof["samples"]:
            if s["functions"][0] == "cudaMalloc" and not any(
                    prof["locations"][i]["file"] for i in s["locs"][1:]):
                c.true(f"gpu_memory: the GIL-released stack {s['functions']} shows the "
                       f"interpreter's native frames", "_PyEval_EvalFrameDefault" in s["functions"])

    got = {}
    for prof in load_all("gpu_time"):
        for key, vals in python_stacks(c, prof, script).items():
            acc = got.setdefault(key, [0, 0])
            acc[0] += vals[0]
            acc[1] += vals[1]
    launch = ("launch", line["launch"])
    expect_values(c, "gpu_time", got, {
        ("[gpu] py_prefill_kernel", (launch, ("prefill", line["prefill"]),
                                     ("main", line["main_prefill"]), module)): [1, 7000],
        ("[gpu] py_decode_kernel", (launch, ("decode_step", line["decode_step"]),
                                    ("generate", line["generate"]),
                                    ("main", line["main_generate"]), module)): [3, 3 * 5000],
    })
    c.eq("memcpy: files", profile_files(pid, "memcpy"), [])


def case_python_display(c, r, pid):
    """The Python names as `go tool pprof -traces` shows them, after its default symbolization
    (which demangles: a function whose system_name equals its name and contains '<' is taken
    for demangled C++ and loses its '<...>', so `<module>` would show as `<unknown>`)."""
    files = profile_files(pid, "gpu_memory")
    c.true("gpu_memory: no profile written", files)
    want = ["KVCache.grow", "KVCache.__init__", "main", "<module>"]
    for path in files:
        t = subprocess.run(["go", "tool", "pprof", "-traces", "-sample_index=alloc_space", path],
                           capture_output=True, text=True, env=go_env(), timeout=120)
        c.eq(f"go tool pprof -traces {path}: exit status", t.returncode, 0)
        traces = [[l.split()[-1] for l in block.splitlines() if l.strip()]
                  for block in t.stdout.split("-----------+")[1:]]
        c.true(f"-traces shows the chain {want} ({path}):\n{t.stdout}",
               any(tr[i:i + len(want)] == want for tr in traces for i in range(len(tr))))


def case_builder(c, argv):
    out = os.path.join(os.environ.get("E2E_WORKDIR", "/tmp"), "builder.pb.gz")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    r = subprocess.run(argv + [out], capture_output=True, text=True, timeout=60)
    sys.stderr.write(r.stderr)
    c.eq("pprof_builder_test exit status", r.returncode, 0)
    if r.returncode:
        return
    prof = read_profile(out)
    c.eq("types", prof.get("types"), TYPES["gpu_time"])
    c.eq("default", prof.get("default"), "gpu_time")
    c.eq("period type", prof.get("PeriodType"), "gpu_time nanoseconds")
    c.eq("duration", prof.get("Duration"), "15s")
    c.eq("comments", prof["comments"], ["built by pprof_builder_test", "caf? \u00e9t\u00e9 ? ???"])
    c.eq("samples", sorted((tuple(s["functions"]), tuple(s["values"]), s["labels"].get("gpu"))
                           for s in prof["samples"]),
         [(("[gpu] k1", "work", "main"), (3, 300), "0"), (("[gpu] k2", "main"), (1, 50), "0")])
    c.eq("mappings", prof["mappings"], ["1: 0x400000/0x500000/0x0 /bin/prog 0a1b2c [FN]"])
    c.eq("location 2", prof["locations"].get(2),
         {"address": 0x402000, "mapping": 1, "function": "work", "file": "prog.c", "line": 22})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True,
                    choices=["basic", "windows", "sampled", "sampled_full", "none", "unwritable", "builder",
                             "python", "python_display", "reload"])
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    c = Check()
    if a.case == "builder":
        case_builder(c, cmd)
    else:
        out_dir = os.environ["GPUPROF_OUTPUT_DIR"]
        for f in glob.glob(os.path.join(out_dir, "gpuprof-*.pb.gz*")):
            os.unlink(f)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stdout, stderr = proc.communicate(timeout=120)
        sys.stderr.write(stderr)
        r = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
        c.eq("exit status", r.returncode, 0)
        c.true("the program finished its work", re.search(r"^pprof_\w+: done", r.stdout, re.M))
        globals()["case_" + a.case](c, r, proc.pid)
        leftovers = glob.glob(os.path.join(out_dir, "*.tmp"))
        c.eq("temporary files left behind", leftovers, [])
    return c.exit_status(f"check_pprof {a.case}")


if __name__ == "__main__":
    sys.exit(main())

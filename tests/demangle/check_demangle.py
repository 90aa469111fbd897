#!/usr/bin/env python3
"""Runs demangle_prog under the agent with a capture from start and checks kernel names.

The trace's kernel slices (JSON, json.gz or Perfetto protobuf) carry the demangled names, the
stderr summary (GPUPROF_LOG=info) prints them, and the summary JSON keeps the mangled "name"
with a "demangled" beside it where the two differ. The expected names below were produced once
with binutils' c++filt and are written out literally; the 12804-character template name is
built from its structure (DEEP), not demangled here, and the agent writes its first 4093
characters and "..." (agent/util/demangle.h DEMANGLE_MAX: a demangled name's bound).

Usage: check_demangle.py --format json|json.gz|perfetto --prog demangle_prog --proto PROTO
                         [--protoc P]
The environment (LD_LIBRARY_PATH, CUDA_INJECTION64_PATH, GPUPROF_OUTPUT_DIR, ...) comes from
ctest (tests/lib/GpuprofTest.cmake).
"""

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "capture"))
sys.path.insert(0, os.path.join(HERE, "..", "trace"))
import check_capture  # noqa: E402

# export/trace_internal.h TRACE_NAME_MAX: the writers keep this many bytes of a name.
TRACE_NAME_MAX = 4096
# agent/summary.c: the stderr summary prints this many characters of a kernel name.
SUMMARY_NAME_MAX = 180


def pair_tree(depth):
    """Pair<...> nested depth times over Tile, spelled as the demangler does ("> >")."""
    if depth == 0:
        return "Tile"
    inner = pair_tree(depth - 1)
    text = f"Pair<{inner}, {inner}>"
    return text.replace(">>", "> >").replace(">>", "> >")


DEEP_MANGLED = ("_Z11deep_kernelI4PairIS0_IS0_IS0_IS0_IS0_IS0_IS0_IS0_I4TileS1_ES2_ES3_ES4_ES5_"
                "ES6_ES7_ES8_ES9_EEvPT_")
DEEP = f"void deep_kernel<{pair_tree(9)} >({pair_tree(9)}*)"
# agent/util/demangle.h DEMANGLE_MAX: longer demangled names are cut to this many bytes, "..."
# last (DEEP is ASCII: no character to keep whole at the cut).
DEMANGLE_MAX = 4096
DEEP_CUT = DEEP[:DEMANGLE_MAX - 3] + "..."


def deep_mangled(depth):
    """deep_kernel<Pair<...> >(Pair<...>*) nested depth levels, each referring back twice to the
    one inside (S<k>_, base 36): 9 characters a level, twice the demangled size."""
    digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    name = "_Z11deep_kernelI4PairI" + "S0_I" * (depth - 1) + "4Tile"
    for k in range(1, depth + 1):
        name += "S%s_E" % (digits[k] if k < 36 else digits[k // 36] + digits[k % 36])
    return name + "EvPT_"


def deep_cut(depth):
    """The agent's name for deep_mangled(depth) when longer than DEMANGLE_MAX: its first
    DEMANGLE_MAX - 3 characters, written out only that far, and "..."."""
    out = []
    room = [DEMANGLE_MAX - 3]

    def put(s):
        s = s[:room[0]]
        out.append(s)
        room[0] -= len(s)

    def tree(d):
        if room[0] <= 0:
            return
        if d == 0:
            put("Tile")
            return
        put("Pair<")
        tree(d - 1)
        put(", ")
        tree(d - 1)
        put(" >" if d > 1 else ">")

    put("void deep_kernel<")
    tree(depth)
    put(" >(")
    tree(depth)
    put("*)")
    return "".join(out) + "..."


DEEP40_MANGLED = deep_mangled(40)
AT_MANGLED = ("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5"
              "ArrayIPcLi1EEEEEviT0_T1_")
AT = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
      "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
      "at::detail::Array<char*, 1>)")

# (mangled, demangled or None when it stays as it is, launches, ns each): demangle_prog.c.
KERNELS = [
    ("_Z5smallPf", "small(float*)", 3, 4000),
    ("_Z10fma_kernelIfEvPT_S0_S0_i", "void fma_kernel<float>(float*, float, float, int)", 2, 9000),
    (AT_MANGLED, AT, 5, 3000),
    (DEEP_MANGLED, DEEP_CUT, 1, 50000),
    (DEEP40_MANGLED, deep_cut(40), 1, 70000),  # review R35: 27 TB in full
    ("plain_kernel", None, 4, 1000),
    ("_Z3badX", None, 1, 2000),  # not a valid mangling: shown as it is
]

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print(f"FAIL: {msg}", file=sys.stderr)
    return cond


def fmt_ns(ns):
    """agent/summary.c fmt_ns for the values used here."""
    return f"{ns} ns" if ns < 10000 else f"{ns / 1e3:.1f} us"


def check_trace(path, fmt, proto, protoc):
    if fmt == "perfetto":
        c = check_capture.content_pftrace(path, proto, protoc)
    else:
        check_capture.validate(path)
        c = check_capture.content_json(path)
    if not check(c is not None, f"{path}: could not be read"):
        return
    got = collections.Counter()
    for (_track, name, dur), n in c["gpu"].items():
        got[(name, dur)] += n
    want = collections.Counter({((dm or m)[:TRACE_NAME_MAX], ns): n for m, dm, n, ns in KERNELS})
    check(len(DEEP) == 12804 and len(DEEP_CUT) == DEMANGLE_MAX == TRACE_NAME_MAX,
          f"DEEP is {len(DEEP)} characters, cut {len(DEEP_CUT)}")
    check(deep_mangled(9) == DEEP_MANGLED and deep_cut(9) == DEEP_CUT,
          "deep_mangled / deep_cut do not reproduce DEEP")
    check(got == want, f"{path}: kernel slices (name, ns) differ: missing "
          f"{dict(want - got)}, extra {dict(got - want)}")


def check_summary_json(path):
    with open(path, encoding="utf-8") as f:
        s = json.load(f)
    by = s.get("kernels", {}).get("by_name", [])
    got = {e.get("name"): (e.get("demangled"), e.get("count"), e.get("gpu_time_ns")) for e in by}
    want = {m: (dm, n, n * ns) for m, dm, n, ns in KERNELS}
    check(got == want, f"{path}: kernels.by_name (name -> demangled, count, gpu_time_ns) "
          f"{got} != {want}")
    for e in by:
        check("demangled" not in e or e["demangled"] != e["name"],
              f"{path}: {e['name']}: a 'demangled' equal to the name is written")


def check_stderr(err):
    lines = err.splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if re.match(r"^gpuprof:   kernels: ", l))
    except StopIteration:
        check(False, f"no 'kernels:' line in the stderr summary:\n{err}")
        return
    total = sum(n * ns for _m, _dm, n, ns in KERNELS)
    check(lines[start] == f"gpuprof:   kernels: 17 launches, {fmt_ns(total)} GPU time",
          f"kernels line {lines[start]!r}")
    order = sorted(KERNELS, key=lambda k: (-k[2] * k[3], k[0]))
    want = [f"gpuprof:     {fmt_ns(n * ns):>10} {n:>8}x  {(dm or m)[:SUMMARY_NAME_MAX]}"
            for m, dm, n, ns in order]
    got = lines[start + 1:start + 1 + len(want)]
    check(got == want, "stderr kernel lines differ:\n" + "\n".join(
        f"  got  {g!r}\n  want {w!r}" for g, w in zip(got + [""] * len(want), want) if g != w))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--format", required=True, choices=["json", "json.gz", "perfetto"])
    ap.add_argument("--prog", required=True)
    ap.add_argument("--proto", required=True)
    ap.add_argument("--protoc", default="")
    a = ap.parse_args()
    if not a.protoc or a.protoc.endswith("NOTFOUND"):
        a.protoc = shutil.which("protoc")
    out = os.environ["GPUPROF_OUTPUT_DIR"]
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, GPUPROF_CAPTURE_ON_START="60s", GPUPROF_TRACE_FORMAT=a.format,
               GPUPROF_LOG="info")
    r = subprocess.run([a.prog], env=env, capture_output=True, text=True, timeout=120)
    sys.stderr.write(r.stderr)
    check(r.returncode == 0, f"demangle_prog exited with {r.returncode}")
    check(r.stdout == "demangle: 7 kernels, 17 launches\n", f"stdout {r.stdout!r}")
    traces = check_capture.traces()
    if check(len(traces) == 1, f"one trace expected in {out}: {traces}"):
        check_trace(traces[0], a.format, a.proto, a.protoc)
    check_summary_json(os.environ["GPUPROF_SUMMARY_FILE"])
    check_stderr(r.stderr)
    failures.extend(check_capture.failures)
    if failures:
        print(f"{len(failures)} checks failed", file=sys.stderr)
        return 1
    print(f"demangle {a.format}: all checks passed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

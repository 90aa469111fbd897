#!/usr/bin/env python3
"""End to end: a program on the simulated GPU under the shipped agent pushes its pprof windows.

Usage: e2e_upload.py [--api push|ingest] [--max-samples N | --max-bytes N] -- PROGRAM ARGS...
(run by ctest through
gpuprof_add_e2e_test, which sets the agent, the simulator and GPUPROF_OUTPUT_DIR/SUMMARY_FILE).

Checks: every profile file the agent wrote was uploaded byte for byte (and nothing else), with
the configured labels and a valid pprof (the receiver applies Pyroscope's rules); the summary's
"pyroscope" counters agree; the program's stdout and exit status are what it gives without the
agent (numbers masked: the program prints timestamps).
"""
import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_pyroscope import Receiver, Failed, check, eq  # noqa: E402

SERIES = {"gpu_time": "gpu", "gpu_memory": "gpu_memory", "memcpy": "gpu_memcpy", "nccl": "gpu_nccl"}


def check_parts(a, files, acc, summary):
    """Windows larger than the server's limit arrive in parts of at most max_samples samples
    whose samples and values add up to the file's."""
    from receiver import check_pprof
    split = 0
    for f in files:
        whole = check_pprof(open(f, "rb").read(), 1 << 30)
        kind = next(k for k in SERIES if f"-{k}-" in os.path.basename(f))
        parts = [x for x in acc if x["time_nanos"] == whole["time_nanos"]
                 and x["sample_types"] == whole["sample_types"]]
        check(parts, f"no upload for {os.path.basename(f)}")
        for x in parts:
            check(x["n_samples"] <= a.max_samples,
                  f"{kind}: a part of {x['n_samples']} samples (limit {a.max_samples})")
        eq(f"{kind}: samples of the parts", sum(x["n_samples"] for x in parts), whole["n_samples"])
        eq(f"{kind}: values of the parts",
           [sum(x["value_sums"][i] for x in parts) for i in range(len(whole["value_sums"]))],
           whole["value_sums"])
        want = -(-whole["n_samples"] // a.max_samples)
        eq(f"{kind}: parts", len(parts), want)
        split += want > 1
    check(split, "no window was large enough to be split")
    with open(summary) as fh:
        s = json.load(fh)
    eq("summary.pyroscope sent (one per part)", s["pyroscope"]["sent"], len(acc))
    print(f"ok: {len(files)} profiles, {len(acc)} uploads, {split} split")
    return 0


def halving(n, counts, i=0):
    """The index after the parts that split n samples in halves, recursively (upload_halves):
    counts[i] is all n, or the halves n//2 and n - n//2 follow, each in the same way."""
    check(i < len(counts), f"parts end before a range of {n} samples")
    if counts[i] == n:
        return i + 1
    check(n > 1, f"a part of {counts[i]} samples where 1 was left")
    return halving(n - n // 2, counts, halving(n // 2, counts, i))


def check_size_parts(a, files, acc, summary):
    """Windows whose uncompressed profile is over the server's max-profile-size-bytes arrive in
    halves (each halved again while over), every part within the limit; the parts' values add
    up, stack by stack, to the file's; a window within the limit arrives whole."""
    from receiver import check_pprof
    split = over = 0
    for f in files:
        whole = check_pprof(open(f, "rb").read(), 1 << 30, max_bytes=1 << 40, stack_sums=True)
        kind = next(k for k in SERIES if f"-{k}-" in os.path.basename(f))
        parts = [x for x in acc if x["time_nanos"] == whole["time_nanos"]
                 and x["sample_types"] == whole["sample_types"]]
        check(parts, f"no upload for {os.path.basename(f)}")
        for x in parts:
            check(x["raw_bytes"] <= a.max_bytes,
                  f"{kind}: a part of {x['raw_bytes']} bytes (limit {a.max_bytes})")
        sums = {}
        for x in parts:
            for stack, v in x["stack_sums"].items():
                acc_v = sums.setdefault(stack, [0] * len(v))
                for i, n in enumerate(v):
                    acc_v[i] += n
        eq(f"{kind}: the parts' values per stack", sums, whole["stack_sums"])
        eq(f"{kind}: samples of the parts", sum(x["n_samples"] for x in parts), whole["n_samples"])
        if whole["raw_bytes"] <= a.max_bytes:
            eq(f"{kind}: uploads of a window within the limit", [x["sha256"] for x in parts],
               [whole["sha256"]])
            continue
        over += 1
        counts = [x["n_samples"] for x in parts]
        eq(f"{kind}: parts {counts} are halves of {whole['n_samples']} samples",
           halving(whole["n_samples"], counts), len(counts))
        check(len(parts) >= -(-whole["raw_bytes"] // a.max_bytes),
              f"{kind}: {len(parts)} parts of a {whole['raw_bytes']}-byte profile")
        split += 1
        print(f"{kind}: {whole['n_samples']} samples, {whole['raw_bytes']} bytes "
              f"({whole['bytes']} gzip) -> {len(parts)} parts {counts}")
    check(over, f"no window was over {a.max_bytes} bytes: the workload is too small")
    eq("windows split for their size", split, over)
    with open(summary) as fh:
        s = json.load(fh)
    eq("summary.pyroscope sent (one per part)", s["pyroscope"]["sent"], len(acc))
    eq("summary.pyroscope failed", s["pyroscope"]["failed"], 0)
    print(f"ok: {len(files)} profiles, {len(acc)} uploads, {split} split for size")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", default="push")
    ap.add_argument("--kinds", default="gpu_time:2,gpu_memory:2",
                    help="KIND:N,...: each kind written in at least N windows")
    ap.add_argument("--max-samples", type=int, default=0,
                    help="the server's limit: larger windows must arrive in parts")
    ap.add_argument("--max-bytes", type=int, default=0,
                    help="the server's max-profile-size-bytes: larger windows arrive in halves")
    ap.add_argument("cmd", nargs="+")
    a = ap.parse_args()
    work = os.environ["E2E_WORKDIR"]
    out_dir = os.environ["GPUPROF_OUTPUT_DIR"]
    summary = os.environ["GPUPROF_SUMMARY_FILE"]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    base_env = {k: v for k, v in os.environ.items() if k != "CUDA_INJECTION64_PATH"}
    base = subprocess.run(a.cmd, env=base_env, capture_output=True, text=True, timeout=60)

    r = Receiver(work, 0, *(["--max-samples", str(a.max_samples)] if a.max_samples else []),
                 *(["--max-profile-bytes", str(a.max_bytes), "--stack-sums"] if a.max_bytes
                   else []))
    try:
        r.wait_ready()
        port = int(open(r.ready).read())
        env = dict(os.environ, GPUPROF_PYROSCOPE_URL=f"http://127.0.0.1:{port}",
                   GPUPROF_PYROSCOPE_API=a.api, GPUPROF_APP_NAME="pprof-work",
                   GPUPROF_TAGS="env=ci", GPUPROF_K8S_POD="work-0", GPUPROF_K8S_NAMESPACE="gpu",
                   GPUPROF_K8S_NODE="node-1", NO_PROXY="127.0.0.1")
        if a.max_samples:
            env["GPUPROF_PYROSCOPE_MAX_SAMPLES"] = str(a.max_samples)
        if a.max_bytes:
            env["GPUPROF_PYROSCOPE_MAX_SIZE"] = str(a.max_bytes)
        for k in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
            env.pop(k, None)
        t = time.monotonic()
        run = subprocess.run(a.cmd, env=env, capture_output=True, text=True, timeout=60)
        wall = time.monotonic() - t
    finally:
        r.stop()

    def mask(s):
        return re.sub(r"\d+", "N", s)

    eq("exit status under the agent", run.returncode, base.returncode)
    eq("stdout under the agent (numbers masked)", mask(run.stdout), mask(base.stdout))
    check(wall < 30, f"the program took {wall:.1f} s under the agent")
    warn = [l for l in run.stderr.splitlines() if "gpuprof" in l]
    eq("agent lines on stderr", warn, [])

    files = sorted(glob.glob(os.path.join(out_dir, "*.pb.gz")))
    check(files, f"no profile files in {out_dir}")
    written = {}
    for f in files:
        kind = next(k for k in SERIES if f"-{k}-" in os.path.basename(f))
        written[hashlib.sha256(open(f, "rb").read()).hexdigest()] = kind
    recs = r.records()
    eq("rejected requests", [x for x in recs if "rejected" in x], [])
    acc = r.accepted()
    if a.max_samples:
        return check_parts(a, files, acc, summary)
    if a.max_bytes:
        return check_size_parts(a, files, acc, summary)
    got = {x["sha256"]: x for x in acc}
    eq("uploads (one per profile file)", len(acc), len(files))
    eq("uploaded profiles == written files", sorted(got), sorted(written))
    for h, x in got.items():
        want = {"service_name": "pprof-work", "env": "ci", "pod": "work-0", "namespace": "gpu",
                "node": "node-1"}
        if a.api == "push":
            want.update({"__name__": SERIES[written[h]], "__delta__": "false"})
        else:
            want["__name__"] = x["labels"]["__name__"]
        eq(f"labels of the {written[h]} profile", x["labels"], want)
    # pprof_work's "windows" mode launches and allocates (no copies) in two windows (the
    # default --kinds); other programs say which kinds they make in how many windows.
    kinds = sorted(written.values())
    for kn in a.kinds.split(","):
        k, n = kn.split(":")
        check(kinds.count(k) >= int(n), f"expected {k} in {n} windows: {kinds.count(k)}")

    with open(summary) as f:
        s = json.load(f)
    eq("summary.pyroscope", s.get("pyroscope"),
       {"submitted": len(files), "sent": len(files), "retried": 0, "dropped": 0, "failed": 0,
        "bytes_sent": s.get("pyroscope", {}).get("bytes_sent")})
    check(s["pyroscope"]["bytes_sent"] > 0, "bytes_sent is 0")
    print(f"ok: {len(files)} profiles written and uploaded via /{a.api}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failed as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)

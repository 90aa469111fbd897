#!/usr/bin/env python3
"""Thread churn loses nothing: e2e_thread_churn under the shipped agent, exact checks.

The program (thread_churn.c) runs CHURN short-lived threads (4 alive at a time), then CAPTURES
API captures each holding PER_CAPTURE more, the last one also WIDE threads alive together.
Every worker makes exactly cuMemAlloc(4096), 2 x cuLaunchKernel of its phase's kernel,
cuStreamSynchronize and cuMemFree (plus cuCtxSetCurrent, which the agent does not count).

Checked exactly:
  * stdout: every phase ran, every capture started and stopped with 0, and the process's open
    fds and threads came back to their count before the first worker;
  * the summary: api/kernels/sync/memory/joins totals of every worker (continuous mode: all of
    them; ondemand: those inside captures), peak memory WIDE x 4096 (all allocated together),
    no losses, CAPTURES captures none of which dropped anything;
  * each capture's trace (by capture_id): exactly its kernels (2 per worker), one host track per
    worker that ran inside it, named as the thread named itself and holding exactly its 4 API
    slices, one flow per launch, no dropped API calls or records;
  * no gpuprof line on stderr.

Usage: thread_churn.py --prog BIN --mode continuous|ondemand CHURN CAPTURES PER_CAPTURE WIDE
"""

import argparse
import collections
import glob
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "capture"))
import check_capture as cc  # noqa: E402

ALLOC = 4096
LAUNCHES = 2
AT_ONCE = 4  # thread_churn.c: churn threads alive together
# agent/capture.c: rings of ended threads waiting for the worker's drain before a claim
# allocates no more; the rings in all stay below the threads calling at once + this.
RING_EXITED_MAX = 256
WORKER_API = {"cuMemAlloc": 1, "cuLaunchKernel": LAUNCHES, "cuStreamSynchronize": 1,
              "cuMemFree": 1}
SANITIZER_BANNERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "WARNING: ThreadSanitizer")

errors = []


def check(cond, msg):
    if not cond:
        errors.append(msg)
    return cond


def eq(what, got, want):
    return check(got == want, f"{what}: got {got!r}, expected {want!r}")


def capture_threads(c, per, wide, captures):
    names = [f"c{c}t{i}" for i in range(per)]
    if c == captures - 1:
        names += [f"w{i}" for i in range(wide)]
    return names


def check_trace(path, c, per, wide, captures, mode):
    s = cc.validate(path)
    if not check(s is not None, f"{path} does not load"):
        return
    content = cc.content_json(path)
    meta = content["doc"].get("metadata", {})
    where = f"capture {c} ({os.path.basename(path)})"
    eq(f"{where}: mode", meta.get("mode"), mode)
    for k in ("dropped_api_calls", "dropped_records", "zero_timestamp_records",
              "invalid_events"):
        eq(f"{where}: metadata {k}", meta.get(k), 0)
    # API rings allocated so far (a high-water mark): thousands of threads came and went
    # within one flush interval, yet at most the threads alive together (the wide ones, or
    # AT_ONCE, and main) plus RING_EXITED_MAX; without the early drain, one per thread.
    rings = meta.get("api_rings")
    check(isinstance(rings, int) and 0 < rings <= max(wide, AT_ONCE) + 1 + RING_EXITED_MAX,
          f"{where}: metadata api_rings {rings!r}, expected 1..{max(wide, AT_ONCE) + 1 + RING_EXITED_MAX}")
    threads = capture_threads(c, per, wide, captures)
    want_gpu = collections.Counter({f"cap_kernel_{c}": LAUNCHES * per})
    if c == captures - 1 and wide:
        want_gpu["wide_kernel"] = LAUNCHES * wide
    gpu = collections.Counter()
    for (track, name, dur), n in content["gpu"].items():
        gpu[name] += n
    eq(f"{where}: kernels", dict(gpu), dict(want_gpu))
    # One host track per worker: names (pid, tid) -> name, each name exactly once.
    pid = meta.get("pid")
    tracks = [n for (p, t), n in content["tnames"].items() if p == pid]
    dup = [n for n, k in collections.Counter(tracks).items() if k > 1]
    eq(f"{where}: thread tracks named twice", dup, [])
    missing, extra = sorted(set(threads) - set(tracks)), sorted(set(tracks) - set(threads))
    check(not missing and not extra, f"{where}: host thread tracks: {len(missing)} missing "
          f"{missing[:5]}..., {len(extra)} extra {extra[:5]}... of {len(threads)}")
    api = collections.defaultdict(collections.Counter)
    for (track, name), n in content["api"].items():
        api[track][name] += n
    bad = {t: dict(api.get(t, {})) for t in set(threads) | set(api)
           if dict(api.get(t, {})) != WORKER_API}
    eq(f"{where}: threads whose API slices differ from {WORKER_API} (first 5)",
       dict(sorted(bad.items())[:5]), {})
    eq(f"{where}: launch -> kernel flows", sum(content["flows"].values()), sum(want_gpu.values()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prog", required=True)
    ap.add_argument("--mode", choices=("continuous", "ondemand"), required=True)
    ap.add_argument("counts", nargs=4, type=int)
    a = ap.parse_args()
    churn, captures, per, wide = a.counts
    work = os.environ["E2E_WORKDIR"]
    out = os.environ["GPUPROF_OUTPUT_DIR"]
    summary_path = os.environ["GPUPROF_SUMMARY_FILE"]
    os.makedirs(work, exist_ok=True)
    for p in glob.glob(os.path.join(out, "*")) + [summary_path]:
        if os.path.isfile(p):
            os.unlink(p)
    env = dict(os.environ, GPUPROF_MODE=a.mode, GPUPROF_TRACE_FORMAT="json.gz")
    r = subprocess.run([a.prog] + [str(x) for x in a.counts], env=env, capture_output=True,
                       text=True, timeout=300)
    for banner in SANITIZER_BANNERS:
        check(banner not in r.stderr, f"sanitizer report:\n{r.stderr[-4000:]}")
    eq("exit status", r.returncode, 0)
    want_out = [f"churned {churn} threads"]
    for c in range(captures):
        extra = " + wide" if c == captures - 1 and wide else ""
        want_out.append(f"capture {c}: start 0, {per} threads{extra}, stop 0")
    want_out += [f"wide {wide} threads", "fds back to baseline", "threads back to baseline"]
    eq("stdout", r.stdout.splitlines(), want_out)
    eq("gpuprof lines on stderr", [ln for ln in r.stderr.splitlines() if "gpuprof" in ln], [])

    # Workers the summary saw: all of them in continuous mode, those inside captures otherwise.
    kernels = collections.Counter({f"cap_kernel_{c}": LAUNCHES * per for c in range(captures)})
    if wide:
        kernels["wide_kernel"] = LAUNCHES * wide
    if a.mode == "continuous" and churn:
        kernels["churn_kernel"] = LAUNCHES * churn
    workers = sum(kernels.values()) // LAUNCHES
    try:
        s = json.load(open(summary_path))
    except (OSError, ValueError) as e:
        s = None
        check(False, f"summary: {e}")
    if s is not None:
        eq("summary.state", s.get("state"), "active")
        eq("summary.api", s.get("api"), {"runtime": 0, "driver": workers * sum(WORKER_API.values())})
        k = s.get("kernels", {})
        eq("kernels.count", k.get("count"), LAUNCHES * workers)
        eq("kernels.by_name", {e["name"]: (e["count"], e["apis"]) for e in k.get("by_name", [])},
           {n: (v, {"cuLaunchKernel": v}) for n, v in kernels.items()})
        eq("sync.count", s.get("sync", {}).get("count"), workers)
        mem = s.get("memory", [])
        want_mem = {"device": 0, "allocs": workers, "frees": workers,
                    "bytes_allocated": ALLOC * workers, "bytes_freed": ALLOC * workers,
                    "in_use": 0, "peak_in_use": ALLOC * max(wide, 4 if workers else 0),
                    "by_kind": {"device": ALLOC * workers}}
        eq("memory", mem, [want_mem] if workers else [])
        # Every kernel and every alloc/free record joined to its call.
        eq("joins", s.get("joins"), {"runtime": 0, "driver": LAUNCHES * workers + 2 * workers,
                                     "unknown": 0})
        eq("losses", s.get("losses"), {
            "cupti_dropped_records": 0, "zero_timestamps": 0, "invalid_records": 0,
            "unknown_correlation": 0, "unknown_frees": 0, "buffer_pool_exhausted": 0,
            "lost_buffers": 0, "exit_incomplete": False})
        cap = s.get("captures", {})
        eq("captures.count", cap.get("count"), captures)
        if captures:
            last = cap.get("last", {})
            eq("captures.last dropped/truncated/error",
               (last.get("dropped"), last.get("truncated"), last.get("error")), (0, False, 0))

    traces = {}
    for p in glob.glob(os.path.join(out, "*capture*.json.gz")):
        content = cc.content_json(p)
        traces[content["doc"].get("metadata", {}).get("capture_id")] = p
    eq("capture ids of the traces", sorted(traces), list(range(1, captures + 1)))
    for c in range(captures):
        if c + 1 in traces:
            check_trace(traces[c + 1], c, per, wide, captures, a.mode)
    errors.extend(cc.failures)  # check_capture's own checks (validator, flows) report there
    for e in errors:
        print("FAIL:", e)
    if errors:
        return 1
    print(f"ok: {workers} workers counted, {captures} captures exact")
    return 0


if __name__ == "__main__":
    sys.exit(main())

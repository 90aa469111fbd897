#!/usr/bin/env python3
"""Runs analyze_prog under the agent and checks what `gpuprof analyze` says of its captures.

Cases (each in the encoding given by --format, through GPUPROF_TRACE_FORMAT):
  gpu     the known workload on two GPUs: counts, GPU times, bytes, the memory peak, the two
          idle gaps of GPU 0 and the host calls in them, and the findings they make
  steps   30 NVTX steps, one 40 ms slower: counts, median, p99 and the spike found; the
          spike's window alone (--from/--to)
  straggler  two ranks at once, rank 1 20 ms late to each of 12 AllReduces: named as the one
          the others wait for
  hang    two ranks of one communicator: rank 0 inside its 4th AllReduce, rank 1 gone after its
          3rd (the verdict names rank 1); rank 0's trace alone (rank 1 has no trace); rank 1
          inside an AllGather instead (collective order differs); both ranks inside it (the
          collective itself is stuck); rank 0 inside a Send whose Recv rank 1 never posts,
          posts (both inside), or has no trace for
  errors  what analyze refuses, in one line each: no trace, an unknown option, a file that is
          not a trace, a missing file, a merged trace; a capture cut by a kill is analyzed, one
          cut by its size cap (trace_fixture's) says so
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trace"))
from check_traces import check, failures  # noqa: E402

MIB = 1 << 20
# How long the stuck operation had been posted, in a verdict: " (posted 1.23 ms before ...)".
POSTED = re.escape(" (posted ") + r"[0-9.]+ (ns|us|ms|s)" + re.escape(" before the capture ended)")


def posted_re(parts):
    """A verdict's text as a pattern: its parts, with how long it had been posted between."""
    return POSTED.join(re.escape(p) for p in parts)


def start_prog(args, outdir):
    """Starts analyze_prog with the agent (the test's environment), its captures into outdir."""
    env = dict(os.environ)
    env["GPUPROF_OUTPUT_DIR"] = outdir
    os.makedirs(outdir, exist_ok=True)
    return subprocess.Popen([ARGS.prog] + args, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish_prog(p, args, outdir):
    """Waits for it: its one capture trace."""
    out, err = p.communicate(timeout=90)
    if p.returncode != 0:
        print(out, err)
        sys.exit(f"analyze_prog {' '.join(args)} exited {p.returncode}")
    traces = sorted(glob.glob(os.path.join(outdir, "*-capture.*")))
    traces = [t for t in traces if not t.endswith(".pb.gz")]
    if len(traces) != 1:
        sys.exit(f"expected one capture trace in {outdir}, found {traces}")
    return traces[0]


def run_prog(args, outdir):
    return finish_prog(start_prog(args, outdir), args, outdir)


def analyze(traces, expect_rc=0):
    """`gpuprof analyze --json -`: the report; and the text report of the same traces."""
    p = subprocess.run([ARGS.gpuprof, "analyze", "--json", "-"] + traces, capture_output=True,
                       text=True, timeout=120)
    check(p.returncode == expect_rc, f"analyze --json exit {p.returncode}: {p.stderr}")
    check(p.stderr == "", f"analyze wrote to stderr: {p.stderr}")
    report = json.loads(p.stdout)
    t = subprocess.run([ARGS.gpuprof, "analyze"] + traces, capture_output=True, text=True,
                       timeout=120)
    check(t.returncode == expect_rc, f"analyze exit {t.returncode}: {t.stderr}")
    # The text says what the JSON says: every finding, word for word.
    for f in report["findings"]:
        check(f["text"] in t.stdout, f"text report lacks the finding {f['text']!r}")
    return report, t.stdout


def by_name(rows):
    return {r["name"]: r for r in rows}


def case_gpu(work):
    trace = run_prog(["gpu"], os.path.join(work, "gpu"))
    report, text = analyze([trace])
    (tr,) = report["traces"]
    check(tr["gpu_only"] is False and tr["cut"] is False, f"flags {tr}")
    check(tr["dropped_records"] == 0, "records dropped")
    gpus = {g["device"]: g for g in tr["gpus"]}
    check(sorted(gpus) == [0, 1], f"GPUs {sorted(gpus)}")
    g0, g1 = gpus[0], gpus[1]
    # 200 + 1 + 1 short kernels of 2 µs, 5 long ones of 2 ms.
    check(g0["kernels"] == 207, f"GPU 0 kernels {g0['kernels']}")
    check(g0["kernel_ns"] == 202 * 2000 + 5 * 2000000, f"GPU 0 kernel_ns {g0['kernel_ns']}")
    check(g0["short_kernels"] == 202 and g0["short_kernel_ns"] == 202 * 2000,
          f"GPU 0 short kernels {g0['short_kernels']} {g0['short_kernel_ns']}")
    check(g0["copies"] == 6 and g0["copy_bytes"] == 48 * MIB,
          f"GPU 0 copies {g0['copies']} {g0['copy_bytes']}")
    check(g0["sets"] == 0, "GPU 0 sets")
    check(g0.get("memory_peak_bytes") == 48 * MIB, f"GPU 0 memory peak {g0.get('memory_peak_bytes')}")
    # The pinned copy ran beside the fifth long kernel (wholly, unless the machine was slow to
    # enqueue it): the only overlap there is.
    copies = by_name(tr["copies"])
    pinned = copies.get("Memcpy HtoD (pinned to device)", {})
    check(pinned.get("count") == 1 and pinned.get("bytes") == 8 * MIB, f"pinned copy {pinned}")
    check(0 < g0["copy_overlap_ns"] <= pinned.get("total_ns", 0),
          f"GPU 0 copy overlap {g0['copy_overlap_ns']}, pinned copy {pinned}")
    check(g0["busy_ns"] == g0["kernel_ns"] + g0["copy_ns"] - g0["copy_overlap_ns"],
          f"GPU 0 busy {g0['busy_ns']} != kernels + copies - their overlap")
    check(g1["kernels"] == 1 and g1["kernel_ns"] == 80000000, f"GPU 1 {g1}")
    check(g1["idle_gaps"] == [], "GPU 1 has one kernel: no gap")
    # GPU 0's two long gaps: 80 ms under cuStreamSynchronize (the host waits for GPU 1), then
    # 40 ms without any CUDA call (the host sleeps).
    gaps = g0["idle_gaps"]
    check(len(gaps) == 5, f"GPU 0 gaps {len(gaps)}")
    sync_gap, sleep_gap = gaps[0], gaps[1]
    check(sync_gap["dur_ns"] >= 80000000, f"sync gap {sync_gap['dur_ns']}")
    calls = sync_gap["host_calls"]
    check(calls and calls[0]["name"] == "cuStreamSynchronize" and calls[0]["thread"] == "main",
          f"sync gap calls {calls}")
    # The wait began just after the launch that started the 80 ms kernel.
    check(calls and calls[0]["overlap_ns"] >= 72000000, f"sync overlap {calls}")
    check(sleep_gap["dur_ns"] >= 40000000 and sleep_gap["dur_ns"] < sync_gap["dur_ns"],
          f"sleep gap {sleep_gap['dur_ns']}")
    check(sleep_gap["host_cuda_ns"] * 5 < sleep_gap["dur_ns"],
          f"sleep gap under CUDA calls {sleep_gap['host_cuda_ns']} of {sleep_gap['dur_ns']}")
    check(sync_gap["start_ns"] > sleep_gap["start_ns"], "the sleep came first")
    kernels = by_name(tr["kernels"])
    check(set(kernels) == {"short_k()", "long_k()", "wait_k()"}, f"kernels {sorted(kernels)}")
    check(kernels["short_k()"]["count"] == 202 and kernels["short_k()"]["total_ns"] == 404000,
          f"short_k {kernels['short_k()']}")
    check(kernels["long_k()"]["count"] == 5 and kernels["long_k()"]["max_ns"] == 2000000,
          f"long_k {kernels['long_k()']}")
    check([k["name"] for k in tr["kernels"]] == ["wait_k()", "long_k()", "short_k()"],
          "kernels by total time")
    # The host buffer is malloc'd: pageable on its side of every copy.
    htod, dtoh = "Memcpy HtoD (pageable to device)", "Memcpy DtoH (device to pageable)"
    check(sorted(copies) == sorted([htod, dtoh, "Memcpy HtoD (pinned to device)"]),
          f"copies {sorted(copies)}")
    check(copies.get(htod, {}).get("count") == 3 and copies[htod]["bytes"] == 24 * MIB,
          f"HtoD {copies.get(htod)}")
    check(copies.get(dtoh, {}).get("count") == 2 and copies[dtoh]["bytes"] == 16 * MIB,
          f"DtoH {copies.get(dtoh)}")
    check(g0["pageable_copies"] == 5 and g0["pageable_copy_bytes"] == 40 * MIB and
          g0["pageable_copy_ns"] == g0["copy_ns"] - pinned.get("total_ns", 0),
          f"GPU 0 pageable {g0}")
    api = by_name(tr["api_calls"])
    check(api["cuLaunchKernel"]["count"] == 208, f"cuLaunchKernel {api.get('cuLaunchKernel')}")
    check(api["cuStreamSynchronize"]["count"] == 7, f"syncs {api.get('cuStreamSynchronize')}")
    syncs = by_name(tr["sync_calls"])
    check(list(syncs) == ["cuStreamSynchronize"], f"sync calls {list(syncs)}")
    check(tr["sync_ns"] == syncs["cuStreamSynchronize"]["total_ns"] and tr["sync_ns"] >= 80000000,
          f"sync_ns {tr['sync_ns']}")
    kinds = [f["kind"] for f in report["findings"]]
    check("sync_stall" in kinds, f"findings {kinds}")
    check("short_kernels" in kinds, f"findings {kinds}")
    check("pageable_copies" in kinds, f"findings {kinds}")
    pageable = [f for f in report["findings"] if f["kind"] == "pageable_copies"][0]["text"]
    check(pageable.startswith("GPU 0: 5 copies (40.0 MiB) to or from pageable host memory, at "),
          pageable)
    stall = [f for f in report["findings"] if f["kind"] == "sync_stall"][0]["text"]
    check("GPU 0" in stall and "cuStreamSynchronize" in stall and "main" in stall, stall)
    short = [f for f in report["findings"] if f["kind"] == "short_kernels"][0]["text"]
    check(short.startswith("98% of GPU 0's kernels (202) ran under 10 us"), short)
    # Five of the six copies ran with no kernel beside them.
    serial = [f["text"] for f in report["findings"] if f["kind"] == "copies_serialized"]
    check(len(serial) == 1 and serial[0].startswith("GPU 0: copies take "), f"{serial}")
    check(report["nccl_comms"] == [], "no NCCL")
    check("idle 8" in text and "host main in cuStreamSynchronize" in text, text)


def comm_of(report, rank):
    rows = [c for t in report["traces"] for c in t["nccl"] if c["rank"] == rank]
    check(len(rows) == 1, f"rank {rank} rows {rows}")
    return rows[0] if rows else {}


def case_hang(work):
    hung = run_prog(["rank", "0", "hang"], os.path.join(work, "r0"))
    left = run_prog(["rank", "1", "stop"], os.path.join(work, "r1"))
    both = run_prog(["rank", "1", "hang"], os.path.join(work, "r1hang"))
    other = run_prog(["rank", "1", "other"], os.path.join(work, "r1other"))

    report, text = analyze([hung, left])
    r0, r1 = comm_of(report, 0), comm_of(report, 1)
    check(r0.get("comm") == r1.get("comm"), "one communicator on both ranks")
    check(r0.get("nranks") == 2 and r0.get("ops") == 3 and r0.get("newest_seq") == {"AllReduce": 2},
          f"rank 0 {r0}")
    check(r0.get("pending") == 1 and r0.get("pending_func") == "AllReduce" and
          r0.get("pending_seq") == 3 and r0.get("pending_state") == "launched, not finished",
          f"rank 0 pending {r0}")
    check(r0.get("bytes") == 3 * 65536 * 4, f"rank 0 bytes {r0.get('bytes')}")
    check(r1.get("ops") == 3 and r1.get("newest_seq") == {"AllReduce": 2} and r1.get("pending") == 0,
          f"rank 1 {r1}")
    (comm,) = report["nccl_comms"]
    a = comm["analysis"]
    check(comm["nranks"] == 2 and comm["ranks_seen"] == 2, f"comm {comm}")
    check(a["verdict"] == "hang: ranks behind" and a["func"] == "AllReduce" and a["seq"] == 3 and
          a["waiting_ranks"] == [0] and a["behind_ranks"] == [1] and a["elsewhere_ranks"] == [] and
          a["ranks_without_trace"] == [], f"analysis {a}")
    hang = [f["text"] for f in report["findings"] if f["kind"] == "nccl_hang"]
    check(len(hang) == 1 and re.fullmatch(
        posted_re(["HANG: rank 0 is inside AllReduce seq 3", ", waiting for rank 1, which "
                     "never got to it (their host stacks and tracks say where they are)"]),
        hang[0]), f"verdict {hang}")
    check(0 < a.get("waiting_ns", 0) < 60 * 10**9, f"waiting_ns {a.get('waiting_ns')}")
    check("NCCL comm " + r0.get("comm", "?") + ": 2 of 2 ranks" in text, text)
    # Rank 0's GPU is inside the hung kernel (no record shows it): only rank 1's is idle.
    idle = [f["file"] for f in report["findings"] if f["kind"] == "gpu_idle"]
    check(idle == [left], f"gpu_idle findings {idle}")

    # The ranks' output directories for their traces (the profiles beside them left out).
    report, _ = analyze([os.path.dirname(hung), os.path.dirname(left)])
    check([t["file"] for t in report["traces"]] == [hung, left] and
          report["nccl_comms"][0]["analysis"]["verdict"] == "hang: ranks behind",
          f"directories {[t['file'] for t in report['traces']]}")

    # The same rank twice (captures of one process): one view of it, the verdict unchanged.
    report, _ = analyze([hung, hung, left])
    (comm,) = report["nccl_comms"]
    check(comm["ranks_seen"] == 2 and comm["analysis"]["waiting_ranks"] == [0] and
          comm["analysis"]["behind_ranks"] == [1], f"rank twice {comm}")

    # Rank 1's trace missing: the ranks without one are the suspects.
    report, _ = analyze([hung])
    a = report["nccl_comms"][0]["analysis"]
    check(a["verdict"] == "hang: ranks without trace" and a["ranks_without_trace"] == [1] and
          a["waiting_ranks"] == [0], f"alone {a}")

    # Rank 1 inside an AllGather instead: the ranks called collectives in different orders.
    report, _ = analyze([hung, other])
    a = report["nccl_comms"][0]["analysis"]
    r1 = comm_of(report, 1)
    check(r1.get("pending_func") == "AllGather" and r1.get("pending_seq") == 0 and
          r1.get("pending_state") == "launched, not finished", f"rank 1 other {r1}")
    check(a["verdict"] == "hang: collective order differs" and a["func"] == "AllReduce" and
          a["seq"] == 3 and a["waiting_ranks"] == [0] and a["elsewhere_ranks"] == [1] and
          a["behind_ranks"] == [], f"order {a}")
    hang = [f["text"] for f in report["findings"] if f["kind"] == "nccl_hang"]
    check(len(hang) == 1 and re.fullmatch(
        posted_re(["HANG: rank 0 is inside AllReduce seq 3", ", waiting for rank 1, inside "
                     "another collective: the ranks called their collectives in different "
                     "orders"]), hang[0]), f"order verdict {hang}")

    # Point to point: rank 0 inside a Send to rank 1, which never posts the Recv; which posts
    # it (both inside: the transfer is stuck); which has no trace.
    send = run_prog(["rank", "0", "send"], os.path.join(work, "r0send"))
    recv = run_prog(["rank", "1", "recv"], os.path.join(work, "r1recv"))
    report, _ = analyze([send, left])
    a = report["nccl_comms"][0]["analysis"]
    r0 = comm_of(report, 0)
    check(r0.get("pending_func") == "Send" and r0.get("pending_peer") == 1 and
          r0.get("pending_state") == "launched, not finished" and r0.get("pending_seq") == -1,
          f"rank 0 send {r0}")
    rows = [{k: v for k, v in r.items() if k != "waiting_ns"} for r in a.get("p2p", [])]
    check(a["verdict"] == "hang: peer never posted" and
          rows == [{"rank": 0, "func": "Send", "peer": 1, "peer_state": "not posted"}],
          f"send {a}")
    hang = [f["text"] for f in report["findings"] if f["kind"] == "nccl_hang"]
    check(len(hang) == 1 and re.fullmatch(
        posted_re(["HANG: rank 0 is inside Send to rank 1", ", which never posted the "
                     "matching Recv"]), hang[0]), f"send verdict {hang}")
    check(a.get("p2p") and a["p2p"][0]["waiting_ns"] > 0, f"p2p waiting {a.get('p2p')}")
    report, _ = analyze([send, recv])
    a = report["nccl_comms"][0]["analysis"]
    check(a["verdict"] == "hang: transfer stuck" and [r["peer_state"] for r in a["p2p"]] ==
          ["inside it too", "inside it too"] and [r["func"] for r in a["p2p"]] == ["Send", "Recv"],
          f"send/recv {a}")
    report, _ = analyze([send])
    a = report["nccl_comms"][0]["analysis"]
    check(a["verdict"] == "hang: peer without trace" and a["ranks_without_trace"] == [1],
          f"send alone {a}")

    # Both ranks inside it: the collective itself is stuck.
    report, _ = analyze([hung, both])
    a = report["nccl_comms"][0]["analysis"]
    check(a["verdict"] == "hang: all ranks inside" and a["waiting_ranks"] == [0, 1] and
          a["behind_ranks"] == [], f"both {a}")


def case_straggler(work):
    # Both ranks at once, collective i at t0 + i * 50 ms, rank 1's 20 ms late. t0 leaves both
    # processes time to start (a loaded sanitizer build is slow to).
    t0 = time.time_ns() + 3000000000
    args = [["rank", str(r), "pace", str(t0)] for r in (0, 1)]
    dirs = [os.path.join(work, f"pace{r}") for r in (0, 1)]
    procs = [start_prog(a, d) for a, d in zip(args, dirs)]
    traces = [finish_prog(p, a, d) for p, a, d in zip(procs, args, dirs)]
    report, text = analyze(traces)
    (comm,) = report["nccl_comms"]
    check(comm["analysis"]["verdict"] == "ok", f"no hang: {comm['analysis']}")
    arr = comm["arrivals"]
    ranks = {r["rank"]: r for r in arr["ranks"]}
    check(arr["collectives"] == 12, f"collectives {arr['collectives']}")
    check(ranks[1]["started_last"] == 12 and ranks[0]["started_last"] == 0, f"last {ranks}")
    check(ranks[0]["mean_late_ns"] == 0, f"rank 0 late {ranks[0]}")
    check(15000000 <= ranks[1]["mean_late_ns"] < 200000000, f"rank 1 late {ranks[1]}")
    check(arr.get("straggler") == 1, f"straggler {arr.get('straggler')}")
    slow = [f["text"] for f in report["findings"] if f["kind"] == "nccl_straggler"]
    check(len(slow) == 1 and slow[0].startswith(
        f"NCCL comm {comm['comm']}: rank 1 started last in 12 of 12 collectives, "), f"{slow}")
    # One rank alone: nothing to compare.
    report, _ = analyze(traces[:1])
    check(report["nccl_comms"][0]["arrivals"]["collectives"] == 0, "one rank: no comparison")
    check(not [f for f in report["findings"] if f["kind"] == "nccl_straggler"], "no straggler")


def case_steps(work):
    trace = run_prog(["steps"], os.path.join(work, "steps"))
    report, text = analyze([trace])
    rows = by_name(report["traces"][0]["nvtx_ranges"])
    check(sorted(rows) == ["forward", "step"], f"ranges {sorted(rows)}")
    step, fwd = rows.get("step", {}), rows.get("forward", {})
    check(step.get("count") == 30 and fwd.get("count") == 30, f"counts {step} {fwd}")
    # Steps sleep 2 ms, the 18th 42 ms: the median is about 2 ms, the slowest the 18th.
    check(2000000 <= step.get("median_ns", 0) < 20000000, f"step median {step}")
    # p99 of 30 is the 29th: the spike alone is above it.
    check(step.get("max_ns", 0) >= 42000000 and step.get("p99_ns", 1 << 62) < 20000000,
          f"step max {step}")
    check(step.get("total_ns", 0) >= 29 * 2000000 + 42000000, f"step total {step}")
    # "forward" (a launch and its sync, some µs) can catch a scheduling hiccup on a loaded
    # machine, which is a spike of its own: only the step's is certain.
    slow = [f["text"] for f in report["findings"] if f["kind"] == "slow_range"]
    check(len([t for t in slow if t.startswith("NVTX step: the slowest of 30 took ")]) == 1,
          f"{slow}")
    check("NVTX ranges by total time:" in text, text)

    # The spike's own window (--from/--to, as the finding points at it): that one step, its
    # forward range and its one kernel.
    tr = report["traces"][0]
    at = step.get("max_start_ns", 0) - tr["capture_start_ns"]
    p = subprocess.run([ARGS.gpuprof, "analyze", "--json", "-", "--from", f"{at}ns", "--to",
                        f"{at + step.get('max_ns', 0)}ns", trace], capture_output=True,
                       text=True, timeout=120)
    check(p.returncode == 0 and p.stderr == "", f"windowed analyze: {p.returncode} {p.stderr}")
    w = json.loads(p.stdout)["traces"][0] if p.returncode == 0 else {}
    rows = by_name(w.get("nvtx_ranges", []))
    check(w.get("from_ns") == at and w.get("capture_ns") == step.get("max_ns") and
          w.get("capture_start_ns") == step.get("max_start_ns"), f"window {w.get('from_ns')}")
    check(rows.get("step", {}).get("count") == 1 and
          rows.get("step", {}).get("max_ns") == step.get("max_ns") and
          rows.get("forward", {}).get("count") == 1, f"window ranges {rows}")
    check([(k["name"], k["count"]) for k in w.get("kernels", [])] == [("short_k()", 1)],
          f"window kernels {w.get('kernels')}")


def case_errors(work):
    gp = ARGS.gpuprof

    def refused(args, rc, words):
        p = subprocess.run([gp, "analyze"] + args, capture_output=True, text=True, timeout=60)
        lines = p.stderr.strip().splitlines()
        check(p.returncode == rc, f"{args}: exit {p.returncode}, expected {rc}")
        check(p.stdout == "", f"{args}: stdout {p.stdout!r}")
        check(lines and lines[0].startswith("gpuprof analyze:") and words in lines[0],
              f"{args}: stderr {p.stderr!r}")

    refused([], 2, "no trace given")
    refused(["--bogus", "x"], 2, "unknown option --bogus")
    junk = os.path.join(work, "junk.json")
    with open(junk, "w") as f:
        f.write("hello\n")
    refused([junk], 2, junk + ": not a gpuprof trace")
    refused([os.path.join(work, "absent.json")], 1, "absent.json: cannot open")
    refused(["--from", "soon", junk], 2, "--from soon is not a duration")
    empty = os.path.join(work, "empty")
    os.makedirs(empty)
    refused([empty], 2, empty + ": a directory without gpuprof capture traces")
    refused(["--from", "2ms", "--to", "1ms", junk], 2, "--to must be after --from")
    trace = run_prog(["gpu"], os.path.join(work, "gpu"))
    merged = os.path.join(work, "merged.json")
    m = subprocess.run([gp, "merge", "-o", merged, trace], capture_output=True, text=True, timeout=60)
    check(m.returncode == 0, f"merge: {m.stderr}")
    refused([merged], 2, "a merged trace: analyze the per-process traces")

    # The writer's fixture cut by its 256 KiB size cap, in each encoding: said, with what was
    # lost, as are the records its metadata says CUPTI dropped.
    subprocess.run([ARGS.fixture, work], check=True, capture_output=True, timeout=60)
    for name in ("capped.json", "capped.json.gz", "capped.pftrace"):
        report, _ = analyze([os.path.join(work, name)])
        kinds = {f["kind"]: f["text"] for f in report["findings"]}
        check(kinds.get("truncated", "").startswith(
            "the capture reached its size cap (262144 bytes): the 2 events after that were not "
            "written"), f"{name}: {kinds}")
        check(kinds.get("data_lost", "").startswith("3 GPU records and 0 API calls were lost"),
              f"{name}: {kinds}")

    # Values no agent writes, bounded: 300 communicators (a trace holds 256), one of 2^40
    # ranks, 5000 named threads; read in well under the test's time.
    hostile = os.path.join(work, "hostile.json")
    pid, gpu_pid = 77, 0x40000000 | (77 << 8)
    events = [{"ph": "M", "name": "thread_name", "pid": pid, "tid": 1000 + i,
               "args": {"name": f"t{i}"}} for i in range(5000)]
    for i in range(300):
        events.append({"ph": "X", "cat": "nccl", "name": "AllReduce", "pid": gpu_pid,
                       "tid": 0x40000000 | (i % 256), "ts": i, "dur": 1,
                       "args": {"comm": f"{i:016x}", "rank": 0, "nranks": 1 << 40, "seq": 0,
                                "state": "launched, not finished", "posted_ns": i}})
    with open(hostile, "w") as f:
        f.write('{"traceEvents":[\n')
        f.write(",\n".join(json.dumps(e, separators=(",", ":")) for e in events))
        f.write('\n],"metadata":{"base_time_ns":1700000000000000000,"pid":77}}\n')
    t0 = time.monotonic()
    report, _ = analyze([hostile])
    check(time.monotonic() - t0 < 30, "hostile trace: analyzed within 30 s")
    check(len(report["nccl_comms"]) == 256, f"hostile: {len(report['nccl_comms'])} comms")
    check(all(c["analysis"]["ranks_without_trace"] == [] for c in report["nccl_comms"]),
          "hostile: 2^40 ranks are not listed")

    # A capture cut by a kill (no metadata at its end): analyzed, and said to be cut.
    cut = os.path.join(work, "cut.json")
    with open(trace) as f:
        lines = f.readlines()
    end = next(i for i, line in enumerate(lines) if line.startswith('],"metadata"'))
    with open(cut, "w") as f:
        f.writelines(lines[: end // 2])
    report, _ = analyze([cut])
    tr = report["traces"][0]
    check(tr["cut"] is True, "cut trace flagged")
    check(0 < tr["gpus"][0]["kernels"] < 206, f"cut trace kernels {tr['gpus'][0]['kernels']}")


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True,
                    choices=["gpu", "hang", "straggler", "steps", "errors"])
    ap.add_argument("--format", required=True)
    ap.add_argument("--gpuprof", required=True)
    ap.add_argument("--prog", required=True)
    ap.add_argument("--fixture", help="trace_fixture (errors)")
    ARGS = ap.parse_args()
    work = os.path.join(os.environ.get("E2E_WORKDIR", "/tmp"), "analyze")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    {"gpu": case_gpu, "hang": case_hang, "straggler": case_straggler,
     "steps": case_steps, "errors": case_errors}[ARGS.case](work)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print(f"check_analyze {ARGS.case} {ARGS.format}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

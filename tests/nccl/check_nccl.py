#!/usr/bin/env python3
"""Runs nccl_plugin_sim under the agent and checks what its NCCL ops became.

The program drives the agent's ncclProfiler_v5 (or v4/v3) exactly as NCCL 2.28.9 does around
kernels with NCCL's names on the simulated GPU, with durations it sets. Checked: the summary's
nccl block, the nccl pprof profile (`go tool pprof -raw`: values by stack, leaf and comm
label), and in the trace the communicator tracks and their slices (names, arguments, and the
interval of the kernel that ran each op), JSON through the trace validator, .pftrace decoded
with protoc and rebuilt with the importer's rules (tests/trace/check_traces.py).
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pprof"))
sys.path.insert(0, os.path.join(HERE, "..", "trace"))
from check_pprof import Check, by_chain, read_profile  # noqa: E402
import check_traces  # noqa: E402

TP = "1111222233334444"
DP = "abcdef0012345678"
TP_TRACK = "NCCL comm tp rank 0/2"
DP_TRACK = f"NCCL comm {DP} rank 1/4"

K_AR_BF16 = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
K_AR_F32 = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
K_SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
K_BCAST = "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)"

COLL = {"algo": "RING", "proto": "LL", "nChannels": 2}
# (track, slice name, kernel, offset in the kernel, duration, arguments): in the order written.
# The ops of a grouped kernel follow one another inside it, each its share of the kernel's
# time (90001 ns: 45001 + 45000), with the arguments group_ops and kernel_ns.
GROUP2_F32 = {"group_ops": 2, "kernel_ns": 90001}
GROUP2_SR = {"group_ops": 2, "kernel_ns": 30000}
SLICES = [
    (TP_TRACK, "AllReduce", K_AR_BF16, 0, 100000,
     {"count": 524288, "datatype": "ncclBfloat16", "bytes": 1048576, "seq": 0, **COLL,
      "comm": TP, "rank": 0, "nranks": 2}),
    (TP_TRACK, "AllReduce", K_AR_F32, 0, 45001,
     {"count": 1000, "datatype": "ncclFloat32", "bytes": 4000, "seq": 1, **COLL, "comm": TP,
      "rank": 0, "nranks": 2, **GROUP2_F32}),
    # The API's count and datatype, not the Coll event's bytes of ncclInt8.
    (TP_TRACK, "AllGather", K_AR_F32, 45001, 45000,
     {"count": 2048, "datatype": "ncclBfloat16", "bytes": 4096, "seq": 0, **COLL, "comm": TP,
      "rank": 0, "nranks": 2, **GROUP2_F32}),
    (TP_TRACK, "Send", K_SENDRECV, 0, 15000,
     {"count": 1024, "datatype": "ncclFloat32", "bytes": 4096, "peer": 1, "nChannels": 2,
      "comm": TP, "rank": 0, "nranks": 2, **GROUP2_SR}),
    (TP_TRACK, "Recv", K_SENDRECV, 15000, 15000,
     {"count": 1024, "datatype": "ncclFloat32", "bytes": 4096, "peer": 1, "nChannels": 2,
      "comm": TP, "rank": 0, "nranks": 2, **GROUP2_SR}),
    (DP_TRACK, "Broadcast", K_BCAST, 0, 20000,
     {"count": 4096, "datatype": "ncclFloat16", "bytes": 8192, "root": 1, "seq": 0, **COLL,
      "comm": DP, "rank": 1, "nranks": 4}),
]
KERNEL_NS = {K_AR_BF16: 100000, K_AR_F32: 90001, K_SENDRECV: 30000, K_BCAST: 20000}

NCCL_TYPES = ["nccl_ops/count", "nccl_bytes/bytes", "nccl_time/nanoseconds"]
# (chain leaf first, comm label): [ops, bytes, time]. The grouped kernel's 90001 ns split
# between its two ops: 45001 + 45000.
PPROF = {
    "main": {
        (("nccl:AllReduce", "start", "coll_api", "sim_allreduce", "main"), "tp"): [1, 1048576, 100000],
        (("nccl:AllReduce", "start", "coll_api", "sim_grouped", "main"), "tp"): [1, 4000, 45001],
        (("nccl:AllGather", "start", "coll_api", "sim_grouped", "main"), "tp"): [1, 4096, 45000],
        (("nccl:Send", "start", "p2p_api", "sim_sendrecv", "main"), "tp"): [1, 4096, 15000],
        (("nccl:Recv", "start", "p2p_api", "sim_sendrecv", "main"), "tp"): [1, 4096, 15000],
        (("nccl:Broadcast", "start", "coll_api", "sim_broadcast", "main"), DP): [1, 8192, 20000],
    },
    "v4": {(("nccl:AllReduce", "sim_v4", "main"), "v4comm"): [1, 512, 50000]},
    "v3": {(("nccl:AllReduce", "sim_v3", "main"), "v3comm"): [1, 1024, 60000]},
    "overflow": None,
    "noinject": None,
}

COUNTS = {"comms_dropped": 0, "ops_overflow": 0, "launch_conflicts": 0}
SUMMARY = {
    # Ignored: 4 GroupApi, 4 Group, the ProxyOp and the unknown type with a context.
    "main": {"comms": 2, "ops": 6, "ops_joined": 6, "ops_unjoined": 0, "ops_dropped": 0,
             "ignored_events": 10, "kernels": 4, **COUNTS,
             "funcs": {"AllReduce": {"ops": 2, "bytes": 1052576, "gpu_time_ns": 145001},
                       "AllGather": {"ops": 1, "bytes": 4096, "gpu_time_ns": 45000},
                       "Broadcast": {"ops": 1, "bytes": 8192, "gpu_time_ns": 20000},
                       "Send": {"ops": 1, "bytes": 4096, "gpu_time_ns": 15000},
                       "Recv": {"ops": 1, "bytes": 4096, "gpu_time_ns": 15000}}},
    # 16394 API events, a pool of 16384: 10 dropped, the rest released unjoined at exit.
    "overflow": {"comms": 1, "ops": 16384, "ops_joined": 0, "ops_unjoined": 16384,
                 "ops_dropped": 10, "ignored_events": 0, "kernels": 0, **COUNTS, "funcs": {}},
    "v4": {"comms": 1, "ops": 1, "ops_joined": 1, "ops_unjoined": 0, "ops_dropped": 0,
           "ignored_events": 0, "kernels": 1, **COUNTS,
           "funcs": {"AllReduce": {"ops": 1, "bytes": 512, "gpu_time_ns": 50000}}},
    "v3": {"comms": 1, "ops": 1, "ops_joined": 1, "ops_unjoined": 0, "ops_dropped": 0,
           "ignored_events": 0, "kernels": 1, **COUNTS,
           "funcs": {"AllReduce": {"ops": 1, "bytes": 1024, "gpu_time_ns": 60000}}},
}
SUMMARY["noinject"] = None  # the agent never started: no summary at all
MASK = {"noinject": "noinject mask 0x0", "main": "v5 mask 0xe06", "overflow": "v5 mask 0xe06", "v4": "v4 mask 0x6",
        "v3": "v3 mask 0x6", "unseen": "v5 mask 0xe06", "alltoall": "v5 mask 0xe06",
        # An init past the communicator table leaves the process-wide mask on.
        "full": "table full: mask 0xe06"}

AR_BF16 = {"AllReduce": {"ops": 1, "bytes": 1048576, "gpu_time_ns": 100000}}
# A bracket closed without a launch, then sim_allreduce: the first op is released unjoined,
# the second kernel carries only its own op. Ignored: 2 GroupApi, 1 Group.
SUMMARY["unseen"] = {"comms": 1, "ops": 2, "ops_joined": 1, "ops_unjoined": 1, "ops_dropped": 0,
                     "ignored_events": 3, "kernels": 1, **COUNTS, "funcs": AR_BF16}
PPROF["unseen"] = {(("nccl:AllReduce", "start", "coll_api", "sim_allreduce", "sim_unseen", "main"),
                    "tp"): [1, 1048576, 100000]}
# 130 p2p ops in one kernel of 130013 ns: shares of 1001 ns for the first 13 (7 Send, 6 Recv),
# 1000 for the others.
A2A_PEERS = 65
A2A_NS = 130013
SUMMARY["alltoall"] = {"comms": 1, "ops": 130, "ops_joined": 130, "ops_unjoined": 0,
                       "ops_dropped": 0, "ignored_events": 2, "kernels": 1, **COUNTS,
                       "funcs": {"Send": {"ops": 65, "bytes": 66560, "gpu_time_ns": 65007},
                                 "Recv": {"ops": 65, "bytes": 66560, "gpu_time_ns": 65006}}}
PPROF["alltoall"] = {
    (("nccl:Send", "start", "p2p_api", "sim_alltoall", "main"), "tp"): [65, 66560, 65007],
    (("nccl:Recv", "start", "p2p_api", "sim_alltoall", "main"), "tp"): [65, 66560, 65006],
}
# 256 entries: tp re-initialised keeps its entry, the 257th init is dropped.
SUMMARY["full"] = {"comms": 256, "ops": 1, "ops_joined": 1, "ops_unjoined": 0, "ops_dropped": 0,
                   "ignored_events": 2, "kernels": 1, **dict(COUNTS, comms_dropped=1),
                   "funcs": AR_BF16}
PPROF["full"] = {(("nccl:AllReduce", "start", "coll_api", "sim_allreduce", "main"), "tp"):
                 [1, 1048576, 100000]}


# case api: nccl_api_e2e on the NCCL double. The comm has no name (its label is its hash) and
# the order of a group's ops inside its kernel is NCCL's (size-sorted), so the checks take
# each op by its calling function and the grouped kernel's split as either way round.
API_OPS = {  # function -> [(func, count, datatype, bytes, seq, peer, kernel)]
    "e2e_allreduce": [("AllReduce", 524288, "ncclBfloat16", 1048576, 0, None, K_AR_BF16)],
    "e2e_grouped": [("AllReduce", 100000, "ncclFloat32", 400000, 1, None, K_AR_F32),
                    ("AllGather", 2048, "ncclBfloat16", 4096, 0, None, K_AR_F32)],
    "e2e_sendrecv": [("Send", 1024, "ncclFloat32", 4096, None, 1, K_SENDRECV),
                     ("Recv", 1024, "ncclFloat32", 4096, None, 1, K_SENDRECV)],
}
API_KERNEL_NS = {K_AR_BF16: 100000, K_AR_F32: 90001, K_SENDRECV: 30000}
SUMMARY["api"] = {"comms": 1, "ops": 5, "ops_joined": 5, "ops_unjoined": 0, "ops_dropped": 0,
                  "kernels": 3, **COUNTS}
PPROF["api"] = "api"


# Ops still pending at exit, by case: the overflow case's 16384 never-launched ops (its comm is
# never finalized; the summary lists 16). The others finalize their comms: nothing pending.
PENDING_AT_EXIT = {"overflow": 16384}


def split_ok(times, total):
    return sum(times) == total and all(t in (total // len(times), total // len(times) + 1)
                                       for t in times)


def check_api_pprof(c, pid, files=None, api_ops=None):
    files = nccl_profiles(pid) if files is None else files
    api_ops = api_ops or API_OPS
    c.eq("nccl profile files", len(files), 1)
    if len(files) != 1:
        return
    prof = read_profile(files[0])
    c.eq("nccl: sample types", prof.get("types"), NCCL_TYPES)
    got = {}
    for s in prof["samples"]:
        fn = next((f for f in s["functions"] if f in api_ops), None)
        c.true(f"nccl: comm label {s['labels'].get('comm')} is a hash",
               re.fullmatch(r"[0-9a-f]{16}", s["labels"].get("comm", "")) is not None)
        got.setdefault((s["functions"][0], fn), []).append(s["values"])
    want = {(f"nccl:{op[0]}", fn) for fn, ops in api_ops.items() for op in ops}
    c.eq("nccl: samples by (leaf, caller)", sorted(got), sorted(want))
    for fn, ops in api_ops.items():
        times = []
        for op in ops:
            vals = got.get((f"nccl:{op[0]}", fn), [[0, 0, 0]])
            c.eq(f"nccl: {op[0]} from {fn}: ops, bytes", [v[:2] for v in vals], [[1, op[3]]])
            times.append(vals[0][2])
        total = API_KERNEL_NS[ops[0][6]]
        c.true(f"nccl: {fn}'s ops split {total} ns: {times}", split_ok(times, total))


def check_api_slices(c, slices, what, api_ops=None):
    api_ops = api_ops or API_OPS
    kernels = kernel_slices(slices)
    ops = [(t, n, s, e, a) for t, n, s, e, a in slices if t.startswith("NCCL comm")]
    tracks = {t for t, *_ in ops}
    c.eq(f"{what}: NCCL tracks", len(tracks), 1)
    c.true(f"{what}: track name {tracks}",
           all(re.fullmatch(r"NCCL comm [0-9a-f]{16} rank 0/2", t) for t in tracks))
    c.eq(f"{what}: NCCL slices", len(ops), sum(len(v) for v in api_ops.values()))
    for fn, want_ops in api_ops.items():
        k = want_ops[0][6]
        ks, ke, kcorr = kernels.get(k, (None, None, None))
        total = API_KERNEL_NS[k]
        c.eq(f"{what}: {k} duration", (ke - ks) if ks is not None else None, total)
        mine = sorted((o for o in ops if o[4].get("correlation") == kcorr), key=lambda o: o[2])
        # NCCL's order in the plan (API_OPS lists it): the larger collective first, the send
        # before the recv; each op its share of the kernel, one after another.
        c.eq(f"{what}: {fn}: ops of kernel {k} in time order", [o[1] for o in mine],
             [w[0] for w in want_ops])
        at = ks
        for i, o in enumerate(mine):
            share = total // len(mine) + (1 if i < total % len(mine) else 0)
            c.eq(f"{what}: {fn} {o[1]}: interval", (o[2], o[3]),
                 (at, at + share) if at is not None else None)
            at = at + share if at is not None else None
            group = ({"group_ops": len(mine), "kernel_ns": total} if len(mine) > 1 else
                     {"group_ops": None, "kernel_ns": None})
            c.eq(f"{what}: {fn} {o[1]}: group arguments",
                 {key: o[4].get(key) for key in group}, group)
            w = next((w for w in want_ops if w[0] == o[1]), None)
            if not w:
                continue
            a = o[4]
            c.eq(f"{what}: {fn} {o[1]}: count, datatype, bytes, seq, peer",
                 (a.get("count"), a.get("datatype"), a.get("bytes"), a.get("seq"), a.get("peer")),
                 w[1:6])
            c.eq(f"{what}: {fn} {o[1]}: rank, nranks, nChannels",
                 (a.get("rank"), a.get("nranks"), a.get("nChannels")), (0, 2, 2))


# case initall: nccl_api_e2e initall, 3 iterations of a group with an AllReduce (4096 f32,
# 50 us kernels) on each comm of one ncclCommInitAll (ranks 0/1 on devices 0/1, one hash).
# Ignored: 3 GroupApi, 6 Group.
SUMMARY["initall"] = {"comms": 2, "ops": 6, "ops_joined": 6, "ops_unjoined": 0, "ops_dropped": 0,
                      "ignored_events": 9, "kernels": 6, **COUNTS,
                      "funcs": {"AllReduce": {"ops": 6, "bytes": 98304, "gpu_time_ns": 300000}}}
PPROF["initall"] = "initall"


def check_initall_pprof(c, pid):
    files = nccl_profiles(pid)
    c.eq("nccl profile files", len(files), 1)
    if len(files) != 1:
        return
    prof = read_profile(files[0])
    got = {}
    for s in prof["samples"]:
        caller = next((f for f in s["functions"] if f == "e2e_pair"), None)
        key = (s["functions"][0], caller, s["labels"].get("gpu"))
        got[key] = [a + b for a, b in zip(got.get(key, [0, 0, 0]), s["values"])]
        c.true(f"nccl: comm label {s['labels'].get('comm')} is a hash",
               re.fullmatch(r"[0-9a-f]{16}", s["labels"].get("comm", "")) is not None)
    c.eq("nccl: values by (leaf, caller, gpu)", got,
         {("nccl:AllReduce", "e2e_pair", g): [3, 49152, 150000] for g in ("0", "1")})


def check_initall_slices(c, slices, what):
    """Each comm's ops on its own track, in its device's GPU process, joined to its kernel."""
    ops = [x for x in slices if x[0].startswith("NCCL comm")]
    kernels = [x for x in slices if x[1] == K_AR_F32]
    c.eq(f"{what}: kernels", len(kernels), 6)
    c.eq(f"{what}: NCCL slices", len(ops), 6)
    hashes = set()
    for rank in (0, 1):
        mine = [x for x in ops if x[0].endswith(f" rank {rank}/2")]
        c.eq(f"{what}: rank {rank}: ops", [(x[1], x[4].get("seq")) for x in mine],
             [("AllReduce", i) for i in range(3)])
        for t, name, s, e, a in mine:
            hashes.add(t.split()[2])
            c.true(f"{what}: rank {rank} op in GPU {rank}'s process ({a.get('_process')})",
                   str(a.get("_process", "")).startswith(f"GPU {rank} "))
            k = [x for x in kernels if x[4].get("correlation") == a.get("correlation")]
            c.eq(f"{what}: rank {rank} seq {a.get('seq')}: its kernel (process, interval)",
                 [(x[4].get("_process"), x[2], x[3]) for x in k], [(a.get("_process"), s, e)])
            c.eq(f"{what}: rank {rank} seq {a.get('seq')}: args",
                 [a.get(k_) for k_ in ("count", "datatype", "bytes", "rank", "nranks",
                                        "group_ops")],
                 [4096, "ncclFloat32", 16384, rank, 2, None])
    c.eq(f"{what}: one communicator hash for both ranks", len(hashes), 1)


# case ondemand: GPUPROF_MODE=ondemand; an AllReduce before any capture, e2e_allreduce and
# e2e_grouped in a capture, e2e_sendrecv between captures, e2e_allreduce in a GPU-only capture:
# only the full capture's 3 ops are recorded. Ignored: 2 GroupApi, 2 Group.
# NCCL numbers every AllReduce, traced or not: the one before the capture took seq 0.
ONDEMAND_OPS = {
    "e2e_allreduce": [("AllReduce", 524288, "ncclBfloat16", 1048576, 1, None, K_AR_BF16)],
    "e2e_grouped": [("AllReduce", 100000, "ncclFloat32", 400000, 2, None, K_AR_F32),
                    ("AllGather", 2048, "ncclBfloat16", 4096, 0, None, K_AR_F32)],
}
SUMMARY["ondemand"] = {"comms": 1, "ops": 3, "ops_joined": 3, "ops_unjoined": 0, "ops_dropped": 0,
                       "ignored_events": 4, "kernels": 2, **COUNTS,
                       "funcs": {"AllReduce": {"ops": 2, "bytes": 1448576, "gpu_time_ns": 145001},
                                 "AllGather": {"ops": 1, "bytes": 4096, "gpu_time_ns": 45000}}}
PPROF["ondemand"] = "ondemand"


def check_ondemand(c, pid, validator):
    out = os.environ["GPUPROF_OUTPUT_DIR"]
    c.eq("no continuous nccl profiles on demand", nccl_profiles(pid), [])
    check_api_pprof(c, pid, glob.glob(os.path.join(out, f"gpuprof-*-{pid}-*-capture*-nccl.pb.gz")),
                    ONDEMAND_OPS)
    traces = sorted(glob.glob(os.path.join(out, f"gpuprof-*-{pid}-*-capture*.json")))
    c.eq("capture traces", len(traces), 2)
    full = gpu_only = None
    for t in traces:
        got = json_slices(c, t, validator)
        if any(x[1] == K_AR_F32 for x in got):
            full = (t, got)
        else:
            gpu_only = (t, got)
    c.true("the full capture's trace", full is not None)
    c.true("the GPU-only capture's trace", gpu_only is not None)
    if full:
        check_api_slices(c, full[1], os.path.basename(full[0]), ONDEMAND_OPS)
    if gpu_only:
        what = os.path.basename(gpu_only[0])
        c.eq(f"{what}: kernels", [x[1] for x in gpu_only[1] if x[1] in API_KERNEL_NS], [K_AR_BF16])
        c.eq(f"{what}: NCCL slices", [x for x in gpu_only[1] if x[0].startswith("NCCL comm")], [])


# case span (on demand): a group whose capture ended before ncclGroupEnd (its bracketed launch
# unseen), then e2e_allreduce in a second capture: the first op is unjoined (pending, not
# launched, at the first capture's end), the second capture's kernel carries e2e_allreduce's op
# only. Ignored: 2 GroupApi, 2 Group.
SPAN_OPS = {"e2e_allreduce": [("AllReduce", 524288, "ncclBfloat16", 1048576, 1, None, K_AR_BF16)]}
SUMMARY["span"] = {"comms": 1, "ops": 2, "ops_joined": 1, "ops_unjoined": 1, "ops_dropped": 0,
                   "ignored_events": 4, "kernels": 1, **COUNTS,
                   "funcs": {"AllReduce": {"ops": 1, "bytes": 1048576, "gpu_time_ns": 100000}}}
PPROF["span"] = "span"


def check_span(c, pid, validator):
    out = os.environ["GPUPROF_OUTPUT_DIR"]
    check_api_pprof(c, pid, glob.glob(os.path.join(out, f"gpuprof-*-{pid}-*-capture*-nccl.pb.gz")),
                    SPAN_OPS)
    traces = sorted(glob.glob(os.path.join(out, f"gpuprof-*-{pid}-*-capture*.json")))
    c.eq("capture traces", len(traces), 2)
    for t in traces:
        got = json_slices(c, t, validator)
        if any(x[1] == K_AR_BF16 for x in got):
            check_api_slices(c, got, os.path.basename(t), SPAN_OPS)
        else:
            # The first capture ended inside the group: its op is pending, not launched, from
            # its API call to the capture's end.
            meta = check_traces.load_json_events(t)["metadata"]
            c.eq(f"{t}: NCCL slices (name, state, count, datatype, interval)",
                 [(x[1], x[4].get("state"), x[4].get("count"), x[4].get("datatype"), x[2], x[3])
                  for x in got if x[0].startswith("NCCL comm")],
                 [("AllReduce", "not launched", 100000, "ncclFloat32",
                   next((x[4].get("posted_ns") for x in got if x[0].startswith("NCCL comm")), None),
                   int(meta["capture_end_ns"]))])


# case hang: nccl_api_e2e hang (see hang() there). Two finished AllReduces on each of the comms
# hang0 (bf16, 100 us kernels) and hang1 (f32, 90001 ns), then pending: AllReduce seq 2 and 3
# on hang0 (launched, kernel never finished) and an AllReduce on hang1 inside a group never
# ended (not launched). Ignored: 7 GroupApi (one per call), 6 Group (one per launch).
HANG_PENDING = [  # (comm name, seq, count, datatype, bytes, state)
    ("hang0", 2, 524288, "ncclBfloat16", 1048576, "launched, not finished"),
    ("hang0", 3, 4096, "ncclBfloat16", 8192, "launched, not finished"),
    ("hang1", None, 2048, "ncclFloat32", 8192, "not launched"),
]
HANG_FINISHED = [  # (comm name, seq, count, datatype, bytes, kernel)
    ("hang0", 0, 524288, "ncclBfloat16", 1048576, K_AR_BF16),
    ("hang0", 1, 524288, "ncclBfloat16", 1048576, K_AR_BF16),
    ("hang1", 0, 100000, "ncclFloat32", 400000, K_AR_F32),
    ("hang1", 1, 100000, "ncclFloat32", 400000, K_AR_F32),
]
SUMMARY["hang"] = {"comms": 2, "comms_dropped": 0, "ops": 7, "ops_joined": 4, "ops_unjoined": 3,
                   "ops_dropped": 0, "ops_overflow": 0, "launch_conflicts": 0,
                   "ignored_events": 13, "kernels": 4, "ops_pending": 3,
                   "funcs": {"AllReduce": {"ops": 4, "bytes": 2897152,
                                           "gpu_time_ns": 380002}}}
PPROF["hang"] = "hang"
# hang_abort: the same, then ncclCommAbort(hang0): NCCL finalizes its plugin context, so only
# hang1's open group is still pending at exit (hang0's two ops are released unjoined).
SUMMARY["hang_abort"] = dict(SUMMARY["hang"], ops_pending=1)


def check_hang_summary(c, got, stderr):
    """The summary's pending list (oldest first) and the exit summary's lines."""
    got = dict(got or {})
    pending = got.pop("pending", None)
    c.eq("summary nccl (but pending)", got, SUMMARY["hang"])
    pending = pending or []
    c.eq("summary nccl.pending: (comm_name, rank, nranks, device, func, seq, count, bytes, "
         "state)",
         [(p.get("comm_name"), p.get("rank"), p.get("nranks"), p.get("device"), p.get("func"),
           p.get("seq"), p.get("count"), p.get("bytes"), p.get("state")) for p in pending],
         [(n, 0, 2, 0, "AllReduce", q, cnt, b, st) for n, q, cnt, _, b, st in HANG_PENDING])
    for p in pending:
        c.true(f"summary pending {p.get('seq')}: comm is a hash, age_ms a number",
               re.fullmatch(r"[0-9a-f]{16}", p.get("comm", "")) is not None and
               isinstance(p.get("age_ms"), int))
        c.eq("summary pending keys", sorted(p), sorted(
            ["comm", "comm_name", "rank", "nranks", "device", "func", "count", "bytes", "state",
             "age_ms"] +
            (["seq"] if p.get("seq") is not None else [])))
    c.eq("summary pending: one hash per comm",
         len({p.get("comm") for p in pending}), 2)
    lines = [ln for ln in stderr.splitlines() if "pending" in ln or ln.startswith("gpuprof:     ")
             and " on comm " in ln]
    want = [r"gpuprof:   NCCL: 3 ops still pending at exit \(a hang\?\), oldest first:",
            r"gpuprof:     AllReduce seq 2 on comm hang0 rank 0/2 \(GPU 0\): launched, not "
            r"finished, 1048576 bytes, posted \d+ ms before exit",
            r"gpuprof:     AllReduce seq 3 on comm hang0 rank 0/2 \(GPU 0\): launched, not "
            r"finished, 8192 bytes, posted \d+ ms before exit",
            r"gpuprof:     AllReduce on comm hang1 rank 0/2 \(GPU 0\): not launched, 8192 bytes, "
            r"posted \d+ ms before exit"]
    c.eq("exit summary: pending lines", len(lines), len(want))
    for ln, w in zip(lines, want):
        c.true(f"exit summary line {ln!r}", re.fullmatch(w, ln) is not None)
    return {p.get("comm_name"): p.get("comm") for p in pending}


def check_hang_trace(c, slices, meta, what, first, hashes):
    """first: the capture that saw the finished ops (stopped by the program, written by the
    worker); else the one started after the hang (finished by the exit path)."""
    cs, ce = int(meta["capture_start_ns"]), int(meta["capture_end_ns"])
    ops = [x for x in slices if x[0].startswith("NCCL comm")]
    # Two streams: the comms' kernels overlap, so by track, then in the comm's order.
    done = sorted((x for x in ops if "state" not in x[4]), key=lambda x: (x[0], x[2]))
    pend = sorted((x for x in ops if "state" in x[4]), key=lambda x: (x[4].get("posted_ns", 0), x[0]))
    kernels = {}
    for t, n, s, e, a in slices:
        if n in (K_AR_BF16, K_AR_F32):
            kernels[a.get("correlation")] = (n, s, e)
    c.eq(f"{what}: finished ops (track, seq)", [(x[0], x[4].get("seq")) for x in done],
         [(f"NCCL comm {n} rank 0/2", q) for n, q, *_ in HANG_FINISHED] if first else [])
    for (t, n, s, e, a), w in zip(done, HANG_FINISHED):
        c.eq(f"{what}: finished {w[0]} seq {w[1]}: kernel, interval; args",
             (kernels.get(a.get("correlation")), [a.get(k) for k in (
                 "count", "datatype", "bytes", "comm", "algo", "proto", "nChannels")]),
             ((w[5], s, e), [w[2], w[3], w[4], hashes.get(w[0]), "RING", "LL", 2]))
    c.eq(f"{what}: pending ops (track, name, seq, state)",
         [(x[0], x[1], x[4].get("seq"), x[4].get("state")) for x in pend],
         [(f"NCCL comm {n} rank 0/2", "AllReduce", q, st) for n, q, _, _, _, st in HANG_PENDING])
    if len(pend) != len(HANG_PENDING):
        return
    depth = {}
    corrs = []
    for (t, n, s, e, a), w in zip(pend, HANG_PENDING):
        k = depth.get(w[0], 0)
        depth[w[0]] = k + 1
        posted = a.get("posted_ns")
        # From the API call (or the capture's start) to the capture's end; a comm's later
        # pending op nests inside the earlier one: 1 ns shorter at the end, and 1 ns later at
        # the start when both began with the capture.
        start = max(posted, cs) if posted is not None else None
        if start is not None and k and start == cs:
            start += 1
        c.eq(f"{what}: pending {w[0]} seq {w[1]}: interval", (s, e), (start, ce - k))
        c.true(f"{what}: pending {w[0]} seq {w[1]}: posted before the end ({posted})",
               posted is not None and posted < ce and (posted >= cs or not first))
        launched = w[5] == "launched, not finished"
        want = {"count": w[2], "datatype": w[3], "bytes": w[4], "comm": hashes.get(w[0]),
                "rank": 0, "nranks": 2, "algo": "RING" if launched else None,
                "proto": "LL" if launched else None, "nChannels": 2 if launched else None,
                "stream": None, "group_ops": None}
        c.eq(f"{what}: pending {w[0]} seq {w[1]}: args", {k_: a.get(k_) for k_ in want}, want)
        corr = a.get("correlation")
        c.true(f"{what}: pending {w[0]} seq {w[1]}: correlation {corr} iff launched",
               (corr is not None and corr > 0 and corr not in kernels) if launched else
               not corr)
        if launched:
            corrs.append(corr)
    c.true(f"{what}: seq 2 launched before seq 3 ({corrs})", corrs == sorted(set(corrs)))


# hang_dev: nccl_api_e2e hang_dev (see hang_dev() there): gpu0's AllReduce finished on device 0,
# gpu1's first one launched on device 1 and never finished.
SUMMARY["hang_dev"] = {"comms": 2, "comms_dropped": 0, "ops": 2, "ops_joined": 1,
                       "ops_unjoined": 1, "ops_dropped": 0, "ops_overflow": 0,
                       "launch_conflicts": 0, "ignored_events": 4, "kernels": 1,
                       "ops_pending": 1,
                       "funcs": {"AllReduce": {"ops": 1, "bytes": 4000, "gpu_time_ns": 50000}}}


# hang_idle: the same, but idle1's AllReduce (device 1) is posted in a group never ended: its
# group has the GroupApi event (ignored) but no Group event, which starts at ncclGroupEnd.
SUMMARY["hang_idle"] = dict(SUMMARY["hang_dev"], ignored_events=3)


def check_hang_dev(c, pid, got, fmt, validator, proto, protoc, case):
    """Each comm's ops on its GPU: the second comm's pending op on GPU 1 (hang_dev: known from
    its launch; hang_idle: it never launched, from its init)."""
    second, state = (("idle1", "not launched") if case == "hang_idle" else
                     ("gpu1", "launched, not finished"))
    got = dict(got or {})
    pending = got.pop("pending", None) or []
    c.eq("summary nccl (but pending)", got, SUMMARY[case])
    c.eq("summary pending (comm_name, device, state)",
         [(p.get("comm_name"), p.get("device"), p.get("state")) for p in pending],
         [(second, 1, state)])
    out = os.environ["GPUPROF_OUTPUT_DIR"]
    suffix = ".json" if fmt == "json" else ".pftrace"
    traces = glob.glob(os.path.join(out, f"gpuprof-*-{pid}-*-capture{suffix}"))
    c.eq(f"{suffix} traces", len(traces), 1)
    if not traces:
        return
    if fmt == "json":
        sl = json_slices(c, traces[0], validator)
        where = lambda x: (x[4].get("_process") or "").split(" (")[0]  # noqa: E731
    else:
        tracks = {}
        sl = pftrace_slices(c, traces[0], proto, protoc, tracks_out=tracks)
        where = lambda x: tracks.get(x[0], "")  # noqa: E731
    ops = [(x[0], where(x), x[4].get("state")) for x in sl if x[0].startswith("NCCL comm")]
    c.eq("NCCL ops: (track, GPU, state)", sorted(ops, key=lambda o: o[0]),
         [("NCCL comm gpu0 rank 0/2", "GPU 0", None),
          (f"NCCL comm {second} rank 0/2", "GPU 1", state)])


def check_hang(c, pid, fmt, validator, proto, protoc, hashes):
    out = os.environ["GPUPROF_OUTPUT_DIR"]
    suffix = ".json" if fmt == "json" else ".pftrace"
    traces = glob.glob(os.path.join(out, f"gpuprof-*-{pid}-*-capture*{suffix}"))
    c.eq(f"{suffix} traces", len(traces), 2)
    got = []
    for t in traces:
        if fmt == "json":
            sl = json_slices(c, t, validator)
            meta = check_traces.load_json_events(t)["metadata"]
        elif not protoc:
            print("SKIP: protoc not found: the .pftrace cannot be checked")
            return
        else:
            sl, meta = pftrace_slices(c, t, proto, protoc, with_meta=True)
        got.append((int(meta.get("capture_start_ns", 0)), t, sl, meta))
    got.sort()
    for i, (_, t, sl, meta) in enumerate(got):
        check_hang_trace(c, sl, meta, os.path.basename(t), i == 0, hashes)


def nccl_profiles(pid):
    out = os.environ["GPUPROF_OUTPUT_DIR"]
    return sorted(glob.glob(os.path.join(out, f"gpuprof-*-{pid}-nccl-*.pb.gz")))


def check_pprof(c, case, pid):
    if case == "api":
        check_api_pprof(c, pid)
        return
    if case == "initall":
        check_initall_pprof(c, pid)
        return
    if case in ("ondemand", "span"):
        return  # check_ondemand, check_span
    if case == "hang":
        # The finished ops only: pending ones never reached a kernel.
        files = nccl_profiles(pid)
        c.eq("nccl profile files", len(files), 1)
        if files:
            prof = read_profile(files[0])
            c.eq("nccl: ops, bytes, time of the finished ops",
                 [sum(s["values"][i] for s in prof["samples"]) for i in range(3)],
                 [4, 2897152, 380002])
        return
    files = nccl_profiles(pid)
    want = PPROF[case]
    if want is None:
        c.eq("nccl profiles (no op reached a kernel)", files, [])
        return
    c.eq("nccl profile files", len(files), 1)
    if len(files) != 1:
        return
    prof = read_profile(files[0])
    c.eq("nccl: sample types", prof.get("types"), NCCL_TYPES)
    c.eq("nccl: default sample type", prof.get("default"), "nccl_time")
    c.eq("nccl: period type", prof.get("PeriodType"), "nccl_time nanoseconds")
    for s in prof["samples"]:
        c.eq(f"nccl: {s['functions'][:1]} gpu label", s["labels"].get("gpu"), "0")
    c.eq("nccl: values by stack and comm", by_chain(prof, "comm"), want)


def kernel_slices(slices):
    """{kernel name: (start, end, correlation)} of the stream tracks' kernel slices."""
    out = {}
    for track, name, s, e, args in slices:
        if name in KERNEL_NS:
            c_ = args.get("correlation")
            out[name] = (s, e, int(c_) if c_ is not None else None)
    return out


def check_slices(c, slices, what):
    kernels = kernel_slices(slices)
    for k, ns in KERNEL_NS.items():
        got = kernels.get(k)
        c.true(f"{what}: kernel {k} in the trace", got is not None)
        if got:
            c.eq(f"{what}: {k} duration", got[1] - got[0], ns)
    got = [(t, n, s, e, a) for t, n, s, e, a in slices if t.startswith("NCCL comm")]
    c.eq(f"{what}: NCCL slices (track, name)", [(g[0], g[1]) for g in got],
         [(w[0], w[1]) for w in SLICES])
    for g, w in zip(got, SLICES):
        track, name, kernel, off, dur, args = w
        ks, ke, kcorr = kernels.get(kernel, (None, None, None))
        c.eq(f"{what}: {name} on {track}: interval", (g[2], g[3]),
             (ks + off, ks + off + dur) if ks is not None else None)
        want = dict(args, correlation=kcorr, stream=None)
        got_args = {k: g[4].get(k) for k in want}
        c.true(f"{what}: {name}: stream argument {got_args['stream']}",
               got_args["stream"] is not None)
        got_args["stream"] = None
        c.eq(f"{what}: {name} on {track}: arguments", got_args, want)
        for absent in ("root", "peer", "seq", "algo", "proto", "group_ops", "kernel_ns"):
            if absent not in args:
                c.true(f"{what}: {name}: no {absent} argument", absent not in g[4])


def check_a2a_slices(c, slices, what):
    """130 sibling slices that tile the SendRecv kernel in NCCL's order, each its share."""
    kernels = kernel_slices(slices)
    ks, ke, kcorr = kernels.get(K_SENDRECV, (None, None, None))
    c.eq(f"{what}: SendRecv kernel duration", (ke - ks) if ks is not None else None, A2A_NS)
    got = [(t, n, s, e, a) for t, n, s, e, a in slices if t.startswith("NCCL comm")]
    n = 2 * A2A_PEERS
    c.eq(f"{what}: NCCL slices (track, name)", [(g[0], g[1]) for g in got],
         [(TP_TRACK, "Recv" if i % 2 else "Send") for i in range(n)])
    if ks is None:
        return
    at = ks
    for i, g in enumerate(got):
        share = A2A_NS // n + (1 if i < A2A_NS % n else 0)
        c.eq(f"{what}: op {i} interval", (g[2], g[3]), (at, at + share))
        at += share
        c.eq(f"{what}: op {i} peer, group_ops, kernel_ns, correlation",
             [g[4].get(k) for k in ("peer", "group_ops", "kernel_ns", "correlation")],
             [1 + i // 2, n, A2A_NS, kcorr])
    c.eq(f"{what}: the last op ends with the kernel", at, ke)


def json_slices(c, path, validator):
    r = subprocess.run([sys.executable, validator, path], capture_output=True, text=True)
    c.eq(f"validate_trace {os.path.basename(path)}: exit status ({r.stdout}{r.stderr})",
         r.returncode, 0)
    trace = check_traces.load_json_events(path)
    events = trace["traceEvents"]
    base = int(trace["metadata"]["base_time_ns"])
    tname = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    pname = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    out = []
    for e in events:
        if e["ph"] != "X":
            continue
        s = base + check_traces.ns_of(e["ts"])
        args = {k: (int(v) if not isinstance(v, str) and k != "bandwidth_gbps" else v)
                for k, v in e.get("args", {}).items() if not isinstance(v, list)}
        args["_process"] = pname.get(e["pid"])
        out.append((tname.get((e["pid"], e["tid"]), "?"), e["name"], s,
                    s + check_traces.ns_of(e["dur"]), args))
        if e.get("cat") == "nccl":
            c.true(f"{path}: NCCL slice {e['name']} in a GPU process", e["pid"] != os.getpid())
    return out


def pftrace_slices(c, path, proto, protoc, with_meta=False, tracks_out=None):
    """tracks_out, if given, gets each slice track's name -> its parent's (the GPU's) name, up to
    its first " (" (the device's model)."""
    trace = check_traces.decode_pftrace(path, proto, protoc)
    c.eq(f"{path}: decode", check_traces.failures, [])
    if trace is None:
        return ([], {}) if with_meta else []
    tracks, slices, counters, instants, open_ = check_traces.rebuild(trace, path)
    meta = {}
    for i in instants:
        meta.update({k: str(v).strip('"') for k, v in i.get("args", {}).items()})
    c.eq(f"{path}: importer rules", check_traces.failures, [])
    c.true(f"{path}: slices left open", not any(open_.values()))
    out = []
    for uuid, lst in slices.items():
        d = tracks[uuid]
        tn = check_traces.one(one_thread(d), "thread_name") if "thread" in d else \
            check_traces.one(d, "name")
        if tracks_out is not None:
            parent = tracks.get(check_traces.one(d, "parent_uuid"), {})
            pn = check_traces.one(check_traces.one(parent, "process", {}), "process_name") \
                if "process" in parent else check_traces.one(parent, "name", "")
            tracks_out[tn] = (pn or "").split(" (")[0]
        for name, s, e, b in lst:
            args = {}
            for k, v in b["args"].items():
                if k in ("comm", "datatype", "algo", "proto"):
                    args[k] = str(v).strip('"')
                    continue
                try:
                    args[k] = int(v)
                except (TypeError, ValueError):
                    args[k] = str(v).strip('"')
            args.setdefault("correlation", b.get("corr"))
            out.append((tn, name, s, e, args))
    out.sort(key=lambda x: (x[2], x[0]))
    return (out, meta) if with_meta else out


def one_thread(d):
    return check_traces.one(d, "thread")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True, choices=sorted(SUMMARY))  # noqa
    ap.add_argument("--format", choices=("json", "perfetto"))
    ap.add_argument("--validator")
    ap.add_argument("--proto", default=os.path.join(HERE, "..", "..", "export", "proto",
                                                    "perfetto_trace.proto"))
    ap.add_argument("--protoc", default=shutil.which("protoc"))
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    c = Check()
    out = os.environ["GPUPROF_OUTPUT_DIR"]
    shutil.rmtree(out, ignore_errors=True)
    if os.path.exists(os.environ["GPUPROF_SUMMARY_FILE"]):
        os.unlink(os.environ["GPUPROF_SUMMARY_FILE"])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout, proc.stderr = proc.communicate(timeout=120)
    sys.stderr.write(proc.stderr)
    c.eq("exit status", proc.returncode, 0)
    api = a.case in ("api", "initall", "ondemand", "span", "hang", "hang_abort", "hang_dev",
                     "hang_idle")
    done = "nccl_api_e2e: done" if api else f"nccl_plugin_sim {a.case}: done"
    c.true(f"the program finished ({proc.stdout!r})", done in proc.stdout)
    if not api:
        c.true(f"activation mask: {MASK[a.case]} in {proc.stdout!r}", MASK[a.case] in proc.stdout)
    if a.case == "full":
        c.true("tp re-initialised keeps its entry", "re-init: same entry" in proc.stdout)
    if a.case == "noinject":
        lines = proc.stderr.splitlines()
        c.eq("stderr: one line", len(lines), 1)
        c.true(f"stderr names CUDA_INJECTION64_PATH: {lines}",
               lines and "NCCL_PROFILER_PLUGIN" in lines[0] and
               "CUDA_INJECTION64_PATH" in lines[0])
        c.true("no summary", not os.path.exists(os.environ["GPUPROF_SUMMARY_FILE"]))
        c.eq("no output files", glob.glob(os.path.join(out, "*")), [])
        return c.exit_status("check_nccl noinject")
    if not a.case.startswith("hang"):
        c.true(f"nothing on stderr: {proc.stderr!r}", proc.stderr == "")
    else:
        c.eq("no warnings", [ln for ln in proc.stderr.splitlines() if "warn" in ln.lower()], [])
    with open(os.environ["GPUPROF_SUMMARY_FILE"]) as f:
        got = json.load(f).get("nccl")
    if a.case == "hang_abort":
        got = dict(got or {})
        pending = got.pop("pending", None) or []
        c.eq("summary nccl (but pending)", got, SUMMARY["hang_abort"])
        c.eq("summary nccl.pending after hang0's abort: (comm_name, func, seq, state)",
             [(p.get("comm_name"), p.get("func"), p.get("seq"), p.get("state"))
              for p in pending], [("hang1", "AllReduce", None, "not launched")])
        return c.exit_status("check_nccl hang_abort")
    if a.case in ("hang_dev", "hang_idle"):
        check_hang_dev(c, proc.pid, got, a.format, a.validator, a.proto, a.protoc, a.case)
        return c.exit_status(f"check_nccl {a.case} {a.format}")
    if a.case == "hang":
        hashes = check_hang_summary(c, got, proc.stderr)
        check_pprof(c, a.case, proc.pid)
        if a.format:
            check_hang(c, proc.pid, a.format, a.validator, a.proto, a.protoc, hashes)
        return c.exit_status(f"check_nccl hang {a.format or ''}")
    if got is not None:
        # Ops still pending at exit (PENDING_AT_EXIT).
        n = PENDING_AT_EXIT.get(a.case, 0)
        pend = got.pop("pending", None)
        c.eq("summary nccl: ops_pending, pending listed",
             (got.pop("ops_pending", None), len(pend) if pend is not None else None),
             (n, min(n, 16)))
    if a.case == "api":
        got = {k: v for k, v in (got or {}).items() if k in SUMMARY["api"]}
    c.eq("summary nccl", got, SUMMARY[a.case])
    check_pprof(c, a.case, proc.pid)
    if a.case == "ondemand":
        check_ondemand(c, proc.pid, a.validator)
    elif a.case == "span":
        check_span(c, proc.pid, a.validator)
    elif a.format:
        suffix = ".json" if a.format == "json" else ".pftrace"
        traces = glob.glob(os.path.join(out, f"gpuprof-*-{proc.pid}-*-capture{suffix}"))
        c.eq(f"{suffix} traces", len(traces), 1)
        if traces:
            if a.format == "json":
                got = json_slices(c, traces[0], a.validator)
            elif not a.protoc:
                print("SKIP: protoc not found: the .pftrace cannot be checked")
                got = None
            else:
                got = pftrace_slices(c, traces[0], a.proto, a.protoc)
            if got is not None and a.case == "api":
                check_api_slices(c, got, os.path.basename(traces[0]))
            elif got is not None and a.case == "initall":
                check_initall_slices(c, got, os.path.basename(traces[0]))
            elif got is not None and a.case == "alltoall":
                check_a2a_slices(c, got, os.path.basename(traces[0]))
            elif got is not None:
                check_slices(c, got, os.path.basename(traces[0]))
    return c.exit_status(f"check_nccl {a.case} {a.format or ''}")


if __name__ == "__main__":
    sys.exit(main())

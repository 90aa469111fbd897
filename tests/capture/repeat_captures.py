#!/usr/bin/env python3
"""Repeated on-demand captures of one long-running process leave nothing behind.

Runs leak_workload (4 application threads, driven on stdin) under the shipped agent in
GPUPROF_MODE=ondemand on the simulated GPU and takes CAPTURES sequential captures, cycling
through: the control socket (json, json.gz, perfetto, GPU-only), the public API
(gpuprof_capture_start/stop, full and GPU-only), the `gpuprof` command (stopped early with
`gpuprof stop`, and ended by its deadline), and a capture that hits GPUPROF_TRACE_MAX_SIZE.
Between captures the workload launches kernels no capture may show.

After every capture, exactly:
  * the process has the same open file descriptors (number -> target) as before the first
    capture, and the same threads (tids);
  * the simulator's CUPTI has the same callbacks and activity kinds enabled as before the
    first capture (tests/fakegpu introspection), while during the capture it had more: kernel
    activity always, API callbacks only when the capture is not GPU-only;
  * the run directory holds only the agent's socket, and the output directory only the
    files the agents reported (trace first, then its profiles): no temporary or lock files;
  * the trace validates (validate_trace.py for JSON, the protobuf rebuild of check_traces for
    .pftrace) and holds each thread's kernel exactly as many times as the workload launched
    it inside the window, with as many cuLaunchKernel/cuStreamSynchronize slices and flows
    (none when GPU-only); a capture cut by the size cap is marked truncated and holds no
    kernel more often than launched; the window's gpu_time profile holds every kernel
    launched in it (size cap or not), each with its count and time.
At the end the workload exits 0 and its socket is removed.

Usage: repeat_captures.py --workload BIN --proto PROTO [--protoc P] --agent SO --gpuprof CLI
"""

import argparse
import collections
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_capture as cc  # noqa: E402

KERNELS = ["leak_kernel_%d" % i for i in range(4)]
CAPTURES = 45
KERNEL_NS = 3000  # leak_workload's kernel duration
SETTLE_S = 5  # hang guard for the agent's threads to close what a capture used
SANITIZER_BANNERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "WARNING: ThreadSanitizer")

# (how, format, gpu_only): cycled; every 15th capture is the size-cap one instead.
CYCLE = [
    ("socket", "json", 0),
    ("socket", "json.gz", 0),
    ("socket", "perfetto", 0),
    ("socket", "json", 1),
    ("api", None, 0),
    ("cli_stop", "json.gz", 0),
    ("socket", "perfetto", 1),
    ("api", None, 1),
    ("cli_deadline", "perfetto", 0),
]
SIZE_CAP_EVERY = 15
SIZE_CAP_LAUNCHES = 700  # per thread: ~2800 kernels with calls and flows, > 1 MiB of JSON


class Failed(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failed(msg)


class Workload:
    def __init__(self, args, env):
        self.p = subprocess.Popen([args.workload], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  bufsize=1)
        self.err = []
        self.t = threading.Thread(target=lambda: self.err.extend(self.p.stderr), daemon=True)
        self.t.start()
        check(self.p.stdout.readline() == "ready\n", "the workload did not start")

    def cmd(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        reply = self.p.stdout.readline()
        check(reply, "the workload died at %r" % line)
        return reply.rstrip("\n")

    def launch(self, n):
        check(self.cmd("launch %d" % n) == "launched %d" % n, "launch %d failed" % n)


def request(sock_path, word, fields=()):
    """One control request; the reply's header and fields (repeated keys as lists)."""
    msg = "GPUPROF/1 %s\n" % word + "".join("%s=%s\n" % kv for kv in fields) + "\n"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(sock_path)
    s.sendall(msg.encode())
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    lines = data.decode().split("\n")
    out = collections.defaultdict(list)
    for line in lines[1:]:
        if "=" in line:
            k, v = line.split("=", 1)
            out[k].append(v)
    return lines[0], out


def wait_idle(sock_path, cid):
    deadline = time.time() + 30
    while time.time() < deadline:
        head, st = request(sock_path, "status")
        check(head == "GPUPROF/1 ok", "status: %s" % head)
        if st["capture.state"] == ["idle"] and int(st["capture.id"][0]) >= cid:
            return st
        time.sleep(0.02)
    raise Failed("capture %d never finished" % cid)


def fds(pid):
    d = "/proc/%d/fd" % pid
    out = {}
    for n in os.listdir(d):
        try:
            out[int(n)] = os.readlink(os.path.join(d, n))
        except FileNotFoundError:
            pass
    return out


def tids(pid):
    return set(int(t) for t in os.listdir("/proc/%d/task" % pid))


def thread_names(pid, ts):
    names = {}
    for t in ts:
        try:
            with open("/proc/%d/task/%d/comm" % (pid, t)) as f:
                names[t] = f.read().strip()
        except OSError:
            names[t] = "?"
    return names


def settle(what, get, want):
    """Polls `get` until it equals `want` (the agent closes on its own threads); exact."""
    deadline = time.time() + SETTLE_S
    got = get()
    while got != want and time.time() < deadline:
        time.sleep(0.02)
        got = get()
    check(got == want, "%s: %r, baseline %r" % (what, got, want))


def kernels_and_calls(path, args):
    if path.endswith(".pftrace"):
        c = cc.content_pftrace(path, args.proto, args.protoc)
        check(c is not None, "%s does not decode" % path)
        truncated = any("truncated" in str(i) for i in c["instants"])
    else:
        s = cc.validate(path, want_truncated=False)
        check(s is not None, "%s does not load" % path)
        truncated = bool(s["truncated"])
        c = cc.content_json(path)
    gpu = collections.Counter()
    for (track, name, dur), n in c["gpu"].items():
        gpu[name] += n
    api = collections.Counter()
    for (track, name), n in c["api"].items():
        api[name] += n
    return gpu, api, sum(c["flows"].values()), truncated


def kernel_counts(path):
    gpu = collections.Counter()
    for (track, name, dur), k in cc.content_json(path)["gpu"].items():
        gpu[name] += k
    return gpu


def check_trace(args, path, n, gpu_only, capped, trigger):
    if capped and not path.endswith(".pftrace"):
        rep = cc.validate_trace.Report()
        s = cc.validate_trace.validate(path, rep)
        check(not rep.errors, "%s: validator: %s" % (path, rep.errors[:5]))
        meta = s["metadata"] or {}
        check(not s["truncated"] and "size cap" in str(meta.get("truncated")) and
              int(meta.get("discarded_events", 0)) > 0,
              "%s: not finished as cut by the size cap: %r" % (path, meta))
        gpu = kernel_counts(path)
        check(set(gpu) <= set(KERNELS) and all(v <= n for v in gpu.values()),
              "%s: kernels %r, launched %d each" % (path, dict(gpu), n))
        check(s["metadata"].get("capture_trigger") == trigger, "%s: trigger" % path)
        return
    before = len(cc.failures)
    gpu, api, flows, _ = kernels_and_calls(path, args)
    check(len(cc.failures) == before, "%s: %s" % (path, cc.failures[before:]))
    check(gpu == collections.Counter({k: n for k in KERNELS}),
          "%s: kernels %r, launched %d of each in the window" % (path, dict(gpu), n))
    want_api = collections.Counter() if gpu_only else collections.Counter(
        {"cuLaunchKernel": 4 * n, "cuStreamSynchronize": 4 * n})
    check(api == want_api, "%s: API slices %r, expected %r" % (path, dict(api), dict(want_api)))
    check(flows == (0 if gpu_only else 4 * n), "%s: %d flows, expected %d" %
          (path, flows, 0 if gpu_only else 4 * n))


def parse_state(line):
    m = re.match(r"state callbacks=(\S+) kinds=(\S*)$", line)
    check(m, "the simulator has no introspection: %r" % line)
    cb = {k: int(v) for k, v in (x.split(":") for x in m.group(1).split(","))}
    return cb, m.group(2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", required=True)
    ap.add_argument("--proto", required=True)
    ap.add_argument("--protoc", default="")
    ap.add_argument("--agent", required=True)
    ap.add_argument("--gpuprof", required=True)
    args = ap.parse_args()
    check(args.protoc, "protoc is needed to read .pftrace captures")

    work = os.environ["E2E_WORKDIR"]
    out = os.environ["GPUPROF_OUTPUT_DIR"]
    run_dir = os.environ["GPUPROF_RUN_DIR"]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(out)
    env = dict(os.environ)
    env.update({"GPUPROF_MODE": "ondemand", "GPUPROF_TRACE_MAX_SIZE": "1M",
                "GPUPROF_FLUSH_INTERVAL": "50ms", "GPUPROF_STACKS": "all",
                "LD_PRELOAD": args.agent})  # the API's weak symbols bind at start
    if "ASAN_OPTIONS" in env:  # the agent is preloaded before the sanitizer runtime
        env["ASAN_OPTIONS"] += ":verify_asan_link_order=0"

    w = Workload(args, env)
    pid = w.p.pid
    sock = os.path.join(run_dir, "gpuprof-%d.sock" % pid)
    deadline = time.time() + 30
    while not os.path.exists(sock):
        check(time.time() < deadline and w.p.poll() is None, "no control socket %s" % sock)
        time.sleep(0.02)
    cli_env = dict(os.environ)
    cli_env["GPUPROF_RUN_DIR"] = run_dir

    base_fds, base_tids = fds(pid), tids(pid)
    base_state = w.cmd("state")
    base_cb, base_kinds = parse_state(base_state)
    print("baseline: %d fds, threads %r\n  %s" %
          (len(base_fds), sorted(thread_names(pid, base_tids).values()), base_state))
    # The agent's name lock (.gpuprof-<host>-<pid>.lock, agent/util/files.c) lives as long as
    # the process: there before the first capture, removed at exit (checked below).
    base_out = set(os.path.join(out, f) for f in os.listdir(out))
    check(all(os.path.basename(f).startswith(".gpuprof-") and f.endswith(".lock")
              for f in base_out), "output dir before any capture: %r" % base_out)
    reported = set(base_out)
    kinds_done = collections.Counter()
    try:
        for i in range(CAPTURES):
            capped = (i + 1) % SIZE_CAP_EVERY == 0
            how, fmt, gpu_only = ("socket", "json", 0) if capped else CYCLE[i % len(CYCLE)]
            n = SIZE_CAP_LAUNCHES if capped else 1 + i % 5
            w.launch(2)  # before the window: in no capture
            files = None
            if how == "socket":
                fields = [("duration_ns", "30000000000"), ("gpu_only", str(gpu_only)),
                          ("format", fmt)]
                head, st = request(sock, "capture", fields)
                check(head == "GPUPROF/1 ok", "capture %d: %s %r" % (i, head, dict(st)))
                cid = int(st["capture.id"][0])
                during = w.cmd("state")
                w.launch(n)
                head, st = request(sock, "stop")
                check(head in ("GPUPROF/1 ok", "GPUPROF/1 error not-running"),
                      "stop %d: %s" % (i, head))
                st = wait_idle(sock, cid)
                files = st["capture.file"]
                trigger = "control"
            elif how == "api":
                check(w.cmd("start 30000 %d" % gpu_only) == "start 0", "API start %d" % i)
                during = w.cmd("state")
                w.launch(n)
                check(w.cmd("stop") == "stop 0", "API stop %d" % i)
                _, st = request(sock, "status")
                check(st["capture.state"] == ["idle"], "API capture %d still running" % i)
                files = st["capture.file"]
                trigger = "api"
            else:
                dur = "30s" if how == "cli_stop" else "1500ms"
                p = subprocess.Popen([args.gpuprof, "capture", "--pid", str(pid), "--duration",
                                      dur, "--format", fmt, "--output", out],
                                     env=cli_env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
                line = p.stderr.readline()
                check(re.search(r"capture #\d+ started", line), "gpuprof capture: %r" % line)
                during = w.cmd("state")
                w.launch(n)
                if how == "cli_stop":
                    r = subprocess.run([args.gpuprof, "stop", "--pid", str(pid)], env=cli_env,
                                       capture_output=True, text=True, timeout=60)
                    check(r.returncode == 0, "gpuprof stop: %d %s" % (r.returncode, r.stderr))
                o, e = p.communicate(timeout=60)
                check(p.returncode == 0, "gpuprof capture exited %d: %s" % (p.returncode, e))
                files = o.split()
                if how == "cli_stop":
                    check(r.stdout.split() == files, "stop printed %r, capture %r" %
                          (r.stdout.split(), files))
                trigger = "control"
            kinds_done[(how, fmt, gpu_only, capped)] += 1

            # CUPTI: the capture switched things on, and they are off again now.
            cb, kinds = parse_state(during)
            check(kinds != base_kinds, "capture %d enabled no activity kind: %s" % (i, during))
            if gpu_only:
                check(cb == base_cb, "GPU-only capture %d enabled callbacks: %s" % (i, during))
            else:
                check(cb["driver"] > base_cb["driver"],
                      "capture %d enabled no driver callbacks: %s" % (i, during))
            after = w.cmd("state")
            check(after == base_state, "capture %d left enabled: %s (baseline %s)" %
                  (i, after, base_state))

            # Files: the trace first, its gpu_time profile, nothing else new.
            check(files and os.path.dirname(files[0]) == out, "capture %d files %r" % (i, files))
            trace = files[0]
            stem = re.sub(r"\.(json\.gz|json|pftrace)$", "", trace)
            check(stem + "-gpu_time.pb.gz" in files, "capture %d: no gpu_time in %r" % (i, files))
            check(all(f.startswith(stem + "-") for f in files[1:]), "capture %d %r" % (i, files))
            if fmt:
                check(trace.endswith("." + ("pftrace" if fmt == "perfetto" else fmt)),
                      "capture %d: %s is not %s" % (i, trace, fmt))
            reported |= set(files)
            on_disk = set(os.path.join(out, f) for f in os.listdir(out))
            check(on_disk == reported, "output dir: extra %r, missing %r" %
                  (sorted(on_disk - reported), sorted(reported - on_disk)))
            check(os.listdir(run_dir) == [os.path.basename(sock)],
                  "run dir holds %r" % os.listdir(run_dir))
            check_trace(args, trace, n, gpu_only, capped, trigger)
            # The window's pprof: every kernel launched in it. The size cap ends the window
            # early (at the worker's next tick): then at least what the trace holds, at most
            # what was launched.
            before = len(cc.failures)
            got = cc.by_leaf(cc.read_capture_profile(stem + "-gpu_time.pb.gz", "gpu_time"))
            check(len(cc.failures) == before, "capture %d: %s" % (i, cc.failures[before:]))
            if capped:
                in_trace = kernel_counts(trace)
                check(sorted(got) == ["[gpu] " + k for k in KERNELS] and
                      all(in_trace[k] <= got["[gpu] " + k][0] <= n and
                          got["[gpu] " + k][1] == got["[gpu] " + k][0] * KERNEL_NS
                          for k in KERNELS),
                      "capture %d gpu_time %r, trace %r, launched %d" % (i, got, in_trace, n))
            else:
                want = {"[gpu] " + k: [n, n * KERNEL_NS] for k in KERNELS}
                check(got == want, "capture %d gpu_time %r, expected %r" % (i, got, want))

            settle("capture %d (%s %s%s): open fds" % (i, how, fmt, " gpu-only" * gpu_only),
                   lambda: fds(pid), base_fds)
            settle("capture %d (%s %s): threads" % (i, how, fmt),
                   lambda: thread_names(pid, tids(pid)), thread_names(pid, base_tids))
            print("capture %2d %-12s %-8s gpu_only=%d n=%3d%s: %s ok" %
                  (i, how, fmt or "(auto)", gpu_only, n, " size-cap" * capped,
                   os.path.basename(trace)))
        check(w.cmd("state") == base_state, "CUPTI state changed")
        check(len(fds(pid)) == len(base_fds) and tids(pid) == base_tids, "final fds/threads")
        print("kinds taken: %r" % dict(kinds_done))
    finally:
        try:
            w.p.stdin.write("quit\n")
            w.p.stdin.flush()
        except OSError:
            pass
        try:
            rest, _ = w.p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            w.p.kill()
            rest, _ = w.p.communicate()
        w.t.join(5)
        sys.stderr.write("".join(w.err))
    check(w.p.returncode == 0 and rest == "bye\n", "workload exited %d, printed %r" %
          (w.p.returncode, rest))
    check(not any(b in "".join(w.err) for b in SANITIZER_BANNERS), "a sanitizer reported")
    check(not os.path.exists(sock) and os.listdir(run_dir) == [],
          "run dir after exit: %r" % os.listdir(run_dir))
    left = set(os.path.join(out, f) for f in os.listdir(out))
    check(left == reported - base_out, "output dir after exit: extra %r" %
          sorted(left - (reported - base_out)))
    caps = sum(1 for line in w.err if "reached GPUPROF_TRACE_MAX_SIZE" in line)
    check(caps == CAPTURES // SIZE_CAP_EVERY, "%d size-cap warnings, expected %d" %
          (caps, CAPTURES // SIZE_CAP_EVERY))


if __name__ == "__main__":
    try:
        main()
    except Failed as e:
        print("FAIL: %s" % e, file=sys.stderr)
        sys.exit(1)
    if cc.failures:
        sys.exit(1)
    print("ok")

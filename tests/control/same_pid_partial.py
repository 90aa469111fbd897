#!/usr/bin/env python3
"""`--pid N` reaching several agents with that pid (each pid 1 in its own pid namespace, two
containers of one pod sharing a run directory) when only some of them can act.

- `gpuprof stop --pid 1` while only the first runs a capture (GPUPROF_CAPTURE_ON_START): that
  capture is stopped and its file printed, the idle one is reported on stderr and is no
  failure (as with --all): exit 0.
- `gpuprof capture --pid 1` while the second agent cannot be asked (its socket answered by
  something that is not an agent): the first is still captured and its trace printed, the
  failure reported on stderr, exit 1 (as with --all).

Skips (exit 77) where `unshare --pid` is not permitted."""

import os
import socket as socketmod
import subprocess
import sys
import threading
import time

from same_pid import stop_workloads

SKIP = 77


def wait_for(pred, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def start(workload, work, i, extra_env):
    env = dict(os.environ, GPUPROF_MODE="ondemand", GPUPROF_TRACE_FORMAT="json", **extra_env)
    env.pop("GPUPROF_SUMMARY_FILE", None)
    stop = os.path.join(work, f"stop{i}")
    if os.path.exists(stop):
        os.unlink(stop)
    p = subprocess.Popen(["unshare", "--fork", "--pid", "--mount-proc", workload, stop, "30"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p, stop


def main():
    workload, gpuprof = sys.argv[1], sys.argv[2]
    probe = subprocess.run(["unshare", "--fork", "--pid", "--mount-proc", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"SKIP: unshare --pid is not permitted here: {probe.stderr.strip()}")
        return SKIP
    work = os.environ["E2E_WORKDIR"]
    run_dir = os.environ["GPUPROF_RUN_DIR"]
    out = os.environ["GPUPROF_OUTPUT_DIR"]
    os.makedirs(out, exist_ok=True)
    failures = []
    procs = []
    socks = [os.path.join(run_dir, "gpuprof-1.sock"), os.path.join(run_dir, "gpuprof-1.2.sock")]
    # The first captures from its start for 30 s; the second is idle.
    for i, extra in enumerate(({"GPUPROF_CAPTURE_ON_START": "30s"}, {})):
        procs.append(start(workload, work, i, extra))
        if not wait_for(lambda: os.path.exists(socks[i])):
            failures.append(f"no socket {socks[i]}")
    if not failures:
        time.sleep(0.3)
        r = subprocess.run([gpuprof, "stop", "--pid", "1"], capture_output=True, text=True,
                           timeout=60)
        sys.stderr.write(r.stderr)
        if r.returncode != 0:
            failures.append(f"gpuprof stop --pid 1 (one capturing, one idle) exited "
                            f"{r.returncode}, expected 0")
        traces = [f for f in r.stdout.split() if f.endswith("-capture.json")]
        if len(traces) != 1 or not os.path.exists(traces[0]):
            failures.append(f"gpuprof stop --pid 1 printed {r.stdout!r}: expected one trace")
        if "pid 1: not-running" not in r.stderr:
            failures.append("the idle agent is not reported on stderr")

        # The second agent's socket cannot be asked: another listener (ours, so trusted)
        # answers there with something that is not a gpuprof reply.
        os.rename(socks[1], socks[1] + ".real")
        blocker = socketmod.socket(socketmod.AF_UNIX, socketmod.SOCK_STREAM)
        blocker.bind(socks[1])
        blocker.listen(8)
        done = threading.Event()

        def serve():
            blocker.settimeout(0.1)
            while not done.is_set():
                try:
                    c, _ = blocker.accept()
                except socketmod.timeout:
                    continue
                except OSError:
                    return
                try:
                    c.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")
                finally:
                    c.close()

        t = threading.Thread(target=serve)
        t.start()
        try:
            r = subprocess.run([gpuprof, "capture", "--pid", "1", "--duration", "200ms",
                                "--format", "json", "--output", out],
                               capture_output=True, text=True, timeout=60)
            sys.stderr.write(r.stderr)
        finally:
            done.set()
            t.join()
            blocker.close()
            os.unlink(socks[1])
            os.rename(socks[1] + ".real", socks[1])
        if r.returncode != 1:
            failures.append(f"gpuprof capture --pid 1 (one agent unreadable) exited "
                            f"{r.returncode}, expected 1")
        traces = [f for f in r.stdout.split() if f.endswith(".json")]
        if len(traces) != 1 or not os.path.exists(traces[0]):
            failures.append(f"gpuprof capture --pid 1 printed {r.stdout!r}: expected the "
                            f"reachable agent's trace")
        if r.stderr.count("gpuprof capture: pid 1: ") != 1:
            failures.append("the unreadable agent is not reported once on stderr")
    stop_workloads(procs, failures)
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    if failures:
        return 1
    print("same_pid_partial: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

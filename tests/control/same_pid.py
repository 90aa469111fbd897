#!/usr/bin/env python3
"""Two workloads with the same pid (each pid 1 in its own pid namespace, as two containers of
one pod) sharing one output and one run directory: each gets its own file names
(agent/util/files.h files_claim_name) and its own control socket (gpuprof-1.sock,
gpuprof-1.2.sock), nothing is overwritten, and lock files and sockets go away at exit.
Skips (exit 77) where `unshare --pid` is not permitted."""

import glob
import json
import os
import socket
import subprocess
import sys
import time

SKIP = 77


def wait_for(pred, what, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    print(f"FAIL: timed out waiting for {what}", file=sys.stderr)
    return False


def main():
    workload = sys.argv[1]
    gpuprof = sys.argv[2] if len(sys.argv) > 2 else None
    probe = subprocess.run(["unshare", "--fork", "--pid", "--mount-proc", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"SKIP: unshare --pid is not permitted here: {probe.stderr.strip()}")
        return SKIP
    out = os.environ["GPUPROF_OUTPUT_DIR"]
    os.makedirs(out, exist_ok=True)
    for f in glob.glob(os.path.join(out, "*")) + glob.glob(os.path.join(out, ".gpuprof-*")):
        os.unlink(f)
    env = dict(os.environ)
    env.pop("GPUPROF_SUMMARY_FILE", None)  # summaries under their own names in the directory
    env["GPUPROF_STACK_SAMPLE_EVERY"] = "1"
    host = socket.gethostname().replace("/", "_")
    work = os.environ["E2E_WORKDIR"]
    names = [f"{host}-1", f"{host}-1.2"]
    procs, failures = [], []
    for i, name in enumerate(names):
        stop = os.path.join(work, f"stop{i}")
        if os.path.exists(stop):
            os.unlink(stop)
        procs.append((subprocess.Popen(
            ["unshare", "--fork", "--pid", "--mount-proc", workload, stop, "30"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), stop))
        lock = os.path.join(out, f".gpuprof-{name}.lock")
        if not wait_for(lambda: os.path.exists(lock), f"workload {i}'s claim {lock}"):
            failures.append(f"no lock file {lock}")
    time.sleep(0.3)  # both run side by side, launching
    # Both serve a control socket in the shared run directory, each under its own name.
    run_dir = os.environ["GPUPROF_RUN_DIR"]
    for i, sock_name in enumerate(("gpuprof-1.sock", "gpuprof-1.2.sock")):
        path = os.path.join(run_dir, sock_name)
        if not wait_for(lambda: os.path.exists(path), f"socket {path}"):
            failures.append(f"no socket {path}")
            continue
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(5)
        try:
            c.connect(path)
            c.sendall(b"GPUPROF/1 status\n\n")
            reply = b""
            while True:
                part = c.recv(65536)
                if not part:
                    break
                reply += part
        finally:
            c.close()
        # Each socket is its own process's (started in order): its command names its stop file.
        if (not reply.startswith(b"GPUPROF/1 ok\n") or b"\npid=1\n" not in reply
                or f"stop{i} 30".encode() not in reply):
            failures.append(f"{sock_name}: status reply {reply[:200]!r}")
    # `gpuprof capture --pid 1` reaches both (docs/CONTROL.md), each writing under its own name.
    if gpuprof and not failures:
        r = subprocess.run([gpuprof, "capture", "--pid", "1", "--duration", "300ms", "--format",
                            "json"], capture_output=True, text=True, timeout=60)
        sys.stderr.write(r.stderr)
        traces = sorted(os.path.basename(f) for f in r.stdout.split()
                        if f.endswith("-capture.json"))
        if r.returncode != 0:
            failures.append(f"gpuprof capture --pid 1 exited {r.returncode}")
        if [t.split("-capture")[0].rsplit("-", 1)[0] for t in traces] != \
                [f"gpuprof-{n}" for n in names]:
            failures.append(f"gpuprof capture --pid 1: traces {traces}, expected one per name "
                            f"{names}")
        for t in traces:
            if not os.path.exists(os.path.join(out, t)):
                failures.append(f"trace {t} is not in {out}")
    for p, stop in procs:
        open(stop, "w").close()
    for i, (p, _) in enumerate(procs):
        o, e = p.communicate(timeout=60)
        sys.stderr.write(e)
        if p.returncode != 0:
            failures.append(f"workload {i} exited {p.returncode}")
    for name in names:
        summary = os.path.join(out, f"gpuprof-{name}-summary.json")
        if not os.path.exists(summary):
            failures.append(f"no summary {summary}")
            continue
        with open(summary) as f:
            s = json.load(f)
        if s.get("pid") != 1:
            failures.append(f"{summary}: pid {s.get('pid')}, expected 1 (its own namespace)")
        if not s.get("kernels", {}).get("count"):
            failures.append(f"{summary}: no kernels")
        if len(glob.glob(os.path.join(out, f"gpuprof-{name}-gpu_time-*.pb.gz"))) != 1:
            failures.append(f"not one gpu_time profile named gpuprof-{name}-gpu_time-*")
    left = glob.glob(os.path.join(out, ".gpuprof-*.lock"))
    left += glob.glob(os.path.join(os.environ["GPUPROF_RUN_DIR"], "*gpuprof-*"))
    if left:
        failures.append(f"lock files left after exit: {left}")
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    if failures:
        return 1
    print(f"same_pid: ok ({', '.join(names)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Two workloads with the same pid (each pid 1 in its own pid namespace, as two containers of
one pod) sharing one output and one run directory: each gets its own file names
(agent/util/files.h files_claim_name) and its own control socket (gpuprof-1.sock,
gpuprof-1.2.sock), nothing is overwritten, and lock files and sockets go away at exit.

With --shared-output: three such workloads, each with its own GPUPROF_OUTPUT_DIR (so all three
are <host>-1 there), captured with `gpuprof capture --all --output DIR` into one directory, two
as .json and one as .json.gz: the three traces (and their pprof files, which share the stem
whatever the format) get distinct stems (…-capture, …-capture-1, …-capture-1.2), each trace
valid and holding its own workload, each file listed once, no other file in DIR, and the size
`gpuprof capture` prints for each is its file's size.

Skips (exit 77) where `unshare --pid` is not permitted."""

import glob
import json
import os
import re
import shutil
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


def stop_workloads(procs, failures):
    """Ends each (process, stop file) workload through its stop file; a non-zero exit fails."""
    for p, stop in procs:
        open(stop, "w").close()
    for i, (p, _) in enumerate(procs):
        o, e = p.communicate(timeout=60)
        sys.stderr.write(e)
        if p.returncode != 0:
            failures.append(f"workload {i} exited {p.returncode}")


def format_bytes(b):
    """export/format.h format_bytes: what `gpuprof capture` prints for a size."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    v, u = float(b), 0
    while v >= 1024.0 and u < 4:
        v /= 1024.0
        u += 1
    return f"{b} B" if u == 0 else "%.1f %s" % (v, units[u])


def shared_output(workload, gpuprof):
    work = os.environ["E2E_WORKDIR"]
    run_dir = os.environ["GPUPROF_RUN_DIR"]
    shared = os.path.join(work, "shared")
    validator = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trace",
                             "validate_trace.py")
    formats = ["json", "json", "json.gz"]
    for d in [shared] + [os.path.join(work, f"out{i}") for i in range(len(formats))]:
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    procs, failures = [], []
    for i, fmt in enumerate(formats):
        env = dict(os.environ, GPUPROF_OUTPUT_DIR=os.path.join(work, f"out{i}"),
                   GPUPROF_TRACE_FORMAT=fmt, GPUPROF_MODE="ondemand")
        env.pop("GPUPROF_SUMMARY_FILE", None)
        stop = os.path.join(work, f"stop{i}")
        if os.path.exists(stop):
            os.unlink(stop)
        procs.append((subprocess.Popen(
            ["unshare", "--fork", "--pid", "--mount-proc", workload, stop, "30"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), stop))
        sock = os.path.join(run_dir, "gpuprof-1.sock" if i == 0 else f"gpuprof-1.{i + 1}.sock")
        if not wait_for(lambda: os.path.exists(sock), f"workload {i}'s socket {sock}"):
            failures.append(f"no socket {sock}")
    if not failures:
        r = subprocess.run([gpuprof, "capture", "--all", "--duration", "500ms", "--output",
                            shared], capture_output=True, text=True, timeout=60)
        sys.stderr.write(r.stderr)
        if r.returncode != 0:
            failures.append(f"gpuprof capture --all exited {r.returncode}")
        listed = r.stdout.split()
        if len(set(listed)) != len(listed):
            failures.append(f"files listed more than once: {listed}")
        traces = sorted(f for f in listed if not f.endswith(".pb.gz"))
        stems = [re.sub(r"\.(json\.gz|json)$", "", t) for t in traces]
        stamps = {re.sub(r"-capture.*$", "", os.path.basename(st)) for st in stems}
        if len(traces) != 3 or len(set(stems)) != 3:
            failures.append(f"traces {traces}: expected three with distinct stems")
        elif len(stamps) == 1:
            # All in one second (else each has the plain name): one of each form.
            base = stamps.pop()
            want = {f"{base}-capture", f"{base}-capture-1", f"{base}-capture-1.2"}
            if {os.path.basename(st) for st in stems} != want:
                failures.append(f"stems {stems}, expected {sorted(want)}")
        if sorted(t.endswith(".json.gz") for t in traces) != [False, False, True]:
            failures.append(f"traces {traces}: expected two .json and one .json.gz")
        # Each stem's pprof (these workloads launch kernels only: gpu_time), listed once.
        want_files = sorted(traces + [st + "-gpu_time.pb.gz" for st in stems])
        if sorted(listed) != want_files:
            failures.append(f"listed {sorted(listed)}, expected {want_files}")
        on_disk = sorted(os.path.join(shared, f) for f in os.listdir(shared))
        if on_disk != want_files:
            failures.append(f"{shared} holds {on_disk}, expected {want_files}")
        # Each trace is whole and its own workload's (its stop file names it).
        owners = []
        for t in traces:
            exp = {"truncated": False, "metadata": {"pid": 1, "capture_trigger": "control"},
                   "slices": [{"name": f"ctl_kernel_{k}", "min_count": 1} for k in range(4)]}
            exp_file = os.path.join(work, os.path.basename(t) + ".expect.json")
            with open(exp_file, "w") as f:
                json.dump(exp, f)
            v = subprocess.run([sys.executable, validator, t, "--expect-json", exp_file,
                                "--summary"], capture_output=True, text=True)
            if v.returncode != 0:
                failures.append(f"{t} does not validate: {v.stdout[-1000:]} {v.stderr[-1000:]}")
                continue
            meta = json.loads(v.stdout).get("metadata", {})
            owners += [i for i in range(len(formats))
                       if f"stop{i} 30" in str(meta.get("command_line", ""))]
        if sorted(owners) != list(range(len(formats))):
            failures.append(f"traces belong to workloads {owners}, expected one each")
        # The size printed for each capture is its trace's size on disk.
        printed = sorted(re.findall(r"capture #1: \d+ events, ([0-9.]+ [KMGT]?i?B), ", r.stderr))
        want_sizes = sorted(format_bytes(os.path.getsize(t)) for t in traces)
        if printed != want_sizes:
            failures.append(f"printed sizes {printed}, files {want_sizes}")
    stop_workloads(procs, failures)
    left = [f for f in os.listdir(shared) if f.startswith(".")]
    if left:
        failures.append(f"lock files left in {shared}: {left}")
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    if failures:
        return 1
    print("same_pid --shared-output: ok")
    return 0


def main():
    workload = sys.argv[1]
    gpuprof = sys.argv[2] if len(sys.argv) > 2 else None
    probe = subprocess.run(["unshare", "--fork", "--pid", "--mount-proc", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"SKIP: unshare --pid is not permitted here: {probe.stderr.strip()}")
        return SKIP
    if len(sys.argv) > 3 and sys.argv[3] == "--shared-output":
        return shared_output(workload, gpuprof)
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
    stop_workloads(procs, failures)
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
        # One window profile, or two when the run crossed a window boundary (windows are
        # aligned to the wall clock): under its own name either way.
        if not 1 <= len(glob.glob(os.path.join(out, f"gpuprof-{name}-gpu_time-*.pb.gz"))) <= 2:
            failures.append(f"not one or two gpu_time profiles named gpuprof-{name}-gpu_time-*")
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

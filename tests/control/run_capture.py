#!/usr/bin/env python3
"""End-to-end test of the control socket through the gpuprof command.

Usage (from ctest; tests/lib/GpuprofTest.cmake sets the agent's environment):
    run_capture.py --scenario pid|all|busy --gpuprof BIN --workload BIN --validator PY

Starts multi-threaded workloads (tests/control/workload.c) under the agent in ondemand mode
with their own GPUPROF_RUN_DIR, then drives them with `gpuprof list`, `gpuprof capture` and
`gpuprof stop`, and checks what came back against what the programs did:

  pid   list shows the process (pid, mode, agent state, GPU 0, command) and drops a stale
        socket of a dead process (removing its file); `capture --pid` prints one trace file
        that validate_trace.py accepts and that holds every thread's kernel and its
        cuLaunchKernel calls; list then shows the capture as finished.
  all   two processes: `capture --all` writes one file per process, each with its own pid and
        all four kernels, and the two capture windows overlap.
  busy  a second capture while one runs exits 3 (busy) naming the running one; `stop` ends
        the first early, which then prints its file; `capture` with several agents and no
        --pid/--all is a usage error (2); an empty run dir exits 4 naming GPUPROF_RUN_DIR.
  slowstop  GPUPROF_FLUSH_INTERVAL=8s: `stop` still succeeds and prints the file, which takes
        up to two intervals to finish, and the agent answers `list` meanwhile.
  format  without --format (and GPUPROF_TRACE_FORMAT unset) the format follows the expected
        size: a first 1 s capture (no rate known yet) writes .json.gz; a 1 h capture of the
        same workload (thousands of kernels per second: far more JSON than the UI loads) writes
        .pftrace; with --format json the same 1 h capture writes .json.

Besides its trace, each capture prints the pprof of its window (<stem>-gpu_time.pb.gz: these
workloads launch kernels only), under the trace's name stem.

Every scenario ends the workloads, checks their exit status and stdout, and that each socket
file was removed at exit.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

KERNELS = ["ctl_kernel_%d" % i for i in range(4)]
WAIT_S = 30  # hang guards, not performance assertions
SANITIZER_BANNERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "WARNING: ThreadSanitizer")


class Failed(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failed(msg)


class Workloads:
    def __init__(self, args, n, env_extra=None):
        self.args = args
        self.work = os.environ.get("E2E_WORKDIR") or "/tmp/gpuprof-control-e2e"
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)
        self.run_dir = os.path.join(self.work, "run")
        self.traces = os.path.join(self.work, "traces")
        self.stop_file = os.path.join(self.work, "stop")
        self.procs = []
        for i in range(n):
            env = dict(os.environ)
            env.pop("GPUPROF_TRACE_FORMAT", None)
            env.update({
                "GPUPROF_MODE": "ondemand",
                "GPUPROF_RUN_DIR": self.run_dir,
                "GPUPROF_OUTPUT_DIR": os.path.join(self.work, "output-%d" % i),
                "GPUPROF_SUMMARY_FILE": os.path.join(self.work, "summary-%d.json" % i),
            })
            env.update(env_extra or {})
            p = subprocess.Popen([args.workload, self.stop_file, str(WAIT_S * 3)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.procs.append(p)
        deadline = time.time() + WAIT_S
        for p in self.procs:
            while not os.path.exists(self.sock(p.pid)):
                if p.poll() is not None or time.time() > deadline:
                    self.finish(expect_ok=False)
                    raise Failed("pid %d never created %s" % (p.pid, self.sock(p.pid)))
                time.sleep(0.05)

    def sock(self, pid):
        return os.path.join(self.run_dir, "gpuprof-%d.sock" % pid)

    def pids(self):
        return [p.pid for p in self.procs]

    def gpuprof(self, *argv, expect=0, timeout=WAIT_S * 2):
        cmd = [self.args.gpuprof] + list(argv)
        env = dict(os.environ)
        env["GPUPROF_RUN_DIR"] = self.run_dir
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        print("$ %s  -> %d\n%s%s" % (" ".join(cmd), r.returncode, r.stdout, r.stderr))
        check(not any(b in r.stderr for b in SANITIZER_BANNERS),
              "a sanitizer reported in gpuprof %s" % argv[0])
        if expect is not None:
            check(r.returncode == expect,
                  "%s exited %d, expected %d" % (" ".join(argv), r.returncode, expect))
        return r

    def finish(self, expect_ok=True):
        with open(self.stop_file, "w"):
            pass
        for p in self.procs:
            try:
                out, err = p.communicate(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
            sys.stderr.write(err)
            if not expect_ok:
                continue
            check(p.returncode == 0, "workload %d exited %d" % (p.pid, p.returncode))
            check(out == "workload: 4 threads launched kernels\n",
                  "workload %d printed %r" % (p.pid, out))
            check(not any(b in err for b in SANITIZER_BANNERS),
                  "a sanitizer reported in workload %d" % p.pid)
            check(not os.path.exists(self.sock(p.pid)),
                  "the socket of %d was not removed at exit" % p.pid)


def list_rows(r):
    """pid -> the row's columns (PID AGENT MODE CAPTURE... GPUS COMMAND)."""
    rows = {}
    lines = r.stdout.splitlines()
    check(lines and lines[0].split()[:3] == ["PID", "AGENT", "MODE"], "list has no header")
    for line in lines[1:]:
        rows[int(line.split()[0])] = line
    return rows


def validate(args, path, pid):
    """Runs validate_trace.py with the program's expectations; returns the trace summary."""
    exp = {
        "truncated": False,
        "metadata": {"pid": pid, "capture_trigger": "control"},
        "metadata_keys": ["capture_start_ns", "capture_end_ns", "capture_id"],
        "slices": [{"name": k, "min_count": 1} for k in KERNELS]
                  + [{"name": "cuLaunchKernel", "min_count": 4}],
    }
    exp_file = path + ".expect.json"
    with open(exp_file, "w") as f:
        json.dump(exp, f)
    r = subprocess.run([sys.executable, args.validator, path, "--expect-json", exp_file,
                        "--summary"], capture_output=True, text=True)
    print(r.stderr)
    check(r.returncode == 0, "%s does not validate: %s" % (path, r.stdout[-2000:]))
    return json.loads(r.stdout)


def split_files(files):
    """The printed files: the traces, after checking that each is followed by its profile."""
    traces = [f for f in files if not f.endswith(".pb.gz")]
    for t in traces:
        stem = re.sub(r"\.(json\.gz|json|pftrace)$", "", t)
        check(stem + "-gpu_time.pb.gz" in files, "%s has no gpu_time profile in %r" % (t, files))
    check(len(files) == 2 * len(traces), "files other than traces and gpu_time: %r" % files)
    return traces


def capture_files(r, traces):
    files = r.stdout.splitlines()
    for f in files:
        check(f.startswith(traces + "/"), "%s is not in --output %s" % (f, traces))
        check(os.path.getsize(f) > 0, "%s is empty" % f)
    return split_files(files)


def stale_socket(run_dir):
    """A socket file nobody listens on, named after a process that has exited."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    path = os.path.join(run_dir, "gpuprof-%d.sock" % dead.pid)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()
    return dead.pid, path


def scenario_pid(args):
    w = Workloads(args, 1)
    pid = w.pids()[0]
    try:
        dead, stale = stale_socket(w.run_dir)
        r = w.gpuprof("list")
        rows = list_rows(r)
        check(pid in rows, "list does not show pid %d" % pid)
        check(dead not in rows, "list shows the stale socket of pid %d" % dead)
        check(not os.path.exists(stale), "list did not remove the stale %s" % stale)
        cols = rows[pid].split()
        check(cols[1:4] == ["active", "ondemand", "idle"], "list row: %r" % rows[pid])
        check(cols[4] == "0", "list shows GPUs %r, expected 0" % cols[4])
        check(args.workload in rows[pid], "list row lacks the command: %r" % rows[pid])

        r = w.gpuprof("capture", "--pid", str(pid), "--duration", "1500ms", "--format", "json",
                      "--output", w.traces)
        files = capture_files(r, w.traces)
        check(len(files) == 1, "capture printed %d files" % len(files))
        check("-%d-" % pid in os.path.basename(files[0]), "file %s lacks the pid" % files[0])
        check(re.search(r"pid %d: capture #1 started" % pid, r.stderr), "no start line")
        validate(args, files[0], pid)

        rows = list_rows(w.gpuprof("list"))
        check(rows[pid].split()[3:6] == ["idle", "(last", "#1)"], "after: %r" % rows[pid])
    finally:
        w.finish()


def scenario_all(args):
    w = Workloads(args, 2)
    try:
        r = w.gpuprof("capture", "--all", "--duration", "1500ms", "--format", "json",
                      "--output", w.traces)
        files = capture_files(r, w.traces)
        check(len(files) == 2, "capture --all printed %d files" % len(files))
        windows = []
        for pid in w.pids():
            mine = [f for f in files if "-%d-" % pid in os.path.basename(f)]
            check(len(mine) == 1, "pid %d has %d files" % (pid, len(mine)))
            s = validate(args, mine[0], pid)
            meta = s["metadata"]
            windows.append((int(meta["capture_start_ns"]), int(meta["capture_end_ns"])))
        check(max(a for a, _ in windows) < min(b for _, b in windows),
              "the capture windows do not overlap: %r" % windows)
    finally:
        w.finish()


def scenario_busy(args):
    w = Workloads(args, 2)
    pid = w.pids()[0]
    try:
        # Several agents and no target: a usage error listing them.
        r = w.gpuprof("capture", expect=2)
        check("pass --pid N or --all" in r.stderr, "no hint: %r" % r.stderr)

        env = dict(os.environ, GPUPROF_RUN_DIR=w.run_dir)
        first = subprocess.Popen([args.gpuprof, "capture", "--pid", str(pid), "--duration", "60s",
                                  "--output", w.traces, "--format", "json"], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + WAIT_S
        while "running #1" not in list_rows(w.gpuprof("list")).get(pid, ""):
            check(time.time() < deadline and first.poll() is None, "the capture never ran")
            time.sleep(0.1)

        r = w.gpuprof("capture", "--pid", str(pid), "--duration", "2s", expect=3)
        check("busy: capture 1 is running in pid %d" % pid in r.stderr, "busy: %r" % r.stderr)

        r = w.gpuprof("stop", "--pid", str(pid))
        check("capture #1 stopped" in r.stderr, "stop: %r" % r.stderr)
        out, err = first.communicate(timeout=WAIT_S)
        print(out, err)
        check(first.returncode == 0, "the stopped capture exited %d" % first.returncode)
        files = split_files([f for f in out.splitlines() if f])
        check(len(files) == 1 and os.path.exists(files[0]), "stopped capture files: %r" % files)
        validate(args, files[0], pid)

        r = w.gpuprof("stop", "--pid", str(pid), expect=1)
        check("not-running" in r.stderr, "second stop: %r" % r.stderr)
        r = w.gpuprof("capture", "--pid", "1", "--run-dir", w.work, expect=4)
        check("GPUPROF_RUN_DIR" in r.stderr, "no-agent message: %r" % r.stderr)
    finally:
        w.finish()


def long_capture(w, pid, *extra):
    """A 1 h capture stopped once it runs: its trace file."""
    env = dict(os.environ, GPUPROF_RUN_DIR=w.run_dir)
    first = subprocess.Popen([w.args.gpuprof, "capture", "--pid", str(pid), "--duration", "1h",
                              "--output", w.traces] + list(extra), env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + WAIT_S
    while "running #" not in list_rows(w.gpuprof("list")).get(pid, ""):
        check(time.time() < deadline and first.poll() is None, "the capture never ran")
        time.sleep(0.1)
    time.sleep(0.5)
    w.gpuprof("stop", "--pid", str(pid))
    out, err = first.communicate(timeout=WAIT_S)
    print(out, err)
    check(first.returncode == 0, "the stopped capture exited %d" % first.returncode)
    files = split_files([f for f in out.splitlines() if f])
    check(len(files) == 1, "capture files: %r" % files)
    return files[0]


def scenario_format(args):
    w = Workloads(args, 1)
    pid = w.pids()[0]
    try:
        r = w.gpuprof("capture", "--pid", str(pid), "--duration", "1s", "--output", w.traces)
        files = capture_files(r, w.traces)
        check(len(files) == 1 and files[0].endswith(".json.gz"), "first capture: %r" % files)
        s = validate(args, files[0], pid)
        meta = s["metadata"]
        check(int(meta.get("trace_format_auto", 0)) == 1 and
              int(meta.get("expected_gpu_records", -1)) == 0,
              "first capture's format metadata: %r" % meta)
        path = long_capture(w, pid)
        check(path.endswith(".pftrace"), "1 h capture without --format wrote %s" % path)
        path = long_capture(w, pid, "--format", "json")
        check(path.endswith(".json"), "1 h capture with --format json wrote %s" % path)
        s = validate(args, path, pid)
        check("trace_format_auto" not in s["metadata"], "--format json: %r" % s["metadata"])
    finally:
        w.finish()


def scenario_slowstop(args):
    """With a long GPUPROF_FLUSH_INTERVAL a capture ends (and its file is written) up to two
    intervals after the stop: `gpuprof stop` still gets its reply in time, waits for the file
    and prints it; the control thread is not held meanwhile (list answers)."""
    w = Workloads(args, 1, {"GPUPROF_FLUSH_INTERVAL": "8s"})
    pid = w.pids()[0]
    try:
        env = dict(os.environ, GPUPROF_RUN_DIR=w.run_dir)
        first = subprocess.Popen([args.gpuprof, "capture", "--pid", str(pid), "--duration", "60s",
                                  "--output", w.traces, "--format", "json"], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + WAIT_S
        while "running #1" not in list_rows(w.gpuprof("list")).get(pid, ""):
            check(time.time() < deadline and first.poll() is None, "the capture never ran")
            time.sleep(0.1)
        time.sleep(1)  # kernels in the window
        stop = subprocess.Popen([args.gpuprof, "stop", "--pid", str(pid)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        # The stop is waiting for the file: the agent still answers others.
        check(pid in list_rows(w.gpuprof("list")), "list during the stop")
        out, err = stop.communicate(timeout=WAIT_S * 2)
        print("$ gpuprof stop --pid %d  -> %d\n%s%s" % (pid, stop.returncode, out, err))
        check(stop.returncode == 0, "stop exited %d: %r" % (stop.returncode, err))
        check("capture #1 stopped" in err, "stop: %r" % err)
        stopped = split_files([f for f in out.splitlines() if f])
        check(len(stopped) == 1, "stop printed %r" % out)
        cout, cerr = first.communicate(timeout=WAIT_S * 2)
        print(cout, cerr)
        check(first.returncode == 0, "the stopped capture exited %d" % first.returncode)
        files = split_files([f for f in cout.splitlines() if f])
        check(files == stopped, "capture printed %r, stop %r" % (files, stopped))
        validate(args, files[0], pid)
        # Nothing that began after the stop (the window's end) is in the trace, although the
        # worker noticed the end only at its next tick, seconds later.
        with open(files[0]) as f:
            doc = json.load(f)
        meta = doc["metadata"]
        end_us = (int(meta["capture_end_ns"]) - int(meta["base_time_ns"])) / 1000.0
        late = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e["ts"] >= end_us]
        check(not late, "%d slices begin after the capture's end (%.0f us), e.g. %r"
              % (len(late), end_us, late[:1]))
    finally:
        w.finish()


def scenario_impostor(args):
    """A socket that is not a gpuprof agent answers an error without a code: the command says
    so and exits 1, it does not crash."""
    work = os.environ.get("E2E_WORKDIR") or "/tmp/gpuprof-control-e2e"
    shutil.rmtree(work, ignore_errors=True)
    run_dir = os.path.join(work, "run")
    os.makedirs(run_dir)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(os.path.join(run_dir, "gpuprof-%d.sock" % os.getpid()))
    srv.listen(8)

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            with c:
                c.settimeout(2)
                try:
                    c.recv(4096)
                    c.sendall(b"GPUPROF/1 error\n\n")
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    env = dict(os.environ, GPUPROF_RUN_DIR=run_dir)
    for cmd in ("capture", "stop"):
        argv = [args.gpuprof, cmd, "--pid", str(os.getpid())]
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=WAIT_S * 2)
        print("$ %s  -> %d\n%s%s" % (" ".join(argv), r.returncode, r.stdout, r.stderr))
        check(r.returncode == 1, "gpuprof %s exited %d, expected 1" % (cmd, r.returncode))
        check("without a code" in r.stderr, "gpuprof %s names the bad reply" % cmd)
        check(not any(b in r.stderr for b in SANITIZER_BANNERS),
              "a sanitizer reported in gpuprof %s" % cmd)
    srv.close()


def planted_server(path, ready):
    """Runs in a forked child (already the planter's uid): an agent look-alike."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(path, 0o777)  # anyone may connect: the planter wants victims
    srv.listen(8)
    open(ready, "w").close()
    reply = ("GPUPROF/1 ok\npid=%d\ncommand=planted\nversion=0\nmode=ondemand\n"
             "agent=active\ngpus=0\nnow_ns=1\ncapture.state=idle\ncapture.id=1\n"
             "capture.gpu_only=0\ncapture.started_ns=1\ncapture.ends_ns=2\ncapture.events=0\n"
             "capture.bytes=0\ncapture.dropped=0\ncapture.error=0\n"
             "capture.file=/etc/shadow\n\n" % os.getpid())
    while True:
        c, _ = srv.accept()
        with c:
            c.settimeout(2)
            try:
                c.recv(4096)
                c.sendall(reply.encode())
            except OSError:
                pass


def as_uid(uid):
    def drop():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return drop


def scenario_planted(args):
    """A run directory anyone may write to (an emptyDir, /tmp), where another user planted
    gpuprof-<pid>.sock answering like an agent (a capture whose file is /etc/shadow): the
    command of a third user refuses it with one line naming the listener's uid, sends it no
    capture and prints no file; root and the planter's own uid still talk to it (root reaches
    every user's agent). Needs root to play the three users: skips (77) otherwise."""
    if os.geteuid() != 0:
        print("SKIP: needs root to run the planted socket and the command as other users")
        sys.exit(77)
    planter, victim, pid = 65534, 65533, 424242
    base = tempfile.mkdtemp(prefix="gpuprof-planted-")
    try:
        os.chmod(base, 0o755)
        run_dir = os.path.join(base, "run")
        os.mkdir(run_dir)
        os.chmod(run_dir, 0o1777)
        path = os.path.join(run_dir, "gpuprof-%d.sock" % pid)
        ready = os.path.join(base, "ready")
        os.chmod(base, 0o777)  # the planter writes its ready file there
        child = os.fork()
        if child == 0:
            try:
                as_uid(planter)()
                planted_server(path, ready)
            finally:
                os._exit(1)
        try:
            end = time.time() + WAIT_S
            while not os.path.exists(ready):
                check(os.waitpid(child, os.WNOHANG) == (0, 0) and time.time() < end,
                      "the planted server did not start")
                time.sleep(0.02)
            env = dict(os.environ, GPUPROF_RUN_DIR=run_dir)

            def gp(uid, *argv):
                r = subprocess.run([args.gpuprof, *argv], env=env, capture_output=True,
                                   text=True, timeout=WAIT_S, cwd="/",
                                   preexec_fn=as_uid(uid) if uid else None)
                print("$ (uid %d) gpuprof %s  -> %d\n%s%s" % (uid, " ".join(argv), r.returncode,
                                                              r.stdout, r.stderr))
                check(not any(b in r.stderr for b in SANITIZER_BANNERS),
                      "a sanitizer reported in gpuprof %s" % argv[0])
                return r

            for argv, rc in ((("capture", "--pid", str(pid), "--duration", "1s"), 1),
                             (("capture", "--all", "--duration", "1s"), 4),
                             (("stop", "--pid", str(pid)), 1),
                             (("list",), 4)):
                r = gp(victim, *argv)
                check(r.returncode == rc, "gpuprof %s as uid %d exited %d, expected %d"
                      % (argv[0], victim, r.returncode, rc))
                check(r.stdout == "", "gpuprof %s printed %r on stdout" % (argv[0], r.stdout))
                refusals = [l for l in r.stderr.splitlines() if "refusing" in l]
                check(len(refusals) == 1 and "uid %d" % planter in refusals[0]
                      and path in refusals[0],
                      "gpuprof %s: one line refusing %s served by uid %d" % (argv[0], path, planter))
            # Positive controls: the same server is talked to by its own uid and by root.
            for uid in (planter, 0):
                r = gp(uid, "list")
                check(r.returncode == 0 and "planted" in r.stdout and "refusing" not in r.stderr,
                      "gpuprof list as uid %d lists the server" % uid)
        finally:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario",
                    choices=["pid", "all", "busy", "format", "impostor", "slowstop", "planted"],
                    required=True)
    ap.add_argument("--gpuprof", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--validator", required=True)
    args = ap.parse_args()
    try:
        {"pid": scenario_pid, "all": scenario_all, "busy": scenario_busy,
         "format": scenario_format, "impostor": scenario_impostor,
         "slowstop": scenario_slowstop, "planted": scenario_planted}[args.scenario](args)
    except Failed as e:
        print("FAILED: %s" % e)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

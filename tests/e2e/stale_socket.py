#!/usr/bin/env python3
"""`gpuprof list` removes a stale control socket only when no agent is taking its name over.

Usage: stale_socket.py GPUPROF

An agent that finds its name held by a dead process's socket replaces it under the run
directory's lock (agent/control.c create_socket). `gpuprof list` must remove a stale file under
the same lock, re-checked: otherwise it may unlink the live socket the agent just linked there
(the same pid from another pid namespace, or a reused pid), and that agent is unreachable.
Holding the lock here stands for an agent in the middle of such a takeover.
"""

import fcntl
import os
import socket
import subprocess
import sys
import tempfile

PID = 4242


def stale_socket(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()  # the file stays, nobody listens: what a process killed with SIGKILL leaves
    return os.lstat(path).st_ino


def run_list(gpuprof, run_dir):
    return subprocess.run([gpuprof, "list", "--run-dir", run_dir], capture_output=True,
                          text=True, timeout=30)


def main():
    gpuprof = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory(prefix="gpuprof-stale-") as run_dir:
        path = os.path.join(run_dir, f"gpuprof-{PID}.sock")

        # 1. An agent holds the run directory's lock (taking the name over): left alone.
        ino = stale_socket(path)
        dfd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(dfd, fcntl.LOCK_EX)
        r = run_list(gpuprof, run_dir)
        os.close(dfd)
        if r.returncode != 4:
            failures.append(f"locked: exit status {r.returncode}, want 4 (no agent)")
        if not os.path.exists(path) or os.lstat(path).st_ino != ino:
            failures.append("locked: the socket was removed while an agent held the run "
                            "directory's lock")
        if "removed" in r.stderr:
            failures.append(f"locked: stderr says it removed something: {r.stderr!r}")

        # 2. Nobody holds the lock: the stale file is removed, with one line naming it.
        r = run_list(gpuprof, run_dir)
        if r.returncode != 4:
            failures.append(f"unlocked: exit status {r.returncode}, want 4 (no agent)")
        if os.path.exists(path):
            failures.append("unlocked: the stale socket was not removed")
        want = f"gpuprof: removed {path}: its process {PID} is gone"
        if want not in r.stderr.splitlines():
            failures.append(f"unlocked: stderr {r.stderr!r} lacks {want!r}")
        if r.stdout:
            failures.append(f"stdout should be empty, got {r.stdout!r}")

    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Runs one end-to-end case: the program without the agent, then with it, and checks both runs.

Usage (from ctest, see tests/lib/GpuprofTest.cmake for the environment):
    run_case.py --case NAME -- PROGRAM [ARGS...]

The environment is the one the agent run gets; the baseline run is the same minus
CUDA_INJECTION64_PATH. Every case checks that the program's stdout and exit status are the same
in both runs, that no sanitizer reported anything, and then what tests/e2e/cases.py expects of
the summary, the agent's stderr lines and the output directory.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cases  # noqa: E402
from expect import Failures  # noqa: E402

RUN_TIMEOUT_S = 25  # a hang guard, not a performance assertion

SANITIZER_BANNERS = (
    "ERROR: AddressSanitizer",
    "ERROR: LeakSanitizer",
    "WARNING: ThreadSanitizer",
    "ERROR: ThreadSanitizer",
    "runtime error:",
    "SUMMARY: UndefinedBehaviorSanitizer",
)

# The agent's stderr lines all start with its name (DESIGN.md: one clear line per problem).
AGENT_LINE = re.compile(r"^\[?gpuprof\b")


class Run:
    """One execution of the program: what it printed, how it ended, what the agent wrote."""

    def __init__(self, argv, env, label):
        self.argv = argv
        self.label = label
        self.t_start_ns = time.time_ns()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        self.pid = proc.pid
        self.timed_out = False
        try:
            out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        self.t_end_ns = time.time_ns()
        self.rc = proc.returncode
        self.stdout = out.decode("utf-8", "replace")
        self.stderr = err.decode("utf-8", "replace")
        self.agent_lines = [l for l in self.stderr.splitlines() if AGENT_LINE.match(l)]
        self.summary = None
        self.summary_path = None
        self.summary_error = None
        self.output_files = []

    def describe(self):
        return (f"--- {self.label} run: {' '.join(self.argv)}\n"
                f"exit status {self.rc}{' (killed after timeout)' if self.timed_out else ''}\n"
                f"--- stdout:\n{self.stdout}--- stderr:\n{self.stderr}")


def prepare_dir(path, workdir):
    """Empties a directory the test owns (never one outside its work dir)."""
    if not path or not workdir:
        return
    real, work = os.path.realpath(path), os.path.realpath(workdir)
    if not real.startswith(work + os.sep):
        return
    if os.path.isdir(real):
        for name in os.listdir(real):
            full = os.path.join(real, name)
            if os.path.isfile(full) or os.path.islink(full):
                os.unlink(full)
    os.makedirs(real, exist_ok=True)


def load_outputs(run, env):
    """Finds the summary the agent run wrote: GPUPROF_SUMMARY_FILE when set, else the
    gpuprof-<host>-<pid>-summary.json of the program's pid in GPUPROF_OUTPUT_DIR."""
    out_dir = env.get("GPUPROF_OUTPUT_DIR")
    if out_dir and os.path.isdir(out_dir):
        run.output_files = sorted(os.listdir(out_dir))
    path = env.get("GPUPROF_SUMMARY_FILE")
    if not path and out_dir:
        pattern = re.compile(r"^gpuprof-.+-%d-summary\.json$" % run.pid)
        hits = [f for f in run.output_files if pattern.match(f)]
        path = os.path.join(out_dir, hits[0]) if hits else None
    if path and os.path.exists(path):
        run.summary_path = path
        try:
            with open(path, encoding="utf-8") as f:
                run.summary = json.load(f)
        except (OSError, ValueError) as e:
            run.summary_error = f"{path}: {e}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", required=True, help="a case name from cases.py")
    ap.add_argument("argv", nargs=argparse.REMAINDER, help="-- program [args...]")
    opts = ap.parse_args()
    argv = opts.argv[1:] if opts.argv[:1] == ["--"] else opts.argv
    if not argv:
        ap.error("no program given")
    case = cases.CASES.get(opts.case)
    if case is None:
        ap.error(f"unknown case {opts.case!r}; known: {', '.join(sorted(cases.CASES))}")

    env = dict(os.environ)
    workdir = env.get("E2E_WORKDIR")
    if workdir:
        os.makedirs(workdir, exist_ok=True)
    summary_file = env.get("GPUPROF_SUMMARY_FILE")

    def clean():
        if summary_file and os.path.exists(summary_file):
            os.unlink(summary_file)
        prepare_dir(env.get("GPUPROF_OUTPUT_DIR"), workdir)

    base_env = dict(env)
    base_env.pop("CUDA_INJECTION64_PATH", None)
    clean()
    base = Run(argv, base_env, "baseline (no agent)")
    load_outputs(base, env)
    clean()
    agent = Run(argv, env, "agent")
    load_outputs(agent, env)

    f = Failures()
    for run in (base, agent):
        f.check(not run.timed_out, f"{run.label}: still running after {RUN_TIMEOUT_S} s (hang)")
        for banner in SANITIZER_BANNERS:
            f.check(banner not in run.stderr, f"{run.label}: sanitizer report ({banner!r})")
        f.check(not any(l.startswith("e2e:") for l in run.stderr.splitlines()),
                f"{run.label}: the program reported a failed CUDA call")
    f.eq("baseline exit status", base.rc, case.rc)
    f.eq("agent-run exit status (same as without the agent)", agent.rc, base.rc)
    f.eq("agent-run stdout (same as without the agent)", agent.stdout, base.stdout)
    f.eq("baseline stderr lines from gpuprof", base.agent_lines, [])
    f.check(base.summary_path is None, "baseline run (no agent) left a summary")
    f.check(agent.summary_error is None, f"summary does not parse: {agent.summary_error}")

    case.check(f, agent, env)

    if f.failures:
        print(f"case {opts.case}: {len(f.failures)} check(s) failed:")
        for msg in f.failures:
            print("  FAIL " + msg)
        print(base.describe())
        print(agent.describe())
        if agent.summary is not None:
            print(f"--- summary {agent.summary_path}:")
            print(json.dumps(agent.summary, indent=1))
        return 1
    print(f"case {opts.case}: {f.passed} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

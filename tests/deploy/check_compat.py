#!/usr/bin/env python3
"""Checks that the agent prints, word for word, the version-mismatch lines docs/COMPATIBILITY.md shows.

Usage: check_compat.py PROGRAM  (run by ctest with the e2e environment: simulated GPU, agent)

Each block in the document preceded by `<!-- compat-lines: VAR=value -->` is one case: the
program runs with VAR=value, and its stderr lines that start with "gpuprof" must be exactly the
block's lines, with <path> standing for the CUPTI file the agent loaded. The summary must say
"inactive" with the same text, the program's stdout and exit status must equal a run without
the agent, and a CUPTI of the same minor version (130000) must be accepted.
"""

import json
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOC = os.path.join(ROOT, "docs", "COMPATIBILITY.md")
failures = []


def run(prog, env):
    r = subprocess.run([prog], env=env, capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, [l for l in r.stderr.splitlines() if l.startswith("gpuprof")]


def summary(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    prog = sys.argv[1]
    text = open(DOC).read()
    cases = re.findall(r"<!-- compat-lines: (\w+)=(\S+) -->\s*```\n(.*?)```", text, re.S)
    if len(cases) < 3:
        failures.append(f"{DOC}: expected at least 3 compat-lines blocks, found {len(cases)}")
    base_env = dict(os.environ)
    summary_file = base_env["GPUPROF_SUMMARY_FILE"]
    plain = {k: v for k, v in base_env.items() if k != "CUDA_INJECTION64_PATH"}
    rc0, out0, _ = run(prog, plain)
    cupti = os.path.join(base_env["LD_LIBRARY_PATH"].split(":")[0], "libcupti.so.13")
    for var, value, block in cases:
        env = dict(base_env, **{var: value})
        if os.path.exists(summary_file):
            os.unlink(summary_file)
        rc, out, lines = run(prog, env)
        want = block.strip().splitlines()
        got = [l for l in lines]
        s = summary(summary_file)
        loaded = (s or {}).get("cupti_path") or cupti
        got_generic = [l.replace(loaded, "<path>") for l in got]
        if got_generic != want:
            failures.append(f"{var}={value}: stderr lines\n  {got}\nexpected (doc)\n  {want}"
                            f"\n  (<path> = {loaded})")
        if (rc, out) != (rc0, out0):
            failures.append(f"{var}={value}: the program's exit status/stdout changed: "
                            f"{(rc, out)!r} vs {(rc0, out0)!r}")
        if s is None or s.get("state") != "inactive":
            failures.append(f"{var}={value}: summary state {(s or {}).get('state')!r}, expected inactive")
        elif got and got[0] != "gpuprof: " + s.get("inactive_reason", ""):
            failures.append(f"{var}={value}: inactive_reason {s.get('inactive_reason')!r} is not "
                            f"the stderr line")
    # The same minor version, another update: accepted.
    if os.path.exists(summary_file):
        os.unlink(summary_file)
    rc, out, lines = run(prog, dict(base_env, FAKEGPU_CUPTI_VERSION="130000"))
    s = summary(summary_file)
    if lines or not s or s.get("state") != "active" or s.get("cupti_version") != 130000:
        failures.append(f"FAKEGPU_CUPTI_VERSION=130000: lines {lines}, summary state "
                        f"{(s or {}).get('state')!r} version {(s or {}).get('cupti_version')!r}; "
                        "expected active with 130000 and no line")
    for f in failures:
        print("FAIL:", f)
    print(f"check_compat: {len(cases) + 1} cases, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

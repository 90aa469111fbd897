#!/usr/bin/env python3
"""Runs boundary_prog under the agent (GPUPROF_MODE=ondemand) and checks that allocations and
frees whose runtime call was open while one capture ended and the next began are counted once
(tests/nested/boundary_prog.c)."""

import json
import os
import subprocess
import sys

MIB = 1024 * 1024


def main():
    prog = sys.argv[1]
    env = dict(os.environ)
    env["GPUPROF_MODE"] = "ondemand"
    r = subprocess.run([prog], env=env, capture_output=True, text=True, timeout=100)
    errors = []
    if r.returncode != 0 or r.stdout != "boundary_prog: done\n":
        errors.append(f"boundary_prog: rc {r.returncode}, stdout {r.stdout!r}, "
                      f"stderr {r.stderr[-2000:]!r}")
    with open(env["GPUPROF_SUMMARY_FILE"]) as f:
        s = json.load(f)
    want = [{"device": 0, "allocs": 2, "frees": 1, "bytes_allocated": MIB + 65536,
             "bytes_freed": 65536, "in_use": MIB, "peak_in_use": MIB + 65536,
             "by_kind": {"device": MIB + 65536}}]
    if s.get("memory") != want:
        errors.append(f"memory {s.get('memory')}, expected {want}")
    losses = s.get("losses", {})
    if losses.get("unknown_frees") != 0:
        errors.append(f"losses.unknown_frees {losses.get('unknown_frees')}, expected 0")
    if s.get("captures", {}).get("count") != 4:
        errors.append(f"captures {s.get('captures')}, expected 4 started")
    for e in errors:
        print("FAIL:", e)
    if errors:
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()

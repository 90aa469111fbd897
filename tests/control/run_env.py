#!/usr/bin/env python3
"""`gpuprof run` sets NCCL_PROFILER_PLUGIN and NVTX_INJECTION64_PATH to the agent's absolute
path beside CUDA_INJECTION64_PATH, and keeps either where the user set it."""

import os
import subprocess
import sys

VARS = ("NCCL_PROFILER_PLUGIN", "NVTX_INJECTION64_PATH")


def env_of(cli, agent, extra):
    env = {k: v for k, v in os.environ.items() if k not in VARS}
    env.update(extra)
    r = subprocess.run([cli, "run", "--agent", agent, "--", "env"], env=env, capture_output=True,
                       text=True, timeout=60)
    if r.returncode != 0:
        raise SystemExit(f"gpuprof run failed ({r.returncode}): {r.stderr}")
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


def main():
    cli, agent = sys.argv[1], sys.argv[2]
    path = os.path.realpath(agent)
    fails = []
    got = env_of(cli, agent, {})
    for var in ("CUDA_INJECTION64_PATH",) + VARS:
        if got.get(var) != path:
            fails.append(f"unset: {var}={got.get(var)!r}, want {path!r}")
    mine = {"NCCL_PROFILER_PLUGIN": "none", "NVTX_INJECTION64_PATH": "/opt/other/libtool.so"}
    got = env_of(cli, agent, mine)
    for var, want in mine.items():
        if got.get(var) != want:
            fails.append(f"the user's {var}={want!r} replaced by {got.get(var)!r}")
    for f in fails:
        print("FAIL:", f)
    if not fails:
        print("gpuprof run sets NCCL_PROFILER_PLUGIN and NVTX_INJECTION64_PATH: ok")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

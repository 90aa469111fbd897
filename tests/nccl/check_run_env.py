#!/usr/bin/env python3
"""`gpuprof run` sets NCCL_PROFILER_PLUGIN to the agent's absolute path, unless it is set."""

import os
import subprocess
import sys


def env_of(cli, agent, extra):
    env = {k: v for k, v in os.environ.items() if k != "NCCL_PROFILER_PLUGIN"}
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
    if got.get("NCCL_PROFILER_PLUGIN") != path or got.get("CUDA_INJECTION64_PATH") != path:
        fails.append(f"unset: NCCL_PROFILER_PLUGIN={got.get('NCCL_PROFILER_PLUGIN')!r}, "
                     f"CUDA_INJECTION64_PATH={got.get('CUDA_INJECTION64_PATH')!r}, want {path!r}")
    got = env_of(cli, agent, {"NCCL_PROFILER_PLUGIN": "none"})
    if got.get("NCCL_PROFILER_PLUGIN") != "none":
        fails.append(f"user's none replaced by {got.get('NCCL_PROFILER_PLUGIN')!r}")
    for f in fails:
        print("FAIL:", f)
    if not fails:
        print("gpuprof run sets NCCL_PROFILER_PLUGIN: ok")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

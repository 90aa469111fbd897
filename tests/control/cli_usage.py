#!/usr/bin/env python3
"""The gpuprof command's help and usage errors: every subcommand answers -h/--help on stdout
with its own usage and exit status 0; unknown commands, options and missing values exit 2."""
import subprocess
import sys


def main():
    cli = sys.argv[1]
    failures = []

    def run(*args):
        return subprocess.run([cli, *args], capture_output=True, text=True, timeout=30)

    helps = {("--help",): "usage: gpuprof run ", ("help",): "usage: gpuprof run ",
             ("run", "--help"): "usage: gpuprof run ", ("run", "-h"): "usage: gpuprof run ",
             ("list", "--help"): "usage: gpuprof list ", ("list", "-h"): "usage: gpuprof list ",
             ("capture", "--help"): "usage: gpuprof capture ",
             ("stop", "--help"): "usage: gpuprof stop "}
    for args, head in helps.items():
        r = run(*args)
        if r.returncode != 0 or not r.stdout.startswith(head) or r.stderr:
            failures.append(f"{' '.join(args)}: exit {r.returncode}, stdout {r.stdout[:60]!r}, "
                            f"stderr {r.stderr[:80]!r}; want 0 and {head!r}")
    stop = run("stop", "--help").stdout
    if "capture" in stop:
        failures.append(f"stop --help shows capture's usage: {stop!r}")
    usage_errors = [("bogus",), ("list", "--bogus"), ("run",), ("run", "--log"),
                    ("capture", "--duration"), ("stop", "--format", "json"), ()]
    for args in usage_errors:
        r = run(*args)
        if r.returncode != 2 or r.stdout or not r.stderr:
            failures.append(f"{' '.join(args) or '(nothing)'}: exit {r.returncode}, stdout "
                            f"{r.stdout[:60]!r}; want 2, a message on stderr, nothing on stdout")
    for f in failures:
        print(f"FAIL: {f}")
    print(f"cli_usage: {len(helps) + len(usage_errors) + 1 - len(failures)} passed, "
          f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""libcurl is loaded only for uploads: maps_probe under the shipped agent on the simulated GPU.

Usage: curl_loading.py --case no_url|url|missing -- MAPS_PROBE
(run by ctest through gpuprof_add_e2e_test: the agent, the simulator, GPUPROF_OUTPUT_DIR and
GPUPROF_SUMMARY_FILE are set). maps_probe prints which of libcurl, libssl, libcrypto and
libnghttp2 its process has mapped after some CUDA work, and whether curl_easy_init is in the
global symbol scope.

- no_url: no GPUPROF_PYROSCOPE_URL: none of them is mapped (as without the agent), the
  summary has no "pyroscope" section.
- url: a loopback receiver: the upload thread maps libcurl (the positive control that shows
  the probe sees it), its symbols stay out of the global scope (RTLD_LOCAL), and the profiles
  arrive.
- missing: GPUPROF_TEST_CURL_PATH names a file that does not exist: exactly one stderr line
  naming it, libcurl.so.4 and the package libcurl4; the program's output and status are
  unchanged, the profile files are still written, nothing is sent.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_pyroscope import Receiver, Failed, check, eq  # noqa: E402

LIBS = ["libcurl", "libssl", "libcrypto", "libnghttp2"]
MISSING = "/nonexistent/gpuprof-test/libcurl.so.4"


def probe_output(stdout):
    """{"libcurl": True/False, ..., "global": True/False} from maps_probe's lines."""
    out = {}
    for line in stdout.splitlines():
        key, _, value = line.partition(": ")
        if key in LIBS:
            out[key] = value == "mapped"
        elif key == "curl_easy_init in the global scope":
            out["global"] = value == "yes"
    eq("maps_probe lines", sorted(out), sorted(LIBS + ["global"]))
    return out


def run(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    eq(f"exit status of {cmd} (stderr: {p.stderr})", p.returncode, 0)
    agent_lines = [l for l in p.stderr.splitlines() if "gpuprof" in l]
    return p, agent_lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True, choices=["no_url", "url", "missing"])
    ap.add_argument("cmd", nargs="+")
    a = ap.parse_args()
    work = os.environ["E2E_WORKDIR"]
    out_dir = os.environ["GPUPROF_OUTPUT_DIR"]
    summary = os.environ["GPUPROF_SUMMARY_FILE"]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    env = {k: v for k, v in os.environ.items() if k not in ("GPUPROF_PYROSCOPE_URL",
                                                            "GPUPROF_TEST_CURL_PATH")}
    env.update({"NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1", "GPUPROF_WINDOW": "1s"})
    for k in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        env.pop(k, None)
    base_env = {k: v for k, v in env.items() if k != "CUDA_INJECTION64_PATH"}
    base, _ = run(a.cmd, base_env)
    baseline = probe_output(base.stdout)
    check(not any(baseline.values()),
          f"the probe maps the upload stack even without the agent: {baseline}")

    if a.case == "no_url":
        p, lines = run(a.cmd, env)
        eq("agent lines on stderr", lines, [])
        eq("libraries mapped under the agent without a URL", probe_output(p.stdout), baseline)
        with open(summary) as f:
            s = json.load(f)
        eq("summary state", s["state"], "active")
        check("pyroscope" not in s, f"summary has a pyroscope section: {s.get('pyroscope')}")
    elif a.case == "url":
        r = Receiver(work, 0)
        try:
            r.wait_ready()
            port = int(open(r.ready).read())
            env["GPUPROF_PYROSCOPE_URL"] = f"http://127.0.0.1:{port}"
            p, lines = run(a.cmd + ["10000"], env)
        finally:
            r.stop()
        eq("agent lines on stderr", lines, [])
        got = probe_output(p.stdout)
        eq("libcurl mapped with a URL", got["libcurl"], True)
        eq("curl_easy_init in the global scope (libcurl must be RTLD_LOCAL)", got["global"], False)
        eq("rejected requests", [x for x in r.records() if "rejected" in x], [])
        files = glob.glob(os.path.join(out_dir, "*.pb.gz"))
        check(files, f"no profile files in {out_dir}")
        eq("uploads (one per profile file)", len(r.accepted()), len(files))
        with open(summary) as f:
            s = json.load(f)
        eq("summary.pyroscope.sent", s["pyroscope"]["sent"], len(files))
    else:
        r = Receiver(work, 0)
        try:
            r.wait_ready()
            port = int(open(r.ready).read())
            env["GPUPROF_PYROSCOPE_URL"] = f"http://127.0.0.1:{port}"
            env["GPUPROF_TEST_CURL_PATH"] = MISSING
            p, lines = run(a.cmd + ["300"], env)
        finally:
            r.stop()
        eq("stdout under the agent", p.stdout, base.stdout)
        eq("agent lines on stderr (stderr: " + p.stderr + ")", len(lines), 1)
        for text in (MISSING, "libcurl.so.4", "libcurl4", "uploads are off"):
            check(text in lines[0], f"the line does not say {text!r}: {lines[0]}")
        eq("all of stderr", [l for l in p.stderr.splitlines() if l.strip()], lines)
        eq("requests received", r.records(), [])
        check(glob.glob(os.path.join(out_dir, "*.pb.gz")), f"no profile files in {out_dir}")
        with open(summary) as f:
            s = json.load(f)
        eq("summary state", s["state"], "active")
        pyro = s["pyroscope"]
        eq("summary.pyroscope sent/failed", (pyro["sent"], pyro["failed"]), (0, 0))
        eq("summary.pyroscope submitted == dropped", pyro["submitted"], pyro["dropped"])
    print(f"ok {a.case}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failed as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)

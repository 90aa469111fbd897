#!/usr/bin/env python3
"""Uploader scenarios: upload_driver (the real uploader) against receiver.py on loopback.

Each scenario starts a receiver (or none), runs the driver with GPUPROF_* settings, and checks
exact outcomes: which numbered profiles arrived with which labels, the uploader's counters,
the driver's output and exit status, the stderr lines, and that stopping respected the exit
deadline (loosely: deadline + 2 s, a correctness bound, not a benchmark).
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KINDS = ["gpu_time", "gpu_memory", "memcpy"]
SERIES = {"gpu_time": "gpu", "gpu_memory": "gpu_memory", "memcpy": "gpu_memcpy", "nccl": "gpu_nccl"}
SAMPLE_TYPES = {"gpu_time": ["launches", "gpu_time"], "gpu_memory": ["inuse_objects", "inuse_space"],
                "memcpy": ["count", "bytes"]}
ETIMEDOUT = -110
ESHUTDOWN = -108


class Failed(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failed(msg)


def eq(what, got, want):
    check(got == want, f"{what}: got {got!r}, expected {want!r}")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Receiver:
    def __init__(self, work, port, *args):
        self.store = os.path.join(work, "received.jsonl")
        self.ready = os.path.join(work, "ready")
        for f in (self.store, self.ready):
            if os.path.exists(f):
                os.unlink(f)
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "receiver.py"), "--port", str(port),
             "--store", self.store, "--ready", self.ready, *args])
        self.port = port

    def wait_ready(self, timeout=10):
        t = time.time()
        while not os.path.exists(self.ready):
            check(self.proc.poll() is None, "the receiver exited")
            check(time.time() - t < timeout, "the receiver did not start")
            time.sleep(0.02)

    def records(self):
        if not os.path.exists(self.store):
            return []
        with open(self.store) as f:
            return [json.loads(line) for line in f]

    def accepted(self):
        acc = [r for r in self.records() if "api" in r]
        # Accepted but partly thrown away by Pyroscope's normalisation (receiver.py "lost"):
        # a data loss no uploader test may hide.
        eq("profile data Pyroscope would drop", [x["lost"] for x in acc if x.get("lost")], [])
        return acc

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def run_driver(driver, env, *args, timeout=60):
    full = {k: v for k, v in os.environ.items() if not k.startswith("GPUPROF_")}
    full.update({"GPUPROF_LOG": "warn", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"})
    for k in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        full.pop(k, None)
    full.update(env)
    t = time.monotonic()
    p = subprocess.run([driver, *map(str, args)], env=full, capture_output=True, text=True,
                       timeout=timeout)
    wall = time.monotonic() - t
    eq("driver exit status (stderr: " + p.stderr + ")", p.returncode, 0)
    lines = p.stdout.splitlines()
    eq("driver stdout lines (the uploader must print nothing)", len(lines), 1)
    stats = json.loads(lines[0])
    if stats["enabled"] and stats["stop_ret"] in (0, ETIMEDOUT):
        eq("submitted == sent + dropped + failed", stats["submitted"],
           stats["sent"] + stats["dropped"] + stats["failed"])
    stderr = [l for l in p.stderr.splitlines() if l.strip()]
    return stats, stderr, wall


def windows(recs):
    """Window number -> list of records for it (the leaf function is window_<i>)."""
    out = {}
    for r in recs:
        leaves = [f for f in r["leaf_functions"] if f.startswith("window_")]
        eq("leaf functions of one profile", len(leaves), 1)
        out.setdefault(int(leaves[0][7:]), []).append(r)
    return out


def check_profile_kinds(recs, api):
    for i, rs in windows(recs).items():
        kind = KINDS[i % 3]
        for r in rs:
            eq(f"window_{i} sample types", r["sample_types"], SAMPLE_TYPES[kind])
            want = SERIES[kind] if api == "push" else SAMPLE_TYPES[kind][-1]
            eq(f"window_{i} __name__", r["labels"]["__name__"], want)


def stop_bound(stats, deadline_s):
    check(stats["stop_ms"] <= deadline_s * 1000 + 2000,
          f"uploader_stop took {stats['stop_ms']} ms, deadline {deadline_s} s (+2 s allowed)")


def lines_with(stderr, text):
    return [l for l in stderr if text in l]


# ---- scenarios ----

def full_labels_env(url, api):
    return {"GPUPROF_PYROSCOPE_URL": url, "GPUPROF_PYROSCOPE_API": api,
            "GPUPROF_APP_NAME": "trainer", "GPUPROF_TAGS": "env=test,team=ml",
            "GPUPROF_K8S_POD": "trainer-0", "GPUPROF_K8S_NAMESPACE": "ml",
            "GPUPROF_K8S_NODE": "gpu-node-7", "GPUPROF_PYROSCOPE_TENANT": "team-a",
            "GPUPROF_PYROSCOPE_USER": "1234"}


def scenario_ok(a, work, api):
    pw = os.path.join(work, "password")
    with open(pw, "w") as f:
        f.write("s3cret-token\n")  # as a Kubernetes secret file: the newline is not part of it
    r = Receiver(work, 0, "--tenant", "team-a", "--user", "1234", "--password", "s3cret-token")
    try:
        r.wait_ready()
        port = int(open(r.ready).read())
        env = full_labels_env(f"http://127.0.0.1:{port}/", api)
        env["GPUPROF_PYROSCOPE_PASSWORD_FILE"] = pw
        # window_6 is submitted at exit, after OpenSSL's exit handler ran (see upload_driver.c).
        env["UPLOAD_DRIVER_LATE"] = "1"
        stats, stderr, _ = run_driver(a.driver, env, 6, 0)
    finally:
        r.stop()
    eq("stderr", stderr, [])
    recs = r.records()
    eq("rejected requests", [x for x in recs if "rejected" in x], [])
    acc = r.accepted()
    eq("profiles received", sorted(windows(acc)), list(range(7)))
    eq("each profile once", [len(v) for v in windows(acc).values()], [1] * 7)
    for x in acc:
        labels = {"service_name": "trainer", "env": "test", "team": "ml", "pod": "trainer-0",
                  "namespace": "ml", "node": "gpu-node-7"}
        if api == "push":
            labels["__delta__"] = "false"
        labels["__name__"] = x["labels"]["__name__"]
        eq("labels", x["labels"], labels)
        eq("tenant header", x["tenant"], "team-a")
        check(x["user_agent"].startswith("gpuprof/"), f"user agent {x['user_agent']!r}")
        if api == "ingest":
            check(x["from"] <= x["time_nanos"] // 10**9 <= x["until"],
                  f"from/until {x['from']}..{x['until']} do not hold time_nanos {x['time_nanos']}")
    check_profile_kinds(acc, api)
    eq("stats", {k: stats[k] for k in ("enabled", "submitted", "sent", "retried", "dropped",
                                       "failed", "submit_errors", "stop_ret")},
       {"enabled": 1, "submitted": 7, "sent": 7, "retried": 0, "dropped": 0, "failed": 0,
        "submit_errors": 0, "stop_ret": 0})
    eq("bytes_sent", stats["bytes_sent"] > 0, True)


def scenario_exit_only(a, work, api):
    """The only profile is submitted at exit, after OpenSSL's exit handler ran: libcurl's first
    use comes after it (a crash before agent/uploader.c pinned OpenSSL)."""
    r = Receiver(work, 0)
    try:
        r.wait_ready()
        port = int(open(r.ready).read())
        env = {"GPUPROF_PYROSCOPE_URL": f"http://127.0.0.1:{port}", "GPUPROF_PYROSCOPE_API": api,
               "UPLOAD_DRIVER_LATE": "1"}
        stats, stderr, _ = run_driver(a.driver, env, 0, 0)
    finally:
        r.stop()
    eq("stderr", stderr, [])
    eq("profiles received", sorted(windows(r.accepted())), [0])
    eq("stats", {k: stats[k] for k in ("submitted", "sent", "dropped", "failed", "stop_ret")},
       {"submitted": 1, "sent": 1, "dropped": 0, "failed": 0, "stop_ret": 0})


def scenario_transient(a, work, mode, count, extra_env=None, extra_args=()):
    """The first `count` requests fail transiently; everything still arrives, in order."""
    r = Receiver(work, 0, "--mode", mode, "--count", str(count), *extra_args)
    try:
        r.wait_ready()
        port = int(open(r.ready).read())
        env = {"GPUPROF_PYROSCOPE_URL": f"http://127.0.0.1:{port}", "GPUPROF_APP_NAME": "t",
               "GPUPROF_EXIT_TIMEOUT": "30s"}
        env.update(extra_env or {})
        stats, stderr, _ = run_driver(a.driver, env, 3, 0)
    finally:
        r.stop()
    recs = r.records()
    eq("rejected requests", [x for x in recs if "rejected" in x], [])
    eq("misbehaving answers", len([x for x in recs if "misbehaved" in x]), count)
    got = windows(r.accepted())
    eq("profiles received", sorted(got), [0, 1, 2])
    eq("stats", {k: stats[k] for k in ("submitted", "sent", "retried", "dropped", "failed",
                                       "stop_ret")},
       {"submitted": 3, "sent": 3, "retried": count, "dropped": 0, "failed": 0, "stop_ret": 0})
    # One line per outage, not one per attempt.
    eq("'cannot upload' lines", len(lines_with(stderr, "cannot upload to Pyroscope")), 1)
    check(all("gpuprof" in l for l in stderr), f"unexpected stderr: {stderr}")
    return got


def scenario_slow(a, work):
    # The first answer takes 3 s; requests time out after 500 ms and are retried. The server
    # stores the first copy late, so window_0 may arrive twice: delivery is at least once.
    r = Receiver(work, 0, "--mode", "slow", "--count", "1", "--delay", "3")
    try:
        r.wait_ready()
        port = int(open(r.ready).read())
        env = {"GPUPROF_PYROSCOPE_URL": f"http://127.0.0.1:{port}",
               "GPUPROF_UPLOAD_TIMEOUT": "500ms", "GPUPROF_EXIT_TIMEOUT": "20s"}
        stats, stderr, _ = run_driver(a.driver, env, 3, 0)
        time.sleep(3.5)  # let the slow handler finish and store its copy
    finally:
        r.stop()
    eq("rejected requests", [x for x in r.records() if "rejected" in x], [])
    eq("profiles received", sorted(windows(r.accepted())), [0, 1, 2])
    eq("stats", {k: stats[k] for k in ("submitted", "sent", "retried", "dropped", "failed")},
       {"submitted": 3, "sent": 3, "retried": 1, "dropped": 0, "failed": 0})
    eq("'cannot upload' lines", len(lines_with(stderr, "cannot upload to Pyroscope")), 1)
    check("timed out" in lines_with(stderr, "cannot upload")[0].lower() or
          "timeout" in lines_with(stderr, "cannot upload")[0].lower(),
          f"the warning does not say it timed out: {stderr}")


def scenario_down(a, work):
    port = free_port()  # nothing listens: connection refused
    env = {"GPUPROF_PYROSCOPE_URL": f"http://127.0.0.1:{port}", "GPUPROF_EXIT_TIMEOUT": "1s"}
    stats, stderr, wall = run_driver(a.driver, env, 5, 0)
    eq("stats", {k: stats[k] for k in ("submitted", "sent", "dropped", "failed", "stop_ret")},
       {"submitted": 5, "sent": 0, "dropped": 5, "failed": 0, "stop_ret": ETIMEDOUT})
    check(stats["retried"] >= 1, f"no retries: {stats}")
    stop_bound(stats, 1)
    eq("'cannot upload' lines", len(lines_with(stderr, "cannot upload to Pyroscope")), 1)
    check(f"127.0.0.1:{port}" in lines_with(stderr, "cannot upload")[0], "the URL is not named")
    eq("exit-deadline lines", len(lines_with(stderr, "not uploaded to Pyroscope")), 1)
    check("5 profile(s)" in lines_with(stderr, "not uploaded")[0], stderr)
    eq("stderr lines", len(stderr), 2)


def scenario_down_then_up(a, work):
    # Queue of 4; 10 profiles are submitted while the server is down; it comes up after 2 s.
    # The uploader holds the one it is retrying plus the newest 4; the rest are dropped and
    # counted, and everything it held arrives.
    port = free_port()
    r = Receiver(work, port, "--start-delay", "2")
    try:
        env = {"GPUPROF_PYROSCOPE_URL": f"http://127.0.0.1:{port}", "GPUPROF_UPLOAD_QUEUE": "4",
               "GPUPROF_EXIT_TIMEOUT": "20s"}
        stats, stderr, _ = run_driver(a.driver, env, 10, 0, 4, 20000)
    finally:
        r.stop()
    eq("rejected requests", [x for x in r.records() if "rejected" in x], [])
    got = windows(r.accepted())
    check(stats["sent"] in (4, 5), f"sent {stats['sent']}, expected the queue (4) + the one "
          f"in flight at most: {stats}")
    eq("sent + dropped", stats["sent"] + stats["dropped"], 10)
    eq("failed", stats["failed"], 0)
    eq("received == sent", len(got), stats["sent"])
    check({6, 7, 8, 9} <= set(got), f"the newest 4 profiles did not all arrive: {sorted(got)}")
    eq("each profile once", [len(v) for v in got.values()], [1] * len(got))
    eq("'cannot upload' lines", len(lines_with(stderr, "cannot upload to Pyroscope")), 1)


def scenario_slow_exit(a, work):
    # Every answer takes 30 s, requests may take 60 s: only the exit deadline (1 s) ends them.
    r = Receiver(work, 0, "--mode", "slow", "--count", "1000", "--delay", "30")
    try:
        r.wait_ready()
        port = int(open(r.ready).read())
        env = {"GPUPROF_PYROSCOPE_URL": f"http://127.0.0.1:{port}",
               "GPUPROF_UPLOAD_TIMEOUT": "60s", "GPUPROF_EXIT_TIMEOUT": "1s"}
        stats, stderr, wall = run_driver(a.driver, env, 2, 200)
    finally:
        r.stop()
    eq("stats", {k: stats[k] for k in ("submitted", "sent", "dropped", "failed", "stop_ret")},
       {"submitted": 2, "sent": 0, "dropped": 2, "failed": 0, "stop_ret": ETIMEDOUT})
    stop_bound(stats, 1)
    check(wall < 0.4 + 1 + 2 + 2, f"the driver took {wall:.1f} s to exit")


def scenario_rejected(a, work):
    # The server wants a tenant the driver does not send: 401, a permanent failure.
    r = Receiver(work, 0, "--tenant", "team-a")
    try:
        r.wait_ready()
        port = int(open(r.ready).read())
        env = {"GPUPROF_PYROSCOPE_URL": f"http://127.0.0.1:{port}"}
        stats, stderr, _ = run_driver(a.driver, env, 3, 0)
    finally:
        r.stop()
    eq("accepted", r.accepted(), [])
    eq("stats", {k: stats[k] for k in ("submitted", "sent", "retried", "dropped", "failed",
                                       "stop_ret")},
       {"submitted": 3, "sent": 0, "retried": 0, "dropped": 0, "failed": 3, "stop_ret": 0})
    rej = lines_with(stderr, "rejected a")
    eq("rejection lines", len(rej), 3)
    check("HTTP 401" in rej[0] and "X-Scope-OrgID" in rej[0], f"no status/message: {rej[0]}")


def check_disabled_on_thread(stats, count):
    """The upload thread gave up before sending anything (it checks the URL and loads libcurl
    itself, after uploader_start returned): profiles submitted before that were dropped and
    counted, later ones refused; which of the two each one got depends on timing."""
    eq("stats", {k: stats[k] for k in ("enabled", "sent", "failed", "retried", "stop_ret")},
       {"enabled": 1, "sent": 0, "failed": 0, "retried": 0, "stop_ret": 0})
    eq("dropped == submitted", stats["dropped"], stats["submitted"])
    eq("submitted + refused", stats["submitted"] + stats["submit_errors"], count)


def scenario_bad_url(a, work):
    env = {"GPUPROF_PYROSCOPE_URL": "http://"}
    stats, stderr, _ = run_driver(a.driver, env, 3, 0)
    check_disabled_on_thread(stats, 3)
    bad = [l for l in stderr if "GPUPROF_PYROSCOPE_URL='http://'" in l]
    eq("bad URL lines", len(bad), 1)
    check("not a URL libcurl can parse" in bad[0] and "uploads are off" in bad[0], bad[0])
    eq("stderr lines", len(stderr), 1)


def scenario_url_secrets(a, work):
    """Credentials in the URL (user:password@host, libcurl's basic auth) are used but never
    written to stderr: not in the outage line, not in the exit line, not in a bad-URL line."""
    port = free_port()  # nothing listens: the outage and exit lines name the URL
    env = {"GPUPROF_PYROSCOPE_URL": f"http://alice:s3cr3t-token@127.0.0.1:{port}/prefix",
           "GPUPROF_EXIT_TIMEOUT": "1s"}
    stats, stderr, _ = run_driver(a.driver, env, 2, 0)
    eq("stats", {k: stats[k] for k in ("submitted", "sent", "dropped", "stop_ret")},
       {"submitted": 2, "sent": 0, "dropped": 2, "stop_ret": ETIMEDOUT})
    eq("'cannot upload' lines", len(lines_with(stderr, "cannot upload to Pyroscope")), 1)
    check(f"127.0.0.1:{port}/prefix" in lines_with(stderr, "cannot upload")[0],
          "the URL is not named")
    eq("lines with the password", lines_with(stderr, "s3cr3t"), [])
    eq("lines with the user", lines_with(stderr, "alice"), [])
    # Rejected by the configuration (scheme), by libcurl's parser (on the thread).
    for url in ("HTTPX://alice:s3cr3t-token@example.com", "http://alice:s3cr3t-token@[::1"):
        stats, stderr, _ = run_driver(a.driver, {"GPUPROF_PYROSCOPE_URL": url}, 1, 0)
        eq(f"{url}: lines naming GPUPROF_PYROSCOPE_URL",
           len(lines_with(stderr, "GPUPROF_PYROSCOPE_URL")), 1)
        eq(f"{url}: lines with the password", lines_with(stderr, "s3cr3t"), [])
        eq(f"{url}: sent", stats["sent"], 0)


def scenario_url_query(a, work):
    """A query or fragment in the base URL would end up in front of the API path
    (?k=v/push.v1...): every upload would be refused. One line at start; uploads off."""
    r = Receiver(work, 0)
    try:
        r.wait_ready()
        port = int(open(r.ready).read())
        env = {"GPUPROF_PYROSCOPE_URL": f"http://127.0.0.1:{port}/?token=s3cr3t"}
        stats, stderr, _ = run_driver(a.driver, env, 3, 0)
    finally:
        r.stop()
    eq("requests received", r.records(), [])
    check_disabled_on_thread(stats, 3)
    eq("stderr lines", len(stderr), 1)
    check("query" in stderr[0] and "uploads are off" in stderr[0], stderr[0])
    eq("lines with the query's value", lines_with(stderr, "s3cr3t"), [])


def scenario_header_values(a, work):
    """Values that go into request headers, as Kubernetes secrets made with `echo` give them:
    a trailing newline is not part of the value (it would end the headers early and turn the
    request into garbage); another control character is reported and the value not used."""
    r = Receiver(work, 0, "--tenant", "team-a", "--user", "1234", "--password", "tok")
    try:
        r.wait_ready()
        port = int(open(r.ready).read())
        env = {"GPUPROF_PYROSCOPE_URL": f"http://127.0.0.1:{port}",
               "GPUPROF_PYROSCOPE_TENANT": "team-a\n", "GPUPROF_PYROSCOPE_USER": "1234\r\n",
               "GPUPROF_PYROSCOPE_PASSWORD": "tok\n"}
        stats, stderr, _ = run_driver(a.driver, env, 2, 0)
        eq("stderr", stderr, [])
        eq("stats", {k: stats[k] for k in ("sent", "failed")}, {"sent": 2, "failed": 0})
        eq("tenant header", [x["tenant"] for x in r.accepted()], ["team-a", "team-a"])
        env["GPUPROF_PYROSCOPE_TENANT"] = "team-a\r\nX-Injected: 1"
        env["GPUPROF_PYROSCOPE_PASSWORD"] = "t\tok"
        stats, stderr, _ = run_driver(a.driver, env, 1, 0)
    finally:
        r.stop()
    eq("stderr lines", len(stderr), 3)  # the tenant, the password, the server's 401
    eq("lines naming the tenant", len(lines_with(stderr, "GPUPROF_PYROSCOPE_TENANT ")), 1)
    eq("lines naming the password", len(lines_with(stderr, "GPUPROF_PYROSCOPE_PASSWORD ")), 1)
    eq("lines with the password", lines_with(stderr, "t\tok"), [])
    eq("stats", {k: stats[k] for k in ("sent", "failed")}, {"sent": 0, "failed": 1})
    check(not any("X-Injected" in str(x) for x in r.records()), "the header was injected")


def scenario_huge_durations(a, work):
    """Durations past a year are refused by name (now + 5124095h wraps around 2^64 ns: the
    exit deadline would be in the past, a flush deadline would make the worker spin)."""
    port = free_port()  # nothing listens
    env = {"GPUPROF_PYROSCOPE_URL": f"http://127.0.0.1:{port}",
           "GPUPROF_EXIT_TIMEOUT": "5124095h", "GPUPROF_UPLOAD_TIMEOUT": "5124095h",
           "GPUPROF_FLUSH_INTERVAL": "5124095h", "GPUPROF_WINDOW": "8785h",
           "GPUPROF_OOM_INTERVAL": "5124095h", "GPUPROF_CAPTURE_ON_START": "5124095h"}
    stats, stderr, _ = run_driver(a.driver, env, 1, 0)
    for var in env:
        if var != "GPUPROF_PYROSCOPE_URL":
            eq(f"lines naming {var}", len(lines_with(stderr, f"{var}='")), 1)
    # The default exit deadline (3 s) was used: the profile was retried until then.
    eq("stats", {k: stats[k] for k in ("submitted", "sent", "dropped", "stop_ret")},
       {"submitted": 1, "sent": 0, "dropped": 1, "stop_ret": ETIMEDOUT})
    check(stats["stop_ms"] >= 2500, f"the exit deadline was not 3 s: {stats}")
    stop_bound(stats, 3)


def scenario_long_window(a, work):
    """Windows of an hour are stamped with their start and uploaded after their end: older
    than Pyroscope accepts, so each would be dropped unsent. Said once, at start."""
    port = free_port()
    env = {"GPUPROF_PYROSCOPE_URL": f"http://127.0.0.1:{port}", "GPUPROF_WINDOW": "1h",
           "GPUPROF_EXIT_TIMEOUT": "0"}
    _, stderr, _ = run_driver(a.driver, env, 0, 0)
    eq("lines naming GPUPROF_WINDOW", len(lines_with(stderr, "GPUPROF_WINDOW=3600s")), 1)
    env["GPUPROF_WINDOW"] = "30m"
    _, stderr, _ = run_driver(a.driver, env, 0, 0)
    eq("stderr with 30m windows", stderr, [])


def scenario_no_libcurl(a, work):
    """GPUPROF_TEST_CURL_PATH names a library that does not exist: one line naming it,
    libcurl.so.4 and the Debian package; nothing is sent, nothing crashes."""
    missing = os.path.join(work, "no-such-dir", "libcurl.so.4")
    r = Receiver(work, 0)
    try:
        r.wait_ready()
        port = int(open(r.ready).read())
        env = {"GPUPROF_PYROSCOPE_URL": f"http://127.0.0.1:{port}",
               "GPUPROF_TEST_CURL_PATH": missing}
        stats, stderr, _ = run_driver(a.driver, env, 3, 0)
    finally:
        r.stop()
    eq("requests received", r.records(), [])
    check_disabled_on_thread(stats, 3)
    eq("stderr lines", len(stderr), 1)
    for text in (missing, "libcurl.so.4", "package libcurl4", "uploads are off"):
        check(text in stderr[0], f"the line does not say {text!r}: {stderr[0]}")


def scenario_bad_values(a, work):
    r = Receiver(work, 0)
    try:
        r.wait_ready()
        port = int(open(r.ready).read())
        env = {"GPUPROF_PYROSCOPE_URL": f"http://127.0.0.1:{port}", "GPUPROF_UPLOAD_QUEUE": "0",
               "GPUPROF_UPLOAD_TIMEOUT": "fast", "GPUPROF_PYROSCOPE_API": "grpc",
               "GPUPROF_EXIT_TIMEOUT": "soon", "GPUPROF_TAGS": "bad-key=1,good=2",
               "GPUPROF_PYROSCOPE_USER": "u",
               "GPUPROF_PYROSCOPE_PASSWORD_FILE": os.path.join(work, "missing-secret")}
        stats, stderr, _ = run_driver(a.driver, env, 3, 0)
    finally:
        r.stop()
    for var in ("GPUPROF_UPLOAD_QUEUE='0'", "GPUPROF_UPLOAD_TIMEOUT='fast'",
                "GPUPROF_PYROSCOPE_API='grpc'", "GPUPROF_EXIT_TIMEOUT='soon'", "'bad-key'",
                "GPUPROF_PYROSCOPE_PASSWORD_FILE='" + os.path.join(work, "missing-secret")):
        eq(f"lines naming {var}", len(lines_with(stderr, var)), 1)
    eq("stderr lines", len(stderr), 6)
    eq("sent", stats["sent"], 3)
    for x in r.accepted():
        eq("labels", x["labels"]["good"], "2")
        check("bad-key" not in x["labels"], x["labels"])


INGEST_URL_MAX = 8192  # export/pyroscope.c: the longest request URL, the NUL included


def scenario_ingest_long_labels(a, work):
    """/ingest carries every label in the URL. Many long tags and Kubernetes values (escaped
    '/' triples a byte) do not fit in one: the last labels are left out, with one line naming
    them, and every profile is still sent with the others (instead of none at all)."""
    from urllib.parse import quote
    r = Receiver(work, 0)
    try:
        r.wait_ready()
        port = int(open(r.ready).read())
        base = f"http://127.0.0.1:{port}"
        # 23 tags + 3 Kubernetes labels: the most /ingest can carry (scenario_label_limits).
        tags = [(f"t{i:02d}", ("v/" * 95)[:190]) for i in range(23)]
        k8s = [("pod", "trainer-" + "p" * 200), ("namespace", "ml/" * 60),
               ("node", "gpu-node-" + "n" * 200)]
        env = {"GPUPROF_PYROSCOPE_URL": base, "GPUPROF_PYROSCOPE_API": "ingest",
               "GPUPROF_APP_NAME": "trainer",
               "GPUPROF_TAGS": ",".join(f"{k}={v}" for k, v in tags),
               "GPUPROF_K8S_POD": k8s[0][1], "GPUPROF_K8S_NAMESPACE": k8s[1][1],
               "GPUPROF_K8S_NODE": k8s[2][1]}
        stats, stderr, _ = run_driver(a.driver, env, 3, 0)
    finally:
        r.stop()
    # The labels kept: the longest prefix (in the documented order) whose URL fits, with
    # from/until counted at their widest (20 digits each).
    labels = tags + k8s
    keep = len(labels)
    while keep:
        name = "trainer{" + ",".join(f"{k}={v}" for k, v in labels[:keep]) + "}"
        length = (len(base) + len("/ingest?name=") + len(quote(name, safe="-._~")) +
                  len("&from=&until=&spyName=gpuprof") + 40)
        if len(name) < 4096 and length < INGEST_URL_MAX:
            break
        keep -= 1
    check(0 < keep < len(labels), f"the test's labels should partly fit: {keep}")
    left_out = [k for k, _ in labels[keep:]]
    eq("stderr lines", len(stderr), 1)
    check("GPUPROF_PYROSCOPE_API=ingest" in stderr[0] and ", ".join(left_out) in stderr[0],
          f"the line does not name the API and the labels left out {left_out}: {stderr[0]}")
    eq("stats", {k: stats[k] for k in ("submitted", "sent", "dropped", "failed", "stop_ret")},
       {"submitted": 3, "sent": 3, "dropped": 0, "failed": 0, "stop_ret": 0})
    acc = r.accepted()
    eq("profiles received", sorted(windows(acc)), [0, 1, 2])
    for x in acc:
        want = dict(labels[:keep], service_name="trainer", __name__=x["labels"]["__name__"])
        eq("labels", x["labels"], want)


def scenario_ingest_k8s_value(a, work):
    """A Kubernetes label value the {k=v} syntax cannot carry (',' '{' '}' '=') is left out
    with one line naming its variable, like such a tag; the profiles are still sent."""
    r = Receiver(work, 0)
    try:
        r.wait_ready()
        port = int(open(r.ready).read())
        env = {"GPUPROF_PYROSCOPE_URL": f"http://127.0.0.1:{port}",
               "GPUPROF_PYROSCOPE_API": "ingest", "GPUPROF_APP_NAME": "trainer",
               "GPUPROF_K8S_POD": "trainer-0,rank=1", "GPUPROF_K8S_NODE": "gpu-node-7"}
        stats, stderr, _ = run_driver(a.driver, env, 3, 0)
    finally:
        r.stop()
    eq("stderr lines", len(stderr), 1)
    check("GPUPROF_K8S_POD" in stderr[0], f"the line does not name GPUPROF_K8S_POD: {stderr[0]}")
    eq("stats", {k: stats[k] for k in ("submitted", "sent", "dropped", "failed", "stop_ret")},
       {"submitted": 3, "sent": 3, "dropped": 0, "failed": 0, "stop_ret": 0})
    for x in r.accepted():
        eq("labels", x["labels"], {"service_name": "trainer", "node": "gpu-node-7",
                                   "__name__": x["labels"]["__name__"]})


def scenario_label_limits(a, work):
    """Series labels the server would refuse even though each is valid on its own: tags whose
    names meet once Pyroscope turns '.' into '_' ('a.b' and 'a_b' with different values), and,
    on /ingest, a label set that fits the 30-label limit only without the pyroscope_spy label
    the server adds. The extra labels are left out with one line each; every profile is sent
    (instead of every upload failing)."""
    for api, tags, keep in (
            ("push", [("a.b", "1"), ("a_b", "2"), ("c", "3")], [("a.b", "1"), ("c", "3")]),
            ("ingest", [(f"t{i:02d}", "x") for i in range(27)],
             [(f"t{i:02d}", "x") for i in range(26)])):
        r = Receiver(work, 0)
        try:
            r.wait_ready()
            port = int(open(r.ready).read())
            env = {"GPUPROF_PYROSCOPE_URL": f"http://127.0.0.1:{port}",
                   "GPUPROF_PYROSCOPE_API": api, "GPUPROF_APP_NAME": "trainer",
                   "GPUPROF_TAGS": ",".join(f"{k}={v}" for k, v in tags)}
            stats, stderr, _ = run_driver(a.driver, env, 3, 0)
        finally:
            r.stop()
        eq(f"{api}: rejected requests", [x for x in r.records() if "rejected" in x], [])
        eq(f"{api}: stats",
           {k: stats[k] for k in ("submitted", "sent", "dropped", "failed", "stop_ret")},
           {"submitted": 3, "sent": 3, "dropped": 0, "failed": 0, "stop_ret": 0})
        eq(f"{api}: stderr lines", len(stderr), 1)
        left = [k for k, _ in tags if (k, dict(tags)[k]) not in keep]
        check(left[0] in stderr[0], f"{api}: the line does not name '{left[0]}': {stderr[0]}")
        for x in r.accepted():
            want = dict(keep, service_name="trainer", __name__=x["labels"]["__name__"])
            if api == "push":
                want["__delta__"] = "false"
            eq(f"{api}: labels", x["labels"], want)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("scenario")
    a = ap.parse_args()
    work = os.path.join(a.workdir, a.scenario)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    table = {
        "push_ok": lambda: scenario_ok(a, work, "push"),
        "ingest_ok": lambda: scenario_ok(a, work, "ingest"),
        "exit_only_push": lambda: scenario_exit_only(a, work, "push"),
        "exit_only_ingest": lambda: scenario_exit_only(a, work, "ingest"),
        "server_500": lambda: scenario_transient(a, work, "500", 3),
        "server_429": lambda: scenario_transient(a, work, "429", 2),
        "slow": lambda: scenario_slow(a, work),
        "down": lambda: scenario_down(a, work),
        "down_then_up": lambda: scenario_down_then_up(a, work),
        "slow_exit": lambda: scenario_slow_exit(a, work),
        "rejected": lambda: scenario_rejected(a, work),
        "bad_url": lambda: scenario_bad_url(a, work),
        "bad_values": lambda: scenario_bad_values(a, work),
        "no_libcurl": lambda: scenario_no_libcurl(a, work),
        "url_secrets": lambda: scenario_url_secrets(a, work),
        "url_query": lambda: scenario_url_query(a, work),
        "header_values": lambda: scenario_header_values(a, work),
        "huge_durations": lambda: scenario_huge_durations(a, work),
        "long_window": lambda: scenario_long_window(a, work),
        "ingest_long_labels": lambda: scenario_ingest_long_labels(a, work),
        "ingest_k8s_value": lambda: scenario_ingest_k8s_value(a, work),
        "label_limits": lambda: scenario_label_limits(a, work),
    }
    try:
        table[a.scenario]()
    except Failed as e:
        print(f"FAIL {a.scenario}: {e}", file=sys.stderr)
        return 1
    print(f"ok {a.scenario}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

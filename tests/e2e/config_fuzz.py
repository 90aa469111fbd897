#!/usr/bin/env python3
"""Bad configuration never harms the application: every GPUPROF_* variable, hostile values.

Usage (from ctest, see tests/e2e/CMakeLists.txt; the environment is gpuprof_add_e2e_test's):
    config_fuzz.py --source-dir DIR -- PROGRAM [ARGS...]

The variables are the agent's own list (known_vars in agent/config.c), so a new one is fuzzed
without touching this file; the test fails while that list and the table of
docs/CONFIGURATION.md differ, or while a variable has no entry in SPECS below (what the doc
allows for it). Each hostile value is given to groups of variables at once (one process run
per group and value): every agent line names its variable, so the lines can be told apart.

For every run: exit status and stdout are those of the run without the agent, no sanitizer
report, no hang, every stderr line is a whole "gpuprof:" line (a value with a newline must not
split one), few lines in all; per variable: a value the doc does not allow gets exactly one
line naming the variable and quoting the value (never a secret's), a value it allows gets no
line. Secrets (the Pyroscope password, the password file's content, the URL's credentials and
query) never appear on stderr or stdout.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys

RUN_TIMEOUT_S = 25  # a hang guard, not a performance assertion
SANITIZER_BANNERS = (b"ERROR: AddressSanitizer", b"ERROR: LeakSanitizer",
                     b"WARNING: ThreadSanitizer", b"ERROR: ThreadSanitizer", b"runtime error:",
                     b"SUMMARY: UndefinedBehaviorSanitizer")
# A program-side failure (tests/lib/e2e.h prints "e2e: ..." when a CUDA call fails).
PROGRAM_FAILURE = b"e2e:"
GROUP_MAX = 16  # variables per run
LINES_PER_VAR = 2  # at most, a config line plus one where the value is used (a path)

K, M, G, T = 1 << 10, 1 << 20, 1 << 30, 1 << 40
NS = {"ns": 1, "us": 1000, "ms": 10**6, "s": 10**9, "": 10**9, "m": 60 * 10**9,
      "min": 60 * 10**9, "h": 3600 * 10**9}
MAX_DURATION_NS = 366 * 86400 * 10**9
SIZE_UNITS = {"": 1, "b": 1, "k": K, "kb": K, "kib": K, "m": M, "mb": M, "mib": M, "g": G,
              "gb": G, "gib": G, "t": T, "tb": T, "tib": T}


# ---- what docs/CONFIGURATION.md allows, per kind of value ----

def s(v):
    return v.decode("latin-1")


def duration(lo_ns=0, hi_ns=MAX_DURATION_NS, zero=False):
    def ok(v):
        m = re.fullmatch(r"([0-9]+)(ns|us|ms|s|m|min|h|)", s(v))
        if not m:
            return False
        ns = int(m.group(1)) * NS[m.group(2)]
        return (zero and ns == 0) or lo_ns <= ns <= hi_ns
    return ok


def size(lo, hi):
    def ok(v):
        m = re.fullmatch(r"([0-9]+)([A-Za-z]*)", s(v))
        if not m or m.group(2).lower() not in SIZE_UNITS:
            return False
        return lo <= int(m.group(1)) * SIZE_UNITS[m.group(2).lower()] <= hi
    return ok


def uint(lo, hi):
    return lambda v: bool(re.fullmatch(r"[0-9]+", s(v))) and lo <= int(v) <= hi


def choice(*names):
    return lambda v: s(v).lower() in names


BOOL = choice("1", "0", "true", "false", "yes", "no", "on", "off")


def text(cap):
    return lambda v: len(v) < cap


def label(cap):
    """A value uploaded as a Pyroscope label: no control characters (another series)."""
    return lambda v: len(v) < cap and not re.search(rb"[\x00-\x1f\x7f]", v)


def header(cap):
    def ok(v):
        v = v.rstrip(b"\r\n")
        return len(v) < cap and not any(c < 0x20 or c == 0x7f for c in v)
    return ok


def tenant(v):
    """A tenant ID as Pyroscope takes it (dskit ValidTenantID): at most 150 of A-Z a-z 0-9
    ! - _ . * ' ( ), not "." or ".."; a trailing newline is not part of it."""
    v = v.rstrip(b"\r\n")
    return (bool(re.fullmatch(rb"[A-Za-z0-9!\-_.*'()]{1,150}", v)) and v not in (b".", b".."))


def url(v):
    """http(s), a base URL: no ?query or #fragment; no control characters."""
    return ((v.startswith(b"http://") or v.startswith(b"https://")) and len(v) < 4096
            and not re.search(rb"[?#\x00-\x1f\x7f]", v))


def tags(v):
    pairs = v.split(b",")
    if len(pairs) > 32:
        return False
    for p in pairs:
        key, eq, value = p.partition(b"=")
        if not eq or not re.fullmatch(rb"[A-Za-z0-9_.-]{1,63}", key) or len(value) > 191:
            return False
        if re.search(rb"[\x00-\x1f\x7f]", value):
            return False
    return True


def capture_signal(v):
    m = re.fullmatch(r"(?:SIG)?(USR1|USR2|RTMIN(?:\+[0-9]+)?)", s(v), re.I)
    return bool(m) or (bool(re.fullmatch(r"[0-9]+", s(v))) and int(v) in (10, 12, *range(34, 65)))


def path(v):
    """A path the agent uses later: no control characters (its messages would quote them)."""
    return len(v) < 4096 and not re.search(rb"[\x00-\x1f\x7f]", v)


PATH = path
ANY = lambda v: True  # noqa: E731

# Per variable: (does the doc allow this value, kind). Kinds: "used" (an allowed value may
# still fail where it is used, a path that cannot be created say: one line naming it may
# follow), "secret" (its value is never shown), "plain".
SPECS = {
    "GPUPROF_MODE": (choice("continuous", "ondemand", "off"), "plain"),
    "GPUPROF_OUTPUT_DIR": (PATH, "used"),
    "GPUPROF_LOG": (choice("error", "warn", "info", "debug"), "plain"),
    "GPUPROF_WINDOW": (duration(10**9), "plain"),
    "GPUPROF_STACKS": (choice("off", "alloc", "sampled", "all"), "plain"),
    "GPUPROF_CAPTURE_ON_START": (duration(1, 24 * 3600 * 10**9), "plain"),
    "GPUPROF_GPU_ONLY": (BOOL, "plain"),
    "GPUPROF_NVTX": (BOOL, "plain"),
    "GPUPROF_TRACE_FORMAT": (choice("json", "json.gz", "perfetto"), "plain"),
    "GPUPROF_RUN_DIR": (PATH, "used"),
    "GPUPROF_PYROSCOPE_URL": (url, "secret"),
    "GPUPROF_APP_NAME": (label(256), "plain"),
    "GPUPROF_TAGS": (tags, "plain"),
    "GPUPROF_PYROSCOPE_API": (choice("push", "ingest"), "plain"),
    "GPUPROF_PYROSCOPE_USER": (header(256), "plain"),
    "GPUPROF_PYROSCOPE_PASSWORD": (header(1024), "secret"),
    "GPUPROF_PYROSCOPE_PASSWORD_FILE": (text(4096), "used"),  # read at once, quoted
    "GPUPROF_PYROSCOPE_TENANT": (tenant, "plain"),
    "GPUPROF_UPLOAD_TIMEOUT": (duration(10**8), "plain"),
    "GPUPROF_UPLOAD_QUEUE": (uint(1, 4096), "plain"),
    "GPUPROF_PYROSCOPE_MAX_SAMPLES": (uint(1, G), "plain"),
    "GPUPROF_PYROSCOPE_MAX_SIZE": (size(64 * K, G), "plain"),
    "GPUPROF_EXIT_TIMEOUT": (duration(0), "used"),
    "GPUPROF_K8S_POD": (label(256), "plain"),
    "GPUPROF_K8S_NAMESPACE": (label(256), "plain"),
    "GPUPROF_K8S_NODE": (label(256), "plain"),
    "GPUPROF_CUPTI_PATH": (PATH, "used"),
    "GPUPROF_TEST_CUPTI_WHEELS_ONLY": (BOOL, "plain"),
    "GPUPROF_TEST_CURL_PATH": (PATH, "used"),
    "GPUPROF_SUMMARY_FILE": (PATH, "used"),
    "GPUPROF_BUFFER_SIZE": (size(64 * K, G), "plain"),
    "GPUPROF_BUFFER_LIMIT": (size(64 * K, 64 * G), "plain"),
    "GPUPROF_FLUSH_INTERVAL": (duration(10**6), "plain"),
    "GPUPROF_CORR_TABLE_SIZE": (size(K, 16 * M), "plain"),
    "GPUPROF_STACK_DEPTH": (uint(1, 128), "plain"),
    "GPUPROF_STACK_SAMPLE_EVERY": (uint(1, 1 << 20), "plain"),
    "GPUPROF_STACK_SAMPLE_SEED": (uint(1, (1 << 64) - 1), "plain"),
    "GPUPROF_STACK_TABLE_SIZE": (size(64 * K, 4 * G), "plain"),
    "GPUPROF_STACK_PYTHON": (BOOL, "plain"),
    "GPUPROF_STACK_UNWIND": (choice("fast", "safe"), "plain"),
    "GPUPROF_PROFILE_FILES": (BOOL, "plain"),
    "GPUPROF_TRACE_MAX_SIZE": (size(M, T), "plain"),
    "GPUPROF_CAPTURE_SIGNAL": (capture_signal, "plain"),
    "GPUPROF_OOM_INTERVAL": (duration(10**9, zero=True), "plain"),
    "GPUPROF_AGENT": (ANY, "plain"),  # the CLI's; the agent ignores it
}

# Documented in the prose of docs/CONFIGURATION.md, not in its table (test-only, CLI-only).
PROSE_ONLY = {"GPUPROF_AGENT", "GPUPROF_TEST_CUPTI_WHEELS_ONLY", "GPUPROF_TEST_CURL_PATH"}
# Each changes what the whole agent does (an unloadable CUPTI makes it inactive, hiding the
# use-time lines of the others): alone in its runs.
SOLO = {"GPUPROF_CUPTI_PATH"}
# Pairs with a line naming both when both are set: never in one run.
APART = [("GPUPROF_PYROSCOPE_PASSWORD", "GPUPROF_PYROSCOPE_PASSWORD_FILE"),
         ("GPUPROF_BUFFER_SIZE", "GPUPROF_BUFFER_LIMIT")]


def hostile_values(work):
    return [
        ("empty", b""),
        ("whitespace", b" \t "),
        ("minus one", b"-1"),
        ("zero", b"0"),
        ("2^64", b"18446744073709551616"),
        ("1e309", b"1e309"),
        ("huge size", b"9999999999999999999999T"),
        ("10000 bytes", b"x" * 10000),
        ("invalid UTF-8", b"\xff\xfe\xc3\x28bad"),
        ("newline and control characters", b"bad\nvalue\r\x01\x1b[31m\x7f"),
        ("key=value with a newline", b"team=ml\nops"),
        ("format string", b"%s%n%x%p%s%s%s%n"),
        ("path into /proc", b"/proc/gpuprof-fuzz/sub"),
        ("path below a file", b"/dev/null/gpuprof-fuzz"),
        ("failing path with a newline", b"/proc/gpuprof\nfuzz"),
        ("relative path", b"fuzz-relative/dir"),
        ("symlink loop", os.fsencode(os.path.join(work, "loop", "sub"))),
    ]


# ---- the two lists of variables ----

def known_vars(source_dir):
    with open(os.path.join(source_dir, "agent", "config.c"), encoding="utf-8") as f:
        src = f.read()
    m = re.search(r"known_vars\[\]\s*=\s*\{(.*?)\};", src, re.S)
    if not m:
        raise SystemExit("config_fuzz: no known_vars[] in agent/config.c")
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    return re.findall(r'"(GPUPROF_[A-Z0-9_]+)"', body)


def documented_vars(source_dir):
    """(names in the table of docs/CONFIGURATION.md, the whole text)."""
    with open(os.path.join(source_dir, "docs", "CONFIGURATION.md"), encoding="utf-8") as f:
        doc = f.read()
    names = []
    for line in doc.splitlines():
        if line.startswith("| `GPUPROF_"):
            first_cell = line.split("|")[1]
            names += re.findall(r"`(GPUPROF_[A-Z0-9_]+)`", first_cell)
    return names, doc


# ---- running ----

class Run:
    def __init__(self, argv, env, cwd):
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        self.timed_out = False
        try:
            self.stdout, self.stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            self.stdout, self.stderr = proc.communicate()
        self.rc = proc.returncode
        self.lines = self.stderr.splitlines()
        self.agent_lines = [l for l in self.lines if l.startswith(b"gpuprof")]
        self.summary = None


def shown(value):
    """How the agent quotes a value: control bytes as \\xNN (agent/config.c, quote())."""
    return b"".join(b"\\x%02x" % c if c < 0x20 or c == 0x7f else bytes([c]) for c in value)


def names_var(line, var):
    return re.search(rb"(?<![A-Z0-9_])" + var.encode() + rb"(?![A-Z0-9_])", line) is not None


def make_groups(names):
    groups = [[v] for v in names if v in SOLO]
    shared = []
    for var in (v for v in names if v not in SOLO):
        for g in shared:
            if len(g) < GROUP_MAX and not any(
                    (var, o) in APART or (o, var) in APART for o in g):
                g.append(var)
                break
        else:
            shared.append([var])
    return groups + shared


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("argv", nargs=argparse.REMAINDER, help="-- program [args...]")
    opts = ap.parse_args()
    argv = opts.argv[1:] if opts.argv[:1] == ["--"] else opts.argv
    failures = []

    def fail(msg):
        failures.append(msg)

    names = known_vars(opts.source_dir)
    table, doc = documented_vars(opts.source_dir)
    for var in sorted(set(names) - set(table) - PROSE_ONLY):
        fail(f"{var} is in agent/config.c known_vars but not in the table of "
             "docs/CONFIGURATION.md")
    for var in sorted(set(table) - set(names)):
        fail(f"{var} is in the table of docs/CONFIGURATION.md but not in known_vars")
    for var in sorted(PROSE_ONLY & set(names)):
        if f"`{var}" not in doc:
            fail(f"{var} (documented outside the table) is not in docs/CONFIGURATION.md")
    for var in names:
        if var not in SPECS:
            fail(f"{var} has no entry in SPECS of tests/e2e/config_fuzz.py (what the doc "
                 "allows): it is fuzzed, but accepted values are not judged")

    work = os.path.realpath(os.environ.get("E2E_WORKDIR") or "config_fuzz.work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    os.symlink("loop", os.path.join(work, "loop"))  # loop -> loop: ELOOP on any use

    base_env = {os.fsencode(k): os.fsencode(v) for k, v in os.environ.items()
                if not k.startswith("GPUPROF_")}
    agent_env = dict(base_env)
    base_env.pop(b"CUDA_INJECTION64_PATH", None)
    base_dir = os.path.join(work, "baseline")
    os.makedirs(base_dir)
    base = Run(argv, base_env, base_dir)
    if base.timed_out or base.rc != 0 or base.lines:
        print(f"config_fuzz: the program without the agent failed (status {base.rc}):")
        print(s(base.stderr))
        return 1

    # (label, {var: value}, {var: secret marker}); run 0 sets nothing: the agent must be
    # active there, or every other run would check an agent that does nothing.
    runs = [("no setting", {}, {})]
    groups = make_groups(names)
    for label, value in hostile_values(work):
        for gi, g in enumerate(groups):
            runs.append((f"{label} / group {gi}", {v: value for v in g}, {}))
    secret = b"gpuprofSECRET"
    for i, tail in enumerate([b"", b"\n", b"\x01\x1b[2J", b"\xff\xfe", b"%s%n"]):
        runs.append((f"password {tail!r}", {"GPUPROF_PYROSCOPE_PASSWORD": secret + tail},
                     {"GPUPROF_PYROSCOPE_PASSWORD": secret}))
    runs.append(("password too long",
                 {"GPUPROF_PYROSCOPE_PASSWORD": secret * 100, "GPUPROF_PYROSCOPE_USER": b"u"},
                 {"GPUPROF_PYROSCOPE_PASSWORD": secret}))
    pw_files = {"control": secret + b"\x01\n", "newline": secret + b"\nsecond line\n",
                "too long": secret * 200, "invalid UTF-8": secret + b"\xff"}
    for name, content in pw_files.items():
        path = os.path.join(work, "pw-" + name.replace(" ", "-"))
        with open(path, "wb") as f:
            f.write(content)
        runs.append((f"password file ({name})",
                     {"GPUPROF_PYROSCOPE_PASSWORD_FILE": os.fsencode(path),
                      "GPUPROF_PYROSCOPE_USER": b"u"}, {"GPUPROF_PYROSCOPE_PASSWORD_FILE": secret}))
    # Port 9 (discard) on loopback: refused, or nothing listens; the upload fails fast.
    for label, u in [("rejected scheme", b"ftp://u:" + secret + b"@127.0.0.1:9/"),
                     ("too long", b"http://u:" + secret + b"@127.0.0.1:9/" + b"p" * 5000),
                     ("query", b"http://127.0.0.1:9/x?token=" + secret),
                     ("control characters", b"http://u:" + secret + b"@127.0.0.1:9/\n\x01"),
                     ("accepted", b"http://u:" + secret + b"@127.0.0.1:9/%s%n")]:
        runs.append((f"URL ({label})", {"GPUPROF_PYROSCOPE_URL": u, "GPUPROF_EXIT_TIMEOUT": b"1s"},
                     {"GPUPROF_PYROSCOPE_URL": secret}))

    def execute(i):
        label, values, secrets = runs[i]
        cwd = os.path.join(work, f"run{i}")
        os.makedirs(cwd)
        env = dict(agent_env)
        # The test's own places, unless fuzzed: nothing lands outside the work dir.
        env[b"GPUPROF_OUTPUT_DIR"] = os.fsencode(os.path.join(cwd, "output"))
        env[b"GPUPROF_RUN_DIR"] = os.fsencode(os.path.join(cwd, "run"))
        env[b"GPUPROF_SUMMARY_FILE"] = os.fsencode(os.path.join(cwd, "summary.json"))
        for var, value in values.items():
            env[var.encode()] = value
        run = Run(argv, env, cwd)
        try:
            with open(os.path.join(cwd, "summary.json"), encoding="utf-8") as f:
                run.summary = json.load(f)
        except OSError:
            pass  # moved or made unwritable by the values under test
        except ValueError as e:
            run.summary = {"state": f"unparsable summary: {e}"}
        return run

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        results = list(pool.map(execute, range(len(runs))))

    first = results[0]
    state = first.summary.get("state") if isinstance(first.summary, dict) else None
    if state != "active" or first.agent_lines:
        fail(f"without any setting the agent is not active ({state}) or complains "
             f"({first.agent_lines!r}): nothing below would be tested")

    accepted_count = rejected_count = 0
    for (label, values, secrets), run in zip(runs, results):
        where = f"[{label}: {', '.join(values)}]"
        before = len(failures)
        if run.timed_out:
            fail(f"{where} still running after {RUN_TIMEOUT_S} s (hang)")
        for banner in SANITIZER_BANNERS:
            if banner in run.stderr:
                fail(f"{where} sanitizer report ({s(banner)})")
        if any(l.startswith(PROGRAM_FAILURE) for l in run.lines):
            fail(f"{where} the program reported a failed CUDA call")
        if run.rc != base.rc:
            fail(f"{where} exit status {run.rc}, without the agent {base.rc}")
        if run.stdout != base.stdout:
            fail(f"{where} stdout differs from the run without the agent: {run.stdout!r}")
        stray = [l for l in run.lines if not l.startswith(b"gpuprof")]
        if stray:
            fail(f"{where} stderr lines that are not whole gpuprof lines: {stray[:3]!r}")
        bound = LINES_PER_VAR * len(values) + 2
        if len(run.agent_lines) > bound:
            fail(f"{where} {len(run.agent_lines)} gpuprof lines, more than {bound}")
        for var, marker in secrets.items():
            if marker in run.stderr or marker in run.stdout:
                fail(f"{where} the secret of {var} is shown")
        for var, value in values.items():
            allows, kind = SPECS.get(var, (None, "plain"))
            lines = [l for l in run.agent_lines if names_var(l, var)]
            if value == b"":  # an empty value counts as unset
                if lines:
                    fail(f"{where} {var}='' (unset) got lines {lines!r}")
                continue
            if allows is None:
                if len(lines) > 1:
                    fail(f"{where} {var}={value[:40]!r}: {len(lines)} lines {lines!r}")
                continue
            if allows(value):
                accepted_count += 1
                limit = 1 if kind == "used" else 0
                if len(lines) > limit:
                    fail(f"{where} {var}={value[:40]!r} is allowed by the doc, yet "
                         f"{len(lines)} lines name it: {lines!r}")
                continue
            rejected_count += 1
            if len(lines) != 1:
                fail(f"{where} {var}={value[:40]!r} is not allowed by the doc: want exactly "
                     f"one line naming it, got {len(lines)}: {lines!r}")
            elif kind != "secret" and shown(value)[:40] not in lines[0]:
                fail(f"{where} the line {lines[0]!r} does not quote the value "
                     f"{shown(value)[:40]!r}")
        state = run.summary.get("state") if isinstance(run.summary, dict) else None
        if state not in (None, "active") and "GPUPROF_CUPTI_PATH" not in values:
            fail(f"{where} the agent is {state} ({run.summary.get('inactive_reason')})")
        if len(failures) > before:
            failures.append(f"{where} stderr was:\n{s(run.stderr)[:3000]}")

    print(f"config_fuzz: {len(names)} variables in {len(groups)} groups, {len(runs)} runs; "
          f"{accepted_count} allowed and {rejected_count} refused values checked")
    if failures:
        print(f"config_fuzz: {len(failures)} failure(s):")
        for msg in failures:
            print("  FAIL " + msg)
        return 1
    print("config_fuzz: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

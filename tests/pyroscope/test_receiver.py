#!/usr/bin/env python3
"""receiver.py's own test: each Pyroscope rule it applies rejects a request that breaks it.

Without this, a receiver that accepted everything would let every uploader test pass.
"""
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def vint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def fld(num, val):
    if isinstance(val, int):
        return vint(num << 3) + vint(val)
    if isinstance(val, str):
        val = val.encode()
    return vint(num << 3 | 2) + vint(len(val)) + val


def profile(strings=("", "gpu_time", "nanoseconds", "f"), types=((1, 2),), values=(5,),
            time_ns=None, period=True, loc_fn=1, mapping=None, loc_mapping=0, fn_extra=b"",
            labels=(), period_type=(1, 2), raw=b"", line=True, address=0):
    """A one-sample profile; the keyword arguments break one rule each."""
    p = b""
    for t, u in types:
        p += fld(1, fld(1, t) + fld(2, u))
    p += fld(2, fld(1, 1) + b"".join(fld(2, v & (2**64 - 1)) for v in values) +
             b"".join(fld(3, lab) for lab in labels))
    if mapping is not None:
        p += fld(3, mapping)
    p += fld(4, fld(1, 1) + (fld(2, loc_mapping) if loc_mapping else b"") +
             (fld(3, address) if address else b"") + (fld(4, fld(1, loc_fn)) if line else b""))
    p += fld(5, fld(1, 1) + fld(2, 3) + fn_extra)
    for s in strings:
        p += fld(6, s)
    p += fld(9, time_ns if time_ns is not None else time.time_ns())
    if period:
        p += fld(11, fld(1, period_type[0]) + fld(2, period_type[1]))
    return gzip.compress(p + raw)


def push(labels, prof, sample_id=None):
    sample = fld(1, prof) + (fld(2, sample_id) if sample_id is not None else b"")
    series = b"".join(fld(1, fld(1, k) + fld(2, v)) for k, v in labels) + fld(2, sample)
    return fld(1, series)


GOOD_LABELS = [("__name__", "gpu"), ("service_name", "svc")]


def multipart(prof, filename=True):
    b = b"XyZbOuNdArY"
    disp = b'form-data; name="profile"' + (b'; filename="p.pb.gz"' if filename else b"")
    body = (b"--" + b + b"\r\nContent-Disposition: " + disp +
            b"\r\nContent-Type: application/octet-stream\r\n\r\n" + prof + b"\r\n--" + b + b"--\r\n")
    return body, "multipart/form-data; boundary=" + b.decode()


def post(port, path, body, ctype, headers=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST",
                                 headers={"Content-Type": ctype, **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def main():
    work = os.path.join(sys.argv[1], "receiver_selftest")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    store, ready = os.path.join(work, "store.jsonl"), os.path.join(work, "ready")
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "receiver.py"), "--store", store,
                             "--ready", ready, "--tenant", "t1"])
    try:
        t = time.time()
        while not os.path.exists(ready):
            assert time.time() - t < 10 and proc.poll() is None, "receiver did not start"
            time.sleep(0.02)
        port = int(open(ready).read())
        P, T = "/push.v1.PusherService/Push", {"X-Scope-OrgID": "t1"}
        proto = "application/proto"
        many = GOOD_LABELS + [(f"l{i}", "x") for i in range(29)]
        cases = [
            # (what, path, body, content type, headers, expected status)
            ("valid push", P, push(GOOD_LABELS, profile()), proto, T, 200),
            ("no tenant", P, push(GOOD_LABELS, profile()), proto, {}, 401),
            # max-profile-size-bytes (4 MiB) applies to the uncompressed profile.
            ("4 MiB uncompressed, within", P,
             push(GOOD_LABELS, profile(strings=("", "gpu_time", "nanoseconds", "f",
                                                "x" * ((4 << 20) - 200)))), proto, T, 200),
            ("over 4 MiB uncompressed", P,
             push(GOOD_LABELS, profile(strings=("", "gpu_time", "nanoseconds", "f",
                                                "x" * (4 << 20)))), proto, T, 400),
            ("no __name__", P, push([("service_name", "svc")], profile()), proto, T, 400),
            ("no service_name", P, push([("__name__", "gpu")], profile()), proto, T, 400),
            ("bad label name", P, push(GOOD_LABELS + [("a-b", "1")], profile()), proto, T, 400),
            ("31 labels", P, push(many, profile()), proto, T, 400),
            ("string_table[0] not empty", P,
             push(GOOD_LABELS, profile(strings=("x", "gpu_time", "nanoseconds", "f"))), proto, T,
             400),
            ("'-' in sample type", P,
             push(GOOD_LABELS, profile(strings=("", "gpu-time", "nanoseconds", "f"))), proto, T,
             400),
            ("value count", P, push(GOOD_LABELS, profile(values=(1, 2))), proto, T, 400),
            ("time 2 h old", P,
             push(GOOD_LABELS, profile(time_ns=time.time_ns() - 7200 * 10**9)), proto, T, 400),
            ("no period_type", P, push(GOOD_LABELS, profile(period=False)), proto, T, 400),
            ("line with unknown function", P, push(GOOD_LABELS, profile(loc_fn=9)), proto, T, 400),
            ("wrong content type", P, push(GOOD_LABELS, profile()), "application/json", T, 415),
            # String indexes the pprof decoder resolves ("malformed profile" when out of range).
            ("mapping filename out of range", P,
             push(GOOD_LABELS, profile(mapping=fld(1, 1) + fld(5, 99))), proto, T, 400),
            ("mapping id 0", P, push(GOOD_LABELS, profile(mapping=fld(5, 3))), proto, T, 400),
            ("function system_name out of range", P,
             push(GOOD_LABELS, profile(fn_extra=fld(3, 99))), proto, T, 400),
            ("period_type out of range", P, push(GOOD_LABELS, profile(period_type=(1, 99))),
             proto, T, 400),
            ("default_sample_type out of range", P, push(GOOD_LABELS, profile(raw=fld(14, 99))),
             proto, T, 400),
            ("label num_unit out of range", P,
             push(GOOD_LABELS, profile(labels=[fld(1, 3) + fld(2, 1) + fld(4, 99)])), proto, T,
             400),
            ("101 labels on a sample", P,
             push(GOOD_LABELS, profile(labels=[fld(1, 3) + fld(2, 1)] * 101)), proto, T, 400),
            ("invalid UTF-8 string", P,
             push(GOOD_LABELS, profile(strings=("", "gpu_time", "nanoseconds", b"f\xff"))), proto,
             T, 400),
            ("time 11 min ahead", P,
             push(GOOD_LABELS, profile(time_ns=time.time_ns() + 660 * 10**9)), proto, T, 400),
            # Series labels (pkg/validation/validate.go ValidateLabels).
            ("duplicate label", P, push(GOOD_LABELS + [("a", "1"), ("a", "2")], profile()), proto,
             T, 400),
            ("'a.b' and 'a_b' differ", P,
             push(GOOD_LABELS + [("a.b", "1"), ("a_b", "2")], profile()), proto, T, 400),
            ("'a.b' and 'a_b' equal", P,
             push(GOOD_LABELS + [("a.b", "1"), ("a_b", "1")], profile()), proto, T, 200),
            ("label value of 2049 bytes", P,
             push(GOOD_LABELS + [("a", "\u00e9" * 1024 + "x")], profile()), proto, T, 400),
            ("label value not UTF-8", P, push(GOOD_LABELS + [("a", b"\xc5")], profile()), proto,
             T, 400),
            ("sample ID not a UUID", P, push(GOOD_LABELS, profile(), "w1"), proto, T, 400),
            ("sample ID a UUID", P,
             push(GOOD_LABELS, profile(), "0f8fad5b-d9cb-469f-a165-70867728950e"), proto, T, 200),
            ("tenant with a space", P, push(GOOD_LABELS, profile()), proto,
             {"X-Scope-OrgID": "t 1"}, 401),
            # Accepted, but Pyroscope's normalisation drops data: recorded as "lost".
            ("negative value", P, push(GOOD_LABELS, profile(values=(-5,))), proto, T, "lost"),
            ("location without line or address", P, push(GOOD_LABELS, profile(line=False)),
             proto, T, "lost"),
            ("location with a missing mapping", P, push(GOOD_LABELS, profile(loc_mapping=7)),
             proto, T, "lost"),
            ("numeric sample label", P,
             push(GOOD_LABELS, profile(labels=[fld(1, 3) + fld(3, 7)])), proto, T, "lost"),
            ("valid ingest", "/ingest?name=svc%7Benv%3Dx%7D", *multipart(profile()), T, 200),
            ("ingest, plain value part", "/ingest?name=svc", *multipart(profile(), False), T, 200),
            ("ingest with format=pprof", "/ingest?name=svc&format=pprof", *multipart(profile()),
             T, 422),
            ("ingest, bad app name", "/ingest?name=a%20b", *multipart(profile()), T, 400),
            ("ingest, bad label", "/ingest?name=svc%7Ba-b%3D1%7D", *multipart(profile()), T, 400),
            ("ingest, spyName=pyspy", "/ingest?name=svc&spyName=pyspy", *multipart(profile()),
             T, "lost"),
            ("ingest, invalid profile", "/ingest?name=svc",
             *multipart(profile(strings=("", "gpu-time", "nanoseconds", "f"))), T, 422),
            # 27 labels + service_name + __name__, __delta__, pyroscope_spy: 31.
            ("ingest, 31 labels in the series", "/ingest?name=svc%7B" +
             "%2C".join(f"l{i}%3Dx" for i in range(27)) + "%7D&spyName=gpuprof",
             *multipart(profile()), T, 422),
            ("ingest, 30 labels in the series", "/ingest?name=svc%7B" +
             "%2C".join(f"l{i}%3Dx" for i in range(26)) + "%7D&spyName=gpuprof",
             *multipart(profile()), T, 200),
        ]
        fails = []
        for what, path, body, ctype, headers, want in cases:
            before = sum(1 for _ in open(store)) if os.path.exists(store) else 0
            got = post(port, path, body, ctype, headers)
            recs = [json.loads(line) for line in open(store)][before:]
            accepted = any("api" in r for r in recs)
            lost = any(r.get("lost") for r in recs)
            ok = (got == 200 and accepted and lost) if want == "lost" else (
                got == want and accepted == (want == 200 and "plain value" not in what)
                and not lost)
            if not ok:
                fails.append(f"{what}: status {got} (want {want}), stored {recs}")
            print(f"{'ok  ' if not fails or not fails[-1].startswith(what) else 'FAIL'} {what}")
    finally:
        proc.terminate()
        proc.wait(5)
    for f in fails:
        print("FAIL", f, file=sys.stderr)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

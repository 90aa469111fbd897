#!/usr/bin/env python3
"""A loopback Pyroscope stand-in: applies Pyroscope's ingestion rules and stores what it accepts.

Endpoints (formats.md §2): POST /push.v1.PusherService/Push (application/proto PushRequest)
and POST /ingest (multipart, file part "profile"). Every accepted profile becomes one JSON line
in --store; every rejected request one line with "rejected" (the tests require none), and the
answer is the status Pyroscope would give. Modes make it misbehave for the first --count
requests: 500, 429 (with Retry-After: 1), slow (answers after --delay seconds); ok never does.
--start-delay waits before listening, so that a client first finds the port closed.

The protobuf messages are decoded by hand from their field numbers (export/proto/push.proto,
export/proto/profile.proto): no Python protobuf module is needed.
"""
import argparse
import base64
import email.parser
import email.policy
import gzip
import hashlib
import json
import os
import re
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_PROFILE_BYTES = 4 << 20   # validation.max-profile-size-bytes
MAX_SAMPLES = 16000           # max-profile-stacktrace-samples
MAX_SAMPLE_LABELS = 100       # max-profile-stacktrace-sample-labels
MAX_LABELS = 30               # max-label-names-per-series
TENANT_CHARS = re.compile(r"^[A-Za-z0-9!\-_.*'()]{1,150}$")  # dskit tenant.ValidTenantID
LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
METRIC_NAME = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]*$")
UUID = re.compile(r"^(urn:uuid:)?\{?[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}\}?$")
APP_NAME = re.compile(r"^[A-Za-z0-9_.\-/]+$")


class Reject(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


# ---- protobuf wire format ----

def varint(buf, pos):
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise Reject(400, "truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise Reject(400, "varint too long")


def fields(buf):
    """Yields (field number, wire type, value) of one message; bytes for length-delimited."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        num, wt = key >> 3, key & 7
        if num == 0:
            raise Reject(400, "field number 0")
        if wt == 0:
            val, pos = varint(buf, pos)
        elif wt == 2:
            n, pos = varint(buf, pos)
            if pos + n > len(buf):
                raise Reject(400, "truncated length-delimited field")
            val, pos = bytes(buf[pos:pos + n]), pos + n
        elif wt == 1:
            val, pos = int.from_bytes(buf[pos:pos + 8], "little"), pos + 8
        elif wt == 5:
            val, pos = int.from_bytes(buf[pos:pos + 4], "little"), pos + 4
        else:
            raise Reject(400, f"wire type {wt}")
        yield num, wt, val


def decode(buf, spec):
    """spec: {field: (name, kind)} with kind 'u' (varint), 's' (string), 'b' (bytes),
    'pu' (repeated varint, packed or not), 'm:<spec>' (repeated message) or 'm1:<spec>'."""
    out = {}
    for num, wt, val in fields(buf):
        if num not in spec:
            continue
        name, kind = spec[num]
        if kind == "u":
            out[name] = val
        elif kind == "s":
            try:
                out.setdefault(name, []).append(val.decode("utf-8"))
            except UnicodeDecodeError:
                raise Reject(400, f"{name}: invalid UTF-8")
        elif kind == "b":
            out[name] = val
        elif kind == "pu":
            lst = out.setdefault(name, [])
            if wt == 2:
                p = 0
                while p < len(val):
                    v, p = varint(val, p)
                    lst.append(v)
            else:
                lst.append(val)
        elif isinstance(kind, tuple) and kind[0] == "m":
            out.setdefault(name, []).append(decode(val, kind[1]))
        elif isinstance(kind, tuple) and kind[0] == "m1":
            out[name] = decode(val, kind[1])
    return out


LABEL_PAIR = {1: ("name", "s"), 2: ("value", "s")}
PUSH_REQUEST = {1: ("series", ("m", {1: ("labels", ("m", LABEL_PAIR)),
                                     2: ("samples", ("m", {1: ("raw_profile", "b"),
                                                           2: ("id", "s")}))}))}
VALUE_TYPE = {1: ("type", "u"), 2: ("unit", "u")}
PROFILE = {
    1: ("sample_type", ("m", VALUE_TYPE)),
    2: ("sample", ("m", {1: ("location_id", "pu"), 2: ("value", "pu"),
                         3: ("label", ("m", {1: ("key", "u"), 2: ("str", "u"), 3: ("num", "u"),
                                             4: ("num_unit", "u")}))})),
    3: ("mapping", ("m", {1: ("id", "u"), 5: ("filename", "u"), 6: ("build_id", "u")})),
    4: ("location", ("m", {1: ("id", "u"), 2: ("mapping_id", "u"), 3: ("address", "u"),
                           4: ("line", ("m", {1: ("function_id", "u"), 2: ("line", "u")}))})),
    5: ("function", ("m", {1: ("id", "u"), 2: ("name", "u"), 3: ("system_name", "u"),
                           4: ("filename", "u")})),
    6: ("string_table", "s"),
    7: ("drop_frames", "u"),
    8: ("keep_frames", "u"),
    9: ("time_nanos", "u"),
    10: ("duration_nanos", "u"),
    11: ("period_type", ("m1", VALUE_TYPE)),
    13: ("comment", "pu"),
    14: ("default_sample_type", "u"),
    15: ("doc_url", "u"),
}


def check_pprof(raw, max_samples=MAX_SAMPLES, check_time=True, max_bytes=MAX_PROFILE_BYTES,
                stack_sums=False):
    """Pyroscope's ValidateProfile and pprof's CheckValid; returns a summary of the profile
    (with stack_sums: each stack's value sums, "frame;frame;...|label=value,...", leaf first)."""
    data = raw
    if raw[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(raw)
        except OSError as e:
            raise Reject(422, f"bad gzip: {e}")
    # validation.max-profile-size-bytes, on the uncompressed profile (pkg/validation).
    if len(data) > max_bytes:
        raise Reject(400, f"profile too large: {len(data)} bytes, over {max_bytes}")
    p = decode(data, PROFILE)
    st = p.get("string_table", [])
    if not st or st[0] != "":
        raise Reject(400, "string_table[0] must be empty")

    def s(i, what):
        if i < 0 or i >= len(st):
            raise Reject(400, f"{what}: string index {i} out of range")
        return st[i]

    types = p.get("sample_type", [])
    if not types:
        raise Reject(400, "empty profile: no sample_type")
    names = [s(t.get("type", 0), "sample_type") for t in types]
    for t in types:
        s(t.get("unit", 0), "sample_type unit")
    for n in names:
        if "-" in n:
            raise Reject(400, f"sample type '{n}' contains '-'")
    samples = p.get("sample", [])
    if len(samples) > max_samples:
        raise Reject(400, f"{len(samples)} samples, over {max_samples}")
    # Every string index the pprof decoder resolves: out of range is "malformed profile".
    if "period_type" not in p:
        raise Reject(400, "no period_type (the profile type id would end in '::')")
    s(p["period_type"].get("type", 0), "period_type")
    s(p["period_type"].get("unit", 0), "period_type unit")
    for field in ("drop_frames", "keep_frames", "default_sample_type", "doc_url"):
        s(p.get(field, 0), field)
    for c in p.get("comment", []):
        s(c, "comment")
    map_ids, fn_ids, loc_ids = set(), set(), set()
    for m in p.get("mapping", []):
        mid = m.get("id", 0)
        if mid == 0 or mid in map_ids:
            raise Reject(400, f"mapping id {mid} zero or repeated")
        map_ids.add(mid)
        s(m.get("filename", 0), "mapping filename")
        s(m.get("build_id", 0), "mapping build_id")
    functions = {}
    for f in p.get("function", []):
        fid = f.get("id", 0)
        if fid == 0 or fid in fn_ids:
            raise Reject(400, f"function id {fid} zero or repeated")
        fn_ids.add(fid)
        functions[fid] = s(f.get("name", 0), "function name")
        s(f.get("system_name", 0), "function system_name")
        s(f.get("filename", 0), "function filename")
    # What Pyroscope's normalisation (pkg/pprof/pprof.go Normalize, sanitizeProfile) silently
    # throws away from an accepted profile: the tests require none of it (Receiver.accepted).
    lost = []
    dropped_locs = set()
    for loc in p.get("location", []):
        lid = loc.get("id", 0)
        if lid == 0 or lid in loc_ids:
            raise Reject(400, f"location id {lid} zero or repeated")
        loc_ids.add(lid)
        for line in loc.get("line", []):
            if line.get("function_id", 0) not in fn_ids:
                raise Reject(400, f"location {lid}: line with unknown function")
        mid = loc.get("mapping_id", 0)
        if not loc.get("line") and not loc.get("address", 0):
            dropped_locs.add(lid)
            lost.append(f"location {lid} has neither lines nor an address: its samples are dropped")
        elif mid and mid not in map_ids:
            dropped_locs.add(lid)
            lost.append(f"location {lid} refers to mapping {mid}, which does not exist: its "
                        "samples are dropped")
    leaves, kept = [], []
    zero = 0
    for smp in samples:
        vals = [v - (1 << 64) if v >= 1 << 63 else v for v in smp.get("value", [])]
        smp["value"] = vals
        if len(vals) != len(types):
            raise Reject(400, "sample value count differs from sample_type count")
        locs = smp.get("location_id", [])
        for lid in locs:
            if lid not in loc_ids:
                raise Reject(400, f"sample has unknown location {lid}")
        labels = smp.get("label", [])
        if len(labels) > MAX_SAMPLE_LABELS:
            raise Reject(400, f"a sample has {len(labels)} labels, over {MAX_SAMPLE_LABELS}")
        for lab in labels:
            s(lab.get("key", 0), "label key")
            s(lab.get("str", 0), "label str")
            s(lab.get("num_unit", 0), "label num_unit")
            if not lab.get("str", 0):
                lost.append(f"sample label '{st[lab.get('key', 0)]}' has no string value: dropped")
        if any(v < 0 for v in vals):
            lost.append(f"a sample with a negative value {vals} is dropped")
            continue
        if not any(v > 0 for v in vals):
            zero += 1  # all zero: dropped, but nothing is lost
            continue
        if dropped_locs.intersection(locs):
            continue
        kept.append(smp)
        if locs:
            leaves.append(locs[0])
    loc_fn = {loc["id"]: [functions[line["function_id"]] for line in loc.get("line", [])]
              for loc in p.get("location", [])}
    t = p.get("time_nanos", 0)
    t = t - (1 << 64) if t >= 1 << 63 else t
    now = time.time_ns()
    # validation.go ingestionWindow.valid: strictly after now-1h and strictly before now+10m.
    if check_time and t > 0 and not (now - 3600 * 10**9 < t < now + 600 * 10**9):
        raise Reject(400, f"time_nanos {t} outside (now-1h, now+10m)")
    # The values as stored: what Pyroscope keeps after dropping samples (sums of all samples
    # would hide a dropped one).
    sums = [sum(smp["value"][i] for smp in kept) for i in range(len(types))]
    out = {}
    if stack_sums:
        # Location ids differ between profiles: a frame is named by its functions (or address).
        loc_addr = {loc["id"]: f"0x{loc.get('address', 0):x}" for loc in p.get("location", [])}
        by_stack = {}
        for smp in kept:
            frames = ";".join("+".join(loc_fn.get(lid) or [loc_addr[lid]])
                              for lid in smp.get("location_id", []))
            labs = ",".join(sorted(f"{st[lab.get('key', 0)]}={st[lab.get('str', 0)]}"
                                   for lab in smp.get("label", [])))
            acc = by_stack.setdefault(f"{frames}|{labs}", [0] * len(types))
            for i, v in enumerate(smp["value"]):
                acc[i] += v
        out["stack_sums"] = by_stack
    return {**out, "sample_types": names, "n_samples": len(samples), "value_sums": sums,
            "raw_bytes": len(data),
            "zero_samples": zero, "lost": lost[:10],
            "functions": sorted(set(functions.values())),
            "leaf_functions": [f for lid in leaves for f in loc_fn.get(lid, [])[:1]],
            "time_nanos": t, "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}


# ---- requests ----

def check_labels(labels):
    names = [lab.get("name", [""])[0] for lab in labels]
    values = [lab.get("value", [""])[0] for lab in labels]
    if len(names) > MAX_LABELS:
        raise Reject(400, f"{len(names)} labels, over {MAX_LABELS}")
    if len(set(names)) != len(names):
        raise Reject(400, f"duplicate label names in {names}")
    for n, v in zip(names, values):
        # Go's len(): bytes, not characters.
        if not LABEL_NAME.match(n) or len(n.encode()) > 1024:
            raise Reject(400, f"invalid label name '{n}'")
        if len(v.encode()) > 2048:
            raise Reject(400, f"label '{n}' value too long")
    # Pyroscope (validation.disable-label-sanitization=false, the 1.x default) turns '.' into
    # '_' and then refuses two labels that meet with different values (same values merge).
    seen = {}
    for n, v in zip(names, values):
        k = n.replace(".", "_")
        if k in seen and seen[k] != v:
            raise Reject(400, f"duplicate label name '{k}' after label name sanitization "
                              f"from '{n}'")
        seen[k] = v
    d = dict(zip(names, values))
    if not METRIC_NAME.match(d.get("__name__", "")):
        raise Reject(400, "invalid metric name (missing or bad __name__)")
    if not d.get("service_name"):
        raise Reject(400, "missing service_name")
    return d


def parse_ingest_name(name):
    m = re.match(r"^([^{}]*)(?:\{(.*)\})?$", name)
    if not m or not APP_NAME.match(m.group(1)):
        raise Reject(400, f"invalid application name in name={name!r}")
    labels = {"service_name": m.group(1)}
    if m.group(2):
        for kv in m.group(2).split(","):
            if "=" not in kv:
                raise Reject(400, f"bad label '{kv}' in name={name!r}")
            k, v = kv.split("=", 1)
            # labelset.Parse trims both (strings.TrimSpace): the stored value is the trimmed one.
            k, v = k.strip(), v.strip()
            if not LABEL_NAME.match(k) or k.startswith("__"):
                raise Reject(400, f"invalid label name '{k}' in name={name!r}")
            labels[k] = v
    return labels


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, body=b"", ctype="application/json", extra=None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        srv = self.server
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        with srv.lock:
            srv.requests += 1
            n = srv.requests
        if n <= srv.args.count and srv.args.mode != "ok":
            srv.record({"misbehaved": srv.args.mode, "request": n})
            if srv.args.mode == "500":
                return self.reply(500, b'{"code":"internal","message":"on purpose"}')
            if srv.args.mode == "429":
                return self.reply(429, b'{"code":"resource_exhausted","message":"slow down"}',
                                  extra={"Retry-After": "1"})
            if srv.args.mode == "slow":
                time.sleep(srv.args.delay)
        try:
            accepted = self.check(body)
        except Reject as r:
            srv.record({"rejected": str(r), "status": r.status, "path": self.path})
            msg = json.dumps({"code": "invalid_argument", "message": str(r)}).encode()
            return self.reply(r.status, msg)
        for a in accepted:
            srv.record(a)
        if self.path.startswith("/push.v1"):
            return self.reply(200, b"", ctype="application/proto")
        return self.reply(200, b"")

    def check_auth(self):
        a = self.server.args
        tenant = self.headers.get("X-Scope-OrgID")
        # dskit tenant.ValidTenantID (a multi-tenant server refuses others with 401).
        if tenant is not None and (not TENANT_CHARS.match(tenant) or tenant in (".", "..")):
            raise Reject(401, f"X-Scope-OrgID {tenant!r} is not a valid tenant ID")
        if a.tenant and tenant != a.tenant:
            raise Reject(401, f"X-Scope-OrgID is {tenant!r}, expected {a.tenant!r}")
        auth = self.headers.get("Authorization")
        if a.user:
            expect = "Basic " + base64.b64encode(f"{a.user}:{a.password}".encode()).decode()
            if auth != expect:
                raise Reject(401, f"Authorization is {auth!r}")
        return {"tenant": tenant, "authorization": auth,
                "user_agent": self.headers.get("User-Agent")}

    def check(self, body):
        meta = self.check_auth()
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/push.v1.PusherService/Push":
            if self.headers.get("Content-Type") != "application/proto":
                raise Reject(415, f"Content-Type {self.headers.get('Content-Type')!r}")
            req = decode(body, PUSH_REQUEST)
            out = []
            for series in req.get("series", []):
                labels = check_labels(series.get("labels", []))
                for smp in series.get("samples", []):
                    sid = smp.get("id", [""])[0]
                    if sid and not UUID.match(sid):
                        raise Reject(400, f"RawSample.ID {sid!r} is not a UUID")
                    prof = check_pprof(smp.get("raw_profile", b""), self.server.args.max_samples,
                                       **self.server.limits())
                    out.append({"api": "push", "labels": labels, **meta, **prof})
            if not out:
                raise Reject(400, "no profiles in the request")
            return out
        if url.path in ("/ingest", "/pyroscope/ingest"):
            q = urllib.parse.parse_qs(url.query)
            if "name" not in q:
                raise Reject(400, "missing name")
            labels = parse_ingest_name(q["name"][0])
            ctype = self.headers.get("Content-Type", "")
            if "multipart/form-data" not in ctype:
                raise Reject(400, "expected a multipart/form-data body")
            if q.get("format", [""])[0] == "pprof":
                raise Reject(422, "format=pprof with a multipart body: parsed as raw pprof")
            msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + body)
            raw = None
            for part in msg.iter_parts():
                if part.get_param("name", header="content-disposition") == "prev_profile":
                    # pkg/og/convert/pprof: a cumulative (Go < 1.x SDK) upload is refused.
                    raise Reject(422, "part 'prev_profile': unsupported client version")
                if part.get_param("name", header="content-disposition") != "profile":
                    continue
                if not part.get_filename():
                    # Pyroscope reads only form files: a plain value is silently ignored.
                    raise Reject(200, "part 'profile' is not a file part: nothing stored")
                raw = part.get_payload(decode=True)
            if raw is None:
                raise Reject(422, "no 'profile' file part")
            try:
                prof = check_pprof(raw, self.server.args.max_samples, **self.server.limits())
            except Reject as r:
                # ingest_handler.go: a profile that fails conversion or validation is a 422.
                raise Reject(422, str(r))
            for k in ("from", "until"):
                if k in q and not q[k][0].isdigit():
                    raise Reject(400, f"{k}={q[k][0]!r}")
            labels["__name__"] = prof["sample_types"][-1]  # the server's guess (§2.2)
            if q.get("spyName", [""])[0] in ("pyspy", "rbspy", "scripting"):
                prof["lost"].append("spyName makes the server rewrite the function names")
            # The series the server then validates like a /push one (pkg/og/convert/pprof
            # createLabels adds __delta__ and pyroscope_spy from spyName).
            full = dict(labels, __delta__="false", pyroscope_spy=q.get("spyName", ["unknown"])[0])
            try:
                check_labels([{"name": [k], "value": [v]} for k, v in full.items()])
            except Reject as r:
                raise Reject(422, str(r))
            return [{"api": "ingest", "labels": labels, **meta, **prof,
                     "from": int(q.get("from", ["0"])[0]), "until": int(q.get("until", ["0"])[0])}]
        raise Reject(404, f"no such endpoint {url.path}")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, args):
        super().__init__(addr, Handler)
        self.args = args
        self.lock = threading.Lock()
        self.requests = 0

    def limits(self):
        return {"max_bytes": self.args.max_profile_bytes, "stack_sums": self.args.stack_sums}

    def record(self, obj):
        obj["received_ns"] = time.time_ns()
        with self.lock, open(self.args.store, "a") as f:
            f.write(json.dumps(obj, sort_keys=True) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--mode", choices=["ok", "500", "429", "slow"], default="ok")
    ap.add_argument("--count", type=int, default=0, help="requests that misbehave")
    ap.add_argument("--delay", type=float, default=5.0, help="slow mode: seconds")
    ap.add_argument("--start-delay", type=float, default=0.0)
    ap.add_argument("--max-samples", type=int, default=MAX_SAMPLES)
    ap.add_argument("--max-profile-bytes", type=int, default=MAX_PROFILE_BYTES,
                    help="validation.max-profile-size-bytes: uncompressed bytes per profile")
    ap.add_argument("--stack-sums", action="store_true",
                    help="store each accepted profile's value sums per stack")
    ap.add_argument("--tenant")
    ap.add_argument("--user")
    ap.add_argument("--password", default="")
    ap.add_argument("--store", required=True)
    ap.add_argument("--ready", required=True, help="file that receives the port once listening")
    args = ap.parse_args()
    time.sleep(args.start_delay)
    srv = Server(("127.0.0.1", args.port), args)
    with open(args.ready + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(args.ready + ".tmp", args.ready)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

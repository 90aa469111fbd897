#!/usr/bin/env python3
"""The agent does not link libcurl or OpenSSL: neither in its DT_NEEDED nor pulled in by them.

Usage: check_needed.py READELF LIBGPUPROF_SO
The uploader dlopens libcurl.so.4 only when GPUPROF_PYROSCOPE_URL is set (export/curl_api.h),
so every other process the agent is injected into stays free of libcurl's dependency tree.
"""
import re
import shutil
import subprocess
import sys

FORBIDDEN = re.compile(r"^lib(curl|curl-gnutls|curl-nss|ssl|crypto|gnutls|nghttp2)\.so")


def main():
    readelf, lib = sys.argv[1], sys.argv[2]
    dyn = subprocess.run([readelf, "-d", lib], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
    if not needed:
        print(f"FAIL: no NEEDED entries read from {lib}:\n{dyn}", file=sys.stderr)
        return 1
    bad = [n for n in needed if FORBIDDEN.match(n)]
    if bad:
        print(f"FAIL: {lib} has {bad} in DT_NEEDED (all: {needed})", file=sys.stderr)
        return 1
    # What the direct dependencies pull in, as the loader resolves it here.
    ldd = shutil.which("ldd")
    if ldd:
        out = subprocess.run([ldd, lib], capture_output=True, text=True).stdout
        loaded = [line.split()[0] for line in out.splitlines() if line.strip()]
        bad = [n for n in loaded if FORBIDDEN.match(n)]
        if bad:
            print(f"FAIL: loading {lib} also loads {bad}:\n{out}", file=sys.stderr)
            return 1
    print(f"ok: NEEDED {needed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The agent image's payload, built and used as the pod specs use it, on the simulated GPU.

Usage: check_image_payload.py --root SRC --build BUILD --fakegpu-lib DIR --small PROG
                              --workload PROG --proto PROTO --protoc PROTOC --work DIR

No container engine runs here, so the steps that decide whether the agent works inside someone
else's container are run as they are written in samples/kubernetes/:

1. The Dockerfile's bundling step (the build stage's RUN that fills /out/gpuprof), verbatim by
   /bin/sh as `docker build` runs it, with /build moved to BUILD and /out under --work. The
   final stage's /opt/gpuprof is a copy of what it made.
2. The pod's initContainer script, verbatim, with /opt/gpuprof and the shared volume moved
   under --work.
3. A workload image that holds only what the Dockerfile counts on every image having (the
   libraries its bundling leaves out: glibc's and the C++ runtime), the simulated CUDA driver and
   CUPTI with their own libraries, and a CUDA program; the shared volume is its /gpuprof. The
   program runs chrooted there, in PID and mount namespaces of its own, as the pod's runAsUser,
   with the workload container's environment (downward-API values filled in, the Pyroscope URL
   pointing at the loopback receiver).

pod.yaml (continuous mode, tests/e2e/small.c): the program's output is what it prints without
the agent; the agent writes nothing on stderr; its summary counts the 6 kernels; every library
the agent itself needs, libcurl.so.4 included, is loaded from the shared volume (the dynamic
loader's LD_DEBUG log; libelf and libz are the simulated driver's, loaded before the agent,
which a real driver does not need); the capture at start writes a trace that validates with 6 kernel
slices; every pprof file written reached the Pyroscope receiver byte for byte with the pod's
labels.
pod-sidecar.yaml (on demand, tests/control/workload.c): the sidecar's `gpuprof capture` line,
run from the agent image (its own root: the Dockerfile's /opt/gpuprof and PATH, the shared
volume mounted, its own PID namespace), captures the workload; the .pftrace it names decodes
with the workload's kernels on it.

Skips (exit 77) unless run as root where PID and mount namespaces are permitted: the chroot,
the mounts and the pod's uid need them.
"""
import argparse
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pyroscope"))
sys.path.insert(0, os.path.join(HERE, "..", "trace"))
import check_traces  # noqa: E402
from check_manifests import break_copy, dockerfile_lines  # noqa: E402
from check_traces import check, failures  # noqa: E402  (one list: the trace checks' too)
from test_pyroscope import Receiver  # noqa: E402

# What every workload image has, so the bundle leaves it out (docs/KUBERNETES.md): glibc's
# libraries and the C++ runtime, of which a process can have only one copy. Anything else the
# agent or the command needs must come with them.
IMAGE_HAS = re.compile(r"/(ld-linux[^/]*|lib(c|m|dl|pthread|rt|resolv|stdc\+\+|gcc_s)\.so[^/]*)$")
# Downward-API values the kubelet would fill in.
FIELD_REFS = {"metadata.name": "cuda-workload-0", "metadata.namespace": "ml",
              "spec.nodeName": "gpu-node-7"}

def sh(script, what):
    r = subprocess.run(["/bin/sh", "-e", "-c", script], capture_output=True, text=True, timeout=120)
    if not check(r.returncode == 0, f"{what} failed (exit {r.returncode}): {r.stderr.strip()[-2000:]}"):
        sys.exit(1)
    return r.stdout


def ldd_paths(files):
    r = subprocess.run(["ldd", *files], capture_output=True, text=True)
    return set(re.findall(r"=> (/\S+)", r.stdout)) | set(re.findall(r"^\s+(/\S+ld-linux\S*)", r.stdout, re.M))


def needed(lib):
    dyn = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn), dyn


def bundle(a, scratch):
    """Step 1: the Dockerfile's RUN that fills /out/gpuprof, run as written."""
    lines = dockerfile_lines(open(os.path.join(a.root, "samples/kubernetes/Dockerfile")).read())
    runs = [l[4:] for l in lines if l.startswith("RUN ") and "mkdir -p /out/gpuprof" in l]
    check(len(runs) == 1, f"Dockerfile: one RUN step fills /out/gpuprof ({len(runs)})")
    step = runs[0]
    check("/build/lib/libgpuprof.so" in step and "/build/bin/gpuprof" in step,
          "the bundling step takes the agent and the command from /build")
    out = os.path.join(scratch, "out")
    sh(step.replace("/build/", a.build.rstrip("/") + "/").replace("/out/", out + "/"),
       "the Dockerfile's bundling step")
    return os.path.join(out, "gpuprof")


def check_bundle(payload):
    libdir, binp = os.path.join(payload, "lib"), os.path.join(payload, "bin", "gpuprof")
    libs = sorted(os.listdir(libdir))
    for want in ("libgpuprof.so", "libcurl.so.4"):
        check(want in libs, f"bundle: {want} in lib/ ({libs})")
    agent_needed, _ = needed(os.path.join(libdir, "libgpuprof.so"))
    cli_needed, _ = needed(binp)
    own = [n for n in agent_needed if not IMAGE_HAS.search("/" + n)]
    cli_own = [n for n in cli_needed if not IMAGE_HAS.search("/" + n)]
    check(own and cli_own, "bundle: the agent and the command need libraries of their own")
    for n in own + cli_own:
        check(n in libs, f"bundle: {n} (needed by the agent or the command) is in lib/")
    for n in libs:
        check(not IMAGE_HAS.search("/" + n), f"bundle: {n} is left to the workload image, yet bundled")
        _, dyn = needed(os.path.join(libdir, n))
        check(re.search(r"\(RPATH\)\s+Library rpath: \[\$ORIGIN\]", dyn) and "(RUNPATH)" not in dyn,
              f"bundle: lib/{n} finds its libraries beside it (DT_RPATH $ORIGIN)")
    _, dyn = needed(binp)
    check(re.search(r"\(RPATH\)\s+Library rpath: \[\$ORIGIN/\.\./lib\]", dyn),
          "bundle: bin/gpuprof finds its libraries in ../lib (DT_RPATH $ORIGIN/../lib)")
    sections = subprocess.run(["readelf", "-S", os.path.join(libdir, "libgpuprof.so")],
                              capture_output=True, text=True).stdout
    check(".debug_info" not in sections and ".symtab" in sections,
          "bundle: libgpuprof.so has no debug sections but keeps its symbols")
    return own, cli_own


def image_root(root, payload_libs, extra):
    """A root with only the libraries the bundling leaves to the image (from this machine)."""
    for d in ("proc", "dev", "lib/x86_64-linux-gnu", "lib64"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    for p in sorted(ldd_paths(payload_libs + extra)):
        if IMAGE_HAS.search(p):
            dest = "lib64" if "/ld-linux" in p else "lib/x86_64-linux-gnu"
            shutil.copy(p, os.path.join(root, dest, os.path.basename(p)))


def pod_spec(a, name):
    with open(os.path.join(a.root, "samples/kubernetes", name)) as f:
        return yaml.safe_load(f)


def container(spec, name, init=False):
    return next(c for c in spec["spec"]["initContainers" if init else "containers"]
                if c["name"] == name)


def env_of(c):
    env = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            env[e["name"]] = FIELD_REFS[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def install(spec, image_payload, volume):
    """Step 2: the initContainer's script, with its two paths moved under the scratch dir."""
    ic = container(spec, "gpuprof-install", init=True)
    mount = ic["volumeMounts"][0]["mountPath"]
    check(ic["command"] == ["/bin/sh", "-c"], "initContainer: a /bin/sh -c script")
    # Absolute paths only (a path starts after a blank): /opt/gpuprof/bin/gpuprof keeps its tail.
    moved = re.sub(r"(?<![\w./-])(/opt/gpuprof|" + re.escape(mount) + ")",
                   lambda m: image_payload if m.group(0) == "/opt/gpuprof" else volume,
                   ic["args"][0])
    sh(moved, "the initContainer's script")
    return mount


def tool(name):
    path = shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
    check(path, f"{name} not found")
    return path


def confined(root, user, argv, env, binds=(), wd="/"):
    """argv chrooted in root as user ("uid:gid"), in its working directory wd, in new PID and
    mount namespaces (proc, /dev and binds mounted). The host tools on the way (unshare, sh,
    mount) run in a scratch directory: their own LD_DEBUG_OUTPUT files, if env asks for them,
    land there."""
    mnt, q = tool("mount"), shlex.quote
    mounts = [f"{mnt} --bind /dev {q(root)}/dev", f"{mnt} -t proc proc {q(root)}/proc"]
    for src, dst in binds:
        os.makedirs(root + dst, exist_ok=True)
        mounts.append(f"{mnt} --bind {q(src)} {q(root + dst)}")
    uid, gid = user.split(":")
    enter = [tool("unshare"), f"--root={root}", f"--wd={wd}", f"--setgid={gid}", f"--setuid={uid}"]
    script = " && ".join(mounts + ["exec " + " ".join(map(q, enter + argv))])
    host = os.path.join(os.path.dirname(root), "host-tools")
    os.makedirs(host, exist_ok=True)
    return subprocess.Popen([tool("unshare"), "--fork", "--pid", "--mount", "/bin/sh", "-c", script],
                            env=env, cwd=host, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def loaded(debug_files):
    """Objects whose initializers the dynamic loader ran, per LD_DEBUG=libs log."""
    objs = set()
    for f in debug_files:
        objs |= set(re.findall(r"calling init: (\S+)", open(f).read()))
    return objs


def check_loaded(objs, own, workload_root, volume_mount, what):
    check(f"{volume_mount}/lib/libgpuprof.so" in objs, f"{what}: the agent was loaded ({sorted(objs)})")
    driver_libs = set(os.listdir(os.path.join(workload_root, "fakegpu/lib")))
    for n in own:
        if n in driver_libs:  # the simulated driver's own copy, loaded first, serves both
            continue
        check(f"{volume_mount}/lib/{n}" in objs, f"{what}: {n} loaded from the shared volume")
    for o in objs:
        check(o.startswith((f"{volume_mount}/lib/", "/fakegpu/lib/", "/lib/x86_64-linux-gnu/",
                            "/lib64/")), f"{what}: {o} loaded from outside the image and volume")


def workload_env(c, extra):
    env = env_of(c)
    env.update({"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/fakegpu/lib",
                "LD_DEBUG": "libs"}, **extra)
    return env


def continuous(a, spec, root, volume, mount, own, base_stdout):
    """pod.yaml: e2e_small in continuous mode, a capture at start, Pyroscope pushes."""
    work = os.path.join(a.work, "receiver")
    os.makedirs(work, exist_ok=True)
    rcv = Receiver(work, 0)
    try:
        rcv.wait_ready()
        port = int(open(rcv.ready).read())
        env = workload_env(container(spec, "workload"), {
            "GPUPROF_PYROSCOPE_URL": f"http://127.0.0.1:{port}",
            "GPUPROF_CAPTURE_ON_START": "60s",  # a trace of the whole run
            "GPUPROF_STACK_SAMPLE_EVERY": "1",  # 6 launches: a stack for each
            "LD_DEBUG_OUTPUT": "ld-debug"})
        p = confined(root, a.user, ["/app/e2e_small"], env, wd=mount)
        stdout, stderr = p.communicate(timeout=120)
    finally:
        rcv.stop()
    out = os.path.join(volume, "out")
    check(p.returncode == 0, f"pod.yaml: the workload exited {p.returncode}: {stderr[-2000:]}")
    check(stdout == base_stdout, f"pod.yaml: stdout {stdout!r}, without the agent {base_stdout!r}")
    check(not [l for l in stderr.splitlines() if "gpuprof" in l], f"pod.yaml: agent lines on stderr: {stderr}")
    objs = loaded(glob.glob(os.path.join(volume, "ld-debug.*")))
    check_loaded(objs, own, root, mount, "pod.yaml")
    check(f"{mount}/lib/libcurl.so.4" in objs, "pod.yaml: the uploader's libcurl.so.4 loaded from the volume")

    summaries = glob.glob(os.path.join(out, "*-summary.json"))
    if check(len(summaries) == 1, f"pod.yaml: one summary in {os.listdir(out)}"):
        s = json.load(open(summaries[0]))
        check(s["state"] == "active" and s["kernels"]["count"] == 6,
              f"pod.yaml: summary state {s['state']}, {s['kernels']['count']} kernels (want 6)")
        check(s["cupti_path"] == "/fakegpu/lib/libcupti.so.13", f"pod.yaml: CUPTI {s['cupti_path']}")
    traces = glob.glob(os.path.join(out, "*-capture.json.gz"))
    if check(len(traces) == 1, f"pod.yaml: one capture trace in {sorted(os.listdir(out))}"):
        r = subprocess.run([sys.executable, os.path.join(HERE, "..", "trace", "validate_trace.py"),
                            traces[0], "--summary"], capture_output=True, text=True)
        check(r.returncode == 0, f"pod.yaml: the trace does not validate: {r.stdout}{r.stderr}")
        evs = check_traces.load_json_events(traces[0])["traceEvents"]
        kernels = [e for e in evs if e.get("ph") == "X" and e.get("cat") == "kernel"]
        check([e["name"] for e in kernels] == ["small(float*)"] * 6,
              f"pod.yaml: kernel slices {[e['name'] for e in kernels]}")

    files = sorted(f for f in glob.glob(os.path.join(out, "*.pb.gz")) if "-capture" not in f)
    kinds = sorted(re.search(r"-(gpu_time|gpu_memory|memcpy)-", os.path.basename(f)).group(1)
                   for f in files)
    check(kinds == ["gpu_memory", "gpu_time", "memcpy"], f"pod.yaml: pprof windows {kinds}")
    acc = rcv.accepted()
    check(not [x for x in rcv.records() if "rejected" in x], "pod.yaml: the receiver rejected requests")
    written = sorted(hashlib.sha256(open(f, "rb").read()).hexdigest() for f in files)
    check(sorted(x["sha256"] for x in acc) == written,
          f"pod.yaml: {len(acc)} uploads for {len(files)} profile files, or not byte for byte")
    c = container(spec, "workload")
    tags = dict(t.split("=") for t in env_of(c)["GPUPROF_TAGS"].split(","))
    want = {"service_name": env_of(c)["GPUPROF_APP_NAME"], "pod": FIELD_REFS["metadata.name"],
            "namespace": FIELD_REFS["metadata.namespace"], "node": FIELD_REFS["spec.nodeName"], **tags}
    for x in acc:
        got = {k: v for k, v in x["labels"].items() if not k.startswith("__")}
        check(got == want, f"pod.yaml: labels {got}, want {want}")
    print(f"ok: pod.yaml: 6 kernels, {len(files)} profiles uploaded, trace valid")


def sidecar(a, spec, root, image, volume, mount, own):
    """pod-sidecar.yaml: the sidecar's capture line, from the agent image, on a running workload."""
    side = container(spec, "gpuprof-capture", init=True)
    script = side["args"][0].replace("\\\n", " ")
    line = re.search(r"^\s*(gpuprof capture .*?)\s*\|\|", script, re.M)
    if not check(line, "pod-sidecar.yaml: the sidecar runs `gpuprof capture`"):
        return
    senv = env_of(side)
    senv["CAPTURE_DURATION"] = "1s"  # 60s in the spec
    argv = shlex.split(re.sub(r'"\$(\w+)"', lambda m: senv[m.group(1)], line.group(1)))
    stop = os.path.join(volume, "stop-workload")
    env = workload_env(container(spec, "workload"), {"LD_DEBUG_OUTPUT": "ld-debug"})
    wl = confined(root, a.user, ["/app/workload", f"{mount}/stop-workload", "60"], env, wd=mount)
    try:
        deadline = time.monotonic() + 30
        while not glob.glob(os.path.join(volume, "run", "*.sock")) and time.monotonic() < deadline:
            time.sleep(0.05)
        check(glob.glob(os.path.join(volume, "run", "*.sock")), "pod-sidecar.yaml: no control socket")
        # The agent image: PATH from the Dockerfile's ENV, the shared volume at the same path.
        cenv = dict(senv, PATH=f"{a.image_payload_path}/bin:/usr/bin:/bin")
        cap = confined(image, a.user, argv, cenv, binds=[(volume, mount)])
        cout, cerr = cap.communicate(timeout=60)
    finally:
        open(stop, "w").close()
        wout, werr = wl.communicate(timeout=60)
    check(cap.returncode == 0, f"pod-sidecar.yaml: `{' '.join(argv)}` exited {cap.returncode}: {cerr}")
    check(wl.returncode == 0 and "4 threads launched kernels" in wout,
          f"pod-sidecar.yaml: the workload exited {wl.returncode}: {wout}{werr[-2000:]}")
    check_loaded(loaded(glob.glob(os.path.join(volume, "ld-debug.*"))), own, root, mount,
                 "pod-sidecar.yaml")
    listed = cout.split()
    traces = [f for f in listed if f.endswith(".pftrace")]
    if not check(len(traces) == 1 and traces[0].startswith(f"{mount}/out/"),
                 f"pod-sidecar.yaml: one .pftrace in the volume listed: {listed}"):
        return
    path = volume + traces[0][len(mount):]
    trace = check_traces.decode_pftrace(path, a.proto, a.protoc)
    if trace is None:
        return
    tracks, slices, counters, instants, open_ = check_traces.rebuild(trace, path)
    names = {n for lst in slices.values() for n, *_ in lst}
    check({f"ctl_kernel_{i}" for i in range(4)} <= names, f"pod-sidecar.yaml: slices {sorted(names)}")
    check("cuLaunchKernel" not in names, "pod-sidecar.yaml: a --gpu-only capture has API slices")
    print(f"ok: pod-sidecar.yaml: the sidecar's capture wrote {os.path.basename(path)}")
    # The image's gpuprof reads the capture where it lies (docs/KUBERNETES.md): the kernels the
    # trace holds, by name, from the image's own libraries (json-c, protobuf-c, zlib).
    an = confined(image, a.user, ["gpuprof", "analyze", "--json", "-", traces[0]], cenv,
                  binds=[(volume, mount)])
    aout, aerr = an.communicate(timeout=60)
    if check(an.returncode == 0, f"pod-sidecar.yaml: gpuprof analyze exited {an.returncode}: {aerr}"):
        rows = json.loads(aout)["traces"][0]["kernels"]
        check({f"ctl_kernel_{i}" for i in range(4)} <= {r["name"] for r in rows},
              f"pod-sidecar.yaml: gpuprof analyze kernels {rows}")
        print("ok: pod-sidecar.yaml: the image's gpuprof analyze read the capture")


# --self-test: each break of a copy of samples/ must make the check fail.
BREAKS = [
    ("Dockerfile", "|libgcc_s)", "|libgcc_s|libunwind)"),  # libunwind left to the image
    ("Dockerfile", "--set-rpath '$ORIGIN' \"$f\"", "--set-rpath '/opt/lib' \"$f\""),
    ("pod.yaml", "cp -a /opt/gpuprof/lib/. /gpuprof/lib/", "cp -a /opt/gpuprof/lib/lib[gu]*.so* /gpuprof/lib/"),
    ("pod-sidecar.yaml", "--gpu-only --format perfetto", "--format perfetto"),
]


def self_test(argv):
    import tempfile
    src = argv[argv.index("--root") + 1]
    bad = 0
    for name, old, new in BREAKS:
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(os.path.join(src, "samples"), os.path.join(tmp, "samples"))
            if not break_copy(os.path.join(tmp, "samples/kubernetes", name), old, new):
                bad += 1
                continue
            args = [x for x in argv if x != "--self-test"]
            args[args.index("--root") + 1] = tmp
            r = subprocess.run([sys.executable, os.path.abspath(__file__), *args],
                               capture_output=True, text=True, timeout=300)
            caught = r.returncode == 1 and "FAIL:" in r.stderr
            print(f"{'ok' if caught else 'FAIL'}: self-test: {name}: {old!r} -> {new!r} "
                  f"{'caught' if caught else 'NOT caught'} (exit {r.returncode})")
            bad += not caught
    shutil.rmtree(argv[argv.index("--work") + 1], ignore_errors=True)  # the broken runs' copies
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    for opt in ("root", "build", "fakegpu-lib", "small", "workload", "proto", "protoc", "work"):
        ap.add_argument("--" + opt, required=True)
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("SKIP: needs root (chroot, mounts, the pod's runAsUser)")
        return 77
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(os.path.join(a.work, "probe"))
    probe = subprocess.run([tool("unshare"), "--fork", "--pid", "--mount", "/bin/sh", "-c",
                            f"{tool('mount')} -t proc proc {shlex.quote(a.work)}/probe"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"SKIP: PID and mount namespaces are not permitted here: {probe.stderr.strip()}")
        return 77
    if a.self_test:
        return self_test(sys.argv[1:])

    payload = bundle(a, a.work)
    own, cli_own = check_bundle(payload)
    fake = [os.path.realpath(p) for p in glob.glob(os.path.join(a.fakegpu_lib, "lib*.so.*"))]
    libs = [os.path.join(payload, "lib", n) for n in os.listdir(os.path.join(payload, "lib"))]
    base = subprocess.run([a.small], capture_output=True, text=True, timeout=60,
                          env={"LD_LIBRARY_PATH": a.fakegpu_lib, "PATH": "/usr/bin:/bin"})
    check(base.returncode == 0, f"e2e_small without the agent exited {base.returncode}")

    for name, run in (("pod.yaml", "continuous"), ("pod-sidecar.yaml", "sidecar")):
        spec = pod_spec(a, name)
        sc = spec["spec"]["securityContext"]
        a.user = f"{sc['runAsUser']}:{sc['runAsGroup']}"
        top = os.path.join(a.work, run)
        # The agent image: the final stage's COPY of /out/gpuprof to /opt/gpuprof.
        image = os.path.join(top, "agent-image")
        a.image_payload_path = "/opt/gpuprof"
        image_root(image, libs, [os.path.join(payload, "bin", "gpuprof")])
        shutil.copytree(payload, image + a.image_payload_path, symlinks=True)
        # The workload image: the left-out libraries, the driver and CUPTI, the program.
        root = os.path.join(top, "workload")
        image_root(root, libs, fake + [a.small, a.workload])
        drv = os.path.join(root, "fakegpu/lib")
        os.makedirs(drv)
        here = os.path.realpath(a.fakegpu_lib)
        deps = {p for p in ldd_paths(fake) if not IMAGE_HAS.search(p)
                and os.path.dirname(os.path.realpath(p)) != here}
        for p in fake + sorted(deps):
            shutil.copy(p, os.path.join(drv, soname(p)))
        os.makedirs(os.path.join(root, "app"))
        shutil.copy(a.small, os.path.join(root, "app/e2e_small"))
        shutil.copy(a.workload, os.path.join(root, "app/workload"))
        # The emptyDir, filled by the initContainer, owned by fsGroup as the kubelet does.
        volume = os.path.join(root, "gpuprof")
        os.makedirs(volume)
        mount = install(spec, image + a.image_payload_path, volume)
        check(mount == "/gpuprof", f"{name}: the volume is mounted at {mount}")
        for d, _, fs in os.walk(volume):
            for x in [d] + [os.path.join(d, f) for f in fs]:
                os.chown(x, sc["runAsUser"], sc["fsGroup"])
        for n in own + cli_own:
            check(not glob.glob(os.path.join(root, "lib*", "**", n), recursive=True),
                  f"{name}: {n} is in the workload image outside the volume")
        if run == "continuous":
            continuous(a, spec, root, volume, mount, own, base.stdout)
        else:
            sidecar(a, spec, root, image, volume, mount, own)
        if failures:
            break  # the sidecar would wait for an agent that did not start
    if failures:
        print(f"check_image_payload: {len(failures)} checks failed")
        return 1
    shutil.rmtree(a.work)  # about 100 MB of copies
    print("check_image_payload: ok")
    return 0


def soname(path):
    m = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", needed(path)[1])
    return m.group(1) if m else os.path.basename(path)


if __name__ == "__main__":
    sys.exit(main())

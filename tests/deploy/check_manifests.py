#!/usr/bin/env python3
"""Checks the Kubernetes manifests and the agent Dockerfile against the repository.

Usage: check_manifests.py [REPO_ROOT]      check the repository (default: this one)
       check_manifests.py --self-test      break copies of the files; every break must be caught

For every samples/kubernetes/*.yaml: it parses as YAML, is a v1 Pod, has an emptyDir that the
initContainer fills and every container mounts at the same path; CUDA_INJECTION64_PATH is
exactly where the initContainer copies libgpuprof.so (and where the Dockerfile's final stage
keeps it); every GPUPROF_* variable is one the agent reads (agent/config.c's known_vars list);
the output and run directories lie in the shared volume and a capture sidecar uses the
workload's run directory and is a native sidecar (an initContainer with restartPolicy: Always,
so that the pod ends with its workload); pod, namespace and node come from the downward API; the workload
asks for a GPU. For the Dockerfile: multi-stage, base images pinned by digest through ARGs,
every COPY source exists in the repository, the CMake targets and options it uses exist, its
apt packages are those of scripts/install-deps.sh (plus patchelf), and the final stage copies
only the agent payload. Prints every failed check; exit status 1 when any failed.
"""

import os
import re
import sys

import yaml

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] != "--self-test" else
                       os.path.join(os.path.dirname(__file__), "..", ".."))
K8S = os.path.join(ROOT, "samples", "kubernetes")
failures = []
passes = 0


def check(cond, what):
    global passes
    if cond:
        passes += 1
    else:
        failures.append(what)
    return cond


def read(rel):
    with open(os.path.join(ROOT, rel)) as f:
        return f.read()


def known_vars():
    src = read("agent/config.c")
    m = re.search(r"known_vars\[\]\s*=\s*\{(.*?)\};", src, re.S)
    if not m:
        failures.append("agent/config.c: no known_vars[] list found")
        return set()
    return set(re.findall(r'"(GPUPROF_[A-Z0-9_]+)"', m.group(1)))


def env_map(container):
    return {e["name"]: e for e in container.get("env", []) or []}


def mount_path(container, volume):
    for m in container.get("volumeMounts", []) or []:
        if m.get("name") == volume:
            return m.get("mountPath")
    return None


def dockerfile_lines(text):
    """A Dockerfile's instructions, one per line: continuations joined, comments dropped."""
    return [raw.strip() for raw in re.sub(r"\\\n", " ", text).splitlines()
            if raw.strip() and not raw.lstrip().startswith("#")]


def dockerfile_facts():
    """What the final stage ships: (payload dir in the image, lib dir, bin dir)."""
    lines = dockerfile_lines(read("samples/kubernetes/Dockerfile"))
    froms = [l for l in lines if l.upper().startswith("FROM ")]
    check(len(froms) >= 2, "Dockerfile: multi-stage (at least two FROM lines)")
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", "\n".join(lines), re.M))
    for f in froms:
        ref = f.split()[1]
        m = re.fullmatch(r"\$\{(\w+)\}", ref)
        check(m and m.group(1) in args, f"Dockerfile: {f!r} takes its image from an ARG")
        if m and m.group(1) in args:
            image = args[m.group(1)]
            check(re.search(r"@sha256:[0-9a-f]{64}$", image),
                  f"Dockerfile: ARG {m.group(1)}={image} is pinned by digest")
    check(any("nvidia/cuda:13." in v and "-devel-" in v for v in args.values()),
          "Dockerfile: the build stage is a CUDA 13 devel image")

    final_at = max(i for i, l in enumerate(lines) if l.upper().startswith("FROM "))
    for l in lines[:final_at]:
        if l.upper().startswith("COPY ") and "--from" not in l:
            parts = l.split()[1:]
            for src in parts[:-1]:
                check(os.path.exists(os.path.join(ROOT, src)),
                      f"Dockerfile: COPY source {src} exists in the repository")
    build = " ".join(lines[:final_at])
    targets = []
    for l in lines[:final_at]:
        words = l.split()
        if "--target" in words:
            for w in words[words.index("--target") + 1:]:
                if w == "&&" or w.startswith("-"):
                    break
                targets.append(w)
    check(targets, "Dockerfile: cmake --build names its targets")
    cmake_text = read("agent/CMakeLists.txt") + read("cli/CMakeLists.txt")
    for t in targets:
        check(re.search(r"add_(library|executable)\(" + re.escape(t) + r"\b", cmake_text),
              f"Dockerfile: CMake target {t} exists")
    top = read("CMakeLists.txt")
    check("option(GPUPROF_BUILD_SAMPLES" in top, "CMakeLists.txt: GPUPROF_BUILD_SAMPLES option exists")
    check("${CMAKE_BINARY_DIR}/lib" in top and "${CMAKE_BINARY_DIR}/bin" in top,
          "CMakeLists.txt: the agent lands in <build>/lib, the command in <build>/bin")
    check("/build/lib/libgpuprof.so" in build and "/build/bin/gpuprof" in build,
          "Dockerfile: takes libgpuprof.so from /build/lib and gpuprof from /build/bin")
    check("-B /build" in build, "Dockerfile: the build directory is /build")

    # apt packages: those of scripts/install-deps.sh, and patchelf.
    m = re.search(r"apt-get install[^&]*", build)
    pkgs = set(m.group(0).split()[2:]) - {"-y", "--no-install-recommends"} if m else set()
    pkgs = {p for p in pkgs if not p.startswith("-") and "=" not in p}
    deps = set(re.findall(r"[\w.+-]+", re.search(r"packages=\((.*?)\)", read("scripts/install-deps.sh"),
                                                   re.S).group(1)))
    extra = pkgs - deps - {"patchelf"}
    check(pkgs and not extra, f"Dockerfile: apt packages outside scripts/install-deps.sh: {sorted(extra)}")

    final = lines[final_at:]
    copies = [l for l in final if l.upper().startswith("COPY ")]
    check(len(copies) == 1 and "--from=build" in copies[0],
          f"Dockerfile: the final stage has one COPY, from the build stage: {copies}")
    payload = copies[0].split()[-1].rstrip("/") if copies else ""
    check(copies and copies[0].split()[-2].rstrip("/") == "/out/gpuprof",
          "Dockerfile: the final stage copies only /out/gpuprof")
    check(re.search(r"cp /build/lib/libgpuprof\.so /out/gpuprof/lib/", build),
          "Dockerfile: libgpuprof.so goes to /out/gpuprof/lib")
    check(re.search(r"cp /build/bin/gpuprof /out/gpuprof/bin/", build),
          "Dockerfile: gpuprof goes to /out/gpuprof/bin")
    return payload, payload + "/lib", payload + "/bin"


def check_pod(path, known, payload_lib, payload_bin):
    name = os.path.basename(path)
    try:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
    except yaml.YAMLError as e:
        check(False, f"{name}: not valid YAML: {e}")
        return
    check(len(docs) == 1, f"{name}: one YAML document")
    pod = docs[0]
    check(pod.get("apiVersion") == "v1" and pod.get("kind") == "Pod", f"{name}: a v1 Pod")
    spec = pod.get("spec", {})
    vols = [v for v in spec.get("volumes", []) if "emptyDir" in v]
    if not check(len(vols) == 1, f"{name}: exactly one emptyDir volume"):
        return
    vol = vols[0]["name"]
    all_inits = spec.get("initContainers", []) or []
    # Native sidecars: initContainers with restartPolicy Always run beside the workload.
    sidecars = [c for c in all_inits if c.get("restartPolicy") == "Always"]
    inits = [c for c in all_inits if c.get("restartPolicy") != "Always"]
    containers = spec.get("containers", []) or []
    if not check(len(inits) == 1, f"{name}: one initContainer that runs to completion"):
        return
    init = inits[0]
    check(all(all_inits.index(init) < all_inits.index(c) for c in sidecars),
          f"{name}: the install initContainer comes before the sidecars")
    for c in containers:
        script = " ".join(c.get("command", []) + c.get("args", []))
        # An ordinary container that loops for ever keeps the pod (and its GPU) after the
        # workload exits.
        check("gpuprof capture" not in script,
              f"{name}: capture loop {c['name']} is a native sidecar (an initContainer with "
              "restartPolicy: Always), not an ordinary container")
    containers = containers + sidecars
    shared = mount_path(init, vol)
    check(shared, f"{name}: the initContainer mounts {vol}")
    for c in inits + containers:
        check_shell(name, c)
        check_prune(name, c)
    for c in containers:
        check(mount_path(c, vol) == shared,
              f"{name}: container {c['name']} mounts {vol} at {shared} (has {mount_path(c, vol)})")
    script = " ".join(init.get("command", []) + init.get("args", []))
    check(f"{payload_lib}/. {shared}/lib/" in script or f"{payload_lib}/libgpuprof.so {shared}/lib/" in script,
          f"{name}: the initContainer copies {payload_lib} into {shared}/lib/")
    check(f"{payload_bin}/gpuprof {shared}/bin/gpuprof" in script,
          f"{name}: the initContainer copies {payload_bin}/gpuprof to {shared}/bin/gpuprof")

    workloads = [c for c in containers if "CUDA_INJECTION64_PATH" in env_map(c)]
    if not check(len(workloads) == 1, f"{name}: one container sets CUDA_INJECTION64_PATH"):
        return
    w = workloads[0]
    env = env_map(w)
    check(env["CUDA_INJECTION64_PATH"].get("value") == f"{shared}/lib/libgpuprof.so",
          f"{name}: CUDA_INJECTION64_PATH={env['CUDA_INJECTION64_PATH'].get('value')} is "
          f"{shared}/lib/libgpuprof.so, where the initContainer copies it")
    check(str((w.get("resources", {}).get("limits", {}) or {}).get("nvidia.com/gpu", "0")) != "0",
          f"{name}: the workload asks for nvidia.com/gpu")
    for c in containers:
        for var in env_map(c):
            if var.startswith("GPUPROF_"):
                check(var in known, f"{name}: {c['name']} sets {var}, which agent/config.c does not read")
    for var in ("GPUPROF_OUTPUT_DIR", "GPUPROF_RUN_DIR"):
        v = env.get(var, {}).get("value", "")
        check(v.startswith(shared + "/"), f"{name}: {var}={v!r} lies in the shared volume {shared}")
    downward = {"GPUPROF_K8S_POD": "metadata.name", "GPUPROF_K8S_NAMESPACE": "metadata.namespace",
                "GPUPROF_K8S_NODE": "spec.nodeName"}
    for var, field in downward.items():
        ref = env.get(var, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        check(ref == field, f"{name}: {var} comes from the downward API field {field} (has {ref})")
    if "GPUPROF_PYROSCOPE_URL" in env:
        check(re.match(r"https?://", env["GPUPROF_PYROSCOPE_URL"].get("value", "")),
              f"{name}: GPUPROF_PYROSCOPE_URL is an http(s) URL")
    for c in containers:
        if c is w:
            continue
        script = " ".join(c.get("command", []) + c.get("args", []))
        if "gpuprof capture" in script:
            check(env_map(c).get("GPUPROF_RUN_DIR", {}).get("value") == env["GPUPROF_RUN_DIR"]["value"],
                  f"{name}: sidecar {c['name']} looks for sockets in the workload's GPUPROF_RUN_DIR")
            out = re.search(r"--output\s+(\S+)", script)
            check(out and out.group(1).startswith(shared + "/"),
                  f"{name}: sidecar {c['name']} asks for traces inside the shared volume")
            check("nvidia.com/gpu" not in str(c.get("resources", {})),
                  f"{name}: sidecar {c['name']} needs no GPU")


def check_shell(name, container):
    """Shell scripts in a container's args must at least parse."""
    import subprocess
    cmd = container.get("command", []) or []
    if cmd[:2] == ["/bin/sh", "-c"] and container.get("args"):
        r = subprocess.run(["sh", "-n", "-c", container["args"][0]], capture_output=True, text=True)
        check(r.returncode == 0, f"{name}: {container['name']}'s shell script parses: {r.stderr.strip()}")


def check_prune(name, container):
    """A capture sidecar's pruning, run on files named as the agent names them: the newest KEEP
    traces stay with their window's pprof files; older ones go with theirs; stale lock files go,
    a held one stays; nothing else."""
    import fcntl
    import subprocess
    import tempfile
    script = (container.get("args") or [""])[0]
    if "gpuprof capture" not in script or "KEEP" not in script:
        return
    env = {k: v.get("value", "") for k, v in env_map(container).items()}
    out = re.search(r"--output\s+(\S+)", script).group(1)
    with tempfile.TemporaryDirectory() as tmp:
        bindir, outdir = os.path.join(tmp, "bin"), os.path.join(tmp, "out")
        os.makedirs(bindir)
        os.makedirs(outdir)
        for tool in ("gpuprof", "sleep"):
            with open(os.path.join(bindir, tool), "w") as f:
                f.write("#!/bin/sh\nexit 0\n")
            os.chmod(os.path.join(bindir, tool), 0o755)
        kinds = ("gpu_time", "gpu_memory", "memcpy")
        # Eleven captures, oldest first; three share a second (-<id>, then -<id>.<k> names).
        stems = [f"gpuprof-h-1-2026112{i // 2}T00000{i % 2}Z-capture" for i in range(9)]
        stems.insert(5, stems[4] + "-2")
        stems.insert(6, stems[5] + ".2")  # the same stem taken by another agent too
        others = ["gpuprof-h-1-summary.json", "gpuprof-h-1-gpu_time-20261120T000000Z.pb.gz"]
        for age, stem in enumerate(reversed(stems)):
            for f in [stem + ".pftrace"] + [f"{stem}-{k}.pb.gz" for k in kinds]:
                path = os.path.join(outdir, f)
                open(path, "w").close()
                os.utime(path, (1e9 - age * 60, 1e9 - age * 60))
        for f in others:
            open(os.path.join(outdir, f), "w").close()
        # Lock files: a killed process's and a killed capture's (stale), and a live agent's.
        stale = [".gpuprof-h-1.lock", f".{stems[0]}.lock"]
        for f in stale + [".gpuprof-h-2.lock"]:
            open(os.path.join(outdir, f), "w").close()
        held = open(os.path.join(outdir, ".gpuprof-h-2.lock"))
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        keep = int(env.get("KEEP", "8"))
        env.update({"KEEP": "3", "CAPTURE_EVERY_S": "0", "PATH": bindir + ":/usr/bin:/bin"})
        once = script.replace(out, outdir).replace("while true; do", "for _once in 1; do", 1)
        r = subprocess.run(["sh", "-c", once], env=env, capture_output=True, text=True, timeout=30)
        held.close()
        want = sorted(others + [".gpuprof-h-2.lock"] + [f for stem in stems[-3:]
                                for f in [stem + ".pftrace"] + [f"{stem}-{k}.pb.gz" for k in kinds]])
        got = sorted(os.listdir(outdir))
        check(r.returncode == 0 and got == want,
              f"{name}: {container['name']} keeps the newest KEEP ({keep}) traces with their pprof "
              f"files, removes older ones with theirs and stale lock files (rc {r.returncode}, "
              f"left {got})")


def break_copy(path, old, new):
    """A self-test's break: the first old in the copy at path becomes new; False (and a FAIL
    line) when the file no longer holds old."""
    text = open(path).read()
    if old not in text:
        print(f"FAIL: self-test: {path} no longer contains {old!r}")
        return False
    open(path, "w").write(text.replace(old, new, 1))
    return True


def self_test():
    """Breaks copies of the files one way at a time; each break must be caught."""
    import shutil
    import subprocess
    import tempfile
    breaks = [
        ("samples/kubernetes/pod.yaml", "value: /gpuprof/lib/libgpuprof.so", "value: /gpuprof/libgpuprof.so"),
        ("samples/kubernetes/pod.yaml", "- name: GPUPROF_WINDOW", "- name: GPUPROF_WINDOWS"),
        ("samples/kubernetes/pod.yaml", "fieldPath: spec.nodeName", "fieldPath: metadata.uid"),
        ("samples/kubernetes/pod-sidecar.yaml", "value: /gpuprof/run", "value: /tmp/run"),
        ("samples/kubernetes/pod-sidecar.yaml", "      restartPolicy: Always\n", ""),
        ("samples/kubernetes/pod-sidecar.yaml", '"$s-memcpy.pb.gz"', ""),
        ("samples/kubernetes/Dockerfile", "COPY cupti/ cupti/", "COPY cuptix/ cuptix/"),
        ("samples/kubernetes/Dockerfile", "--target gpuprof gpuprof_cli", "--target gpuprof gpuprof_cmd"),
    ]
    bad = 0
    for rel, old, new in breaks:
        with tempfile.TemporaryDirectory() as tmp:
            for d in ("samples/kubernetes", "agent", "cli", "cmake", "include", "cupti", "export"):
                shutil.copytree(os.path.join(ROOT, d), os.path.join(tmp, d))
            for f in ("CMakeLists.txt", "scripts/install-deps.sh"):
                os.makedirs(os.path.dirname(os.path.join(tmp, f)) or tmp, exist_ok=True)
                shutil.copy(os.path.join(ROOT, f), os.path.join(tmp, f))
            if not break_copy(os.path.join(tmp, rel), old, new):
                bad += 1
                continue
            r = subprocess.run([sys.executable, os.path.abspath(__file__), tmp],
                               capture_output=True, text=True)
            caught = r.returncode == 1 and "FAIL:" in r.stdout
            print(f"{'ok' if caught else 'FAIL'}: self-test: {rel}: {old!r} -> {new!r} "
                  f"{'caught' if caught else 'NOT caught'}")
            bad += not caught
    return 1 if bad else 0


def main():
    if "--self-test" in sys.argv:
        return self_test()
    known = known_vars()
    check("CUDA_INJECTION64_PATH" not in known, "sanity")
    payload, lib, binp = dockerfile_facts()
    pods = sorted(f for f in os.listdir(K8S) if f.endswith((".yaml", ".yml")))
    check(len(pods) >= 2, f"samples/kubernetes: a pod spec and a sidecar variant ({pods})")
    for p in pods:
        check_pod(os.path.join(K8S, p), known, lib, binp)
    for f in failures:
        print(f"FAIL: {f}")
    print(f"check_manifests: {passes} checks passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

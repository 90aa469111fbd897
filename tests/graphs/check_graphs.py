#!/usr/bin/env python3
"""Runs graph_attr under the agent and checks, with `go tool pprof`, that replayed graph work is
attributed to the stacks that created its nodes (docs/PROFILES.md, "CUDA graphs").

Usage (from ctest; tests/lib/GpuprofTest.cmake sets the agent's environment):
    check_graphs.py --case all|sampled -- PROGRAM
"""

import argparse
import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pprof"))
from check_pprof import Check, by_chain, expect_values, load_single  # noqa: E402

MARK = "[cuda graph replay]"
REPLAYS_CAPTURED, REPLAYS_EXPLICIT = 5, 3
NS_A, NS_B, NS_C, NS_D = 5000, 7000, 3000, 2000

GRAPH_KERNELS = {
    # Two nodes captured in gr_capture_a, replayed 5 times.
    ("[gpu] gr_kernel_a", MARK, "gr_capture_a", "gr_capture", "main"):
        [2 * REPLAYS_CAPTURED, 2 * REPLAYS_CAPTURED * NS_A],
    ("[gpu] gr_kernel_b", MARK, "gr_capture_b", "gr_capture", "main"):
        [REPLAYS_CAPTURED, REPLAYS_CAPTURED * NS_B],
    # Added with cuGraphAddKernelNode, replayed 3 times.
    ("[gpu] gr_kernel_c", MARK, "gr_add_node", "gr_build_explicit", "main"):
        [REPLAYS_EXPLICIT, REPLAYS_EXPLICIT * NS_C],
}
PLAIN = {("[gpu] gr_kernel_d", "gr_plain", "main"): [1, NS_D]}
MEMSETS = {("[gpu] memset", MARK, "gr_capture_b", "gr_capture", "main"):
           [REPLAYS_CAPTURED, None, REPLAYS_CAPTURED * 256]}


# graph_attr makes 5 nodes (captured: 2 x gr_kernel_a, gr_kernel_b, a memset; explicit:
# gr_kernel_c) and instantiates both graphs once: 5 + 5 clones CREATED, 5 CLONED callbacks;
# every original and clone has a stack, the clones' copied from their originals.
SUMMARY_GRAPHS = {"node_callbacks": 15, "nodes_with_stack": 10, "nodes_from_clones": 5,
                  "nodes_forgotten": 0}


def check(c, case, pid):
    with open(os.environ["GPUPROF_SUMMARY_FILE"]) as f:
        c.eq("summary graphs", json.load(f).get("graphs"), SUMMARY_GRAPHS)
    prof = load_single(c, pid, "gpu_time")
    if prof:
        got = by_chain(prof)
        for key in got:
            c.true(f"gpu_time: {key} is under gr_replay (the replay's stack)", "gr_replay" not in key)
        if case == "all":
            expect_values(c, "gpu_time", got, {**GRAPH_KERNELS, **PLAIN})
        else:
            # Sampled launches: the one plain launch may or may not be sampled, graph nodes
            # are counted exactly whatever the sampler did with the graph launches.
            got.pop(next(iter(PLAIN)), None)
            expect_values(c, "gpu_time", got, GRAPH_KERNELS)
    prof = load_single(c, pid, "memcpy")
    if prof:
        expect_values(c, "memcpy", by_chain(prof), MEMSETS)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True, choices=["all", "sampled"])
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    c = Check()
    for f in glob.glob(os.path.join(os.environ["GPUPROF_OUTPUT_DIR"], "gpuprof-*.pb.gz*")):
        os.unlink(f)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=120)
    sys.stderr.write(stderr)
    c.eq("exit status", proc.returncode, 0)
    c.true("the program finished its work", "graph_attr: done" in stdout)
    check(c, a.case, proc.pid)
    return c.exit_status(f"check_graphs {a.case}")


if __name__ == "__main__":
    sys.exit(main())

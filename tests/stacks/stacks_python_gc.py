"""Checks that taking a stack runs no Python code inside the driver call: with the collector's
threshold just above the allocations the call itself makes, a frame object the agent asked
for (3.11+ creates them on demand) would start a collection right there, seen by gc.callbacks.
Exits 1 if a collection ran while a driver call was in progress."""

import ctypes
import gc
import sys

cuda = ctypes.PyDLL("libcuda.so.1")
sync = cuda.cuCtxSynchronize  # looked up once: the first lookup runs Python code of ctypes
state = [0, 0]  # in a driver call; collections seen during one


def on_gc(phase, info):
    if state[0]:
        state[1] += 1


def check(result, what):
    if result != 0:
        print(f"stacks_python_gc: {what} returned {result}", file=sys.stderr)
        sys.exit(1)


def gc_leaf():
    # The second allocation of a GC-tracked object from here starts a collection; the call
    # itself (no arguments, an int result) allocates none.
    gc.set_threshold(gc.get_count()[0] + 1)
    state[0] = 1
    r = sync()
    state[0] = 0
    gc.set_threshold(700)
    check(r, "cuCtxSynchronize")


def gc_mid():
    gc_leaf()


def gc_top():
    gc_mid()


def gc_launch(fn):
    u = ctypes.c_uint
    check(cuda.cuLaunchKernel(fn, u(1), u(1), u(1), u(32), u(1), u(1), u(0), None, None, None),
          "cuLaunchKernel")


def main():
    check(cuda.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cuda.cuCtxCreate_v4(ctypes.byref(ctx), None, 0, dev), "cuCtxCreate")
    gc.callbacks.append(on_gc)
    for _ in range(3):
        gc_top()
    gc.callbacks.remove(on_gc)
    if state[1]:
        print(f"stacks_python_gc: {state[1]} garbage collection callbacks ran inside a driver call",
              file=sys.stderr)
        sys.exit(1)
    mod = ctypes.c_void_p()
    names = (ctypes.c_char_p * 1)(b"py_gc_kernel")
    check(cuda.fakegpu_module_from_names(ctypes.byref(mod), names, 1), "module_from_names")
    fn = ctypes.c_void_p()
    check(cuda.cuModuleGetFunction(ctypes.byref(fn), mod, b"py_gc_kernel"), "cuModuleGetFunction")
    gc_launch(fn)
    check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    print("stacks_python_gc: done")


main()

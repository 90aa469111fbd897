"""Drives the simulated driver through ctypes from nested functions, a method and a class
constructor, holding the GIL (ctypes.PyDLL), so the agent can merge these Python frames."""

import ctypes
import sys

cuda = ctypes.PyDLL("libcuda.so.1")


def check(result, what):
    if result != 0:
        print(f"stacks_python: {what} returned {result}", file=sys.stderr)
        sys.exit(1)


def kernel(name):
    mod = ctypes.c_void_p()
    names = (ctypes.c_char_p * 1)(name.encode())
    check(cuda.fakegpu_module_from_names(ctypes.byref(mod), names, 1), "module_from_names")
    fn = ctypes.c_void_p()
    check(cuda.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()), "cuModuleGetFunction")
    return fn


def launch(fn):
    u = ctypes.c_uint
    check(cuda.cuLaunchKernel(fn, u(1), u(1), u(1), u(32), u(1), u(1), u(0), None, None, None),
          "cuLaunchKernel")


class Model:
    def __init__(self, size):
        self.ptr = ctypes.c_uint64()
        check(cuda.cuMemAlloc_v2(ctypes.byref(self.ptr), ctypes.c_size_t(size)), "cuMemAlloc")
        self.fn = kernel("py_model_kernel")

    def forward(self):
        launch(self.fn)


def py_inner_step(fn):
    launch(fn)


def py_outer_step(fn):
    py_inner_step(fn)


def main():
    check(cuda.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cuda.cuCtxCreate_v4(ctypes.byref(ctx), None, 0, dev), "cuCtxCreate")
    model = Model(3 << 20)
    for _ in range(2):
        model.forward()
    fn = kernel("py_nested_kernel")
    py_outer_step(fn)
    check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    print("stacks_python: done")


main()

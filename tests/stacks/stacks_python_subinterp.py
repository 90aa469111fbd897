"""After a subinterpreter was created (CPython then turns PyGILState_Check off: it answers 1 on
every thread), launches through ctypes.CDLL, which releases the GIL around the call, must get
native stacks only and never read a thread state this thread does not hold; launches through
ctypes.PyDLL (GIL held) still get their Python frames."""

import ctypes
import sys

try:
    import _testcapi

    _testcapi.run_in_subinterp("x = 1")
except ImportError:
    import _xxsubinterpreters

    _xxsubinterpreters.destroy(_xxsubinterpreters.create())

held = ctypes.PyDLL("libcuda.so.1")
released = ctypes.CDLL("libcuda.so.1")


def check(result, what):
    if result != 0:
        print(f"stacks_python_subinterp: {what} returned {result}", file=sys.stderr)
        sys.exit(1)


def kernel(name):
    mod = ctypes.c_void_p()
    names = (ctypes.c_char_p * 1)(name.encode())
    check(held.fakegpu_module_from_names(ctypes.byref(mod), names, 1), "module_from_names")
    fn = ctypes.c_void_p()
    check(held.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()), "cuModuleGetFunction")
    return fn


def launch(dll, fn):
    u = ctypes.c_uint
    check(dll.cuLaunchKernel(fn, u(1), u(1), u(1), u(32), u(1), u(1), u(0), None, None, None),
          "cuLaunchKernel")


def launch_without_gil(fn):
    launch(released, fn)


def launch_with_gil(fn):
    launch(held, fn)


def main():
    check(held.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(held.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(held.cuCtxCreate_v4(ctypes.byref(ctx), None, 0, dev), "cuCtxCreate")
    launch_without_gil(kernel("py_released_kernel"))
    launch_with_gil(kernel("py_held_kernel"))
    check(held.cuCtxSynchronize(), "cuCtxSynchronize")
    print("stacks_python_subinterp: done")


main()

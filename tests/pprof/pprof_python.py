"""Known GPU work from known Python call chains for the pprof test (check_pprof.py --case python).

Calls go through ctypes.PyDLL, which keeps the GIL held during the call, so the agent merges
these Python frames into the host stacks. Every line the checker expects in a stack carries a
`# site:NAME` marker; the checker finds the line numbers by those markers, so the file can be
edited freely as long as each marked call stays on one line.
"""

import ctypes
import sys

cuda = ctypes.PyDLL("libcuda.so.1")
cudart = ctypes.PyDLL("libcudart.so.13")
# The same library through CDLL: ctypes releases the GIL around the call, so the agent must not
# read Python frames then (another thread may be running Python) and keeps the native stack.
cudart_nogil = ctypes.CDLL("libcudart.so.13")

KV_BLOCK = 1 << 20  # bytes per cache block
NS_DECODE = 5000  # simulated kernel durations the checker expects
NS_PREFILL = 7000


def check(result, what):
    if result != 0:
        print(f"pprof_python: {what} returned {result}", file=sys.stderr)
        sys.exit(1)


def kernel(name, ns):
    cuda.fakegpu_set_kernel_duration_ns(name.encode(), ctypes.c_uint64(ns))
    mod = ctypes.c_void_p()
    names = (ctypes.c_char_p * 1)(name.encode())
    check(cuda.fakegpu_module_from_names(ctypes.byref(mod), names, 1), "module_from_names")
    fn = ctypes.c_void_p()
    check(cuda.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()), "cuModuleGetFunction")
    return fn


class KVCache:
    """Runtime allocations: 3 blocks kept (in use at exit)."""

    def __init__(self, blocks):
        self.ptrs = []
        for _ in range(blocks):
            self.ptrs.append(self.grow())  # site:cache_init

    def grow(self):
        ptr = ctypes.c_void_p()
        r = cudart.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(KV_BLOCK))  # site:cache_grow
        check(r, "cudaMalloc")
        return ptr


def scratch():
    """Driver allocations: 2 x 8 KiB allocated and freed again (none in use)."""
    for _ in range(2):
        ptr = ctypes.c_uint64()
        r = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(8192))  # site:scratch
        check(r, "cuMemAlloc")
        check(cuda.cuMemFree_v2(ptr), "cuMemFree")


def released_gil():
    """One runtime allocation of 4 KiB with the GIL released, kept."""
    ptr = ctypes.c_void_p()
    check(cudart_nogil.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(4096)), "cudaMalloc")
    return ptr


def launch(fn):
    one = ctypes.c_uint(1)
    grid_block_shared = (one, one, one, ctypes.c_uint(32), one, one, ctypes.c_uint(0))
    r = cuda.cuLaunchKernel(fn, *grid_block_shared, None, None, None)  # site:launch
    check(r, "cuLaunchKernel")


def decode_step(fn):
    launch(fn)  # site:decode_step


def generate(fn, tokens):
    for _ in range(tokens):
        decode_step(fn)  # site:generate


def prefill(fn):
    launch(fn)  # site:prefill


def main():
    check(cuda.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    cache = KVCache(3)  # site:main_cache
    scratch()  # site:main_scratch
    kept = released_gil()
    k_decode = kernel("py_decode_kernel", NS_DECODE)
    k_prefill = kernel("py_prefill_kernel", NS_PREFILL)
    prefill(k_prefill)  # site:main_prefill
    generate(k_decode, 3)  # site:main_generate
    check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    kept_n = len(cache.ptrs) + (kept.value != 0)
    ver = "%d.%d" % sys.version_info[:2]
    print(f"pprof_python: done, {kept_n} allocations kept, Python {ver}")


main()  # site:module

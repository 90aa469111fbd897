#!/usr/bin/env python3
"""Sample: a small PyTorch workload with a training phase, a GPU memory leak and a kernel storm.

Runs where torch and a CUDA GPU are present; otherwise prints why and exits 0, so the
verification script can run it everywhere. A torch that is installed but does not import (a
shared library that does not load) is an error: one line on stderr, exit status 1.

Phases (in this order, each a named function so that host stacks show it):
  train_phase      20 steps of a 3-layer MLP (batch 256, 1024 -> 4096 -> 4096 -> 10) with SGD:
                   GEMM kernels, their backward passes and the optimizer's kernels
  leak_phase       8 steps; step k allocates k tensors of 16 MiB (4194304 float32) and keeps
                   them in a module-level list (36 tensors, 603979776 bytes, never freed)
  small_kernels    5000 tiny element-wise ops on a 1024-element tensor: a launch-bound storm

What a profiler must show (checked by the GPU verification script):
  GPU memory in use at exit is at least 603979776 bytes (the leaked tensors; PyTorch's caching
  allocator rounds them into its segments, so the device-level number is larger, never
  smaller), and the top in-use stack goes through PyTorch's allocator (c10::cuda::
  CUDACachingAllocator); with the GIL held, its Python frames name leak_phase.
  At least 5000 kernels: the small-kernel storm (kernel names are PyTorch's element-wise
  kernels, e.g. ...vectorized_elementwise_kernel...).
  stdout ends with "workload: done".
"""

import sys
import time

LEAK_STEPS = 8
LEAK_TENSOR_FLOATS = 4 * 1024 * 1024  # 16 MiB of float32
SMALL_OPS = 5000

# The leak: tensors stay referenced from here until the process exits.
_held = []


def train_phase(torch, device, steps=20):
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
        torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
        torch.nn.Linear(4096, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(256, 1024, device=device)
    y = torch.randint(0, 10, (256,), device=device)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    return float(loss.item())


def leak_phase(torch, device):
    for step in range(1, LEAK_STEPS + 1):
        for _ in range(step):
            _held.append(torch.ones(LEAK_TENSOR_FLOATS, device=device))
        torch.cuda.synchronize()
        print(f"workload: leak step {step}: {len(_held) * LEAK_TENSOR_FLOATS * 4 >> 20} MiB held",
              flush=True)


def small_kernels(torch, device):
    t = torch.zeros(1024, device=device)
    for _ in range(SMALL_OPS):
        t.add_(1.0)
    torch.cuda.synchronize()
    return float(t[0].item())


def main():
    try:
        import torch
    except ModuleNotFoundError as e:
        if e.name != "torch":  # torch is there but one of its own modules is not: broken
            print(f"workload: PyTorch is installed but does not import: {e!r}", file=sys.stderr)
            return 1
        print(f"workload: skipped: PyTorch is not installed for {sys.executable}")
        return 0
    except Exception as e:  # noqa: BLE001  a library that does not load, a version clash
        # Installed but broken here (often the library path: a libcudart or libcupti other
        # than its own): a failure to report, not a reason to skip.
        print(f"workload: PyTorch is installed but does not import: {e!r}", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("workload: skipped: torch.cuda.is_available() is False (no GPU or no driver)")
        return 0
    device = torch.device("cuda", 0)
    t0 = time.monotonic()
    loss = train_phase(torch, device)
    print(f"workload: train loss {loss:.4f}", flush=True)
    leak_phase(torch, device)
    total = small_kernels(torch, device)
    if total != float(SMALL_OPS):
        print(f"workload: small kernels computed {total}, expected {SMALL_OPS}", file=sys.stderr)
        return 1
    print(f"workload: {SMALL_OPS} small kernels verified; {time.monotonic() - t0:.1f} s")
    print("workload: done")
    return 0


if __name__ == "__main__":
    sys.exit(main())

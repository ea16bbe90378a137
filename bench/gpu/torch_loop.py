"""The ML loop of issue 33, for bench/gpu/torch: N steps of a bf16 1024x1024 matmul
(cuBLAS: cuLaunchKernelEx) and a softmax (PyTorch's own kernel: cudaLaunchKernel).

usage: torch_loop.py N plain|profile
Prints one JSON line: the timed loop's CLOCK_MONOTONIC bounds (t0, t1, ns; the agent's
ktime_ns is the same clock), loop_ns, and with `profile` the kernels torch.profiler
(CUPTI) saw inside the loop, by name. Warm-up steps (cuBLAS set-up) come before t0.
"""
import json
import sys
import time

import torch

n, mode = int(sys.argv[1]), sys.argv[2]
a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
b = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)


def step():
    torch.softmax(a @ b, dim=-1)


for _ in range(20):
    step()
torch.cuda.synchronize()


def loop():
    t0 = time.monotonic_ns()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    return t0, time.monotonic_ns()


out = {}
if mode == "profile":
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0, t1 = loop()
    kernels = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and "memcpy" not in e.name.lower() \
                and "memset" not in e.name.lower():
            kernels[e.name] = kernels.get(e.name, 0) + 1
    out["kernels"] = kernels
else:
    t0, t1 = loop()
out.update(t0=t0, t1=t1, loop_ns=t1 - t0, steps=n)
print(json.dumps(out))

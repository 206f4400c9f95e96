#!/usr/bin/env python3
"""The denominators of the speed benchmark, measured in the same run (docs/performance.md):
the BF16 cuBLAS rate at 8192³ (torch.matmul) and device copy bandwidth (bytes read + written).
Prints one JSON line."""
import json

import torch


def timed(fn, reps):
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return sorted(times)[len(times) // 2]  # median seconds


def main():
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    t_mm = timed(lambda: torch.matmul(a, b), 20)
    x = torch.empty(1 << 28, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    t_copy = timed(lambda: y.copy_(x), 20)
    print(json.dumps({"who": "baseline", "bf16_tflops": 2 * n ** 3 / t_mm / 1e12,
                      "copy_tbs": 2 * x.numel() * 2 / t_copy / 1e12,
                      "device": torch.cuda.get_device_name(), "torch": torch.__version__}))


if __name__ == "__main__":
    main()

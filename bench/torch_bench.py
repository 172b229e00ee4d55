"""The xvk-bench cases through PyTorch on the same GPU, timed the same way:
the median of individually timed launches (CUDA events), the L2 flushed
before each. Backward passes run through autograd, as training uses them.

    python3 bench/torch_bench.py [--quick] [--reps N] [--csv FILE]
    python3 bench/torch_bench.py --batch-norm [--quick] [--reps N] [--big-reps N]
        [--compile-budget SECONDS] [--no-compile] [--kernels] [--csv FILE]

--batch-norm runs xvk-bench --batch-norm's cases (bench/torch_bn.py) instead.
"""
import argparse
import csv
import statistics
import time

import torch
import torch.nn.functional as F

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
OPS = ["softmax_fwd", "softmax_bwd", "log_softmax_fwd", "log_softmax_bwd",
       "layer_norm_fwd", "layer_norm_bwd", "rms_norm_fwd", "rms_norm_bwd"]


WARM_UP_S = 0.02


def time_us(fn, flush, reps, setup=None):
    """Median of `reps` launches of fn, each alone between two events after an
    L2 flush. setup (untimed, before the flush) prepares each launch."""
    # Warm-up for WARM_UP_S of wall time (at least one launch), as xvk-bench
    # does (bench_util.cuh): clocks lowered while the host filled the data.
    warm_start = time.perf_counter()
    while True:
        if setup:
            setup()
        fn()
        torch.cuda.synchronize()
        if time.perf_counter() - warm_start >= WARM_UP_S:
            break
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(reps):
        if setup:
            setup()
        flush.fill_(i & 0xFF)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1000.0)
    return statistics.median(times)


def make_case(op, dtype, rows, cols):
    """Returns the function to time for one case."""
    dev = "cuda"
    x = (torch.rand(rows, cols, device=dev, dtype=torch.float32) * 6.93 - 2.96).to(dtype)  # mean 0.5, sd 2
    dy = torch.randn(rows, cols, device=dev, dtype=dtype)
    w = (1 + 0.1 * torch.randn(cols, device=dev)).to(dtype)
    b = (0.1 * torch.randn(cols, device=dev)).to(dtype)
    forward = op.endswith("_fwd")
    if op.startswith("softmax") or op.startswith("log_softmax"):
        f = torch.log_softmax if op.startswith("log") else torch.softmax
        if forward:
            return lambda: f(x, dim=-1)
        xg = x.clone().requires_grad_(True)
        y = f(xg, dim=-1)
        return lambda: torch.autograd.grad(y, xg, dy, retain_graph=True)
    if op.startswith("layer_norm"):
        if forward:
            return lambda: F.layer_norm(x, (cols,), w, b)
        xg, wg, bg = (t.clone().requires_grad_(True) for t in (x, w, b))
        y = F.layer_norm(xg, (cols,), wg, bg)
        return lambda: torch.autograd.grad(y, (xg, wg, bg), dy, retain_graph=True)
    if forward:
        return lambda: F.rms_norm(x, (cols,), w, eps=1e-6)
    xg, wg = (t.clone().requires_grad_(True) for t in (x, w))
    y = F.rms_norm(xg, (cols,), wg, eps=1e-6)
    return lambda: torch.autograd.grad(y, (xg, wg), dy, retain_graph=True)


def host_cost():
    x = torch.randn(1, 32, device="cuda", dtype=torch.float16)
    w = torch.ones(32, device="cuda", dtype=torch.float16)
    b = torch.zeros(32, device="cuda", dtype=torch.float16)
    for name, fn in (("softmax_fwd", lambda: torch.softmax(x, -1)),
                     ("layer_norm_fwd", lambda: F.layer_norm(x, (32,), w, b))):
        for _ in range(1000):
            fn()
        torch.cuda.synchronize()
        wall = cpu = 0.0
        for _ in range(100):  # batches of 100 between synchronizations, as xvk-bench does
            t0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(100):
                fn()
            t1, c1 = time.perf_counter(), time.thread_time()
            torch.cuda.synchronize()
            wall, cpu = wall + t1 - t0, cpu + c1 - c0
        print(f"  torch {name:16s} {wall * 1e2:.2f} us/call wall, {cpu * 1e2:.2f} us/call thread CPU time")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--csv", default=None)
    p.add_argument("--batch-norm", action="store_true", help="the BatchNorm cases (bench/torch_bn.py)")
    p.add_argument("--big-reps", type=int, default=None, help="BatchNorm: reps for shapes of >= 100M elements")
    p.add_argument("--compile-budget", type=float, default=-1,
                   help="BatchNorm: seconds for the torch.compile phase (compiles and their timing); "
                        "cases not started by then are reported as skipped; < 0: no limit")
    p.add_argument("--no-compile", action="store_true", help="BatchNorm: eager only")
    p.add_argument("--kernels", action="store_true",
                   help="BatchNorm: record the CUDA kernels each eager case launches (one profiled call)")
    a = p.parse_args()
    if a.batch_norm:
        import torch_bn  # beside this file
        return torch_bn.run(a, time_us)
    a.csv = a.csv or "torch-bench.csv"
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print("Host cost per call (10,000 calls on 1 x 32 fp16, in batches of 100 between synchronizations):")
    host_cost()
    flush = torch.empty(torch.cuda.get_device_properties(0).L2_cache_size * 4, dtype=torch.uint8, device="cuda")
    sweep = [32, 256, 1024, 4096, 32768] if a.quick else [32, 64, 128, 256, 512, 768, 1024, 1536, 2048, 4096, 8192, 16384, 32768]
    transformer = [768] if a.quick else [768, 1024, 4096, 5120, 8192]
    with open(a.csv, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["op", "dtype", "rows", "cols", "torch_us"])
        for op in OPS:
            for dname, dtype in DTYPES.items():
                for rows, cols in [(49152, c) for c in sweep] + [(8192, c) for c in transformer]:
                    fn = make_case(op, dtype, rows, cols)
                    us = time_us(fn, flush, a.reps)
                    out.writerow([op, dname, rows, cols, f"{us:.3f}"])
                    f.flush()
                    # No torch.cuda.empty_cache(): memory handed back to the driver slows every
                    # kernel for some 50 ms after (bench_util.cuh's Arena), which would fall on the
                    # next case. The caching allocator reuses the blocks, and frees them itself
                    # only when a larger case does not fit.
                    del fn
    print(f"wrote {a.csv}")


if __name__ == "__main__":
    main()

"""xvk-bench --batch-norm's cases through PyTorch, as mixed-precision training
uses BatchNorm: x (and z, dy) in the activation dtype, weight, bias and the
running statistics in fp32, F.batch_norm(training=True) (cuDNN where torch
picks it) then ReLU, or the Add+ReLU of a ResNet block; memory_format
contiguous (nchw) or channels_last (nhwc).

Timed per case, each the median of individually timed launches after an L2
flush (torch_bench.time_us, the method of xvk-bench):
  eager forward     the training forward with autograd recording, as in training
  eager backward    torch.autograd.grad(y, [x, weight, bias(, z)], dy,
                    retain_graph=True) on a graph built once: the backward only
  relu_bwd          threshold_backward(dy, y, 0) alone: what the ReLU's backward
                    costs torch (xvk reads a 1-bit mask in the BatchNorm backward instead)
  inference         F.batch_norm(training=False) then ReLU, under no_grad
  torch.compile     the same functions, compiled (dynamic=False, fullgraph=True);
                    the backward of a compiled forward is AOTAutograd's compiled
                    backward, timed after an untimed fresh forward each launch.
                    Failures are reported in compile_status, never fatal.

Run through torch_bench.py --batch-norm (it passes its time_us).
"""
import csv
import math
import time

import torch
import torch.nn.functional as F

SHAPES = [(256, 64, 112, 112), (256, 256, 56, 56), (256, 512, 28, 28), (256, 1024, 14, 14), (256, 2048, 7, 7),
          (16, 32, 112, 112)]
QUICK_SHAPES = [(256, 2048, 7, 7), (16, 32, 112, 112)]
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
LAYOUTS = {"nchw": torch.contiguous_format, "nhwc": torch.channels_last}
# The order torch.compile cases are taken in, when a budget cuts the phase short:
# what mixed-precision training on an H100 uses most first.
COMPILE_PRIORITY = [("bf16", "nhwc"), ("fp16", "nhwc"), ("bf16", "nchw"), ("fp16", "nchw"), ("fp32", "nhwc"),
                    ("fp32", "nchw")]
OPS = ["bn_relu_fwd", "bn_relu_bwd", "bn_add_relu_fwd", "bn_add_relu_bwd", "bn_relu_infer", "relu_bwd"]
BIG_NUMEL = 100_000_000  # shapes at least this large run --big-reps launches
MIN_REPS = 20
EPS, MOMENTUM = 1e-5, 0.1
FIELDS = ["op", "layout", "dtype", "n", "c", "h", "w", "reps", "eager_us", "eager_status", "compile_us", "compile_s",
          "compile_status", "eager_kernels"]


def bn_relu(x, w, b, rm, rv):
    return F.relu(F.batch_norm(x, rm, rv, w, b, training=True, momentum=MOMENTUM, eps=EPS))


def bn_add_relu(x, z, w, b, rm, rv):
    return F.relu(F.batch_norm(x, rm, rv, w, b, training=True, momentum=MOMENTUM, eps=EPS) + z)


def bn_relu_infer(x, w, b, rm, rv):
    return F.relu(F.batch_norm(x, rm, rv, w, b, training=False, eps=EPS))


def short_error(e):
    text = f"{type(e).__name__}: {e}".strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text.replace(",", ";").replace('"', "'")[:200]


class Case:
    """The tensors of one (shape, layout, dtype): activations in dtype and the
    layout's memory format, parameters and running statistics in fp32."""

    def __init__(self, shape, layout, dname):
        self.shape, self.layout, self.dname = shape, layout, dname
        dtype, fmt, c = DTYPES[dname], LAYOUTS[layout], shape[1]

        def act():
            return torch.empty(shape, device="cuda", dtype=dtype, memory_format=fmt)

        self.x = act().uniform_(-2.964, 3.964).requires_grad_(True)  # mean 0.5, sd 2, as xvk-bench
        self.z = act().normal_().requires_grad_(True)
        self.dy = act().normal_()
        self.w = (1 + 0.1 * torch.randn(c, device="cuda")).requires_grad_(True)
        self.b = (0.1 * torch.randn(c, device="cuda")).requires_grad_(True)
        self.rm = torch.zeros(c, device="cuda")
        self.rv = torch.ones(c, device="cuda")

    def args(self, add):
        return (self.x, self.z, self.w, self.b, self.rm, self.rv) if add else (self.x, self.w, self.b, self.rm, self.rv)

    def grad_inputs(self, add):
        return (self.x, self.w, self.b, self.z) if add else (self.x, self.w, self.b)


class KernelNames:
    """The CUDA kernels one call launches, by one profiled call (outside timing),
    within a time budget (the cases come largest shape first)."""

    def __init__(self, enabled, budget_s=25.0):
        self.enabled, self.spent, self.budget_s = enabled, 0.0, budget_s

    def __call__(self, fn):
        if not self.enabled:
            return ""
        if self.spent > self.budget_s:
            print(f"  kernel names off from here: their {self.budget_s:.0f} s budget is spent")
            self.enabled = False
            return ""
        t0 = time.perf_counter()
        try:
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn()
                torch.cuda.synchronize()
            names = []
            for e in prof.events():
                if e.device_type != torch.autograd.DeviceType.CUDA:
                    continue
                name = e.name[5:] if e.name.startswith("void ") else e.name
                name = name.split("(")[0].split("<")[0].strip()
                if name and name not in names:
                    names.append(name)
            self.spent += time.perf_counter() - t0
            return " | ".join(names).replace(",", ";")
        except Exception as e:  # the profiler is a convenience: turn it off, keep timing
            print(f"  kernel names off: the profiler failed ({short_error(e)})")
            self.enabled = False
            return ""


def reps_for(shape, a):
    return a.big_reps if math.prod(shape) >= BIG_NUMEL else a.reps


def eager_case(case, flush, reps, time_us, kernels, rows):
    """Times the eager cases of one (shape, layout, dtype) into rows[op]."""
    def record(op, fn, setup=None):
        try:
            us = time_us(fn, flush, reps, setup)
            rows[op].update(eager_us=f"{us:.3f}", eager_status="ok", eager_kernels=kernels(fn))
        except Exception as e:
            rows[op].update(eager_status="error: " + short_error(e))

    for add in (False, True):
        f = bn_add_relu if add else bn_relu
        name = "bn_add_relu" if add else "bn_relu"
        args = case.args(add)
        record(f"{name}_fwd", lambda: f(*args))
        try:
            y = f(*args)  # the graph the backward is timed on
        except Exception as e:
            for op in (f"{name}_bwd",) if add else (f"{name}_bwd", "relu_bwd"):
                rows[op].update(eager_status="error: " + short_error(e))
            continue
        grad_inputs = case.grad_inputs(add)
        record(f"{name}_bwd", lambda: torch.autograd.grad(y, grad_inputs, case.dy, retain_graph=True))
        if not add:
            y_out = y.detach()
            record("relu_bwd", lambda: torch.ops.aten.threshold_backward(case.dy, y_out, 0))
            del y_out
        del y

    def infer():
        with torch.no_grad():
            return bn_relu_infer(case.x, case.w, case.b, case.rm, case.rv)

    record("bn_relu_infer", infer)


def compile_case(case, flush, reps, time_us, rows, deadline):
    """torch.compile of the forward and (through AOTAutograd) the backward."""
    import torch._dynamo
    torch._dynamo.reset()  # a fresh cache per case: no recompile limit, no automatic dynamic shapes
    families = [("bn_relu", bn_relu, False, False), ("bn_add_relu", bn_add_relu, True, False),
                ("bn_relu", bn_relu_infer, False, True)]
    for name, fn, add, infer in families:
        ops = ["bn_relu_infer"] if infer else [f"{name}_fwd", f"{name}_bwd"]
        if deadline is not None and time.perf_counter() > deadline:
            for op in ops:
                rows[op].update(compile_status="skipped: compile budget spent")
            continue
        try:
            compiled = torch.compile(fn, dynamic=False, fullgraph=True)
            args = (case.x, case.w, case.b, case.rm, case.rv) if infer else case.args(add)
            grad_inputs = case.grad_inputs(add)
            t0 = time.perf_counter()
            if infer:
                with torch.no_grad():
                    compiled(*args)
            else:
                y_first = compiled(*args)  # its backward compiles (if lazily) at the first grad below
            torch.cuda.synchronize()
            compile_s = f"{time.perf_counter() - t0:.1f}"
        except Exception as e:
            for op in ops:
                rows[op].update(compile_status="error: " + short_error(e))
            continue
        try:
            if infer:
                def fwd():
                    with torch.no_grad():
                        return compiled(*args)
            else:
                def fwd():
                    return compiled(*args)
            us = time_us(fwd, flush, reps)
            rows[ops[0]].update(compile_us=f"{us:.3f}", compile_s=compile_s, compile_status="ok")
        except Exception as e:
            rows[ops[0]].update(compile_s=compile_s, compile_status="error: " + short_error(e))
        if infer:
            continue
        try:
            t0 = time.perf_counter()
            torch.autograd.grad(y_first, grad_inputs, case.dy)
            torch.cuda.synchronize()
            compile_s = f"{time.perf_counter() - t0:.1f}"
            del y_first
            held = []

            def setup():  # a fresh compiled forward (untimed) for each timed backward
                held.clear()
                held.append(compiled(*args))

            def bwd():
                return torch.autograd.grad(held[0], grad_inputs, case.dy)

            us = time_us(bwd, flush, reps, setup)
            held.clear()
            rows[ops[1]].update(compile_us=f"{us:.3f}", compile_s=compile_s, compile_status="ok")
        except Exception as e:
            rows[ops[1]].update(compile_s=compile_s, compile_status="error: " + short_error(e))


def write_csv(path, table):
    with open(path, "w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=FIELDS)
        out.writeheader()
        for rows in table.values():
            for op in OPS:
                out.writerow(rows[op])


def print_case(rows, which):
    for op in OPS:
        r = rows[op]
        shape = "x".join(str(r[k]) for k in "nchw")
        if which == "eager":
            status = r["eager_status"]
            value = f"{float(r['eager_us']):10.2f}" if status == "ok" else f"  {status}"
        else:
            if op == "relu_bwd":
                continue
            status = r["compile_status"]
            value = f"{float(r['compile_us']):10.2f}  (compiled in {r['compile_s']} s)" if status == "ok" else f"  {status}"
        print(f"{op:16s} {r['layout']:4s} {r['dtype']:5s} {shape:16s} {value}", flush=True)


def run(a, time_us):
    a.csv = a.csv or "torch-bn-bench.csv"
    a.big_reps = a.reps if a.big_reps is None else a.big_reps
    if a.reps < MIN_REPS or a.big_reps < MIN_REPS:
        print(f"note: BatchNorm cases run at least {MIN_REPS} launches each; raising --reps/--big-reps to {MIN_REPS}")
        a.reps, a.big_reps = max(a.reps, MIN_REPS), max(a.big_reps, MIN_REPS)
    print(f"torch {torch.__version__} (cuDNN {torch.backends.cudnn.version()}, enabled={torch.backends.cudnn.enabled}) "
          f"on {torch.cuda.get_device_name()}")
    if a.big_reps != a.reps:
        print(f"reps: the median of {a.reps} individually timed launches per case; {a.big_reps} for shapes of "
              f">= {BIG_NUMEL // 1_000_000}M elements (the largest: to keep the run short)")
    else:
        print(f"reps: the median of {a.reps} individually timed launches per case (every shape)")
    flush = torch.empty(torch.cuda.get_device_properties(0).L2_cache_size * 4, dtype=torch.uint8, device="cuda")
    shapes = QUICK_SHAPES if a.quick else SHAPES
    kernels = KernelNames(a.kernels)
    table = {}  # (shape, layout, dtype) -> {op: row}
    for shape in shapes:
        for layout in LAYOUTS:
            for dname in DTYPES:
                table[(shape, layout, dname)] = {
                    op: {"op": op, "layout": layout, "dtype": dname, "n": shape[0], "c": shape[1], "h": shape[2],
                         "w": shape[3], "reps": reps_for(shape, a), "eager_us": "", "eager_status": "not run",
                         "compile_us": "", "compile_s": "",
                         "compile_status": "n/a" if op == "relu_bwd" else ("off" if a.no_compile else "not run"),
                         "eager_kernels": ""} for op in OPS}

    t_eager = time.perf_counter()
    print("\neager (us; relu_bwd = threshold_backward alone):")
    for (shape, layout, dname), rows in table.items():
        try:
            case = Case(shape, layout, dname)
            eager_case(case, flush, reps_for(shape, a), time_us, kernels, rows)
            del case
        except Exception as e:  # e.g. out of memory: this case fails, the others run
            for op in OPS:
                if rows[op]["eager_status"] == "not run":
                    rows[op]["eager_status"] = "error: " + short_error(e)
        print_case(rows, "eager")
        torch.cuda.empty_cache()
        write_csv(a.csv, table)
    print(f"eager phase: {time.perf_counter() - t_eager:.0f} s")

    if not a.no_compile:
        t0 = time.perf_counter()
        deadline = t0 + a.compile_budget if a.compile_budget >= 0 else None
        budget = f"a budget of {a.compile_budget:.0f} s" if deadline else "no time budget"
        print(f"\ntorch.compile (dynamic=False, fullgraph=True; {budget}; cases in the order "
              f"{', '.join(d + '/' + l for d, l in COMPILE_PRIORITY)}):")
        for dname, layout in COMPILE_PRIORITY:
            for shape in shapes:
                rows = table[(shape, layout, dname)]
                if deadline is not None and time.perf_counter() > deadline:
                    for op in OPS:
                        if op != "relu_bwd":
                            rows[op]["compile_status"] = "skipped: compile budget spent"
                    continue
                try:
                    case = Case(shape, layout, dname)
                    compile_case(case, flush, reps_for(shape, a), time_us, rows, deadline)
                    del case
                except Exception as e:
                    for op in OPS:
                        if rows[op]["compile_status"] == "not run":
                            rows[op]["compile_status"] = "error: " + short_error(e)
                print_case(rows, "compile")
                torch.cuda.empty_cache()
                write_csv(a.csv, table)
        done = sum(r["compile_status"] == "ok" for rows in table.values() for r in rows.values())
        skipped = sum(r["compile_status"].startswith("skipped") for rows in table.values() for r in rows.values())
        failed = sum(r["compile_status"].startswith("error") for rows in table.values() for r in rows.values())
        print(f"compile phase: {time.perf_counter() - t0:.0f} s; {done} cases timed, {failed} failed, "
              f"{skipped} skipped (budget)")
    write_csv(a.csv, table)
    print(f"wrote {a.csv}")

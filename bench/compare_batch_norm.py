"""Joins xvk-bench --batch-norm's CSV with torch_bench.py --batch-norm's (same
GPU, same run): per case xvk's time and its fraction of the copy ceiling
(bytes of the minimal algorithm), torch eager and torch.compile times and the
speedups over both; then geometric-mean summaries, the ReLU mask's effect on
the backward, and every case where xvk is slower.

    python3 bench/compare_batch_norm.py xvk-bn-bench.csv torch-bn-bench.csv [--out FILE]

xvk's bn_relu_bwd_y (the backward reading y instead of the mask) is compared
with the same torch backward as bn_relu_bwd: torch's graph always reads y.
"""
import csv
import math
import sys
from collections import defaultdict

OPS = ["bn_relu_fwd", "bn_relu_bwd", "bn_relu_bwd_y", "bn_add_relu_fwd", "bn_add_relu_bwd", "bn_relu_infer"]
TORCH_OP = {"bn_relu_bwd_y": "bn_relu_bwd"}  # torch has no mask: its bn+relu backward reads y


def geo(values):
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def num(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return float("nan")


def fmt(v, spec):
    return format(v, spec) if math.isfinite(v) else format("-", ">" + spec.split(".")[0].lstrip("<>"))


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    xvk_path, torch_path = sys.argv[1], sys.argv[2]
    out_path = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else None
    key = lambda r, op: (op, r["layout"], r["dtype"], r["n"], r["c"], r["h"], r["w"])
    torch_rows = {key(r, r["op"]): r for r in csv.DictReader(open(torch_path))}
    xvk_rows = list(csv.DictReader(open(xvk_path)))
    lines = []
    p = lines.append
    p("BatchNorm: xvk against PyTorch (eager and torch.compile), same GPU. Columns:")
    p("  xvk us     median time of one xvk call (L2 flushed before each launch)")
    p("  ceil%      copy time of the minimal algorithm's bytes / xvk time (100% = as fast as a copy of those bytes)")
    p("  xcopy      xvk time / that copy time")
    p("  eager us   torch eager, same case (fwd: bn+relu(+add) with autograd recording; bwd: autograd.grad of that")
    p("             graph; infer: no_grad); compile us: the same through torch.compile ('-': not run, see status)")
    p("  vs eager   eager us / xvk us (> 1: xvk faster); vs comp: compile us / xvk us")
    p("")
    header = (f"{'op':16s} {'lay':4s} {'dtype':5s} {'shape':16s} {'xvk us':>9s} {'ceil%':>6s} {'xcopy':>6s} "
              f"{'eager us':>9s} {'comp us':>9s} {'vs eager':>8s} {'vs comp':>7s}  flags")
    p(header)
    p("-" * len(header))
    by_op = defaultdict(lambda: {"eager": [], "comp": [], "ceil": [], "slower": 0, "n": 0})
    by_group = defaultdict(lambda: {"eager": [], "comp": []})
    overall = {"eager": [], "comp": []}
    flagged, failed, compile_notes = [], [], defaultdict(int)
    xvk_by_key = {}
    for r in xvk_rows:
        op = r["op"]
        shape = f"{r['n']}x{r['c']}x{r['h']}x{r['w']}"
        xvk_by_key[key(r, op)] = r
        t = torch_rows.get(key(r, TORCH_OP.get(op, op)))
        ok = r["status"] == "ok"
        xus = num(r["xvk_us"]) if ok else float("nan")
        ceil = num(r["fraction_of_ceiling"]) if ok else float("nan")
        xcopy = num(r["x_copy_time"]) if ok else float("nan")
        eus = num(t["eager_us"]) if t and t["eager_status"] == "ok" else float("nan")
        cus = num(t["compile_us"]) if t and t["compile_status"] == "ok" else float("nan")
        s_eager, s_comp = eus / xus, cus / xus
        flags = []
        if not ok:
            flags.append("XVK FAILED: " + r["status"][:80])
            failed.append((op, r["layout"], r["dtype"], shape))
        if t is None:
            flags.append("no torch row")
        elif t["compile_status"] not in ("ok", "n/a"):
            compile_notes[t["compile_status"].split(":")[0]] += 1
        if math.isfinite(s_eager) and s_eager < 1.0:
            flags.append("SLOWER than eager")
        if math.isfinite(s_comp) and s_comp < 1.0:
            flags.append("SLOWER than compile")
        if any(f.startswith("SLOWER") for f in flags):
            flagged.append(f"{op:16s} {r['layout']:4s} {r['dtype']:5s} {shape:16s} xvk {xus:.2f} us, eager "
                           f"{fmt(eus, '.2f')} us, compile {fmt(cus, '.2f')} us")
            by_op[op]["slower"] += 1
        if ok:
            by_op[op]["n"] += 1
            by_op[op]["ceil"].append(ceil)
            for which, v in (("eager", s_eager), ("comp", s_comp)):
                if math.isfinite(v):
                    by_op[op][which].append(v)
                    if op != "bn_relu_bwd_y":
                        by_group[(r["layout"], r["dtype"])][which].append(v)
                        overall[which].append(v)
        p(f"{op:16s} {r['layout']:4s} {r['dtype']:5s} {shape:16s} {fmt(xus, '9.2f')} {fmt(100 * ceil, '5.1f')}"
          f"{'%' if ok else ' '} {fmt(xcopy, '6.3f')} {fmt(eus, '9.2f')} {fmt(cus, '9.2f')} {fmt(s_eager, '8.2f')} "
          f"{fmt(s_comp, '7.2f')}  {'; '.join(flags)}")

    p("")
    p("Geometric means per op (speedup = torch time / xvk time; ceil% = fraction of the copy ceiling; min and max of")
    p("the speedup vs eager; slower = cases where xvk is slower than eager or compile):")
    p(f"{'op':16s} {'cases':>5s} {'ceil%':>6s} {'vs eager':>8s} {'min':>6s} {'max':>6s} {'vs comp':>7s} "
      f"{'(cases)':>7s} {'slower':>6s}")
    for op in OPS:
        d = by_op.get(op)
        if not d:
            continue
        e, c = d["eager"], d["comp"]
        p(f"{op:16s} {d['n']:5d} {fmt(100 * geo(d['ceil']), '5.1f')}% {fmt(geo(e), '8.2f')} "
          f"{fmt(min(e) if e else float('nan'), '6.2f')} {fmt(max(e) if e else float('nan'), '6.2f')} "
          f"{fmt(geo(c), '7.2f')} {len(c):7d} {d['slower']:6d}")
    p("")
    p("Geometric mean speedup per layout and dtype (every op but bn_relu_bwd_y):")
    for (layout, dtype), d in sorted(by_group.items()):
        p(f"  {layout:4s} {dtype:5s} vs eager {fmt(geo(d['eager']), '5.2f')} ({len(d['eager'])} cases), "
          f"vs compile {fmt(geo(d['comp']), '5.2f')} ({len(d['comp'])} cases)")
    p("")
    p(f"Overall (training and inference ops, bn_relu_bwd_y left out): speedup vs eager {fmt(geo(overall['eager']), '.2f')}"
      f" over {len(overall['eager'])} cases; vs torch.compile {fmt(geo(overall['comp']), '.2f')} over "
      f"{len(overall['comp'])} cases")

    p("")
    p("The ReLU mask in the backward: xvk's bn+relu backward from the 1-bit mask against the same from y, and what")
    p("torch spends on the ReLU's backward alone (threshold_backward(dy, y), before its BatchNorm backward):")
    p(f"{'lay':4s} {'dtype':5s} {'shape':16s} {'xvk mask':>9s} {'xvk y':>9s} {'y/mask':>6s} {'torch relu':>10s} "
      f"{'torch bwd':>9s}")
    ratios = []
    for r in xvk_rows:
        if r["op"] != "bn_relu_bwd":
            continue
        shape = f"{r['n']}x{r['c']}x{r['h']}x{r['w']}"
        ry = xvk_by_key.get(key(r, "bn_relu_bwd_y"))
        tm = num(r["xvk_us"]) if r["status"] == "ok" else float("nan")
        ty = num(ry["xvk_us"]) if ry and ry["status"] == "ok" else float("nan")
        trelu = torch_rows.get(key(r, "relu_bwd"))
        tbwd = torch_rows.get(key(r, "bn_relu_bwd"))
        trelu_us = num(trelu["eager_us"]) if trelu and trelu["eager_status"] == "ok" else float("nan")
        tbwd_us = num(tbwd["eager_us"]) if tbwd and tbwd["eager_status"] == "ok" else float("nan")
        if math.isfinite(ty / tm):
            ratios.append(ty / tm)
        p(f"{r['layout']:4s} {r['dtype']:5s} {shape:16s} {fmt(tm, '9.2f')} {fmt(ty, '9.2f')} {fmt(ty / tm, '6.2f')} "
          f"{fmt(trelu_us, '10.2f')} {fmt(tbwd_us, '9.2f')}")
    p(f"geometric mean of xvk y/mask: {fmt(geo(ratios), '.3f')} over {len(ratios)} cases")

    p("")
    if compile_notes:
        p("cases without a torch.compile time: " + ", ".join(f"{n} {k}" for k, n in sorted(compile_notes.items())) +
          " (the torch CSV's compile_status says why; a budget cuts the compile phase short)")
    p(f"cases where xvk is slower than torch: {len(flagged)}")
    lines.extend("  " + f for f in flagged)
    if failed:
        p(f"xvk cases that FAILED: {len(failed)} (status column of the xvk CSV)")
    kernels = defaultdict(list)  # (op, layout, dtype) -> distinct kernel lists over the shapes
    for t in torch_rows.values():
        k = (t["op"], t["layout"], t["dtype"])
        if t.get("eager_kernels") and t["eager_kernels"] not in kernels[k]:
            kernels[k].append(t["eager_kernels"])
    if kernels:
        p("")
        p("Kernels torch eager launched (one profiled call per case; distinct lists over the shapes):")
        for (op, layout, dtype), lists in sorted(kernels.items()):
            for i, names in enumerate(lists):
                p(f"  {op if i == 0 else '':16s} {layout if i == 0 else '':4s} {dtype if i == 0 else '':5s} {names}")
    text = "\n".join(lines)
    print(text)
    if out_path:
        open(out_path, "w").write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

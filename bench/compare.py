"""Joins xvk-bench's CSV with torch_bench.py's (same GPU, same run) into the
table the issue asks for, and checks the targets:
forward <= 1.10x and backward <= 1.25x the copy time; faster than PyTorch at
every case, >= 1.5x in geometric mean.

    python3 bench/compare.py xvk-bench.csv torch-bench.csv [--out FILE]
"""
import csv
import math
import sys


def main():
    xvk_path, torch_path = sys.argv[1], sys.argv[2]
    out_path = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else None
    key = lambda r: (r["op"], r["dtype"], r["rows"], r["cols"])
    torch_rows = {key(r): r for r in csv.DictReader(open(torch_path))}
    lines = []
    header = f"{'op':16s} {'dtype':5s} {'rows':>6s} {'cols':>6s} {'variant':22s} {'xvk us':>9s} {'GB/s':>6s} {'ceil%':>6s} {'xcopy':>6s} {'torch us':>9s} {'speedup':>7s}"
    lines.append(header)
    ratios, misses = [], []
    for r in csv.DictReader(open(xvk_path)):
        t = torch_rows.get(key(r))
        xus, xcopy = float(r["xvk_us"]), float(r["x_copy_time"])
        speedup = float(t["torch_us"]) / xus if t else float("nan")
        if t:
            ratios.append(speedup)
        limit = 1.10 if r["op"].endswith("fwd") else 1.25
        flags = []
        if xcopy > limit:
            flags.append(f"copy>{limit}")
        if t and speedup <= 1.0:
            flags.append("slower-than-torch")
        if flags:
            misses.append((r, flags))
        lines.append(f"{r['op']:16s} {r['dtype']:5s} {r['rows']:>6s} {r['cols']:>6s} {r['variant']:22s} {xus:9.2f} "
                     f"{float(r['gbps']):6.0f} {100 * float(r['fraction_of_ceiling']):5.1f}% {xcopy:6.3f} "
                     f"{float(t['torch_us']) if t else float('nan'):9.2f} {speedup:7.2f} {' '.join(flags)}")
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else float("nan")
    lines.append("")
    lines.append(f"cases: {len(ratios)}; speedup over torch: geometric mean {geo:.2f}, min {min(ratios):.2f}, max {max(ratios):.2f}")
    lines.append(f"cases missing a target: {len(misses)}")
    text = "\n".join(lines)
    print(text)
    if out_path:
        open(out_path, "w").write(text + "\n")


if __name__ == "__main__":
    main()

"""Summarises the ncu source page of one profiled launch (bench/run_on_gpu.sh
rowcounts): executed instructions per SASS opcode, as thread instructions per
element of the case (warp instructions x 32 / (rows x cols)), and the
instructions with the most stall samples.

    python3 bench/sass_counts.py SOURCE.csv ROWS COLS [--top N]

SOURCE.csv: `ncu -i REPORT --page source --csv --print-source sass`.
Predicated-off instructions count: they take an issue slot.
"""
import csv
import sys
from collections import Counter


def opcode(sass):
    words = sass.split()
    if not words:
        return ""
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    # Conversions keep their first modifier (HADD2.F32, F2FP.F16): it names the types.
    keep = 2 if op.startswith(("F2FP", "HADD2", "I2F", "F2I", "F2F")) else 1
    return ".".join(op.split(".")[:keep])


def main():
    args = sys.argv[1:]
    top = 12
    if "--top" in args:
        i = args.index("--top")
        top = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 3:
        print(__doc__)
        return 2
    path, rows, cols = args[0], int(args[1]), int(args[2])
    lines = open(path).read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"Address"')), None)
    if start is None:
        print("no ncu source rows in", path)
        return 1
    kernel = next((next(csv.reader([l]))[1] for l in lines[:start] if l.startswith('"Kernel Name"')), "?")
    per_op, stalls, hot = Counter(), Counter(), []
    total = 0
    for row in csv.DictReader(lines[start:]):
        try:
            executed = int(row["Instructions Executed"].replace(",", ""))
        except (KeyError, ValueError):
            continue
        samples = int((row.get("Warp Stall Sampling (All Samples)") or "0").replace(",", ""))
        op = opcode(row["Source"])
        per_op[op] += executed
        stalls[op] += samples
        total += executed
        hot.append((samples, row["Address"], row["Source"].strip()))
    elements = rows * cols
    print(kernel)
    print(f"{total} warp instructions, {total * 32 / elements:.2f} thread instructions per element "
          f"({rows} x {cols})")
    for op, n in per_op.most_common():
        if n * 32 / elements < 0.05:
            break
        print(f"  {op:<16} {n * 32 / elements:6.2f} per element   stall samples {stalls[op]}")
    print(f"most stall samples (of {sum(stalls.values())}):")
    for samples, address, sass in sorted(hot, reverse=True)[:top]:
        print(f"  {samples:6d}  {address}  {sass}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Summarises an `ncu --csv` run of xvk-bench (bench/run_on_gpu.sh bnprofile):
per kernel (name with template arguments), the launches profiled, the median
duration, the DRAM bytes read and written per launch and the achieved DRAM
throughput as a fraction of peak.

    python3 bench/ncu_summary.py ncu.csv
"""
import csv
import statistics
import sys
from collections import defaultdict


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    lines = open(sys.argv[1]).read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        print("no ncu CSV rows in", sys.argv[1])
        return 1
    metrics = defaultdict(dict)  # launch id -> metric -> value
    names = {}
    for row in csv.DictReader(lines[start:]):
        launch = row["ID"]
        names[launch] = row["Kernel Name"]
        try:
            value = float(row["Metric Value"].replace(",", ""))
        except ValueError:
            continue
        unit = row.get("Metric Unit", "")
        scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6,
                 "Gbyte": 1e9}.get(unit, 1.0)
        metrics[launch][row["Metric Name"]] = value * scale
    by_kernel = defaultdict(list)
    for launch, m in metrics.items():
        by_kernel[names[launch]].append(m)
    print(f"{'launches':>8s} {'median us':>10s} {'read MB':>9s} {'write MB':>9s} {'dram %':>7s}  kernel")
    for name, runs in sorted(by_kernel.items(), key=lambda kv: -statistics.median(
            r.get("gpu__time_duration.sum", 0) for r in kv[1])):
        med = lambda key: statistics.median(r.get(key, float("nan")) for r in runs)
        print(f"{len(runs):8d} {med('gpu__time_duration.sum'):10.2f} {med('dram__bytes_read.sum') / 1e6:9.2f} "
              f"{med('dram__bytes_write.sum') / 1e6:9.2f} "
              f"{med('dram__throughput.avg.pct_of_peak_sustained_elapsed'):7.1f}  {name[:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Compare two builds of a Google Benchmark binary (bench_model, bench_attention, ...) on a noisy machine.

A shared VM's speed drifts by a third within minutes, so two binaries run one after the other
compare the minutes, not the code. This alternates them (A, B, A, B, ...), each run a few short
repetitions, and compares the fast end of all repetitions (minimum and 20th percentile): the
moments when the machine was quiet. The median is printed too; when it disagrees with the
minimum the run saw a noisy spell, and more rounds are needed.

  benchmarks/ab_kernels.py --rounds 8 --filter 'QuantizedMatmul/type:4/isa:1/tokens:32$' OLD NEW

Keep a copy of the old binary (cp build/benchmarks/bench_model /tmp/bench_model.old) before
rebuilding. Comparing a binary with itself shows the method's own spread (1-2 % at the minimum
on a Zen 3 VM whose medians moved by 30 %).
"""
import argparse
import collections
import json
import statistics
import subprocess
import sys


def run_once(binary, pattern, repetitions, min_time):
    try:
        run = subprocess.run(
            [binary, f"--benchmark_filter={pattern}", f"--benchmark_min_time={min_time}",
             f"--benchmark_repetitions={repetitions}", "--benchmark_report_aggregates_only=false",
             "--benchmark_format=json"],
            capture_output=True, text=True)
    except OSError as e:
        sys.exit(f"{binary}: {e.strerror}")
    if run.returncode != 0:
        sys.exit(f"{binary} failed (exit {run.returncode}): {run.stderr.strip()[-500:]}")
    times = collections.defaultdict(list)
    if not run.stdout.strip():  # nothing matched the filter
        return times
    for b in json.loads(run.stdout)["benchmarks"]:
        if b.get("run_type") == "iteration" and "error_occurred" not in b:
            times[b["run_name"]].append(b["real_time"] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]])
    return times


def quantile(values, q):
    values = sorted(values)
    return values[int(q * (len(values) - 1))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="the baseline binary")
    parser.add_argument("b", help="the binary to compare")
    parser.add_argument("--filter", required=True, help="--benchmark_filter's regular expression")
    parser.add_argument("--rounds", type=int, default=6, help="A/B alternations (default 6)")
    parser.add_argument("--repetitions", type=int, default=10, help="repetitions per run (default 10)")
    parser.add_argument("--min-time", type=float, default=0.02, help="seconds per repetition (default 0.02)")
    args = parser.parse_args()
    if args.rounds < 1 or args.repetitions < 1 or args.min_time <= 0:
        parser.error("--rounds and --repetitions must be at least 1, --min-time positive")

    samples = {"A": collections.defaultdict(list), "B": collections.defaultdict(list)}
    for _ in range(args.rounds):
        for tag, binary in (("A", args.a), ("B", args.b)):
            for name, values in run_once(binary, args.filter, args.repetitions, args.min_time).items():
                samples[tag][name].extend(values)
    names = sorted(set(samples["A"]) & set(samples["B"]))
    if not names:
        sys.exit(f"no benchmark matching {args.filter!r} ran in both binaries")
    print(f"{args.rounds} rounds x {args.repetitions} repetitions; times in ms; B/A below 1: B is faster")
    print(f"{'benchmark':44s} {'A min':>9s} {'A p20':>9s} {'A med':>9s} {'B min':>9s} {'B p20':>9s} {'B med':>9s}"
          f"  B/A min   p20   med")
    for name in names:
        a, b = samples["A"][name], samples["B"][name]
        ratios = [min(b) / min(a), quantile(b, 0.2) / quantile(a, 0.2), statistics.median(b) / statistics.median(a)]
        print(f"{name:44s} {min(a):9.3f} {quantile(a, 0.2):9.3f} {statistics.median(a):9.3f} "
              f"{min(b):9.3f} {quantile(b, 0.2):9.3f} {statistics.median(b):9.3f}"
              f"  {ratios[0]:7.3f} {ratios[1]:5.3f} {ratios[2]:5.3f}")


if __name__ == "__main__":
    main()

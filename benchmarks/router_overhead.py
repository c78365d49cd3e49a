#!/usr/bin/env python3
"""What `pagedkv router` adds: latency per request and CPU per request, measured against the same
backend reached directly.

One `pagedkv serve` (stories260K) and one router in front of it, on loopback. For each of --rounds
rounds, `pagedkv bench serve` sends the same random dataset (--input-len / --output-len tokens,
streamed, at --request-rate) once directly to the backend and once through the router, in
alternating order. Reported per path: TTFT p50 / p99 and end-to-end p50 (medians over the
rounds), the router's added TTFT (through - direct), and the router's CPU time per request routed
(from /proc: user + system of the router process over the through-router runs), whose inverse is
the requests per second one core could route.

Usage: /usr/bin/python3 benchmarks/router_overhead.py [--request-rate 40] [--num-prompts 400]
         [--rounds 3] [--policy kv] [--json]
"""

import argparse
import json
import os
import pathlib
import statistics
import sys

REPO = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO.parent / "tests" / "python"))
from cluster_mooncake import ENV, run_json  # noqa: E402
from serve_support import Server  # noqa: E402


def cpu_seconds(pid):
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def bench(a, url):
    r = run_json("bench", "serve", "--base-url", url, "--dataset", "random", "--random-input-len", a.input_len,
                 "--random-output-len", a.output_len, "--num-prompts", a.num_prompts, "--request-rate", a.request_rate,
                 "--seed", 7, "--json")
    if r["failed"]:
        raise RuntimeError(f"{r['failed']} requests failed: {r['errors']}")
    return {"ttft_p50": r["ttft_ms"]["median"], "ttft_p99": r["ttft_ms"]["p99"], "e2e_p50": r["e2e_ms"]["median"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--request-rate", default="40")
    p.add_argument("--num-prompts", type=int, default=400)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--policy", default="kv")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()

    rows = {"direct": [], "router": []}
    router_cpu = 0.0
    routed = 0
    with Server("--num-blocks", "1024", env=ENV) as backend, \
            Server("--backend", backend.base_url, "--policy", a.policy, command="router", env=ENV) as router:
        for round_no in range(a.rounds):
            order = ["direct", "router"] if round_no % 2 == 0 else ["router", "direct"]
            for path in order:
                if path == "direct":
                    rows["direct"].append(bench(a, backend.base_url))
                    continue
                before = cpu_seconds(router.proc.pid)
                rows["router"].append(bench(a, router.base_url))
                router_cpu += cpu_seconds(router.proc.pid) - before
                routed += a.num_prompts

    med = {path: {k: statistics.median(r[k] for r in rs) for k in ("ttft_p50", "ttft_p99", "e2e_p50")}
           for path, rs in rows.items()}
    added = {k: med["router"][k] - med["direct"][k] for k in med["direct"]}
    cpu_per_request_us = 1e6 * router_cpu / routed
    out = {"request_rate": a.request_rate, "num_prompts": a.num_prompts, "input_len": a.input_len,
           "output_len": a.output_len, "rounds": a.rounds, "policy": a.policy, "runs": rows, "median": med,
           "added_ms": added, "router_cpu_us_per_request": cpu_per_request_us,
           "requests_per_core_second": 1e6 / cpu_per_request_us if cpu_per_request_us else None}
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"random dataset {a.input_len} in / {a.output_len} out, {a.num_prompts} requests at {a.request_rate}/s, "
          f"streamed, {a.rounds} rounds (medians), policy {a.policy}:")
    print(f"{'path':8} {'TTFT p50':>9} {'TTFT p99':>9} {'E2E p50':>9}")
    for path, m in med.items():
        print(f"{path:8} {m['ttft_p50']:7.2f}ms {m['ttft_p99']:7.2f}ms {m['e2e_p50']:7.2f}ms")
    print(f"added    {added['ttft_p50']:7.2f}ms {added['ttft_p99']:7.2f}ms {added['e2e_p50']:7.2f}ms")
    print(f"router CPU per request: {cpu_per_request_us:.0f} us (one core: ~{1e6 / cpu_per_request_us:.0f} requests/s)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Many `pagedkv serve` instances on one Mooncake trace slice: per-instance caches against a
shared Redis tier, measured, next to what `pagedkv replay --mode cluster` predicts.

For each setup (`local`: N instances, each with its own device pool only; `shared`: the same N
instances on one redis-server of this script's own, the remote tier) it starts the servers on
free loopback ports, sends the first --num-prompts records of the conversation trace with
`pagedkv bench serve --dataset mooncake` (arrivals at the trace's timestamps x --time-scale,
requests round-robin over the instances), and reads back:
  - the cached-token rate the responses report (usage.prompt_tokens_details.cached_tokens over
    prompt tokens), and the hit tokens by tier from the servers' /metrics;
  - TTFT mean / p99 and output throughput.
The requests sent are saved as a pagedkv JSONL trace and replayed through the cache model,
`pagedkv replay --mode cluster --router round-robin`, with the same instances and per-instance
capacity: its `local` hit rate predicts the first setup, its `global` pool (one LRU of N x C) the
second. Everything is stopped at the end, always (servers by SIGTERM, Redis too).

Usage: /usr/bin/python3 benchmarks/cluster_mooncake.py [--instances 2] [--num-blocks 256]
         [--num-prompts 1000] [--time-scale 0.1] [--rounds 1] [--json]
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
from redis_support import RedisServer, redis_available  # noqa: E402
from serve_support import Server, pagedkv_bin  # noqa: E402

ENV = {**os.environ, "OMP_WAIT_POLICY": "passive", "PAGEDKV_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
TRACE = REPO.parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl"


def run_json(*args):
    out = subprocess.run([str(pagedkv_bin()), *map(str, args)], capture_output=True, text=True, env=ENV, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"pagedkv {' '.join(map(str, args[:3]))} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return json.loads(out.stdout)


def serve_cluster(a, setup, requests_file, redis=None, round_no=0):
    server_args = ["--num-blocks", a.num_blocks, "--block-size", 16, "--max-num-seqs", 32]
    if redis is not None:
        # A namespace per round: nothing stored by an earlier round is found.
        server_args += ["--remote-cache", redis.url, "--remote-cache-prefix", f"cluster-r{round_no}"]
    servers = []
    try:
        for _ in range(a.instances):
            servers.append(Server(*server_args, env=ENV))
        report = run_json("bench", "serve", *sum((["--base-url", s.base_url] for s in servers), []),
                          "--dataset", "mooncake", "--dataset-path", a.trace, "--num-prompts", a.num_prompts,
                          "--time-scale", a.time_scale, "--save-requests", requests_file, "--json")
    finally:
        for s in servers:
            s.stop()
    if report["failed"]:
        raise RuntimeError(f"{setup}: {report['failed']} requests failed: {report['errors']}")
    return {"setup": setup,
            "cached_token_rate": report["cached_token_rate"],
            "server_hit_rate": report["prefix_cache_hit_rate"],
            "hit_tokens_by_tier": report["hit_tokens_by_tier"],
            "ttft_mean_ms": report["ttft_ms"]["mean"], "ttft_p99_ms": report["ttft_ms"]["p99"],
            "output_throughput": report["output_throughput"],
            "completed_by_server": report["completed_by_server"]}


def predict(a, requests_file):
    """The cache model's hit rates for the requests that were sent: round-robin over N instances of
    C blocks (`local`), one LRU pool of N x C (`global`), and one pool without a bound
    (`unbounded`: every block ever computed can be found again, the shared tier's ceiling)."""
    common = ["--format", "tokens", "--block-size", 16, "--json", "--no-progress"]
    cluster = run_json("replay", requests_file, "--mode", "cluster", "--instances", a.instances, "--router", "round-robin",
                       "--capacity-blocks", a.num_blocks, *common)
    unbounded = run_json("replay", requests_file, "--mode", "cache", "--capacity-blocks", "inf", *common)
    unbounded = unbounded[0] if isinstance(unbounded, list) else unbounded
    unbounded = unbounded["results"][0] if "results" in unbounded else unbounded
    return {"local": cluster["local"]["token_hit_rate"], "global": cluster["global"]["token_hit_rate"],
            "unbounded": unbounded["token_hit_rate"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--instances", type=int, default=2)
    p.add_argument("--num-blocks", type=int, default=256, help="device blocks per instance (16 tokens each)")
    p.add_argument("--num-prompts", type=int, default=1000)
    p.add_argument("--time-scale", type=float, default=0.1)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--trace", default=str(TRACE))
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if not pathlib.Path(a.trace).exists():
        sys.exit(f"cluster_mooncake: the trace {a.trace} is missing (../shared/traces)")
    if not redis_available():
        sys.exit("cluster_mooncake: redis-server is missing (scripts/setup.sh installs it)")

    rows, prediction = [], None
    with tempfile.TemporaryDirectory(prefix="pagedkv-cluster-") as tmp:
        requests_file = str(pathlib.Path(tmp) / "requests.jsonl")
        with RedisServer("--maxmemory", "2gb", "--maxmemory-policy", "allkeys-lru") as redis:
            for round_no in range(a.rounds):
                rows.append({"round": round_no, **serve_cluster(a, "local", requests_file)})
                rows.append({"round": round_no, **serve_cluster(a, "shared", requests_file, redis, round_no)})
        prediction = predict(a, requests_file)

    def median(setup, key):
        return statistics.median(r[key] for r in rows if r["setup"] == setup)

    summary = {setup: {k: median(setup, k) for k in ("cached_token_rate", "server_hit_rate", "ttft_mean_ms",
                                                        "ttft_p99_ms", "output_throughput")}
               for setup in ("local", "shared")}
    out = {"instances": a.instances, "num_blocks_per_instance": a.num_blocks, "num_prompts": a.num_prompts,
           "time_scale": a.time_scale, "rounds": rows, "median": summary, "replay_prediction": prediction}
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{a.instances} instances x {a.num_blocks} blocks of 16 tokens, first {a.num_prompts} requests of "
          f"{pathlib.Path(a.trace).name}, time scale {a.time_scale}, {a.rounds} round(s); medians:")
    print(f"{'setup':8} {'cached tokens':>14} {'server hit':>11} {'TTFT mean':>10} {'TTFT p99':>10} {'out tok/s':>10}")
    for setup, s in summary.items():
        print(f"{setup:8} {100 * s['cached_token_rate']:13.1f}% {100 * s['server_hit_rate']:10.1f}% "
              f"{s['ttft_mean_ms']:8.1f}ms {s['ttft_p99_ms']:8.1f}ms {s['output_throughput']:10.0f}")
    for r in rows:
        print(f"  round {r['round']} {r['setup']}: hit tokens by tier {r['hit_tokens_by_tier']}, "
              f"completed per server {r['completed_by_server']}")
    print(f"pagedkv replay of the same requests (token hit rate): local {100 * prediction['local']:.1f}%, "
          f"global pool of {a.instances} x {a.num_blocks} blocks {100 * prediction['global']:.1f}%, "
          f"unbounded {100 * prediction['unbounded']:.1f}%")


if __name__ == "__main__":
    main()

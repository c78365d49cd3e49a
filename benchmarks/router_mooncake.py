#!/usr/bin/env python3
"""`pagedkv router` on a Mooncake trace slice: each routing policy over N `pagedkv serve`
instances with small KV pools, with and without the shared Redis tier, measured, next to what
`pagedkv replay --mode cluster` predicts for the same requests and policy.

For each setup (`local`: each instance its own device pool; `shared`: plus one redis-server of
this script's own as the remote tier) and each policy (kv, round-robin, least-load, random) it
starts the instances and a router on free loopback ports, sends the first --num-prompts records of
the conversation trace through the router with `pagedkv bench serve --dataset mooncake` (arrivals
at the trace's timestamps x --time-scale), and reads back the cached-token rate the responses
report, TTFT mean / p99, output throughput, how the router spread the requests, and its decision
time. The requests sent (with their measured latencies) are replayed through the cache model with
the same policy (`--router kv` or `round-robin`; least-load and random have no replay twin), the
`local` figure being its prediction for the local setup. Everything is stopped at the end.

Usage: /usr/bin/python3 benchmarks/router_mooncake.py [--instances 2] [--num-blocks 256]
         [--num-prompts 600] [--time-scale 0.1] [--rounds 1] [--policies kv,kv@0.5,round-robin,...]
         [--prefill-scale 2.0] [--random-model 192x512x6x6] [--setups local,shared] [--json]
"""

import argparse
import json
import pathlib
import statistics
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO.parent / "tests" / "python"))
from cluster_mooncake import ENV, TRACE, run_json  # noqa: E402
from random_llama2c import write_checkpoint  # noqa: E402
from redis_support import RedisServer, redis_available  # noqa: E402
from serve_support import Server  # noqa: E402


def router_metrics(router):
    """The router's decision-time histogram (mean, in microseconds) and its credited prefix blocks."""
    from prometheus_client.parser import text_string_to_metric_families
    total = count = credited = 0.0
    for family in text_string_to_metric_families(router.get("/metrics").text):
        for s in family.samples:
            if s.name == "pagedkv_router_decision_seconds_sum":
                total = s.value
            elif s.name == "pagedkv_router_decision_seconds_count":
                count = s.value
            elif s.name == "pagedkv_router_prefix_blocks_total":
                credited += s.value
    return (1e6 * total / count if count else 0.0), credited


def split_policy(spec, default_scale):
    """"kv@0.5" -> ("kv", 0.5); anything else keeps the default prefill scale."""
    policy, _, scale = spec.partition("@")
    return policy, float(scale) if scale else default_scale


def run_policy(a, setup, spec, requests_file, redis=None, tag=""):
    policy, prefill_scale = split_policy(spec, a.prefill_scale)
    server_args = [*a.model_args, "--num-blocks", a.num_blocks, "--block-size", 16, "--max-num-seqs", 32]
    if redis is not None:
        server_args += ["--remote-cache", redis.url, "--remote-cache-prefix", f"router-{tag}"]
    servers, router = [], None
    try:
        for _ in range(a.instances):
            servers.append(Server(*server_args, env=ENV))
        router_args = [*a.model_args, "--policy", policy, "--prefill-scale", prefill_scale, "--seed", 1]
        for s in servers:
            router_args += ["--backend", s.base_url]
        router = Server(*router_args, command="router", env=ENV)
        report = run_json("bench", "serve", "--base-url", router.base_url, "--dataset", "mooncake",
                          "--dataset-path", a.trace, "--num-prompts", a.num_prompts, "--time-scale", a.time_scale,
                          "--save-requests", requests_file, "--json")
        state = router.get("/router/state").json()
        decision_us, credited = router_metrics(router)
    finally:
        if router is not None:
            router.stop()
        for s in servers:
            s.stop()
    if report["failed"]:
        raise RuntimeError(f"{setup}/{spec}: {report['failed']} requests failed: {report['errors']}")
    return {"setup": setup, "policy": spec,
            "cached_token_rate": report["cached_token_rate"],
            "ttft_mean_ms": report["ttft_ms"]["mean"], "ttft_p99_ms": report["ttft_ms"]["p99"],
            "output_throughput": report["output_throughput"],
            "routed": [b["routed"] for b in state["backends"]],
            "router_credited_blocks": credited, "decision_us_mean": decision_us}


def predict(a, spec, requests_file):
    policy, prefill_scale = split_policy(spec, a.prefill_scale)
    if policy not in ("kv", "round-robin"):
        return None
    r = run_json("replay", requests_file, "--mode", "cluster", "--instances", a.instances, "--router", policy,
                 "--prefill-scale", prefill_scale, "--capacity-blocks", a.num_blocks, "--format", "tokens",
                 "--block-size", 16, "--json", "--no-progress")
    r = r[0] if isinstance(r, list) else r
    return {"local": r["local"]["token_hit_rate"], "global": r["global"]["token_hit_rate"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--instances", type=int, default=2)
    p.add_argument("--num-blocks", type=int, default=256, help="device blocks per instance (16 tokens each)")
    p.add_argument("--num-prompts", type=int, default=600)
    p.add_argument("--time-scale", type=float, default=0.1)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--policies", default="kv,round-robin,least-load,random",
                   help="comma-separated; kv@S: the kv policy with --prefill-scale S")
    p.add_argument("--prefill-scale", type=float, default=2.0)
    p.add_argument("--setups", default="local,shared", help="local (own pools only), shared (plus the Redis tier)")
    p.add_argument("--random-model", metavar="DIMxHIDDENxLAYERSxHEADS",
                   help="serve a random-weight llama2.c model of this shape (e.g. 192x512x6x6; "
                        "benchmarks/random_llama2c.py) instead of stories260K, whose prefill is too cheap to matter")
    p.add_argument("--trace", default=str(TRACE))
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    a.model_args = []
    if not pathlib.Path(a.trace).exists():
        sys.exit(f"router_mooncake: the trace {a.trace} is missing (../shared/traces)")
    policies = a.policies.split(",")
    setups = a.setups.split(",")
    if "shared" in setups and not redis_available():
        sys.exit("router_mooncake: redis-server is missing (scripts/setup.sh installs it)")

    rows = []
    with tempfile.TemporaryDirectory(prefix="pagedkv-router-") as tmp, \
            RedisServer("--maxmemory", "2gb", "--maxmemory-policy", "allkeys-lru") as redis:
        if a.random_model:
            dim, hidden, layers, heads = map(int, a.random_model.split("x"))
            model = str(pathlib.Path(tmp) / "random.bin")
            write_checkpoint(model, dim, hidden, layers, heads, heads)
            a.model_args = ["--model", model, "--tokenizer", str(pathlib.Path(a.trace).parents[1] / "models" / "tok512.bin")]
        for round_no in range(a.rounds):
            for setup in setups:
                for policy in policies:
                    requests_file = str(pathlib.Path(tmp) / f"{setup}-{policy}-{round_no}.jsonl")
                    row = run_policy(a, setup, policy, requests_file, redis if setup == "shared" else None,
                                     f"{policy}-{round_no}")
                    row["round"] = round_no
                    row["replay"] = predict(a, policy, requests_file) if setup == "local" else None
                    rows.append(row)
                    if not a.json:
                        print(f"  round {round_no} {setup:6} {policy:11}: cached {100 * row['cached_token_rate']:5.1f}%"
                              f"  TTFT mean {row['ttft_mean_ms']:7.1f} ms  p99 {row['ttft_p99_ms']:7.1f} ms"
                              f"  out {row['output_throughput']:6.0f} tok/s  routed {row['routed']}"
                              f"  decision {row['decision_us_mean']:.0f} us"
                              + (f"  replay {100 * row['replay']['local']:5.1f}%" if row["replay"] else ""), flush=True)

    def median(setup, policy, key):
        values = [r[key] for r in rows if r["setup"] == setup and r["policy"] == policy]
        return statistics.median(values)

    summary = {f"{s}/{pol}": {k: median(s, pol, k) for k in ("cached_token_rate", "ttft_mean_ms", "ttft_p99_ms",
                                                            "output_throughput", "decision_us_mean")}
               for s in setups for pol in policies}
    for key, row in summary.items():
        replays = [r["replay"]["local"] for r in rows
                   if f"{r['setup']}/{r['policy']}" == key and r["replay"] is not None]
        row["replay_local"] = statistics.median(replays) if replays else None
    out = {"model": a.random_model or "stories260K",
           "instances": a.instances, "num_blocks_per_instance": a.num_blocks, "num_prompts": a.num_prompts,
           "time_scale": a.time_scale, "prefill_scale": a.prefill_scale, "rounds": rows, "median": summary}
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"\n{a.random_model or 'stories260K'}: "
          f"{a.instances} instances x {a.num_blocks} blocks of 16 tokens behind pagedkv router, first "
          f"{a.num_prompts} requests of {pathlib.Path(a.trace).name}, time scale {a.time_scale}, "
          f"{a.rounds} round(s); medians:")
    print(f"{'setup/policy':22} {'cached tokens':>14} {'replay':>8} {'TTFT mean':>10} {'TTFT p99':>10} {'out tok/s':>10}"
          f" {'decision':>9}")
    for key, s in summary.items():
        replay = f"{100 * s['replay_local']:7.1f}%" if s["replay_local"] is not None else "       -"
        print(f"{key:22} {100 * s['cached_token_rate']:13.1f}% {replay} {s['ttft_mean_ms']:8.1f}ms "
              f"{s['ttft_p99_ms']:8.1f}ms {s['output_throughput']:10.0f} {s['decision_us_mean']:7.0f}us")


if __name__ == "__main__":
    main()

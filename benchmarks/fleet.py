#!/usr/bin/env python3
"""A fleet on one machine, with failures: N `pagedkv serve` instances sharing prefixes through a
6-node Redis Cluster (3 masters, 3 replicas), behind R routers, under the Mooncake conversation
trace — while an instance, a router and a Redis master are killed (SIGKILL) mid-run.

For each routing policy (kv, then round-robin as the baseline) it starts a fresh cluster, the
instances (`--remote-cache redis-cluster://...`) and the routers (`--migration-limit 2`: a stream
whose instance dies continues on another), and sends the first --num-prompts records of the
trace with `pagedkv bench serve --dataset mooncake`, requests round-robin over the routers and
`--failover 2` (a client whose router dies sends the request again to the other). At a quarter,
half and three quarters of the trace's span it kills the instance the first router has most
streams on, the last router and a Redis
master. It reports:
  - requests sent / answered (equal: nothing accepted is lost), retried by the clients, and the
    streams the routers moved to another instance;
  - golden canaries: greedy answers of a few prompts, from an instance before the run and through
    the surviving router after it, byte for byte;
  - the cached-token rate the responses report, against `pagedkv replay --mode cluster` on the
    requests sent: `local` (each instance alone) and `shared` (one pool holding every block, what
    a shared tier without eviction approaches);
  - TTFT p50 / p99 and output throughput; the kv policy's TTFT against round-robin's;
  - how the tier's keys spread over the cluster's masters.
Everything runs on 127.0.0.1 and is stopped at the end, always.

Usage: scripts/fleet.sh [--instances 6] [--routers 2] [--num-prompts 300] [--time-scale 0.1]
         [--num-blocks 128] [--policies kv,round-robin] [--random-model DxHxLxH] [--short] [--json]
"""

import argparse
import json
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO.parent / "tests" / "python"))
from cluster_mooncake import ENV, TRACE, run_json  # noqa: E402
from random_llama2c import write_checkpoint  # noqa: E402
from redis_support import RedisCluster, redis_available  # noqa: E402
from serve_support import Server, pagedkv_bin  # noqa: E402

CANARIES = ["Once upon a time, there was a little dog", "Lily and Tom went to the park to play with",
            "The big red ball rolled down the hill and"]


def canary_answers(server):
    answers = []
    for prompt in CANARIES:
        r = server.post("/v1/completions", {"prompt": prompt, "max_tokens": 24, "temperature": 0}, timeout=60)
        answers.append(r.json()["choices"][0]["text"] if r.status_code == 200 else f"HTTP {r.status_code}: {r.text}")
    return answers


def metric_sum(server, name, **labels):
    from prometheus_client.parser import text_string_to_metric_families
    total = 0.0
    for family in text_string_to_metric_families(server.get("/metrics").text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def trace_span_s(a):
    with open(a.trace) as f:
        stamps = [json.loads(line)["timestamp"] for _, line in zip(range(a.num_prompts), f)]
    return (stamps[-1] - stamps[0]) / 1000 * a.time_scale


def run_policy(a, policy, tmp):
    requests_file = str(pathlib.Path(tmp) / f"{policy}.jsonl")
    faults, servers, routers = [], [], []
    with RedisCluster() as cluster:
        try:
            for _ in range(a.instances):
                servers.append(Server(*a.model_args, "--num-blocks", a.num_blocks, "--block-size", 16,
                                      "--max-num-seqs", 32, "--remote-cache", cluster.url,
                                      "--remote-cache-prefix", f"fleet-{policy}", env=ENV))
            expected = canary_answers(servers[0])
            for _ in range(a.routers):
                args = [*a.model_args, "--policy", policy, "--migration-limit", 2, "--seed", 1]
                for s in servers:
                    args += ["--backend", s.base_url]
                routers.append(Server(*args, command="router", env=ENV))
            bench = subprocess.Popen(
                [str(pagedkv_bin()), "bench", "serve", *[x for r in routers for x in ("--base-url", r.base_url)],
                 "--failover", str(a.routers), "--dataset", "mooncake", "--dataset-path", a.trace,
                 "--num-prompts", str(a.num_prompts), "--time-scale", str(a.time_scale),
                 "--ignore-eos", "--save-requests", requests_file, "--json"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
            start = time.monotonic()
            span = trace_span_s(a)

            def at(fraction, what, action):
                while time.monotonic() - start < fraction * span:
                    if bench.poll() is not None:
                        return
                    time.sleep(0.05)
                if bench.poll() is None:
                    said = action()
                    faults.append((round(time.monotonic() - start, 2), said or what))

            def kill_busiest_instance():
                # The instance the first router has most streams on (waiting a little for one that
                # has any), so that some streams must move.
                deadline = time.monotonic() + 0.2 * span
                while True:
                    backends = routers[0].get("/router/state").json()["backends"]
                    victim = max(range(len(servers)), key=lambda i: backends[i]["in_flight"])
                    if backends[victim]["in_flight"] > 0 or time.monotonic() > deadline or bench.poll() is not None:
                        break
                    time.sleep(0.005)
                servers[victim].proc.send_signal(signal.SIGKILL)
                return f"instance {victim} killed ({backends[victim]['in_flight']} streams of router 0 on it)"

            def kill_master():
                masters = cluster.masters()
                if masters:
                    masters[0].kill()

            schedule = [(0.25, "an instance killed", kill_busiest_instance),
                        (0.5, f"router {a.routers - 1} killed", lambda: routers[-1].proc.send_signal(signal.SIGKILL)),
                        (0.75, "a Redis master killed", kill_master)]
            injector = threading.Thread(target=lambda: [at(f, w, act) for f, w, act in schedule])
            injector.start()
            stdout, stderr = bench.communicate(timeout=3600)
            injector.join()
            if not stdout.strip():
                raise RuntimeError(f"bench serve printed no report: {stderr[-2000:]}")
            report = json.loads(stdout)
            survivor = routers[0]
            migrated = {result: metric_sum(survivor, "pagedkv_router_stream_migrations_total", result=result)
                        for result in ("continued", "restarted", "limit", "not_continuable", "no_backend")}
            after = canary_answers(survivor)
            spread = [m.dbsize() for m in cluster.masters()]
        finally:
            for r in routers:
                r.stop()
            for s in servers:
                s.stop()
    replay = run_json("replay", requests_file, "--mode", "cluster", "--instances", a.instances,
                      "--router", "kv" if policy == "kv" else "round-robin", "--capacity-blocks", a.num_blocks,
                      "--format", "tokens", "--block-size", 16, "--json", "--no-progress")
    replay = replay[0] if isinstance(replay, list) else replay
    # A pool that never evicts: each instance's share of every block the requests hold.
    with open(requests_file) as f:
        total_blocks = sum(len(json.loads(line)["tokens"]) // 16 + 1 for line in f)
    unbounded = run_json("replay", requests_file, "--mode", "cluster", "--instances", a.instances,
                         "--router", "round-robin", "--capacity-blocks", total_blocks // a.instances + 1, "--format", "tokens",
                         "--block-size", 16, "--json", "--no-progress")
    unbounded = unbounded[0] if isinstance(unbounded, list) else unbounded
    return {"policy": policy, "sent": a.num_prompts, "answered": report["completed"], "failed": report["failed"],
            "errors": report.get("errors", []), "retried": report.get("retried", 0),
            "migrated_by_surviving_router": migrated, "faults": faults,
            "canaries_unchanged": after == expected, "canaries": {"before": expected, "after": after},
            "cached_token_rate": report["cached_token_rate"],
            "replay_local": replay["local"]["token_hit_rate"], "replay_shared": unbounded["global"]["token_hit_rate"],
            "ttft_p50_ms": report["ttft_ms"]["median"], "ttft_p99_ms": report["ttft_ms"]["p99"],
            "output_throughput": report["output_throughput"], "keys_per_master": spread}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--instances", type=int, default=6)
    p.add_argument("--routers", type=int, default=2)
    p.add_argument("--num-prompts", type=int, default=300)
    p.add_argument("--time-scale", type=float, default=0.1)
    p.add_argument("--num-blocks", type=int, default=128, help="device blocks per instance (16 tokens each)")
    p.add_argument("--policies", default="kv,round-robin")
    p.add_argument("--random-model", metavar="DIMxHIDDENxLAYERSxHEADS",
                   help="serve a random-weight llama2.c model of this shape instead of stories260K")
    p.add_argument("--short", action="store_true", help="the test's version: 80 prompts, the kv policy only")
    p.add_argument("--trace", default=str(TRACE))
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.short:
        a.num_prompts, a.policies, a.time_scale = 80, "kv", 0.2
    if a.routers < 2 or a.instances < 2:
        sys.exit("fleet: at least 2 instances and 2 routers (one of each is killed)")
    if not redis_available():
        sys.exit("fleet: redis-server is missing (scripts/setup.sh installs it)")
    if not pathlib.Path(a.trace).exists():
        sys.exit(f"fleet: the trace {a.trace} is missing (../shared/traces)")
    a.model_args = []
    rows = []
    with tempfile.TemporaryDirectory(prefix="pagedkv-fleet-") as tmp:
        if a.random_model:
            dim, hidden, layers, heads = map(int, a.random_model.split("x"))
            model = str(pathlib.Path(tmp) / "random.bin")
            write_checkpoint(model, dim, hidden, layers, heads, heads)
            a.model_args = ["--model", model, "--tokenizer", str(pathlib.Path(a.trace).parents[1] / "models" / "tok512.bin")]
        for policy in a.policies.split(","):
            rows.append(run_policy(a, policy, tmp))
            r = rows[-1]
            if not a.json:
                print(f"{policy:11} sent {r['sent']} answered {r['answered']} (retried {r['retried']}, "
                      f"moved {r['migrated_by_surviving_router']})  canaries "
                      f"{'unchanged' if r['canaries_unchanged'] else 'CHANGED'}  cached {100 * r['cached_token_rate']:.1f}% "
                      f"(replay local {100 * r['replay_local']:.1f}%, shared {100 * r['replay_shared']:.1f}%)  "
                      f"TTFT p50 {r['ttft_p50_ms']:.0f} ms p99 {r['ttft_p99_ms']:.0f} ms  "
                      f"out {r['output_throughput']:.0f} tok/s  keys per master {r['keys_per_master']}  "
                      f"faults {r['faults']}", flush=True)
    out = {"model": a.random_model or "stories260K", "instances": a.instances, "routers": a.routers,
           "num_prompts": a.num_prompts, "time_scale": a.time_scale, "num_blocks_per_instance": a.num_blocks,
           "runs": rows}
    by_policy = {r["policy"]: r for r in rows}
    if "kv" in by_policy and "round-robin" in by_policy:
        kv, rr = by_policy["kv"], by_policy["round-robin"]
        out["kv_over_round_robin"] = {"ttft_p50": kv["ttft_p50_ms"] / rr["ttft_p50_ms"],
                                      "ttft_p99": kv["ttft_p99_ms"] / rr["ttft_p99_ms"]}
    if a.json:
        print(json.dumps(out, indent=2))
    elif "kv_over_round_robin" in out:
        ratio = out["kv_over_round_robin"]
        print(f"kv / round-robin: TTFT p50 {ratio['ttft_p50']:.2f}x, p99 {ratio['ttft_p99']:.2f}x")
    lost = [r["policy"] for r in rows if r["answered"] != r["sent"] or not r["canaries_unchanged"]]
    if lost:
        sys.exit(f"fleet: requests lost or canaries changed under {lost}")


if __name__ == "__main__":
    main()

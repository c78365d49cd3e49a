#!/usr/bin/python3
"""The remote tier on a Redis Cluster against redis-benchmark --cluster, like for like
(benchmarks/remote_tier.sh with CLUSTER=M runs this).

Starts M masters with R replicas each (redis-server on free loopback ports whose bus ports are
free too, a temporary directory each, no persistence), joins them with redis-cli --cluster
create, then alternates, ROUNDS times: the tier storing and loading BLOCKS new blocks of
stories260K's layout (bench_remote_tier --url redis-cluster://...) and redis-benchmark --cluster
doing the same work (SETs of new keys, then GETs of stored keys; one connection per master,
pipeline 32, the tier's value size). Prints each round and the medians and ranges of the ratios,
and the client's CPU time per block on each side (the tier's process, all its threads; the
redis-benchmark process): on a machine whose CPUs the servers share, that decides the rates.
Stops every server at the end.
  benchmarks/remote_tier_cluster.py BUILD_DIR MASTERS REPLICAS ROUNDS BLOCKS
With BASELINE=path/to/another/bench_remote_tier (e.g. a build of an earlier commit) each round
also runs that binary, the two in alternating order, and prints the medians and ranges of
this build's rates over the baseline's, store and load apart (before/after in the same
conditions).
"""
import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def free_cluster_port():
    while True:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        if port + 10000 > 65535:
            continue
        b = socket.socket()
        try:
            b.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue
        finally:
            b.close()


def cli(port, *args, timeout=10):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True,
                          timeout=timeout).stdout


def children_cpu_seconds():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def bench_rate(port, clients, op, size, n, keyspace):
    """Requests per second, and redis-benchmark's CPU microseconds per request."""
    cpu0 = children_cpu_seconds()
    out = subprocess.run(["redis-benchmark", "--cluster", "-h", "127.0.0.1", "-p", str(port), "-c", str(clients), "-P", "32",
                          "-d", str(size), "-n", str(n), "-r", str(keyspace), "-t", op, "-q"],
                         capture_output=True, text=True, timeout=300).stdout.replace("\r", "\n")
    m = re.findall(rf"^{op.upper()}: ([0-9.]+) requests", out, re.M)
    if not m:
        raise RuntimeError(f"redis-benchmark said: {out[-500:]}")
    return float(m[-1]), (children_cpu_seconds() - cpu0) / n * 1e6


def main():
    build, masters, replicas, rounds, blocks = sys.argv[1], *map(int, sys.argv[2:6])
    root = tempfile.mkdtemp(prefix="pagedkv-redis-cluster-bench-")
    procs, ports = [], []
    try:
        for i in range(masters * (1 + replicas)):
            port = free_cluster_port()
            d = os.path.join(root, str(port))
            os.mkdir(d)
            procs.append(subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", d, "--save", "",
                 "--appendonly", "no", "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-node-timeout", "1000", "--loglevel", "warning", "--logfile", os.path.join(d, "log")]))
            ports.append(port)
        for port in ports:
            for _ in range(200):
                if cli(port, "ping").strip() == "PONG":
                    break
                time.sleep(0.05)
        subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports], "--cluster-replicas",
                        str(replicas), "--cluster-yes"], check=True, capture_output=True, timeout=60)
        for _ in range(300):
            if all("cluster_state:ok" in cli(p, "cluster", "info") for p in ports):
                break
            time.sleep(0.1)
        url = "redis-cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports[:masters])
        cpu = "?"
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
        print(f"cluster: {masters} masters, {replicas} replicas each; {blocks} blocks per round; CPU {cpu}; "
              f"load average {os.getloadavg()[0]:.2f}")

        def flush():
            for p in ports:
                cli(p, "flushall")

        def tier_run(binary):
            """The tier's figures: the medians of 3 runs of BLOCKS (after one that warms up)."""
            flush()
            out = subprocess.run([binary, "--url", url, "--model",
                                  "../shared/models/stories260K.bin", "--blocks", str(blocks),
                                  "--random-model", "0", "--tier-only", "1", "--raw-cluster", "1",
                                  "--batch", str(32 * masters), "--rounds", "3"],
                                 capture_output=True, text=True, check=True, timeout=300).stdout
            return json.loads(out)["models"]["stories260K"]

        baseline = os.environ.get("BASELINE")
        rows, ab = [], []
        for r in range(1, rounds + 1):
            binaries = [f"{build}/benchmarks/bench_remote_tier"] + ([baseline] if baseline else [])
            if r % 2 == 0:
                binaries.reverse()  # alternate which goes first
            runs = {b: tier_run(b) for b in binaries}
            m = runs[f"{build}/benchmarks/bench_remote_tier"]
            t, raw = m["tier"], m["raw_cluster_store"]
            size, store, load = t["value_bytes"], t["store"]["blocks_per_s_median"], t["load"]["blocks_per_s_median"]
            store_cpu, load_cpu = t.get("store_cpu_us_per_block_median", 0), t.get("load_cpu_us_per_block_median", 0)
            if baseline:
                b = runs[baseline]["tier"]
                ab.append((store / b["store"]["blocks_per_s_median"], load / b["load"]["blocks_per_s_median"],
                           store_cpu, b.get("store_cpu_us_per_block_median", 0), load_cpu,
                           b.get("load_cpu_us_per_block_median", 0), t["store_pack_median_s"],
                           b["store_pack_median_s"], t.get("store_pack_cpu_us_per_block_median", 0),
                           b.get("store_pack_cpu_us_per_block_median", 0)))
                print(f"round {r}: baseline store {b['store']['blocks_per_s_median']:.0f}/s, load "
                      f"{b['load']['blocks_per_s_median']:.0f}/s; this build over the baseline: store {ab[-1][0]:.2f}, "
                      f"load {ab[-1][1]:.2f}; client CPU us per block store {store_cpu:.1f} vs {ab[-1][3]:.1f}, "
                      f"load {load_cpu:.1f} vs {ab[-1][5]:.1f}; caller's packing {ab[-1][6] * 1e3:.1f} vs "
                      f"{ab[-1][7] * 1e3:.1f} ms ({ab[-1][8]:.1f} vs {ab[-1][9]:.1f} us of its CPU per block)", flush=True)
            flush()
            # One client per master (redis-benchmark --cluster binds each client to one node), as the
            # tier has one connection per master; 32x (SET) and 128x (GET) the tier's operations,
            # since redis-benchmark's elapsed time moves in steps of about 250 ms in cluster mode
            # (its threads stop on a 250 ms timer; its rates at 8192 requests read 32k, 16k or
            # 10.7k/s): runs of 2-4 s keep that step within a tenth. It includes its start, which
            # the tier's warm lanes do not.
            set_rate, set_cpu = bench_rate(ports[0], masters, "set", size, 32 * blocks, 100000000)
            flush()
            # The GETs' keyspace (-r: BLOCKS keys per master's hash tag) filled first, 8 SETs per key,
            # so every GET returns a value (with 4 per key over all masters, a third were misses).
            bench_rate(ports[0], masters, "set", size, 8 * masters * blocks, blocks)
            get_rate, get_cpu = bench_rate(ports[0], masters, "get", size, 128 * blocks, blocks)
            print(f"round {r}: tier store {store:.0f}/s, redis-benchmark --cluster SET (new keys) {set_rate:.0f}/s; "
                  f"tier load {load:.0f}/s, redis-benchmark --cluster GET {get_rate:.0f}/s (values of {size} bytes); "
                  f"the store alone: SET {raw['set']['blocks_per_s_median']:.0f}/s, "
                  f"GET {raw['get']['blocks_per_s_median']:.0f}/s; client CPU us per block: tier store "
                  f"{store_cpu:.1f}, SET {set_cpu:.1f}, tier load {load_cpu:.1f}, GET {get_cpu:.1f}", flush=True)
            rows.append((store, set_rate, load, get_rate, store_cpu, set_cpu, load_cpu, get_cpu))
        for name, a, b in (("store / SET", 0, 1), ("load / GET", 2, 3)):
            ratios = [row[a] / row[b] for row in rows]
            print(f"{name}: median {statistics.median(ratios):.2f}, min {min(ratios):.2f}, max {max(ratios):.2f} "
                  f"({len(ratios)} rounds)")
        for name, a, b in (("store / SET", 4, 5), ("load / GET", 6, 7)):
            tier, bench = statistics.median(r[a] for r in rows), statistics.median(r[b] for r in rows)
            print(f"client CPU per block, {name}: {tier:.1f} / {bench:.1f} us (medians; "
                  f"{tier / size * 1e3:.2f} / {bench / size * 1e3:.2f} CPU-s per GB)")
        for name, a in (("store", 0), ("load", 1)):
            if ab:
                ratios = [row[a] for row in ab]
                print(f"this build / baseline, {name} rate: median {statistics.median(ratios):.2f}, "
                      f"min {min(ratios):.2f}, max {max(ratios):.2f} ({len(ratios)} rounds)")
        for name, a in (("client CPU us per block stored", 2), ("client CPU us per block loaded", 4),
                        ("caller's packing (ms)", 6), ("caller's packing CPU us per block", 8)):
            if ab:
                k = 1e3 if a == 6 else 1
                print(f"this build / baseline, {name}: {statistics.median(r[a] for r in ab) * k:.1f} / "
                      f"{statistics.median(r[a + 1] for r in ab) * k:.1f} (medians)")
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

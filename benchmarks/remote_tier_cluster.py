#!/usr/bin/python3
"""The remote tier on a Redis Cluster against redis-benchmark --cluster, like for like
(benchmarks/remote_tier.sh with CLUSTER=M runs this).

Starts M masters with R replicas each (redis-server on free loopback ports whose bus ports are
free too, a temporary directory each, no persistence), joins them with redis-cli --cluster
create, then alternates, ROUNDS times: the tier storing and loading BLOCKS new blocks of
stories260K's layout (bench_remote_tier --url redis-cluster://...) and redis-benchmark --cluster
doing the same work (SETs of new keys, then GETs of stored keys; one connection per master,
pipeline 32, the tier's value size). Prints each round and the medians and minima of the ratios. Stops every server at the end.
  benchmarks/remote_tier_cluster.py BUILD_DIR MASTERS REPLICAS ROUNDS BLOCKS
"""
import json
import os
import re
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


def bench_rate(port, clients, op, size, n, keyspace):
    out = subprocess.run(["redis-benchmark", "--cluster", "-h", "127.0.0.1", "-p", str(port), "-c", str(clients), "-P", "32",
                          "-d", str(size), "-n", str(n), "-r", str(keyspace), "-t", op, "-q"],
                         capture_output=True, text=True, timeout=300).stdout.replace("\r", "\n")
    m = re.findall(rf"^{op.upper()}: ([0-9.]+) requests", out, re.M)
    if not m:
        raise RuntimeError(f"redis-benchmark said: {out[-500:]}")
    return float(m[-1])


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

        rows = []
        for r in range(1, rounds + 1):
            flush()
            out = subprocess.run([f"{build}/benchmarks/bench_remote_tier", "--url", url, "--model",
                                  "../shared/models/stories260K.bin", "--blocks", str(blocks), "--rounds", "1",
                                  "--random-model", "0", "--tier-only", "1", "--raw-cluster", "1",
                                  "--batch", str(32 * masters)],
                                 capture_output=True, text=True, check=True, timeout=300).stdout
            t = json.loads(out)["models"]["stories260K"]["tier"]
            size, store, load = t["value_bytes"], t["store"]["blocks_per_s_median"], t["load"]["blocks_per_s_median"]
            raw = json.loads(out)["models"]["stories260K"]["raw_cluster_store"]
            flush()
            # One client per master (redis-benchmark --cluster binds each client to one node), as the
            # tier has one connection per master; 16x (SET) and 32x (GET) the tier's operations,
            # since redis-benchmark's elapsed time moves in steps of about 256 ms in cluster mode
            # (its rates at 8192 requests read 32k, 16k or 10.7k/s) and includes its start, which
            # the tier's warm lanes do not.
            set_rate = bench_rate(ports[0], masters, "set", size, 16 * blocks, 100000000)
            flush()
            # The GETs' keyspace (-r: BLOCKS keys per master's hash tag) filled first, 8 SETs per key,
            # so every GET returns a value (with 4 per key over all masters, a third were misses).
            bench_rate(ports[0], masters, "set", size, 8 * masters * blocks, blocks)
            get_rate = bench_rate(ports[0], masters, "get", size, 32 * blocks, blocks)
            print(f"round {r}: tier store {store:.0f}/s, redis-benchmark --cluster SET (new keys) {set_rate:.0f}/s; "
                  f"tier load {load:.0f}/s, redis-benchmark --cluster GET {get_rate:.0f}/s (values of {size} bytes); "
                  f"the store alone: SET {raw['set']['blocks_per_s_median']:.0f}/s, "
                  f"GET {raw['get']['blocks_per_s_median']:.0f}/s", flush=True)
            rows.append((store, set_rate, load, get_rate))
        for name, a, b in (("store / SET", 0, 1), ("load / GET", 2, 3)):
            ratios = [row[a] / row[b] for row in rows]
            print(f"{name}: median {statistics.median(ratios):.2f}, min {min(ratios):.2f}, max {max(ratios):.2f} "
                  f"({len(ratios)} rounds)")
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What the HTTP layer costs: pagedkv serve + bench serve against the engine in-process.

Two comparisons, alternated round by round in one run (this machine's speed drifts), medians and
minima of the per-round figures:

  saturation  B requests (16-token prompts, 128 output tokens, all at once) through
              `pagedkv serve` measured by `pagedkv bench serve`, against `pagedkv bench engine
              --batch-sizes B` (the same model, batch and lengths, in one process).
              Target: served output tokens/s >= 90 % of in-process.
  low load    one request at a time (64-token prompts, 16 output tokens, 4 requests/s): TTFT p50
              through HTTP against the engine's own arrival-to-first-token time for the same
              lengths, arriving 0.25 s apart as well (the Python module's LLM, RequestOutput's
              ttft_ms, measured inside the engine). Target: within 1 ms.

The load generator runs on the same machine as the server, so its CPU time is inside the
served figure. Usage: /usr/bin/python3 benchmarks/serve_overhead.py [--rounds 5] [--batch 64] [--stream-interval auto|N] [--json]
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
from serve_support import Server, pagedkv_bin  # noqa: E402

ENV = {**os.environ, "OMP_WAIT_POLICY": "passive"}


def run_json(*args):
    out = subprocess.run([str(pagedkv_bin()), *args], capture_output=True, text=True, env=ENV, timeout=600, check=True)
    return out.stdout


def in_process_throughput(batch):
    r = json.loads(run_json("bench", "engine", "--batch-sizes", str(batch), "--prompt-tokens", "16", "--max-tokens", "128",
                            "--repeats", "1", "--skip-builtin", "--json"))
    rows = r["throughput"] if "throughput" in r else r
    row = next(x for x in rows if x.get("batch") == batch and x.get("model", "stories260K") != "builtin-random")
    return row["output_tokens_per_s"]


def served_throughput(server, batch):
    r = json.loads(run_json("bench", "serve", "--base-url", server.base_url, "--num-prompts", str(batch),
                            "--random-input-len", "16", "--random-output-len", "128", "--json"))
    assert r["failed"] == 0, r["errors"]
    return r["output_throughput"]


def in_process_ttft_ms(llm, rng):
    """Median arrival-to-first-token time of 12 requests served one at a time by an in-process
    engine, 0.25 s apart: the served side's 4 requests/s, so both find the engine idle (its
    threads parked, its caches cold) when a request arrives."""
    import time
    import pagedkv
    ttfts = []
    for _ in range(12):
        time.sleep(0.25)
        prompt = [1] + [rng.randrange(3, 512) for _ in range(63)]
        out = llm.generate([prompt], pagedkv.SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True))
        ttfts.append(out[0].metrics.ttft_ms)
    return statistics.median(ttfts)


def served_ttft_ms(server):
    r = json.loads(run_json("bench", "serve", "--base-url", server.base_url, "--num-prompts", "12", "--request-rate", "4",
                            "--random-input-len", "64", "--random-output-len", "16", "--json"))
    assert r["failed"] == 0, r["errors"]
    return r["ttft_ms"]["median"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--stream-interval", default="auto", help="the server's --stream-interval (a count or auto; default: the server's own default, auto)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    sys.path.insert(0, str(REPO / "build" / "python"))
    import pagedkv
    import random
    rng = random.Random(0)
    models = pathlib.Path(os.environ.get("PAGEDKV_SHARED_DIR", REPO.parent / "shared")) / "models"
    llm = pagedkv.LLM(str(models / "stories260K.bin"), str(models / "tok512.bin"), enable_prefix_caching=False)
    in_process_ttft_ms(llm, rng)  # warm-up, as the server is warm
    rounds = []
    with Server("--max-num-seqs", str(a.batch), "--no-prefix-caching", "--stream-interval", str(a.stream_interval)) as server:
        for i in range(a.rounds):
            order = [0, 1] if i % 2 == 0 else [1, 0]  # alternate which side runs first
            r = {}
            for side in order:
                if side == 0:
                    r["in_process_tok_s"] = in_process_throughput(a.batch)
                    r["in_process_ttft_ms"] = in_process_ttft_ms(llm, rng)
                else:
                    r["served_tok_s"] = served_throughput(server, a.batch)
                    r["served_ttft_ms"] = served_ttft_ms(server)
            r["ratio"] = r["served_tok_s"] / r["in_process_tok_s"]
            r["ttft_gap_ms"] = r["served_ttft_ms"] - r["in_process_ttft_ms"]
            rounds.append(r)
            if not a.json:
                print(f"round {i + 1}: served {r['served_tok_s']:.0f} tok/s, in-process {r['in_process_tok_s']:.0f} tok/s, "
                      f"ratio {r['ratio']:.3f}; TTFT served {r['served_ttft_ms']:.3f} ms, in-process "
                      f"{r['in_process_ttft_ms']:.3f} ms, gap {r['ttft_gap_ms']:.3f} ms", flush=True)
    summary = {k: {"median": statistics.median(x[k] for x in rounds), "min": min(x[k] for x in rounds),
                   "max": max(x[k] for x in rounds)} for k in rounds[0]}
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    result = {"batch": a.batch, "stream_interval": a.stream_interval, "rounds": rounds, "summary": summary, "loadavg": load}
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        s = summary
        print(f"served / in-process output tokens/s: median {s['ratio']['median']:.3f} (min {s['ratio']['min']:.3f}, "
              f"max {s['ratio']['max']:.3f}); target >= 0.90")
        print(f"TTFT p50 through HTTP minus in-process: median {s['ttft_gap_ms']['median']:.3f} ms "
              f"(min {s['ttft_gap_ms']['min']:.3f}, max {s['ttft_gap_ms']['max']:.3f}); target <= 1 ms")
        print(f"load average {' '.join(load)}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Cascade attention end to end: `pagedkv serve` with --cascade-attention against
--no-cascade-attention, driven by `pagedkv bench serve` on the prefix-repetition workload.

C concurrent requests share one long prefix (a system prompt): with cascade attention the
decode steps read the prefix's KV blocks once for the group instead of once per request. Per
round, both servers are started on the same model (one at a time), warmed with the prefix (its
blocks cached), then measured; rounds alternate which goes first. Reported: output tokens/s and
TPOT (time per output token) medians, and the median of the per-round ratios on / off.

Usage: /usr/bin/python3 benchmarks/cascade_serve.py --model FILE.gguf [--rounds 3] [--concurrency 16]
       [--prefix-len 2048] [--output-len 32] [--json]
(a model: `pagedkv bench decode --types Q8_0 --dir DIR --keep --steps 1 --tokenizer-from
../shared/models/gguf/vocab/ggml-vocab-llama-bpe.gguf` writes the 1B one).
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


def bench_serve(server, args, num_prompts, seed):
    cmd = [str(pagedkv_bin()), "bench", "serve", "--base-url", server.base_url, "--dataset", "prefix-repetition",
           "--prefix-repetition-num-prefixes", "1", "--prefix-repetition-prefix-len", str(args.prefix_len),
           "--prefix-repetition-suffix-len", "16", "--prefix-repetition-output-len", str(args.output_len),
           "--num-prompts", str(num_prompts), "--max-concurrency", str(args.concurrency), "--seed", str(seed),
           "--ignore-eos", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=7200, check=True,
                         env={**os.environ, "OMP_WAIT_POLICY": "passive"}).stdout
    r = json.loads(out)
    if r["failed"]:
        raise RuntimeError(f"{r['failed']} requests failed: {r['errors']}")
    return r


def measure(args, cascade, seed):
    flag = "--cascade-attention" if cascade else "--no-cascade-attention"
    with Server("--model", args.model, flag, "--kv-cache-bytes", args.kv_cache_bytes, "--max-num-seqs", str(args.concurrency),
                "--max-model-len", str(args.prefix_len + 256), start_timeout=900) as s:
        bench_serve(s, args, 1, seed)  # the prefix computed once and cached
        r = bench_serve(s, args, args.concurrency * args.waves, seed)
    return {"output_tokens_per_s": r["output_throughput"], "tpot_ms_median": r["tpot_ms"]["median"],
            "cached_token_rate": r["cached_token_rate"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--waves", type=int, default=1, help="requests per run = waves x concurrency")
    ap.add_argument("--prefix-len", type=int, default=2048)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--kv-cache-bytes", default="2GiB", help="the servers' KV budget (the prefix once, the suffixes)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = {True: [], False: []}
    for r in range(args.rounds):
        for cascade in ((True, False) if r % 2 == 0 else (False, True)):
            rows[cascade].append(measure(args, cascade, 100 + r))
            print(f"round {r + 1} cascade {'on ' if cascade else 'off'}: {rows[cascade][-1]}", file=sys.stderr, flush=True)
    ratios = [a["output_tokens_per_s"] / b["output_tokens_per_s"] for a, b in zip(rows[True], rows[False])]
    summary = {
        "on": {k: statistics.median(x[k] for x in rows[True]) for k in rows[True][0]},
        "off": {k: statistics.median(x[k] for x in rows[False]) for k in rows[False][0]},
        "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
    }
    if args.json:
        print(json.dumps({"args": vars(args), "rounds": {"on": rows[True], "off": rows[False]}, "summary": summary},
                         indent=2))
        return
    print(f"{args.model}: {args.concurrency} requests sharing a {args.prefix_len}-token prefix, {args.output_len} "
          f"output tokens each, {args.rounds} alternated rounds")
    for key in ("on", "off"):
        s = summary[key]
        print(f"  cascade {key:>3}: {s['output_tokens_per_s']:.2f} output tok/s, TPOT {s['tpot_ms_median']:.0f} ms, "
              f"cached {s['cached_token_rate']:.0%}")
    print(f"  on / off: {summary['ratio_median']:.2f}x (range {summary['ratio_min']:.2f}-{summary['ratio_max']:.2f})")


if __name__ == "__main__":
    main()

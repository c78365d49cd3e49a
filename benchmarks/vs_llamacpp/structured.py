#!/usr/bin/python3
"""Structured output side by side: what a JSON Schema constraint costs while decoding, in pagedkv
and in llama.cpp (its GBNF grammar sampler), on the same GGUF file and thread count.

Starts `pagedkv serve` and `llama-server` on the same file (by default the random Llama-3.2-1B
Q8_0 with the Llama 3 tokenizer, 128,256 tokens, that vs_llamacpp.py writes) and streams the same
completion requests to each, one at a time, without and with each schema (llama-server:
`/completion` with `json_schema`, turned into GBNF by llama.cpp itself; pagedkv: `/v1/completions`
with `guided_json`), alternating engines and conditions. The decode rate of a request is measured
the same way for both, on the client: (tokens - 1) / (time of the last streamed event - time of the
first); llama-server's own `timings.predicted_per_second` is reported beside it. The figure that
compares the engines is each engine's ratio constrained / unconstrained, and the time the schema
adds per token (1/rate_constrained - 1/rate_unconstrained). Random weights: a constrained output
may close its JSON early, so rates are per token generated. See README.md. Not run in CI.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vs_llamacpp as vs  # noqa: E402  (the side-by-side script's servers, CPU and commit helpers)

# Each engine compiles the schema itself. Strings only, integer ranges: both engines' converters
# support every keyword here (llama.cpp's also allows whitespace between tokens, pagedkv's output is
# compact JSON, so the languages differ only there).
SCHEMAS = {
    # One long string: almost every token fits, so the mask's work is largest per step.
    "free text": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    # A zod-style record with length bounds and an integer range.
    "record": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 5},
        "active": {"type": "boolean"}}, "required": ["name", "age", "tags", "active"]},
    # Digits and commas only: most tokens are refused at every step, and at least 30 numbers keep
    # the output going for the whole length.
    "integers": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 999999}, "minItems": 30},
}
PROMPT = "Here is the JSON:"


def stream_events(url, body, timeout=600):
    """Posts body with stream=True; yields (arrival time, parsed event) per SSE data line."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            yield time.perf_counter(), json.loads(data)


def decode_rate(times, tokens):
    if tokens < 2 or len(times) < 2 or times[-1] <= times[0]:
        return 0.0
    return (tokens - 1) / (times[-1] - times[0])


def run_pagedkv(port, schema, tokens, seed):
    body = {"prompt": PROMPT, "max_tokens": tokens, "temperature": 1.0, "seed": seed, "stream": True,
            "stream_options": {"include_usage": True}}
    if schema is None:
        body["ignore_eos"] = True
    else:
        body["guided_json"] = schema
    times, n, text = [], 0, ""
    for t, ev in stream_events(f"http://127.0.0.1:{port}/v1/completions", body):
        for c in ev.get("choices", []):
            if c.get("text"):
                times.append(t)
                text += c["text"]
        if ev.get("usage"):
            n = ev["usage"]["completion_tokens"]
    return {"tokens": n, "rate": decode_rate(times, n), "text": text}


def run_llama(port, schema, tokens, seed):
    body = {"prompt": PROMPT, "n_predict": tokens, "temperature": 1.0, "seed": seed, "stream": True,
            "cache_prompt": False}
    if schema is None:
        body["ignore_eos"] = True
    else:
        body["json_schema"] = schema
    times, n, server_rate, text = [], 0, 0.0, ""
    for t, ev in stream_events(f"http://127.0.0.1:{port}/completion", body):
        if ev.get("content"):
            times.append(t)
            text += ev["content"]
        if ev.get("stop"):
            times.append(t)  # the final event closes the last token's time
            timings = ev.get("timings", {})
            n = timings.get("predicted_n", 0)
            server_rate = timings.get("predicted_per_second", 0.0)
    return {"tokens": n, "rate": decode_rate(times, n), "server_rate": server_rate, "text": text}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-build", required=True, help="llama.cpp build directory (holds bin/llama-server)")
    ap.add_argument("--pagedkv", default=os.path.join(vs.REPO, "build", "pagedkv"))
    ap.add_argument("--model", default="/tmp/pagedkv-vs-llamacpp/llama-3.2-1b-Q8_0.gguf",
                    help="GGUF file both engines load (written with pagedkv bench decode when missing)")
    ap.add_argument("--threads", type=int, default=2, help="threads of both engines")
    ap.add_argument("--tokens", type=int, default=48, help="output tokens per request (at most)")
    ap.add_argument("--reps", type=int, default=3, help="alternated rounds (each: both engines, both conditions)")
    ap.add_argument("--only", default="", help="run only the schemas whose name contains this")
    ap.add_argument("--json-out", help="also write every measurement as JSON")
    args = ap.parse_args()
    server_bin = os.path.join(args.llama_build, "bin", "llama-server")
    if not os.access(server_bin, os.X_OK):
        raise SystemExit(f"{server_bin} is missing: build llama.cpp first (README.md)")
    if not os.path.exists(args.model):
        d = os.path.dirname(args.model) or "."
        tmp = os.path.join(d, "tmp-structured")
        os.makedirs(tmp, exist_ok=True)
        vs.log(f"writing {args.model}")
        vs.run([args.pagedkv, "bench", "decode", "--types", "Q8_0", "--keep", "--dir", tmp, "--tokenizer-from",
                os.path.join(vs.VOCAB_DIR, "ggml-vocab-llama-bpe.gguf"), "--rounds", "1", "--steps", "1",
                "--batch-sizes", "1", "--bandwidth-mib", "64", "--threads", str(args.threads)])
        (written,) = os.listdir(tmp)
        os.rename(os.path.join(tmp, written), args.model)
        os.rmdir(tmp)
    logs = os.path.dirname(os.path.abspath(args.model))
    servers = vs.Servers()
    started = datetime.datetime.now(datetime.timezone.utc)
    header = (f"structured output, pagedkv vs llama.cpp {vs.llama_commit(args.llama_build)}, {args.threads} threads "
              f"each, {vs.cpu_model()}; {os.path.basename(args.model)}; {started:%Y-%m-%d %H:%M} UTC; "
              f"load average at start {os.getloadavg()[0]:.1f}")
    vs.log(header)
    results = {}
    try:
        pk_port, ll_port = vs.free_port(), vs.free_port()
        servers.start([args.pagedkv, "serve", "-m", args.model, "--host", "127.0.0.1", "--port", str(pk_port),
                       "--threads", str(args.threads), "--max-num-seqs", "1", "--max-model-len", "1024",
                       "--kv-cache-bytes", "256MiB"], pk_port, os.path.join(logs, "pagedkv-serve-structured.log"))
        servers.start([server_bin, "-m", args.model, "--host", "127.0.0.1", "--port", str(ll_port),
                       "-t", str(args.threads), "-tb", str(args.threads), "-np", "1", "-c", "1024", "--no-webui"],
                      ll_port, os.path.join(logs, "llama-server-structured.log"))
        engines = {"pagedkv": lambda s, seed: run_pagedkv(pk_port, s, args.tokens, seed),
                   "llama.cpp": lambda s, seed: run_llama(ll_port, s, args.tokens, seed)}
        for name, fn in engines.items():  # warm up: weights paged in, each schema compiled once
            fn(None, 1)
            for s in SCHEMAS.values():
                fn(s, 1)
            vs.log(f"{name} warmed up")
        for rep in range(args.reps):
            for sname, schema in SCHEMAS.items():
                if args.only and args.only not in sname:
                    continue
                order = list(engines.items()) if rep % 2 == 0 else list(reversed(engines.items()))
                for ename, fn in order:
                    pair = [("free", None), ("schema", schema)]
                    if rep % 2:
                        pair.reverse()
                    got = {cond: fn(s, 100 + rep) for cond, s in pair}
                    results.setdefault((sname, ename), []).append(got)
                    vs.log(f"{sname} {ename} rep {rep}: free {got['free']['rate']:.2f} tok/s, schema "
                           f"{got['schema']['rate']:.2f} tok/s ({got['schema']['tokens']} tokens)")
    except KeyboardInterrupt:
        vs.log("interrupted: the table of what was measured follows")
    finally:
        servers.stop_all()
    header += f"; load average at end {os.getloadavg()[0]:.1f}"
    print(header)
    print("| schema | engine | free tok/s | schema tok/s | ratio (min-max) | added ms/token | schema tokens |")
    print("| --- | --- | ---: | ---: | --- | ---: | ---: |")
    table = []
    for (sname, ename), runs in results.items():
        free = statistics.median(r["free"]["rate"] for r in runs)
        cons = statistics.median(r["schema"]["rate"] for r in runs)
        ratios = [r["schema"]["rate"] / r["free"]["rate"] for r in runs if r["free"]["rate"] > 0]
        added = 1000 / cons - 1000 / free if cons > 0 and free > 0 else float("nan")
        ntok = statistics.median(r["schema"]["tokens"] for r in runs)
        row = {"schema": sname, "engine": ename, "free": free, "schema_rate": cons, "ratio": statistics.median(ratios),
               "min": min(ratios), "max": max(ratios), "added_ms": added, "schema_tokens": ntok, "runs": runs}
        if ename == "llama.cpp":
            sf = [r["free"]["server_rate"] for r in runs]
            sc = [r["schema"]["server_rate"] for r in runs]
            row["server_ratio"] = statistics.median(c / f for c, f in zip(sc, sf) if f > 0)
        table.append(row)
        print(f"| {sname} | {ename} | {free:.2f} | {cons:.2f} | {row['ratio']:.2f}x ({row['min']:.2f}-{row['max']:.2f})"
              f" | {added:.1f} | {ntok:g} |")
    for row in table:
        if "server_ratio" in row:
            print(f"{row['schema']}: llama-server's own timings (predicted_per_second) give "
                  f"{row['server_ratio']:.2f}x")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"header": header, "rows": table}, f, indent=1)


if __name__ == "__main__":
    main()

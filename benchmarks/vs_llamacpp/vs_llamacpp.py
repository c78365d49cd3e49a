#!/usr/bin/python3
"""pagedkv side by side with llama.cpp on one machine: decode, prefill and serving, alternated runs.

Writes random-weight GGUF files (`pagedkv bench decode --keep --tokenizer-from`, K-quants with
llama.cpp's `llama-quantize` from the F16 file), then measures both engines with the same thread
count, alternating them run by run (pagedkv, llama.cpp, pagedkv, ...) so that the noise of a shared
machine falls on both:

  decode   batch 1, `pagedkv bench decode --batch-sizes 1` vs `llama-bench -p 0 -n N`
  prefill  one P-token prompt, `pagedkv bench decode --prefill P` vs `llama-bench -p P -n 0`
  serve    `pagedkv bench serve` (random, prefix-repetition, multi-turn) against `pagedkv serve`
           and against `llama-server` on the same file, at each concurrency
  scaling  decode and prefill at each of --scaling-threads, served output tokens/s at each of
           --scaling-concurrency (random workload), both engines; with --plot-dir, as SVG plots

and prints one table of ratios (pagedkv / llama.cpp; medians and min-max of the per-pair ratios),
the CPU, and both engines' absolute medians. See README.md. Not run in CI (needs a llama.cpp build).
"""

import argparse
import contextlib
import copy
import datetime
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VOCAB_DIR = os.path.join(REPO, "..", "shared", "models", "gguf", "vocab")
# The shapes `bench decode` writes, with the vocab GGUF whose tokenizer (and token count) they get.
SHAPES = {"llama-3.2-1b": "ggml-vocab-llama-bpe.gguf", "qwen3moe-8l-32e": "ggml-vocab-qwen3.gguf"}
WRITTEN_TYPES = {"F16", "BF16", "Q8_0", "Q4_0"}  # what `bench decode` writes; the rest via llama-quantize

# Serving workloads: `pagedkv bench serve` options (the multi-turn one replays the Mooncake
# conversation trace: turns of one conversation share their earlier turns as a prefix).
def workload_options(name, args):
    out = str(args.serve_output_len)
    return {
        "random": ["--dataset", "random", "--random-input-len", str(args.serve_input_len), "--random-output-len", out],
        "prefix": ["--dataset", "prefix-repetition", "--prefix-repetition-num-prefixes", "2",
                   "--prefix-repetition-prefix-len", str(args.serve_prefix_len), "--prefix-repetition-suffix-len", "32",
                   "--prefix-repetition-output-len", out],
        "multi-turn": ["--dataset", "mooncake", "--mooncake-block-tokens", "16", "--time-scale", "0", "--dataset-path",
                       os.path.join(REPO, "..", "shared", "traces", "mooncake_conversation_trace.jsonl")],
        "warm-up": ["--dataset", "random", "--random-input-len", "16", "--random-output-len", "8"],
    }[name]
SLOT_CONTEXT = 2048  # tokens per llama-server slot; pagedkv serve gets the same --max-model-len


# Both engines' OpenMP threads under the same libgomp policy: pagedkv's CLI picks
# GOMP_SPINCOUNT=3000 (spin briefly, then sleep) unless the environment sets one; llama.cpp gets
# the same. libgomp's default (300,000 spins at every barrier) is ruinous on a loaded machine: on
# the shared 2-vCPU VM llama-bench decoded 8x slower with it.
OMP_ENV = {"GOMP_SPINCOUNT": "3000"}


def log(msg):
    print(f"[{datetime.datetime.now(datetime.timezone.utc):%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


def run(cmd, timeout=None):
    """Runs cmd (with OMP_ENV), returns its stdout; raises with its output on failure."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **OMP_ENV})
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    return p.stdout


def cpu_model():
    try:
        out = run(["lscpu"])
    except (OSError, RuntimeError):
        return "unknown CPU"
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    name = fields.get("Model name", "unknown CPU").strip()
    cpus = fields.get("CPU(s)", "?").strip()
    flags = fields.get("Flags", "")
    isa = [f for f in ("avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8") if f" {f}" in f" {flags} "]
    return f"{name}, {cpus} vCPUs ({' '.join(isa) or 'no AVX-512'})"


def llama_commit(build_dir):
    src = os.path.dirname(os.path.abspath(build_dir.rstrip("/")))
    with contextlib.suppress(OSError, RuntimeError):
        return run(["git", "-C", src, "rev-parse", "--short=12", "HEAD"]).strip()
    return "unknown"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- model files ---------------------------------------------------------------------------------

def model_files(args, only):
    """{(shape, type): path} of the files the selected rows use, writing the missing ones."""
    os.makedirs(args.models_dir, exist_ok=True)
    files = {}
    for shape in args.shapes:
        types = args.types if shape == args.shapes[0] else args.moe_types
        if not only & {"decode", "prefill"}:  # serving and scaling only
            types = []
            if shape == args.shapes[0]:
                types = (args.serve_types.split(",") if "serve" in only else []) + (
                    [args.scaling_type] if "scaling" in only else [])
        for t in types:
            path = os.path.join(args.models_dir, f"{shape}-{t}.gguf")
            files[(shape, t)] = path
            if os.path.exists(path):
                continue
            if t.upper() in WRITTEN_TYPES:
                log(f"writing {path}")
                tmp = os.path.join(args.models_dir, "tmp")
                shutil.rmtree(tmp, ignore_errors=True)
                os.makedirs(tmp)
                run([args.pagedkv, "bench", "decode", "--shape", shape, "--types", t, "--keep", "--dir", tmp,
                     "--tokenizer-from", os.path.join(args.vocab_dir, SHAPES[shape]), "--rounds", "1", "--steps", "1",
                     "--batch-sizes", "1", "--bandwidth-mib", "64", "--threads", str(args.threads)])
                (written,) = os.listdir(tmp)
                os.rename(os.path.join(tmp, written), path)
                os.rmdir(tmp)
            else:  # a K-quant mix: llama.cpp's own quantizer on the F16 file (a peer artifact)
                f16 = os.path.join(args.models_dir, f"{shape}-F16.gguf")
                if not os.path.exists(f16):
                    raise SystemExit(f"{t} is made from {f16}: put F16 in the types before it")
                log(f"quantizing {path} with llama-quantize")
                run([os.path.join(args.llama_build, "bin", "llama-quantize"), f16, path + ".part", t, str(args.threads)])
                os.rename(path + ".part", path)  # an interrupted run leaves no half-written file behind
    return files


# ---- decode and prefill ---------------------------------------------------------------------------

def llama_bench(args, path, n_prompt, n_gen):
    out = run([os.path.join(args.llama_build, "bin", "llama-bench"), "-m", path, "-p", str(n_prompt), "-n", str(n_gen),
               "-t", str(args.threads), "-r", "1", "-o", "json"], timeout=3600)
    (test,) = json.loads(out)
    return test["avg_ts"], test


def pagedkv_decode(args, path, n_gen):
    out = run([args.pagedkv, "bench", "decode", "--model", path, "--batch-sizes", "1", "--steps", str(n_gen),
               "--rounds", "1", "--bandwidth-mib", "256", "--threads", str(args.threads), "--json"], timeout=3600)
    return json.loads(out)["models"][0]["batches"][0]["tokens_per_s_median"]


def pagedkv_prefill(args, path, n_prompt):
    out = run([args.pagedkv, "bench", "decode", "--model", path, "--prefill", str(n_prompt), "--rounds", "1",
               "--threads", str(args.threads), "--json"], timeout=3600)
    return json.loads(out)["models"][0]["prefill"]["tokens_per_s_median"]


# ---- serving ----------------------------------------------------------------------------------------

class Servers:
    """Started servers, all stopped on exit (also on SIGINT/SIGTERM)."""

    def __init__(self):
        self.procs = []

    def start(self, cmd, port, log_path):
        with open(log_path, "w") as out:
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                 env={**os.environ, **OMP_ENV})
        self.procs.append(p)
        deadline = time.time() + 600
        while time.time() < deadline:
            if p.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited {p.returncode} at start; see {log_path}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        return p
            time.sleep(0.5)
        raise RuntimeError(f"{cmd[0]} did not become healthy; see {log_path}")

    def stop(self, p):
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if p in self.procs:
            self.procs.remove(p)

    def stop_all(self):
        for p in list(self.procs):
            self.stop(p)


def bench_serve(args, port, workload, concurrency, seed, num_prompts=None):
    n = num_prompts or max(args.serve_prompts_min, args.serve_waves * concurrency)
    out = run([args.pagedkv, "bench", "serve", "--base-url", f"http://127.0.0.1:{port}", "--num-prompts", str(n),
               "--max-concurrency", str(concurrency), "--seed", str(seed), "--ignore-eos", "--json",
               # llama-server answers 32 concurrent multi-turn prompts in over ten minutes on 2 vCPUs
               "--request-timeout-s", "3600"]
              + workload_options(workload, args), timeout=7200)
    r = json.loads(out)
    if r["failed"]:
        raise RuntimeError(f"bench serve on port {port}: {r['failed']} requests failed: {r['errors']}")
    return r


def start_pagedkv_server(args, servers, path, concurrency):
    port = free_port()
    kv_bytes = f"{max(1024, concurrency * 64)}MiB"
    p = servers.start([args.pagedkv, "serve", "-m", path, "--host", "127.0.0.1", "--port", str(port),
                       "--threads", str(args.threads), "--kv-cache-bytes", kv_bytes,
                       "--max-num-seqs", str(max(concurrency, 1)), "--max-model-len", str(SLOT_CONTEXT)],
                      port, os.path.join(args.models_dir, "pagedkv-serve.log"))
    return p, port


def start_llama_server(args, servers, path, concurrency):
    port = free_port()
    p = servers.start([os.path.join(args.llama_build, "bin", "llama-server"), "-m", path, "--host", "127.0.0.1",
                       "--port", str(port), "-t", str(args.threads), "-tb", str(args.threads),
                       "-np", str(concurrency), "-c", str(concurrency * SLOT_CONTEXT), "--cont-batching",
                       "--no-webui"], port, os.path.join(args.models_dir, "llama-server.log"))
    return p, port


def reset_pagedkv_cache(port):
    with contextlib.suppress(OSError):
        req = urllib.request.Request(f"http://127.0.0.1:{port}/reset_prefix_cache", method="POST", data=b"")
        urllib.request.urlopen(req, timeout=10).close()


# ---- scaling plots (gnuplot) ------------------------------------------------------------------------

def write_scaling_plots(plot_dir, cpu, scaling):
    """scaling: {"threads": {kind: {threads: (pagedkv, llama)}}, "concurrency": {c: (pagedkv, llama)}}
    -> plot_dir/scaling-threads.svg and scaling-concurrency.svg (gnuplot must be installed)."""
    os.makedirs(plot_dir, exist_ok=True)
    written = []
    if scaling["threads"]:
        kinds = sorted(scaling["threads"])
        with open(os.path.join(plot_dir, "scaling-threads.dat"), "w") as f:
            for i, kind in enumerate(kinds):
                f.write(f"# {kind}: threads pagedkv llama.cpp\n")
                for t, (a, b) in sorted(scaling["threads"][kind].items()):
                    f.write(f"{t} {a} {b}\n")
                f.write("\n\n")
        plots = []
        for i, kind in enumerate(kinds):
            plots.append(f"'scaling-threads.dat' index {i} using 1:2 with linespoints lw 2 title 'pagedkv {kind}'")
            plots.append(f"'scaling-threads.dat' index {i} using 1:3 with linespoints lw 2 dt 2 title 'llama.cpp {kind}'")
        script = (f"set terminal svg size 800,500 dynamic\nset output 'scaling-threads.svg'\n"
                  f"set title 'tokens/s against threads ({cpu})' noenhanced\nset xlabel 'threads'\n"
                  f"set ylabel 'tokens/s'\nset logscale y\nset key outside right\nset xtics 1\n"
                  f"plot {', '.join(plots)}\n")
        written.append(("scaling-threads.gp", script))
    if scaling["concurrency"]:
        with open(os.path.join(plot_dir, "scaling-concurrency.dat"), "w") as f:
            f.write("# concurrency pagedkv llama.cpp (served output tokens/s)\n")
            for c, (a, b) in sorted(scaling["concurrency"].items()):
                f.write(f"{c} {a} {b}\n")
        script = (f"set terminal svg size 800,500 dynamic\nset output 'scaling-concurrency.svg'\n"
                  f"set title 'served output tokens/s against concurrency ({cpu})' noenhanced\n"
                  f"set xlabel 'concurrent requests'\nset ylabel 'output tokens/s'\nset logscale x 2\n"
                  f"set key top left\nplot 'scaling-concurrency.dat' using 1:2 with linespoints lw 2 title 'pagedkv serve', "
                  f"'scaling-concurrency.dat' using 1:3 with linespoints lw 2 dt 2 title 'llama-server'\n")
        written.append(("scaling-concurrency.gp", script))
    for name, script in written:
        with open(os.path.join(plot_dir, name), "w") as f:
            f.write(script)
        subprocess.run(["gnuplot", name], cwd=plot_dir, check=True, capture_output=True, timeout=60)
        log(f"wrote {os.path.join(plot_dir, name.replace('.gp', '.svg'))}")


# ---- the table ----------------------------------------------------------------------------------------

def summarize(pairs):
    """pairs: [(pagedkv, llama)] of one row -> medians and the ratios' median, min, max."""
    ratios = [a / b for a, b in pairs if b > 0]
    return {"pagedkv": statistics.median(a for a, _ in pairs), "llama": statistics.median(b for _, b in pairs),
            "ratio": statistics.median(ratios), "min": min(ratios), "max": max(ratios), "n": len(ratios)}


def print_table(rows, header):
    print(header)
    print(f"| {'row':<52} | {'pagedkv':>9} | {'llama.cpp':>9} | {'ratio':>6} | {'min-max':>11} | n |")
    print(f"|{'-' * 54}|{'-' * 11}|{'-' * 11}|{'-' * 8}|{'-' * 13}|---|")
    for name, unit, s in rows:
        print(f"| {name + ' (' + unit + ')':<52} | {s['pagedkv']:>9.2f} | {s['llama']:>9.2f} | {s['ratio']:>5.2f}x |"
              f" {s['min']:>5.2f}-{s['max']:<5.2f} | {s['n']} |")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-build", required=True, help="llama.cpp build directory (holds bin/llama-bench, ...)")
    ap.add_argument("--pagedkv", default=os.path.join(REPO, "build", "pagedkv"))
    ap.add_argument("--threads", type=int, default=2, help="threads of both engines")
    ap.add_argument("--models-dir", default="/tmp/pagedkv-vs-llamacpp", help="model files (reused) and server logs")
    ap.add_argument("--vocab-dir", default=VOCAB_DIR, help="the vocab GGUFs whose tokenizers the files get")
    ap.add_argument("--shapes", default="llama-3.2-1b,qwen3moe-8l-32e")
    ap.add_argument("--types", default="F16,BF16,Q8_0,Q4_0,Q4_K_M,Q6_K", help="weight types of the first shape")
    ap.add_argument("--moe-types", default="Q8_0,Q4_0", help="weight types of the other shapes")
    ap.add_argument("--reps", type=int, default=3, help="alternated pairs per row")
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--prefill", default="512,4096", help="prompt lengths of the prefill rows")
    ap.add_argument("--prefill-long-types", default="", help="types measured at prefill lengths above 512 (default: all)")
    ap.add_argument("--serve-types", default="Q8_0", help="types of the first shape measured serving")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--workloads", default="random,prefix,multi-turn")
    ap.add_argument("--serve-input-len", type=int, default=128, help="random workload: prompt tokens")
    ap.add_argument("--serve-prefix-len", type=int, default=512, help="prefix workload: shared prefix tokens")
    ap.add_argument("--serve-output-len", type=int, default=64, help="random and prefix workloads: output tokens")
    ap.add_argument("--serve-waves", type=int, default=4, help="requests per run = waves x concurrency")
    ap.add_argument("--serve-prompts-min", type=int, default=8)
    ap.add_argument("--only", default="decode,prefill,serve", help="row kinds to measure (and: scaling)")
    ap.add_argument("--scaling-threads", default="1,2", help="scaling: thread counts of the decode/prefill rows")
    ap.add_argument("--scaling-concurrency", default="1,2,4,8,16,32,64",
                    help="scaling: concurrencies of the served rows (random workload)")
    ap.add_argument("--scaling-type", default="Q8_0", help="scaling: the weight type (first shape)")
    ap.add_argument("--plot-dir", help="scaling: write scaling-threads.svg and scaling-concurrency.svg here (gnuplot)")
    ap.add_argument("--quick", action="store_true",
                    help="a short run: 1 pair per row, 32 decode tokens, long prefill and serving on Q8_0 only, "
                         "one wave of requests")
    ap.add_argument("--json-out", help="also write every measurement as JSON")
    ap.add_argument("--omp-defaults", action="store_true",
                    help="leave libgomp's spin policy to each engine (llama.cpp: libgomp's default) instead of "
                         "GOMP_SPINCOUNT=3000 for both")
    args = ap.parse_args()
    if args.quick:
        args.reps, args.decode_tokens, args.serve_waves = 1, 32, 1
        args.serve_prompts_min = min(args.serve_prompts_min, 4)
        args.prefill_long_types = args.prefill_long_types or "Q8_0"
    if args.omp_defaults:
        OMP_ENV.clear()
    args.shapes = args.shapes.split(",")
    args.types = [t for t in args.types.split(",") if t]
    args.moe_types = [t for t in args.moe_types.split(",") if t]
    only = set(args.only.split(","))
    for tool in ("llama-bench", "llama-server") if "serve" in only else ("llama-bench",):
        if not os.access(os.path.join(args.llama_build, "bin", tool), os.X_OK):
            raise SystemExit(f"{args.llama_build}/bin/{tool} is missing: build llama.cpp first (README.md)")
    if not os.access(args.pagedkv, os.X_OK):
        raise SystemExit(f"{args.pagedkv} is missing: scripts/setup.sh builds it")

    servers = Servers()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cpu = cpu_model()
    started = datetime.datetime.now(datetime.timezone.utc)
    omp = " ".join(f"{k}={v}" for k, v in OMP_ENV.items()) or "each engine's OpenMP defaults"
    header = (f"pagedkv vs llama.cpp {llama_commit(args.llama_build)}, {args.threads} threads each ({omp}), "
              f"{cpu}; {started:%Y-%m-%d %H:%M} UTC; load average at start {os.getloadavg()[0]:.1f}")
    log(header)
    rows, raw = [], []
    scaling = {"threads": {}, "concurrency": {}}

    def attempt(name, measure):
        """Runs one row's measurement; a failure is logged and the run goes on with the next row."""
        try:
            measure()
        except (RuntimeError, subprocess.TimeoutExpired, KeyError, ValueError) as e:
            log(f"{name}: FAILED: {e}")
            raw.append({"row": name, "error": str(e)[-2000:]})

    def record(name, unit, pairs, extra=None):
        s = summarize(pairs)
        rows.append((name, unit, s))
        raw.append({"row": name, "unit": unit, "pairs": pairs, **s, **(extra or {})})
        log(f"{name}: pagedkv {s['pagedkv']:.2f}, llama.cpp {s['llama']:.2f} {unit}: {s['ratio']:.2f}x")
        save()

    def save():
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump({"header": header, "cpu": cpu, "rows": raw}, f, indent=1)

    def serve_rows(path, t, c):
        pk, pk_port = start_pagedkv_server(args, servers, path, c)
        ll, ll_port = start_llama_server(args, servers, path, c)
        try:
            # Warm both (page in the weights), then alternate; each pair has its own seed so that no
            # run finds the previous one's prompts cached.
            bench_serve(args, pk_port, "warm-up", 1, 999, num_prompts=2)
            bench_serve(args, ll_port, "warm-up", 1, 999, num_prompts=2)
            for w in args.workloads.split(","):
                label = f"serve {w} c={c} {args.shapes[0]} {t}"

                def measure():
                    tput, ttft, cached = [], [], []
                    for rep in range(args.reps):
                        reset_pagedkv_cache(pk_port)
                        a = bench_serve(args, pk_port, w, c, rep + 1)
                        b = bench_serve(args, ll_port, w, c, rep + 1)
                        tput.append((a["output_throughput"], b["output_throughput"]))
                        ttft.append((a["ttft_ms"]["median"], b["ttft_ms"]["median"]))
                        cached.append((a["cached_token_rate"], b["cached_token_rate"]))
                    record(f"{label} out", "tok/s", tput, {"cached_token_rate": cached})
                    record(f"{label} TTFT p50", "ms", ttft)
                attempt(label, measure)
        finally:
            servers.stop(pk)
            servers.stop(ll)

    try:
        files = model_files(args, only)
        long_types = set(args.prefill_long_types.split(",")) if args.prefill_long_types else None
        for (shape, t), path in files.items() if only & {"decode", "prefill"} else ():
            label = f"{shape} {t}"
            if "decode" in only:
                attempt(f"decode b1 {label}", lambda: record(
                    f"decode b1 {label}", "tok/s",
                    [(pagedkv_decode(args, path, args.decode_tokens), llama_bench(args, path, 0, args.decode_tokens)[0])
                     for _ in range(args.reps)]))
            if "prefill" in only:
                for p in (int(x) for x in args.prefill.split(",")):
                    if p > 512 and long_types is not None and t not in long_types:
                        continue
                    attempt(f"prefill {p} {label}", lambda: record(
                        f"prefill {p} {label}", "tok/s",
                        [(pagedkv_prefill(args, path, p), llama_bench(args, path, p, 0)[0]) for _ in range(args.reps)]))
        if "serve" in only:
            for t in args.serve_types.split(","):
                path = files[(args.shapes[0], t)]
                for c in (int(x) for x in args.concurrency.split(",")):
                    attempt(f"serve c={c} {t}", lambda: serve_rows(path, t, c))
        if "scaling" in only:
            t = args.scaling_type
            path = files[(args.shapes[0], t)]
            for n in (int(x) for x in args.scaling_threads.split(",")):
                at = copy.copy(args)
                at.threads = n
                for kind, measure_pair in (
                        ("decode b1", lambda: (pagedkv_decode(at, path, args.decode_tokens),
                                               llama_bench(at, path, 0, args.decode_tokens)[0])),
                        ("prefill 512", lambda: (pagedkv_prefill(at, path, 512), llama_bench(at, path, 512, 0)[0]))):
                    def measure(kind=kind, measure_pair=measure_pair, n=n):
                        pairs = [measure_pair() for _ in range(args.reps)]
                        record(f"scaling {kind} {t} threads={n}", "tok/s", pairs)
                        s = summarize(pairs)
                        scaling["threads"].setdefault(kind, {})[n] = (s["pagedkv"], s["llama"])
                    attempt(f"scaling {kind} threads={n}", measure)
            for c in (int(x) for x in args.scaling_concurrency.split(",")):
                def measure_served(c=c):
                    pk, pk_port = start_pagedkv_server(args, servers, path, c)
                    ll, ll_port = start_llama_server(args, servers, path, c)
                    try:
                        bench_serve(args, pk_port, "warm-up", 1, 999, num_prompts=2)
                        bench_serve(args, ll_port, "warm-up", 1, 999, num_prompts=2)
                        pairs = []
                        for rep in range(args.reps):
                            reset_pagedkv_cache(pk_port)
                            a = bench_serve(args, pk_port, "random", c, rep + 1)
                            b = bench_serve(args, ll_port, "random", c, rep + 1)
                            pairs.append((a["output_throughput"], b["output_throughput"]))
                    finally:
                        servers.stop(pk)
                        servers.stop(ll)
                    record(f"scaling serve random c={c} {t} out", "tok/s", pairs)
                    s = summarize(pairs)
                    scaling["concurrency"][c] = (s["pagedkv"], s["llama"])
                attempt(f"scaling serve c={c}", measure_served)
            if args.plot_dir:
                try:
                    write_scaling_plots(args.plot_dir, cpu, scaling)
                except (OSError, subprocess.SubprocessError) as e:
                    log(f"scaling plots: FAILED: {e}")
    except KeyboardInterrupt:
        log("interrupted: the table of what was measured follows")
    finally:
        servers.stop_all()
    header += f"; load average at end {os.getloadavg()[0]:.1f}"
    save()
    print_table(rows, header + "\nratio = pagedkv / llama.cpp (for TTFT lower is better: a ratio below 1 favours pagedkv)")
    for r in raw:
        if "cached_token_rate" in r:
            rates = r["cached_token_rate"]
            print(f"{r['row']}: cached prompt tokens pagedkv {statistics.median(a for a, _ in rates):.0%}, "
                  f"llama.cpp {statistics.median(b for _, b in rates):.0%}")
        if "error" in r:
            print(f"{r['row']}: failed: {r['error'].splitlines()[0] if r['error'] else ''}")


if __name__ == "__main__":
    main()

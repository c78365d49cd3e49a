#!/usr/bin/env python3
"""Time to first token right after `pagedkv serve` starts, with and without --preload-weights.

A memory-mapped model file is read on demand: without preloading, the first request's forward
pass faults in every page of the weights the engine reads in place, and its time to first token
(TTFT) includes reading the model. Per round and mode (alternated): the file is dropped from the
page cache (posix_fadvise DONTNEED: works without privileges when nothing else maps the file),
the server started, then two requests of the same length (token ids) with different prompts, one after the
other: the first request's TTFT against the second's (warm) is the cost the first user pays.

Usage: /usr/bin/python3 benchmarks/cold_start.py --model FILE.gguf [--rounds 3] [--prompt-tokens 128] [--json]
(a file to try: `pagedkv bench decode --types Q4_K_M --dir DIR --keep --steps 1` writes a 1B one).
"""

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
from serve_support import Server  # noqa: E402


def drop_from_page_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def ttft_seconds(server, token_ids):
    """One non-streamed request for a single token: its latency is the prompt's TTFT."""
    start = time.monotonic()
    r = server.post("/v1/completions", {"prompt": token_ids, "max_tokens": 1, "temperature": 0}, timeout=600)
    r.raise_for_status()
    return time.monotonic() - start


def one_round(model, preload, prompt_tokens, round_index, extra):
    drop_from_page_cache(model)
    flag = "--preload-weights" if preload else "--no-preload-weights"
    start = time.monotonic()
    with_server = Server("--model", model, flag, *extra, start_timeout=900)
    try:
        ready = time.monotonic() - start
        # Token ids (both prompts exactly prompt_tokens long), different from the first id on, so
        # the second request finds nothing of the first in the prefix cache.
        first = [1000 + 17 * round_index + i for i in range(prompt_tokens)]
        second = [2000 + 17 * round_index + i for i in range(prompt_tokens)]
        t1 = ttft_seconds(with_server, first)
        t2 = ttft_seconds(with_server, second)
    finally:
        with_server.stop()
    return {"ready_s": ready, "first_ttft_s": t1, "warm_ttft_s": t2, "first_over_warm": t1 / t2,
            "ready_plus_first_s": ready + t1}


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("serve_args", nargs="*", help="more `pagedkv serve` arguments (after --)")
    a = ap.parse_args()
    runs = {True: [], False: []}
    for r in range(a.rounds):
        for preload in ((True, False) if r % 2 == 0 else (False, True)):
            runs[preload].append(one_round(a.model, preload, a.prompt_tokens, r, a.serve_args))
    summary = {}
    for preload, rows in runs.items():
        key = "preload" if preload else "no_preload"
        summary[key] = {k: {"median": statistics.median(x[k] for x in rows), "min": min(x[k] for x in rows)}
                        for k in rows[0]}
    result = {"model": a.model, "bytes": os.path.getsize(a.model), "cpu": cpu_name(), "rounds": a.rounds,
              "runs": {("preload" if p else "no_preload"): rows for p, rows in runs.items()}, "summary": summary}
    if a.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{a.model} ({result['bytes'] / 1e9:.2f} GB), {cpu_name()}, {a.rounds} alternated rounds (medians, minima)")
    print(f"{'':14} {'ready (s)':>16} {'first TTFT (s)':>16} {'warm TTFT (s)':>16} {'first / warm':>14}")
    for key in ("preload", "no_preload"):
        s = summary[key]
        cell = lambda k, f="{:.2f}": f"{f.format(s[k]['median'])} ({f.format(s[k]['min'])})"  # noqa: E731
        print(f"{key:14} {cell('ready_s'):>16} {cell('first_ttft_s'):>16} {cell('warm_ttft_s'):>16} "
              f"{cell('first_over_warm', '{:.2f}x'):>14}")


if __name__ == "__main__":
    main()

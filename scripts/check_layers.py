#!/usr/bin/env python3
"""Fails if a layer includes a layer above it (docs/architecture.md, "Include rules")."""
import pathlib
import re
import sys

ALLOWED = {
    "core": set(),
    "block": {"core"},
    "prefix": {"core"},
    "manager": {"core", "block", "prefix"},
    "storage": {"core"},
    "kernels": {"core", "storage"},
    "memory": {"core"},
    # The sandboxed Jinja interpreter for the model files' chat templates.
    "template": {"core"},
    "model": {"core", "storage", "kernels"},
    "tiers": {"core", "block", "prefix", "manager", "storage"},
    "scheduler": {"core", "block", "prefix", "manager", "tiers"},
    # Structured output: grammars -> per-token masks over a vocabulary given as bytes (no model/).
    "grammar": {"core"},
    "engine": {"core", "block", "prefix", "manager", "tiers", "scheduler", "storage", "kernels", "model", "memory", "grammar"},
    "workload": {"core", "block", "prefix", "manager", "scheduler", "memory"},
    "replay": {"core", "block", "prefix", "manager", "scheduler", "memory", "workload"},
    # What `pagedkv demo` shows and serves: the pool drawn as a grid, text charts, its workload.
    "demo": {"core", "block", "prefix", "manager", "tiers", "scheduler", "storage", "kernels", "model", "memory", "grammar", "engine"},
    # The HTTP/API layer both front ends stand on: the API's error shape, the HTTP listener, peer
    # connections, OpenAI request parsing, chat templates, the KV-event log and its wire format.
    # It tokenizes (model) and reads block events (block), never an engine.
    # It names structured-output grammars (grammar's GrammarKind) in parsed requests.
    "api": {"core", "block", "prefix", "model", "template", "grammar"},
    # The OpenAI-compatible server: metrics and the engine thread behind the API layer.
    "server": {"core", "block", "prefix", "manager", "tiers", "scheduler", "storage", "kernels", "model", "memory", "grammar", "engine", "template", "api"},
    # The HTTP load generator: a client of the server's API, so it needs nothing of the engine.
    "loadgen": {"core"},
    # The remote KV tier's Redis client (hiredis): implements tiers/' RemoteStore.
    "remote": {"core", "tiers"},
    # The KV-aware router: an HTTP front over servers; it tokenizes and hashes prompts as they do
    # and parses requests with the API layer, never the engine or the server.
    "router": {"core", "block", "prefix", "model", "api"},
    # The experiments of `pagedkv bench paper`: the engine on a modelled clock (replay's step cost
    # model) under the load generator's arrivals, with the demo's random numbers.
    "bench": {"core", "block", "prefix", "manager", "tiers", "scheduler", "storage", "kernels", "model", "memory", "grammar", "engine", "replay", "loadgen", "demo"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"pagedkv/([a-z_]+)/')

root = pathlib.Path(__file__).resolve().parent.parent
errors = []
for top in ("include/pagedkv", "src"):
    for path in sorted((root / top).rglob("*")):
        if path.suffix not in (".h", ".cpp"):
            continue
        layer = path.relative_to(root / top).parts[0]
        if layer not in ALLOWED:
            errors.append(f"{path.relative_to(root)}: folder '{layer}' is not a known layer (add it to docs/architecture.md and this script)")
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = INCLUDE.match(line)
            if m and m.group(1) != layer and m.group(1) not in ALLOWED[layer]:
                errors.append(f"{path.relative_to(root)}:{n}: {layer}/ must not include {m.group(1)}/")
for e in errors:
    print(e)
print(f"layering: {len(errors)} violation(s)")
sys.exit(1 if errors else 0)

#!/usr/bin/env python3
"""The soak: two `pagedkv serve` instances on one Redis (the shared tier), each with a disk tier
on a small filesystem of its own, and a `pagedkv router` (kv policy) in front of both, under load
for MINUTES while a fault schedule runs; then the checks. Started by scripts/soak.sh (docs/reliability.md says what it found).

Load: `pagedkv bench serve` rounds over both instances (round-robin) and through the router,
plus worker threads whose every request is accounted for, sent to an instance or to the router:
accepted (HTTP 200) requests must end in [DONE] — an answer, possibly cut short by a drain
(finish_reason "abort") — never in a dropped connection. One more thread sends completions
constrained by JSON Schemas and a regex: every answer that stopped on its own must parse and
validate (jsonschema) or match.
Canaries: the three llama2.c goldens, greedy, sent to both instances and the router every few
seconds; their text must stay byte-identical to the goldens the whole time.
Faults, in turn: clients that disconnect mid-stream; a burst beyond --max-waiting (503s);
malformed requests and hostile schemas, regexes and grammars mixed in (each must get a 400); the disk tier's filesystem filled up and
freed; Redis killed and restarted; SIGTERM of instance B and a warm restart on its disk tier.
Checks after the load: no accepted request lost, no canary mismatch, no unexpected status, both
instances idle and their pools empty (metrics and /health), instance A's and the router's RSS
and open file descriptors within a stated bound of their values after warm-up, every process
exiting 0 on SIGTERM, and (for an ASan build) no sanitizer report in any output. Instance B is
restarted on the port it had, so the router sees it go down and come back. Exit 0 only when every check held; one summary line.

Everything runs on 127.0.0.1 with free ports and temporary directories, and is stopped at the
end, always.
"""

import argparse
import collections
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import requests

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "python"))
from redis_support import RedisServer  # noqa: E402
from serve_support import Server, free_port, pagedkv_bin, sse_events  # noqa: E402

SHARED = pathlib.Path(os.environ.get("PAGEDKV_SHARED_DIR", REPO.parent / "shared"))
GOLDENS = [("once_upon_a_time.n200", "Once upon a time", 200),
           ("no_prompt.n256", "", 256),
           ("tom_and_lily.n256", "Tom and Lily went to the beach", 256)]
PREFIXES = ["Once upon a time there was a little girl named Lily who loved to play in the park. " * 3,
            "Tom had a big red ball and a small dog. They ran to the garden every day. " * 3,
            "The sun was warm and the birds sang a happy song in the tall green tree. " * 3]
MALFORMED = [b"{not json", b'{"prompt": 7}', b'{"prompt": "x", "max_tokens": -1}', b'{"prompt": "x", "n": 100000}',
             b'{"prompt": [999999999]}', b'{"prompt": "x", "temperature": "hot"}', b'[]',
             b'{"prompt": "x", "max_tokens": 100000}', b'{"messages": "hi"}', b"\xff\xfe\x00"]
# Structured output: schemas and patterns a client may send (each answer must parse and match, or
# stop at max_tokens), and hostile ones built to explode (each must be a 400).
SCHEMAS = [{"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
                                             "pets": {"type": "array", "items": {"enum": ["dog", "cat"]}, "maxItems": 3}},
            "required": ["name", "age"]},
           {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "maxItems": 8},
           {"anyOf": [{"type": "boolean"}, {"type": "string", "format": "date"}]}]
HOSTILE_STRUCTURED = [{"guided_regex": "(a|b)*a(a|b){40}"},
                      {"guided_json": json.loads("".join('{"type":"array","items":' for _ in range(300)) + "{}" + "}" * 300)},
                      {"guided_json": {"enum": [f"v{i}" for i in range(20000)]}},
                      {"guided_grammar": "root ::= " + "(" * 200 + '"a"' + ")" * 200},
                      {"guided_json": {"type": "object", "patternProperties": {"a": {}}}}]
# Tool calling: the instances render chats with this small Hermes-style template (the default
# model has none with tools) and parse calls as hermes; forced calls must name a tool and carry
# arguments valid under its parameters, and hostile tool definitions must be 400s.
SOAK_TEMPLATE = ("{%- if tools %}<|im_start|>system\n<tools>{% for t in tools %}{{ t.function.name }} {% endfor %}</tools>"
                 "<|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}<|im_end|>\n"
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
             "type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                              "unit": {"enum": ["celsius", "fahrenheit"]}},
             "required": ["city", "unit"]}}},
         {"type": "function", "function": {"name": "add", "parameters": {
             "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]
HOSTILE_TOOLS = [{"tools": [{"type": "function", "function": {"name": "bad name!", "parameters": {"type": "object"}}}]},
                 {"tools": [{"type": "function", "function": {"name": f"t{i}"}} for i in range(200)]},
                 {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "missing"}}},
                 {"tools": [{"type": "function", "function": {"name": "x", "parameters": {
                     "type": "object", "properties": {"p": {"type": "string", "pattern": "(a|b)*a(a|b){40}"}}}}}],
                  "tool_choice": "required"}]
RSS_SLACK_MIB = 64     # instance A's and the router's RSS may grow this much (plus 25 %) over the soak
FD_SLACK = 16          # and hold this many more open descriptors


class Counters:
    def __init__(self):
        self.lock = threading.Lock()
        self.c = collections.Counter()
        self.notes = []

    def add(self, key, n=1):
        with self.lock:
            self.c[key] += n

    def note(self, text):
        with self.lock:
            if len(self.notes) < 20:
                self.notes.append(text)
        print(f"soak: {text}", flush=True)


class DiskFilesystems:
    """A small tmpfs for each instance's disk tier, so that "disk full" is real and harmless: held
    by a process in a private mount namespace (`unshare -rm`, no privilege needed where user
    namespaces are allowed) that outlives the servers, so a restarted server finds its disk tier
    warm. Servers join that namespace with nsenter. None where the kernel does not allow it."""

    def __init__(self, dirs, size):
        self.proc = None
        if not (shutil.which("unshare") and shutil.which("nsenter")):
            return
        mounts = " && ".join(f'mount -t tmpfs -o size={size} tmpfs "{d}"' for d in dirs)
        self.proc = subprocess.Popen(["unshare", "-rm", "sh", "-c", f"{mounts} && echo ready && exec sleep 1000000"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        if self.proc.stdout.readline().strip() != b"ready":
            self.close()

    @property
    def available(self):
        return self.proc is not None and self.proc.poll() is None

    def wrap(self):
        return ("nsenter", "-t", str(self.proc.pid), "-U", "-m", "--preserve-credentials") if self.available else ()

    def path(self, d):
        """`d` as this process reaches it: through the holder's mount namespace."""
        return pathlib.Path(f"/proc/{self.proc.pid}/root") / str(d).lstrip("/") if self.available else pathlib.Path(d)

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None


def drain_into(log, server):
    """Copies a server's output into its log file until it exits (a thread per server)."""
    for line in server.output:
        log.write(line.encode())

    def drain():
        fd = server.proc.stdout.fileno()
        while True:
            data = os.read(fd, 65536)
            if not data:
                return
            log.write(data)
            log.flush()

    threading.Thread(target=drain, daemon=True).start()


class Instance:
    """One `pagedkv serve` (restartable), its disk tier on its own small filesystem when there is
    one, its output drained into a log file."""

    def __init__(self, name, disk, workdir, redis_url, binary, filesystems):
        self.name = name
        self.template = workdir / "soak-template.jinja"
        self.template.write_text(SOAK_TEMPLATE)
        self.disk = disk
        self.log = open(workdir / f"serve-{name}.log", "ab")
        self.redis_url = redis_url
        self.binary = binary
        self.fs = filesystems
        self.server = None
        self.port = free_port()  # kept across restarts: the router knows the instance by its address

    def start(self):
        self.server = Server("--remote-cache", self.redis_url, "--remote-cache-prefix", "soak",
                             "--disk-cache-dir", self.disk, "--disk-cache-bytes", "64MiB", "--host-cache-bytes", "4MiB",
                             "--num-blocks", "256", "--max-waiting", "32", "--drain-timeout-s", "20",
                             "--chat-template", self.template, "--tool-call-parser", "hermes",
                             wrap=self.fs.wrap(), binary=self.binary, port=self.port)
        drain_into(self.log, self.server)

    @property
    def url(self):
        return self.server.base_url

    def disk_root(self):
        return self.fs.path(self.disk)

    def stop(self):
        if self.server and self.server.proc.poll() is None:
            self.server.stop(timeout=60)
        return self.server.proc.returncode if self.server else 0


def golden_texts():
    d = SHARED / "models" / "golden"
    return {name: (d / f"{name}.txt").read_text() for name, _, _ in GOLDENS}


def post(url, body, timeout=120, **kw):
    return requests.post(url, data=body if isinstance(body, bytes) else json.dumps(body),
                         headers={"Content-Type": "application/json"}, timeout=timeout, **kw)


class Soak:
    def __init__(self, a):
        self.a = a
        self.stop_at = time.monotonic() + 60 * a.minutes
        self.done = threading.Event()
        self.n = Counters()
        self.instances = []
        self.router = None
        self.redis = None
        self.goldens = golden_texts()
        self.filesystems = None

    def urls(self):
        return [i.url for i in self.instances]

    def targets(self):
        """Where clients send requests: each instance, and the router (by name)."""
        return [(i.name, i.url) for i in self.instances] + [("router", self.router.base_url)]

    # ---- load ----------------------------------------------------------------------------------

    def accounted_worker(self, seed):
        """Streamed completions, one at a time, every outcome counted."""
        rng = random.Random(seed)
        while not self.done.is_set():
            name, url = rng.choice(self.targets())
            body = {"prompt": rng.choice(PREFIXES) + " ".join(rng.choice(["dog", "cat", "ball", "tree", "sun"])
                                                               for _ in range(rng.randrange(1, 30))),
                    "max_tokens": rng.randrange(4, 64), "stream": True, "temperature": 0.8, "seed": rng.randrange(1000)}
            try:
                r = requests.post(url + "/v1/completions", json=body, stream=True, timeout=120)
            except requests.RequestException:
                self.n.add("refused")  # down for a restart: never accepted
                time.sleep(0.05)
                continue
            with r:
                if r.status_code == 503:
                    self.n.add("shed")
                    continue
                if r.status_code != 200:
                    self.n.add("unexpected_status")
                    self.n.note(f"a good request to {name} got {r.status_code}: {r.text[:200]}")
                    continue
                self.n.add("accepted")
                try:
                    events = list(sse_events(r))
                except requests.RequestException as e:
                    events = [f"connection lost: {e}"]
                if events and events[-1] == "[DONE]":
                    self.n.add("answered")
                else:
                    self.n.add("lost")
                    self.n.note(f"accepted request lost on {name}: {events[-1:]}")

    def answer(self, name, url, path, body, what):
        """POSTs one request that must be answered; returns its first choice, or None after
        counting a refusal (a restart), a shed request (503) or an unexpected status."""
        try:
            r = post(url + path, body)
        except requests.RequestException:
            self.n.add("refused")
            time.sleep(0.05)
            return None
        if r.status_code == 503:
            self.n.add("shed")
            return None
        if r.status_code != 200:
            self.n.add("unexpected_status")
            self.n.note(f"a {what} request to {name} got {r.status_code}: {r.text[:200]}")
            return None
        self.n.add(f"{what}_answered")
        return r.json()["choices"][0]

    def structured_worker(self, seed):
        """Completions constrained by a JSON Schema or a regex, one at a time: every answer that
        stopped on its own parses and validates (or matches); one cut by max_tokens is a prefix.
        A third of the requests are chats that must call a tool (tool_request)."""
        import jsonschema  # Debian's python3-jsonschema (scripts/setup.sh)
        import re
        regex = "[a-z]+( [a-z]+){0,6}"
        rng = random.Random(seed)
        while not self.done.is_set():
            name, url = rng.choice(self.targets())
            if rng.random() < 0.3:
                self.tool_request(rng, name, url)
                continue
            schema = rng.choice(SCHEMAS) if rng.random() < 0.75 else None
            body = {"prompt": rng.choice(PREFIXES), "max_tokens": rng.randrange(8, 64), "temperature": 0.8,
                    "seed": rng.randrange(1000), **({"guided_json": schema} if schema else {"guided_regex": regex})}
            choice = self.answer(name, url, "/v1/completions", body, "structured")
            if choice is None or choice["finish_reason"] != "stop":
                continue  # not answered, or cut by max_tokens: a prefix, not judged
            try:
                if schema:
                    jsonschema.validate(json.loads(choice["text"]), schema)
                elif not re.fullmatch(regex, choice["text"]):
                    raise ValueError("no match")
            except (ValueError, jsonschema.ValidationError) as e:
                self.n.add("structured_invalid")
                self.n.note(f"structured answer from {name} does not conform: {choice['text'][:80]!r}: {e}")

    def tool_request(self, rng, name, url):
        """A chat that must call a tool (required, or a named one): the call names a tool and its
        arguments validate under that tool's parameters, unless max_tokens cut it."""
        import jsonschema
        choice = "required" if rng.random() < 0.5 else {"type": "function", "function": {"name": rng.choice(TOOLS)["function"]["name"]}}
        body = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": TOOLS,
                "tool_choice": choice, "max_tokens": 80, "temperature": 0.8, "seed": rng.randrange(1000)}
        answer = self.answer(name, url, "/v1/chat/completions", body, "tool")
        if answer is None or answer["finish_reason"] == "length":
            return
        try:
            calls = answer["message"]["tool_calls"]
            assert calls, "no call"
            for call in calls:
                tool = next(t for t in TOOLS if t["function"]["name"] == call["function"]["name"])
                jsonschema.validate(json.loads(call["function"]["arguments"]), tool["function"]["parameters"])
        except (AssertionError, KeyError, StopIteration, ValueError, jsonschema.ValidationError) as e:
            self.n.add("structured_invalid")
            self.n.note(f"tool call from {name} does not conform: {str(answer)[:120]}: {e!r}")

    def tool(self):
        """The pagedkv binary of the whole soak: --server-binary's (a copy the soak can rely on
        while build/ is rebuilt beside it), else build/pagedkv."""
        return str(self.a.server_binary or pagedkv_bin())

    def bench_rounds(self):
        """pagedkv bench serve over both instances, then through the router, round after round
        (shared prefixes)."""
        k = 0
        while not self.done.is_set():
            urls = self.urls() if k % 2 == 0 else [self.router.base_url]
            k += 1
            cmd = [self.tool(), "bench", "serve", *sum((["--base-url", u] for u in urls), []),
                   "--dataset", "prefix-repetition", "--num-prompts", "60", "--request-rate", "20",
                   "--prefix-repetition-num-prefixes", "4", "--prefix-repetition-prefix-len", "128",
                   "--prefix-repetition-output-len", "48", "--seed", str(random.randrange(1 << 30)), "--json"]
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            try:
                report = json.loads(out.stdout)
                self.n.add("bench_completed", report["completed"])
                self.n.add("bench_failed", report["failed"])  # refused or shed during faults: reported, not judged
            except (json.JSONDecodeError, KeyError):
                self.n.add("bench_failed_runs")

    def canaries(self):
        """The goldens, greedy, on both instances and the router in turn: byte for byte, always."""
        k = 0
        while not self.done.is_set():
            targets = self.targets()
            where, url = targets[k % len(targets)]
            name, prompt, steps = GOLDENS[k % len(GOLDENS)]
            k += 1
            try:
                ids = post(url + "/tokenize", {"prompt": prompt}).json()["tokens"]
                r = post(url + "/v1/completions",
                         {"prompt": prompt, "max_tokens": steps - len(ids) + 1, "temperature": 0, "echo": True})
            except (requests.RequestException, KeyError, ValueError):
                time.sleep(0.5)  # down for a restart
                continue
            if r.status_code != 200:
                if r.status_code != 503:
                    self.n.add("unexpected_status")
                    self.n.note(f"canary got {r.status_code}: {r.text[:200]}")
                continue
            self.n.add("canaries")
            if r.json()["choices"][0]["text"] + "\n" != self.goldens[name]:
                self.n.add("canary_mismatches")
                self.n.note(f"canary {name} differs on {where}")
            self.done.wait(2.0)

    # ---- faults --------------------------------------------------------------------------------

    def fault_disconnect(self):
        for inst in self.instances:
            for _ in range(3):
                try:
                    with requests.post(inst.url + "/v1/completions", stream=True, timeout=30,
                                       json={"prompt": PREFIXES[0], "max_tokens": 200, "stream": True}) as r:
                        for i, _ in enumerate(r.iter_lines()):
                            if i >= 2:
                                break  # and drop the connection mid-stream
                except requests.RequestException:
                    pass

    def fault_burst(self):
        inst = self.instances[0]
        subprocess.run([self.tool(), "bench", "serve", "--base-url", inst.url, "--num-prompts", "200",
                        "--request-rate", "inf", "--random-input-len", "32", "--random-output-len", "32", "--json"],
                       capture_output=True, timeout=600)

    def fault_malformed(self):
        for inst in self.instances:
            for body in MALFORMED:
                try:
                    r = post(inst.url + "/v1/completions", body, timeout=30)
                except requests.RequestException:
                    continue
                self.n.add("malformed_sent")
                if r.status_code != 400:
                    self.n.add("unexpected_status")
                    self.n.note(f"malformed body {body[:40]!r} got {r.status_code}")
            hostile = [("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4, **f})
                       for f in HOSTILE_TOOLS] + [("/v1/completions", {"prompt": "x", "max_tokens": 4, **f})
                                                  for f in HOSTILE_STRUCTURED]
            for path, body in hostile:
                try:
                    r = post(inst.url + path, body, timeout=30)
                except requests.RequestException:
                    continue
                self.n.add("hostile_structured_sent")
                if r.status_code != 400:
                    self.n.add("unexpected_status")
                    self.n.note(f"hostile request to {path} {str(body)[:60]} got {r.status_code}")

    def fault_disk_full(self):
        if not self.filesystems.available:
            self.n.add("disk_full_skipped")
            return
        for inst in self.instances:
            filler = inst.disk_root() / "filler"
            try:
                with open(filler, "wb") as f:
                    chunk = b"\0" * (1 << 20)
                    while True:
                        f.write(chunk)
                        f.flush()
            except OSError:
                pass  # ENOSPC: the filesystem is full
        self.done.wait(15)
        for inst in self.instances:
            try:
                (inst.disk_root() / "filler").unlink()
            except OSError:
                pass

    def fault_redis(self):
        self.redis.kill()
        self.done.wait(5)
        if not self.redis.start():
            self.n.note("redis-server did not come back")
            self.n.add("harness_errors")

    def fault_restart(self):
        inst = self.instances[-1]
        rc = inst.stop()
        if rc != 0:
            self.n.add("bad_exits")
            self.n.note(f"instance {inst.name} exited {rc} on SIGTERM")
        inst.start()

    def faults(self):
        kinds = [("disconnect", self.fault_disconnect), ("burst", self.fault_burst), ("malformed", self.fault_malformed),
                 ("disk_full", self.fault_disk_full), ("redis", self.fault_redis), ("restart", self.fault_restart)]
        k = 0
        while not self.done.wait(self.a.fault_interval):
            name, fault = kinds[k % len(kinds)]
            k += 1
            fault()
            self.n.add(f"fault_{name}")

    # ---- the run and its checks ----------------------------------------------------------------

    @staticmethod
    def sample(server):
        pid = server.proc.pid
        rss = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) // 1024
        return rss, len(os.listdir(f"/proc/{pid}/fd"))

    def idle(self, inst):
        m = inst.server.metrics()
        used = m.get(("pagedkv:kv_blocks", frozenset({("state", "used")})), -1)
        return (m.get(("vllm:num_requests_running", frozenset()), -1) == 0 and
                m.get(("vllm:num_requests_waiting", frozenset()), -1) == 0 and
                m.get(("pagedkv:num_requests_swapped", frozenset()), -1) == 0 and used == 0 and
                inst.server.get("/health").status_code == 200)

    def run(self, workdir):
        self.redis = RedisServer("--maxmemory", "256mb", "--maxmemory-policy", "allkeys-lru")
        disks = [workdir / f"disk-{name}" for name in ("A", "B")]
        for d in disks:
            d.mkdir()
        self.filesystems = DiskFilesystems(disks, self.a.disk_fs_bytes)
        try:
            for name, disk in zip(("A", "B"), disks):
                inst = Instance(name, disk, workdir, self.redis.url, self.a.server_binary, self.filesystems)
                inst.start()
                self.instances.append(inst)
            self.router = Server(*sum((["--backend", u] for u in self.urls()), []), "--events-interval-ms", "100",
                                 command="router", binary=self.a.server_binary)
            drain_into(open(workdir / "router.log", "ab"), self.router)
            threads = [threading.Thread(target=self.bench_rounds), threading.Thread(target=self.canaries),
                       threading.Thread(target=self.faults)]
            threads += [threading.Thread(target=self.accounted_worker, args=(s,)) for s in range(self.a.workers)]
            threads.append(threading.Thread(target=self.structured_worker, args=(99,)))
            for t in threads:
                t.start()
            time.sleep(min(20, 6 * self.a.minutes))  # warm-up: pools, caches, thread stacks
            before = [self.sample(self.instances[0].server), self.sample(self.router)]
            while time.monotonic() < self.stop_at:
                time.sleep(1)
            self.done.set()
            for t in threads:
                t.join(timeout=900)
            deadline = time.monotonic() + 60
            idle = False
            while time.monotonic() < deadline and not idle:
                idle = all(self.idle(i) for i in self.instances)
                time.sleep(0.5)
            after = [self.sample(self.instances[0].server), self.sample(self.router)]
            self.router.stop(timeout=60)
            exits = [i.stop() for i in self.instances] + [self.router.proc.returncode]
        finally:
            for server in [i.server for i in self.instances] + [self.router]:
                if server and server.proc.poll() is None:
                    server.kill()
            self.redis.close()
            self.filesystems.close()
        return idle, before, after, exits

    def verdict(self, idle, before, after, exits, workdir):
        c = self.n.c
        failures = []
        if c["lost"]:
            failures.append(f"{c['lost']} accepted requests lost")
        if c["canary_mismatches"]:
            failures.append(f"{c['canary_mismatches']} canary mismatches")
        if c["structured_invalid"]:
            failures.append(f"{c['structured_invalid']} structured answers that do not conform")
        if c["structured_answered"] == 0 or c["tool_answered"] == 0:
            failures.append("no structured or no tool request was answered")
        if c["unexpected_status"]:
            failures.append(f"{c['unexpected_status']} unexpected statuses")
        if c["bad_exits"] or any(e != 0 for e in exits):
            failures.append(f"exit codes {exits}, {c['bad_exits']} bad exits on SIGTERM")
        if c["harness_errors"]:
            failures.append(f"{c['harness_errors']} harness errors")
        if not idle:
            failures.append("an instance did not return to an empty pool and idle queues")
        if c["accepted"] == 0 or c["canaries"] == 0:
            failures.append("no traffic got through")
        for who, (rss0, fds0), (rss1, fds1) in zip(("instance A", "the router"), before, after):
            if rss1 > rss0 * 1.25 + RSS_SLACK_MIB:
                failures.append(f"{who}'s RSS grew {rss0} -> {rss1} MiB")
            if fds1 > fds0 + FD_SLACK:
                failures.append(f"{who}'s open descriptors grew {fds0} -> {fds1}")
        reports = [p.name for p in workdir.glob("*.log") if b"ERROR: AddressSanitizer" in p.read_bytes()
                   or b"runtime error:" in p.read_bytes()]
        if reports:
            failures.append(f"sanitizer reports in {reports}")
        faults = ", ".join(f"{k[6:]} {v}" for k, v in sorted(c.items()) if k.startswith("fault_"))
        print(f"soak: {self.a.minutes:g} min; requests accepted {c['accepted']}, answered {c['answered']}, "
              f"lost {c['lost']}; shed {c['shed']} (503), refused {c['refused']} (restarts); bench serve "
              f"{c['bench_completed']} completed, {c['bench_failed']} failed; structured {c['structured_answered']} and "
              f"tool calls {c['tool_answered']} answered, "
              f"{c['structured_invalid']} not conforming; malformed {c['malformed_sent']} and hostile structured "
              f"{c['hostile_structured_sent']} (all 400: "
              f"{'no' if c['unexpected_status'] else 'yes'}); faults: {faults}"
              f"{'; disk-full skipped (no mount namespace)' if c['disk_full_skipped'] else ''}; canaries "
              f"{c['canaries']}, mismatches {c['canary_mismatches']}; RSS A {before[0][0]} -> {after[0][0]} MiB, "
              f"router {before[1][0]} -> {after[1][0]} MiB; fds A {before[0][1]} -> {after[0][1]}, router "
              f"{before[1][1]} -> {after[1][1]}; idle after: {'yes' if idle else 'no'}; "
              f"{'PASS' if not failures else 'FAIL: ' + '; '.join(failures)}", flush=True)
        return not failures


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--fault-interval", type=float, default=None, help="seconds between faults (default: minutes x 3)")
    p.add_argument("--workers", type=int, default=4, help="accounted client threads")
    p.add_argument("--server-binary", default=None, help="another pagedkv build (e.g. build-asan/pagedkv)")
    p.add_argument("--disk-fs-bytes", default="24m", help="size of each instance's disk-tier filesystem")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    a = p.parse_args()
    if a.fault_interval is None:
        a.fault_interval = max(5.0, 3.0 * a.minutes)
    if not (SHARED / "models" / "stories260K.bin").exists():
        sys.exit(f"soak: {SHARED}/models is absent (the server's default model and the canaries' goldens)")
    if shutil.which("redis-server") is None:
        sys.exit("soak: redis-server is missing (scripts/setup.sh installs it)")
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="pagedkv-soak-"))
    ok = False
    try:
        soak = Soak(a)
        idle, before, after, exits = soak.run(workdir)
        ok = soak.verdict(idle, before, after, exits, workdir)
    finally:
        if a.keep or not ok:
            print(f"soak: logs in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(2))
    main()

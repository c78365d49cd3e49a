"""pagedkv router end to end: real `pagedkv serve` backends on 127.0.0.1 behind a real router.

Routing by prefix (kv) against round-robin with an exact expected outcome, pass-through of whole
and streamed answers and of errors, a backend killed with requests in flight (they fail cleanly,
new ones go elsewhere, nothing hangs) and restarted (it comes back from a snapshot), and a router
that falls behind a backend's event log (it resynchronises from a snapshot)."""

import json
import signal
import threading
import time

import pytest
import requests

from serve_support import Server, free_port, pagedkv_bin, sse_events, wait_until
from test_serve import models_dir

pytestmark = pytest.mark.skipif(not pagedkv_bin().exists(), reason=f"{pagedkv_bin()} is not built")

STORIES = ["Once upon a time there was a little girl named Lily who loved to play in the park",
           "Tom and his dog Max went to the big forest to look for a red ball that was lost",
           "The sun was shining and the birds were singing when Sue found a shiny blue stone",
           "A small cat named Kitty lived in a tall tree near the river with her three friends",
           "One day Ben wanted to bake a cake for his mom because it was her happy birthday"]


def router(*backends, policy="kv", extra=()):
    args = ["--policy", policy, "--events-interval-ms", "20", "--health-interval-ms", "100", *extra]
    for b in backends:
        args += ["--backend", b.base_url]
    return Server(*args, command="router")


def state(r):
    return r.get("/router/state").json()


def routed(r):
    return [b["routed"] for b in state(r)["backends"]]


def prompt(i):
    # ~60 tokens: three full blocks of 16 shared by both passes, then a pass-specific tail.
    return STORIES[i] + " and then " + STORIES[(i + 1) % len(STORIES)]


def complete(r, text, **kw):
    body = {"prompt": text, "max_tokens": 4, "temperature": 0, **kw}
    resp = r.post("/v1/completions", body)
    assert resp.status_code == 200, resp.text
    return resp.json()


def index_settled(r, total):
    s = state(r)
    return sum(b["index_blocks"]["device"] for b in s["backends"]) >= total and all(
        b["in_flight"] == 0 for b in s["backends"])


@pytest.mark.parametrize("policy,expect_hits,hashing", [
    ("kv", True, []), ("round-robin", False, []),
    ("kv", True, ["--prefix-hash", "sha256", "--hash-seed", "7"])])  # the router hashes as the backends say
def test_second_pass_hits_only_with_the_kv_policy(policy, expect_hits, hashing):
    """Five prompts, then the same five again. Round-robin over two backends sends each prompt's
    second pass to the other backend (5 is odd): no hits. The kv policy sends it where its blocks
    are: every second pass hits its whole shared prefix."""
    models_dir()
    with Server("--num-blocks", "256", *hashing) as b0, Server("--num-blocks", "256", *hashing) as b1, \
            router(b0, b1, policy=policy) as r:
        first = [complete(r, prompt(i)) for i in range(5)]
        assert all(f["usage"]["prompt_tokens_details"]["cached_tokens"] == 0 for f in first)
        blocks = sum(f["usage"]["prompt_tokens"] // 16 for f in first)
        wait_until(lambda: index_settled(r, blocks), what="the router's index to hold the first pass")
        after_first = routed(r)
        second = [complete(r, prompt(i) + " The end.") for i in range(5)]
        hits = [s["usage"]["prompt_tokens_details"]["cached_tokens"] for s in second]
        if expect_hits:
            for f, h in zip(first, hits):
                assert h >= (f["usage"]["prompt_tokens"] // 16) * 16 - 16, hits
        else:
            assert hits == [0] * 5
        assert sum(routed(r)) == 10 and all(n > 0 for n in after_first)
        m = r.get("/metrics").text
        assert 'pagedkv_router_requests_total{backend="%s",policy="%s"}' % (b0.base_url, policy) in m
        credited = sum(float(line.split()[-1]) for line in m.splitlines()
                       if line.startswith("pagedkv_router_prefix_blocks_total") and 'medium="device"' in line)
        assert (credited > 0) == expect_hits


def test_answers_pass_through_whole_streamed_and_errors():
    models_dir()
    with Server() as b0, Server() as b1, router(b0, b1) as r:
        body = dict(prompt="Once upon a time", max_tokens=24, temperature=0)
        direct = b0.post("/v1/completions", body).json()["choices"][0]["text"]
        assert complete(r, "Once upon a time", **{"max_tokens": 24})["choices"][0]["text"] == direct
        with requests.post(r.url("/v1/completions"), json={**body, "stream": True}, stream=True, timeout=60) as resp:
            assert resp.status_code == 200
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            events = list(sse_events(resp))
        assert events[-1] == "[DONE]"
        assert "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]) == direct
        chat = r.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5})
        assert chat.status_code == 200 and chat.json()["object"] == "chat.completion"
        bad = r.post("/v1/completions", {"prompt": "x", "max_tokens": -3})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "max_tokens"
        assert r.post("/v1/completions", {"prompt": "x", "model": "nope"}).status_code == 404
        assert r.get("/v1/models").json()["data"][0]["id"] == "stories260K"
        assert r.post("/tokenize", {"prompt": "Once"}).json()["count"] >= 2
        assert r.get("/health").json() == {"healthy_backends": 2}
        assert r.get("/nowhere").status_code == 404
        for bad_query in ("epoch=zz", "since=-1", "since=1x", "max=99999999999999999999999"):
            resp = b0.get("/kv_events?" + bad_query)
            assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_value", bad_query
        page = b0.get("/kv_events").json()
        assert page["snapshot"] and page["block_size"] == 16 and page["hash_algorithm"] == "xxh3_128"
        reset = r.post("/reset_prefix_cache", {})
        assert reset.status_code == 200 and len(reset.json()["backends"]) == 2


def test_routers_weigh_the_load_a_backend_reports():
    """A backend kept busy by clients the router never saw (another router's, or direct ones):
    its own load rides on its events pages, so a second router sends new requests to the idle
    backend. With only its own accounting the router would read zero on both and alternate."""
    models_dir()
    with Server("--max-num-seqs", "1", "--check-invariants") as busy, Server() as idle, \
            router(busy, idle, policy="least-load") as least_load, router(busy, idle) as kv:
        body = {"prompt": "Once upon a time", "max_tokens": 400, "min_tokens": 400, "ignore_eos": True}
        for r in (least_load, kv):
            # A wave of requests straight to the busy instance: one runs, the others wait.
            threads = [threading.Thread(target=lambda: busy.post("/v1/completions", body)) for _ in range(8)]
            for t in threads:
                t.start()
            try:
                wait_until(lambda: (state(r)["backends"][0]["reported_load"] or {}).get("waiting", 0) >= 2, 30,
                           what="the busy instance's reported queue")
                before = routed(r)
                for i in range(6):
                    complete(r, STORIES[i % len(STORIES)])
                after = routed(r)
                assert [a - b for a, b in zip(after, before)] == [0, 6], state(r)
            finally:
                for t in threads:
                    t.join(timeout=120)
        metrics = least_load.get("/metrics").text
        assert f'pagedkv_router_backend_reported_load_blocks{{backend="{busy.base_url}"}}' in metrics


def test_request_ids_backend_header_session_affinity_and_client_latencies():
    """X-Request-Id passes through to the instance, which names its response with it; an invalid
    one is replaced. X-Pagedkv-Backend names the instance. Requests of one session (X-Session-Id,
    or the body's `user`) stay on one instance of an idle cluster, which others alternate over.
    The router's /metrics count what its clients saw (TTFT, ITL, E2E)."""
    models_dir()
    with Server() as b0, Server() as b1, router(b0, b1, policy="least-load") as r:
        body = {"prompt": "Once upon a time", "max_tokens": 4}
        resp = r.post("/v1/completions", body, headers={"X-Request-Id": "trace-7.a:b_c"})
        assert resp.status_code == 200, resp.text
        assert resp.headers["X-Request-Id"] == "trace-7.a:b_c" and resp.json()["id"] == "cmpl-trace-7.a:b_c"
        assert resp.headers["X-Pagedkv-Backend"] in (b0.base_url, b1.base_url)
        resp = r.post("/v1/completions", body, headers={"X-Request-Id": "no spaces allowed"})
        assert resp.headers["X-Request-Id"].startswith("router-") and resp.json()["id"] == "cmpl-" + resp.headers["X-Request-Id"]

        def backends(headers=None, extra=None, n=6):
            return [r.post("/v1/completions", {**body, **(extra or {})}, headers=headers or {}).headers["X-Pagedkv-Backend"]
                    for _ in range(n)]
        assert len(set(backends())) == 2  # an idle cluster is spread
        assert len(set(backends({"X-Session-Id": "alice"}))) == 1
        assert len(set(backends(extra={"user": "bob"}))) == 1

        events = list(sse_events(requests.post(r.url("/v1/completions"), json={**body, "stream": True, "max_tokens": 300, "min_tokens": 300, "ignore_eos": True},
                                               stream=True, timeout=60)))
        assert events[-1] == "[DONE]"
        metrics = r.get("/metrics").text
        for name in ("time_to_first_token", "inter_token_latency", "e2e_request_latency"):
            count = next(line for line in metrics.splitlines() if line.startswith(f"pagedkv_router_{name}_seconds_count"))
            assert float(count.split()[-1]) >= 1, count


def test_saturated_cluster_queues_in_the_router_then_answers_429():
    """Two instances with room for two requests each (one running, one waiting) behind a router
    whose queue holds two: of ten simultaneous requests, those that find every instance full wait
    in the router and are served as room appears; beyond the queue they get 429 with Retry-After
    at once. Every 200 is a whole answer; nothing else is returned."""
    models_dir()
    small = ("--max-num-seqs", "1", "--max-waiting", "1")
    with Server(*small) as b0, Server(*small) as b1, \
            router(b0, b1, policy="least-load", extra=("--max-queued-requests", "2", "--queue-timeout-s", "60")) as r:
        body = {"prompt": "Once upon a time", "max_tokens": 150, "min_tokens": 150, "ignore_eos": True}
        answers = [None] * 10

        def send(i):
            answers[i] = requests.post(r.url("/v1/completions"), json=body, timeout=120)
        threads = [threading.Thread(target=send, args=(i,)) for i in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=150)
        codes = sorted(a.status_code for a in answers)
        assert set(codes) <= {200, 429}, codes
        assert codes.count(429) >= 1 and codes.count(200) >= 4, codes
        for a in answers:
            if a.status_code == 200:
                assert a.json()["usage"]["completion_tokens"] == 150
            else:
                assert a.headers["Retry-After"] == "1" and a.json()["error"]["code"] == "server_saturated", a.text
        assert state(r)["queued"] == 0
        rejected = [line for line in r.get("/metrics").text.splitlines()
                    if line.startswith('pagedkv_router_rejected_total{reason="queue_full"}')]
        assert rejected and float(rejected[0].split()[-1]) == codes.count(429), rejected


def test_router_rejects_bad_options():
    models_dir()
    for args in (["--backend", "localhost:1"], ["--backend", "http://127.0.0.1:1", "--policy", "fastest"],
                 ["--backend", "http://127.0.0.1:1", "--prefill-scale", "-1"]):
        with pytest.raises(RuntimeError) as e:
            Server(*args, command="router", start_timeout=20)
        assert "error" in str(e.value).lower() or "must" in str(e.value)


def test_no_healthy_backend_is_503_and_nothing_hangs():
    models_dir()
    dead = f"http://127.0.0.1:{free_port()}"
    with Server("--backend", dead, "--health-interval-ms", "100", "--connect-timeout-ms", "200",
                command="router") as r:
        t0 = time.monotonic()
        resp = r.post("/v1/completions", {"prompt": "Once", "max_tokens": 2}, timeout=30)
        assert resp.status_code == 503 and resp.json()["error"]["code"] == "no_backend"
        assert time.monotonic() - t0 < 10
        assert r.get("/health").status_code == 503


class HangUpBackend:
    """A backend that looks healthy but closes every POST's connection without a byte of answer
    (what a `pagedkv serve` that stops with a connection in its listen backlog does)."""

    def __init__(self):
        import http.server

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                code, body = (200, b'{"status": "ok"}') if self.path == "/health" else (404, b"{}")
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                self.close_connection = True  # read nothing, answer nothing

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_unanswered_request_is_retried_once_elsewhere():
    """A backend that hangs up unanswered costs the client nothing: the router marks it down and
    gives the request to another backend (once; with no other, the client gets a 502)."""
    models_dir()
    hang_up = HangUpBackend()
    try:
        with Server() as good, router(hang_up, good, policy="round-robin") as r:
            wait_until(lambda: all(b["healthy"] for b in state(r)["backends"]), what="both backends healthy")
            for i in range(4):
                complete(r, STORIES[i])
                wait_until(lambda: all(b["healthy"] for b in state(r)["backends"]), what="the hang-up backend back")
            failures = r.metrics()
            unanswered = failures[("pagedkv_router_failures_total",
                                   frozenset({("backend", hang_up.base_url), ("reason", "unanswered")}))]
            assert unanswered >= 2
        with router(hang_up) as r:
            resp = r.post("/v1/completions", {"prompt": "Once", "max_tokens": 2}, timeout=30)
            assert resp.status_code in (502, 503), resp.text
    finally:
        hang_up.close()


def in_flight_backend(r):
    for i, b in enumerate(state(r)["backends"]):
        if b["in_flight"] > 0:
            return i
    return None


def test_backend_killed_mid_request_then_restarted():
    """SIGKILL a backend (frozen first, so the timing is certain) while it streams one answer and
    computes another: the stream, half answered, ends with an error event; the whole request, not
    answered at all, is given to the survivor (200); new requests go to the survivor; the backend
    comes back on the same port with a new epoch and the router resynchronises from a snapshot."""
    models_dir()
    ports = [free_port(), free_port()]
    b = [Server(port=ports[0]), Server(port=ports[1])]
    try:
        with router(*b, policy="round-robin") as r:
            long_body = dict(prompt="Once upon a time", max_tokens=400, ignore_eos=True, temperature=0)
            results = {}

            def whole():
                results["whole"] = r.post("/v1/completions", long_body, timeout=60)

            with requests.post(r.url("/v1/completions"), json={**long_body, "stream": True}, stream=True,
                               timeout=60) as stream:
                lines = sse_events(stream)
                next(lines)  # the first token arrived: the request runs on a backend
                victim = in_flight_backend(r)
                assert victim is not None
                # Frozen, it cannot finish the stream before it is killed; the kernel still
                # accepts connections for it. Round-robin: the next request goes to the other
                # backend, the one after to the victim.
                b[victim].proc.send_signal(signal.SIGSTOP)
                complete(r, "Tom")
                t = threading.Thread(target=whole)
                t.start()
                wait_until(lambda: state(r)["backends"][victim]["in_flight"] == 2, what="two requests on the victim")
                b[victim].kill()
                t0 = time.monotonic()
                rest = list(lines)
                assert time.monotonic() - t0 < 20
            assert rest and rest[-1] != "[DONE]"
            err = json.loads(rest[-1])
            assert err["error"]["code"] == "bad_gateway", rest[-1]
            t.join(timeout=30)
            assert not t.is_alive()
            assert results["whole"].status_code == 200, results["whole"].text
            victim_url = b[victim].base_url
            assert r.metrics()[("pagedkv_router_failures_total",
                                frozenset({("backend", victim_url), ("reason", "unanswered")}))] == 1

            # Every new request succeeds: the dead backend leaves the rotation.
            for i in range(6):
                complete(r, f"Lily had {i} apples")
            wait_until(lambda: not state(r)["backends"][victim]["healthy"], what="the victim out of the rotation")
            s = state(r)["backends"][victim]
            assert s["index_blocks"]["device"] == 0 and s["went_down"] >= 1
            old_epoch = s["epoch"]

            b[victim] = Server(port=ports[victim])
            wait_until(lambda: state(r)["backends"][victim]["healthy"], what="the restarted backend back in the rotation")
            wait_until(lambda: state(r)["backends"][victim]["epoch"] not in (old_epoch, "0" * 16),
                       what="the new epoch")
            for i in range(4):
                complete(r, f"Ben saw {i} birds")
            assert state(r)["backends"][victim]["routed"] > s["routed"]
    finally:
        for s in b:
            s.stop()


def test_router_behind_the_event_log_resyncs_from_a_snapshot():
    """A backend that keeps only 4 events and a router that reads them every 1.5 s: whatever
    happened meanwhile reaches the router as a snapshot, and its index matches the backend's."""
    models_dir()
    with Server("--kv-events-capacity", "4", "--num-blocks", "128") as b0, \
            Server("--backend", b0.base_url, "--events-interval-ms", "1500", "--health-interval-ms", "100",
                   command="router") as r:
        wait_until(lambda: state(r)["backends"][0]["snapshots"] >= 1, what="the first snapshot")
        for i in range(5):
            complete(r, prompt(i))

        def matches():
            truth = b0.get("/kv_events").json()  # no epoch: a snapshot
            got = state(r)["backends"][0]
            return got["snapshots"] >= 2 and got["index_blocks"]["device"] == len(truth["blocks"]) > 0
        wait_until(matches, timeout=20, what="the router's index to match the backend after a snapshot")


def test_backends_join_and_leave_without_a_restart(tmp_path):
    """Membership changes while the router serves: a watched backends file (added, removed, a bad
    line changes nothing) and the admin endpoint (its own key; add, remove, revive). A stream in
    flight on a removed backend still finishes."""
    models_dir()
    listing = tmp_path / "backends.txt"
    with Server() as b0, Server() as b1:
        listing.write_text(f"# the fleet\n{b0.base_url}\n")
        extra = ["--backends-file", str(listing), "--backends-file-interval-s", "0.05", "--admin-api-key", "s3cret"]
        with router(policy="least-load", extra=extra) as r:
            def members():
                return {b["url"]: (b["healthy"], b["removed"]) for b in state(r)["backends"]}

            def served(n=4):
                return {r.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 2}).headers["X-Pagedkv-Backend"]
                        for _ in range(n)}
            assert served() == {b0.base_url}
            listing.write_text(f"{b0.base_url}\n{b1.base_url}  # joined\n")
            wait_until(lambda: members().get(b1.base_url) == (True, False), 10, what="b1 joining from the file")
            assert served(6) == {b0.base_url, b1.base_url}
            listing.write_text(f"{b1.base_url}\n")
            wait_until(lambda: members()[b0.base_url] == (False, True), 10, what="b0 leaving by the file")
            assert served() == {b1.base_url}
            listing.write_text(f"{b1.base_url}\nlocalhost:1\n")  # a bad line: the last good list stays
            time.sleep(0.3)
            assert members() == {b0.base_url: (False, True), b1.base_url: (True, False)}
            assert served() == {b1.base_url}

            admin = {"Authorization": "Bearer s3cret"}
            assert r.get("/router/backends").status_code == 401
            assert r.get("/router/backends", headers={"Authorization": "Bearer nope"}).status_code == 401
            listed = r.get("/router/backends", headers=admin).json()["backends"]
            assert {b["url"]: b["removed"] for b in listed} == {b0.base_url: True, b1.base_url: False}
            resp = r.post("/router/backends", {"url": b0.base_url + "/"}, headers=admin)
            assert resp.status_code == 201 and resp.json()["status"] == "restored", resp.text
            assert r.post("/router/backends", {"url": b0.base_url}, headers=admin).json()["status"] == "present"
            assert r.post("/router/backends", {"url": "ftp://x"}, headers=admin).status_code == 400
            assert r.post("/router/backends", {"address": b0.base_url}, headers=admin).status_code == 400
            wait_until(lambda: members()[b0.base_url] == (True, False), 10, what="b0 revived by the admin endpoint")

            # A long stream on b1, then b1 removed: the stream ends normally, new requests go to b0.
            body = {"prompt": "Once upon a time", "max_tokens": 200, "min_tokens": 200, "ignore_eos": True, "stream": True}
            stream = requests.post(r.url("/v1/completions"), json=body, stream=True, timeout=60,
                                   headers={"X-Session-Id": "long"})
            on = stream.headers["X-Pagedkv-Backend"]
            other = b0.base_url if on == b1.base_url else b1.base_url
            resp = requests.delete(r.url("/router/backends"), params={"url": on}, headers=admin, timeout=10)
            assert resp.status_code == 200 and resp.json()["status"] == "removed", resp.text
            assert served() == {other}
            events = list(sse_events(stream))
            assert events[-1] == "[DONE]" and len(events) > 100
            assert requests.delete(r.url("/router/backends"), params={"url": on}, headers=admin, timeout=10).status_code == 404
        # Without an admin key the membership endpoints are off.
        with router(b0) as plain:
            assert plain.post("/router/backends", {"url": b1.base_url}).status_code == 403
            assert plain.get("/router/backends").status_code == 403


def test_stream_moves_to_another_instance_when_its_instance_dies():
    """--migration-limit: an instance frozen then SIGKILLed mid-stream; the router sends the
    prompt's ids and the tokens already relayed to another instance and goes on with the same
    stream. Greedy, so the client gets exactly the uninterrupted answer: completions and chat,
    with and without the client asking for token ids; usage counts the whole answer. With the
    limit spent the stream ends with an error event as without migration."""
    models_dir()
    servers = [Server() for _ in range(3)]
    try:
        with router(*servers, policy="round-robin", extra=["--migration-limit", "1"]) as r:
            def killed_mid_stream(path, body):
                chunks = []
                with requests.post(r.url(path), json={**body, "stream": True}, stream=True, timeout=60) as stream:
                    events = sse_events(stream)
                    chunks.append(next(events))  # the first token arrived: the request runs on a backend
                    victim = in_flight_backend(r)
                    assert victim is not None
                    servers[victim].proc.send_signal(signal.SIGSTOP)  # nothing more from it
                    servers[victim].kill()
                    chunks += list(events)
                return victim, chunks

            def joined(chunks, key):
                assert chunks[-1] == "[DONE]", chunks[-3:]
                parsed = [json.loads(c) for c in chunks[:-1]]
                assert not any("error" in p for p in parsed), chunks
                return parsed, "".join(key(p["choices"][0]) for p in parsed if p["choices"])

            completion = {"prompt": "Once upon a time", "max_tokens": 300, "ignore_eos": True, "temperature": 0}
            alive = [s for s in servers]
            expected = alive[0].post("/v1/completions", {**completion, "return_token_ids": True}).json()["choices"][0]
            victim, chunks = killed_mid_stream("/v1/completions", {**completion, "stream_options": {"include_usage": True}})
            alive.remove(servers[victim])
            parsed, text = joined(chunks, lambda c: c["text"])
            assert text == expected["text"]
            assert not any("token_ids" in p["choices"][0] or "prompt_token_ids" in p["choices"][0]
                           for p in parsed if p["choices"])
            assert len({p["id"] for p in parsed}) == 1
            usage = parsed[-1]["usage"]
            assert usage["completion_tokens"] == 300 and usage["prompt_tokens"] == len(expected["prompt_token_ids"])

            chat = {"messages": [{"role": "user", "content": "Tell me a story about a cat"}], "max_tokens": 250,
                    "ignore_eos": True, "temperature": 0, "return_token_ids": True}
            reference = alive[0].post("/v1/chat/completions", chat).json()
            victim, chunks = killed_mid_stream("/v1/chat/completions", chat)
            alive.remove(servers[victim])
            parsed, text = joined(chunks, lambda c: c["delta"].get("content", ""))
            assert text == reference["choices"][0]["message"]["content"]
            ids = [t for p in parsed if p["choices"] for t in p["choices"][0].get("token_ids", [])]
            assert ids == reference["choices"][0]["token_ids"]
            assert parsed[0]["prompt_token_ids"] == reference["prompt_token_ids"]
            assert r.metrics()[("pagedkv_router_stream_migrations_total", frozenset({("result", "continued")}))] == 2

            # The last instance dies too: no other instance, so the stream ends with an error event.
            victim, chunks = killed_mid_stream("/v1/completions", completion)
            assert chunks[-1] != "[DONE]" and json.loads(chunks[-1])["error"]["code"] == "bad_gateway"
    finally:
        for s in servers:
            s.stop()

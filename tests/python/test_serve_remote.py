"""Two `pagedkv serve` processes sharing one Redis (the remote KV tier): a long prompt served by
the first is a prefix hit on the second (cached_tokens, the remote series of
pagedkv:prefix_cache_hit_tokens_total) with byte-identical greedy output; tenants (cache_salt)
never share; after Redis is killed both keep answering correctly (tier degraded); after it is
back, sharing resumes. Redis is the test's own (redis_support.py)."""

import pytest

from conftest import shared_dir
from redis_support import RedisServer, redis_available
from serve_support import Server, pagedkv_bin, wait_until

pytestmark = [pytest.mark.skipif(not pagedkv_bin().exists(), reason=f"{pagedkv_bin()} is not built"),
              pytest.mark.skipif(not redis_available(), reason="redis-server is not installed (scripts/setup.sh)")]


def prompt(topic):
    return " ".join([f"Once upon a time there was a little {topic} who liked to play in the park"] * 9)


def complete(server, text, **kw):
    r = server.post("/v1/completions", {"prompt": text, "max_tokens": 24, "temperature": 0, **kw})
    assert r.status_code == 200, r.text
    j = r.json()
    return j["choices"][0]["text"], j["usage"]


def remote_hits(server):
    return server.metrics()[("pagedkv:prefix_cache_hit_tokens_total", frozenset({("tier", "remote")}))]


def degraded(server):
    return server.metrics().get(("pagedkv:tier_degraded", frozenset({("tier", "remote")})), 0)


@pytest.fixture
def redis():
    if not (shared_dir() / "models" / "stories260K.bin").exists():
        pytest.skip("stories260K.bin is absent (set PAGEDKV_SHARED_DIR)")
    with RedisServer() as r:
        yield r


def test_two_servers_share_prefixes_through_redis_and_survive_its_death(redis):
    args = ["--remote-cache", redis.url, "--remote-timeout-ms", "100", "--check-invariants"]
    with Server(*args) as a, Server(*args) as b:
        text = prompt("dog")
        out_a, usage_a = complete(a, text)
        assert usage_a["prompt_tokens"] > 100
        wait_until(lambda: redis.dbsize() >= (usage_a["prompt_tokens"] - 1) // 16, what="blocks in Redis")
        out_b, usage_b = complete(b, text)
        assert out_b == out_a, "greedy output from remote KV differs"
        hit = usage_b["prompt_tokens_details"]["cached_tokens"]
        assert hit == (usage_b["prompt_tokens"] - 1) // 16 * 16 > 0
        assert remote_hits(b) == hit
        # Another tenant never gets them.
        _, other = complete(b, text, cache_salt="tenant-b")
        assert other["prompt_tokens_details"]["cached_tokens"] == 0

        # Redis dies: both keep answering, correctly; the tier says it is degraded.
        redis.kill()
        text2 = prompt("cat")
        out_a2, _ = complete(a, text2)
        out_b2, usage_b2 = complete(b, text2)
        assert out_b2 == out_a2
        assert usage_b2["prompt_tokens_details"]["cached_tokens"] == 0
        wait_until(lambda: degraded(a) == 1 or degraded(b) == 1, what="the remote tier marked degraded")
        assert complete(a, text)[0] == out_a  # its own device cache still serves

        # Back (empty): each server's next call after its back-off reconnects; sharing resumes.
        assert redis.start()
        counter = iter(range(1000))

        def recovered(server, topic):
            complete(server, prompt(f"{topic} {next(counter)}"))
            return degraded(server) == 0
        wait_until(lambda: recovered(a, "bird"), timeout=30, interval=0.2, what="A reconnected")
        wait_until(lambda: recovered(b, "fish"), timeout=30, interval=0.2, what="B reconnected")
        text3 = prompt("horse")
        stored = redis.dbsize()
        out_a3, usage_a3 = complete(a, text3)
        wait_until(lambda: redis.dbsize() >= stored + (usage_a3["prompt_tokens"] - 1) // 16, what="A's prefix stored")
        before = remote_hits(b)
        out_b3, usage_b3 = complete(b, text3)
        assert out_b3 == out_a3
        assert usage_b3["prompt_tokens_details"]["cached_tokens"] == (usage_b3["prompt_tokens"] - 1) // 16 * 16
        assert remote_hits(b) - before == usage_b3["prompt_tokens_details"]["cached_tokens"]


def test_bad_remote_cache_url_is_a_clear_error():
    import subprocess
    r = subprocess.run([str(pagedkv_bin()), "serve", "--port", "0", "--remote-cache", "http://nowhere:1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "--remote-cache" in r.stderr and "http://nowhere:1" in r.stderr, r.stderr

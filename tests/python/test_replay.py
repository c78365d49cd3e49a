"""Replays that run in C++ from Python: serving traces through the prefix cache, and the native
kvcache-peer-v1 driver (which must agree with the Python driver)."""

import dataclasses

import pytest

import kvcache_peer as kp
import pagedkv


def test_trace_replay_unbounded_and_bounded(shared):
    path = shared / "traces" / "mooncake_arxiv_trace_first1000.jsonl"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    trace = pagedkv.read_trace(str(path), limit=200)
    assert (len(trace), trace.format) == (200, "mooncake")
    assert len(trace.prompt_token_ids(0)) > 0
    unbounded = pagedkv.replay_cache(trace, block_size=16)
    assert unbounded["capacity_blocks"] is None and unbounded["evictions"] == 0
    assert unbounded["requests"] == 200 and 0 < unbounded["token_hit_rate"] < 1
    small = pagedkv.replay_cache(trace, block_size=16, capacity_blocks=2000, policy="lfu")
    assert small["evictions"] > 0 and small["hit_blocks"] <= unbounded["hit_blocks"]
    with pytest.raises(pagedkv.ConfigError, match="unknown trace format 'csv2'"):
        pagedkv.read_trace(str(path), format="csv2")


def test_native_and_python_drivers_agree():
    native = pagedkv.replay_peer("A")
    assert native["counters"] == dataclasses.asdict(kp.REFERENCE_COUNTERS_A)
    assert native["whole_s"] > 0 and native["mean_us"]["decode"] > 0

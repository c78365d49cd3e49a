"""The memory math from Python: the figures `pagedkv plan` prints."""

import pytest

import pagedkv


def test_llama_2_70b_block_bytes():
    shape = next(m for m in pagedkv.model_presets() if m.name == "llama-2-70b")
    spec = shape.kv_cache_spec(16, "fp16")
    assert spec.bytes_per_block_per_layer == 2 * 16 * 8 * 128 * 2 == 65_536
    assert pagedkv.kv_bytes_per_block(spec, shape.num_layers) == 5_242_880
    assert pagedkv.kv_bytes_per_token(spec, shape.num_layers) == 327_680
    assert pagedkv.blocks_per_request(spec, 4096) == 256
    assert pagedkv.max_concurrency(8192, spec, 4096) == 32.0


def test_plan_from_a_budget_and_from_a_gpu():
    p = pagedkv.plan("llama-2-70b", kv_memory="40GiB", context_len=4096)
    assert (p["bytes_per_block"], p["num_blocks"], p["token_capacity"], p["max_concurrency"]) == (
        5_242_880, 8192, 131_072, 32.0)
    assert p["gpu"] is None
    g = pagedkv.plan("llama-2-7b", gpu="h100-80gb")
    assert g["gpu"]["name"] == "h100-80gb" and g["num_blocks"] > 0
    # The budget is what the GPU leaves after weights and overhead, in whole blocks.
    budget = g["gpu"]["memory_bytes"] * 0.9 - g["gpu"]["weights_bytes"] - g["gpu"]["overhead_bytes"]
    assert g["num_blocks"] == int(budget // g["bytes_per_block"])
    assert pagedkv.parse_byte_size("40GiB") == 40 * 2**30 and pagedkv.parse_byte_size("43GB") == 43 * 10**9


def test_plan_errors_name_the_problem():
    with pytest.raises(pagedkv.UsageError, match="exactly one of kv_memory"):
        pagedkv.plan("llama-2-7b")
    with pytest.raises(pagedkv.ConfigError, match="no-such-model"):
        pagedkv.plan("no-such-model", kv_memory="1GiB")
    with pytest.raises(pagedkv.ConfigError, match="'7G'"):
        pagedkv.plan("llama-2-7b", kv_memory="7G")

"""kvcache-peer-v1, scenario A, replayed from a Python driver loop: every counter must equal the
reference counters vLLM v1's own KVCacheManager produced (../shared/workloads/README.md). This
is the proof that pagedkv's semantics are vLLM's when driven through the Python bindings."""

import dataclasses
import json

import pytest

import kvcache_peer as kp


@pytest.fixture(scope="module")
def workload():
    w = kp.generate()
    kp.check(w)  # every check value the README lists
    return w


def test_generator_matches_the_shared_spec(shared, workload):
    path = shared / "workloads" / "kvcache-peer-v1.json"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    doc = json.loads(path.read_text())
    spec, sums = doc["spec"], doc["checksums"]
    assert (spec["seed"], spec["num_requests"], spec["vocab_size"], spec["block_size"]) == (
        kp.SEED, kp.NUM_REQUESTS, kp.VOCAB, kp.BLOCK_SIZE)
    assert (spec["system_prompt_len"], spec["output_len"], spec["max_model_len"]) == (
        kp.SYSTEM_PROMPT_LEN, kp.OUTPUT_LEN, kp.MAX_MODEL_LEN)
    a = kp.SCENARIOS["A"]
    assert (spec["num_gpu_blocks"], spec["max_num_seqs"], spec["max_num_batched_tokens"]) == (
        a.num_blocks, a.max_num_seqs, a.max_num_batched_tokens)
    assert sums["total_prompt_tokens"] == workload.total_prompt_tokens
    assert sums["first5_prompt_lens"] == [len(p) for p in workload.prompts[:5]]
    assert int(sums["rolling_hash"], 16) == workload.rolling_checksum()
    assert (sums["min_prompt_len"], sums["max_prompt_len"]) == (
        min(len(p) for p in workload.prompts), max(len(p) for p in workload.prompts))


@pytest.mark.parametrize("hash_algorithm", ["xxh3_128", "sha256"])
def test_scenario_a_counters_match_vllm(workload, hash_algorithm):
    counters = kp.replay(workload, kp.SCENARIOS["A"], hash_algorithm=hash_algorithm)
    assert dataclasses.asdict(counters) == dataclasses.asdict(kp.REFERENCE_COUNTERS_A)


def test_scenario_a_holds_invariants_throughout(workload):
    counters = kp.replay(workload, kp.SCENARIOS["A"], check_invariants_every=97)
    assert counters == kp.REFERENCE_COUNTERS_A

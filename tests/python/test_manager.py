"""The KV-cache manager's behaviour through Python: vLLM v1's API and semantics."""

import threading

import numpy as np
import pytest

import pagedkv

BS = 16
SYSTEM = list(range(1000, 1032))  # a 32-token system prompt: exactly two blocks


def admit(m, req):
    """Lookup + allocate the whole prompt, the way vLLM's scheduler admits a request."""
    blocks, hit = m.get_computed_blocks(req)
    new = m.allocate_slots(req, req.num_tokens - hit, hit, blocks)
    assert new is not None
    req.num_computed_tokens = req.num_tokens
    return hit, new


# ---- module, errors -----------------------------------------------------------------------------

def test_exceptions_form_a_hierarchy():
    for cls in (pagedkv.UsageError, pagedkv.ConfigError, pagedkv.FormatError, pagedkv.InvariantError):
        assert issubclass(cls, pagedkv.Error)
    assert issubclass(pagedkv.Error, RuntimeError)


def test_usage_errors_carry_the_library_message():
    m = pagedkv.KVCacheManager(num_blocks=16)
    r = pagedkv.Request(1, [1, 2, 3])
    with pytest.raises(pagedkv.UsageError, match="num_new_tokens must be positive, got 0"):
        m.allocate_slots(r, 0)
    with pytest.raises(pagedkv.UsageError, match=r"num_computed_tokens must be in \[0, 3\], got 4"):
        r.num_computed_tokens = 4
    with pytest.raises(pagedkv.UsageError, match="fork: parent request 1 holds no blocks"):
        m.fork(r, pagedkv.Request(2, [1, 2, 3]))
    with pytest.raises(TypeError, match="request must be a pagedkv.Request"):
        m.allocate_slots("not a request", 1)
    with pytest.raises(TypeError, match="missing required argument 'num_new_tokens'"):
        m.allocate_slots(r)


def test_config_errors_name_the_bad_value():
    with pytest.raises(pagedkv.ConfigError, match="got 1"):
        pagedkv.KVCacheManager(num_blocks=1)
    with pytest.raises(pagedkv.ConfigError, match="watermark must be in"):
        pagedkv.KVCacheManager(num_blocks=16, watermark=1.5)
    with pytest.raises(pagedkv.ConfigError, match="unknown hash_algorithm 'md5'"):
        pagedkv.KVCacheManager(num_blocks=16, hash_algorithm="md5")
    with pytest.raises(pagedkv.ConfigError, match="unknown dtype 'fp12'"):
        pagedkv.KVCacheManager(num_blocks=16, dtype="fp12")
    with pytest.raises(pagedkv.ConfigError, match="sliding_window must be positive"):
        pagedkv.KVCacheSpec(kind=pagedkv.AttentionKind.SLIDING_WINDOW)


def test_token_ids_from_lists_and_numpy():
    assert pagedkv.Request(1, np.arange(40, dtype=np.int32)).prompt_token_ids == list(range(40))
    assert pagedkv.Request(1, np.arange(40, dtype=np.int64)).prompt_token_ids == list(range(40))
    assert pagedkv.Request(1, (5, 6, 7)).prompt_token_ids == [5, 6, 7]
    with pytest.raises(pagedkv.UsageError, match="does not fit in int32"):
        pagedkv.Request(1, [1, 2**31])
    with pytest.raises(pagedkv.UsageError, match="expected an integer array"):
        pagedkv.Request(1, np.zeros(4, dtype=np.float32))
    with pytest.raises(pagedkv.UsageError, match="1-D array"):
        pagedkv.Request(1, np.zeros((2, 2), dtype=np.int32))
    r = pagedkv.Request(7, [1, 2])
    r.append_token(3)
    r.append_tokens(np.array([4, 5], dtype=np.int64))
    r.append_output_token_ids(6)
    r.append_output_token_ids([7])
    assert (r.all_token_ids, r.output_token_ids, r.num_tokens, len(r)) == ([1, 2, 3, 4, 5, 6, 7], [3, 4, 5, 6, 7], 7, 7)


# ---- prefix caching ------------------------------------------------------------------------------

def test_shared_prefix_worked_example():
    """Two requests behind a 32-token system prompt share its two blocks."""
    m = pagedkv.KVCacheManager(num_blocks=64, block_size=BS)
    a = pagedkv.Request(1, SYSTEM + list(range(1, 11)))   # 42 tokens: 2 full blocks + 10
    b = pagedkv.Request(2, SYSTEM + list(range(50, 57)))  # 39 tokens: 2 full blocks + 7

    hit, new = admit(m, a)
    assert (hit, new) == (0, ((1, 2, 3),))
    blocks, hit = m.get_computed_blocks(b)
    assert hit == 32 and blocks.num_computed_tokens == 32
    assert blocks.get_block_ids() == ([1, 2],)
    assert m.allocate_slots(b, b.num_tokens - hit, hit, blocks) == ((4,),)

    assert m.get_block_ids(a) == ([1, 2, 3],)
    assert m.get_block_ids(2) == ([1, 2, 4],)
    assert [m.block(i).ref_cnt for i in (1, 2, 3, 4)] == [2, 2, 1, 1]
    assert m.block(1).block_hash == a.block_hashes[0] == b.block_hashes[0]
    stats = m.prefix_cache_stats
    assert (stats.requests, stats.queries, stats.hits, stats.hit_requests) == (2, 42 + 39, 32, 1)
    m.check_invariants()

    # Freed, the system prompt stays cached for the next request.
    assert m.free(a) and m.free(b)
    assert m.num_free_blocks == 63 and m.num_cached_blocks == 2
    _, hit = m.get_computed_blocks(pagedkv.Request(3, SYSTEM + [9]))
    assert hit == 32
    m.check_invariants()


def test_lookup_results_held_by_the_caller_are_never_rewritten():
    """get_computed_blocks reuses KVCacheBlocks objects nobody holds any more; one the caller
    still holds must keep its answer, and block ids come back as plain ints."""
    m = pagedkv.KVCacheManager(num_blocks=4200, block_size=BS)
    prompts = [SYSTEM + list(range(i * 100, i * 100 + 40)) for i in range(6)]
    admit(m, pagedkv.Request(0, prompts[0]))
    kept = [m.get_computed_blocks(pagedkv.Request(i + 1, p))[0] for i, p in enumerate(prompts)]
    assert [k.get_block_ids() for k in kept] == [([1, 2, 3, 4],)] + [([1, 2],)] * 5
    assert [k.num_computed_tokens for k in kept] == [64] + [32] * 5
    # Results dropped right away are recycled without disturbing the kept ones.
    for _ in range(4):
        blocks, hit = m.get_computed_blocks(pagedkv.Request(9, [7] * 40))
        assert (hit, blocks.get_block_ids()) == (0, ([],))
        del blocks
    assert kept[0].get_block_ids() == ([1, 2, 3, 4],) and kept[1].num_computed_tokens == 32
    # Ids above CPython's small-int cache are shared per manager but are ordinary ints.
    big = pagedkv.Request(20, list(range(5000, 5000 + 16 * 300)))
    blocks, hit = m.get_computed_blocks(big)
    new = m.allocate_slots(big, big.num_tokens, hit, blocks)
    assert new[0] == tuple(range(6, 306)) and all(type(i) is int for i in new[0])
    assert m.get_block_ids(big) == (list(range(6, 306)),)
    m.check_invariants()


def test_a_lookup_leaves_at_least_one_token_to_compute():
    m = pagedkv.KVCacheManager(num_blocks=16)
    admit(m, pagedkv.Request(1, SYSTEM))
    blocks, hit = m.get_computed_blocks(pagedkv.Request(2, SYSTEM))
    assert hit == 16 and blocks.get_block_ids() == ([1],)


def test_cache_salt_lora_and_multimodal_inputs_separate_blocks():
    toks = list(range(64))
    m = pagedkv.KVCacheManager(num_blocks=64)
    admit(m, pagedkv.Request(1, toks, cache_salt="tenant-a", lora_id=7))
    assert m.get_computed_blocks(pagedkv.Request(2, toks, cache_salt="tenant-b", lora_id=7))[1] == 0
    assert m.get_computed_blocks(pagedkv.Request(3, toks, cache_salt="tenant-a", lora_id=8))[1] == 0
    assert m.get_computed_blocks(pagedkv.Request(4, toks, cache_salt="tenant-a", lora_id=7))[1] == 48

    image = pagedkv.MultiModalInput(b"image-1", offset=32, length=16)
    admit(m, pagedkv.Request(5, toks, mm_inputs=[image]))
    other = pagedkv.MultiModalInput(b"image-2", offset=32, length=16)
    # Blocks before the image are shared; from the image on, the content differs.
    assert m.get_computed_blocks(pagedkv.Request(6, toks, mm_inputs=[other]))[1] == 32
    assert m.get_computed_blocks(pagedkv.Request(7, toks, mm_inputs=[image]))[1] == 48
    assert pagedkv.MultiModalInput(5, 0, 1).hash == f"{5:032x}"
    with pytest.raises(pagedkv.UsageError, match="runs past the 64-token prompt"):
        pagedkv.Request(8, toks, mm_inputs=[pagedkv.MultiModalInput(1, offset=60, length=8)])


def test_block_hasher_agrees_with_the_manager():
    toks = np.arange(100, dtype=np.int32)
    for algorithm in ("xxh3_128", "sha256"):
        m = pagedkv.KVCacheManager(num_blocks=32, hash_algorithm=algorithm, hash_seed=42, enable_events=True)
        r = pagedkv.Request(1, toks)
        m.hash_request(r)
        hasher = pagedkv.BlockHasher(block_size=16, algorithm=algorithm, seed=42)
        assert r.block_hashes == hasher.hash_tokens(toks)
        assert len(r.block_hashes) == 6
        admit(m, r)
        stored = [e for e in m.take_events() if e.kind == "stored"]
        assert [e.block_hash for e in stored] == r.block_hashes
        assert stored[0].parent_block_hash is None  # a first block has no parent (vLLM: None)
        assert hasher.root != r.block_hashes[0]
        assert stored[1].parent_block_hash == r.block_hashes[0]
    assert pagedkv.BlockHasher(seed=1).hash_tokens(toks) != pagedkv.BlockHasher(seed=2).hash_tokens(toks)


def test_hashing_runs_in_parallel_threads_with_identical_results():
    toks = np.arange(200_000, dtype=np.int32) % 32000
    hasher = pagedkv.BlockHasher()
    expected = hasher.hash_tokens(toks)
    results = [None] * 4

    def work(i):
        results[i] = hasher.hash_tokens(toks)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == expected for r in results)
    # A long request is hashed off the GIL too, with the same result.
    m = pagedkv.KVCacheManager(num_blocks=16)
    r = pagedkv.Request(1, toks)
    m.hash_request(r)
    assert r.block_hashes == expected


# ---- capacity ----------------------------------------------------------------------------------

def test_failed_allocation_changes_nothing():
    m = pagedkv.KVCacheManager(num_blocks=5, max_model_len=128)  # 4 usable blocks
    r = pagedkv.Request(1, list(range(80)))                       # needs 5
    assert m.allocate_slots(r, 80) is None
    assert m.num_free_blocks == 4 and m.num_requests == 0
    assert m.get_num_blocks_to_allocate(r, 80) == 5
    assert m.allocate_slots(r, 64) == ((1, 2, 3, 4),)
    assert m.usage == 1.0


def test_scheduling_past_max_model_len_is_refused():
    m = pagedkv.KVCacheManager(num_blocks=5)  # max_model_len = 4 blocks = 64 tokens
    r = pagedkv.Request(1, list(range(80)))
    with pytest.raises(pagedkv.UsageError, match="would hold 80 tokens, more than max_model_len 64"):
        m.allocate_slots(r, 80)
    assert m.num_requests == 0 and m.num_free_blocks == 4


def test_watermark_never_later_ok():
    m = pagedkv.KVCacheManager(num_blocks=101, block_size=BS, watermark=0.1)  # 100 usable, keep 10 free
    assert m.watermark_blocks == 10 and m.max_model_len == 1600
    tokens = lambda n_blocks, base: list(range(base, base + n_blocks * BS))  # noqa: E731
    assert m.can_allocate(pagedkv.Request(1, list(range(1700)))) == pagedkv.AllocStatus.NEVER  # > max_model_len
    assert m.can_allocate(pagedkv.Request(2, tokens(95, 0))) == pagedkv.AllocStatus.NEVER     # 100 - 95 < 10
    assert m.can_allocate(pagedkv.Request(3, tokens(90, 0))) == pagedkv.AllocStatus.OK
    admit(m, pagedkv.Request(4, tokens(50, 100_000)))
    assert m.can_allocate(pagedkv.Request(5, tokens(90, 0))) == pagedkv.AllocStatus.LATER     # 50 free
    assert m.can_allocate(pagedkv.Request(6, tokens(40, 0))) == pagedkv.AllocStatus.OK        # 50 - 40 >= 10
    assert m.can_allocate(pagedkv.Request(7, tokens(41, 0))) == pagedkv.AllocStatus.LATER


def test_double_free():
    m = pagedkv.KVCacheManager(num_blocks=8)
    r = pagedkv.Request(1, list(range(20)))
    admit(m, r)
    assert m.free(r) is True
    assert m.free(r) is False  # as in vLLM, freeing a request that holds nothing is a no-op
    m.check_invariants()

    pool = pagedkv.BlockPool(num_blocks=8)
    assert pool.allocate(2) == [1, 2]
    pool.free_blocks([2, 1])
    with pytest.raises(pagedkv.UsageError, match="double free: block 1 is already free"):
        pool.free_blocks([1])
    assert pool.allocate(2) == [3, 4]
    with pytest.raises(pagedkv.UsageError, match="double free: block 3"):
        pool.free_blocks([3, 3])
    assert pool.num_free_blocks == 5  # the failed calls changed nothing
    with pytest.raises(pagedkv.UsageError, match=r"out of range \[1, 8\)"):
        pool.free_blocks([8])
    pool.check_invariants()
    assert pool.allocate(6) is None


# ---- fork and copy-on-write ----------------------------------------------------------------------

def test_fork_shares_blocks_and_copies_on_first_write():
    m = pagedkv.KVCacheManager(num_blocks=16)
    parent = pagedkv.Request(1, list(range(20)))  # one full block + 4 tokens
    admit(m, parent)
    child = pagedkv.Request(2, list(range(20)))
    child.num_computed_tokens = 20
    m.fork(parent, child)
    assert m.get_block_ids(child) == m.get_block_ids(parent) == ([1, 2],)
    assert (m.block(1).ref_cnt, m.block(2).ref_cnt) == (2, 2)
    m.check_invariants()

    child.append_token(777)
    assert m.get_num_blocks_to_allocate(child, 21) == 1  # the private copy of the shared partial block
    assert m.allocate_slots(child, 1) == ((),)
    assert m.last_table_rewritten
    assert m.has_pending_copies
    assert m.take_pending_copies() == [(2, 3)]
    assert m.take_pending_copies() == []
    assert m.get_block_ids(child) == ([1, 3],)
    assert m.get_block_ids(parent) == ([1, 2],)
    assert (m.block(1).ref_cnt, m.block(2).ref_cnt, m.block(3).ref_cnt) == (2, 1, 1)

    parent.append_token(5)
    assert m.allocate_slots(parent, 1) == ((),)  # its partial block is private again: no copy
    assert not m.last_table_rewritten and m.take_pending_copies() == []
    m.free(child)
    m.free(parent)
    assert m.num_free_blocks == 15
    m.check_invariants()


# ---- events and reset ----------------------------------------------------------------------------

def test_events_stored_evicted_cleared():
    m = pagedkv.KVCacheManager(num_blocks=8, enable_events=True)  # 7 usable blocks
    a = pagedkv.Request(1, list(range(32)))
    m.allocate_slots(a, 32)
    stored = m.take_events()
    assert [(e.kind, e.block_id, e.token_count, e.medium) for e in stored] == [
        ("stored", 1, 16, "device"), ("stored", 2, 16, "device")]
    m.free(a)  # tail first: the free queue is now 3..7, 2, 1
    b = pagedkv.Request(2, list(range(5000, 5000 + 7 * BS)))
    assert m.allocate_slots(b, 7 * BS) == ((3, 4, 5, 6, 7, 2, 1),)
    events = m.take_events()
    assert [(e.kind, e.block_id, e.reason) for e in events[:2]] == [("removed", 2, "evicted"), ("removed", 1, "evicted")]
    assert events[0].block_hash == stored[1].block_hash
    assert [e.kind for e in events[2:]] == ["stored"] * 7
    assert m.pool_stats.evictions == 2

    result = m.reset_prefix_cache()
    assert not result and result.kept_in_use == 7  # b still holds its blocks
    m.take_events()
    m.free(b)
    result = m.reset_prefix_cache()
    assert result and result.removed == 7
    assert [e.kind for e in m.take_events()] == ["all_cleared"]
    assert m.num_cached_blocks == 0
    m.check_invariants()


def test_eviction_policies_are_selectable():
    assert pagedkv.eviction_policies() == ["lru", "lfu", "s3fifo", "length-aware"]
    for name in pagedkv.eviction_policies():
        m = pagedkv.KVCacheManager(num_blocks=8, eviction_policy=name)
        assert m.eviction_policy == name
        for i in range(3):  # more content than fits: evictions under every policy
            r = pagedkv.Request(i, list(range(i * 1000, i * 1000 + 64)))
            admit(m, r)
            m.free(r)
        m.check_invariants()
    with pytest.raises(pagedkv.ConfigError, match="unknown eviction policy 'mru'"):
        pagedkv.KVCacheManager(num_blocks=8, eviction_policy="mru")


# ---- other KV-cache groups -------------------------------------------------------------------------

def test_sliding_window_releases_blocks_behind_the_window():
    m = pagedkv.KVCacheManager(num_blocks=32, sliding_window=32)
    assert m.groups[0].spec.kind == pagedkv.AttentionKind.SLIDING_WINDOW
    r = pagedkv.Request(1, list(range(200)))
    assert m.allocate_slots(r, 64) == ((1, 2, 3, 4),)
    r.num_computed_tokens = 64
    # Tokens before 64 - 32 + 1 are never attended to again: their blocks (1, 2) became the null
    # block, and, being no retention checkpoint, went to the front of the free queue: the next
    # blocks taken are they (docs/hybrid.md).
    assert m.allocate_slots(r, 64) == ((1, 2, 5, 6),)
    assert m.last_table_rewritten
    assert m.get_block_ids(r) == ([0, 0, 3, 4, 1, 2, 5, 6],)
    assert m.num_free_blocks == 31 - 6
    m.check_invariants()


def test_hybrid_groups_of_two_block_sizes_report_per_group_hits_and_checkpoints():
    # A full group of 4-token blocks and a sliding group (window 6) of 8-token blocks: pages
    # matched by block size (docs/hybrid.md); hits are multiples of 8.
    groups = [pagedkv.KVCacheGroupSpec(pagedkv.KVCacheSpec(kind=pagedkv.AttentionKind.FULL, block_size=4)),
              pagedkv.KVCacheGroupSpec(pagedkv.KVCacheSpec(kind=pagedkv.AttentionKind.SLIDING_WINDOW, block_size=8,
                                                           sliding_window=6))]
    m = pagedkv.KVCacheManager(num_blocks=64, groups=groups, watermark=0, enable_events=True)
    assert (m.block_size, m.group_block_size(0), m.group_block_size(1), m.hit_alignment) == (4, 4, 8, 8)
    with pytest.raises(pagedkv.UsageError, match="out of range"):
        m.group_block_size(2)
    a = pagedkv.Request(1, list(range(30)))
    assert admit(m, a)[0] == 0
    events = m.take_events()
    stored = {(e.group, e.attention_kind, e.sliding_window, e.token_count) for e in events if e.kind == "stored"}
    assert stored == {(0, "full", 0, 4), (1, "sliding_window", 6, 8)}
    m.free(a)
    # The sliding group kept one checkpoint (the window before A's aligned end, 24); its other
    # blocks went to the front of the free queue.
    pool = m.pool_stats
    assert (pool.window_checkpoints_retained, pool.window_blocks_slid_out, pool.window_checkpoints_evicted) == (1, 3, 0)
    b = pagedkv.Request(2, list(range(30)) + [1, 2])
    blocks, hit = m.get_computed_blocks(b)
    assert hit == 24
    assert blocks.group_hit_tokens == [28, 24]
    assert blocks.limiting_group == 1
    assert [len(g) for g in blocks.get_block_ids()] == [6, 3]
    stats = m.prefix_cache_stats
    assert stats.group_hit_tokens == [28, 24]
    assert stats.limited_by_group == [0, 1]
    assert stats.window_search_probes >= 1
    m.check_invariants()


def test_cross_attention_group_allocates_encoder_blocks_once():
    groups = [pagedkv.KVCacheGroupSpec(pagedkv.KVCacheSpec(kind=pagedkv.AttentionKind.FULL), num_layers=2),
              pagedkv.KVCacheGroupSpec(pagedkv.KVCacheSpec(kind=pagedkv.AttentionKind.CROSS_ATTENTION))]
    m = pagedkv.KVCacheManager(num_blocks=32, groups=groups)
    assert m.num_groups == 2
    r = pagedkv.Request(1, list(range(20)), num_encoder_tokens=40)
    new = m.allocate_slots(r, 20)
    assert [len(g) for g in new] == [2, 3]
    r.num_computed_tokens = 20
    r.append_token(1)
    assert m.allocate_slots(r, 1) == ((), ())
    assert [len(g) for g in m.get_block_ids(r)] == [2, 3]
    with pytest.raises(pagedkv.ConfigError, match="disagrees"):
        pagedkv.KVCacheManager(num_blocks=32, groups=groups, block_size=32)
    m.check_invariants()

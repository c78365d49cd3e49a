"""BlockTable's NumPy view aliases the native table; slot mappings come back as int64 arrays."""

import gc

import numpy as np
import pytest

import pagedkv


def test_array_aliases_the_native_table():
    t = pagedkv.BlockTable(max_requests=4, max_blocks_per_request=8)
    a = t.array
    assert a.shape == (4, 8) and a.dtype == np.int32 and not a.flags.owndata
    assert a.ctypes.data == t.array.ctypes.data  # every view is the same memory
    assert not a.any()

    # Writes through the C++ API show in the array taken before them.
    t.append_row(1, [5, 6, 7])
    t.append_row(1, (8,))
    assert a[1, :5].tolist() == [5, 6, 7, 8, 0]
    t.set_entry(1, 0, 42)
    assert a[1, 0] == 42
    t.move_row(1, 3)
    assert a[1].tolist() == [0] * 8 and a[3, :4].tolist() == [42, 6, 7, 8]
    t.swap_rows(0, 3)
    assert a[0, :4].tolist() == [42, 6, 7, 8] and t.num_blocks(0) == 4 and t.num_blocks(3) == 0
    t.set_row(2, np.array([9, 10], dtype=np.int64))
    assert a[2, :3].tolist() == [9, 10, 0]
    row = t.row_view(0)
    assert row.tolist() == [42, 6, 7, 8] and row.ctypes.data == a.ctypes.data
    t.clear_row(0)
    assert not a[0].any()

    # Writes through the array are the table's contents (what a kernel reads).
    a[2, 1] = 77
    assert t.slot_mapping(2, 16, 1, block_size=16).tolist() == [77 * 16]


def test_views_keep_the_table_alive():
    t = pagedkv.BlockTable(max_requests=2, max_blocks_per_request=4)
    t.append_row(0, [3, 4])
    a = t.array
    assert a.base is t
    del t
    gc.collect()
    assert a[0, :2].tolist() == [3, 4]


def test_capacity_and_row_errors():
    t = pagedkv.BlockTable(max_requests=2, max_blocks_per_request=2)
    with pytest.raises(pagedkv.UsageError, match="would hold 3 blocks, more than its capacity of 2"):
        t.append_row(0, [1, 2, 3])
    with pytest.raises(pagedkv.UsageError, match=r"row 2 out of range \[0, 2\)"):
        t.num_blocks(2)
    with pytest.raises(pagedkv.ConfigError, match="max_requests must be positive, got 0"):
        pagedkv.BlockTable(max_requests=0, max_blocks_per_request=2)


def test_slot_mappings():
    t = pagedkv.BlockTable(max_requests=4, max_blocks_per_request=8)
    t.append_row(0, [5, 6, 7])
    t.append_row(1, [2])
    slots = t.slot_mapping(0, 14, 4, block_size=16)
    assert slots.dtype == np.int64 and slots.tolist() == [94, 95, 96, 97]
    with pytest.raises(pagedkv.UsageError, match="positions up to 48 need 4 blocks, the row holds 3"):
        t.slot_mapping(0, 40, 9, block_size=16)
    batch = t.slot_mappings(np.array([0, 1]), np.array([47, 3]), np.array([1, 2]), block_size=16)
    assert batch.tolist() == [7 * 16 + 15, 2 * 16 + 3, 2 * 16 + 4]
    assert pagedkv.compute_slot_mapping(np.array([5, 6], dtype=np.int32), 16, 15, 2).tolist() == [95, 96]
    with pytest.raises(pagedkv.UsageError, match="need 3 blocks, the row has 2"):
        pagedkv.compute_slot_mapping([5, 6], 16, 30, 3)


def test_a_worker_table_follows_the_manager():
    """The loop a GPU engine runs: append what allocate_slots returns; re-read rewritten rows."""
    m = pagedkv.KVCacheManager(num_blocks=32, block_size=16)
    t = pagedkv.BlockTable(max_requests=2, max_blocks_per_request=8)
    parent = pagedkv.Request(1, list(range(20)))
    t.append_row(0, m.allocate_slots(parent, 20)[0])
    parent.num_computed_tokens = 20
    child = pagedkv.Request(2, list(range(20)))
    child.num_computed_tokens = 20
    m.fork(parent, child)
    t.set_row(1, m.get_block_ids(child)[0])
    child.append_token(1)
    new = m.allocate_slots(child, 1)
    if m.last_table_rewritten:
        t.set_row(1, m.get_block_ids(child)[0])
    else:
        t.append_row(1, new[0])
    assert t.array[0, :2].tolist() == [1, 2] and t.array[1, :2].tolist() == [1, 3]
    assert m.take_pending_copies() == [(2, 3)]
    assert t.slot_mapping(1, 20, 1, block_size=16).tolist() == [3 * 16 + 4]

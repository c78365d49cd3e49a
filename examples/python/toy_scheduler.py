#!/usr/bin/env python3
"""A toy inference engine around pagedkv.KVCacheManager (docs/embedding.md), with a fake model.

The calls a real engine makes each step: prefix lookup and allocation at admission, one slot per
running request per step, preemption when the pool is dry, free at the end. Block tables are a
NumPy array (pagedkv.BlockTable.array, no copy); the "KV cache" is one int per slot holding the
token written there, written through the step's slot mapping and read through the block table,
so a wrong table or a wrong prefix hit shows up as a token read back wrong.

examples/cpp/toy_scheduler.cpp is the same loop in C++; both print the same lines.
Run after `pip install .`:  python3 examples/python/toy_scheduler.py
"""

from __future__ import annotations

import collections
import sys
from dataclasses import dataclass

import numpy as np

import pagedkv

BLOCK_SIZE = 16
NUM_BLOCKS = 14  # including the reserved null block 0
MAX_MODEL_LEN = 256
MAX_RUNNING = 4
NUM_REQUESTS = 8
SYSTEM_PROMPT_LEN = 40


@dataclass
class Sequence:
    request: pagedkv.Request
    max_tokens: int
    row: int = -1  # its row in the block table while running


def next_token(tokens: list[int]) -> int:
    """The fake model: the next token follows from the last one and the position."""
    return (tokens[-1] * 31 + len(tokens)) % 1000 + 3000


def main() -> int:
    manager = pagedkv.KVCacheManager(num_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE, max_model_len=MAX_MODEL_LEN)
    table = pagedkv.BlockTable(max_requests=MAX_RUNNING, max_blocks_per_request=MAX_MODEL_LEN // BLOCK_SIZE)
    kv = np.full(NUM_BLOCKS * BLOCK_SIZE, -1, dtype=np.int64)  # token stored in each slot
    print(f"pagedkv {pagedkv.__version__}: {NUM_REQUESTS} requests, {NUM_BLOCKS - 1} blocks of {BLOCK_SIZE} tokens")

    waiting: collections.deque[Sequence] = collections.deque()
    for r in range(NUM_REQUESTS):
        prompt = list(range(1, SYSTEM_PROMPT_LEN + 1)) + [1000 + 100 * r + i for i in range(6 + r)]
        waiting.append(Sequence(pagedkv.Request(r, prompt), max_tokens=20 + 6 * r))
    running: list[Sequence] = []
    free_rows = list(range(MAX_RUNNING - 1, -1, -1))

    step = finished = 0
    while waiting or running:
        step += 1
        scheduled: list[tuple[Sequence, int]] = []

        # Running requests first: a slot for the token each sampled last step. When the pool is
        # dry, the newest running request is preempted (recompute: it will be admitted again).
        preempted = False
        i = 0
        while i < len(running):
            seq = running[i]
            added = manager.allocate_slots(seq.request, 1)
            if added is None:
                victim = running.pop()
                manager.free(victim.request)
                table.clear_row(victim.row)
                free_rows.append(victim.row)
                victim.request.num_computed_tokens = 0
                victim.request.num_preemptions += 1
                waiting.appendleft(victim)
                preempted = True
                print(f"step {step}: preempt request {victim.request.request_id}")
                continue  # retry seq, unless it was the victim (then the loop ends)
            if manager.last_table_rewritten:
                table.set_row(seq.row, manager.get_block_ids(seq.request)[0])
            else:
                table.append_row(seq.row, added[0])
            scheduled.append((seq, 1))
            i += 1

        # Then admissions: the prefix lookup gives the cached blocks; the rest is prefilled now.
        while not preempted and waiting and len(running) < MAX_RUNNING:
            seq = waiting[0]
            blocks, num_cached = manager.get_computed_blocks(seq.request)
            num_new = seq.request.num_tokens - num_cached
            if manager.allocate_slots(seq.request, num_new, num_cached, blocks) is None:
                break  # not enough free blocks: try again next step
            seq.request.num_computed_tokens = num_cached
            seq.row = free_rows.pop()
            table.set_row(seq.row, manager.get_block_ids(seq.request)[0])
            running.append(waiting.popleft())
            scheduled.append((seq, num_new))
            print(f"step {step}: admit request {seq.request.request_id}, "
                  f"{num_cached} of {seq.request.num_tokens} tokens cached")

        # The model step: check what the KV cache holds for each request's computed tokens, write
        # the scheduled tokens' KV through the slot mapping, then sample one token each.
        for seq, n in scheduled:
            req = seq.request
            tokens = req.all_token_ids
            done = req.num_computed_tokens
            row = table.array[seq.row]  # a view of the native table
            positions = np.arange(done)
            read = kv[row[positions // BLOCK_SIZE].astype(np.int64) * BLOCK_SIZE + positions % BLOCK_SIZE]
            if not np.array_equal(read, tokens[:done]):
                print(f"request {req.request_id}: the KV cache reads back wrong tokens")
                return 1
            slots = table.slot_mapping(seq.row, done, n, block_size=BLOCK_SIZE)
            kv[slots] = tokens[done:done + n]
            req.num_computed_tokens = done + n
            req.append_token(next_token(tokens))

        # Finished requests give their blocks back (they stay cached until evicted).
        for seq in [s for s in running if s.request.num_output_tokens >= s.max_tokens]:
            blocks_held = " ".join(map(str, manager.get_block_ids(seq.request)[0]))
            print(f"step {step}: finish request {seq.request.request_id}, "
                  f"{seq.request.num_tokens} tokens, blocks {blocks_held}")
            manager.free(seq.request)
            table.clear_row(seq.row)
            free_rows.append(seq.row)
            running.remove(seq)
            finished += 1

    stats = manager.prefix_cache_stats
    print(f"finished {finished} of {NUM_REQUESTS} requests in {step} steps; prefix cache hits "
          f"{stats.hits + stats.preempted_hits} of {stats.queries + stats.preempted_queries} tokens; "
          f"free blocks {manager.num_free_blocks} of {NUM_BLOCKS - 1}")
    manager.check_invariants()
    return 0 if finished == NUM_REQUESTS and manager.num_free_blocks == NUM_BLOCKS - 1 else 1


if __name__ == "__main__":
    sys.exit(main())

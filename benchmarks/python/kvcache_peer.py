"""kvcache-peer-v1 from Python: the exact workload, and a replay driving pagedkv per operation.

The workload and the replay rules are defined in ../shared/workloads/README.md. The replay is a
Python scheduler loop that calls pagedkv.KVCacheManager the way vLLM v1's scheduler calls its
own KVCacheManager (allocate_slots per running request, preempt the last running request on
failure, admit from the waiting queue with a prefix lookup), so its counters must equal the
README's reference counters to the unit.

Used by benchmarks/python/bench_peer.py (timings) and tests/python/test_peer_replay.py (counters).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import pathlib
import time
from typing import Optional

import numpy as np

import pagedkv

SEED = 0x5EED2025
NUM_REQUESTS = 2000
VOCAB = 32000
BLOCK_SIZE = 16
SYSTEM_PROMPT_LEN = 1024
OUTPUT_LEN = 128
MAX_MODEL_LEN = 4096

_GAMMA = 0x9E3779B97F4A7C15
_MASK64 = (1 << 64) - 1


# ---- generation ---------------------------------------------------------------------------------

def splitmix64_at(k: int, seed: int = SEED) -> int:
    """The k-th output (k = 1, 2, ...) of SplitMix64 seeded with `seed`.

    SplitMix64's state after k calls is seed + k * gamma, so output k needs no earlier outputs:
    that is what lets the token draws below run as one vectorized NumPy pass.
    """
    z = (seed + k * _GAMMA) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def splitmix64_range(first: int, count: int, seed: int = SEED) -> np.ndarray:
    """Outputs first .. first + count - 1 as a uint64 array (NumPy arithmetic wraps mod 2**64)."""
    k = np.arange(first, first + count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + k * np.uint64(_GAMMA)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@dataclasses.dataclass
class PeerWorkload:
    system_prompt: np.ndarray          # int32 [1024]
    prompts: list[np.ndarray]          # int32, request i's full prompt

    @property
    def total_prompt_tokens(self) -> int:
        return sum(len(p) for p in self.prompts)

    def rolling_checksum(self) -> int:
        """h = h * 1000003 + t + 1 (mod 2**64) over every prompt token in order."""
        tokens = np.concatenate(self.prompts).astype(np.uint64)
        n = len(tokens)
        # h = sum((t_i + 1) * M**(n - 1 - i)); powers by a wrapping cumulative product.
        powers = np.empty(n, dtype=np.uint64)
        powers[0] = 1
        with np.errstate(over="ignore"):
            powers[1:] = np.cumprod(np.full(n - 1, 1000003, dtype=np.uint64))
            return int(np.sum((tokens + np.uint64(1)) * powers[::-1], dtype=np.uint64))


def output_token(request: int, j: int) -> int:
    """Output token j (0-based) of request `request`."""
    return (request * 7919 + j * 104729 + 1) % VOCAB


def generate() -> PeerWorkload:
    """kvcache-peer-v1 exactly as the README's draw order defines it."""
    next_k = 1  # index of the next PRNG output
    system_prompt = (splitmix64_range(next_k, SYSTEM_PROMPT_LEN) % np.uint64(VOCAB)).astype(np.int32)
    next_k += SYSTEM_PROMPT_LEN
    prompts = []
    for i in range(NUM_REQUESTS):
        lo, hi = (16, 976) if i % 2 == 0 else (200, 2000)
        length = lo + splitmix64_at(next_k) % (hi - lo + 1)
        next_k += 1
        fresh = (splitmix64_range(next_k, length) % np.uint64(VOCAB)).astype(np.int32)
        next_k += length
        prompts.append(np.concatenate([system_prompt, fresh]) if i % 2 == 0 else fresh)
    return PeerWorkload(system_prompt, prompts)


def check(workload: PeerWorkload) -> None:
    """Asserts every check value the README lists (the workload is exactly kvcache-peer-v1)."""
    raw = [splitmix64_at(k) for k in (1, 2, 3)]
    assert raw == [0xAD6A8062B7F8F969, 0x1DC7108DB4791EDB, 0xB5BB08378BFA9283], [hex(x) for x in raw]
    assert workload.system_prompt[:4].tolist() == [105, 475, 31107, 28478], workload.system_prompt[:4]
    assert workload.prompts[1][:3].tolist() == [4888, 13200, 27], workload.prompts[1][:3]
    assert workload.prompts[0][SYSTEM_PROMPT_LEN:SYSTEM_PROMPT_LEN + 2].tolist() == [3424, 9347]
    assert [len(p) for p in workload.prompts[:5]] == [1729, 1225, 1374, 1121, 1887]
    assert workload.total_prompt_tokens == 2_608_990, workload.total_prompt_tokens
    assert workload.rolling_checksum() == 0x95FF3B81F259D8A1, hex(workload.rolling_checksum())


def shared_dir() -> pathlib.Path:
    """PAGEDKV_SHARED_DIR, or ../shared next to the repository."""
    env = os.environ.get("PAGEDKV_SHARED_DIR")
    if env:
        return pathlib.Path(env)
    return pathlib.Path(__file__).resolve().parents[2].parent / "shared"


# ---- replay ---------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    num_blocks: int           # including the reserved null block 0
    max_num_seqs: int
    max_num_batched_tokens: int


SCENARIOS = {
    "A": Scenario("A", num_blocks=4096, max_num_seqs=64, max_num_batched_tokens=2048),
    "B": Scenario("B", num_blocks=2048, max_num_seqs=128, max_num_batched_tokens=2048),
}


@dataclasses.dataclass
class Counters:
    steps: int = 0
    preemptions: int = 0
    finished: int = 0
    admissions_ok: int = 0
    admissions_failed: int = 0
    decode_calls: int = 0
    prefill_chunk_calls: int = 0
    evictions: int = 0
    first_admission_hits: int = 0
    first_admission_queries: int = 0
    lookup_hits: int = 0       # vLLM's prefix-cache stats: lookups by requests never preempted
    lookup_queries: int = 0
    peak_running: int = 0
    free_blocks_at_end: int = 0


REFERENCE_COUNTERS_A = Counters(
    steps=4113, preemptions=4, finished=2000, admissions_ok=2004, admissions_failed=80,
    decode_calls=254_000, prefill_chunk_calls=435, evictions=110_313,
    first_admission_hits=1_022_976, first_admission_queries=2_608_990,
    lookup_hits=1_028_096, lookup_queries=2_626_982, peak_running=64, free_blocks_at_end=4095)


class Timings:
    """Wall-clock nanoseconds of every timed operation, per category."""

    CATEGORIES = ("admit", "decode", "prefill_chunk", "free", "hash")

    def __init__(self):
        self.samples: dict[str, list[int]] = {c: [] for c in self.CATEGORIES}

    def ops(self, category: str) -> int:
        return len(self.samples[category])

    def mean_us(self, category: str) -> float:
        s = self.samples[category]
        return sum(s) / len(s) / 1e3 if s else float("nan")

    def median_us(self, category: str) -> float:
        s = sorted(self.samples[category])
        return s[len(s) // 2] / 1e3 if s else float("nan")


class _Live:
    """A request in the replay: pagedkv's Request plus the driver's own bookkeeping."""
    __slots__ = ("req", "index", "num_outputs", "admitted")

    def __init__(self, req: pagedkv.Request, index: int):
        self.req = req
        self.index = index
        self.num_outputs = 0
        self.admitted = False


def replay(workload: PeerWorkload, scenario: Scenario = SCENARIOS["A"], *, hash_algorithm: str = "xxh3_128",
           timings: Optional[Timings] = None, check_invariants_every: int = 0) -> Counters:
    """Replays the workload under the README's rules; returns the counters.

    With `timings`, each manager call is bracketed by perf_counter_ns() and added to its
    category; hashing at request creation is timed there too. check_invariants_every=N runs the
    manager's full checker every N steps (slow; for tests).
    """
    manager = pagedkv.KVCacheManager(num_blocks=scenario.num_blocks, block_size=BLOCK_SIZE,
                                     max_model_len=MAX_MODEL_LEN, enable_caching=True,
                                     hash_algorithm=hash_algorithm)
    now = time.perf_counter_ns
    timed = timings is not None
    if timed:
        hash_samples, admit_samples, free_samples = (timings.samples[k] for k in ("hash", "admit", "free"))
        decode_samples, chunk_samples = timings.samples["decode"], timings.samples["prefill_chunk"]
    c = Counters()

    # vLLM hashes a request's full blocks when the request is created.
    waiting: collections.deque[_Live] = collections.deque()
    for i, prompt in enumerate(workload.prompts):
        req = pagedkv.Request(i, prompt)
        if timed:
            t0 = now()
            manager.hash_request(req)
            hash_samples.append(now() - t0)
        else:
            manager.hash_request(req)
        waiting.append(_Live(req, i))

    allocate_slots = manager.allocate_slots
    free = manager.free
    running: list[_Live] = []
    budget_per_step = scenario.max_num_batched_tokens
    while waiting or running:
        c.steps += 1
        budget = budget_per_step
        scheduled: list[tuple[_Live, int]] = []
        preempted = False

        # 1. Running requests, in order; on failure preempt the last running request and retry.
        i = 0
        while i < len(running) and budget > 0:
            live = running[i]
            req = live.req
            remaining = req.num_tokens - req.num_computed_tokens
            n = remaining if remaining < budget else budget
            is_decode = live.num_outputs > 0 and remaining == 1
            while True:
                if timed:
                    t0 = now()
                    new_blocks = allocate_slots(req, n)
                    (decode_samples if is_decode else chunk_samples).append(now() - t0)
                else:
                    new_blocks = allocate_slots(req, n)
                if is_decode:
                    c.decode_calls += 1
                else:
                    c.prefill_chunk_calls += 1
                if new_blocks is not None:
                    break
                victim = running.pop()
                if timed:
                    t0 = now()
                    free(victim.req)
                    free_samples.append(now() - t0)
                else:
                    free(victim.req)
                victim.req.num_computed_tokens = 0
                victim.req.num_preemptions += 1
                waiting.appendleft(victim)
                c.preemptions += 1
                preempted = True
                if victim is live:
                    break
            if new_blocks is None:
                break
            scheduled.append((live, n))
            budget -= n
            i += 1

        # 2. Admissions, only in a step without preemptions.
        if not preempted:
            while waiting and budget > 0 and len(running) < scenario.max_num_seqs:
                live = waiting[0]
                req = live.req
                t0 = now() if timed else 0
                computed_blocks, hit = manager.get_computed_blocks(req)
                n = min(req.num_tokens - hit, budget)
                # The whole current sequence must fit, not only this step's chunk.
                admitted = (manager.get_num_blocks_to_allocate(req, req.num_tokens, computed_blocks)
                            <= manager.num_free_blocks
                            and allocate_slots(req, n, hit, computed_blocks) is not None)
                if timed and admitted:
                    admit_samples.append(now() - t0)
                if not admitted:
                    c.admissions_failed += 1
                    break
                c.admissions_ok += 1
                if not live.admitted:
                    live.admitted = True
                    c.first_admission_hits += hit
                    c.first_admission_queries += req.num_tokens
                waiting.popleft()
                req.num_computed_tokens = hit
                running.append(live)
                scheduled.append((live, n))
                budget -= n
            if len(running) > c.peak_running:
                c.peak_running = len(running)

        # 3. Advance every scheduled request; a finished one (its 128th output) leaves.
        any_finished = False
        for live, n in scheduled:
            req = live.req
            req.num_computed_tokens += n
            if req.num_computed_tokens == req.num_tokens:
                req.append_token(output_token(live.index, live.num_outputs))
                live.num_outputs += 1
                if live.num_outputs == OUTPUT_LEN:
                    if timed:
                        t0 = now()
                        free(req)
                        free_samples.append(now() - t0)
                    else:
                        free(req)
                    live.num_outputs = -1  # marks it for removal below
                    any_finished = True
                    c.finished += 1
        if any_finished:
            running = [live for live in running if live.num_outputs >= 0]

        if check_invariants_every and c.steps % check_invariants_every == 0:
            manager.check_invariants()

    manager.check_invariants()
    c.evictions = manager.pool_stats.evictions
    stats = manager.prefix_cache_stats
    c.lookup_hits = stats.hits
    c.lookup_queries = stats.queries
    c.free_blocks_at_end = manager.num_free_blocks
    return c

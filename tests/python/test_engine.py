"""The engine through vLLM's offline API: LLM.generate reproduces llama2.c's golden outputs."""

import threading
import time

import pytest

import pagedkv

# (golden file stem, prompt, run's -n): -n counts forward passes with the prompt (BOS included),
# so the engine generates n - len(prompt ids) + 1 tokens; run stops on BOS, the LLM's default EOS.
GOLDENS = [
    ("once_upon_a_time.n200", "Once upon a time", 200),
    ("no_prompt.n256", "", 256),
    ("tom_and_lily.n256", "Tom and Lily went to the beach", 256),
]


@pytest.fixture(scope="module")
def models(request):
    from conftest import shared_dir

    path = shared_dir() / "models"
    if not (path / "stories260K.bin").exists() or not (path / "tok512.bin").exists():
        pytest.skip(f"{path} lacks stories260K.bin / tok512.bin (set PAGEDKV_SHARED_DIR)")
    return path


@pytest.fixture(scope="module")
def llm(models):
    # One kernel thread: on a shared 2-core machine OpenMP barriers cost a time slice each (the
    # multi-threaded kernels have their own tests).
    pagedkv.set_num_threads(1)
    return pagedkv.LLM(model=str(models / "stories260K.bin"), tokenizer=str(models / "tok512.bin"),
                       check_invariants=True)


def greedy(llm, prompt, steps):
    n_prompt = len(llm.get_tokenizer().encode(prompt))
    return pagedkv.SamplingParams(temperature=0.0, max_tokens=steps - n_prompt + 1)


def test_goldens_through_generate(llm, models):
    prompts = [prompt for _, prompt, _ in GOLDENS]
    params = [greedy(llm, prompt, steps) for _, prompt, steps in GOLDENS]
    outputs = llm.generate(prompts, params)  # one batch: each must come out as it does alone
    tok = llm.get_tokenizer()
    for (stem, prompt, _), out in zip(GOLDENS, outputs):
        golden_text = (models / "golden" / f"{stem}.txt").read_text()
        golden_ids = [int(t) for t in (models / "golden" / f"{stem}.ids").read_text().split()]
        completion = out.outputs[0]
        assert out.finished and out.prompt == prompt and completion.finish_reason == "length"
        assert out.prompt_token_ids + completion.token_ids == golden_ids, stem
        assert tok.render(golden_ids) + "\n" == golden_text
        # The completion text is what run prints after the prompt.
        assert tok.render(out.prompt_token_ids) + completion.text + "\n" == golden_text, stem
    llm.check_invariants()


def test_stream_yields_growing_outputs_that_end_in_the_result(llm):
    params = pagedkv.SamplingParams(temperature=0.0, max_tokens=12)
    final = llm.generate("Once upon a time", params)[0]
    seen = []
    for out in llm.stream(["Once upon a time"], params):
        seen.append(out)
    assert [len(o.outputs[0].token_ids) for o in seen] == list(range(1, 13))
    assert [o.finished for o in seen] == [False] * 11 + [True]
    assert seen[-1].outputs[0].token_ids == final.outputs[0].token_ids
    assert seen[-1].outputs[0].text == final.outputs[0].text
    for a, b in zip(seen, seen[1:]):
        assert b.outputs[0].text.startswith(a.outputs[0].text)


def test_prefix_cache_and_metrics(llm):
    prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside"
    before = llm.prefix_cache_stats.hits
    first, second = (llm.generate(prompt, pagedkv.SamplingParams(temperature=0.0, max_tokens=4))[0] for _ in range(2))
    assert second.num_cached_tokens >= 16 and second.num_cached_tokens % 16 == 0
    assert llm.prefix_cache_stats.hits - before >= second.num_cached_tokens
    assert first.outputs[0].token_ids == second.outputs[0].token_ids
    assert second.metrics.ttft_ms >= 0 and second.metrics.latency_ms >= second.metrics.ttft_ms
    stats = llm.stats
    assert stats.steps > 0 and stats.output_tokens > 0 and stats.forward_seconds > 0
    assert 0.0 <= llm.kv_cache_usage <= 1.0


def test_parallel_samples_and_the_step_loop(llm):
    params = pagedkv.SamplingParams(n=3, temperature=1.0, top_p=0.9, seed=7, max_tokens=8)
    out = llm.generate("Tom and Lily", params)[0]
    assert [c.index for c in out.outputs] == [0, 1, 2]
    assert all(c.finish_reason in ("length", "stop") for c in out.outputs)

    request_id = llm.add_request({"prompt_token_ids": [1, 403, 407]}, pagedkv.SamplingParams(max_tokens=3, seed=1))
    done = []
    while llm.has_unfinished_requests():
        done += [o for o in llm.step() if o.finished]
    assert [o.request_id for o in done] == [request_id]
    assert done[0].prompt is None and len(done[0].outputs[0].token_ids) <= 3


def test_beam_search(llm):
    """LLM.beam_search: width 1 is greedy decoding (without a score); wider searches return `width` distinct
    hypotheses best first with their scores, and every beam's blocks come back."""
    prompt = "Once upon a time"
    greedy_out = llm.generate(prompt, pagedkv.SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True))[0]
    one = llm.beam_search(prompt, beam_width=1, max_tokens=10, ignore_eos=True)[0]
    assert one.finished and len(one.outputs) == 1
    assert one.outputs[0].token_ids == greedy_out.outputs[0].token_ids
    assert one.outputs[0].cumulative_logprob is None  # width 1 runs as greedy decoding: no score

    outs = llm.beam_search([prompt, {"prompt_token_ids": [1, 403, 407]}], beam_width=4, max_tokens=10, ignore_eos=True)
    assert len(outs) == 2
    for out in outs:
        hyps = out.outputs
        assert out.finished and [h.index for h in hyps] == [0, 1, 2, 3]
        assert all(len(h.token_ids) == 10 and h.finish_reason == "length" for h in hyps)
        assert len({tuple(h.token_ids) for h in hyps}) == 4, "hypotheses are distinct sequences"
        scores = [h.cumulative_logprob for h in hyps]
        assert all(s < 0 for s in scores) and scores == sorted(scores, reverse=True)
    assert outs[0].outputs[0].text  # the tokenizer renders hypotheses like samples
    assert not llm.has_unfinished_requests()
    llm.check_invariants()
    with pytest.raises(Exception, match="beam_width"):
        llm.beam_search(prompt, beam_width=0)


def test_forward_passes_release_the_gil(llm):
    params = pagedkv.SamplingParams(temperature=0.0, max_tokens=60)
    worker = threading.Thread(target=llm.generate, args=(["Once upon a time"] * 4, params))
    spins = 0
    worker.start()
    while worker.is_alive():
        spins += 1
    worker.join()
    assert spins > 1000  # the main thread ran while generate() was stepping


def test_engine_errors(models):
    with pytest.raises(pagedkv.UsageError, match="needs a tokenizer"):
        pagedkv.LLM(model=str(models / "stories260K.bin")).generate("hello")
    with pytest.raises(pagedkv.ConfigError, match="kv_cache_dtype must be fp32, fp16, bf16, int8 or fp8, got 'int4'"):
        pagedkv.LLM(model=str(models / "stories260K.bin"), kv_cache_dtype="int4")
    with pytest.raises(pagedkv.Error):
        pagedkv.LLM(model=str(models / "missing.bin"))
    with pytest.raises(pagedkv.ConfigError, match="max_tokens must be at least 1"):
        pagedkv.SamplingParams(max_tokens=0)


def test_disk_tier_survives_a_restart(models, tmp_path):
    """Transfers through Python: prefixes written down to the disk tier by one LLM are found there
    by the next one on the same directory (a warm restart)."""
    prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."
    params = pagedkv.SamplingParams(temperature=0.0, max_tokens=4)
    kwargs = dict(model=str(models / "stories260K.bin"), tokenizer=str(models / "tok512.bin"),
                  disk_cache_dir=str(tmp_path), disk_cache_memory="4MiB")
    first = pagedkv.LLM(**kwargs)
    cold = first.generate(prompt, params)[0]
    first.flush_to_disk()
    assert first.tier_stats["disk"]["stored_blocks"] > 0
    del first

    second = pagedkv.LLM(**kwargs)
    warm = second.generate(prompt, params)[0]
    assert cold.num_cached_tokens == 0
    assert warm.num_cached_tokens_by_tier["disk"] > 0
    assert warm.num_cached_tokens == sum(warm.num_cached_tokens_by_tier.values())
    assert warm.outputs[0].token_ids == cold.outputs[0].token_ids
    assert second.tier_stats["disk"]["rebuilt_blocks"] > 0


def test_goldens_under_swap_with_lazy_copies(models):
    """A pool too small for the three goldens at once: they swap each other out, with swap-out
    copies deferred until the device cache drops a block, and still match llama2.c."""
    llm = pagedkv.LLM(model=str(models / "stories260K.bin"), tokenizer=str(models / "tok512.bin"),
                      num_blocks=24, swap_space="1MiB", preemption_mode="swap", lazy_swap_copies=True,
                      check_invariants=True)
    prompts = [prompt for _, prompt, _ in GOLDENS]
    outputs = llm.generate(prompts, [greedy(llm, prompt, steps) for _, prompt, steps in GOLDENS])
    for (stem, _, _), out in zip(GOLDENS, outputs):
        golden_ids = [int(t) for t in (models / "golden" / f"{stem}.ids").read_text().split()]
        assert out.prompt_token_ids + out.outputs[0].token_ids == golden_ids, stem
    assert sum(out.metrics.num_preemptions for out in outputs) > 0
    llm.check_invariants()


def test_remote_tier_shared_by_two_engines(models):
    """Two LLMs on one Redis of the test's own: a prompt computed by the first is a remote hit on
    the second, with the same greedy output; a bad URL is a ConfigError."""
    from redis_support import RedisServer, redis_available

    if not redis_available():
        pytest.skip("redis-server is not installed (scripts/setup.sh installs it)")
    with pytest.raises(pagedkv.ConfigError, match="redis://"):
        pagedkv.LLM(model=str(models / "stories260K.bin"), remote_cache="http://127.0.0.1:1")
    with pytest.raises(pagedkv.ConfigError, match="timeout must be at least 1 ms"):
        pagedkv.LLM(model=str(models / "stories260K.bin"), remote_cache="redis://127.0.0.1:1", remote_timeout_ms=0)
    prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."
    params = pagedkv.SamplingParams(temperature=0.0, max_tokens=4)
    with RedisServer() as redis:
        kwargs = dict(model=str(models / "stories260K.bin"), tokenizer=str(models / "tok512.bin"),
                      remote_cache=redis.url, remote_cache_prefix="pytest", check_invariants=True)
        first = pagedkv.LLM(**kwargs)
        cold = first.generate(prompt, params)[0]
        assert cold.num_cached_tokens == 0
        # Write-through stores are asynchronous: wait (bounded) until the first engine's blocks are in.
        deadline = time.monotonic() + 10
        while first.tier_stats["remote"]["stored_blocks"] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert first.tier_stats["remote"]["stored_blocks"] > 0
        assert int(redis.command("DBSIZE").lstrip(":")) > 0

        second = pagedkv.LLM(**kwargs)
        warm = second.generate(prompt, params)[0]
        assert warm.num_cached_tokens_by_tier["remote"] > 0
        assert warm.num_cached_tokens == sum(warm.num_cached_tokens_by_tier.values())
        assert warm.outputs[0].token_ids == cold.outputs[0].token_ids
        assert second.tier_stats["remote"]["hits"] > 0


# ---- GGUF models ---------------------------------------------------------------------------------

def test_gguf_model_gives_llama_cpp_greedy_tokens_and_text(models):
    """LLM(model=FILE.gguf): the file's own tokenizer, llama.cpp's greedy ids, the goldens' text."""
    import json

    gguf = models / "gguf"
    ref_file = gguf / "ref" / "tiny-llama.f32.p5_once_upon_a_time.json"
    if not ref_file.exists():
        pytest.skip(f"{ref_file} is absent")
    ref = json.loads(ref_file.read_text())
    pagedkv.set_num_threads(1)
    llm = pagedkv.LLM(model=str(gguf / "tiny-llama.f32.gguf"), check_invariants=True)
    params = pagedkv.SamplingParams(temperature=0.0, max_tokens=len(ref["generated_ids"]), ignore_eos=True)
    out = llm.generate({"prompt_token_ids": ref["prompt_ids"]}, params)[0].outputs[0]
    assert out.token_ids == ref["generated_ids"]
    # A text prompt goes through the file's tokenizer (tok512: BOS " Once" " upon" " a" " time").
    text_out = llm.generate("Once upon a time", params)[0]
    assert text_out.prompt_token_ids == ref["prompt_ids"]
    assert text_out.outputs[0].token_ids == ref["generated_ids"]
    assert isinstance(text_out.outputs[0].text, str) and text_out.outputs[0].text

    # stories260Ktok512.gguf with its own tokenizer gives the golden story; eos_token_id still
    # overrides the file's end of generation.
    stories = pagedkv.LLM(model=str(models / "stories260Ktok512.gguf"), max_model_len=256)
    golden = [int(t) for t in (models / "golden" / "once_upon_a_time.n200.ids").read_text().split()]
    got = stories.generate("Once upon a time", pagedkv.SamplingParams(temperature=0.0, max_tokens=64))[0]
    assert got.prompt_token_ids + got.outputs[0].token_ids == golden[:5 + 64]
    golden_text = (models / "golden" / "once_upon_a_time.n200.txt").read_text()
    assert golden_text.startswith("Once upon a time" + got.outputs[0].text)
    stop_at = golden[5 + 10]
    first = golden[5:].index(stop_at)
    stopped = pagedkv.LLM(model=str(models / "stories260Ktok512.gguf"), max_model_len=256, eos_token_id=stop_at)
    out = stopped.generate("Once upon a time", pagedkv.SamplingParams(temperature=0.0, max_tokens=64))[0].outputs[0]
    assert out.token_ids == golden[5:5 + first] and out.finish_reason == "stop"

"""pagedkv serve: vLLM's output switches (include_stop_str_in_output, skip_special_tokens,
return_token_ids, return_tokens_as_token_ids) and the serving hygiene flags (API keys, CORS, SSE
pings, request deadlines), end to end on 127.0.0.1. Every expectation is computed here from the
same server's plain answers (/tokenize, /detokenize, a greedy run without the switch)."""

import json
import threading

import pytest
import requests

from conftest import shared_dir
from serve_support import Server, gguf_with_metadata_u32, pagedkv_bin, sse_events, wait_until
from test_serve import models_dir

pytestmark = pytest.mark.skipif(not pagedkv_bin().exists(), reason=f"{pagedkv_bin()} is not built")


@pytest.fixture(scope="module")
def server():
    models_dir()
    with Server() as s:
        yield s


@pytest.fixture(scope="module")
def gguf_server():
    """stories260K's GGUF file: its vocabulary has control tokens (<s>, </s>)."""
    model = models_dir() / "stories260Ktok512.gguf"
    with Server("--model", model, "--context-length", "256") as s:
        yield s


def complete(server, path="/v1/completions", **body):
    r = server.post(path, body)
    assert r.status_code == 200, r.text
    return r.json()


def stream(server, path="/v1/completions", **body):
    body["stream"] = True
    with requests.post(server.url(path), json=body, stream=True, timeout=120) as r:
        assert r.status_code == 200, r.text
        events = list(sse_events(r))
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def streamed_text(chunks, chat=False):
    out = ""
    for c in chunks:
        for choice in c["choices"]:
            out += choice["delta"].get("content") or "" if chat else choice["text"]
    return out


CHAT = [{"role": "user", "content": "Tell me a story"}]

# ---- include_stop_str_in_output -----------------------------------------------------------------


def test_include_stop_str_in_output(server):
    base = dict(prompt="Once upon a time", max_tokens=40, temperature=0)
    reference = complete(server, **base)["choices"][0]["text"]
    # A stop string from the middle of the greedy text (a whole word, found once before it).
    words = reference.split()
    stop = next(w for w in words[3:] if len(w) >= 3)
    at = reference.index(stop)
    for include, expected in ((True, reference[:at + len(stop)]), (False, reference[:at])):
        body = dict(base, stop=[stop], include_stop_str_in_output=include)
        whole = complete(server, **body)["choices"][0]
        assert whole["text"] == expected and whole["finish_reason"] == "stop", (include, stop)
        assert streamed_text(stream(server, **body)) == expected, include


# ---- skip_special_tokens ------------------------------------------------------------------------


def test_skip_special_tokens_false_keeps_control_tokens(gguf_server):
    s = gguf_server
    eos, eos_text = 2, "</s>"  # tok512's EOS (tokenizer.ggml.eos_token_id), a control token
    assert s.post("/detokenize", {"tokens": [5, eos]}).json()["prompt"] == s.post(
        "/detokenize", {"tokens": [5]}).json()["prompt"], "decoding drops it"
    # The logit bias makes EOS the only choice; ignore_eos lets it repeat.
    body = dict(prompt="Once upon a time", max_tokens=3, temperature=0, ignore_eos=True, logit_bias={str(eos): 100})
    kept = complete(s, skip_special_tokens=False, **body)["choices"][0]["text"]
    assert kept == eos_text * 3
    for spaces in (True, False):  # joined with nothing between either way (vLLM's fast-tokenizer path)
        assert complete(s, skip_special_tokens=False, spaces_between_special_tokens=spaces, **body)["choices"][0][
            "text"] == kept
    assert complete(s, **body)["choices"][0]["text"] == "", "the default drops control tokens' text"
    assert streamed_text(stream(s, skip_special_tokens=False, **body)) == eos_text * 3
    # Echo shows the prompt's BOS too.
    echoed = complete(s, skip_special_tokens=False, echo=True, **dict(body, max_tokens=1))["choices"][0]["text"]
    assert echoed == "<s>Once upon a time" + eos_text


# ---- return_token_ids, return_tokens_as_token_ids ----------------------------------------------


def test_return_token_ids_completions_whole_and_streamed(server):
    prompt = "Once upon a time"
    prompt_ids = server.post("/tokenize", {"prompt": prompt}).json()["tokens"]
    body = dict(prompt=prompt, max_tokens=12, temperature=0, n=2, return_token_ids=True)
    whole = complete(server, **body)
    for choice in whole["choices"]:
        assert choice["prompt_token_ids"] == prompt_ids
        assert len(choice["token_ids"]) == whole["usage"]["completion_tokens"] // 2
        assert server.post("/detokenize", {"tokens": prompt_ids[-1:] + choice["token_ids"]}).json()["prompt"].endswith(
            choice["text"])
    chunks = stream(server, **body)
    for index in range(2):
        mine = [c["choices"][0] for c in chunks if c["choices"] and c["choices"][0]["index"] == index]
        assert sum((c["token_ids"] for c in mine), []) == whole["choices"][index]["token_ids"]
        assert [c["prompt_token_ids"] for c in mine if "prompt_token_ids" in c] == [prompt_ids]
    plain = complete(server, prompt=prompt, max_tokens=2)["choices"][0]
    assert "token_ids" not in plain and "prompt_token_ids" not in plain


def test_return_token_ids_chat_and_tokens_as_ids(server):
    prompt_ids = server.post("/tokenize", {"messages": CHAT}).json()["tokens"]
    body = dict(messages=CHAT, max_tokens=8, temperature=0, return_token_ids=True, logprobs=True, top_logprobs=2,
                return_tokens_as_token_ids=True)
    whole = complete(server, "/v1/chat/completions", **body)
    assert whole["prompt_token_ids"] == prompt_ids
    ids = whole["choices"][0]["token_ids"]
    assert len(ids) == whole["usage"]["completion_tokens"]
    content = whole["choices"][0]["logprobs"]["content"]
    assert [c["token"] for c in content] == [f"token_id:{t}" for t in ids]
    assert all(alt["token"].startswith("token_id:") for c in content for alt in c["top_logprobs"])
    chunks = stream(server, "/v1/chat/completions", **body)
    assert [c["prompt_token_ids"] for c in chunks if "prompt_token_ids" in c] == [prompt_ids]
    assert sum((c["choices"][0].get("token_ids", []) for c in chunks if c["choices"]), []) == ids
    # Completions' logprobs too.
    lp = complete(server, prompt="Once upon a time", max_tokens=4, temperature=0, logprobs=1, return_token_ids=True,
                  return_tokens_as_token_ids=True)["choices"][0]
    assert lp["logprobs"]["tokens"] == [f"token_id:{t}" for t in lp["token_ids"]]


# ---- prompt_logprobs ----------------------------------------------------------------------------


def check_prompt_logprobs_shape(entries, prompt_ids, k):
    assert len(entries) == len(prompt_ids) and entries[0] is None
    for i, position in enumerate(entries[1:], start=1):
        assert str(prompt_ids[i]) in position, i  # the prompt's token, whatever its rank
        assert sorted(v["rank"] for v in position.values())[:k] == list(range(1, k + 1)), (i, position)


def test_prompt_logprobs_match_the_engine_run_token_by_token(server):
    prompt = "Once upon a time there was a little dog"
    ids = server.post("/tokenize", {"prompt": prompt}).json()["tokens"]
    text = lambda tokens: server.post("/detokenize", {"tokens": tokens}).json()["prompt"]
    r = complete(server, prompt=prompt, max_tokens=1, temperature=0, prompt_logprobs=3)
    entries = r["choices"][0]["prompt_logprobs"]
    check_prompt_logprobs_shape(entries, ids, 3)
    for i in range(1, len(ids)):
        # The engine's own next-token distribution after ids[:i], as a generation's logprobs.
        ref = complete(server, prompt=ids[:i], max_tokens=1, temperature=0, logprobs=3,
                       return_tokens_as_token_ids=True)["choices"][0]["logprobs"]["top_logprobs"][0]
        top = {f"token_id:{t}": v["logprob"] for t, v in entries[i].items() if v["rank"] <= 3}
        assert top.keys() == ref.keys(), i
        for t in top:
            assert top[t] == pytest.approx(ref[t], abs=1e-4), (i, t)
        mine = entries[i][str(ids[i])]
        assert mine["decoded_token"] == text(ids[:i + 1])[len(text(ids[:i])):], i  # the piece it adds to the text
        if mine["rank"] <= 3:
            assert mine["logprob"] == pytest.approx(ref[f"token_id:{ids[i]}"], abs=1e-4)
    # Streamed: the same list, once, with the choice's first chunk.
    chunks = stream(server, prompt=prompt, max_tokens=3, temperature=0, prompt_logprobs=3)
    carried = [c["choices"][0]["prompt_logprobs"] for c in chunks if "prompt_logprobs" in c["choices"][0]]
    assert carried == [entries]


def test_prompt_logprobs_match_llama_cpp_logits(tmp_path):
    """llama.cpp's full logits of its first two greedy steps are the next-token distributions after
    the prompt and after its first token: the prompt extended by two generated tokens has them as
    its last two prompt logprobs."""
    import math
    gguf = shared_dir() / "models" / "gguf"
    ref_file = gguf / "ref" / "tiny-llama.f32.p5_once_upon_a_time.json"
    if not ref_file.exists():
        pytest.skip(f"{ref_file} is absent (set PAGEDKV_SHARED_DIR)")
    ref = json.loads(ref_file.read_text())
    prompt = ref["prompt_ids"] + ref["generated_ids"][:2]
    with Server("--model", gguf / "tiny-llama.f32.gguf") as s:
        entries = complete(s, prompt=prompt, max_tokens=1, temperature=0, prompt_logprobs=5)["choices"][0]["prompt_logprobs"]
    check_prompt_logprobs_shape(entries, prompt, 5)
    for step in range(2):
        logits = ref["full_logits"][step]
        top = max(logits)
        log_z = top + math.log(sum(math.exp(x - top) for x in logits))
        position = entries[len(ref["prompt_ids"]) + step]
        token = ref["generated_ids"][step]
        assert position[str(token)]["rank"] == 1, "llama.cpp's greedy token is the most likely"
        for t, v in position.items():
            assert v["logprob"] == pytest.approx(logits[int(t)] - log_z, abs=1e-3), (step, t)
            assert v["rank"] == 1 + sum(x > logits[int(t)] for x in logits), (step, t)


def test_prompt_logprobs_compute_the_whole_prompt(server):
    prompt = " ".join(["The little bird sang a happy song in the tall green tree"] * 4)
    ids = server.post("/tokenize", {"prompt": prompt}).json()["tokens"]
    assert len(ids) > 40
    complete(server, prompt=prompt, max_tokens=1)
    warm = complete(server, prompt=prompt, max_tokens=1)
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] >= 32, "the prefix cache holds it"
    r = complete(server, prompt=prompt, max_tokens=1, prompt_logprobs=0)
    assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    entries = r["choices"][0]["prompt_logprobs"]
    assert len(entries) == len(ids) and all(e is not None and str(t) in e for e, t in zip(entries[1:], ids[1:]))
    for bad in (dict(prompt_logprobs=21), dict(prompt_logprobs=-1), dict(prompt_logprobs=1, use_beam_search=True, n=2)):
        b = server.post("/v1/completions", dict(prompt="Once", **bad))
        assert b.status_code == 400 and b.json()["error"]["param"] in ("prompt_logprobs", "use_beam_search"), bad


def test_prompt_logprobs_chat(server):
    ids = server.post("/tokenize", {"messages": CHAT}).json()["tokens"]
    r = complete(server, "/v1/chat/completions", messages=CHAT, max_tokens=2, prompt_logprobs=1)
    check_prompt_logprobs_shape(r["prompt_logprobs"], ids, 1)


# ---- suffix: fill-in-the-middle -----------------------------------------------------------------


def test_suffix_without_fill_in_middle_tokens_is_a_400(server):
    r = server.post("/v1/completions", {"prompt": "Once upon", "suffix": " and they lived happily."})
    assert r.status_code == 400 and r.json()["error"]["param"] == "suffix", r.text
    assert r.json()["error"]["code"] == "unsupported_field" and "fill-in-the-middle" in r.json()["error"]["message"]
    assert complete(server, prompt="Once", suffix="", max_tokens=1)["usage"]["completion_tokens"] == 1


def test_suffix_builds_the_fill_in_middle_prompt(tmp_path):
    """No shared model has fill-in-the-middle tokens: tiny-llama gets three through GGUF's
    tokenizer.ggml.fim_*_token_id keys (llama.cpp's), and the prompt the server builds is read back
    with return_token_ids."""
    gguf = shared_dir() / "models" / "gguf" / "tiny-llama.f32.gguf"
    if not gguf.exists():
        pytest.skip(f"{gguf} is absent (set PAGEDKV_SHARED_DIR)")
    pre, suf, mid = 500, 501, 502
    src = gguf
    for i, (key, value) in enumerate((("fim_pre", pre), ("fim_suf", suf), ("fim_mid", mid))):
        dst = tmp_path / f"fim{i}.gguf"
        gguf_with_metadata_u32(src, dst, f"tokenizer.ggml.{key}_token_id", value)
        src = dst
    with Server("--model", src) as s:
        prefix, suffix = "Once upon a time", " and they lived happily."
        bos = s.post("/tokenize", {"prompt": ""}).json()["tokens"]
        plain = lambda text: s.post("/tokenize", {"prompt": text, "add_special_tokens": False}).json()["tokens"]
        expected = bos + [pre] + plain(prefix) + [suf] + plain(suffix) + [mid]
        r = complete(s, prompt=prefix, suffix=suffix, max_tokens=4, temperature=0, return_token_ids=True)
        assert r["choices"][0]["prompt_token_ids"] == expected
        assert r["usage"]["prompt_tokens"] == len(expected)
        # The same as sending that prompt's ids.
        by_ids = complete(s, prompt=expected, max_tokens=4, temperature=0)
        assert by_ids["choices"][0]["text"] == r["choices"][0]["text"]
        bad = s.post("/v1/completions", {"prompt": expected, "suffix": suffix})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "suffix"


# ---- request deadlines --------------------------------------------------------------------------

LONG = dict(prompt="Once upon a time", max_tokens=400, ignore_eos=True)


def test_request_timeout_field_aborts_and_the_server_goes_on(server):
    r = server.post("/v1/completions", dict(LONG, timeout=0.001))
    assert r.status_code == 408, r.text
    assert r.json()["error"]["code"] == "request_timeout" and r.json()["error"]["param"] == "timeout"
    with requests.post(server.url("/v1/completions"), json=dict(LONG, timeout=0.001, stream=True), stream=True,
                       timeout=60) as s:
        events = list(sse_events(s))
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["code"] == "request_timeout"
    # Aborted in the engine: nothing runs, no block is held, and the next request is served.
    wait_until(lambda: server.metrics()[("vllm:num_requests_running", frozenset())] == 0, what="no running request")
    wait_until(lambda: server.metrics()[("pagedkv:kv_blocks", frozenset({("state", "used")}))] == 0,
               what="blocks freed")
    assert complete(server, prompt="Once", max_tokens=2)["usage"]["completion_tokens"] == 2
    bad = server.post("/v1/completions", dict(LONG, timeout=-1))
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "timeout"


def test_server_request_timeout_flag():
    models_dir()
    with Server("--request-timeout-s", "0.001") as s:
        r = s.post("/v1/completions", LONG)
        assert r.status_code == 408 and r.json()["error"]["code"] == "request_timeout", r.text
        assert s.get("/health").status_code == 200


# ---- SSE pings ----------------------------------------------------------------------------------


def test_sse_pings_while_a_stream_waits():
    models_dir()
    with Server("--sse-ping-interval-s", "0.001", "--max-num-seqs", "1") as s:
        # Requests ahead of it hold the only running slot: the stream waits in the queue.
        blockers = [threading.Thread(target=s.post, args=("/v1/completions", dict(LONG, max_tokens=500)))
                    for _ in range(6)]
        for t in blockers:
            t.start()
        wait_until(lambda: s.metrics()[("vllm:num_requests_running", frozenset())] == 1, what="a blocker running")
        with requests.post(s.url("/v1/completions"), json=dict(prompt="Tom", max_tokens=4, stream=True), stream=True,
                           timeout=120) as r:
            r.encoding = "utf-8"
            lines = [line for line in r.iter_lines(decode_unicode=True) if line]
        for t in blockers:
            t.join(timeout=120)
        first_data = next(i for i, line in enumerate(lines) if line.startswith("data: "))
        assert first_data > 0 and all(line == ": ping" for line in lines[:first_data]), lines[:5]
        assert lines[-1] == "data: [DONE]"
    with Server() as quiet:  # off by default
        with requests.post(quiet.url("/v1/completions"), json=dict(prompt="Tom", max_tokens=4, stream=True),
                           stream=True, timeout=60) as r:
            assert not any(line.startswith(":") for line in r.iter_lines(decode_unicode=True) if line)


# ---- API keys and CORS --------------------------------------------------------------------------


def test_several_api_keys_and_cors(tmp_path):
    models_dir()
    key_file = tmp_path / "keys"
    key_file.write_text("# ops team\n  k-file-1  \n\n#k-commented\nk-file-2\n")
    with Server("--api-key", "k-one", "--api-key", "k-two", "--api-key-file", key_file,
                "--allowed-origins", "https://a.example,https://b.example") as s:
        body = {"prompt": "Once", "max_tokens": 1}
        for key in ("k-one", "k-two", "k-file-1", "k-file-2"):
            assert s.post("/v1/completions", body, headers={"Authorization": f"Bearer {key}"}).status_code == 200, key
        for key in ("k-commented", "# ops team", "k-on", ""):
            assert s.post("/v1/completions", body, headers={"Authorization": f"Bearer {key}"}).status_code == 401, key
        assert s.post("/v1/completions", body).status_code == 401
        # A preflight from an allowed origin, without a key.
        pre = requests.options(s.url("/v1/completions"), timeout=10,
                               headers={"Origin": "https://a.example", "Access-Control-Request-Method": "POST",
                                        "Access-Control-Request-Headers": "authorization, content-type"})
        assert pre.status_code == 204
        assert pre.headers["Access-Control-Allow-Origin"] == "https://a.example"
        assert "POST" in pre.headers["Access-Control-Allow-Methods"]
        assert "authorization" in pre.headers["Access-Control-Allow-Headers"].lower()
        ok = s.post("/v1/completions", body, headers={"Authorization": "Bearer k-two", "Origin": "https://b.example"})
        assert ok.headers["Access-Control-Allow-Origin"] == "https://b.example"
        denied = s.post("/v1/completions", body, headers={"Origin": "https://b.example"})
        assert denied.status_code == 401 and denied.headers["Access-Control-Allow-Origin"] == "https://b.example"
        other = s.post("/v1/completions", body, headers={"Authorization": "Bearer k-one", "Origin": "https://evil.example"})
        assert other.status_code == 200 and "Access-Control-Allow-Origin" not in other.headers
        bad_pre = requests.options(s.url("/v1/completions"), timeout=10,
                                   headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
        assert "Access-Control-Allow-Origin" not in bad_pre.headers
    with Server("--allowed-origins", "*") as anyone:
        r = anyone.post("/v1/completions", {"prompt": "Once", "max_tokens": 1}, headers={"Origin": "https://x.example"})
        assert r.headers["Access-Control-Allow-Origin"] == "*"


def test_cors_off_by_default(server):
    r = server.post("/v1/completions", {"prompt": "Once", "max_tokens": 1}, headers={"Origin": "https://a.example"})
    assert r.status_code == 200 and "Access-Control-Allow-Origin" not in r.headers


# ---- vLLM's per-request phase and per-step metrics ----------------------------------------------

STEP_METRICS = ["vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
                "vllm:request_max_num_generation_tokens", "vllm:iteration_tokens_total"]


def test_phase_and_step_metrics_appear_and_move(server):
    from prometheus_client.parser import text_string_to_metric_families
    families = {f.name: f for f in text_string_to_metric_families(server.get("/metrics").text)}
    for name in STEP_METRICS:
        assert families[name].type == "histogram", name
        assert all(s.labels.get("model_name") == "stories260K" for s in families[name].samples), name
    before = server.metrics()
    prompt = "A cat named Zed sat"  # a salt of its own: no prefix-cache hit, the whole prompt is computed
    prompt_tokens = len(server.post("/tokenize", {"prompt": prompt}).json()["tokens"])
    complete(server, prompt=prompt, max_tokens=9, ignore_eos=True, cache_salt="metrics-test", temperature=0)
    after = {}

    def delta(name):
        return after.get((name, frozenset()), 0) - before.get((name, frozenset()), 0)

    def recorded():  # the engine thread records a finished request's figures as its answer leaves
        after.update(server.metrics())
        return delta("vllm:request_decode_time_seconds_count") >= 1
    wait_until(recorded, 10, what="the request's phase metrics")

    assert delta("vllm:request_prefill_time_seconds_count") == 1
    assert delta("vllm:request_decode_time_seconds_count") == 1
    assert delta("vllm:request_decode_time_seconds_sum") > 0
    assert delta("vllm:request_max_num_generation_tokens_count") == 1
    assert delta("vllm:request_max_num_generation_tokens_sum") == 9
    # The prompt in prefill steps, then one decode step per token after the first.
    assert delta("vllm:iteration_tokens_total_sum") == prompt_tokens + 9 - 1
    assert delta("vllm:iteration_tokens_total_count") >= 9
    buckets = sorted(float(dict(labels)["le"]) for (name, labels) in after
                     if name == "vllm:iteration_tokens_total_bucket")
    assert buckets[:4] == [1.0, 8.0, 16.0, 32.0] and buckets[-2] == 16384.0


# ---- bench serve: an OpenAI-style base URL, and the chat endpoint --------------------------------


def test_bench_serve_base_url_with_v1_and_chat_endpoint(server):
    import subprocess
    for endpoint, route in (("chat", "/v1/chat/completions"), ("completions", "/v1/completions")):
        key = ("pagedkv:http_requests_total", frozenset({("endpoint", route)}))
        before = server.metrics().get(key, 0)
        out = subprocess.run([str(pagedkv_bin()), "bench", "serve", "--base-url", server.base_url + "/v1/",
                              "--endpoint", endpoint, "--num-prompts", "4", "--random-input-len", "16",
                              "--random-output-len", "4", "--json"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        report = json.loads(out.stdout)
        assert report["completed"] == 4 and report["failed"] == 0, report
        assert report["total_output_tokens"] == 16 and report["ttft_ms"]["mean"] > 0
        assert server.metrics()[key] - before == 4, endpoint
    bad = subprocess.run([str(pagedkv_bin()), "bench", "serve", "--base-url", server.base_url, "--endpoint", "embeddings"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "--endpoint" in bad.stdout + bad.stderr


# ---- the rendered prompt: /apply-template, --bos-token / --eos-token, markers the vocabulary lacks --

def test_apply_template_bos_eos_tokens_and_missing_markers(tmp_path):
    """POST /apply-template answers the prompt the chat template renders (llama-server's shape:
    tools and add_generation_prompt honoured); --bos-token / --eos-token replace the vocabulary's
    texts in the template; markers the vocabulary has no token for are named in a warning at start."""
    model = models_dir() / "stories260Ktok512.gguf"
    template = tmp_path / "t.jinja"
    template.write_text("{{ bos_token }}|{% for m in messages %}<|im_start|>{{ m.role }}:{{ m.content }}{% endfor %}"
                        "{% if tools %}[{{ tools | length }} tools]{% endif %}"
                        "{% if add_generation_prompt %}<|im_start|>assistant:{% endif %}|{{ eos_token }}")
    messages = [{"role": "user", "content": "Hi"}]
    with Server("--model", model, "--context-length", "256", "--chat-template", template) as s:
        out = s.post("/apply-template", {"messages": messages})
        assert out.status_code == 200, out.text
        assert out.json() == {"prompt": "<s>|<|im_start|>user:Hi<|im_start|>assistant:|</s>"}
        tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
        out = s.post("/apply-template", {"messages": messages, "tools": [tool], "add_generation_prompt": False})
        assert out.json() == {"prompt": "<s>|<|im_start|>user:Hi[1 tools]|</s>"}
        assert s.post("/apply-template", {"prompt": "Hi"}).status_code == 400
        assert s.post("/apply-template", {"messages": "Hi"}).status_code == 400
        log = s.read_output()
        assert "warning: the chat template writes a marker that the vocabulary has no token for " \
               "(rendered as plain text): <|im_start|>\n" in log, log
    with Server("--model", model, "--context-length", "256", "--chat-template", template,
                "--bos-token", "[BOS]", "--eos-token", "[EOS]") as s:
        out = s.post("/apply-template", {"messages": messages})
        assert out.json() == {"prompt": "[BOS]|<|im_start|>user:Hi<|im_start|>assistant:|[EOS]"}
        assert "has no token for (rendered as plain text): <|im_start|> [BOS] [EOS]\n" in s.read_output()

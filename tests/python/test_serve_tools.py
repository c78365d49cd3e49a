"""Tool calling through pagedkv serve: random-weight GGUF models with real chat templates (Qwen2.5:
hermes <tool_call> blocks; Llama 3.2: JSON with "parameters"; Mistral Nemo: [TOOL_CALLS];
DeepSeek R1: its tool-call markers).
tool_choice "required" and a named function force a call (the model writes gibberish otherwise),
so every answer must carry calls whose arguments validate against the tool's schema, whole and
streamed; "auto" and "none" answer 200 whatever the model writes; malformed tools are 400s; the
official Node client reads the calls (tests/node/openai_tools.test.mjs)."""

import json
import os
import shutil
import subprocess

import pytest
import requests

from conftest import shared_dir
from serve_support import REPO, Server, pagedkv_bin, sse_events

pytestmark = pytest.mark.skipif(not pagedkv_bin().exists(), reason=f"{pagedkv_bin()} is not built")

jsonschema = pytest.importorskip("jsonschema")

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "days", "unit"],
}
TIME = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather forecast", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description": "Current time", "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]

# (model file, template, tool-call syntax the server should detect)
FAMILIES = {
    "qwen": ("tiny-qwen2.f32.gguf", "Qwen-Qwen2.5-7B-Instruct", "hermes"),
    "llama": ("tiny-llama.f32.gguf", "meta-llama-Llama-3.2-3B-Instruct", "llama3_json"),
    "mistral": ("tiny-llama.f32.gguf", "mistralai-Mistral-Nemo-Instruct-2407", "mistral"),
    "deepseek": ("tiny-qwen2.f32.gguf", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek_v3"),
}


def start(family):
    model, template, _ = FAMILIES[family]
    model_path = shared_dir() / "models" / "gguf" / model
    template_path = shared_dir() / "chat_templates" / "templates" / f"{template}.jinja"
    if not model_path.exists() or not template_path.exists():
        pytest.skip(f"{model_path} or {template_path} is absent (set PAGEDKV_SHARED_DIR)")
    # The templates' tool prompts need more than the files' 256 tokens of context.
    return Server("--model", model_path, "--context-length", 4096, "--chat-template", template_path)


@pytest.fixture(scope="module", params=list(FAMILIES))
def family_server(request):
    with start(request.param) as s:
        assert f"parsed as '{FAMILIES[request.param][2]}'" in "".join(s.output)
        yield request.param, s


@pytest.fixture(scope="module")
def server():
    with start("qwen") as s:
        yield s


def chat(server, **fields):
    body = {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 200, "seed": 3, **fields}
    r = server.post("/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    return r.json()


def streamed(server, **fields):
    """The chunks of a streamed chat answer, and the message and finish reason they add up to."""
    body = {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 200, "seed": 3, "stream": True, **fields}
    with requests.post(server.url("/v1/chat/completions"), json=body, stream=True, timeout=120) as r:
        assert r.status_code == 200, r.text
        events = list(sse_events(r))
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    content, calls, finish = "", {}, None
    for c in chunks:
        for ch in c["choices"]:
            delta = ch["delta"]
            content += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                k = call["index"]
                if k not in calls:  # OpenAI's order: the first delta of a call names it
                    assert call["type"] == "function" and call["id"] and call["function"]["name"], call
                    calls[k] = {"id": call["id"], "name": call["function"]["name"], "arguments": ""}
                else:
                    assert "id" not in call and "name" not in call.get("function", {}), call
                calls[k]["arguments"] += call["function"].get("arguments") or ""
            finish = ch["finish_reason"] or finish
    assert sorted(calls) == list(range(len(calls)))
    return content, [calls[k] for k in sorted(calls)], finish


def check_call(name, arguments, allowed=SCHEMAS):
    assert name in allowed, name
    jsonschema.validate(json.loads(arguments), allowed[name])


@pytest.mark.parametrize("stream", [False, True])
def test_required_gives_one_valid_call(family_server, stream):
    family, server = family_server
    fields = {"tool_choice": "required", "parallel_tool_calls": False}
    if stream:
        content, calls, finish = streamed(server, **fields)
        assert content == ""
    else:
        choice = chat(server, **fields)["choices"][0]
        message, finish = choice["message"], choice["finish_reason"]
        assert message["content"] is None, message
        calls = [{"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                 for c in message["tool_calls"]]
        assert all(c["type"] == "function" for c in message["tool_calls"])
    assert finish == "tool_calls"
    assert len(calls) == 1
    check_call(calls[0]["name"], calls[0]["arguments"])
    if family == "mistral":  # Mistral's templates accept only 9-character ids back
        assert len(calls[0]["id"]) == 9 and calls[0]["id"].isalnum()
    else:
        assert calls[0]["id"].startswith("call_")


@pytest.mark.parametrize("parallel", [False, True])
def test_named_function_streamed_equals_whole(family_server, parallel):
    family, server = family_server
    named = {"type": "function", "function": {"name": "get_time"}}
    for seed in (1, 2):
        fields = {"tool_choice": named, "seed": seed, "parallel_tool_calls": parallel}
        whole = chat(server, **fields)["choices"][0]
        content, calls, finish = streamed(server, **fields)
        whole_calls = whole["message"].get("tool_calls") or []
        assert [(c["name"], c["arguments"]) for c in calls] == \
               [(c["function"]["name"], c["function"]["arguments"]) for c in whole_calls]
        assert (whole["message"]["content"] or "") == content
        assert finish == whole["finish_reason"]
        for c in calls:
            check_call(c["name"], c["arguments"], {"get_time": TIME})
        if not parallel:
            assert finish == "tool_calls" and len(calls) == 1
        else:
            # A random model writes calls until max_tokens: the complete ones come back, except
            # from a Llama answer cut short (the calls are the whole answer), which is text.
            assert finish in ("tool_calls", "length")
            assert calls or family == "llama"


def test_auto_and_none_answer_whatever_the_model_writes(server):
    auto = chat(server, tool_choice="auto", max_tokens=40)["choices"][0]
    assert auto["finish_reason"] in ("stop", "length", "tool_calls")
    assert isinstance(auto["message"]["content"], str) or auto["message"].get("tool_calls")
    none = chat(server, tool_choice="none", max_tokens=10)
    assert "tool_calls" not in none["choices"][0]["message"]
    # "none" still shows the tools to the template (as vLLM does): a longer prompt than without.
    plain = server.post("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 1}).json()
    assert none["usage"]["prompt_tokens"] > plain["usage"]["prompt_tokens"]


def test_tool_history_round_trip(server):
    """An assistant's call (content null, arguments as JSON text) and the tool's result go back
    through the template; the rendering shows the call as Qwen's template prints it."""
    history = MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_abc", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2, \"unit\": \"celsius\"}"}}]},
        {"role": "tool", "tool_call_id": "call_abc", "content": "sunny, 21 C"},
    ]
    r = server.post("/v1/chat/completions", {"messages": history, "tools": TOOLS, "tool_choice": "required", "max_tokens": 120})
    assert r.status_code == 200, r.text
    tokens = server.post("/tokenize", {"messages": history, "tools": TOOLS}).json()["tokens"]
    text = server.post("/detokenize", {"tokens": tokens}).json()["prompt"]
    assert '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2, "unit": "celsius"}}' in text
    assert "<tool_response>\nsunny, 21 C\n</tool_response>" in text


@pytest.mark.parametrize("fields, param", [
    ({"tools": TOOLS + [TOOLS[0]]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": f"f{i}"}} for i in range(129)]}, "tools"),
    ({"tools": [], "tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "not": {}}}}],
      "tool_choice": "required"}, "tools"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages"),
])
def test_malformed_tools_are_400s(server, fields, param):
    body = {"messages": MESSAGES, "max_tokens": 5, **fields}
    r = server.post("/v1/chat/completions", body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.text
    assert server.post("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 2}).status_code == 200


def test_built_in_template_refuses_tools():
    if not (shared_dir() / "models" / "stories260K.bin").exists():
        pytest.skip("stories260K.bin is absent (set PAGEDKV_SHARED_DIR)")
    with Server() as s:
        r = s.post("/v1/chat/completions", {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 5})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "unsupported_tools"
        r = s.post("/tokenize", {"messages": MESSAGES + [{"role": "tool", "tool_call_id": "a", "content": "x"}]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "messages", r.text


def test_openai_node_client_tool_calls(server):
    node = shutil.which("node")
    if node is None or not (REPO / "node_modules" / "openai").is_dir():
        pytest.skip("node or node_modules/openai is missing: scripts/setup.sh installs them")
    run = subprocess.run([node, "--test", str(REPO / "tests" / "node" / "openai_tools.test.mjs")], cwd=REPO,
                         env={**os.environ, "PAGEDKV_BASE_URL": server.base_url, "PAGEDKV_MODEL": "tiny-qwen2.f32"},
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]

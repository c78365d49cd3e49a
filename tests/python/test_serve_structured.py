"""Structured output through pagedkv serve: response_format (json_schema, json_object),
structured_outputs (regex, choice, grammar), guided_json / guided_choice / guided_grammar, whole and streamed, on
stories260K. Every choice that ends on a stop token parses and validates; refused grammars and
conflicting fields are 400s that name the field and the keyword."""

import decimal
import json
import re

import pytest
import requests

from conftest import shared_dir
from serve_support import Server, pagedkv_bin, sse_events

pytestmark = pytest.mark.skipif(not pagedkv_bin().exists(), reason=f"{pagedkv_bin()} is not built")

jsonschema = pytest.importorskip("jsonschema")

SCHEMA = {
    "type": "object",
    "properties": {
        "color": {"enum": ["red", "green", "blue"]},
        "count": {"type": "integer", "minimum": 0, "maximum": 99},
        "ok": {"type": "boolean"},
        "name": {"type": "string", "maxLength": 5},
    },
    "required": ["color", "count", "ok"],
}


@pytest.fixture(scope="module")
def server():
    if not (shared_dir() / "models" / "stories260K.bin").exists():
        pytest.skip("stories260K.bin is absent (set PAGEDKV_SHARED_DIR)")
    with Server("--check-invariants") as s:
        yield s


def post(server, path, body):
    r = server.post(path, body)
    assert r.status_code == 200, r.text
    return r.json()


def stream(server, path, body):
    body = dict(body, stream=True)
    with requests.post(server.url(path), json=body, stream=True, timeout=120) as r:
        assert r.status_code == 200, r.text
        events = list(sse_events(r))
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def streamed_texts(chunks, chat):
    texts, reasons = {}, {}
    for c in chunks:
        for ch in c["choices"]:
            piece = ch["delta"].get("content") or "" if chat else ch["text"]
            texts[ch["index"]] = texts.get(ch["index"], "") + piece
            if ch.get("finish_reason"):
                reasons[ch["index"]] = ch["finish_reason"]
    return [(texts[i], reasons[i]) for i in sorted(texts)]


def check_json(text, reason, schema):
    assert reason == "stop", f"did not complete: {text!r}"
    value = json.loads(text)
    if schema is None:
        assert isinstance(value, dict)
    else:
        jsonschema.validate(value, schema)
        # Properties come in the schema's order, as the client wrote it.
        order = list(schema["properties"])
        assert list(value) == sorted(value, key=order.index), text


CHAT = {"messages": [{"role": "user", "content": "Describe a toy as JSON."}], "max_tokens": 120}


def test_response_format_json_schema_chat_whole_and_streamed(server):
    fmt = {"type": "json_schema", "json_schema": {"name": "toy", "schema": SCHEMA, "strict": True}}
    for temperature in (0, 1.0):
        body = dict(CHAT, response_format=fmt, temperature=temperature, n=2, seed=3)
        whole = post(server, "/v1/chat/completions", body)
        for c in whole["choices"]:
            check_json(c["message"]["content"], c["finish_reason"], SCHEMA)
        streamed = streamed_texts(stream(server, "/v1/chat/completions", body), chat=True)
        assert [t for t, _ in streamed] == [c["message"]["content"] for c in whole["choices"]]
        for text, reason in streamed:
            check_json(text, reason, SCHEMA)


def test_response_format_json_object(server):
    # Any object: a story model may write a story inside a key, so one cut by max_tokens is only
    # checked to have started an object; those that end parse.
    body = dict(CHAT, response_format={"type": "json_object"}, temperature=1.0, seed=11, n=4, max_tokens=200)
    for c in post(server, "/v1/chat/completions", body)["choices"]:
        if c["finish_reason"] == "stop":
            check_json(c["message"]["content"], c["finish_reason"], None)
        else:
            assert c["message"]["content"].startswith("{"), c
    # Text is no structure at all.
    plain = post(server, "/v1/chat/completions", dict(CHAT, response_format={"type": "text"}, max_tokens=4))
    assert plain["choices"][0]["finish_reason"] == "length"


def test_structured_outputs_regex_and_choice_on_completions(server):
    regex = r"[a-z]{2,6}-[0-9]{2,4}"
    body = {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 1.0, "n": 3, "seed": 5,
            "structured_outputs": {"regex": regex}}
    for c in post(server, "/v1/completions", body)["choices"]:
        assert c["finish_reason"] == "stop" and re.fullmatch(regex, c["text"]), c
    for text, reason in streamed_texts(stream(server, "/v1/completions", body), chat=False):
        assert reason == "stop" and re.fullmatch(regex, text), text
    choices = ["happy", "sad", "sleepy"]
    body = {"prompt": "Tom felt", "max_tokens": 10, "temperature": 1.0, "n": 4, "seed": 2,
            "structured_outputs": {"choice": choices}}
    for c in post(server, "/v1/completions", body)["choices"]:
        assert c["finish_reason"] == "stop" and c["text"] in choices, c
    # vLLM's older field names.
    r = post(server, "/v1/completions", {"prompt": "Lily was", "max_tokens": 10, "guided_choice": choices})
    assert r["choices"][0]["text"] in choices


def test_gbnf_grammar(server):
    gbnf = 'root ::= animal " " count\nanimal ::= "cat" | "dog"\ncount ::= [1-9] [0-9]?'
    pattern = r"(cat|dog) [1-9][0-9]?"
    for field in ({"structured_outputs": {"grammar": gbnf}}, {"guided_grammar": gbnf}):
        body = dict({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 1.0, "n": 2, "seed": 8}, **field)
        for c in post(server, "/v1/completions", body)["choices"]:
            assert c["finish_reason"] == "stop" and re.fullmatch(pattern, c["text"]), c
    bad = server.post("/v1/completions", {"prompt": "x", "guided_grammar": "root ::= missing"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "guided_grammar", bad.text


def test_guided_json_streamed(server):
    body = {"prompt": "The toy:", "max_tokens": 120, "temperature": 0.8, "seed": 9, "n": 2, "guided_json": SCHEMA,
            "guided_decoding_backend": "xgrammar"}
    for text, reason in streamed_texts(stream(server, "/v1/completions", body), chat=False):
        check_json(text, reason, SCHEMA)


def test_number_bounds(server):
    # zod's z.number().min(-1.5).lt(2.25): an exact decimal range, numbers written without an
    # exponent; read as Decimal so that the check is exact too. A bound that cannot be met, and
    # multipleOf, are 400s that name the keyword.
    schema = {"type": "object", "properties": {"score": {"type": "number", "minimum": -1.5, "exclusiveMaximum": 2.25}},
              "required": ["score"]}
    body = {"prompt": "The score:", "max_tokens": 40, "temperature": 1.0, "seed": 3, "n": 4, "guided_json": schema}
    for choice in post(server, "/v1/completions", body)["choices"]:
        text = choice["text"]
        assert text.startswith('{"score":'), text
        if choice["finish_reason"] == "stop":
            value = json.loads(text, parse_float=decimal.Decimal)
            assert "e" not in text.lower() and decimal.Decimal("-1.5") <= value["score"] < decimal.Decimal("2.25"), text
    for bad_schema, word in (({"type": "number", "minimum": 2, "exclusiveMaximum": 2}, "empty"),
                             ({"type": "number", "multipleOf": 0.5}, "multipleOf")):
        bad = server.post("/v1/completions", {"prompt": "x", "guided_json": bad_schema})
        assert bad.status_code == 400 and word in bad.json()["error"]["message"], bad.text


def test_refused_grammars_and_conflicting_fields(server):
    bad = server.post("/v1/chat/completions", dict(CHAT, response_format={
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "patternProperties": {"a": {}}}}}))
    assert bad.status_code == 400, bad.text
    error = bad.json()["error"]
    assert error["param"] == "response_format" and "patternProperties" in error["message"], error
    bad = server.post("/v1/completions", {"prompt": "x", "structured_outputs": {"regex": "(a"}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "structured_outputs", bad.text
    both = server.post("/v1/completions", {"prompt": "x", "guided_regex": "a+", "response_format": {"type": "json_object"}})
    assert both.status_code == 400 and "at most one" in both.json()["error"]["message"], both.text
    beam = server.post("/v1/completions", {"prompt": "x", "n": 2, "use_beam_search": True, "guided_regex": "a+"})
    assert beam.status_code == 400 and beam.json()["error"]["param"] == "guided_regex", beam.text
    # The server still serves after them.
    assert post(server, "/v1/completions", {"prompt": "x", "max_tokens": 2})["choices"]


def test_metrics_count_structured_requests(server):
    post(server, "/v1/completions", {"prompt": "x", "max_tokens": 4, "guided_regex": "[a-z]+"})
    text = server.get("/metrics").text
    regex = [l for l in text.splitlines() if l.startswith("pagedkv:structured_output_requests_total") and 'kind="regex"' in l]
    assert regex and float(regex[0].split()[-1]) >= 1, text
    assert any(l.startswith("pagedkv:grammar_compile_seconds_total") for l in text.splitlines())


def test_grammar_dead_end_is_abort_not_stop(server):
    # stories260K's tok512.bin spells "é" (a piece of its own) but no Greek letter (run.c prints no
    # lone byte above 0x7F): after "é" nothing continues the regex. The output is incomplete, so
    # its finish_reason is "abort", never "stop".
    body = {"prompt": "Once upon a time", "max_tokens": 20, "temperature": 1.0, "n": 2, "seed": 4,
            "structured_outputs": {"regex": "é[αβγ]{2}"}}
    for c in post(server, "/v1/completions", body)["choices"]:
        assert c["finish_reason"] == "abort" and c["text"] == "é", c
    for text, reason in streamed_texts(stream(server, "/v1/completions", body), chat=False):
        assert reason == "abort" and text == "é", (text, reason)

"""Hostile templates, schemas and model files against `pagedkv serve`: each is a clear error within
a second (a 400 naming the limit, or a refusal to start naming the file's flaw), and the server
answers the next normal request.

- Chat templates that loop forever, recurse without end or render gigabytes: as the model's
  template (`--chat-template`) serve refuses to start and says why; a template that runs away only
  on a particular conversation is a 400 for that request.
- JSON Schemas, regexes and grammars built to explode: a regex of exponential size, 10,000 nested
  levels (the body refused before it is parsed), 100 (the grammar's limit), a 1 MB enum.
- K-quant model files cut short or with a tensor inconsistent with its shape: serve and inspect
  exit with the file's error naming the tensor.
"""

import json
import os
import pathlib
import struct
import subprocess

import pytest
import requests

from conftest import shared_dir
from serve_support import Server, pagedkv_bin

pytestmark = pytest.mark.skipif(not pagedkv_bin().exists(), reason=f"{pagedkv_bin()} is not built")

MODEL = "models/gguf/small-llama.q4_k_m.gguf"

RUNAWAY_TEMPLATES = {
    "loops forever": "{% for i in range(1000000000) %}{% endfor %}{{ messages[0].content }}",
    "recurses without end": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "renders gigabytes": "{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}",
}

# Runs away only when a message asks for it; renders normal conversations.
PICKY_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m.content == 'loop' %}{% for i in range(1000000000) %}{% endfor %}{% endif %}"
    "{% if m.role == 'system' %}{{ raise_exception('this template has no system role') }}{% endif %}"
    "<|{{ m.role }}|>{{ m.content }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def model_path():
    path = shared_dir() / MODEL
    if not path.exists():
        pytest.skip(f"{path} is absent (set PAGEDKV_SHARED_DIR)")
    return path


def run_serve_expecting_failure(tmp_path, *args):
    """Starts serve, which must exit on its own; returns (exit code, output, the CPU seconds it used)."""
    before = os.times()
    proc = subprocess.run([str(pagedkv_bin()), "serve", "--host", "127.0.0.1", "--port", "0", *map(str, args)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return proc.returncode, proc.stdout + proc.stderr, cpu


@pytest.mark.parametrize("kind", sorted(RUNAWAY_TEMPLATES))
def test_runaway_model_template_stops_serve_at_start(tmp_path, kind):
    template = tmp_path / "template.jinja"
    template.write_text(RUNAWAY_TEMPLATES[kind])
    code, output, seconds = run_serve_expecting_failure(tmp_path, "--model", model_path(), "--chat-template", template)
    assert code != 0, output
    assert "chat template" in output and "RenderLimits::" in output, output
    assert seconds < 10, f"{kind}: {seconds:.1f} s"  # a load of a small model, then the render stops within a second


@pytest.fixture(scope="module")
def picky_server(tmp_path_factory):
    template = tmp_path_factory.mktemp("template") / "picky.jinja"
    template.write_text(PICKY_TEMPLATE)
    with Server("--model", model_path(), "--chat-template", template, "--check-invariants") as s:
        yield s


def chat(server, content, role="user", **fields):
    body = {"messages": [{"role": role, "content": content}], "max_tokens": 3, **fields}
    start = cpu_seconds(server)
    r = server.post("/v1/chat/completions", body)
    return r, cpu_seconds(server) - start


def cpu_seconds(server):
    """The CPU time the server process has used (all its threads): a bound on the work a request
    causes that holds on a loaded machine, where wall time also measures everything else."""
    with open(f"/proc/{server.proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def assert_normal_request_answered(server):
    r, _ = chat(server, "Once upon a time")
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["finish_reason"] in ("length", "stop"), r.text


def test_template_that_runs_away_on_one_request_is_a_400(picky_server):
    assert_normal_request_answered(picky_server)
    r, seconds = chat(picky_server, "loop")
    assert r.status_code == 400, r.text
    assert "RenderLimits::max_loop_iterations" in r.json()["error"]["message"], r.text
    assert seconds < 1.0, seconds
    r, seconds = chat(picky_server, "You are terse.", role="system")
    assert r.status_code == 400 and "this template has no system role" in r.json()["error"]["message"], r.text
    assert_normal_request_answered(picky_server)


def nested_schema(levels):
    return "".join('{"type":"array","items":' for _ in range(levels)) + '{"type":"null"}' + "}" * levels


# Each a JSON fragment of request fields (as text: Python's json cannot nest 10,000 levels) and the
# limits its error may name (None: a small automaton after all, served).
HOSTILE_STRUCTURES = {
    "exploding regex": ('"structured_outputs": {"regex": "(a|b)*a(a|b){40}"}', ("max_automaton_states", "compile_budget_ms")),
    # The body's own nesting is refused before it is parsed (128 levels of JSON); a schema within
    # that but deeper than the grammar's 64 levels reaches the grammar's limit.
    "10,000 nested levels": ('"response_format": {"type": "json_schema", "json_schema": {"name": "deep", "schema": '
                             + nested_schema(10000) + "}}", ("more than 128 levels deep",)),
    "100 nested levels": ('"response_format": {"type": "json_schema", "json_schema": {"name": "deep", "schema": '
                          + nested_schema(100) + "}}", ("max_nesting_depth",)),
    "a 1 MB enum": ('"response_format": {"type": "json_schema", "json_schema": {"name": "enum", "schema": '
                    + json.dumps({"enum": [f"value{i}" for i in range(90000)]}) + "}}", ("max_text_bytes", "max_enum_values")),
    "a nested-quantifier grammar": ('"structured_outputs": {"grammar": "root ::= ((\\"a\\"*)*)* \\"b\\""}', None),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_STRUCTURES))
def test_hostile_schema_is_a_400_naming_the_limit(picky_server, kind):
    fields, limits = HOSTILE_STRUCTURES[kind]
    body = '{"messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": 3, ' + fields + "}"
    start = cpu_seconds(picky_server)
    r = requests.post(picky_server.url("/v1/chat/completions"), data=body,
                      headers={"Content-Type": "application/json"}, timeout=60)
    seconds = cpu_seconds(picky_server) - start
    if limits is None:
        assert r.status_code == 200, r.text
    else:
        assert r.status_code == 400, r.text
        message = r.json()["error"]["message"]
        assert any(limit in message for limit in limits), message
    assert seconds < 1.0, f"{kind}: {seconds:.2f} s of the server's CPU"
    assert_normal_request_answered(picky_server)


def rss_mib(server):
    with open(f"/proc/{server.proc.pid}/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS:"))


def test_repeated_exploding_regexes_do_not_grow_the_server(picky_server):
    """A compile stopped at its limit uses tens of MiB of scratch on the HTTP thread that ran it;
    the server gives it back to the system, so a client repeating such requests (each landing on
    another thread, with its own malloc arena) does not grow the process by that much each time."""
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2,
            "structured_outputs": {"regex": "(a|b)*a(a|b){40}"}}
    assert picky_server.post("/v1/chat/completions", body).status_code == 400
    before = rss_mib(picky_server)
    for _ in range(8):
        assert picky_server.post("/v1/chat/completions", body).status_code == 400
    assert rss_mib(picky_server) < before + 60, (before, rss_mib(picky_server))
    assert_normal_request_answered(picky_server)


def tensor_infos(data):
    """(name, type, offset of the type field) of each tensor info of a GGUF v3 file."""
    assert data[:4] == b"GGUF"
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    at = 24

    def string(at):
        n = struct.unpack_from("<Q", data, at)[0]
        return data[at + 8:at + 8 + n].decode(), at + 8 + n

    def skip_value(t, at):
        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
        if t == 8:
            return string(at)[1]
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, at)
            at += 12
            for _ in range(n):
                at = skip_value(et, at)
            return at
        return at + sizes[t]

    for _ in range(n_kv):
        _, at = string(at)
        t = struct.unpack_from("<I", data, at)[0]
        at = skip_value(t, at + 4)
    infos = []
    for _ in range(n_tensors):
        name, at = string(at)
        n_dims = struct.unpack_from("<I", data, at)[0]
        at += 4 + 8 * n_dims
        infos.append((name, struct.unpack_from("<I", data, at)[0], at))
        at += 4 + 8
    return infos


def test_truncated_or_inconsistent_k_quant_file_is_refused_by_name(tmp_path):
    data = model_path().read_bytes()
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(data[:len(data) * 2 // 3])
    # A Q4_K tensor relabelled Q6_K: its bytes no longer match its shape, and the tensors overlap
    # or run past the end.
    name, type_, at = next(info for info in tensor_infos(data) if info[1] == 12 and info[0].startswith("blk.0."))
    relabelled = bytearray(data)
    struct.pack_into("<I", relabelled, at, 14)
    inconsistent = tmp_path / "inconsistent.gguf"
    inconsistent.write_bytes(bytes(relabelled))
    for path, expected in ((truncated, "runs past the end"), (inconsistent, "")):
        code, output, seconds = run_serve_expecting_failure(tmp_path, "--model", path)
        assert code != 0 and "GGUF" in output and expected in output, output
        assert seconds < 5, seconds
        inspected = subprocess.run([str(pagedkv_bin()), "inspect", str(path)], capture_output=True, text=True, timeout=30)
        assert inspected.returncode != 0 and inspected.returncode != 139, inspected.stdout + inspected.stderr
    code, output, _ = run_serve_expecting_failure(tmp_path, "--model", inconsistent)
    assert name in output or "overlap" in output, output

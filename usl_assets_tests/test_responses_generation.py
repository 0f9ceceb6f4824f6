"""`usl generate`'s library (responses/generation.py) against a real OpenAI-compatible server: llama-cpp-python's
serving SmolLM2-135M (llama_server.py), never a mock. Errors come from a real HTTP proxy in front of it (503 twice
for one prompt, 500 always for another) and from llama's own server (a prompt longer than its context)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from usl_assets.responses.generation import (
    ANSWERS_FILE, ERRORS_FILE, EndpointError, GenerationConflict, GenerationSettings, PromptToAnswer,
    check_endpoint, failed_prompts, generate_answers, read_answers, write_model_file)
from usl_assets_tests.conftest import REPO_ROOT
from usl_assets_tests.llama_server import MODEL_ID, N_CTX, llama_server  # noqa: F401 (the fixture)
from usl_assets_tests.webserver import free_port

PROMPTS = [
    PromptToAnswer("capital", "What is the capital of France?"),
    PromptToAnswer("haiku", "Write a haiku about the sea."),
    PromptToAnswer("math", "What is 12 times 12?"),
    PromptToAnswer("advice", "Give me one tip to sleep better."),
    PromptToAnswer("follow_up", "And what is its population?",
                   history=({"role": "user", "content": "Name a big city in Japan."},
                            {"role": "assistant", "content": "Osaka is a big city in Japan."})),
]
TOPICS = ["rivers", "bread", "chess", "owls", "trains", "tea", "maps", "bees", "snow", "glass", "kites", "salt"]


def settings_for(url: str, **changes) -> GenerationSettings:
    return GenerationSettings(**{"endpoint": url, "max_tokens": 16, "concurrency": 2, "backoff_s": 0.05,
                                 "system_prompt": "You are a concise assistant.", **changes})


def resume_prompts() -> list[PromptToAnswer]:
    return [PromptToAnswer(f"topic_{n:02d}", f"Tell me one fact about {topic}.") for n, topic in enumerate(TOPICS)]


def resume_settings(url: str) -> GenerationSettings:
    return GenerationSettings(endpoint=url, max_tokens=32, concurrency=1)


def jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_answers_every_prompt_deterministically(llama_server, tmp_path):  # noqa: F811
    settings = settings_for(llama_server)
    calls = []
    first = generate_answers(PROMPTS, settings, tmp_path / "a", progress=lambda *args: calls.append(args))
    assert (first.answered, first.already_answered, first.failed) == (len(PROMPTS), 0, {}), first.line()
    assert calls[0] == (0, len(PROMPTS), 0, 0.0) and [call[0] for call in calls[1:]] == [1, 2, 3, 4, 5]
    answers = read_answers(tmp_path / "a")
    assert sorted(answers) == sorted(item.prompt_id for item in PROMPTS)
    assert all(answer["output"].strip() and answer["api_model"] == MODEL_ID for answer in answers.values())
    assert all(answer["finish_reason"] in ("stop", "length") for answer in answers.values())

    recorded = json.loads((tmp_path / "a" / "settings.json").read_text())
    assert recorded == {**settings.record(), "api_model": MODEL_ID}

    # temperature 0 and a seed: a second store gets the same answers, every request sent again
    second = generate_answers(PROMPTS, settings_for(llama_server, concurrency=1), tmp_path / "b")
    assert second.answered == len(PROMPTS)
    assert {k: v["output"] for k, v in read_answers(tmp_path / "b").items()} == \
        {k: v["output"] for k, v in answers.items()}

    # the same store again: nothing is asked twice
    again = generate_answers(PROMPTS, settings, tmp_path / "a")
    assert (again.answered, again.already_answered) == (0, len(PROMPTS))
    assert len(jsonl(tmp_path / "a" / ANSWERS_FILE)) == len(PROMPTS)

    ids = [item.prompt_id for item in PROMPTS][::-1] + ["never_asked"]
    target = tmp_path / "inbox" / "smol.jsonl"
    assert write_model_file(tmp_path / "a", ids, target, "smol") == (len(PROMPTS), 0)
    lines = jsonl(target)
    assert [line["prompt_id"] for line in lines] == ids[:-1]
    assert lines[0] == {"prompt_id": ids[0], "output": answers[ids[0]]["output"], "generator": "smol"}
    sidecar = json.loads(target.with_suffix(".generation.json").read_text())
    assert (sidecar["answered"], sidecar["failed"], sidecar["api_model"]) == (len(PROMPTS), 0, MODEL_ID)
    assert "finished_at" in sidecar and not list(target.parent.glob("*.tmp"))


def test_killed_generation_resumes_without_losing_or_repeating(llama_server, tmp_path):  # noqa: F811
    store = tmp_path / "store"
    answers_path = store / ANSWERS_FILE
    worker = subprocess.Popen([sys.executable, "-m", "usl_assets_tests.generation_worker", llama_server, str(store)],
                              cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while not (answers_path.exists() and answers_path.read_bytes().count(b"\n") >= 3):
        assert worker.poll() is None, worker.stdout.read().decode()
        assert time.monotonic() < deadline, "the worker answered fewer than 3 prompts in 120 s"
        time.sleep(0.02)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    assert worker.returncode == -signal.SIGKILL
    before_kill = read_answers(store)
    assert 3 <= len(before_kill) < len(TOPICS), "killed too late: the worker had answered everything"
    with open(answers_path, "ab") as handle:  # as if the kill had struck in the middle of a write
        handle.write(b'{"prompt_id": "topic_11", "outp')

    report = generate_answers(resume_prompts(), resume_settings(llama_server), store)
    assert report.already_answered == len(before_kill) and report.answered == len(TOPICS) - len(before_kill)
    assert report.failed == {}
    ids = [record["prompt_id"] for record in jsonl(answers_path)]
    assert sorted(ids) == [item.prompt_id for item in resume_prompts()]  # each exactly once, the torn line gone
    assert all(read_answers(store)[key] == value for key, value in before_kill.items())


def test_stop_starts_no_new_request(llama_server, tmp_path):  # noqa: F811
    stop, settings = threading.Event(), settings_for(llama_server, concurrency=1)
    report = generate_answers(PROMPTS, settings, tmp_path, stop=stop,
                              progress=lambda done, *_: done >= 2 and stop.set())
    assert report.stopped and 2 <= report.answered <= 3 and report.failed == {}, report.line()
    assert len(jsonl(tmp_path / ANSWERS_FILE)) == report.answered
    rest = generate_answers(PROMPTS, settings, tmp_path)
    assert (rest.already_answered, rest.answered, rest.stopped) == (report.answered, len(PROMPTS) - report.answered,
                                                                     False)


class FaultyProxy:
    """A real HTTP proxy to the llama server: 503 for FLAKY's first `flaky_failures` requests, 500 for BROKEN while
    `broken`; counts the chat requests per last user message."""

    def __init__(self, upstream: str):
        self.upstream, self.flaky_failures, self.broken = upstream, 2, True
        self.requests: dict[str, int] = {}
        self.lock = threading.Lock()

    def handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self.forward(None)

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                prompt = json.loads(body)["messages"][-1]["content"]
                with proxy.lock:
                    count = proxy.requests[prompt] = proxy.requests.get(prompt, 0) + 1
                if prompt == FLAKY and count <= proxy.flaky_failures:
                    return self.reply(503, b'{"error": {"message": "overloaded, try again"}}')
                if prompt == BROKEN and proxy.broken:
                    return self.reply(500, b"<html>internal error</html>", "text/html")
                self.forward(body)

            def forward(self, body):
                request = urllib.request.Request(proxy.upstream + self.path.removeprefix("/v1"), data=body,
                                                 headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(request, timeout=60) as response:
                        self.reply(response.status, response.read())
                except urllib.error.HTTPError as error:
                    self.reply(error.code, error.read())

            def reply(self, status, payload, content_type="application/json"):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler


@contextmanager
def serving(handler_class):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_class)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


FLAKY = "Name a color."
BROKEN = "Name an animal."
TOO_LONG = "Please summarize this. " + "The quick brown fox jumps over the lazy dog. " * 400


def test_retries_and_failures(llama_server, tmp_path):  # noqa: F811
    prompts = [PromptToAnswer("flaky", FLAKY), PromptToAnswer("broken", BROKEN),
               PromptToAnswer("too_long", TOO_LONG), PromptToAnswer("fine", "Name a fruit.")]
    proxy = FaultyProxy(llama_server)
    store = tmp_path / "store"
    with serving(proxy.handler()) as url:
        settings = settings_for(url, max_attempts=3)
        report = generate_answers(prompts, settings, store)
        assert report.answered == 2 and set(report.failed) == {"broken", "too_long"}, report.line()
        assert proxy.requests[FLAKY] == 3 and proxy.requests[BROKEN] == 3 and proxy.requests[TOO_LONG] == 1
        assert report.failed["broken"].startswith("HTTP 500")
        assert report.failed["too_long"].startswith("HTTP 400") and str(N_CTX) in report.failed["too_long"]
        errors = {record["prompt_id"]: record for record in jsonl(store / ERRORS_FILE)}
        assert (errors["broken"]["attempts"], errors["too_long"]["attempts"]) == (3, 1)
        assert failed_prompts(store) == report.failed

        target = tmp_path / "model.jsonl"
        assert write_model_file(store, [item.prompt_id for item in prompts], target, "smol") == (2, 2)
        lines = {line["prompt_id"]: line for line in jsonl(target)}
        assert lines["broken"] == {"prompt_id": "broken", "error": report.failed["broken"], "generator": "smol"}
        assert "output" in lines["flaky"] and "error" in lines["too_long"]

        # a later call tries the failed prompts again; one answered now is no longer failed
        proxy.broken = False
        later = generate_answers(prompts, settings, store)
        assert (later.answered, later.already_answered, set(later.failed)) == (1, 2, {"too_long"})
        assert set(failed_prompts(store)) == {"too_long"}
        assert write_model_file(store, [item.prompt_id for item in prompts], target, "smol") == (3, 1)


def test_check_endpoint(llama_server):  # noqa: F811
    assert check_endpoint(GenerationSettings(endpoint=llama_server)) == MODEL_ID
    assert check_endpoint(GenerationSettings(endpoint=llama_server, api_model="other")) == "other"

    with pytest.raises(EndpointError, match=r"^cannot reach http://127\.0\.0\.1:\d+/v1: "):
        check_endpoint(GenerationSettings(endpoint=f"http://127.0.0.1:{free_port()}/v1", timeout_s=5))

    def html_server(status, payload, content_type="text/html"):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return serving(Handler)

    for status, payload, content_type in [(404, b"<html><body>Not Found</body></html>", "text/html"),
                                          (200, b"<html><body>Welcome</body></html>", "text/html"),
                                          (200, b'{"models": ["x"]}', "application/json"),
                                          (200, b'{"data": [{"id": null}]}', "application/json")]:
        with html_server(status, payload, content_type) as url:
            with pytest.raises(EndpointError, match="does not answer like an OpenAI-compatible server"):
                check_endpoint(GenerationSettings(endpoint=url))
    two = b'{"object": "list", "data": [{"id": "a", "object": "model"}, {"id": "b", "object": "model"}]}'
    with html_server(200, two, "application/json") as url:
        with pytest.raises(EndpointError, match=r"serves 2 models \(a, b\): pass --api-model"):
            check_endpoint(GenerationSettings(endpoint=url))
        assert check_endpoint(GenerationSettings(endpoint=url, api_model="b")) == "b"
    with pytest.raises(EndpointError, match="USL_TEST_NO_SUCH_KEY"):
        check_endpoint(GenerationSettings(endpoint=llama_server, api_key_env="USL_TEST_NO_SUCH_KEY"))


def test_changed_settings_conflict(llama_server, tmp_path):  # noqa: F811
    prompts = PROMPTS[:1]
    generate_answers(prompts, settings_for(llama_server), tmp_path)
    with pytest.raises(GenerationConflict, match="other settings \\(max_tokens\\).*fresh model name or delete"):
        generate_answers(prompts, settings_for(llama_server, max_tokens=8), tmp_path)
    # how answers are fetched is no conflict
    report = generate_answers(prompts, settings_for(llama_server, concurrency=1, timeout_s=30, max_attempts=2),
                              tmp_path)
    assert report.already_answered == 1
    assert os.path.exists(tmp_path / "settings.json")

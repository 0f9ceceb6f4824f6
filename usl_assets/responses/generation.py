"""Answers for a prompt pool from any OpenAI-compatible chat-completions server (`usl generate`).

`generate_answers` sends one chat completion per prompt through the official `openai` client (created once, with
`max_retries=0`: the retries are ours, so they are counted) from `settings.concurrency` threads, and appends each
answer to `<store>/answers.jsonl` as it arrives (write + flush + fsync under a lock): a process killed with SIGKILL
loses at most the requests in flight, and the next call skips every prompt answered. A torn last line is dropped
(the file truncated to its last good line). `<store>/settings.json` records the settings at first start; a call
with other settings (concurrency, timeout, attempts and backoff aside: they change no answer) raises
`GenerationConflict`.

Retries: a timeout, a connection error, HTTP 429 or 5xx is tried again, up to `max_attempts` tries, after
`backoff_s * 2**(try - 1)` s (at most 30 s; the server's Retry-After when longer, at most 60 s) times a jitter in
[0.5, 1.5) from an RNG seeded by the seed and the prompt id. Any other 4xx fails at once. An empty answer (content
empty or None) fails as "empty answer (finish_reason=...)" without a retry in the same call: at temperature 0 with
a seed the server would say it again. Each prompt's last failure is appended to `<store>/errors.jsonl`; a later
call tries failed prompts again, and a prompt answered later is no longer failed (`failed_prompts`).

`stop` (Ctrl-C): no new request starts; those in flight get `STOP_GRACE_S` to finish, then are abandoned (what
they bring is not written); the report so far is returned, and the store does not change after the return.
`write_model_file` turns a store into the generic JSONL model file, with a `.generation.json` settings sidecar.
"""

import dataclasses
import fcntl
import json
import os
import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import openai

SETTINGS_FILE = "settings.json"
ANSWERS_FILE = "answers.jsonl"
ERRORS_FILE = "errors.jsonl"
LOCK_FILE = ".lock"
# Settings that change how answers are fetched, not what they are: a resumed call may change them.
NOT_COMPARED = ("concurrency", "timeout_s", "max_attempts", "backoff_s")
MAX_BACKOFF_S = 30.0
MAX_RETRY_AFTER_S = 60.0
STOP_GRACE_S = 2.0


@dataclass(frozen=True)
class PromptToAnswer:
    prompt_id: str
    prompt: str
    history: tuple = ()  # earlier turns before `prompt`: {"role": "user"|"assistant", "content": str} dicts


@dataclass(frozen=True)
class GenerationSettings:
    endpoint: str  # base URL, e.g. http://127.0.0.1:8080/v1
    api_model: str | None = None  # model id sent to the server; None = the only id GET /models lists
    api_key_env: str | None = None  # name of the env var holding the key; None -> key "not-needed"
    max_tokens: int = 512
    temperature: float = 0.0
    seed: int = 0
    system_prompt: str | None = None
    concurrency: int = 4
    timeout_s: float = 120.0  # per request
    max_attempts: int = 4  # tries per prompt
    backoff_s: float = 1.0  # wait before the first retry; doubles with each retry

    def record(self) -> dict:
        """What is recorded with the answers: every field (the key's env var name, never the key). Call it on the
        resolved settings (`generate_answers` records `api_model` as check_endpoint resolved it)."""
        return dataclasses.asdict(self)


class EndpointError(Exception):
    """The endpoint is down or not OpenAI-compatible; the message is one line for the user."""


class GenerationConflict(ValueError):
    """The store holds a generation with other settings, or another process is writing to it."""


@dataclass
class GenerationReport:
    answered: int  # newly answered in this call
    already_answered: int  # found in the store from an earlier (interrupted) call, skipped
    failed: dict[str, str]  # prompt_id -> reason (after all attempts)
    elapsed_s: float
    stopped: bool = False  # `stop` was set before every prompt was tried

    def line(self) -> str:
        return (f"{self.answered} answered ({self.answered / max(self.elapsed_s, 1e-9):.2f}/s), "
                f"{self.already_answered} already answered, {len(self.failed)} failed in {self.elapsed_s:.1f} s"
                + (", stopped" if self.stopped else ""))


def _client(settings: GenerationSettings) -> openai.OpenAI:
    key = os.environ.get(settings.api_key_env) if settings.api_key_env else "not-needed"
    if not key:
        raise EndpointError(f"the environment variable {settings.api_key_env} (the API key) is not set")
    return openai.OpenAI(base_url=settings.endpoint, api_key=key, timeout=settings.timeout_s, max_retries=0)


def _one_line(text: object, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _status_reason(error: openai.APIStatusError) -> str:
    """`HTTP 500: <the server's message>`."""
    inner = error.body.get("error", error.body) if isinstance(error.body, dict) else error.body
    message = (inner.get("message") or inner.get("detail") or inner) if isinstance(inner, dict) else inner
    message = message or error.response.reason_phrase
    return f"HTTP {error.status_code}: {_one_line(message)}"


def _connection_reason(error: openai.APIConnectionError) -> str:
    cause = error.__cause__ or error.__context__
    return _one_line(cause or error.message)


def check_endpoint(settings: GenerationSettings) -> str:
    """The api_model to send: `settings.api_model`, or the only id GET /models lists. Raises EndpointError."""
    url = settings.endpoint
    try:  # the raw response: a body of another shape is ours to judge, not the client's to half-parse
        response = _client(settings).models.with_raw_response.list().http_response
    except openai.APIConnectionError as error:
        raise EndpointError(f"cannot reach {url}: {_connection_reason(error)}") from None
    except openai.APIStatusError as error:
        if error.status_code in (401, 403):
            raise EndpointError(f"{url} refuses the API key (GET /models: {_status_reason(error)})") from None
        raise EndpointError(f"{url} does not answer like an OpenAI-compatible server "
                            f"(GET /models: {_status_reason(error)})") from None
    try:
        ids = [model["id"] for model in response.json()["data"]]
        if not all(isinstance(model_id, str) and model_id for model_id in ids):
            raise ValueError(ids)
    except Exception:  # HTML, JSON of another shape, models without ids
        raise EndpointError(f"{url} does not answer like an OpenAI-compatible server (GET /models: no list of "
                            f"models in {_one_line(response.text, 120)!r})") from None
    if settings.api_model is not None:
        return settings.api_model
    if len(ids) != 1:
        listed = ", ".join(ids) if ids else "none"
        raise EndpointError(f"{url} serves {len(ids)} models ({listed}): pass --api-model to choose one")
    return ids[0]


def _read_jsonl(path: Path, repair: bool = False) -> list[dict]:
    """The records of a JSONL file we append to. A last line that is not valid JSON (torn by a kill) is dropped;
    with `repair` the file is truncated to its last good line (ending with a newline)."""
    if not path.exists():
        return []
    data = path.read_bytes()
    records, good_end, position = [], 0, 0
    for raw in data.split(b"\n"):
        end = position + len(raw)
        if raw.strip():
            try:
                records.append(json.loads(raw))
            except ValueError:
                if data[end:].strip():
                    raise ValueError(f"{path}: a line that is not valid JSON before the last one "
                                     f"(byte {position})") from None
                break  # the torn last line
            good_end = end
        position = end + 1
    if repair and data[good_end:] != (b"\n" if good_end else b""):
        with open(path, "r+b") as handle:
            handle.truncate(good_end)
            handle.seek(good_end)
            handle.write(b"\n" if good_end else b"")
            handle.flush()
            os.fsync(handle.fileno())
    return records


def read_answers(store: Path) -> dict[str, dict]:
    """prompt_id -> its answer record, from `<store>/answers.jsonl`."""
    return {record["prompt_id"]: record for record in _read_jsonl(Path(store) / ANSWERS_FILE)}


def failed_prompts(store: Path) -> dict[str, str]:
    """prompt_id -> reason of its latest failure, for the prompts failed and not answered since."""
    answered = read_answers(store)
    latest = {record["prompt_id"]: record["error"] for record in _read_jsonl(Path(store) / ERRORS_FILE)}
    return {prompt_id: error for prompt_id, error in latest.items() if prompt_id not in answered}


class _Writer:
    """Appends answers and failures, one durable JSON line each, under one lock, counting them in the report;
    writes nothing once closed (requests abandoned at a stop)."""

    def __init__(self, store: Path, report: "GenerationReport"):
        self.files = {"answered": open(store / ANSWERS_FILE, "ab"), "failed": open(store / ERRORS_FILE, "ab")}
        self.report, self.lock, self.closed = report, threading.Lock(), False

    def append(self, status: str, record: dict) -> bool:
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        with self.lock:
            if self.closed:
                return False
            handle = self.files[status]
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
            if status == "answered":
                self.report.answered += 1
            else:
                self.report.failed[record["prompt_id"]] = record["error"]
            return True

    def close(self) -> None:
        with self.lock:
            self.closed = True
            for handle in self.files.values():
                handle.close()


def _answer_one(client: openai.OpenAI, settings: GenerationSettings, item: PromptToAnswer,
                stop: threading.Event) -> tuple[str, dict | None]:
    """("answered", answer record), ("failed", error record) or ("stopped", None)."""
    rng = random.Random(f"{settings.seed}:{item.prompt_id}")
    messages = [{"role": "system", "content": settings.system_prompt}] if settings.system_prompt else []
    messages += [{"role": turn["role"], "content": turn["content"]} for turn in item.history]
    messages.append({"role": "user", "content": item.prompt})
    reason, attempts = "not tried", 0
    while attempts < settings.max_attempts:
        if stop.is_set():
            return "stopped", None
        attempts += 1
        wait_s = None
        started = time.monotonic()
        try:
            response = client.chat.completions.create(
                model=settings.api_model, messages=messages, max_tokens=settings.max_tokens,
                temperature=settings.temperature, seed=settings.seed)
            choice = response.choices[0]
            content = choice.message.content
            if not content:
                reason = f"empty answer (finish_reason={choice.finish_reason})"
                break
            return "answered", {"prompt_id": item.prompt_id, "output": content, "finish_reason": choice.finish_reason,
                                "api_model": response.model or settings.api_model,
                                "seconds": round(time.monotonic() - started, 3)}
        except openai.APITimeoutError:
            reason = f"timed out after {settings.timeout_s:g} s"
        except openai.APIConnectionError as error:
            reason = f"connection error: {_connection_reason(error)}"
        except openai.APIStatusError as error:
            reason = _status_reason(error)
            if error.status_code != 429 and error.status_code < 500:
                break
            retry_after = error.response.headers.get("retry-after", "")  # seconds (an HTTP date is ignored)
            wait_s = min(float(retry_after), MAX_RETRY_AFTER_S) if retry_after.replace(".", "", 1).isdigit() else 0
        except (openai.OpenAIError, AttributeError, IndexError, TypeError) as error:  # a malformed completion
            reason = _one_line(f"bad completion: {type(error).__name__}: {error}")
            break
        if attempts < settings.max_attempts:
            delay = min(settings.backoff_s * 2 ** (attempts - 1), MAX_BACKOFF_S) * (0.5 + rng.random())
            if stop.wait(max(delay, wait_s or 0.0)):
                return "stopped", None
    return "failed", {"prompt_id": item.prompt_id, "error": reason, "attempts": attempts}


def _open_store(store: Path, record: dict) -> int:
    """Creates or checks `settings.json`; returns the descriptor of the held lock file."""
    store.mkdir(parents=True, exist_ok=True)
    lock = os.open(store / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        raise GenerationConflict(f"another generation is writing to {store} right now") from None
    path = store / SETTINGS_FILE
    if path.exists():
        existing = json.loads(path.read_text(encoding="utf-8"))
        changed = sorted(key for key in record.keys() | existing.keys()
                         if key not in NOT_COMPARED and record.get(key) != existing.get(key))
        if changed:
            os.close(lock)
            raise GenerationConflict(f"{store} holds a generation with other settings ({', '.join(changed)}): "
                                     "pass a fresh model name or delete that folder")
    else:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    return lock


def generate_answers(prompts: list[PromptToAnswer], settings: GenerationSettings, store: Path,
                     progress: Callable[[int, int, int, float], None] | None = None,
                     stop: threading.Event | None = None) -> GenerationReport:
    """Answers every prompt not answered in `store` yet (see the module's docstring). `progress(done, total,
    errors, rate_per_s)` is called once at start and after each prompt finishes; done counts the prompts answered
    before this call, errors the failures of this call, rate the prompts finished per second in this call."""
    started = time.monotonic()
    store, stop = Path(store), stop or threading.Event()
    if len({item.prompt_id for item in prompts}) != len(prompts):
        raise ValueError("a prompt id appears twice in the prompts to answer")
    settings = dataclasses.replace(settings, api_model=check_endpoint(settings))
    lock = _open_store(store, settings.record())
    try:
        answered_before = {record["prompt_id"] for record in _read_jsonl(store / ANSWERS_FILE, repair=True)}
        _read_jsonl(store / ERRORS_FILE, repair=True)
        todo = [item for item in prompts if item.prompt_id not in answered_before]
        already = len(prompts) - len(todo)
        report = GenerationReport(answered=0, already_answered=already, failed={}, elapsed_s=0.0)
        if progress:
            progress(already, len(prompts), 0, 0.0)
        writer = _Writer(store, report)
        try:
            _run_pool(todo, settings, stop, writer, progress, len(prompts), started)
        finally:
            writer.close()  # the report is final: an abandoned request writes nothing now
    finally:
        os.close(lock)
    report.stopped = stop.is_set() and report.answered + len(report.failed) < len(todo)
    report.elapsed_s = time.monotonic() - started
    return report


def _run_pool(todo, settings, stop, writer, progress, total, started) -> None:
    """Daemon threads (a Ctrl-C'd process never waits for them) take prompts from a queue and write what they
    get; this thread reports progress, and returns at the end or `STOP_GRACE_S` after `stop`."""
    client = _client(settings)
    work, finished = queue.Queue(), queue.Queue()
    for item in todo:
        work.put(item)

    def worker() -> None:
        while not stop.is_set():
            try:
                item = work.get_nowait()
            except queue.Empty:
                return
            try:
                status, record = _answer_one(client, settings, item, stop)
                finished.put(status if status != "stopped" and writer.append(status, record) else "stopped")
            except BaseException as error:  # a bug, or the disk is full: the main thread raises it
                finished.put(error)
                return

    threads = [threading.Thread(target=worker, daemon=True, name=f"usl-generate-{n}")
               for n in range(min(settings.concurrency, len(todo)))]
    for thread in threads:
        thread.start()
    count, stop_deadline, report = 0, None, writer.report
    while count < len(todo):
        if stop.is_set():
            stop_deadline = stop_deadline or time.monotonic() + STOP_GRACE_S
            if time.monotonic() >= stop_deadline or not any(thread.is_alive() for thread in threads):
                return
        try:
            status = finished.get(timeout=0.2)
        except queue.Empty:
            continue
        count += 1
        if isinstance(status, BaseException):
            stop.set()
            raise status
        if progress and status != "stopped":
            done = report.answered + len(report.failed)
            progress(report.already_answered + done, total, len(report.failed),
                     done / max(time.monotonic() - started, 1e-9))


def write_model_file(store: Path, prompt_ids: list[str], target: Path, model: str) -> tuple[int, int]:
    """Writes the generic JSONL model file for `model`: `{"prompt_id", "output", "generator"}` per answered prompt
    and `{"prompt_id", "error", "generator"}` per failed one, in the order of prompt_ids (prompts never tried are
    left out), atomically; and `target.with_suffix(".generation.json")`, the settings with the counts. Returns
    (answered, failed)."""
    store, target = Path(store), Path(target)
    answers, failures = read_answers(store), failed_prompts(store)
    lines, answered, failed = [], 0, 0
    for prompt_id in prompt_ids:
        if prompt_id in answers:
            lines.append({"prompt_id": prompt_id, "output": answers[prompt_id]["output"], "generator": model})
            answered += 1
        elif prompt_id in failures:
            lines.append({"prompt_id": prompt_id, "error": failures[prompt_id], "generator": model})
            failed += 1
    sidecar = {**json.loads((store / SETTINGS_FILE).read_text(encoding="utf-8")), "answered": answered,
               "failed": failed, "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    target.parent.mkdir(parents=True, exist_ok=True)
    # The sidecar first: whoever sees the model file finds its settings beside it.
    _write_atomically(target.with_suffix(".generation.json"), json.dumps(sidecar, indent=2) + "\n")
    _write_atomically(target, "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
    return answered, failed


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")  # a suffix the inbox's sensor skips
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)

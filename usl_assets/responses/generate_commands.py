"""`usl generate`: one answer per prompt of a user pool from an OpenAI-compatible chat-completions server
(generation.py), stored as it arrives under `$USL_HOME/generations/<pool>/<model>/` so an interrupted generation
resumes where it stopped, then added to the pool as `usl add-model` adds a file (prompts that still failed are
quarantined as `generation_failed` with their reason)."""

import argparse
import os
import threading
import time
from pathlib import Path

from usl_assets.launch import add_verbose_flag
from usl_assets.resources import UslHome
from usl_assets.responses import endpoint_models, pools
from usl_assets.settings import UslConfigError
from usl_assets.slot_wait import add_wait_timeout_flag

PROGRESS_EVERY_S = 5.0


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pool", required=True, help="a user pool (`usl add-pool`)")
    parser.add_argument("--model", required=True, help="the name the model gets in the pool and on the leaderboard")
    parser.add_argument("--endpoint", required=True,
                        help="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1 (llama.cpp's "
                             "server, vLLM, Ollama's /v1, a hosted API)")
    parser.add_argument("--api-model", default=None,
                        help="the model id sent to the server (default: the only one its /models lists)")
    parser.add_argument("--api-key-env", default=None,
                        help="the environment variable holding the API key (never the key itself)")
    parser.add_argument("--max-tokens", type=_positive_int, default=512, help="per answer (default %(default)s)")
    parser.add_argument("--temperature", type=float, default=0.0, help="default %(default)s")
    parser.add_argument("--seed", type=int, default=0, help="sent with every request (default %(default)s)")
    parser.add_argument("--system-prompt", default=None, help="a system message before every prompt")
    parser.add_argument("--concurrency", type=_positive_int, default=4,
                        help="requests in flight at once (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default %(default)s)")
    parser.add_argument("--max-attempts", type=_positive_int, default=4,
                        help="tries per prompt on 429, 5xx, timeouts and dropped connections (default %(default)s)")
    parser.add_argument("--replace", action="store_true",
                        help="replace a model of that name that is in the pool already (its rows are archived)")
    parser.add_argument("--no-leaderboards", action="store_true",
                        help="do not rebuild the leaderboards after adding the model")
    parser.add_argument("--responses-only", action="store_true",
                        help="load the answers only, not their CRM rewards nor the leaderboards")
    add_wait_timeout_flag(parser)
    add_verbose_flag(parser)
    parser.set_defaults(handler=generate)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def generate(args: argparse.Namespace) -> int:
    from usl_assets.responses import generation

    home = UslHome().root()
    endpoint_models.check_target(home, args.pool, args.model)
    if args.model in pools.accepted_model_files(home, args.pool) and not args.replace:
        raise UslConfigError(f"pool {args.pool} has a model {args.model} already: pass --replace, or another --model")
    if args.api_key_env and not os.environ.get(args.api_key_env):
        raise UslConfigError(f"--api-key-env {args.api_key_env}: that environment variable is not set")
    settings = generation.GenerationSettings(
        endpoint=args.endpoint, api_model=args.api_model, api_key_env=args.api_key_env, max_tokens=args.max_tokens,
        temperature=args.temperature, seed=args.seed, system_prompt=args.system_prompt,
        concurrency=args.concurrency, timeout_s=args.timeout, max_attempts=args.max_attempts)
    store = endpoint_models.generation_store(home, args.pool, args.model)
    print(f"generating the answers of {args.model} to pool {args.pool} from {args.endpoint} (temperature "
          f"{args.temperature}, at most {args.max_tokens} tokens, {args.concurrency} at a time); each answer is kept "
          f"in {store} as it arrives")
    try:
        done = _run(lambda progress, stop: endpoint_models.answer_pool(home, args.pool, args.model, settings,
                                                                        progress, stop), store)
    except (generation.EndpointError, generation.GenerationConflict) as error:
        raise UslConfigError(str(error)) from error
    print(done.report.line())
    for prompt_id, reason in sorted(generation.failed_prompts(store).items())[:5]:
        print(f"  failed {prompt_id}: {reason}")
    if done.answered == 0:
        raise UslConfigError(f"no prompt was answered ({done.failed} failed): the model was not added; rerun the "
                             "same command once the endpoint answers (it retries the failed prompts)")
    print(f"{done.answered:,} answered, {done.failed:,} failed (quarantined as generation_failed); adding "
          f"{args.model} to pool {args.pool}")
    from usl_assets.responses.commands import add_model

    return add_model(argparse.Namespace(
        pool=args.pool, file=done.model_file, model=args.model, responses_only=args.responses_only,
        replace=args.replace, no_leaderboards=args.no_leaderboards, wait_timeout=args.wait_timeout,
        verbose=getattr(args, "verbose", False)))


def _run(answer, store: Path):
    """answer(progress, stop) in a thread, so that Ctrl-C / SIGTERM reach this one: then no new request starts,
    the answers so far stay stored, and the command ends with exit 130 (rerun it to resume)."""
    stop, outcome = threading.Event(), {}
    last = {"at": 0.0}

    def progress(done: int, total: int, errors: int, rate: float) -> None:
        now = time.monotonic()
        if done == total or now - last["at"] >= PROGRESS_EVERY_S:
            last["at"] = now
            print(f"  {done:,}/{total:,} prompts done, {errors:,} failed, {rate:.2f} answers/s", flush=True)

    def work() -> None:
        try:
            outcome["done"] = answer(progress, stop)
        except BaseException as error:  # noqa: BLE001 - handed to the main thread
            outcome["error"] = error

    worker = threading.Thread(target=work, name="usl-generate", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
    except KeyboardInterrupt:
        stop.set()
        worker.join(30)
        print(f"generation stopped; the answers so far are kept in {store}: rerun the same command to resume")
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["done"]

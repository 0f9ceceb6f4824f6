"""A user pool's answers from an OpenAI-compatible endpoint, as `usl generate` and the `endpoint_models` asset get
them: every prompt of the pool answered (generation.py; resumed from `$USL_HOME/generations/<pool>/<model>/`),
then written as the pool's generic model file with the settings beside it. Plain functions; no Dagster.

Models declared for the asset live in `$USL_HOME/endpoint_models.yaml`:

    models:
      - {pool: helpdesk, model: smollm2-brief, endpoint: "http://127.0.0.1:8080/v1", temperature: 0.0,
         max_tokens: 256, system_prompt: "Answer in two sentences."}
"""

import json
from dataclasses import dataclass, fields
from pathlib import Path

import yaml

from usl_assets.responses import pools, user_pools
from usl_assets.settings import UslConfigError

DECLARED_FILE = "endpoint_models.yaml"


@dataclass(frozen=True)
class PoolGeneration:
    pool: str
    model: str
    report: object  # generation.GenerationReport
    model_file: Path
    answered: int
    failed: int


def generation_store(home_root: Path, pool: str, model: str) -> Path:
    return Path(home_root) / "generations" / pool / model


def check_target(home_root: Path, pool: str, model: str) -> None:
    """A user pool and a usable model name, else UslConfigError (one line)."""
    pools.check_pool(pool, home_root)
    if pool in pools.POOLS:
        raise UslConfigError(f"{pool} is a public pool: answers from an endpoint go to a user pool "
                             "(`usl add-pool`); add a public pool's model with `usl add-model`")
    try:
        pools.check_model_name(model)
    except pools.ResponseFileError as error:
        raise UslConfigError(str(error)) from error


def answer_pool(home_root: Path, pool: str, model: str, settings, progress=None, stop=None) -> PoolGeneration:
    """Checks the endpoint (EndpointError: one line), answers every prompt not answered yet, and writes the
    model file `<store>/<model>.jsonl` (failed prompts as `error` records) with its `.generation.json`."""
    from usl_assets.responses import generation

    check_target(home_root, pool, model)
    rows = user_pools.pool_prompt_rows(home_root, pool)
    prompts = [generation.PromptToAnswer(row.prompt_id, row.prompt, _history(row.history))
               for row in rows.itertuples()]
    store = generation_store(home_root, pool, model)
    report = generation.generate_answers(prompts, settings, store, progress=progress, stop=stop)
    model_file = store / f"{model}.jsonl"
    answered, failed = generation.write_model_file(store, list(rows["prompt_id"]), model_file, model)
    return PoolGeneration(pool, model, report, model_file, answered, failed)


def declared_models(home_root: Path) -> list[dict]:
    """The entries of `$USL_HOME/endpoint_models.yaml` (none when the file is absent); each has at least pool,
    model and endpoint, and only GenerationSettings' fields besides."""
    from usl_assets.responses.generation import GenerationSettings

    path = Path(home_root) / DECLARED_FILE
    if not path.is_file():
        return []
    try:
        found = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise UslConfigError(f"{path}: not valid YAML ({str(error).splitlines()[0]})") from error
    entries = found.get("models") if isinstance(found, dict) else None
    if not isinstance(entries, list):
        raise UslConfigError(f"{path}: expected `models:` with a list of {{pool, model, endpoint, …}}")
    allowed = {f.name for f in fields(GenerationSettings)} | {"pool", "model"}
    for number, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict) or not {"pool", "model", "endpoint"} <= set(entry):
            raise UslConfigError(f"{path}: entry {number} needs pool, model and endpoint")
        unknown = set(entry) - allowed
        if unknown:
            raise UslConfigError(f"{path}: entry {number} has unknown keys {sorted(unknown)}")
    return entries


def settings_of(entry: dict):
    from usl_assets.responses.generation import GenerationSettings

    return GenerationSettings(**{k: v for k, v in entry.items() if k not in ("pool", "model")})


def _history(value) -> tuple:
    return tuple(json.loads(value)) if isinstance(value, str) else ()

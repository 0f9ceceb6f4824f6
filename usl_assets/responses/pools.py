"""Response pools: many LLMs answering the same prompts: the public MT-Bench and AlpacaEval, read from their
public formats, and the user pools of user_pools.py (`usl add-pool`), whose models come in the generic format.

Plain functions over paths and DataFrames; usl_assets/responses/assets.py wires them into Dagster. Here: names and
partition keys, where each model's file lives, the two formats, the pools' prompts and one model's responses;
the scoring sample is in sampling.py, the warehouse tables in tables.py.

- A model is one partition of the DynamicPartitionsDefinition "models"; its key is `<pool>:<model>`
  (`partition_key`). Model names are `[A-Za-z0-9][A-Za-z0-9._+-]*` (at most 100 characters, no `..`), so a key
  never holds Dagster's forbidden substrings (`...`, control characters) nor `,` `|` `/` `[` `]`.
- A model's file: `$USL_HOME/accepted/<pool>/<model>.<ext>` (added through the inbox or `usl add-model`) wins over
  the public file `<data>/responses/<pool>/...` of the same name.
- MT-Bench has two turns: the first user turn is the prompt and the first answer the response (what the CRM
  scores); the whole dialogue (both turns) is kept in `conversation`, the second user turn in the prompt's
  `followup`.
- The generic format (user pools): JSONL, one `{"prompt_id": ..., "output": ...}` a line (or `"prompt"`, the
  prompt's text, instead of its id); `{"prompt_id": ..., "error": ...}` records a prompt the model failed to
  answer (`usl generate`), quarantined with that reason.
- response_hash is the sha256 of what the CRM reads, the (prompt, response) pair, so a reward cached by it can
  never be reused for the same text answering another prompt.
"""

import gzip
import hashlib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pandas as pd

from usl_assets.responses import user_pools
from usl_assets.settings import UslConfigError, usl_home

POOLS = user_pools.PUBLIC_POOLS  # the public pools; user pools are registered under $USL_HOME/pools/
PARTITION_SEPARATOR = ":"
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")
# File name stems that name the format, not the model (AlpacaEval writes results/<model>/model_outputs.json).
GENERIC_STEMS = {"model_outputs", "model_answer", "outputs", "answers"}
ALPACA_SUFFIXES = (".json", ".json.gz")
MT_BENCH_SUFFIXES = (".jsonl",)
GENERIC_SUFFIXES = (".jsonl",)

PROMPT_COLUMNS = ["pool", "prompt_id", "prompt", "category", "followup", "topic", "history"]
RESPONSE_COLUMNS = [
    "pool", "prompt_id", "prompt", "model", "response", "scenario", "scenario_group", "category",
    "length_chars", "response_hash", "conversation",
]
QUARANTINE_COLUMNS = ["pool", "model", "prompt_id", "rule", "detail", "record"]


class ResponseFileError(ValueError):
    """A model's file cannot be used at all (does not parse, wrong shape); the message says why in one line."""


# ---------------------------------------------------------------- names and partition keys


def check_pool(pool: str, usl_home_root: Path | None = None) -> str:
    """A public pool or a registered user pool (under usl_home_root, default USL_HOME)."""
    if pool in POOLS:
        return pool
    registered = user_pools.registered_pools(usl_home() if usl_home_root is None else usl_home_root)
    if pool not in registered:
        raise UslConfigError(f"unknown pool {pool!r}: choose one of {', '.join([*POOLS, *registered])} "
                             "(`usl add-pool` registers your own)")
    return pool


def check_pool_name(pool: str) -> str:
    """The name's form only (partition keys of pools that may since have been archived)."""
    if pool not in POOLS and not user_pools.POOL_NAME.fullmatch(pool or ""):
        raise UslConfigError(f"{pool!r} is not a pool name")
    return pool


def pool_format(pool: str) -> str:
    """How a pool's model files are written: `alpaca_eval`, `mt_bench` or `generic` (every user pool)."""
    return pool if pool in POOLS else "generic"


def model_file_suffixes(pool: str) -> tuple[str, ...]:
    return {"alpaca_eval": ALPACA_SUFFIXES, "mt_bench": MT_BENCH_SUFFIXES}.get(pool, GENERIC_SUFFIXES)


def check_model_name(model: str) -> str:
    if not MODEL_NAME.fullmatch(model or "") or ".." in model:
        raise ResponseFileError(
            f"model name {model!r} is not allowed: use letters, digits and . _ + - (at most 100, no '..')"
        )
    return model


def partition_key(pool: str, model: str) -> str:
    return f"{check_pool_name(pool)}{PARTITION_SEPARATOR}{check_model_name(model)}"


def split_partition_key(key: str) -> tuple[str, str]:
    pool, separator, model = key.partition(PARTITION_SEPARATOR)
    if not separator:
        raise UslConfigError(f"partition key {key!r} is not <pool>{PARTITION_SEPARATOR}<model>")
    try:
        return check_pool_name(pool), check_model_name(model)
    except ResponseFileError as error:
        raise UslConfigError(str(error)) from error


# ---------------------------------------------------------------- where each model's file lives


def public_pool_dir(data_root: Path, pool: str) -> Path | None:
    if pool not in POOLS:
        return None
    return data_root / "responses" / pool / ("model_answer" if pool == "mt_bench" else "")


def model_name_of_file(path: Path) -> str:
    name = path.name
    for suffix in ALPACA_SUFFIXES[::-1] + MT_BENCH_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def _model_files(folder: Path | None, pool: str) -> dict[str, Path]:
    suffixes = model_file_suffixes(pool)
    if folder is None or not folder.is_dir():
        return {}
    return {model_name_of_file(p): p for p in sorted(folder.iterdir()) if p.is_file() and p.name.endswith(suffixes)}


def public_model_files(data_root: Path, pool: str) -> dict[str, Path]:
    return _model_files(public_pool_dir(data_root, pool), pool)


def accepted_dir(usl_home_root: Path, pool: str) -> Path:
    return usl_home_root / "accepted" / pool


def accepted_model_files(usl_home_root: Path, pool: str) -> dict[str, Path]:
    return _model_files(accepted_dir(usl_home_root, pool), pool)


def model_file(data_root: Path, usl_home_root: Path, pool: str, model: str) -> Path:
    """The file holding a model's answers: an accepted (user-added) file wins over the public one."""
    found = accepted_model_files(usl_home_root, pool).get(model) or public_model_files(data_root, pool).get(model)
    if found is None:
        public = public_pool_dir(data_root, pool)
        raise UslConfigError(f"no file for model {model!r} in pool {pool}: {accepted_dir(usl_home_root, pool)}"
                             + (f" and {public} have none" if public else " has none"))
    return found


def public_partition_keys(data_root: Path) -> list[str]:
    return [partition_key(pool, model) for pool in POOLS for model in public_model_files(data_root, pool)]


# ---------------------------------------------------------------- reading the two formats


def read_model_records(pool: str, path: Path) -> list:
    """Every record of a model's file; ResponseFileError when the file as a whole is unusable."""
    try:
        if pool_format(pool) == "alpaca_eval":
            return _read_json_list(path)
        return _read_jsonl(path)
    except (UnicodeDecodeError, OSError, EOFError) as error:
        raise ResponseFileError(f"{path.name}: cannot be read ({type(error).__name__}: {error})") from error
    except RecursionError as error:
        raise ResponseFileError(f"{path.name}: JSON nested too deeply to parse") from error


def _open_text(path: Path):
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def _read_json_list(path: Path) -> list:
    with _open_text(path) as handle:
        try:
            records = json.load(handle)
        except json.JSONDecodeError as error:
            raise ResponseFileError(f"{path.name}: not valid JSON ({error})") from error
    if not isinstance(records, list):
        raise ResponseFileError(f"{path.name}: expected a JSON list of {{instruction, output, generator}} objects")
    return records


def _read_jsonl(path: Path) -> list:
    records = []
    with _open_text(path) as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise ResponseFileError(f"{path.name}: line {number} is not valid JSON ({error})") from error
    return records


# ---------------------------------------------------------------- the pools' prompts


def alpaca_prompt_id(instruction: str) -> str:
    """AlpacaEval has no ids; the instruction's text identifies it in every model's file."""
    return "ae-" + hashlib.sha256(instruction.encode("utf-8")).hexdigest()[:16]


def alpaca_prompts(data_root: Path) -> pd.DataFrame:
    """The union of the instructions in every public AlpacaEval file (each holds the same 805)."""
    return pd.DataFrame(list(_alpaca_prompt_rows(Path(data_root))), columns=PROMPT_COLUMNS)


@lru_cache(maxsize=2)
def _alpaca_prompt_rows(data_root: Path) -> tuple[tuple, ...]:
    # Cached: the public folder is read-only, and the inbox validates every new file against these prompts.
    seen: dict[str, str] = {}
    for path in public_model_files(data_root, "alpaca_eval").values():
        for record in read_model_records("alpaca_eval", path):
            if isinstance(record, dict) and isinstance(record.get("instruction"), str):
                seen.setdefault(record["instruction"], str(record.get("dataset") or "unknown"))
    return tuple(("alpaca_eval", alpaca_prompt_id(text), text, dataset, None, None, None)
                 for text, dataset in seen.items())


def mt_bench_prompts(data_root: Path) -> pd.DataFrame:
    rows = []
    for record in _read_jsonl(data_root / "responses" / "mt_bench" / "question.jsonl"):
        turns = record["turns"]
        followup = turns[1] if len(turns) > 1 else None
        rows.append(("mt_bench", str(record["question_id"]), turns[0], record["category"], followup, None, None))
    return pd.DataFrame(rows, columns=PROMPT_COLUMNS)


def user_pool_prompts(usl_home_root: Path, pool: str) -> pd.DataFrame:
    """A user pool's prompts; `category` is the user's topic, else "user"."""
    rows = user_pools.pool_prompt_rows(usl_home_root, pool)
    return rows.assign(pool=pool, category=rows["topic"].fillna("user"), followup=None)[PROMPT_COLUMNS]


def prompts_of_pool(data_root: Path, usl_home_root: Path, pool: str) -> pd.DataFrame:
    if pool == "alpaca_eval":
        return alpaca_prompts(data_root)
    if pool == "mt_bench":
        return mt_bench_prompts(data_root)
    return user_pool_prompts(usl_home_root, pool)


def pool_prompts(data_root: Path, usl_home_root: Path | None = None) -> pd.DataFrame:
    """Every prompt of the public pools and of the user pools registered under usl_home_root (if given)."""
    names = [*POOLS, *(user_pools.registered_pools(usl_home_root) if usl_home_root is not None else {})]
    frame = pd.concat([prompts_of_pool(data_root, usl_home_root, pool) for pool in names], ignore_index=True)
    return frame.sort_values(["pool", "prompt_id"], ignore_index=True)


def load_scenario_tagger(usl_home_root: Path):
    """The preferences stage's scenario tagger (asset `scenario_tagger`), imported when first needed."""
    try:
        from usl_assets.preferences.tagger import load_tagger
    except ImportError as error:
        raise UslConfigError(f"the scenario tagger is not available ({error}): materialize scenario_tagger") from error
    return load_tagger(usl_home_root)


def tag_prompts(prompts: pd.DataFrame, tagger) -> pd.DataFrame:
    """Adds scenario, scenario_group and tagger_confidence from the tagger (MT-Bench: its first turn). A user's
    topic is kept as given: it is the prompt's scenario group (the page's topic columns), the tagger's scenario
    within it."""
    tags = tagger.predict(prompts["prompt"].tolist()).reset_index(drop=True)
    tagged = prompts.reset_index(drop=True).copy()
    tagged["scenario"] = tags["scenario"].astype(str)
    topic = tagged["topic"] if "topic" in tagged else pd.Series(None, index=tagged.index, dtype=object)
    tagged["scenario_group"] = topic.where(topic.notna(), tags["scenario_group"].astype(str))
    tagged["tagger_confidence"] = tags["confidence"].astype(float)
    return tagged


# ---------------------------------------------------------------- one model's responses


def content_hash(prompt: str, response: str) -> str:
    return hashlib.sha256(json.dumps([prompt, response], ensure_ascii=False).encode("utf-8")).hexdigest()


@dataclass
class ModelResponses:
    pool: str
    model: str
    source: Path
    responses: pd.DataFrame
    quarantine: pd.DataFrame
    generation: dict | None = None  # how `usl generate` made the answers (its sidecar file), else None


def generation_sidecar(model_path: Path) -> Path:
    """`<model>.generation.json` beside a model file: the settings `usl generate` answered with."""
    return model_path.with_name(model_name_of_file(model_path) + ".generation.json")


def load_model_responses(pool: str, model: str, path: Path, prompts: pd.DataFrame) -> ModelResponses:
    """A model's answers to its pool's prompts; every unusable row and every unanswered prompt is quarantined."""
    records = read_model_records(pool, path)
    pool_prompts_frame = prompts[prompts["pool"] == pool].set_index("prompt_id")
    parse = {"alpaca_eval": _alpaca_row, "mt_bench": _mt_bench_row}.get(pool, _generic_row)
    by_text = {text: pid for pid, text in pool_prompts_frame["prompt"].items()}
    answered, bad = {}, []
    for record in records:
        prompt_id, turns, problem = parse(record, pool_prompts_frame, by_text)
        if problem is None and prompt_id in answered:
            problem = ("duplicate_prompt", "a second answer to the same prompt; the first is kept")
        if problem is not None:
            bad.append((pool, model, prompt_id, problem[0], problem[1], _as_json(record)))
            continue
        answered[prompt_id] = turns
    seen = set(answered) | {row[2] for row in bad if row[2] is not None}
    for prompt_id in pool_prompts_frame.index.difference(list(seen)):
        bad.append((pool, model, prompt_id, "missing_response", "the file has no answer to this prompt", None))
    rows = [_response_row(pool, model, pid, turns, pool_prompts_frame.loc[pid]) for pid, turns in answered.items()]
    for pid, turns in answered.items():
        if pool == "mt_bench" and len(turns) < 2:
            bad.append((pool, model, pid, "empty_second_turn", "no usable second answer; the first turn is kept", None))
    responses = pd.DataFrame(rows, columns=RESPONSE_COLUMNS).sort_values("prompt_id", ignore_index=True)
    sidecar = generation_sidecar(path)
    generation = json.loads(sidecar.read_text(encoding="utf-8")) if sidecar.is_file() else None
    return ModelResponses(pool, model, path, responses, pd.DataFrame(bad, columns=QUARANTINE_COLUMNS), generation)


def _alpaca_row(record, prompts: pd.DataFrame, by_text: dict) -> tuple[str | None, list, tuple | None]:
    if not isinstance(record, dict):
        return None, [], ("not_an_object", f"expected an object, got {type(record).__name__}")
    instruction = record.get("instruction")
    if not isinstance(instruction, str) or instruction not in by_text:
        return None, [], ("unknown_prompt", "instruction is not one of the pool's prompts")
    prompt_id = by_text[instruction]
    problem = _answer_problem(record.get("output"), "output")
    return prompt_id, [record.get("output")], problem


def _generic_row(record, prompts: pd.DataFrame, by_text: dict) -> tuple[str | None, list, tuple | None]:
    if not isinstance(record, dict):
        return None, [], ("not_an_object", f"expected an object, got {type(record).__name__}")
    raw_id = record.get("prompt_id")
    if raw_id is not None and not isinstance(raw_id, bool):
        prompt_id = str(raw_id)
        if prompt_id not in prompts.index:
            return None, [], ("unknown_prompt", f"prompt_id {raw_id!r} is not one of the pool's prompts")
    elif isinstance(record.get("prompt"), str) and record["prompt"] in by_text:
        prompt_id = by_text[record["prompt"]]
    else:
        return None, [], ("unknown_prompt", "neither prompt_id nor prompt names one of the pool's prompts")
    if "error" in record and "output" not in record:
        return prompt_id, [], ("generation_failed", str(record["error"])[:500])
    return prompt_id, [record.get("output")], _answer_problem(record.get("output"), "output")


def _mt_bench_row(record, prompts: pd.DataFrame, by_text: dict) -> tuple[str | None, list, tuple | None]:
    if not isinstance(record, dict):
        return None, [], ("not_an_object", f"expected an object, got {type(record).__name__}")
    prompt_id = str(record.get("question_id"))
    if prompt_id not in prompts.index:
        return None, [], ("unknown_prompt", f"question_id {record.get('question_id')!r} is not an MT-Bench question")
    try:
        turns = record["choices"][0]["turns"]
    except (KeyError, IndexError, TypeError):
        return prompt_id, [], ("no_turns", "choices[0].turns is missing")
    if not isinstance(turns, list) or not turns:
        return prompt_id, [], ("no_turns", "choices[0].turns is not a non-empty list")
    problem = _answer_problem(turns[0], "first turn")
    usable = [turns[0]] + ([turns[1]] if len(turns) > 1 and _answer_problem(turns[1], "") is None else [])
    return prompt_id, usable, problem


# As preference texts (preferences/validation.py): the longest real answer in either pool has 15,834 characters.
MAX_RESPONSE_CHARS = 20_000


def _answer_problem(answer, what: str) -> tuple | None:
    if not isinstance(answer, str):
        return "not_a_string", f"{what} is {type(answer).__name__}, not text"
    if not answer.strip():
        return "empty_response", f"{what} is empty"
    if len(answer) > MAX_RESPONSE_CHARS:
        return "response_too_long", f"{what} has {len(answer):,} characters (limit {MAX_RESPONSE_CHARS:,})"
    return None


def _response_row(pool: str, model: str, prompt_id: str, turns: list, prompt: pd.Series) -> tuple:
    response = turns[0]
    history = json.loads(prompt["history"]) if isinstance(prompt.get("history"), str) else []
    conversation = [*history, {"role": "user", "content": prompt["prompt"]}, {"role": "assistant", "content": response}]
    if len(turns) > 1 and isinstance(prompt.get("followup"), str):
        conversation += [{"role": "user", "content": prompt["followup"]}, {"role": "assistant", "content": turns[1]}]
    return (
        pool, prompt_id, prompt["prompt"], model, response, prompt["scenario"], prompt["scenario_group"],
        prompt["category"], len(response), content_hash(prompt["prompt"], response), conversation,
    )


def _as_json(record) -> str:
    return json.dumps(record, ensure_ascii=False, default=str)[:20000]

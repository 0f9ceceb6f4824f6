"""Response pools: many LLMs answering the same prompts (MT-Bench, AlpacaEval), read from their public formats.

Plain functions over paths and DataFrames; usl_assets/responses/assets.py wires them into Dagster.

- A model is one partition of the DynamicPartitionsDefinition "models"; its key is `<pool>:<model>`
  (`partition_key`). Model names are `[A-Za-z0-9][A-Za-z0-9._+-]*` (at most 100 characters, no `..`), so a key
  never holds Dagster's forbidden substrings (`...`, control characters) nor `,` `|` `/` `[` `]`.
- A model's file: `$USL_HOME/accepted/<pool>/<model>.<ext>` (added through the inbox or `usl add-model`) wins over
  the public file `<data>/responses/<pool>/...` of the same name.
- MT-Bench has two turns: the first user turn is the prompt and the first answer the response (what the CRM
  scores); the whole dialogue (both turns) is kept in `conversation`, the second user turn in the prompt's
  `followup`.
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

from usl_assets.settings import UslConfigError

POOLS = ("alpaca_eval", "mt_bench")
PARTITION_SEPARATOR = ":"
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")
# File name stems that name the format, not the model (AlpacaEval writes results/<model>/model_outputs.json).
GENERIC_STEMS = {"model_outputs", "model_answer", "outputs", "answers"}
ALPACA_SUFFIXES = (".json", ".json.gz")
MT_BENCH_SUFFIXES = (".jsonl",)

PROMPT_COLUMNS = ["pool", "prompt_id", "prompt", "category", "followup"]
RESPONSE_COLUMNS = [
    "pool", "prompt_id", "prompt", "model", "response", "scenario", "scenario_group", "category",
    "length_chars", "response_hash", "conversation",
]
QUARANTINE_COLUMNS = ["pool", "model", "prompt_id", "rule", "detail", "record"]


class ResponseFileError(ValueError):
    """A model's file cannot be used at all (does not parse, wrong shape); the message says why in one line."""


# ---------------------------------------------------------------- names and partition keys


def check_pool(pool: str) -> str:
    if pool not in POOLS:
        raise UslConfigError(f"unknown pool {pool!r}: choose one of {', '.join(POOLS)}")
    return pool


def check_model_name(model: str) -> str:
    if not MODEL_NAME.fullmatch(model or "") or ".." in model:
        raise ResponseFileError(
            f"model name {model!r} is not allowed: use letters, digits and . _ + - (at most 100, no '..')"
        )
    return model


def partition_key(pool: str, model: str) -> str:
    return f"{check_pool(pool)}{PARTITION_SEPARATOR}{check_model_name(model)}"


def split_partition_key(key: str) -> tuple[str, str]:
    pool, separator, model = key.partition(PARTITION_SEPARATOR)
    if not separator:
        raise UslConfigError(f"partition key {key!r} is not <pool>{PARTITION_SEPARATOR}<model>")
    try:
        return check_pool(pool), check_model_name(model)
    except ResponseFileError as error:
        raise UslConfigError(str(error)) from error


# ---------------------------------------------------------------- where each model's file lives


def public_pool_dir(data_root: Path, pool: str) -> Path:
    return data_root / "responses" / pool / ("model_answer" if pool == "mt_bench" else "")


def model_name_of_file(path: Path) -> str:
    name = path.name
    for suffix in ALPACA_SUFFIXES[::-1] + MT_BENCH_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def _model_files(folder: Path, pool: str) -> dict[str, Path]:
    suffixes = MT_BENCH_SUFFIXES if pool == "mt_bench" else ALPACA_SUFFIXES
    if not folder.is_dir():
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
        raise UslConfigError(
            f"no file for model {model!r} in pool {pool}: neither {accepted_dir(usl_home_root, pool)} nor "
            f"{public_pool_dir(data_root, pool)} has one"
        )
    return found


def public_partition_keys(data_root: Path) -> list[str]:
    return [partition_key(pool, model) for pool in POOLS for model in public_model_files(data_root, pool)]


# ---------------------------------------------------------------- reading the two formats


def read_model_records(pool: str, path: Path) -> list:
    """Every record of a model's file; ResponseFileError when the file as a whole is unusable."""
    try:
        if pool == "mt_bench":
            return _read_jsonl(path)
        return _read_json_list(path)
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
    return tuple(("alpaca_eval", alpaca_prompt_id(text), text, dataset, None) for text, dataset in seen.items())


def mt_bench_prompts(data_root: Path) -> pd.DataFrame:
    rows = []
    for record in _read_jsonl(data_root / "responses" / "mt_bench" / "question.jsonl"):
        turns = record["turns"]
        followup = turns[1] if len(turns) > 1 else None
        rows.append(("mt_bench", str(record["question_id"]), turns[0], record["category"], followup))
    return pd.DataFrame(rows, columns=PROMPT_COLUMNS)


def pool_prompts(data_root: Path) -> pd.DataFrame:
    frame = pd.concat([alpaca_prompts(data_root), mt_bench_prompts(data_root)], ignore_index=True)
    return frame.sort_values(["pool", "prompt_id"], ignore_index=True)


def load_scenario_tagger(usl_home_root: Path):
    """The preferences stage's scenario tagger (asset `scenario_tagger`), imported when first needed."""
    try:
        from usl_assets.preferences.tagger import load_tagger
    except ImportError as error:
        raise UslConfigError(f"the scenario tagger is not available ({error}): materialize scenario_tagger") from error
    return load_tagger(usl_home_root)


def tag_prompts(prompts: pd.DataFrame, tagger) -> pd.DataFrame:
    """Adds scenario, scenario_group and tagger_confidence from the tagger (MT-Bench: its first turn)."""
    tags = tagger.predict(prompts["prompt"].tolist()).reset_index(drop=True)
    tagged = prompts.reset_index(drop=True).copy()
    tagged["scenario"] = tags["scenario"].astype(str)
    tagged["scenario_group"] = tags["scenario_group"].astype(str)
    tagged["tagger_confidence"] = tags["confidence"].astype(float)
    return tagged


# ---------------------------------------------------------------- the scoring sample


DEFAULT_PER_SCENARIO = 4  # prompts per (pool, scenario) when the sample is not the full pool


@dataclass(frozen=True)
class SampleRule:
    per_scenario: int = DEFAULT_PER_SCENARIO
    full_pool: bool = False
    seed: int = 0

    def describe(self) -> str:
        if self.full_pool:
            return "full pool"
        return f"stratified: up to {self.per_scenario} prompts per (pool, scenario), seed {self.seed}"


def stratified_sample(prompts: pd.DataFrame, rule: SampleRule) -> pd.DataFrame:
    """Every prompt with `sampled` true for up to `per_scenario` of each (pool, scenario), drawn with a seed."""
    if not rule.full_pool and rule.per_scenario < 1:
        raise UslConfigError(f"per_scenario must be at least 1 (got {rule.per_scenario}); use full_pool for all")
    frame = prompts[["pool", "prompt_id", "scenario"]].sort_values(["pool", "prompt_id"], ignore_index=True)
    if rule.full_pool:
        chosen = frame.index
    else:
        shuffled = frame.sample(frac=1.0, random_state=rule.seed)
        chosen = shuffled.groupby(["pool", "scenario"]).head(rule.per_scenario).index
    frame["sampled"] = frame.index.isin(chosen)
    frame["sample_rule"] = rule.describe()
    return frame


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


def load_model_responses(pool: str, model: str, path: Path, prompts: pd.DataFrame) -> ModelResponses:
    """A model's answers to its pool's prompts; every unusable row and every unanswered prompt is quarantined."""
    records = read_model_records(pool, path)
    pool_prompts_frame = prompts[prompts["pool"] == pool].set_index("prompt_id")
    parse = _alpaca_row if pool == "alpaca_eval" else _mt_bench_row
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
    return ModelResponses(pool, model, path, responses, pd.DataFrame(bad, columns=QUARANTINE_COLUMNS))


def _alpaca_row(record, prompts: pd.DataFrame, by_text: dict) -> tuple[str | None, list, tuple | None]:
    if not isinstance(record, dict):
        return None, [], ("not_an_object", f"expected an object, got {type(record).__name__}")
    instruction = record.get("instruction")
    if not isinstance(instruction, str) or instruction not in by_text:
        return None, [], ("unknown_prompt", "instruction is not one of the pool's prompts")
    prompt_id = by_text[instruction]
    problem = _answer_problem(record.get("output"), "output")
    return prompt_id, [record.get("output")], problem


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
    conversation = [{"role": "user", "content": prompt["prompt"]}, {"role": "assistant", "content": response}]
    if len(turns) > 1 and isinstance(prompt.get("followup"), str):
        conversation += [{"role": "user", "content": prompt["followup"]}, {"role": "assistant", "content": turns[1]}]
    return (
        pool, prompt_id, prompt["prompt"], model, response, prompt["scenario"], prompt["scenario_group"],
        prompt["category"], len(response), content_hash(prompt["prompt"], response), conversation,
    )


def _as_json(record) -> str:
    return json.dumps(record, ensure_ascii=False, default=str)[:20000]


# ---------------------------------------------------------------- the warehouse tables

PROMPTS_TABLE = "responses.prompts"
SAMPLE_TABLE = "responses.prompt_sample"
RESPONSES_TABLE = "responses.responses"
QUARANTINE_TABLE = "quality.response_quarantine"

# Partitioned tables outlive a run: each partition replaces only its own rows, so the table is created once.
TABLE_DDL = {
    RESPONSES_TABLE: """CREATE TABLE responses.responses (
        pool VARCHAR, prompt_id VARCHAR, prompt VARCHAR, model VARCHAR, response VARCHAR, scenario VARCHAR,
        scenario_group VARCHAR, category VARCHAR, length_chars BIGINT, response_hash VARCHAR,
        conversation STRUCT(role VARCHAR, content VARCHAR)[])""",
    QUARANTINE_TABLE: """CREATE TABLE quality.response_quarantine (
        pool VARCHAR, model VARCHAR, prompt_id VARCHAR, rule VARCHAR, detail VARCHAR, record VARCHAR)""",
}


def replace_model_rows(warehouse, loaded: list[ModelResponses]) -> None:
    """In one transaction: each loaded model's rows replace that model's earlier rows (and quarantine)."""
    with warehouse.connect() as conn:
        conn.execute("BEGIN TRANSACTION")
        for table, ddl in TABLE_DDL.items():
            schema, name = table.split(".")
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            exists = conn.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
                [schema, name],
            ).fetchone()[0]
            if not exists:
                conn.execute(ddl)
        for item in loaded:
            if _model_rows_change(conn, item):
                for table, archive in ARCHIVE_TABLES.items():
                    _archive_rows(conn, table, archive, item)
            for table, frame in ((RESPONSES_TABLE, item.responses), (QUARANTINE_TABLE, item.quarantine)):
                conn.execute(f"DELETE FROM {table} WHERE pool = ? AND model = ?", [item.pool, item.model])
                if len(frame):
                    conn.register("_rows", frame)
                    conn.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _rows")
                    conn.unregister("_rows")
        conn.execute("COMMIT")


# A model's rows replaced by different ones are kept here, stamped, so no earlier version is lost.
ARCHIVE_TABLES = {RESPONSES_TABLE: "archive.responses", QUARANTINE_TABLE: "archive.response_quarantine"}


def _model_rows_change(conn, item: ModelResponses) -> bool:
    """True when the model has rows and the new ones differ from them (a rerun of the same file archives nothing)."""
    old = conn.execute(f"SELECT prompt_id, response_hash FROM {RESPONSES_TABLE} WHERE pool = ? AND model = ?",
                       [item.pool, item.model]).fetchall()
    if not old:
        return False
    return set(old) != set(zip(item.responses["prompt_id"], item.responses["response_hash"]))


def _archive_rows(conn, table: str, archive: str, item: ModelResponses) -> None:
    conn.execute("CREATE SCHEMA IF NOT EXISTS archive")
    select = f"SELECT *, now() AS archived_at, ? AS replaced_by FROM {table} WHERE pool = ? AND model = ?"
    params = [str(item.source), item.pool, item.model]
    exists = conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'archive' "
                          "AND table_name = ?", [archive.split(".")[1]]).fetchone()[0]
    if exists:
        conn.execute(f"INSERT INTO {archive} {select}", params)
    else:
        conn.execute(f"CREATE TABLE {archive} AS {select}", params)


def sample_gaps(warehouse) -> dict[str, int]:
    """Prompts missing from or repeated in the sample, and (pool, scenario) strata with nothing sampled."""
    found = warehouse.query(
        """
        SELECT
            (SELECT count(*) FROM responses.prompts p ANTI JOIN responses.prompt_sample s USING (pool, prompt_id))
                AS prompts_not_listed,
            (SELECT count(*) - count(DISTINCT (pool, prompt_id)) FROM responses.prompt_sample) AS listed_twice,
            (SELECT count(*) FROM (SELECT pool, scenario FROM responses.prompt_sample GROUP BY ALL
                                   HAVING NOT bool_or(sampled))) AS strata_without_sample
        """
    ).iloc[0]
    return {name: int(value) for name, value in found.items()}


def duplicate_responses(warehouse) -> pd.DataFrame:
    return warehouse.query(
        "SELECT pool, prompt_id, model, count(*) AS n FROM responses.responses "
        "GROUP BY ALL HAVING count(*) > 1 ORDER BY n DESC LIMIT 20"
    )


def unaccounted_prompts(warehouse) -> pd.DataFrame:
    """(pool, model, missing) for every loaded model with prompts neither answered nor quarantined."""
    return warehouse.query(
        """
        WITH models AS (
            SELECT DISTINCT pool, model FROM responses.responses
            UNION SELECT DISTINCT pool, model FROM quality.response_quarantine),
        seen AS (
            SELECT pool, model, prompt_id FROM responses.responses
            UNION SELECT pool, model, prompt_id FROM quality.response_quarantine WHERE prompt_id IS NOT NULL)
        SELECT m.pool, m.model, count(*) AS missing
        FROM models m JOIN responses.prompts p ON p.pool = m.pool
        LEFT JOIN seen s ON s.pool = m.pool AND s.model = m.model AND s.prompt_id = p.prompt_id
        WHERE s.prompt_id IS NULL
        GROUP BY ALL ORDER BY missing DESC
        """
    )


def partition_summary(warehouse, pool: str, model: str) -> dict:
    """Rows loaded and quarantined (by rule) for one model."""
    loaded = warehouse.query(
        "SELECT count(*) AS n, coalesce(avg(length_chars), 0) AS mean_chars FROM responses.responses "
        "WHERE pool = ? AND model = ?", [pool, model],
    ).iloc[0]
    rules = warehouse.query(
        "SELECT rule, count(*) AS n FROM quality.response_quarantine WHERE pool = ? AND model = ? "
        "GROUP BY rule ORDER BY rule", [pool, model],
    )
    return {"responses": int(loaded["n"]), "mean_chars": float(loaded["mean_chars"]),
            "quarantined": dict(zip(rules["rule"], rules["n"].astype(int)))}

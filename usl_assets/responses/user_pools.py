"""User pools: a team's own prompts, registered by `usl add-pool`, ranked like the public pools.

A pool lives in `$USL_HOME/pools/<name>/`: `pool.json` (its record: reference model, prompt limit, source, counts),
`prompts.jsonl` (the accepted prompts, normalized) and `quarantine.jsonl` (every rejected line with its rule). The
`pool_prompts` asset reads every registered pool into responses.prompts and lists them in responses.pools. A pool
is registered whole or not at all (built in a hidden folder, then renamed); removing one moves its folder, and its
accepted model files, to `$USL_HOME/pools/_archived/`. Plain functions over paths; no Dagster.

A prompts file holds one JSON object a line: `id` (text or integer), `prompt`, optional `topic` (kept as given: it
becomes the prompt's topic group on the page and in the CLI), optional `history` (earlier turns, a list of
{"role": "user" | "assistant", "content": text} ending with an assistant turn; `prompt` is the next user turn).
"""

import datetime as dt
import json
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from usl_assets.settings import UslConfigError

POOL_NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")
PUBLIC_POOLS = ("alpaca_eval", "mt_bench")
ARCHIVE_FOLDER = "_archived"
DEFAULT_MAX_PROMPTS = 10_000
MAX_PROMPT_CHARS = 20_000  # as a response (pools.MAX_RESPONSE_CHARS): the CRM reads a prompt with its answer
MAX_ID_CHARS = 200
MAX_TOPIC_CHARS = 60
MAX_HISTORY_TURNS = 20
PROMPT_FILE_COLUMNS = ["prompt_id", "prompt", "topic", "history"]
QUARANTINE_COLUMNS = ["line", "prompt_id", "rule", "detail", "record"]


@dataclass(frozen=True)
class PoolRecord:
    name: str
    reference_model: str | None
    max_prompts: int
    created_at: str
    source: str
    source_sha256: str
    prompts: int
    quarantined: dict[str, int] = field(default_factory=dict)


def pools_root(home_root: Path) -> Path:
    return Path(home_root) / "pools"


def pool_dir(home_root: Path, name: str) -> Path:
    return pools_root(home_root) / name


def registered_pools(home_root: Path) -> dict[str, PoolRecord]:
    """Every registered user pool by name (archived ones excluded)."""
    root = pools_root(home_root)
    if not root.is_dir():
        return {}
    return {path.name: read_record(home_root, path.name) for path in sorted(root.iterdir())
            if path.is_dir() and POOL_NAME.fullmatch(path.name) and (path / "pool.json").is_file()}


def read_record(home_root: Path, name: str) -> PoolRecord:
    path = pool_dir(home_root, name) / "pool.json"
    if not path.is_file():
        raise UslConfigError(f"no user pool {name!r}: `usl add-pool {name} --prompts FILE` registers it")
    return PoolRecord(**json.loads(path.read_text(encoding="utf-8")))


def check_new_name(name: str, home_root: Path) -> str:
    if not POOL_NAME.fullmatch(name or ""):
        raise UslConfigError(f"pool name {name!r} is not allowed: a lower-case letter, then lower-case letters, "
                             "digits, _ or - (at most 40)")
    if name in PUBLIC_POOLS:
        raise UslConfigError(f"pool name {name!r} is a public pool's; choose another name")
    if pool_dir(home_root, name).exists():
        raise UslConfigError(f"pool {name!r} exists already ({pool_dir(home_root, name)}): choose another name, or "
                             f"archive it first with `usl remove-pool {name}`")
    return name


# ---------------------------------------------------------------- reading a prompts file


def read_prompt_file(path: Path, max_prompts: int = DEFAULT_MAX_PROMPTS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(accepted, quarantine): accepted has PROMPT_FILE_COLUMNS in file order (history as JSON text or None);
    every rejected line is in quarantine with its line number, rule and detail. Reads line by line."""
    if not path.is_file():
        raise UslConfigError(f"{path} is not a file")
    accepted, rejected = [], []
    ids, texts = set(), set()
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            record, prompt_id, problem = _parse_line(raw)
            if problem is None and prompt_id in ids:
                problem = ("duplicate_id", f"id {prompt_id!r} was used on an earlier line; the first is kept")
            if problem is None:
                text_key = (record["prompt"], record["history"])
                if text_key in texts:
                    problem = ("duplicate_prompt", "the same prompt (and history) as an earlier line")
            if problem is None and len(accepted) >= max_prompts:
                problem = ("over_prompt_limit", f"the pool keeps its first {max_prompts:,} prompts (--max-prompts)")
            if problem is not None:
                rejected.append((number, prompt_id, problem[0], problem[1], _preview(raw)))
                continue
            ids.add(prompt_id)
            texts.add(text_key)
            accepted.append((prompt_id, record["prompt"], record["topic"], record["history"]))
    return (pd.DataFrame(accepted, columns=PROMPT_FILE_COLUMNS),
            pd.DataFrame(rejected, columns=QUARANTINE_COLUMNS))


def _parse_line(raw: bytes) -> tuple[dict | None, str | None, tuple | None]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return None, None, ("not_utf8", f"the line is not UTF-8 ({error.reason} at byte {error.start})")
    try:
        record = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        return None, None, ("bad_json", f"not valid JSON ({str(error)[:120]})")
    if not isinstance(record, dict):
        return None, None, ("not_an_object", f"expected an object, got {type(record).__name__}")
    raw_id = record.get("id")
    if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)) or not str(raw_id).strip():
        return None, None, ("bad_id", "`id` must be a non-empty text or an integer")
    prompt_id = str(raw_id).strip()
    if len(prompt_id) > MAX_ID_CHARS:
        return None, prompt_id[:MAX_ID_CHARS], ("bad_id", f"`id` has {len(prompt_id):,} characters "
                                                          f"(limit {MAX_ID_CHARS})")
    prompt = record.get("prompt")
    if not isinstance(prompt, str):
        return None, prompt_id, ("not_a_string", f"`prompt` is {type(prompt).__name__}, not text")
    if not prompt.strip():
        return None, prompt_id, ("empty_prompt", "`prompt` is empty")
    if len(prompt) > MAX_PROMPT_CHARS:
        return None, prompt_id, ("prompt_too_long", f"`prompt` has {len(prompt):,} characters "
                                                    f"(limit {MAX_PROMPT_CHARS:,})")
    topic = record.get("topic")
    if topic is not None and (not isinstance(topic, str) or not topic.strip() or len(topic) > MAX_TOPIC_CHARS):
        return None, prompt_id, ("bad_topic", f"`topic` must be a non-empty text of at most {MAX_TOPIC_CHARS} "
                                              "characters")
    history, problem = _history(record.get("history"))
    if problem is not None:
        return None, prompt_id, ("bad_history", problem)
    return {"prompt": prompt, "topic": topic.strip() if topic else None, "history": history}, prompt_id, None


def _history(turns) -> tuple[str | None, str | None]:
    """(history as JSON text or None, problem or None)."""
    if turns is None or turns == []:
        return None, None
    if not isinstance(turns, list) or len(turns) > MAX_HISTORY_TURNS:
        return None, f"`history` must be a list of at most {MAX_HISTORY_TURNS} turns"
    expected = "user"
    for turn in turns:
        if (not isinstance(turn, dict) or turn.get("role") != expected or not isinstance(turn.get("content"), str)
                or not turn["content"].strip()):
            return None, "turns must alternate {role: user | assistant, content: text}, starting with user"
        expected = "assistant" if expected == "user" else "user"
    if expected != "user":
        return None, "`history` must end with an assistant turn (the prompt is the next user turn)"
    total = sum(len(turn["content"]) for turn in turns)
    if total > MAX_PROMPT_CHARS * 2:
        return None, f"`history` has {total:,} characters (limit {MAX_PROMPT_CHARS * 2:,})"
    return json.dumps([{"role": t["role"], "content": t["content"]} for t in turns], ensure_ascii=False), None


def _preview(raw: bytes) -> str:
    return raw[:500].decode("utf-8", errors="replace").rstrip("\n")


# ---------------------------------------------------------------- registering, changing, archiving


def register_pool(name: str, prompts_path: Path, home_root: Path, reference_model: str | None = None,
                  max_prompts: int = DEFAULT_MAX_PROMPTS) -> PoolRecord:
    """Reads and checks the whole file, then writes the pool's folder in one rename. Raises UslConfigError (one
    line) when the name is taken or unsafe, or the file holds no usable prompt; nothing is written then."""
    from usl_assets.responses.inbox import file_sha256  # inbox imports this module

    check_new_name(name, home_root)
    if max_prompts < 1:
        raise UslConfigError(f"--max-prompts must be at least 1 (got {max_prompts})")
    if reference_model is not None:
        from usl_assets.responses.pools import ResponseFileError, check_model_name

        try:
            check_model_name(reference_model)
        except ResponseFileError as error:
            raise UslConfigError(str(error)) from error
    accepted, quarantine = read_prompt_file(prompts_path, max_prompts)
    if accepted.empty:
        rules = quarantine.groupby("rule").size().to_dict()
        raise UslConfigError(f"{prompts_path} holds no usable prompt ({_counts(rules) or 'it is empty'}); "
                             "nothing was registered")
    record = PoolRecord(
        name=name, reference_model=reference_model, max_prompts=max_prompts,
        created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        source=str(prompts_path.resolve()), source_sha256=file_sha256(prompts_path), prompts=len(accepted),
        quarantined={str(k): int(v) for k, v in quarantine.groupby("rule").size().items()},
    )
    root = pools_root(home_root)
    building = root / f".{name}.partial"
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    _write_jsonl(building / "prompts.jsonl", accepted)
    _write_jsonl(building / "quarantine.jsonl", quarantine)
    _write_record(building, record)
    building.rename(pool_dir(home_root, name))
    return record


def set_reference_model(home_root: Path, name: str, model: str) -> PoolRecord:
    record = read_record(home_root, name)
    changed = PoolRecord(**{**asdict(record), "reference_model": model})
    _write_record(pool_dir(home_root, name), changed)
    return changed


def archive_pool(home_root: Path, name: str) -> Path:
    """Moves the pool's folder and its accepted model files to pools/_archived/<name>.<utc time>/; returns it."""
    read_record(home_root, name)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target = pools_root(home_root) / ARCHIVE_FOLDER / f"{name}.{stamp}"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(pool_dir(home_root, name), target)
    accepted = Path(home_root) / "accepted" / name
    if accepted.is_dir():
        shutil.move(accepted, target / "accepted")
    return target


def _write_record(folder: Path, record: PoolRecord) -> None:
    partial = folder / ".pool.json.partial"
    partial.write_text(json.dumps(asdict(record), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    partial.replace(folder / "pool.json")


def _write_jsonl(path: Path, frame: pd.DataFrame) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for row in frame.to_dict(orient="records"):
            handle.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")


def _counts(counts: dict) -> str:
    return ", ".join(f"{rule} {n}" for rule, n in sorted(counts.items()))


# ---------------------------------------------------------------- what the assets read


def pool_prompt_rows(home_root: Path, name: str) -> pd.DataFrame:
    """One pool's accepted prompts: prompt_id, prompt, topic, history (JSON text or None)."""
    return _read_jsonl(pool_dir(home_root, name) / "prompts.jsonl", PROMPT_FILE_COLUMNS)


def quarantined_prompts(home_root: Path, name: str) -> pd.DataFrame:
    return _read_jsonl(pool_dir(home_root, name) / "quarantine.jsonl", QUARANTINE_COLUMNS)


def _read_jsonl(path: Path, columns: list[str]) -> pd.DataFrame:
    with open(path, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return pd.DataFrame(rows, columns=columns).astype({"prompt_id": object})


def describe(record: PoolRecord) -> str:
    quarantined = sum(record.quarantined.values())
    return (f"pool {record.name}: {record.prompts:,} prompts, {quarantined:,} quarantined"
            + (f" ({_counts(record.quarantined)})" if quarantined else "")
            + f"; reference model: {record.reference_model or 'the first model added'}")

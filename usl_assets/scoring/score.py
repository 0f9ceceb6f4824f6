"""CRM rewards per (response, criteria profile), cached so nothing is scored twice.

The cache (scoring.reward_cache) is keyed by (checkpoint_id, criteria_hash, input_hash). input_hash covers the
prompt and the response, everything the CRM reads besides the criteria: two prompts answered with the same text
get different rewards, so responses.response_hash alone would be the wrong key. A new checkpoint has a new id, so
cached rows can never be stale; the cache tables persist across runs on purpose.

For a factorized CRM (CachedResponseScorer) the response embeddings are cached too (scoring.response_embeddings),
and each profile costs one criteria pass plus the head over the cached rows.
"""

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
from tqdm.auto import tqdm

from usl_assets.crm.interface import RewardScorer, ScoreItem
from usl_assets.resources import Warehouse
from usl_assets.scoring.profiles import PROFILE_COLUMNS, PROFILES_TABLE, adhoc_profile_name, criteria_problem, \
    profile_row
from usl_assets.settings import UslConfigError

REWARDS_TABLE = "scoring.response_rewards"
CACHE_TABLE = "scoring.reward_cache"
EMBEDDINGS_TABLE = "scoring.response_embeddings"
QUARANTINE_TABLE = "scoring.reward_quarantine"
REWARD_COLUMNS = ["pool", "prompt_id", "model", "profile", "criteria_hash", "response_hash", "checkpoint_id",
                  "reward"]
QUARANTINE_COLUMNS = ["pool", "prompt_id", "model", "profile", "rule", "detail"]
ADHOC_COLUMNS = ["pool", "prompt_id", "model", "scenario", "length_chars", "reward"]

# Tables that accumulate (caches, partitioned rewards) are created once; every other write replaces its rows.
TABLE_DDL = {
    CACHE_TABLE: "checkpoint_id VARCHAR, criteria_hash VARCHAR, input_hash VARCHAR, reward DOUBLE, "
                 "PRIMARY KEY (checkpoint_id, criteria_hash, input_hash)",
    EMBEDDINGS_TABLE: "checkpoint_id VARCHAR, input_hash VARCHAR, embedding FLOAT[], "
                      "PRIMARY KEY (checkpoint_id, input_hash)",
    REWARDS_TABLE: "pool VARCHAR, prompt_id VARCHAR, model VARCHAR, profile VARCHAR, criteria_hash VARCHAR, "
                   "response_hash VARCHAR, checkpoint_id VARCHAR, reward DOUBLE",
    QUARANTINE_TABLE: "pool VARCHAR, prompt_id VARCHAR, model VARCHAR, profile VARCHAR, rule VARCHAR, "
                      "detail VARCHAR",
    PROFILES_TABLE: "profile VARCHAR, kind VARCHAR, scenario VARCHAR, criteria VARCHAR[], criteria_hash VARCHAR",
}

Log = Callable[[str], None]


@dataclass
class ScoringStats:
    requested: int = 0  # distinct (input, criteria) pairs asked for
    cache_hits: int = 0
    scored: int = 0
    embedded: int = 0  # responses embedded (factorized CRM only)
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        """Newly scored (input, criteria) pairs per second of scoring work."""
        return self.scored / self.seconds if self.seconds > 0 else 0.0

    def add(self, other: "ScoringStats") -> None:
        for name in ("requested", "cache_hits", "scored", "embedded", "seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def input_hash(prompt: str, response: str) -> str:
    return hashlib.sha256(f"{prompt}\x00{response}".encode("utf-8")).hexdigest()[:24]


def is_factorized(scorer: RewardScorer) -> bool:
    return all(hasattr(scorer, name) for name in ("embed_responses", "embed_criteria", "score_embedded"))


# --- the CRM ---------------------------------------------------------------------------------------------------

def checkpoint_dir(usl_home_root: Path, checkpoint: str = "", architecture: str | None = None) -> Path:
    """The configured checkpoint folder, or the CRM's current default one."""
    if checkpoint:
        path = Path(checkpoint).expanduser().resolve()
        if not path.is_dir():
            raise UslConfigError(f"CRM checkpoint {checkpoint} is not a folder: give a checkpoint directory")
        return path
    from usl_assets.crm.scorer import default_checkpoint

    return Path(default_checkpoint(usl_home_root, architecture))


def load_scorer(usl_home_root: Path, checkpoint: str = "", architecture: str | None = None) -> RewardScorer:
    return _load_scorer_once(str(checkpoint_dir(usl_home_root, checkpoint, architecture)))


@lru_cache(maxsize=2)
def _load_scorer_once(path: str) -> RewardScorer:
    # Kept in memory: the custom leaderboard scores several profiles in one process.
    from usl_assets.crm.scorer import load_scorer as load_crm_scorer

    return load_crm_scorer(Path(path))


# --- warehouse tables ------------------------------------------------------------------------------------------

def ensure_tables(conn: duckdb.DuckDBPyConnection, tables: Sequence[str]) -> None:
    existing = {f"{s}.{t}" for s, t in conn.execute(
        "SELECT table_schema, table_name FROM information_schema.tables").fetchall()}
    conn.execute("CREATE SCHEMA IF NOT EXISTS scoring")
    for table in tables:
        if table not in existing:
            conn.execute(f"CREATE TABLE {table} ({TABLE_DDL[table]})")


def table_exists(conn: duckdb.DuckDBPyConnection, table: str) -> bool:
    schema, name = table.split(".")
    return conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
                        [schema, name]).fetchone()[0] > 0


def _with_frame(conn: duckdb.DuckDBPyConnection, name: str, frame: pd.DataFrame | pa.Table, sql: str,
                params: list | None = None) -> pd.DataFrame | None:
    conn.register(name, frame)
    try:
        result = conn.execute(sql, params or [])
        return result.df() if result.description else None
    finally:
        conn.unregister(name)


def cached_rewards(conn: duckdb.DuckDBPyConnection, checkpoint_id: str, keys: pd.DataFrame) -> pd.DataFrame:
    """Cached rewards of (criteria_hash, input_hash) keys under one checkpoint."""
    return _with_frame(conn, "_keys", keys[["criteria_hash", "input_hash"]], f"""
        SELECT c.criteria_hash, c.input_hash, c.reward FROM {CACHE_TABLE} c
        JOIN _keys k ON c.criteria_hash = k.criteria_hash AND c.input_hash = k.input_hash
        WHERE c.checkpoint_id = ?""", [checkpoint_id])


def store_rewards(conn: duckdb.DuckDBPyConnection, checkpoint_id: str, rewards: pd.DataFrame) -> None:
    """Cache finite rewards only: a non-finite one is quarantined by the caller and scored again next time."""
    finite = rewards[np.isfinite(rewards["reward"].to_numpy(dtype=float))]
    _with_frame(conn, "_new", finite[["criteria_hash", "input_hash", "reward"]], f"""
        INSERT OR IGNORE INTO {CACHE_TABLE} SELECT ?, criteria_hash, input_hash, reward FROM _new""",
                [checkpoint_id])


def cached_embeddings(conn: duckdb.DuckDBPyConnection, checkpoint_id: str,
                      hashes: Sequence[str]) -> dict[str, np.ndarray]:
    if not len(hashes):
        return {}
    conn.register("_hashes", pd.DataFrame({"input_hash": list(hashes)}))
    try:
        table = conn.sql(f"""SELECT e.input_hash, e.embedding FROM {EMBEDDINGS_TABLE} e
                             JOIN _hashes h ON e.input_hash = h.input_hash
                             WHERE e.checkpoint_id = $checkpoint""",
                         params={"checkpoint": checkpoint_id}).to_arrow_table()
    finally:
        conn.unregister("_hashes")
    if table.num_rows == 0:
        return {}
    flat = table.column("embedding").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    rows = flat.astype(np.float32, copy=False).reshape(table.num_rows, -1)
    return dict(zip(table.column("input_hash").to_pylist(), rows))


def store_embeddings(conn: duckdb.DuckDBPyConnection, checkpoint_id: str, hashes: Sequence[str],
                     rows: np.ndarray) -> None:
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    embeddings = pa.FixedSizeListArray.from_arrays(pa.array(rows.reshape(-1)), rows.shape[1])
    frame = pa.table({"input_hash": list(hashes), "embedding": embeddings})
    _with_frame(conn, "_emb", frame, f"""
        INSERT OR IGNORE INTO {EMBEDDINGS_TABLE} SELECT ?, input_hash, embedding::FLOAT[] FROM _emb""",
                [checkpoint_id])


# --- scoring with the cache ------------------------------------------------------------------------------------

def rewards_for(
    conn: duckdb.DuckDBPyConnection,
    scorer: RewardScorer,
    requests: pd.DataFrame,
    batch_size: int = 16,
    progress: bool = False,
    log: Log | None = None,
) -> tuple[pd.DataFrame, ScoringStats]:
    """Rewards for requests (input_hash, prompt, response, criteria_hash, criteria): from the cache where present,
    scored and cached otherwise. Returns one row per distinct (criteria_hash, input_hash) with its reward."""
    ensure_tables(conn, [CACHE_TABLE, EMBEDDINGS_TABLE])
    unique = requests.drop_duplicates(["criteria_hash", "input_hash"]).reset_index(drop=True)
    hits = cached_rewards(conn, scorer.checkpoint_id, unique)
    missing = unique.merge(hits[["criteria_hash", "input_hash"]], how="left", indicator=True)
    missing = missing[missing["_merge"] == "left_only"].drop(columns="_merge").reset_index(drop=True)
    stats = ScoringStats(requested=len(unique), cache_hits=len(hits))
    started = time.perf_counter()
    if len(missing):
        score_missing = _score_factorized if is_factorized(scorer) else _score_cross
        fresh = score_missing(conn, scorer, missing, batch_size, progress, log or (lambda _: None), stats)
        hits = pd.concat([hits, fresh], ignore_index=True)
    stats.scored = len(missing)
    stats.seconds = time.perf_counter() - started
    return hits, stats


def _score_cross(conn, scorer, missing, batch_size, progress, log, stats) -> pd.DataFrame:
    """Scores in chunks, caching each, so an interrupted run keeps what it scored."""
    chunk_size = max(256, batch_size * 16)
    done, started, parts = 0, time.perf_counter(), []
    for start in range(0, len(missing), chunk_size):
        chunk = missing.iloc[start:start + chunk_size]
        items = [ScoreItem(prompt=p, response=r, criteria=tuple(c))
                 for p, r, c in zip(chunk["prompt"], chunk["response"], chunk["criteria"])]
        rewards = np.asarray(scorer.score(items, batch_size=batch_size, progress=progress), dtype=float)
        part = chunk[["criteria_hash", "input_hash"]].assign(reward=rewards)
        store_rewards(conn, scorer.checkpoint_id, part)
        parts.append(part)
        done += len(chunk)
        elapsed = time.perf_counter() - started
        log(f"scored {done:,}/{len(missing):,} (response, profile) pairs, {done / max(elapsed, 1e-9):.1f}/s")
    return pd.concat(parts, ignore_index=True)


_CRITERIA_ROWS: dict[tuple[str, str], np.ndarray] = {}  # (checkpoint_id, criteria_hash) -> embedded criteria


def embedded_criteria(scorer: RewardScorer, profiles: pd.DataFrame) -> dict[str, np.ndarray]:
    """criteria_hash -> embedding, one batched encoder pass for the profiles this process has not embedded yet
    (a run scores many partitions under the same few dozen profiles)."""
    new = profiles[[(scorer.checkpoint_id, h) not in _CRITERIA_ROWS for h in profiles["criteria_hash"]]]
    if len(new):
        rows = np.asarray(scorer.embed_criteria([tuple(c) for c in new["criteria"]]), dtype=np.float32)
        _CRITERIA_ROWS.update({(scorer.checkpoint_id, h): row for h, row in zip(new["criteria_hash"], rows)})
    return {h: _CRITERIA_ROWS[(scorer.checkpoint_id, h)] for h in profiles["criteria_hash"]}


def _score_factorized(conn, scorer, missing, batch_size, progress, log, stats) -> pd.DataFrame:
    responses = missing.drop_duplicates("input_hash")
    embedded = cached_embeddings(conn, scorer.checkpoint_id, responses["input_hash"].tolist())
    to_embed = responses[~responses["input_hash"].isin(embedded.keys())]
    chunk_size, started = max(512, batch_size * 32), time.perf_counter()
    for start in tqdm(range(0, len(to_embed), chunk_size), disable=not progress, desc="embedding", unit="chunk"):
        # Embedded and cached chunk by chunk, so an interrupted run keeps what it embedded.
        chunk = to_embed.iloc[start:start + chunk_size]
        rows = np.asarray(scorer.embed_responses(chunk["prompt"].tolist(), chunk["response"].tolist(),
                                                 batch_size=batch_size), dtype=np.float32)
        store_embeddings(conn, scorer.checkpoint_id, chunk["input_hash"].tolist(), rows)
        embedded.update(zip(chunk["input_hash"], rows))
        done = start + len(chunk)
        log(f"embedded {done:,}/{len(to_embed):,} responses, {done / (time.perf_counter() - started):.1f}/s")
    stats.embedded = len(to_embed)
    parts = []
    criteria_rows = embedded_criteria(scorer, missing.drop_duplicates("criteria_hash"))
    for criteria_hash, group in missing.groupby("criteria_hash", sort=False):
        criteria_row = criteria_rows[criteria_hash]
        response_rows = np.stack([embedded[h] for h in group["input_hash"]])
        rewards = np.asarray(scorer.score_embedded(response_rows, criteria_row), dtype=float).reshape(-1)
        parts.append(group[["criteria_hash", "input_hash"]].assign(reward=rewards))
    fresh = pd.concat(parts, ignore_index=True)
    store_rewards(conn, scorer.checkpoint_id, fresh)
    return fresh


# --- response_rewards: one model partition ----------------------------------------------------------------------

def sampled_responses(conn: duckdb.DuckDBPyConnection, pool: str, model: str) -> pd.DataFrame:
    """The model's responses to the pool's sampled prompts (responses.prompt_sample.sampled)."""
    return conn.execute("""
        SELECT r.pool, r.prompt_id, r.model, r.prompt, r.response, r.scenario, r.response_hash
        FROM responses.responses r
        JOIN responses.prompt_sample s ON s.pool = r.pool AND s.prompt_id = r.prompt_id
        WHERE s.sampled AND r.pool = ? AND r.model = ?
        ORDER BY r.prompt_id""", [pool, model]).df()


def reward_requests(responses: pd.DataFrame, profiles: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each response under its scenario's default profile and under every named profile. A response whose
    scenario has no default profile is quarantined for that profile (it still gets the named ones)."""
    # dtype object even for no rows (a model none of whose prompts is sampled), so the merges below line up
    responses = responses.assign(input_hash=pd.Series([input_hash(p, r) for p, r in zip(
        responses["prompt"], responses["response"])], index=responses.index, dtype=object))
    defaults = profiles[profiles["kind"] == "scenario_default"]
    named = profiles[profiles["kind"] == "named"]
    by_default = responses.merge(defaults.drop(columns="kind"), on="scenario", how="left")
    no_default = by_default[by_default["profile"].isna()]
    by_named = responses.merge(named.drop(columns=["kind", "scenario"]), how="cross")
    requests = pd.concat([by_default[by_default["profile"].notna()], by_named], ignore_index=True)
    quarantine = no_default.assign(
        profile="default", rule="no_default_profile",
        detail=[f"scenario {s!r} has no default criteria profile" for s in no_default["scenario"]])
    return requests.reset_index(drop=True), quarantine[QUARANTINE_COLUMNS].reset_index(drop=True)


def attach_rewards(requests: pd.DataFrame, rewards: pd.DataFrame,
                   checkpoint_id: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rows for scoring.response_rewards, and the non-finite rewards as quarantine rows."""
    rows = requests.merge(rewards, on=["criteria_hash", "input_hash"], how="left").assign(checkpoint_id=checkpoint_id)
    finite = np.isfinite(rows["reward"].to_numpy(dtype=float))
    bad = rows[~finite].assign(rule="non_finite_reward", detail=[f"reward {r}" for r in rows.loc[~finite, "reward"]])
    return rows.loc[finite, REWARD_COLUMNS].reset_index(drop=True), bad[QUARANTINE_COLUMNS].reset_index(drop=True)


def replace_partition_rows(conn: duckdb.DuckDBPyConnection, pool: str, model: str, rewards: pd.DataFrame,
                           quarantine: pd.DataFrame) -> None:
    """Replace this (pool, model)'s rows in response_rewards and reward_quarantine, in one transaction."""
    ensure_tables(conn, [REWARDS_TABLE, QUARANTINE_TABLE])
    conn.execute("BEGIN TRANSACTION")
    try:
        for table, frame, columns in ((REWARDS_TABLE, rewards, REWARD_COLUMNS),
                                      (QUARANTINE_TABLE, quarantine, QUARANTINE_COLUMNS)):
            conn.execute(f"DELETE FROM {table} WHERE pool = ? AND model = ?", [pool, model])
            _with_frame(conn, "_rows", frame[columns], f"INSERT INTO {table} SELECT * FROM _rows")
        conn.execute("COMMIT")
    except Exception:
        conn.execute("ROLLBACK")
        raise


@dataclass
class PartitionResult:
    pool: str
    model: str
    responses: int
    rewards: int
    quarantined: int
    stats: ScoringStats


def score_partition(conn: duckdb.DuckDBPyConnection, scorer: RewardScorer, pool: str, model: str,
                    profiles: pd.DataFrame, batch_size: int = 16, progress: bool = False,
                    log: Log | None = None) -> PartitionResult:
    responses = sampled_responses(conn, pool, model)
    requests, quarantine = reward_requests(responses, profiles)
    rewards, stats = rewards_for(conn, scorer, requests, batch_size, progress, log)
    rows, non_finite = attach_rewards(requests, rewards, scorer.checkpoint_id)
    quarantine = pd.concat([quarantine, non_finite], ignore_index=True)
    replace_partition_rows(conn, pool, model, rows, quarantine)
    return PartitionResult(pool, model, len(responses), len(rows), len(quarantine), stats)


def partition_figures(conn: duckdb.DuckDBPyConnection, pool: str, model: str) -> dict:
    """What the asset checks test, read back from the warehouse for one (pool, model)."""
    rows = conn.execute(f"""
        SELECT count(*) AS rows,
               count(*) - count(DISTINCT (prompt_id, profile)) AS duplicates,
               count(*) FILTER (WHERE reward IS NULL OR NOT isfinite(reward)) AS non_finite,
               list(DISTINCT checkpoint_id) AS checkpoints
        FROM {REWARDS_TABLE} WHERE pool = ? AND model = ?""", [pool, model]).fetchone()
    quarantined = conn.execute(f"SELECT count(*) FROM {QUARANTINE_TABLE} WHERE pool = ? AND model = ?",
                               [pool, model]).fetchone()[0]
    return {"rows": rows[0], "duplicates": rows[1], "non_finite": rows[2], "checkpoints": sorted(rows[3] or []),
            "quarantined": quarantined}


def expected_reward_count(conn: duckdb.DuckDBPyConnection, pool: str, model: str) -> int:
    """Sampled responses × (their default profile + every named profile)."""
    return conn.execute(f"""
        WITH named AS (SELECT count(*) AS n FROM {PROFILES_TABLE} WHERE kind = 'named')
        SELECT count(*) * (1 + (SELECT n FROM named))
        FROM responses.responses r
        JOIN responses.prompt_sample s ON s.pool = r.pool AND s.prompt_id = r.prompt_id
        WHERE s.sampled AND r.pool = ? AND r.model = ?""", [pool, model]).fetchone()[0]


# --- ad hoc profiles for the custom leaderboard ----------------------------------------------------------------

def pool_responses(conn: duckdb.DuckDBPyConnection, pool: str, scenarios: Sequence[str] | None) -> pd.DataFrame:
    """The pool's responses to its sampled prompts (every prompt when no sample exists), optionally restricted to
    scenarios or scenario groups."""
    pools = [row[0] for row in conn.execute("SELECT DISTINCT pool FROM responses.responses ORDER BY 1").fetchall()]
    if pool not in pools:
        raise UslConfigError(f"unknown pool {pool!r}: the warehouse has {', '.join(pools) or 'no pools yet'}")
    sampled = table_exists(conn, "responses.prompt_sample")
    frame = conn.execute(f"""
        SELECT r.pool, r.prompt_id, r.model, r.prompt, r.response, r.scenario, r.scenario_group, r.length_chars
        FROM responses.responses r
        {"JOIN responses.prompt_sample s ON s.pool = r.pool AND s.prompt_id = r.prompt_id AND s.sampled"
         if sampled else ""}
        WHERE r.pool = ?""", [pool]).df()
    if not scenarios:
        return frame
    known = set(frame["scenario"].dropna()) | set(frame["scenario_group"].dropna())
    unknown = [s for s in scenarios if s not in known]
    if unknown:
        raise UslConfigError(f"unknown topic(s) {', '.join(map(repr, unknown))} for pool {pool!r}: "
                             f"use a scenario or scenario group the pool has")
    keep = frame["scenario"].isin(scenarios) | frame["scenario_group"].isin(scenarios)
    return frame[keep].reset_index(drop=True)


def record_adhoc_profile(conn: duckdb.DuckDBPyConnection, criteria: Sequence[str]) -> dict:
    """Add the ad hoc profile to scoring.criteria_profiles unless it is there already."""
    ensure_tables(conn, [PROFILES_TABLE])
    row = profile_row(adhoc_profile_name(criteria), "adhoc", None, criteria)
    _with_frame(conn, "_profile", pd.DataFrame([row], columns=PROFILE_COLUMNS), f"""
        INSERT INTO {PROFILES_TABLE} SELECT * FROM _profile
        WHERE NOT EXISTS (SELECT 1 FROM {PROFILES_TABLE} p WHERE p.profile = _profile.profile)""")
    return row


def score_adhoc_profile(
    warehouse: Warehouse,
    usl_home_root: Path,
    pool: str,
    criteria: list[str],
    scenarios: Sequence[str] | None = None,
    progress: bool = False,
    batch_size: int = 16,
    checkpoint: str = "",
) -> pd.DataFrame:
    """Rewards of the pool's responses under the user's own criteria: DataFrame[pool, prompt_id, model, scenario,
    reward]. Scores only what the cache lacks for these criteria under the default checkpoint."""
    problem = criteria_problem(criteria)
    if problem:
        raise UslConfigError(f"bad --criteria: {problem}")
    if batch_size < 1:
        raise UslConfigError(f"batch size must be at least 1, got {batch_size}")
    scorer = load_scorer(usl_home_root, checkpoint)
    with warehouse.connect() as conn:
        return adhoc_rewards(conn, scorer, pool, criteria, scenarios, progress, batch_size)


def adhoc_rewards(conn: duckdb.DuckDBPyConnection, scorer: RewardScorer, pool: str, criteria: list[str],
                  scenarios: Sequence[str] | None = None, progress: bool = False, batch_size: int = 16,
                  log: Log | None = None) -> pd.DataFrame:
    """score_adhoc_profile on an open connection (the warehouse, or the web page's in-memory copy of the published
    one) with a loaded scorer; `log` hears each scored chunk."""
    problem = criteria_problem(criteria)
    if problem:
        raise UslConfigError(f"bad criteria: {problem}")
    if not table_exists(conn, "responses.responses"):
        raise UslConfigError("responses.responses is missing: materialize the responses stage first")
    responses = pool_responses(conn, pool, scenarios)
    profile = record_adhoc_profile(conn, criteria)
    requests = responses.assign(
        input_hash=[input_hash(p, r) for p, r in zip(responses["prompt"], responses["response"])],
        criteria_hash=profile["criteria_hash"],
        criteria=[profile["criteria"]] * len(responses),
    )
    rewards, stats = rewards_for(conn, scorer, requests, batch_size, progress, log)
    scored = requests.merge(rewards, on=["criteria_hash", "input_hash"], how="left")[ADHOC_COLUMNS]
    # Non-finite rewards stay NaN (the caller shows them); they are never cached, so a rerun scores them again.
    scored.attrs.update(stats=stats, profile=profile["profile"],
                        non_finite=int((~np.isfinite(scored["reward"].to_numpy(dtype=float))).sum()))
    return scored

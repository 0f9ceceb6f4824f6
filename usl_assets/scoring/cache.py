"""CRM rewards from the cache where present, scored and cached otherwise, so nothing is scored twice.

The cache (scoring.reward_cache) is keyed by (checkpoint_id, criteria_hash, input_hash). input_hash is
responses.response_hash (`pools.content_hash`): it covers the prompt and the response, everything the CRM reads
besides the criteria, so two prompts answered with the same text get different rewards. A new checkpoint has a new
id, so cached rows can never be stale; the cache tables persist across runs on purpose.

For a factorized CRM (CachedResponseScorer) the response embeddings are cached too (scoring.response_embeddings),
and each profile costs one criteria pass plus the head over the cached rows.

Every function takes a store: a Warehouse, or a bare connection (the page's in-memory copy). The cache is read in
one short connection, the CRM runs with no connection open, and each scored chunk is written in its own short
transaction, so an interrupted run keeps what it scored and no other process waits on the model.
"""

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
from tqdm.auto import tqdm

from usl_assets.crm.interface import RewardScorer, ScoreItem
from usl_assets.warehouse import TableSpec, Writer, store_of

CACHE_TABLE = "scoring.reward_cache"
EMBEDDINGS_TABLE = "scoring.response_embeddings"
CACHE = TableSpec(CACHE_TABLE, {"checkpoint_id": "VARCHAR", "criteria_hash": "VARCHAR", "input_hash": "VARCHAR",
                                "reward": "DOUBLE"}, primary_key=("checkpoint_id", "criteria_hash", "input_hash"))
EMBEDDINGS = TableSpec(EMBEDDINGS_TABLE, {"checkpoint_id": "VARCHAR", "input_hash": "VARCHAR",
                                          "embedding": "FLOAT[]"}, primary_key=("checkpoint_id", "input_hash"))

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


def is_factorized(scorer: RewardScorer) -> bool:
    return all(hasattr(scorer, name) for name in ("embed_responses", "embed_criteria", "score_embedded"))


def _query(conn: duckdb.DuckDBPyConnection, frames: dict, sql: str, params: list | dict | None = None):
    for name, frame in frames.items():
        conn.register(name, frame)
    try:
        return conn.sql(sql, params=params or None).to_arrow_table()
    finally:
        for name in frames:
            conn.unregister(name)


def cached_rewards(conn: duckdb.DuckDBPyConnection, checkpoint_id: str, keys: pd.DataFrame) -> pd.DataFrame:
    """Cached rewards of (criteria_hash, input_hash) keys under one checkpoint."""
    return _query(conn, {"_keys": keys[["criteria_hash", "input_hash"]]}, f"""
        SELECT c.criteria_hash, c.input_hash, c.reward FROM {CACHE_TABLE} c
        JOIN _keys k ON c.criteria_hash = k.criteria_hash AND c.input_hash = k.input_hash
        WHERE c.checkpoint_id = $checkpoint""", {"checkpoint": checkpoint_id}).to_pandas()


def store_rewards(writer: Writer, checkpoint_id: str, rewards: pd.DataFrame) -> None:
    """Cache finite rewards only: a non-finite one is quarantined by the caller and scored again next time."""
    finite = rewards[np.isfinite(rewards["reward"].to_numpy(dtype=float))]
    writer.insert(CACHE_TABLE, finite[["criteria_hash", "input_hash", "reward"]], or_ignore=True,
                  select="SELECT ? AS checkpoint_id, criteria_hash, input_hash, reward FROM _rows",
                  params=[checkpoint_id])


def cached_embeddings(conn: duckdb.DuckDBPyConnection, checkpoint_id: str,
                      hashes: Sequence[str]) -> dict[str, np.ndarray]:
    if not len(hashes):
        return {}
    table = _query(conn, {"_hashes": pd.DataFrame({"input_hash": list(hashes)})}, f"""
        SELECT e.input_hash, e.embedding FROM {EMBEDDINGS_TABLE} e
        JOIN _hashes h ON e.input_hash = h.input_hash WHERE e.checkpoint_id = $checkpoint""",
                   {"checkpoint": checkpoint_id})
    if table.num_rows == 0:
        return {}
    flat = table.column("embedding").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    rows = flat.astype(np.float32, copy=False).reshape(table.num_rows, -1)
    return dict(zip(table.column("input_hash").to_pylist(), rows))


def store_embeddings(writer: Writer, checkpoint_id: str, hashes: Sequence[str], rows: np.ndarray) -> None:
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    embeddings = pa.FixedSizeListArray.from_arrays(pa.array(rows.reshape(-1)), rows.shape[1])
    frame = pa.table({"input_hash": list(hashes), "embedding": embeddings})
    writer.insert(EMBEDDINGS_TABLE, frame, or_ignore=True, params=[checkpoint_id],
                  select="SELECT ? AS checkpoint_id, input_hash, embedding::FLOAT[] AS embedding FROM _rows")


def ensure_tables(target, tables: Sequence[TableSpec] = (CACHE, EMBEDDINGS)) -> None:
    """Create the tables once (a store or a bare connection); an existing one must have the spec's columns."""
    with store_of(target).transaction() as writer:
        for spec in tables:
            writer.ensure_table(spec)


def rewards_for(
    target,
    scorer: RewardScorer,
    requests: pd.DataFrame,
    batch_size: int = 16,
    progress: bool = False,
    log: Log | None = None,
) -> tuple[pd.DataFrame, ScoringStats]:
    """Rewards for requests (input_hash, prompt, response, criteria_hash, criteria): from the cache where present,
    scored and cached otherwise. Returns one row per distinct (criteria_hash, input_hash) with its reward."""
    store = store_of(target)
    ensure_tables(store)
    unique = requests.drop_duplicates(["criteria_hash", "input_hash"]).reset_index(drop=True)
    with store.connect() as conn:
        hits = cached_rewards(conn, scorer.checkpoint_id, unique)
    missing = unique.merge(hits[["criteria_hash", "input_hash"]], how="left", indicator=True)
    missing = missing[missing["_merge"] == "left_only"].drop(columns="_merge").reset_index(drop=True)
    stats = ScoringStats(requested=len(unique), cache_hits=len(hits))
    started = time.perf_counter()
    if len(missing):
        score_missing = _score_factorized if is_factorized(scorer) else _score_cross
        fresh = score_missing(store, scorer, missing, batch_size, progress, log or (lambda _: None), stats)
        hits = pd.concat([hits, fresh], ignore_index=True)
    stats.scored = len(missing)
    stats.seconds = time.perf_counter() - started
    return hits, stats


def _score_cross(store, scorer, missing, batch_size, progress, log, stats) -> pd.DataFrame:
    """Scores in chunks, caching each, so an interrupted run keeps what it scored."""
    chunk_size = max(256, batch_size * 16)
    done, started, parts = 0, time.perf_counter(), []
    for start in range(0, len(missing), chunk_size):
        chunk = missing.iloc[start:start + chunk_size]
        items = [ScoreItem(prompt=p, response=r, criteria=tuple(c))
                 for p, r, c in zip(chunk["prompt"], chunk["response"], chunk["criteria"])]
        rewards = np.asarray(scorer.score(items, batch_size=batch_size, progress=progress), dtype=float)
        part = chunk[["criteria_hash", "input_hash"]].assign(reward=rewards)
        with store.transaction() as writer:
            store_rewards(writer, scorer.checkpoint_id, part)
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


def _score_factorized(store, scorer, missing, batch_size, progress, log, stats) -> pd.DataFrame:
    responses = missing.drop_duplicates("input_hash")
    with store.connect() as conn:
        embedded = cached_embeddings(conn, scorer.checkpoint_id, responses["input_hash"].tolist())
    to_embed = responses[~responses["input_hash"].isin(embedded.keys())]
    chunk_size, started = max(512, batch_size * 32), time.perf_counter()
    quiet = not progress or to_embed.empty  # no "embedding: 0chunk" bar when every row is cached
    for start in tqdm(range(0, len(to_embed), chunk_size), disable=quiet, desc="embedding", unit="chunk"):
        # Embedded and cached chunk by chunk, so an interrupted run keeps what it embedded.
        chunk = to_embed.iloc[start:start + chunk_size]
        rows = np.asarray(scorer.embed_responses(chunk["prompt"].tolist(), chunk["response"].tolist(),
                                                 batch_size=batch_size), dtype=np.float32)
        with store.transaction() as writer:
            store_embeddings(writer, scorer.checkpoint_id, chunk["input_hash"].tolist(), rows)
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
    with store.transaction() as writer:
        store_rewards(writer, scorer.checkpoint_id, fresh)
    return fresh

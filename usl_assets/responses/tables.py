"""The responses stage's warehouse tables: one model partition's rows written, and the queries its checks run.

The partitioned tables (responses.responses, quality.response_quarantine) outlive a run: each partition replaces
only its own (pool, model) rows, so they are created once (usl_assets/warehouse.py checks their columns). A
model's rows replaced by different ones are first copied to archive.*, stamped, so no earlier version is lost.
"""

import json
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from usl_assets.responses import user_pools
from usl_assets.responses.pools import POOLS, ModelResponses
from usl_assets.warehouse import TableSpec, Writer, quoted, table_exists

PROMPTS_TABLE = "responses.prompts"
SAMPLE_TABLE = "responses.prompt_sample"
RESPONSES_TABLE = "responses.responses"
QUARANTINE_TABLE = "quality.response_quarantine"
POOLS_TABLE = "responses.pools"
PROMPT_QUARANTINE_TABLE = "quality.prompt_quarantine"
POOL_COLUMNS = ["pool", "kind", "prompts", "topics", "prompts_quarantined", "max_prompts", "source", "created_at"]

RESPONSES = TableSpec(RESPONSES_TABLE, {
    "pool": "VARCHAR", "prompt_id": "VARCHAR", "prompt": "VARCHAR", "model": "VARCHAR", "response": "VARCHAR",
    "scenario": "VARCHAR", "scenario_group": "VARCHAR", "category": "VARCHAR", "length_chars": "BIGINT",
    "response_hash": "VARCHAR", "conversation": "STRUCT(role VARCHAR, content VARCHAR)[]"})
QUARANTINE = TableSpec(QUARANTINE_TABLE, {
    "pool": "VARCHAR", "model": "VARCHAR", "prompt_id": "VARCHAR", "rule": "VARCHAR", "detail": "VARCHAR",
    "record": "VARCHAR"})
GENERATIONS_TABLE = "responses.generations"
GENERATIONS = TableSpec(GENERATIONS_TABLE, {
    "pool": "VARCHAR", "model": "VARCHAR", "endpoint": "VARCHAR", "api_model": "VARCHAR", "temperature": "DOUBLE",
    "max_tokens": "BIGINT", "seed": "BIGINT", "system_prompt": "VARCHAR", "answered": "BIGINT", "failed": "BIGINT",
    "finished_at": "VARCHAR", "settings": "VARCHAR"})
ARCHIVE_TABLES = {RESPONSES_TABLE: "archive.responses", QUARANTINE_TABLE: "archive.response_quarantine"}


def pools_table(tagged_prompts: pd.DataFrame, registered: dict[str, user_pools.PoolRecord]) -> pd.DataFrame:
    """responses.pools: one row per pool (each pool's reference model is in leaderboard.reference_models)."""
    rows = []
    for pool, prompts in tagged_prompts.groupby("pool", sort=True):
        record = registered.get(pool)
        rows.append({
            "pool": pool, "kind": "public" if pool in POOLS else "user", "prompts": len(prompts),
            "topics": int(prompts["scenario_group"].nunique()),
            "prompts_quarantined": sum(record.quarantined.values()) if record else 0,
            "max_prompts": record.max_prompts if record else None,
            "source": record.source if record else "public data (USL_DATA_DIR/responses)",
            "created_at": record.created_at if record else None,
        })
    return pd.DataFrame(rows, columns=POOL_COLUMNS)


def prompt_quarantine(usl_home_root: Path, registered: dict[str, user_pools.PoolRecord]) -> pd.DataFrame:
    """Every user pool's rejected prompt lines (pool, line, prompt_id, rule, detail, record)."""
    parts = [user_pools.quarantined_prompts(usl_home_root, name).assign(pool=name) for name in registered]
    columns = ["pool", *user_pools.QUARANTINE_COLUMNS]
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
    return frame.reindex(columns=columns).astype({"line": "int64", "prompt_id": object, "rule": object,
                                                  "detail": object, "record": object, "pool": object})


def archive_removed_pools(writer: Writer, pools: list[str]) -> dict[str, int]:
    """Moves the responses (and their quarantine) of pools no longer registered (`usl remove-pool`) to archive.*;
    returns rows moved per pool."""
    if not all(table_exists(writer.conn, spec.table) for spec in (RESPONSES, QUARANTINE)):
        return {}  # no model loaded yet (the tables come with the first partition)
    gone = [row[0] for row in writer.conn.execute(
        f"SELECT DISTINCT pool FROM {RESPONSES_TABLE} WHERE NOT list_contains(?, pool) "
        f"UNION SELECT DISTINCT pool FROM {QUARANTINE_TABLE} WHERE NOT list_contains(?, pool)",
        [pools, pools]).fetchall()]
    moved = {}
    for pool in sorted(gone):
        moved[pool] = writer.conn.execute(f"SELECT count(*) FROM {RESPONSES_TABLE} WHERE pool = ?",
                                          [pool]).fetchone()[0]
        for table, archive in ARCHIVE_TABLES.items():
            writer.append_query(archive, f"SELECT *, now() AS archived_at, 'pool removed' AS replaced_by "
                                         f"FROM {quoted(table)} WHERE pool = ?", [pool])
            writer.conn.execute(f"DELETE FROM {quoted(table)} WHERE pool = ?", [pool])
        if table_exists(writer.conn, GENERATIONS_TABLE):
            writer.conn.execute(f"DELETE FROM {GENERATIONS_TABLE} WHERE pool = ?", [pool])
    return moved


def replace_model_rows(warehouse, loaded: Iterable[ModelResponses]) -> None:
    """In one transaction: each loaded model's rows replace that model's earlier rows (and quarantine). `loaded` is
    consumed one model at a time (a generator keeps one in memory); an exception from it rolls everything back."""
    with warehouse.transaction() as writer:
        for spec in (RESPONSES, QUARANTINE):
            writer.ensure_table(spec)
        for item in loaded:
            if _model_rows_change(writer, item):
                for table, archive in ARCHIVE_TABLES.items():
                    writer.append_query(
                        archive, f"SELECT *, now() AS archived_at, ? AS replaced_by FROM {quoted(table)} "
                                 "WHERE pool = ? AND model = ?", [str(item.source), item.pool, item.model])
            writer.replace_rows(RESPONSES, item.responses, pool=item.pool, model=item.model)
            writer.replace_rows(QUARANTINE, item.quarantine, pool=item.pool, model=item.model)
            writer.replace_rows(GENERATIONS, generation_rows(item), pool=item.pool, model=item.model)


def generation_rows(item: ModelResponses) -> pd.DataFrame:
    """responses.generations: the one row of a model `usl generate` answered (none for a file's model)."""
    if not item.generation:
        return pd.DataFrame(columns=list(GENERATIONS.columns))
    found = item.generation
    row = {"pool": item.pool, "model": item.model, "settings": json.dumps(found, sort_keys=True),
           **{column: found.get(column) for column in GENERATIONS.columns if column not in ("pool", "model", "settings")}}
    return pd.DataFrame([row], columns=list(GENERATIONS.columns))


def _model_rows_change(writer: Writer, item: ModelResponses) -> bool:
    """True when the model has rows and the new ones differ from them (a rerun of the same file archives nothing)."""
    old = writer.conn.execute(f"SELECT prompt_id, response_hash FROM {RESPONSES_TABLE} WHERE pool = ? AND model = ?",
                              [item.pool, item.model]).fetchall()
    if not old:
        return False
    return set(old) != set(zip(item.responses["prompt_id"], item.responses["response_hash"]))


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

"""The responses stage's warehouse tables: one model partition's rows written, and the queries its checks run.

The partitioned tables (responses.responses, quality.response_quarantine) outlive a run: each partition replaces
only its own (pool, model) rows, so they are created once (usl_assets/warehouse.py checks their columns). A
model's rows replaced by different ones are first copied to archive.*, stamped, so no earlier version is lost.
"""

import pandas as pd

from usl_assets.responses.pools import ModelResponses
from usl_assets.warehouse import TableSpec, Writer, quoted

PROMPTS_TABLE = "responses.prompts"
SAMPLE_TABLE = "responses.prompt_sample"
RESPONSES_TABLE = "responses.responses"
QUARANTINE_TABLE = "quality.response_quarantine"

RESPONSES = TableSpec(RESPONSES_TABLE, {
    "pool": "VARCHAR", "prompt_id": "VARCHAR", "prompt": "VARCHAR", "model": "VARCHAR", "response": "VARCHAR",
    "scenario": "VARCHAR", "scenario_group": "VARCHAR", "category": "VARCHAR", "length_chars": "BIGINT",
    "response_hash": "VARCHAR", "conversation": "STRUCT(role VARCHAR, content VARCHAR)[]"})
QUARANTINE = TableSpec(QUARANTINE_TABLE, {
    "pool": "VARCHAR", "model": "VARCHAR", "prompt_id": "VARCHAR", "rule": "VARCHAR", "detail": "VARCHAR",
    "record": "VARCHAR"})
ARCHIVE_TABLES = {RESPONSES_TABLE: "archive.responses", QUARANTINE_TABLE: "archive.response_quarantine"}


def replace_model_rows(warehouse, loaded: list[ModelResponses]) -> None:
    """In one transaction: each loaded model's rows replace that model's earlier rows (and quarantine)."""
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

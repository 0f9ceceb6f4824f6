"""The comparisons of rewards that never reach a warehouse table (the CLI's and the page's ad hoc criteria): the
same `dbt_like_sql/` SELECTs the assets run (reference_comparisons, pairwise_comparisons), run on an in-memory
DuckDB holding the rewards as `leaderboard.response_scores`, so both paths compare, hence rank, identically."""

from functools import cache

import duckdb
import pandas as pd

from usl_assets.leaderboards.sql_files import SqlModel, load_models

# leaderboard.response_scores' columns; the ones ad hoc rewards may lack are filled (profile: one ad hoc profile)
RESPONSE_SCORES_COLUMNS = ["pool", "prompt_id", "model", "profile", "scenario", "scenario_group", "length_chars",
                           "reward", "checkpoint_id"]
FILLED = {"profile": "adhoc", "length_chars": float("nan"), "checkpoint_id": None}


@cache
def sql_model(name: str) -> SqlModel:
    models = {model.name: model for model in load_models()}
    if name not in models:
        raise ValueError(f"no SQL model {name!r} (have {', '.join(sorted(models))})")
    return models[name]


def run_sql_model(name: str, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The model's SELECT over `tables` ({schema.table: rows}) in a fresh in-memory DuckDB, ordered by the
    model's unique key so the result does not depend on DuckDB's thread scheduling."""
    model = sql_model(name)
    missing = sorted(set(model.reads) - set(tables))
    if missing:
        raise ValueError(f"{name}.sql reads {', '.join(missing)}, not given")
    with duckdb.connect(":memory:") as conn:
        for table, frame in tables.items():
            schema, _, table_name = table.partition(".")
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            conn.register("input_frame", frame)
            conn.execute(f'CREATE TABLE "{schema}"."{table_name}" AS SELECT * FROM input_frame')
            conn.unregister("input_frame")
        order = ", ".join(f'"{column}"' for column in model.unique) or "ALL"
        return conn.execute(f"SELECT * FROM (\n{model.sql}\n) ORDER BY {order}").df()


def response_scores(rewards: pd.DataFrame) -> pd.DataFrame:
    """Rewards (pool, prompt_id, model, scenario, scenario_group, reward, optionally length_chars, profile,
    checkpoint_id) in leaderboard.response_scores' shape."""
    filled = {column: value for column, value in FILLED.items() if column not in rewards}
    return rewards.assign(**filled)[RESPONSE_SCORES_COLUMNS]


def reference_wins_from_rewards(rewards: pd.DataFrame, reference_model: str) -> pd.DataFrame:
    """reference_comparisons.sql over raw rewards, with `reference_model` as every pool's reference."""
    scores = response_scores(rewards)
    references = pd.DataFrame({"pool": scores["pool"].drop_duplicates(), "reference_model": reference_model})
    return run_sql_model("reference_comparisons", {"leaderboard.response_scores": scores,
                                                   "leaderboard.reference_models": references})


def pairs_from_rewards(rewards: pd.DataFrame) -> pd.DataFrame:
    """pairwise_comparisons.sql over raw rewards: every pair of models per prompt (model_a < model_b), a_score."""
    return run_sql_model("pairwise_comparisons", {"leaderboard.response_scores": response_scores(rewards)})

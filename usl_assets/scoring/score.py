"""Scoring entry points: CRM rewards of one model partition (asset response_rewards) and of an ad hoc profile (the
custom leaderboard), both through the reward cache (cache.py), so nothing is scored twice.

Reads happen in short connections, the CRM runs with no connection open, and each partition's rows are written
in one short transaction (usl_assets/warehouse.py).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from usl_assets.crm.interface import RewardScorer
from usl_assets.responses.pools import content_hash
from usl_assets.scoring.cache import Log, ScoringStats, rewards_for
from usl_assets.scoring.profiles import PROFILE_COLUMNS, PROFILES_TABLE, adhoc_profile_name, criteria_problem, \
    profile_row
from usl_assets.settings import UslConfigError
from usl_assets.warehouse import TableSpec, Writer, store_of, table_exists

REWARDS_TABLE = "scoring.response_rewards"
QUARANTINE_TABLE = "scoring.reward_quarantine"
REWARD_COLUMNS = ["pool", "prompt_id", "model", "profile", "criteria_hash", "response_hash", "checkpoint_id",
                  "reward"]
QUARANTINE_COLUMNS = ["pool", "prompt_id", "model", "profile", "rule", "detail"]
ADHOC_COLUMNS = ["pool", "prompt_id", "model", "scenario", "length_chars", "reward"]

# Partitioned rewards outlive a run (each partition replaces its own rows); ad hoc profiles accumulate.
REWARDS = TableSpec(REWARDS_TABLE, {c: "DOUBLE" if c == "reward" else "VARCHAR" for c in REWARD_COLUMNS})
QUARANTINE = TableSpec(QUARANTINE_TABLE, {c: "VARCHAR" for c in QUARANTINE_COLUMNS})
PROFILES = TableSpec(PROFILES_TABLE, {"profile": "VARCHAR", "kind": "VARCHAR", "scenario": "VARCHAR",
                                      "criteria": "VARCHAR[]", "criteria_hash": "VARCHAR"})


def checkpoint_dir(usl_home_root: Path, checkpoint: str = "", architecture: str | None = None) -> Path:
    """The configured checkpoint folder, or the CRM's current default one."""
    if checkpoint:
        path = Path(checkpoint).expanduser().resolve()
        if not path.is_dir():
            raise UslConfigError(f"CRM checkpoint {checkpoint} is not a folder: give a checkpoint directory")
        return path
    from usl_assets.crm.checkpoints import default_checkpoint

    return Path(default_checkpoint(usl_home_root, architecture))


def load_scorer(usl_home_root: Path, checkpoint: str = "", architecture: str | None = None) -> RewardScorer:
    return _load_scorer_once(str(checkpoint_dir(usl_home_root, checkpoint, architecture)))


@lru_cache(maxsize=2)
def _load_scorer_once(path: str) -> RewardScorer:
    # Kept in memory: the custom leaderboard scores several profiles in one process.
    from usl_assets.crm.checkpoints import load_scorer as load_crm_scorer

    return load_crm_scorer(Path(path))


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
    responses = responses.assign(input_hash=pd.Series([content_hash(p, r) for p, r in zip(
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


def replace_partition_rows(writer: Writer, pool: str, model: str, rewards: pd.DataFrame,
                           quarantine: pd.DataFrame) -> None:
    """Replace this (pool, model)'s rows in response_rewards and reward_quarantine (in the writer's transaction)."""
    writer.replace_rows(REWARDS, rewards, pool=pool, model=model)
    writer.replace_rows(QUARANTINE, quarantine, pool=pool, model=model)


@dataclass
class PartitionResult:
    pool: str
    model: str
    responses: int
    rewards: int
    quarantined: int
    stats: ScoringStats


def score_partition(target, scorer: RewardScorer, pool: str, model: str, profiles: pd.DataFrame,
                    batch_size: int = 16, progress: bool = False, log: Log | None = None) -> PartitionResult:
    """Read the partition's responses, score what the cache lacks, then replace its rows in one transaction."""
    store = store_of(target)
    with store.connect() as conn:
        responses = sampled_responses(conn, pool, model)
    requests, quarantine = reward_requests(responses, profiles)
    rewards, stats = rewards_for(store, scorer, requests, batch_size, progress, log)
    rows, non_finite = attach_rewards(requests, rewards, scorer.checkpoint_id)
    quarantine = pd.concat([quarantine, non_finite], ignore_index=True)
    with store.transaction() as writer:
        replace_partition_rows(writer, pool, model, rows, quarantine)
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


def record_adhoc_profile(writer: Writer, criteria: Sequence[str]) -> dict:
    """Add the ad hoc profile to scoring.criteria_profiles unless it is there already."""
    writer.ensure_table(PROFILES)
    row = profile_row(adhoc_profile_name(criteria), "adhoc", None, criteria)
    writer.insert(PROFILES_TABLE, pd.DataFrame([row], columns=PROFILE_COLUMNS), select=f"""
        SELECT * FROM _rows WHERE NOT EXISTS (SELECT 1 FROM {PROFILES_TABLE} p WHERE p.profile = _rows.profile)""")
    return row


def score_adhoc_profile(
    warehouse,
    usl_home_root: Path,
    pool: str,
    criteria: list[str],
    scenarios: Sequence[str] | None = None,
    progress: bool = False,
    batch_size: int = 16,
    checkpoint: str = "",
) -> pd.DataFrame:
    """Rewards of the pool's responses under the user's own criteria: DataFrame[pool, prompt_id, model, scenario,
    reward]. Scores only what the cache lacks for these criteria under the default checkpoint. `warehouse`: where
    the responses and the cache are (anything with `connect()` and `transaction()`: a Warehouse, a WarehouseFile)."""
    problem = criteria_problem(criteria)
    if problem:
        raise UslConfigError(f"bad --criteria: {problem}")
    if batch_size < 1:
        raise UslConfigError(f"batch size must be at least 1, got {batch_size}")
    scorer = load_scorer(usl_home_root, checkpoint)
    return adhoc_rewards(warehouse, scorer, pool, criteria, scenarios, progress, batch_size)


def adhoc_rewards(target, scorer: RewardScorer, pool: str, criteria: list[str],
                  scenarios: Sequence[str] | None = None, progress: bool = False, batch_size: int = 16,
                  log: Log | None = None) -> pd.DataFrame:
    """score_adhoc_profile on a store (a Warehouse, or a connection to the web page's in-memory copy of the
    published one) with a loaded scorer; `log` hears each scored chunk."""
    problem = criteria_problem(criteria)
    if problem:
        raise UslConfigError(f"bad criteria: {problem}")
    store = store_of(target)
    with store.connect() as conn:
        if not table_exists(conn, "responses.responses"):
            raise UslConfigError("responses.responses is missing: materialize the responses stage first")
        responses = pool_responses(conn, pool, scenarios)
    with store.transaction() as writer:
        profile = record_adhoc_profile(writer, criteria)
    requests = responses.assign(
        input_hash=[content_hash(p, r) for p, r in zip(responses["prompt"], responses["response"])],
        criteria_hash=profile["criteria_hash"],
        criteria=[profile["criteria"]] * len(responses),
    )
    rewards, stats = rewards_for(store, scorer, requests, batch_size, progress, log)
    scored = requests.merge(rewards, on=["criteria_hash", "input_hash"], how="left")[ADHOC_COLUMNS]
    # Non-finite rewards stay NaN (the caller shows them); they are never cached, so a rerun scores them again.
    scored.attrs.update(stats=stats, profile=profile["profile"], checkpoint_id=scorer.checkpoint_id,
                        non_finite=int((~np.isfinite(scored["reward"].to_numpy(dtype=float))).sum()))
    return scored

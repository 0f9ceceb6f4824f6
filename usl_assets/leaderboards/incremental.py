"""Incremental rankings: adding a model costs that model's scores and a re-rank, not a rebuild of the pool.

Under the per-model methods (ranking.PER_MODEL_METHODS) a model's score and interval depend only on its own
comparisons with the reference, on the slice's prompts (the bootstrap draws are seeded by the slice's key) and on
the settings. leaderboard.ranking_inputs keeps a fingerprint of those per pool × profile × model. A rebuild
recomputes the models whose fingerprint changed, takes the other models' rows from the previous
leaderboard.rankings, and re-ranks every slice (ranks compare intervals across models: cheap, always redone).
The result equals a rebuild from scratch (usl_assets_tests/test_leaderboards_incremental.py).
Bradley–Terry is one joint fit of all models: it is the asset `bradley_terry_ratings`, outside this path.
"""

import hashlib
from dataclasses import astuple

import duckdb
import numpy as np
import pandas as pd

from usl_assets.leaderboards import ranking

# Part of every slice's fingerprint: bump it when the per-model math changes, and every cached score is redone.
RANKING_VERSION = "2"
INPUT_COLUMNS = ["pool", "profile", "model", "slice_hash", "model_hash"]
KEY_COLUMNS = ["pool", "profile", "level", "scenario", "method", "model"]


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return h.hexdigest()[:20]


# Per pool × profile × model: a hash of its own comparisons, of its slice's prompts and scenarios, and how many
# topics it appears in (all + its groups + its scenarios). The XOR of row hashes ignores row order; rows are
# distinct (one per prompt), so none cancel. DuckDB's hash() is deterministic for one version; a new DuckDB may
# hash differently, and then every model is scored afresh once.
FINGERPRINT_SQL = """
WITH comparisons AS (
    SELECT pool, profile, model, CAST(prompt_id AS VARCHAR) AS prompt_id, CAST(scenario AS VARCHAR) AS scenario,
           CAST(scenario_group AS VARCHAR) AS scenario_group, CAST(win AS DOUBLE) AS win,
           CAST(reward_diff AS DOUBLE) AS reward_diff, CAST(length_diff AS DOUBLE) AS length_diff
    FROM _comparisons
), slices AS (
    SELECT pool, profile, bit_xor(hash(prompt_id, scenario, scenario_group)) AS prompts
    FROM (SELECT DISTINCT pool, profile, prompt_id, scenario, scenario_group FROM comparisons)
    GROUP BY pool, profile
)
SELECT c.pool, c.profile, c.model, s.prompts,
       bit_xor(hash(c.prompt_id, c.win, c.reward_diff, c.length_diff)) AS own,
       1 + count(DISTINCT c.scenario_group) + count(DISTINCT c.scenario) AS topics
FROM comparisons c JOIN slices s USING (pool, profile)
GROUP BY c.pool, c.profile, c.model, s.prompts
ORDER BY c.pool, c.profile, c.model
"""


def fingerprints(reference_wins: pd.DataFrame, settings: ranking.BootstrapSettings,
                 temperature: float) -> pd.DataFrame:
    """leaderboard.ranking_inputs (INPUT_COLUMNS, plus `topics`): per pool × profile × model, the fingerprint of
    its slice (settings, usl_soft's temperature, the prompts and their scenarios) and of its own comparisons
    (win, reward_diff, length_diff per prompt)."""
    if reference_wins.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in INPUT_COLUMNS}).assign(topics=pd.Series(dtype=int))
    with duckdb.connect() as conn:
        conn.register("_comparisons", reference_wins)
        found = conn.execute(FINGERPRINT_SQL).df()
    setting = repr((RANKING_VERSION, astuple(settings), float(temperature))).encode()
    slice_hashes = {h: _digest(setting, str(h).encode()) for h in found["prompts"].unique()}
    return pd.DataFrame({"pool": found["pool"], "profile": found["profile"], "model": found["model"],
                         "slice_hash": found["prompts"].map(slice_hashes),
                         "model_hash": [f"{int(h):016x}" for h in found["own"]],
                         "topics": found["topics"].astype(int)})


def reusable_rows(inputs: pd.DataFrame, previous_inputs: pd.DataFrame | None,
                  previous_rankings: pd.DataFrame | None) -> pd.DataFrame:
    """The previous per-model rows of every pool × profile × model whose fingerprint is unchanged."""
    if previous_inputs is None or previous_rankings is None or previous_rankings.empty:
        return previous_rankings.iloc[0:0] if previous_rankings is not None else ranking.empty_rankings()
    same = inputs.merge(previous_inputs[INPUT_COLUMNS], on=INPUT_COLUMNS)[["pool", "profile", "model"]]
    kept = previous_rankings[previous_rankings["method"].isin(ranking.PER_MODEL_METHODS)]
    return kept.merge(same, on=["pool", "profile", "model"])


def rank_per_model(reference_wins: pd.DataFrame, settings: ranking.BootstrapSettings, temperature: float,
                   previous_rankings: pd.DataFrame | None = None, previous_inputs: pd.DataFrame | None = None,
                   progress=None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The per-model methods' rows of leaderboard.rankings, reusing what the fingerprints allow.

    Returns (rankings rows, leaderboard.ranking_inputs, recomputed: pool, profile, model of every model scored
    afresh). With no previous tables every model is scored: the rebuild from scratch.
    `progress(done, total, recomputed)` after each pool, if given."""
    inputs = fingerprints(reference_wins, settings, temperature)
    topics = inputs.set_index(["pool", "profile", "model"])["topics"]
    inputs = inputs[INPUT_COLUMNS]
    cached = reusable_rows(inputs, previous_inputs, previous_rankings)
    draws = BootstrapDraws(settings)
    parts, recomputed = [], []
    pools = reference_wins.groupby("pool", sort=True)
    for done, (pool, pool_rows) in enumerate(pools, start=1):
        stale = []
        for profile, rows in pool_rows.groupby("profile", sort=True):
            mine = cached[(cached["pool"] == pool) & (cached["profile"] == profile)]
            have = mine.groupby("model").size()
            expected = topics.loc[(pool, profile)].reindex(have.index) * len(ranking.PER_MODEL_METHODS)
            complete = have[have == expected].index  # a partial cache (rows lost) is redone
            stale += [(profile, model) for model in sorted(set(rows["model"]) - set(complete))]
            parts.append(mine[mine["model"].isin(complete)].drop(columns="rank"))
        layouts = inputs[inputs["pool"] == pool].drop_duplicates("profile").set_index("profile")["slice_hash"]
        for _, profiles in layouts.groupby(layouts, sort=True):  # profiles with the same prompts, scored together
            columns = [(profile, model) for profile, model in stale if profile in set(profiles.index)]
            if columns:
                parts.append(score_columns(pool_rows[pool_rows["profile"].isin(profiles.index)], columns,
                                           settings, temperature, pool, draws))
        recomputed += [(pool, profile, model) for profile, model in stale]
        if progress:
            progress(done, pools.ngroups, len(stale))
    recomputed = pd.DataFrame(recomputed, columns=["pool", "profile", "model"])
    if not parts:
        return ranking.empty_rankings(), inputs, recomputed
    return with_slice_ranks(pd.concat(parts, ignore_index=True)), inputs, recomputed


def score_columns(rows: pd.DataFrame, columns: list[tuple[str, str]], settings: ranking.BootstrapSettings,
                  temperature: float, pool: str, draws: "BootstrapDraws") -> pd.DataFrame:
    """Scores of the (profile, model) `columns` for every per-model method and topic, on the prompts the
    profiles share: one prompts × columns matrix per quantity, each topic a set of its rows."""
    prompts = sorted(rows["prompt_id"].unique())
    facts = rows.drop_duplicates("prompt_id").set_index("prompt_id").reindex(prompts)
    wanted = pd.MultiIndex.from_tuples(columns, names=["profile", "model"])
    own = rows.set_index(["profile", "model"]).loc[lambda f: f.index.isin(wanted)].reset_index()

    def matrix(values: pd.Series) -> np.ndarray:
        table = own.assign(value=values.to_numpy()).pivot_table(index="prompt_id", columns=["profile", "model"],
                                                                values="value", aggfunc="mean")
        return table.reindex(index=prompts, columns=wanted).to_numpy(float)

    wins, soft = matrix(own["win"]), matrix(ranking.soft_wins(own, temperature)["win"])
    lengths = matrix(own["length_diff"])
    topics = [("all", "all", np.ones(len(prompts), bool))]
    topics += [("group", str(g), (facts["scenario_group"] == g).to_numpy())
               for g in sorted(facts["scenario_group"].unique())]
    topics += [("scenario", str(t), (facts["scenario"] == t).to_numpy()) for t in sorted(facts["scenario"].unique())]
    keys, arrays = [], []
    for method in ranking.PER_MODEL_METHODS:
        for level, topic, mask in topics:
            weights = draws.get(pool, level, topic, [p for p, m in zip(prompts, mask) if m])
            if method == "usl_lc":
                found = ranking.lc_arrays(soft[mask], lengths[mask], settings, weights[:settings.bt_rounds])
            else:
                found = ranking.usl_arrays((soft if method == "usl_soft" else wins)[mask], settings,
                                           weights[:settings.usl_rounds])
            keys.append((level, topic, method))
            arrays.append(found)
    score, low, high, n_prompts = (np.concatenate([a[i] for a in arrays]) for i in range(4))
    frame = pd.DataFrame({"pool": pool,
                          "profile": np.tile(wanted.get_level_values("profile").to_numpy(object), len(keys)),
                          "level": np.repeat([k[0] for k in keys], len(wanted)),
                          "scenario": np.repeat([k[1] for k in keys], len(wanted)),
                          "method": np.repeat([k[2] for k in keys], len(wanted)),
                          "model": np.tile(wanted.get_level_values("model").to_numpy(object), len(keys)),
                          "score": score, "ci_low": low, "ci_high": high, "n_prompts": n_prompts})
    return frame[frame["n_prompts"] > 0]  # a model with no prompt in a topic has no row there


class BootstrapDraws:
    """The prompt resamples of each pool × topic, drawn once per rebuild and shared by every profile and method
    (common random numbers: two profiles' intervals rest on the same resamples). Seeded by (seed, pool, level,
    topic) and the topic's prompts, so they never depend on which models are scored or in what order."""

    def __init__(self, settings: ranking.BootstrapSettings):
        self.settings = settings
        self._drawn: dict[tuple, np.ndarray] = {}

    def get(self, pool: str, level: str, topic: str, prompts: list[str]) -> np.ndarray:
        rounds = max(self.settings.usl_rounds, self.settings.bt_rounds)
        key = (pool, level, topic, _digest("\x1f".join(map(str, prompts)).encode("utf-8")))
        if key not in self._drawn:
            rng = ranking.slice_rng(self.settings, pool, level, topic, key[-1])
            self._drawn[key] = ranking.bootstrap_weights(len(prompts), rounds, rng)
        return self._drawn[key]


def with_slice_ranks(scores: pd.DataFrame) -> pd.DataFrame:
    """Overlap ranks within each pool × profile × topic × method; rows ordered by slice, then rank and score."""
    ranks = np.zeros(len(scores), dtype="int64")
    low, high = scores["ci_low"].to_numpy(float), scores["ci_high"].to_numpy(float)
    for positions in scores.groupby(["pool", "profile", "level", "scenario", "method"], sort=False).indices.values():
        ranks[positions] = ranking.overlap_ranks(low[positions], high[positions])
    ranked = scores.assign(rank=ranks, n_prompts=scores["n_prompts"].astype("int64"))
    order = ["pool", "profile", "method", "level", "scenario", "rank", "score"]
    return ranked.sort_values(order, ascending=[True] * 6 + [False], ignore_index=True)[ranking.RANKING_COLUMNS]


def rank_all(reference_wins: pd.DataFrame, pairs: pd.DataFrame, settings: ranking.BootstrapSettings,
             temperature: float = 1.0) -> pd.DataFrame:
    """leaderboard.rankings from scratch, as the assets build it: the per-model methods, then Bradley–Terry."""
    per_model = rank_per_model(reference_wins, settings, temperature)[0]
    return pd.concat([per_model, ranking.bradley_terry_table(pairs, settings)], ignore_index=True)


def canonical_order(table: pd.DataFrame) -> pd.DataFrame:
    """Rows in key order: how two rankings tables are compared, whatever order they were built in."""
    return table.sort_values(KEY_COLUMNS, ignore_index=True)[ranking.RANKING_COLUMNS]

"""What every leaderboard build proves about itself (assets in audit_assets.py; docs/leaderboards.md, "Audits").

Gaming audit: a ranking is only worth something if it cannot be bought. Per pool, five probe models are built
from the pool's own answers to its sampled prompts with crm/gaming.py's held-out bank (never the text the CRM
trained on), scored by the default CRM under each prompt's default criteria and ranked together with the real
models by the default method (usl_soft, overall), with the leaderboards' own functions. The probes live only in
memory and in leaderboard.gaming_audit: never in responses.responses or leaderboard.rankings.

| probe | answers | expectation |
|---|---|---|
| padded | the weakest ranked model's answers in headings, bold summary bullets and filler | at or below that model |
| off_topic | the strongest non-reference model's answers, each given to another prompt | below every real model |
| generic | one polished generic answer for every prompt | below every real model |
| echo | a polite restatement of each prompt | below every real model |
| truncated | the strongest non-reference model's answers cut to their first eighth | at or below that model |

Criteria fidelity, the other audit, is in fidelity.py.
"""

from collections.abc import Callable

import numpy as np
import pandas as pd

from usl_assets.crm import gaming
from usl_assets.crm.interface import ScoreItem
from usl_assets.leaderboards import ranking
from usl_assets.leaderboards.adhoc_comparisons import reference_wins_from_rewards

BANK = "heldout"  # the audit never uses the training bank's filler
PROBE_PREFIX = "probe:"  # a probe's model name in the audit's ranking (no real model name has a colon)
BELOW_EVERY_REAL_MODEL = "below_every_real_model"
AT_OR_BELOW_SOURCE = "at_or_below_source"
# probe -> (which real model its answers come from, what it must do)
PROBES = {
    "padded": ("weakest", AT_OR_BELOW_SOURCE),
    "off_topic": ("strongest", BELOW_EVERY_REAL_MODEL),
    "generic": (None, BELOW_EVERY_REAL_MODEL),
    "echo": (None, BELOW_EVERY_REAL_MODEL),
    "truncated": ("strongest", AT_OR_BELOW_SOURCE),
}
AUDIT_COLUMNS = ["pool", "probe", "derives_from", "expectation", "rank", "n_ranked", "score", "ci_low", "ci_high",
                 "source_rank", "source_score", "lowest_real_rank", "lowest_real_score", "passed", "checkpoint_id"]

# (pool, prompt_id, model, scenario, scenario_group, length_chars, reward, ...) rows as leaderboard.response_scores
Rewards = pd.DataFrame
Log = Callable[[str], None]


def checkpoint_problem(scorer_id: str, reward_ids: set) -> str | None:
    """Why the loaded CRM cannot stand beside the pool's rewards (another checkpoint scored them), or None."""
    found = sorted(str(i) for i in reward_ids if isinstance(i, str))
    if found != [scorer_id]:
        return (f"the default CRM is {scorer_id}, the rewards were scored by {', '.join(found) or 'no checkpoint'}: "
                "re-score the pools (response_rewards) with the default CRM before auditing")
    return None


# The pool's answers to its sampled prompts (what the scoring stage scored), read per pool.
SAMPLED_ANSWERS = """
    SELECT r.pool, r.prompt_id, r.model, r.prompt, r.response, r.scenario, r.scenario_group, r.length_chars
    FROM responses.responses r
    JOIN responses.prompt_sample s ON s.pool = r.pool AND s.prompt_id = r.prompt_id AND s.sampled
    WHERE r.pool = ?
    ORDER BY r.model, r.prompt_id"""


def ranked_answers(query: Callable[[str, list], pd.DataFrame], rankings: pd.DataFrame, pool: str) -> pd.DataFrame:
    """The sampled answers (SAMPLED_ANSWERS) of the models on the pool's default leaderboard; query(sql, params)
    reads the warehouse."""
    answers = query(SAMPLED_ANSWERS, [pool])
    return answers[answers["model"].isin(default_standing(rankings, pool)["model"])].reset_index(drop=True)


def default_standing(rankings: pd.DataFrame, pool: str) -> pd.DataFrame:
    """The pool's ranked real models on its default leaderboard (profile default, topic all, the default method),
    best first: model, score, rank."""
    rows = rankings[(rankings["pool"] == pool) & (rankings["profile"] == "default")
                    & (rankings["scenario"] == "all") & (rankings["method"] == ranking.DEFAULT_METHOD)]
    return rows.sort_values(["score", "model"], ascending=[False, True])[["model", "score", "rank"]] \
        .reset_index(drop=True)


def probe_sources(standing: pd.DataFrame, reference_model: str) -> dict[str, str]:
    """The weakest ranked model (lowest score) and the strongest one other than the reference (the reference
    itself when it is the only model)."""
    models = standing["model"].tolist()
    if not models:
        raise ValueError("no ranked model to derive probes from")
    others = [model for model in models if model != reference_model] or models
    return {"weakest": models[-1], "strongest": others[0]}


def build_probes(answers: pd.DataFrame, prompts: pd.DataFrame, sources: dict[str, str], seed: int,
                 pool: str) -> pd.DataFrame:
    """One row per (probe, prompt): probe, derives_from, expectation, prompt_id, prompt, response.

    answers: the pool's real answers to its sampled prompts (model, prompt_id, prompt, response); prompts: the
    sampled prompts (prompt_id, prompt). Every choice is seeded by (seed, pool, prompt): no row order, no clock."""
    prompts = prompts.drop_duplicates("prompt_id").sort_values("prompt_id", ignore_index=True)
    parts = []

    def add(probe: str, frame: pd.DataFrame, responses: list[str]) -> None:
        source, expectation = PROBES[probe]
        parts.append(pd.DataFrame({"probe": probe, "derives_from": sources[source] if source else None,
                                   "expectation": expectation, "prompt_id": frame["prompt_id"].to_numpy(),
                                   "prompt": frame["prompt"].to_numpy(), "response": responses}))

    def answers_of(model: str) -> pd.DataFrame:
        return answers[answers["model"] == model].sort_values("prompt_id", ignore_index=True)

    weakest, strongest = answers_of(sources["weakest"]), answers_of(sources["strongest"])
    add("padded", weakest, [gaming.padded(answer, BANK, seed, "audit", pool, prompt_id)
                            for answer, prompt_id in zip(weakest["response"], weakest["prompt_id"])])
    moved = gaming.shifted(strongest["prompt_id"].tolist(), seed, "audit", pool)
    keep = [i for i, other in enumerate(moved) if other >= 0]  # a lone prompt has no other prompt's answer
    add("off_topic", strongest.iloc[keep], [strongest["response"].iloc[moved[i]] for i in keep])
    add("generic", prompts, [gaming.generic(BANK, seed, "audit")] * len(prompts))
    add("echo", prompts, [gaming.echo(prompt, BANK, seed, "audit", pool, prompt_id)
                          for prompt, prompt_id in zip(prompts["prompt"], prompts["prompt_id"])])
    add("truncated", strongest, [gaming.truncated(answer) for answer in strongest["response"]])
    return pd.concat(parts, ignore_index=True)


def default_criteria(profiles: pd.DataFrame) -> dict[str, tuple[str, ...]]:
    """scenario -> the criteria of its default profile (scoring.criteria_profiles, kind scenario_default): what the
    real models' `default` rewards were scored under (scoring.score.reward_requests)."""
    defaults = profiles[profiles["kind"] == "scenario_default"]
    return {str(s): tuple(c) for s, c in zip(defaults["scenario"], defaults["criteria"])}


def score_probes(probes: pd.DataFrame, prompts: pd.DataFrame, criteria: dict[str, tuple[str, ...]], scorer,
                 pool: str, batch_size: int = 16) -> Rewards:
    """The probes' rewards under each prompt's default criteria, in leaderboard.response_scores' shape (model =
    PROBE_PREFIX + probe). Prompts whose scenario has no default profile are left out, as scoring quarantines
    them. Nothing is cached or written: the probes stay out of the warehouse's scoring tables."""
    facts = prompts.drop_duplicates("prompt_id")[["prompt_id", "scenario", "scenario_group"]]
    rows = probes.merge(facts, on="prompt_id", how="inner")
    rows = rows[rows["scenario"].isin(criteria)].reset_index(drop=True)
    items = [ScoreItem(prompt=str(p), response=str(r), criteria=criteria[s])
             for p, r, s in zip(rows["prompt"], rows["response"], rows["scenario"])]
    rewards = np.asarray(scorer.score(items, batch_size=batch_size), dtype=float) if items else np.zeros(0)
    return rows.assign(pool=pool, model=PROBE_PREFIX + rows["probe"], profile="default",
                       length_chars=rows["response"].str.len().astype(float), reward=rewards,
                       checkpoint_id=scorer.checkpoint_id)


def rank_with_probes(real: Rewards, probes: Rewards, reference_model: str, temperature: float,
                     settings: ranking.BootstrapSettings, pool: str) -> pd.DataFrame:
    """Real models and probes ranked together overall by the default method, as leaderboard.rankings ranks (the
    reference_comparisons SQL, ranking.score_method, ranking.with_ranks): model, score, ci_low, ci_high, rank."""
    columns = ["pool", "prompt_id", "model", "profile", "scenario", "scenario_group", "length_chars", "reward",
               "checkpoint_id"]
    rewards = pd.concat([part.assign(profile="default")[columns] for part in (real, probes)], ignore_index=True)
    comparisons = reference_wins_from_rewards(rewards, reference_model)
    rng = ranking.slice_rng(settings, pool, "gaming_audit", ranking.DEFAULT_METHOD, "all")
    scores = ranking.score_method(ranking.DEFAULT_METHOD, comparisons, settings, rng, temperature)
    return ranking.with_ranks(scores)


def probe_passed(expectation: str, score: float, lowest_real_score: float, source_score: float) -> bool:
    """below_every_real_model: score < the lowest real model's; at_or_below_source: score <= its source's. A probe
    without a score (NaN) fails."""
    if expectation == BELOW_EVERY_REAL_MODEL:
        return bool(score < lowest_real_score)
    if expectation == AT_OR_BELOW_SOURCE:
        return bool(score <= source_score)
    raise ValueError(f"unknown expectation {expectation!r}")


def audit_rows(ranked: pd.DataFrame, probes: pd.DataFrame, pool: str, checkpoint_id: str) -> pd.DataFrame:
    """leaderboard.gaming_audit's rows of one pool: each probe's standing in the joint ranking and its verdict.
    ranked: rank_with_probes' result; probes: build_probes' rows (probe, derives_from, expectation)."""
    by_model = ranked.set_index("model")
    real = ranked[~ranked["model"].str.startswith(PROBE_PREFIX)]
    lowest = real.sort_values(["score", "rank"], ascending=[True, False]).iloc[0] if len(real) else None
    rows = []
    for probe, derives_from, expectation in probes[["probe", "derives_from", "expectation"]] \
            .drop_duplicates("probe").itertuples(index=False):
        found = by_model.loc[PROBE_PREFIX + probe] if PROBE_PREFIX + probe in by_model.index else None
        source = by_model.loc[derives_from] if derives_from in by_model.index else None
        score = float(found["score"]) if found is not None else float("nan")
        lowest_score = float(lowest["score"]) if lowest is not None else float("nan")
        source_score = float(source["score"]) if source is not None else float("nan")
        rows.append({
            "pool": pool, "probe": probe, "derives_from": derives_from, "expectation": expectation,
            "rank": int(found["rank"]) if found is not None else None, "n_ranked": len(ranked), "score": score,
            "ci_low": float(found["ci_low"]) if found is not None else float("nan"),
            "ci_high": float(found["ci_high"]) if found is not None else float("nan"),
            "source_rank": int(source["rank"]) if source is not None else None, "source_score": source_score,
            "lowest_real_rank": int(lowest["rank"]) if lowest is not None else None,
            "lowest_real_score": lowest_score,
            "passed": probe_passed(expectation, score, lowest_score, source_score),
            "checkpoint_id": checkpoint_id,
        })
    return pd.DataFrame(rows, columns=AUDIT_COLUMNS).astype({"rank": "Int64", "source_rank": "Int64",
                                                             "lowest_real_rank": "Int64"})


def audit_pool(pool: str, standing: pd.DataFrame, reference_model: str, answers: pd.DataFrame,
               real: Rewards, criteria: dict[str, tuple[str, ...]], scorer, temperature: float,
               settings: ranking.BootstrapSettings, seed: int, batch_size: int = 16,
               log: Log = lambda _: None) -> pd.DataFrame:
    """The gaming audit of one pool. standing: default_standing; answers: the pool's sampled answers (model,
    prompt_id, prompt, response, scenario, scenario_group); real: the ranked models' default rewards."""
    sources = probe_sources(standing, reference_model)
    prompts = answers.drop_duplicates("prompt_id")[["prompt_id", "prompt", "scenario", "scenario_group"]]
    probes = build_probes(answers, prompts, sources, seed, pool)
    log(f"{pool}: {len(probes):,} probe answers ({', '.join(PROBES)}) from {sources['weakest']} (weakest) and "
        f"{sources['strongest']} (strongest); scoring them with {scorer.checkpoint_id}")
    scored = score_probes(probes, prompts, criteria, scorer, pool, batch_size)
    ranked = rank_with_probes(real, scored, reference_model, temperature, settings, pool)
    rows = audit_rows(ranked, probes, pool, scorer.checkpoint_id)
    for row in rows.itertuples():
        log(f"{pool}/{row.probe}: rank {row.rank} of {row.n_ranked}, usl_soft {row.score:.1f} "
            f"({row.expectation}: {'passed' if row.passed else 'FAILED'})")
    return rows

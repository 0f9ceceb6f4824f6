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

Criteria fidelity: does a custom leaderboard under one criterion rank by what the criterion says? Per measurable
property, held-out phrasing and pool: Spearman between the models' usl_soft point scores under [phrasing] and the
property measured on their answers, next to what ranking by mean answer length alone gives.
"""

from collections.abc import Callable

import numpy as np
import pandas as pd
from scipy import stats

from usl_assets.crm import gaming
from usl_assets.crm.features import response_counts
from usl_assets.crm.interface import ScoreItem
from usl_assets.leaderboards import ranking
from usl_assets.leaderboards.adhoc_comparisons import reference_wins_from_rewards
from usl_assets.responses.pools import content_hash

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
FIDELITY_COLUMNS = ["pool", "property", "direction", "family", "trained", "phrasing", "n_models", "spearman",
                    "length_spearman", "property_spearman", "varying_prompts", "spearman_where_it_varies",
                    "checkpoint_id"]
FIDELITY_FLOOR = 0.8  # the check: median Spearman per pool at least this
FIDELITY_LOW = 0.5  # phrasings below this are counted in the check's metadata
PHRASING_CHUNK = 16  # phrasings whose rewards are compared at once (21,735 AlpacaEval answers each)

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


# ----------------------------------------------------------------------------------------------------------------
# Criteria fidelity

def spearman(values: pd.Series, target: pd.Series) -> float:
    """Spearman over the models both have; NaN below 3 models or when either side is constant."""
    both = pd.concat([values.rename("a"), target.rename("b")], axis=1).dropna()
    if len(both) < 3 or both["a"].nunique() < 2 or both["b"].nunique() < 2:
        return float("nan")
    return float(stats.spearmanr(both["a"], both["b"]).statistic)


def property_values(answers: pd.DataFrame, names: list[str], property_value) -> pd.DataFrame:
    """answers × properties: property_value(name, response_counts(answer))."""
    counts = [response_counts(text) for text in answers["response"]]
    return pd.DataFrame({name: [property_value(name, c) for c in counts] for name in names},
                        index=answers.index, dtype=float)


def property_means(answers: pd.DataFrame, names: list[str], property_value) -> pd.DataFrame:
    """models × properties: the mean of property_value(name, response_counts(answer)) over each model's answers."""
    return property_values(answers, names, property_value).groupby(answers["model"]).mean()


def varying_prompts(answers: pd.DataFrame, values: pd.DataFrame) -> dict[str, set]:
    """Per property, the prompts whose answers differ in it: where a criterion about it can change a ranking (code
    varies on coding prompts only; a criterion asking for code leaves the other prompts' comparisons alone)."""
    spread = values.groupby(answers["prompt_id"]).agg(lambda column: column.max() - column.min())
    return {name: set(spread.index[spread[name] > 0]) for name in values.columns}


def response_rows(scorer, answers: pd.DataFrame, cached: dict[str, np.ndarray], batch_size: int = 16) -> np.ndarray:
    """The factorized / linear CRM's response rows of the answers: from scoring.response_embeddings (`cached`,
    by content_hash) where scoring left them, embedded here (not stored) otherwise."""
    hashes = [content_hash(p, r) for p, r in zip(answers["prompt"], answers["response"])]
    missing = [i for i, h in enumerate(hashes) if h not in cached]
    fresh = {}
    if missing:
        rows = scorer.embed_responses([str(answers["prompt"].iloc[i]) for i in missing],
                                      [str(answers["response"].iloc[i]) for i in missing], batch_size=batch_size)
        fresh = {hashes[i]: row for i, row in zip(missing, np.asarray(rows, dtype=np.float32))}
    return np.stack([cached[h] if h in cached else fresh[h] for h in hashes]) if hashes else np.zeros((0, 1))


def phrasing_rewards(scorer, answers: pd.DataFrame, phrasings: list[str], rows: np.ndarray | None,
                     batch_size: int = 16) -> Rewards:
    """Each answer's reward under each phrasing as the whole criteria ([text]); `profile` = the phrasing. With
    response rows (a CachedResponseScorer) a phrasing costs one criteria embedding and a matrix product; without,
    the CRM scores every (answer, phrasing). Nothing is cached or recorded as a profile."""
    parts, base = [], answers.drop(columns=["prompt", "response"])
    base = base.astype({c: "category" for c in base.columns if base[c].dtype == object})  # 6× faster into DuckDB
    if rows is not None:
        criteria_rows = np.asarray(scorer.embed_criteria([(text,) for text in phrasings]))
        for text, criteria_row in zip(phrasings, criteria_rows):
            parts.append(base.assign(profile=text, reward=np.asarray(
                scorer.score_embedded(rows, criteria_row), dtype=float).reshape(-1)))
    else:
        for text in phrasings:
            items = [ScoreItem(prompt=str(p), response=str(r), criteria=(text,))
                     for p, r in zip(answers["prompt"], answers["response"])]
            parts.append(base.assign(profile=text, reward=np.asarray(scorer.score(items, batch_size=batch_size),
                                                                        dtype=float)))
    return pd.concat(parts, ignore_index=True).astype({"profile": "category"})


def point_scores(rewards: Rewards, reference_model: str, temperature: float,
                 prompts: dict[str, set] | None = None) -> pd.DataFrame:
    """profiles × models: usl_soft point scores (100 × mean P(beats the reference)), no bootstrap; with `prompts`
    (profile → prompt ids), each profile's score over those prompts only."""
    comparisons = reference_wins_from_rewards(rewards, reference_model)
    soft = ranking.soft_wins(comparisons, temperature)
    if prompts is not None:
        keep = [prompt in prompts.get(str(profile), ()) for profile, prompt in zip(soft["profile"], soft["prompt_id"])]
        soft = soft[np.asarray(keep, dtype=bool)]
    table = (100.0 * soft.groupby(["profile", "model"], observed=True)["win"].mean()).unstack("model")
    table.index, table.columns = table.index.astype(str), table.columns.astype(str)
    return table


def property_wins(answers: pd.DataFrame, values: pd.DataFrame, reference_model: str) -> pd.DataFrame:
    """models × properties: 100 × the share of prompts where the model's answer has more of the property than the
    reference's (ties count half): the leaderboard a perfect reader of "more of it" would give under usl_soft's
    comparison with the reference, however strongly it weighed the property (for "less", 100 minus it)."""
    frame = values.assign(model=answers["model"].to_numpy(), prompt_id=answers["prompt_id"].to_numpy())
    reference = frame[frame["model"] == reference_model].drop(columns="model").set_index("prompt_id")
    joined = frame.join(reference, on="prompt_id", rsuffix="__reference").dropna()
    wins = pd.DataFrame({name: np.sign(joined[name] - joined[f"{name}__reference"]) / 2 + 0.5
                         for name in values.columns}, index=joined.index)
    return 100.0 * wins.groupby(joined["model"]).mean()


def fidelity_rows(pool: str, phrasings: list[tuple], scores: pd.DataFrame, properties: pd.DataFrame,
                  lengths: pd.Series, checkpoint_id: str, trained: set[str] | None = None,
                  varying: tuple[pd.DataFrame, dict[str, set]] | None = None,
                  ceilings: pd.DataFrame | None = None) -> pd.DataFrame:
    """leaderboard.criteria_fidelity's rows of one pool. phrasings: (property, direction, family, text); scores:
    point_scores; properties: property_means; lengths: mean answer length per model. The target is the property
    (negated for direction 'less'); length_spearman ranks by length alone, longer first for 'more', shorter for
    'less'; property_spearman ranks by `ceilings` (property_wins), the same for both directions. trained: the
    properties the CRM has train rows of (None: all). varying: the point scores over the prompts where each
    property varies, and those prompts per property."""
    rows = []
    varying_scores, varying_sets = varying if varying is not None else (pd.DataFrame(), {})
    ceilings = ceilings if ceilings is not None else pd.DataFrame()
    for name, direction, family, text in phrasings:
        sign = -1.0 if direction == "less" else 1.0
        target = sign * properties[name]
        model_scores = scores.loc[text] if text in scores.index else pd.Series(dtype=float)
        rows.append({"pool": pool, "property": name, "direction": direction, "family": family,
                     "trained": trained is None or name in trained, "phrasing": text,
                     "n_models": int(model_scores.dropna().index.intersection(target.dropna().index).size),
                     "spearman": spearman(model_scores, target), "length_spearman": spearman(sign * lengths, target),
                     "property_spearman": spearman(sign * ceilings[name], target)
                     if name in ceilings else float("nan"),
                     "varying_prompts": len(varying_sets.get(name, ())),
                     "spearman_where_it_varies": spearman(varying_scores.loc[text], target)
                     if text in varying_scores.index else float("nan"),
                     "checkpoint_id": checkpoint_id})
    return pd.DataFrame(rows, columns=FIDELITY_COLUMNS)


def fidelity_pool(pool: str, answers: pd.DataFrame, reference_model: str, phrasings: list[tuple], property_value,
                  scorer, cached: dict[str, np.ndarray] | None, temperature: float, batch_size: int = 16,
                  log: Log = lambda _: None, trained: set[str] | None = None) -> pd.DataFrame:
    """Criteria fidelity of one pool. answers: the ranked models' sampled answers (pool, prompt_id, model, prompt,
    response, scenario, scenario_group, length_chars); cached: the CRM's cached response rows (None: the CRM
    caches none, so every phrasing is scored in full)."""
    texts = list(dict.fromkeys(text for *_, text in phrasings))
    rows = response_rows(scorer, answers, cached, batch_size) if cached is not None else None
    log(f"{pool}: scoring {len(answers):,} answers of {answers['model'].nunique()} models under {len(texts)} "
        f"held-out phrasings ({'cached response rows' if rows is not None else 'the full CRM'})")
    values = property_values(answers, sorted({name for name, *_ in phrasings}), property_value)
    varying = varying_prompts(answers, values)
    prompts_of = {text: varying[name] for name, _, _, text in phrasings}
    scores, where = [], []
    for i in range(0, len(texts), PHRASING_CHUNK):  # a few phrasings' rows at a time
        rewards = phrasing_rewards(scorer, answers, texts[i:i + PHRASING_CHUNK], rows, batch_size)
        scores.append(point_scores(rewards, reference_model, temperature))
        where.append(point_scores(rewards, reference_model, temperature, prompts_of))
    lengths = answers.groupby("model")["length_chars"].mean()
    return fidelity_rows(pool, phrasings, pd.concat(scores), values.groupby(answers["model"]).mean(), lengths,
                         scorer.checkpoint_id, trained, (pd.concat(where), varying),
                         property_wins(answers, values, reference_model))


def fidelity_summary(table: pd.DataFrame, by: str) -> pd.DataFrame:
    """Median and min Spearman (and of the length baseline), phrasings and how many are below FIDELITY_LOW."""
    grouped = table.groupby(by, dropna=False)
    return pd.DataFrame({
        "phrasings": grouped.size(), "median_spearman": grouped["spearman"].median(),
        "min_spearman": grouped["spearman"].min(),
        "below_0_5": grouped["spearman"].apply(lambda s: int((s < FIDELITY_LOW).sum())),
        "median_length_spearman": grouped["length_spearman"].median(),
        "median_property_spearman": grouped["property_spearman"].median(),
    }).reset_index()


def fidelity_verdict(table: pd.DataFrame, floor: float = FIDELITY_FLOOR) -> tuple[bool, pd.DataFrame]:
    """Passed when every pool's median Spearman over the trained properties' phrasings is at least `floor` (and
    some pool was measured)."""
    table = table[table["trained"].astype(bool)] if "trained" in table else table
    per_pool = fidelity_summary(table, "pool") if len(table) else pd.DataFrame(columns=["pool", "median_spearman"])
    passed = bool(len(per_pool)) and bool((per_pool["median_spearman"] >= floor).all())
    return passed, per_pool

"""Criteria fidelity (asset in audit_assets.py; docs/leaderboards.md, "Audits"): does a custom leaderboard under
one criterion rank by what the criterion says? Per measurable property, held-out phrasing and pool: Spearman
between the models' usl_soft point scores under [phrasing] and the property measured on their answers, next to
what ranking by mean answer length alone gives, what a perfect reader would give, and what the phrasing's own
leaderboard gives with its property made decisive.
"""

import numpy as np
import pandas as pd
from scipy import special, stats

from usl_assets.crm.features import response_counts
from usl_assets.crm.interface import ScoreItem
from usl_assets.leaderboards import ranking
from usl_assets.leaderboards.adhoc_comparisons import reference_wins_from_rewards
from usl_assets.leaderboards.audits import Log, Rewards
from usl_assets.responses.pools import content_hash

FIDELITY_COLUMNS = ["pool", "property", "direction", "family", "trained", "phrasing", "n_models", "spearman",
                    "length_spearman", "property_spearman", "decisive_spearman", "varying_prompts",
                    "spearman_where_it_varies", "checkpoint_id"]
FIDELITY_FLOOR = 0.8  # the check: median Spearman per pool at least this
FIDELITY_LOW = 0.5  # phrasings below this are counted in the check's metadata
# The properties training rows name; the others (splits.heldout_properties) are measured as `trained` False.
TRAINED_PROPERTIES = "SELECT DISTINCT property FROM crm.training_pairs WHERE split = 'train' AND property IS NOT NULL"
PHRASING_CHUNK = 16  # phrasings whose rewards are compared at once (21,735 AlpacaEval answers each)



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


def _against_reference(answers: pd.DataFrame, values: pd.DataFrame, reference_model: str) -> pd.DataFrame:
    """Each answer's values beside the reference's answer to the same prompt (columns `<name>__reference`)."""
    frame = values.assign(model=answers["model"].to_numpy(), prompt_id=answers["prompt_id"].to_numpy())
    reference = frame[frame["model"] == reference_model].drop(columns="model").set_index("prompt_id")
    return frame.join(reference, on="prompt_id", rsuffix="__reference").dropna()


def property_wins(answers: pd.DataFrame, values: pd.DataFrame, reference_model: str) -> pd.DataFrame:
    """models × properties: 100 × the share of prompts where the model's answer has more of the property than the
    reference's (ties count half): the leaderboard a perfect reader of "more of it" would give under usl_soft's
    comparison with the reference, however strongly it weighed the property (for "less", 100 minus it)."""
    joined = _against_reference(answers, values, reference_model)
    wins = pd.DataFrame({name: np.sign(joined[name] - joined[f"{name}__reference"]) / 2 + 0.5
                         for name in values.columns}, index=joined.index)
    return 100.0 * wins.groupby(joined["model"]).mean()


def decisive_scores(answers: pd.DataFrame, values: pd.Series, rewards: np.ndarray, direction: str,
                    reference_model: str, temperature: float) -> pd.Series:
    """Per model, the usl_soft point score of one phrasing's leaderboard with its property made decisive: per
    prompt the property decides where the model's and the reference's answers differ in it (the one with more wins
    "more"), and `rewards` (the CRM's under that phrasing) decide where they tie, σ(temperature · Δreward) as in
    usl_soft. It is the limit of the phrasing's leaderboard as its reading's gain grows without bound (had the gate
    read the property exactly as property_value measures it): where it is low, turning the criterion up does not
    help, for most comparisons tie in the property and the rest of the CRM's judgment decides them (MT-Bench's
    bold text). Not a ceiling: a finite gain also weighs how much more of the property an answer has."""
    frame = pd.DataFrame({"value": values.to_numpy(float), "reward": np.asarray(rewards, dtype=float)})
    joined = _against_reference(answers, frame, reference_model)
    sign = -1.0 if direction == "less" else 1.0
    difference = sign * (joined["value"] - joined["value__reference"]).to_numpy()
    tied = special.expit(temperature * (joined["reward"] - joined["reward__reference"]).to_numpy())
    wins = np.where(difference > 0, 1.0, np.where(difference < 0, 0.0, tied))
    return 100.0 * pd.Series(wins, index=joined.index).groupby(joined["model"]).mean()


def fidelity_rows(pool: str, phrasings: list[tuple], scores: pd.DataFrame, properties: pd.DataFrame,
                  lengths: pd.Series, checkpoint_id: str, trained: set[str] | None = None,
                  varying: tuple[pd.DataFrame, dict[str, set]] | None = None,
                  ceilings: pd.DataFrame | None = None,
                  decisive: dict[tuple, pd.Series] | None = None) -> pd.DataFrame:
    """leaderboard.criteria_fidelity's rows of one pool. phrasings: (property, direction, family, text); scores:
    point_scores; properties: property_means; lengths: mean answer length per model. The target is the property
    (negated for direction 'less'); length_spearman ranks by length alone, longer first for 'more', shorter for
    'less'; property_spearman ranks by `ceilings` (property_wins), the same for both directions. trained: the
    properties the CRM has train rows of (None: all). varying: the point scores over the prompts where each
    property varies, and those prompts per property. decisive: decisive_scores per phrasing tuple."""
    rows = []
    varying_scores, varying_sets = varying if varying is not None else (pd.DataFrame(), {})
    ceilings = ceilings if ceilings is not None else pd.DataFrame()
    decisive = decisive or {}
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
                     "decisive_spearman": spearman(decisive[(name, direction, family, text)], target)
                     if (name, direction, family, text) in decisive else float("nan"),
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
    scores, where, decisive = [], [], {}
    for i in range(0, len(texts), PHRASING_CHUNK):  # a few phrasings' rows at a time
        rewards = phrasing_rewards(scorer, answers, texts[i:i + PHRASING_CHUNK], rows, batch_size)
        scores.append(point_scores(rewards, reference_model, temperature))
        where.append(point_scores(rewards, reference_model, temperature, prompts_of))
        for phrasing in (p for p in phrasings if p[3] in texts[i:i + PHRASING_CHUNK]):
            own = rewards.loc[rewards["profile"] == phrasing[3], "reward"].to_numpy()  # in the answers' order
            decisive[phrasing] = decisive_scores(answers, values[phrasing[0]], own, phrasing[1], reference_model,
                                                 temperature)
    lengths = answers.groupby("model")["length_chars"].mean()
    return fidelity_rows(pool, phrasings, pd.concat(scores), values.groupby(answers["model"]).mean(), lengths,
                         scorer.checkpoint_id, trained, (pd.concat(where), varying),
                         property_wins(answers, values, reference_model), decisive)


def fidelity_summary(table: pd.DataFrame, by: str) -> pd.DataFrame:
    """Median and min Spearman (and of the length baseline), phrasings and how many are below FIDELITY_LOW."""
    grouped = table.groupby(by, dropna=False)
    return pd.DataFrame({
        "phrasings": grouped.size(), "median_spearman": grouped["spearman"].median(),
        "min_spearman": grouped["spearman"].min(),
        "below_0_5": grouped["spearman"].apply(lambda s: int((s < FIDELITY_LOW).sum())),
        "median_length_spearman": grouped["length_spearman"].median(),
        "median_property_spearman": grouped["property_spearman"].median(),
        "median_decisive_spearman": grouped["decisive_spearman"].median(),
        "decisive_below_0_5": grouped["decisive_spearman"].apply(lambda s: int((s < FIDELITY_LOW).sum())),
    }).reset_index()


def fidelity_verdict(table: pd.DataFrame, floor: float = FIDELITY_FLOOR) -> tuple[bool, pd.DataFrame]:
    """Passed when every pool's median Spearman over the trained properties' phrasings is at least `floor` (and
    some pool was measured)."""
    table = table[table["trained"].astype(bool)] if "trained" in table else table
    per_pool = fidelity_summary(table, "pool") if len(table) else pd.DataFrame(columns=["pool", "median_spearman"])
    passed = bool(len(per_pool)) and bool((per_pool["median_spearman"] >= floor).all())
    return passed, per_pool

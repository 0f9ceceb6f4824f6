"""Why a model ranks where it does: the linear CRM's reward is a sum of readable terms (crm/linear.py),

    r(c, p, a) = u·h(a) + Σ_f (v + W e(c))_f · f(p, a),

so a reward splits exactly into the word n-gram score and one term per group of features (length, structure, code…
as properties.PROPERTY_FEATURES groups them; the answer's fit to the prompt; the graded answers; degeneration; the
other style features). The usl methods compare a model's answer with the pool's reference model's on each prompt,
so what places a model is its mean term difference against the reference over the ranked prompts, under the
criteria the ranking used. `usl leaderboard --explain MODEL` prints it and the page's "Why?" shows it (both through
breakdown_of); the neural CRMs have no such breakdown.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from usl_assets.crm.features import DEGENERATION_FEATURES
from usl_assets.crm.linear_rows import GRADED_FEATURES, ROW_FEATURES
from usl_assets.crm.properties import PROPERTY_FEATURES
from usl_assets.crm.relevance import TEXT_RELEVANCE_FEATURES
from usl_assets.settings import UslConfigError

NGRAM_TERM = "word n-grams (the text score)"
RELEVANCE_TERM = "fit to the prompt (relevance, unsupported sentences, unfinished ending)"
GRADED_TERM = "graded answers (the AI judge's grades of other answers to the prompt)"
DEGENERATION_TERM = "degeneration (repeats, prompt copies, prompt terms missed)"
OTHER_TERM = "other style features"
SHORTFALL_TERM = "substance shortfall under a wish (an answer that misses the prompt)"


def term_of(feature: str) -> str:
    """The term a ROW_FEATURES feature's contribution is counted under (the first property that claims it)."""
    for prop, features in PROPERTY_FEATURES.items():
        if feature in features:
            return prop
    if feature in TEXT_RELEVANCE_FEATURES:
        return RELEVANCE_TERM
    if feature in GRADED_FEATURES:
        return GRADED_TERM
    if feature in DEGENERATION_FEATURES:
        return DEGENERATION_TERM
    return OTHER_TERM


def reward_terms(weights, rows: np.ndarray, criteria_vectors: np.ndarray) -> pd.DataFrame:
    """Per response (a row of `rows`: [n-gram score, ROW_FEATURES raw], under its own criteria vector): the reward's
    terms, one column each; they add up to the reward (LinearWeights.reward_terms: under a wish the terms are
    the wish focus's, crm/linear_weights.py)."""
    rows = np.asarray(rows)
    criteria_vectors = np.atleast_2d(np.asarray(criteria_vectors, np.float64))
    if len(criteria_vectors) == 1:
        criteria_vectors = np.repeat(criteria_vectors, len(rows), axis=0)
    distinct, which = np.unique(criteria_vectors, axis=0, return_inverse=True)
    which = which.reshape(-1)
    ngram, shortfall = np.zeros(len(rows)), np.zeros(len(rows))
    contributions = np.zeros((len(rows), len(weights.columns)))
    for i, vector in enumerate(distinct):
        members = which == i
        ngram[members], contributions[members], shortfall[members] = weights.reward_terms(rows[members], vector)
    terms = {NGRAM_TERM: ngram}
    for position, column in enumerate(weights.columns):
        name = term_of(ROW_FEATURES[column])
        terms[name] = terms.get(name, 0.0) + contributions[:, position]
    if np.any(shortfall):
        terms[SHORTFALL_TERM] = shortfall
    return pd.DataFrame(terms)


def model_breakdown(terms: pd.DataFrame, reference_terms: pd.DataFrame) -> pd.DataFrame:
    """Mean term difference (model − reference) over the prompts both answered (rows aligned by prompt), largest
    first, with the total: term, difference, share (of the summed absolute differences)."""
    difference = (terms.to_numpy() - reference_terms.to_numpy()).mean(axis=0)
    table = pd.DataFrame({"term": terms.columns, "difference": difference})
    table = table.reindex(table["difference"].abs().sort_values(ascending=False).index).reset_index(drop=True)
    total = np.abs(table["difference"]).sum()
    table["share"] = np.abs(table["difference"]) / total if total > 0 else 0.0
    return table


def render_breakdown(model: str, reference: str, table: pd.DataFrame, n_prompts: int, won: float,
                     temperature: float, criteria: list[str], scope: str) -> str:
    """The breakdown as text: what it compares, under which criteria and scale, then one line per term."""
    total = float(table["difference"].sum())
    said = "; ".join(f"'{c}'" for c in criteria) if criteria else "each prompt's scenario default criteria"
    lines = [f"why {model} ranks here: its reward against {reference}'s (the reference) on the same "
             f"{n_prompts} prompts ({'every prompt' if scope == 'all' else scope}), under {said}.",
             f"  reward difference {total:+.3f} on average (reward units: a difference d is a win probability "
             f"σ(d/{temperature:.2f}) under usl_soft; 0 is even); its answer has the higher reward on "
             f"{won:.0%} of the prompts.",
             "  by term (model − reference, mean over prompts; largest first):"]
    width = max(len(term) for term in table["term"])
    for row in table.itertuples():
        lines.append(f"    {row.term:<{width}}  {row.difference:+.3f}  ({row.share:.0%} of the moves)")
    return "\n".join(lines)


def paired_answers(responses: pd.DataFrame, model: str, reference: str,
                   scenarios: set[str] | None = None) -> pd.DataFrame:
    """The model's and the reference's answers to the prompts both answered (of `scenarios` when given: scoring
    ranks no prompt without a default profile), the model's first, each in prompt order."""
    if scenarios is not None:
        responses = responses[responses["scenario"].isin(scenarios)]
    responses = responses[responses["model"].isin([model, reference])]
    answered = responses.groupby("prompt_id")["model"].nunique()
    responses = responses[responses["prompt_id"].isin(answered[answered == 2].index)]
    return (responses.assign(_first=responses["model"] != model).sort_values(["_first", "prompt_id"])
            .drop(columns="_first").reset_index(drop=True))


@dataclass
class Breakdown:
    """One model's breakdown against the pool's reference (`usl leaderboard --explain MODEL` and the page's "Why?"):
    the terms (term, difference, share; largest first) or, where there is none, `note` saying why."""
    model: str
    reference: str | None
    scope: str  # what the board ranks by: 'all' or the topics
    criteria: list[str]  # [] : each prompt's scenario default criteria
    temperature: float  # usl_soft's k: a reward difference d is a win probability σ(d/k)
    table: pd.DataFrame | None = None
    n_prompts: int = 0
    won: float = float("nan")  # share of the prompts where the model's answer has the higher reward
    note: str = ""

    @property
    def total(self) -> float:
        return float(self.table["difference"].sum()) if self.table is not None else float("nan")


def no_breakdown(model: str, board, pool: str, scorer, asked_as: str = "") -> str:
    """The line saying why MODEL has no breakdown (a CRM that is not linear; the reference itself), or ""; a model
    the board does not rank is a UslConfigError (its message starts with `asked_as`)."""
    if getattr(scorer, "architecture", None) != "linear":
        return (f"no breakdown for {model}: the default CRM is {getattr(scorer, 'architecture', 'neural')}, whose "
                "reward is not a sum of readable terms (only the linear CRM's is)")
    models = set(board.long["model"])
    if model not in models:
        raise UslConfigError(f"{asked_as}{model!r}: not a ranked model of pool {pool} (e.g. "
                             f"{', '.join(sorted(models)[:4])})")
    if board.reference is None or model == board.reference:
        return f"no breakdown for {model}: it is the pool's reference model, the one every other model is compared with"
    return ""


def breakdown_of(model: str, board, pool: str, criteria: list[str], scorer, conn,
                 default_criteria: Callable[[], pd.DataFrame], temperature: float) -> Breakdown:
    """MODEL's breakdown against the board's reference over the prompts the board ranks by (every prompt when it
    ranks by 'all'), under `criteria` (none: each prompt's scenario default criteria, from `default_criteria()`:
    scenario, criteria), with the response rows cached in `conn` (scoring.response_embeddings of the scorer's
    checkpoint; missing ones are computed, not stored). The CLI reads its ad hoc cache, the page its in-memory copy
    of the published warehouse. The CLI and the page both call this: one arithmetic."""
    from usl_assets.responses.pools import content_hash
    from usl_assets.scoring.cache import cached_embeddings
    from usl_assets.scoring.score import pool_responses

    found = Breakdown(model, board.reference, board.scope, list(criteria), temperature,
                      note=no_breakdown(model, board, pool, scorer))
    if found.note:
        return found
    reference = board.reference
    defaults = None if criteria else default_criteria()
    topics = None if board.scope == "all" else (board.topics or None)
    responses = paired_answers(pool_responses(conn, pool, topics), model, reference,
                               None if criteria else set(defaults["scenario"]))
    hashes = [content_hash(p, r) for p, r in zip(responses["prompt"], responses["response"])]
    cached = cached_embeddings(conn, scorer.checkpoint_id, hashes)
    missing = [i for i, h in enumerate(hashes) if h not in cached]
    computed = (scorer.embed_responses(responses["prompt"].iloc[missing].tolist(),
                                       responses["response"].iloc[missing].tolist()) if missing else [])
    rows = np.stack([cached[h] if h in cached else computed[missing.index(i)] for i, h in enumerate(hashes)])
    if criteria:
        vectors = scorer.embed_criteria([tuple(criteria)])  # one vector for every row
    else:  # each prompt under its scenario's default criteria, as scoring scores it
        by_scenario = dict(zip(defaults["scenario"], defaults["criteria"]))
        scenarios = list(dict.fromkeys(responses["scenario"]))
        embedded = dict(zip(scenarios, scorer.embed_criteria([tuple(by_scenario[s]) for s in scenarios])))
        vectors = np.stack([embedded[s] for s in responses["scenario"]])
    terms = reward_terms(scorer.weights, rows, vectors)
    mine = (responses["model"] == model).to_numpy()
    found.table = model_breakdown(terms[mine].reset_index(drop=True), terms[~mine].reset_index(drop=True))
    found.won = float((terms[mine].sum(axis=1).to_numpy() > terms[~mine].sum(axis=1).to_numpy()).mean())
    found.n_prompts = int(mine.sum())
    return found


def cli_breakdown(model: str, board, pool: str, criteria: list[str], home: Path | None = None,
                  scorer=None) -> Breakdown:
    """The CLI's breakdown: the default CRM (or `scorer`), the ad hoc cache's response rows (scored rows are
    reused; missing ones computed), the published default criteria and usl_soft's temperature."""
    from usl_assets.leaderboards.commands import adhoc_cache, read_published, usl_soft_temperature
    from usl_assets.scoring.score import load_scorer
    from usl_assets.settings import usl_home

    scorer = scorer or load_scorer(home or usl_home())
    note = no_breakdown(model, board, pool, scorer, asked_as="--explain ")  # before the cache is opened
    if note:
        return Breakdown(model, board.reference, board.scope, list(criteria), float("nan"), note=note)
    defaults = partial(read_published, "SELECT scenario, criteria FROM scoring.criteria_profiles "
                                       "WHERE kind = 'scenario_default'")
    with adhoc_cache().connect() as conn:
        return breakdown_of(model, board, pool, criteria, scorer, conn, defaults, usl_soft_temperature())


def explain_model(model: str, board, pool: str, criteria: list[str], home: Path | None = None) -> str:
    """`usl leaderboard --explain MODEL`: the breakdown of MODEL against the pool's reference over the prompts the
    board ranks by, as text."""
    found = cli_breakdown(model, board, pool, criteria, home)
    if found.note:
        return found.note
    return render_breakdown(model, found.reference, found.table, found.n_prompts, found.won, found.temperature,
                            criteria, found.scope)

"""Leaderboard math: the USL score and Bradley–Terry ratings, each with a bootstrap interval over prompts.

Inputs are the per-prompt comparisons the SQL models build (leaderboard.reference_comparisons,
leaderboard.pairwise_comparisons); outputs are rows of leaderboard.rankings. Everything here is plain
numpy/pandas so the CLI and the assets rank the same way.

- USL score (the paper's): per prompt, does the model's response beat the pool's reference model's response
  under the profile (1 win, 0.5 equal reward, 0 loss); the score is the mean in percent.
- Bradley–Terry: every pair of models on every prompt is one comparison; the strengths are fitted by choix's
  iterative Luce spectral ranking, every bootstrap resample at once, and reported on the Elo scale Chatbot Arena
  uses (400 points = 10:1 odds, mean 1000).
- Intervals: percentile bootstrap over prompts (resample prompts with replacement, seeded).
- Rank: 1 + the number of models whose ci_low is above this model's ci_high (Chatbot Arena's rule), so models
  whose intervals overlap share a rank.
"""

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

ELO_SCALE = 400 / np.log(10)
ELO_BASE = 1000.0
BT_REGULARIZATION = 0.01  # choix's alpha: keeps the fit finite when a model wins or loses every comparison
RANK_TOLERANCE = 1e-6  # score units (percent, Elo)
BT_TOLERANCE, BT_MAX_ITERATIONS = 1e-8, 500  # choix's stopping rule: mean |change| of the log-strengths

RANKING_COLUMNS = [
    "pool", "level", "scenario", "profile", "model", "method", "score", "ci_low", "ci_high", "rank", "n_prompts",
]


@dataclass(frozen=True)
class BootstrapSettings:
    usl_rounds: int = 1000
    bt_rounds: int = 200
    confidence: float = 0.95
    seed: int = 0


def bootstrap_weights(n_prompts: int, rounds: int, rng: np.random.Generator) -> np.ndarray:
    """rounds × n_prompts: how many times each prompt is drawn in each resample (a multinomial draw)."""
    return rng.multinomial(n_prompts, np.full(n_prompts, 1.0 / n_prompts), size=rounds).astype(float)


def drawn_weights(rng: np.random.Generator | np.ndarray, n_prompts: int, rounds: int) -> np.ndarray:
    """Bootstrap weights: drawn from `rng`, or `rng` itself when the caller drew them (shared across slices)."""
    if isinstance(rng, np.ndarray):
        assert rng.shape == (rounds, n_prompts), (rng.shape, rounds, n_prompts)
        return rng
    return bootstrap_weights(n_prompts, rounds, rng)


def interval(samples: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval per column of `samples` (rounds × items)."""
    tail = (1.0 - confidence) / 2.0 * 100.0
    percentile = np.percentile if np.isfinite(samples).all() else np.nanpercentile  # the same where no NaN; faster
    low, high = percentile(samples, [tail, 100.0 - tail], axis=0)
    return low, high


def overlap_ranks(ci_low: np.ndarray, ci_high: np.ndarray) -> np.ndarray:
    """1 + number of items whose ci_low exceeds this item's ci_high (ties where intervals overlap). Intervals that
    touch to within RANK_TOLERANCE overlap: a topic of one prompt gives many equal ends, and which of two equal
    ends is larger must not depend on rounding in the fit."""
    ci_low, ci_high = np.asarray(ci_low, float), np.asarray(ci_high, float)
    return 1 + (ci_low[None, :] > ci_high[:, None] + RANK_TOLERANCE).sum(axis=1)


def prompt_table(rows: pd.DataFrame, values: str, prompts: list | None) -> pd.DataFrame:
    """prompts × models of `values`; `prompts` (the slice's own, all models together) fixes the row order, so a
    subset of the models resamples the same prompts as the whole slice does (incremental rankings)."""
    table = rows.pivot_table(index="prompt_id", columns="model", values=values, aggfunc="mean")
    return table if prompts is None else table.reindex(index=prompts)


def usl_scores(wins: pd.DataFrame, settings: BootstrapSettings, rng: np.random.Generator,
               prompts: list | None = None) -> pd.DataFrame:
    """USL score per model from rows (prompt_id, model, win ∈ {0, 0.5, 1}) of one pool/profile/topic.

    Returns model, score, ci_low, ci_high, n_prompts (score in percent). Each model's score and interval depend
    only on its own rows and the slice's prompts (the bootstrap draws are the slice's).
    """
    table = prompt_table(wins, "win", prompts)
    return scores_frame(table.columns, *usl_arrays(table.to_numpy(float), settings, rng))


def usl_arrays(wins: np.ndarray, settings: BootstrapSettings,
               rng: np.random.Generator | np.ndarray) -> tuple[np.ndarray, ...]:
    """The USL score's math on prompts × models (NaN where a model has no comparison): score, ci_low, ci_high,
    n_prompts per model. `rng`: a generator for the bootstrap, or the drawn weights (resamples × prompts)."""
    observed = np.isfinite(wins).astype(float)
    values = np.where(observed > 0, wins, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        point = 100.0 * values.sum(0) / observed.sum(0)
        weights = drawn_weights(rng, len(wins), settings.usl_rounds)
        samples = 100.0 * (weights @ values) / (weights @ observed)
    low, high = interval(samples, settings.confidence)
    return point, low, high, observed.sum(0).astype(int)


def scores_frame(models, point, low, high, n_prompts) -> pd.DataFrame:
    return pd.DataFrame({"model": pd.Index(models).astype(str), "score": point, "ci_low": low, "ci_high": high,
                         "n_prompts": n_prompts})


def per_prompt_win_matrices(pairs: pd.DataFrame, models: list[str]) -> tuple[np.ndarray, list[str]]:
    """prompts × models × models: [p, i, j] = how much model i beat model j on prompt p (a tie gives 0.5 each).

    `pairs` rows: prompt_id, model_a, model_b, a_score ∈ {0, 0.5, 1}.
    """
    prompts = sorted(pairs["prompt_id"].unique())
    prompt_index = {prompt: i for i, prompt in enumerate(prompts)}
    model_index = {model: i for i, model in enumerate(models)}
    p = pairs["prompt_id"].map(prompt_index).to_numpy()
    a = pairs["model_a"].map(model_index).to_numpy()
    b = pairs["model_b"].map(model_index).to_numpy()
    a_score = pairs["a_score"].to_numpy(float)
    matrices = np.zeros((len(prompts), len(models), len(models)))
    np.add.at(matrices, (p, a, b), a_score)
    np.add.at(matrices, (p, b, a), 1.0 - a_score)
    return matrices, prompts


def fit_bradley_terry(wins: np.ndarray, initial: np.ndarray | None = None) -> np.ndarray:
    """Elo-scale ratings from a models × models matrix of (possibly fractional) win counts."""
    return fit_bradley_terry_batch(wins[None], initial)[0]


def fit_bradley_terry_batch(wins: np.ndarray, initial: np.ndarray | None = None) -> np.ndarray:
    """Elo-scale ratings for a stack of win matrices (batch × models × models), all fitted at once: choix's
    iterative Luce spectral ranking (`ilsr_pairwise_dense`: the same chain, alpha and stopping rule), where each
    iteration is one batched linear solve for the chains' stationary distributions instead of a loop over the
    stack. `initial`: log-strengths to start every fit from (the point estimate, for bootstrap resamples)."""
    batch, n, _ = wins.shape
    start = np.zeros(n) if initial is None else np.asarray(initial, float) - np.mean(initial)
    params = np.tile(start, (batch, 1))
    previous = np.full_like(params, np.nan)  # choix's test compares two iterates: the start is not one
    losses = wins.transpose(0, 2, 1)
    todo = np.arange(batch)
    for _ in range(BT_MAX_ITERATIONS):
        weights = np.exp(params[todo])
        weights *= n / weights.sum(axis=1, keepdims=True)
        chain = BT_REGULARIZATION + losses[todo] / (weights[:, :, None] + weights[:, None, :])
        chain[:, np.arange(n), np.arange(n)] = 0.0
        chain[:, np.arange(n), np.arange(n)] = -chain.sum(axis=2)
        system = chain.transpose(0, 2, 1).copy()  # stationary π: πᵀ·chain = 0, with Σπ = n in place of the last row
        system[:, -1, :] = 1.0
        stationary = np.linalg.solve(system, np.broadcast_to(np.eye(n)[-1] * n, (len(todo), n))[..., None])[..., 0]
        found = np.log(stationary)
        found -= found.mean(axis=1, keepdims=True)
        done = np.abs(found - previous[todo]).sum(axis=1) <= BT_TOLERANCE * n
        params[todo], previous[todo] = found, found
        todo = todo[~done]
        if not len(todo):
            return ELO_BASE + ELO_SCALE * params
    raise RuntimeError(f"Bradley–Terry did not converge in {BT_MAX_ITERATIONS} iterations for {len(todo)} fits")


def bradley_terry_scores(pairs: pd.DataFrame, settings: BootstrapSettings, rng: np.random.Generator) -> pd.DataFrame:
    """Bradley–Terry rating per model from the per-prompt pairwise comparisons of one pool/profile/topic.

    Returns model, score, ci_low, ci_high, n_prompts.
    """
    models = sorted(set(pairs["model_a"]) | set(pairs["model_b"]))
    matrices, _ = per_prompt_win_matrices(pairs, models)
    point = fit_bradley_terry(matrices.sum(axis=0))
    start = (point - ELO_BASE) / ELO_SCALE
    weights = bootstrap_weights(len(matrices), settings.bt_rounds, rng)
    resampled = np.tensordot(weights, matrices, axes=(1, 0))
    samples = fit_bradley_terry_batch(resampled, initial=start)
    low, high = interval(samples, settings.confidence)
    appears = (matrices.sum(axis=2) + matrices.sum(axis=1)) > 0
    return pd.DataFrame({
        "model": models, "score": point, "ci_low": low, "ci_high": high, "n_prompts": appears.sum(0).astype(int),
    })


def with_ranks(scores: pd.DataFrame) -> pd.DataFrame:
    ranked = scores.assign(rank=overlap_ranks(scores["ci_low"], scores["ci_high"]))
    return ranked.sort_values(["rank", "score"], ascending=[True, False], ignore_index=True)


def topics(frame: pd.DataFrame) -> Iterator[tuple[str, str, pd.DataFrame]]:
    """(level, topic, rows): every prompt (`all`), each scenario group and each scenario; nothing when empty."""
    if frame.empty:
        return
    yield "all", "all", frame
    for group, rows in frame.groupby("scenario_group", sort=True):
        yield "group", str(group), rows
    for scenario, rows in frame.groupby("scenario", sort=True):
        yield "scenario", str(scenario), rows


def score_method(method: str, rows: pd.DataFrame, settings: BootstrapSettings, rng: np.random.Generator,
                 temperature: float = 1.0, prompts: list | None = None) -> pd.DataFrame:
    """One method's scores for one slice: `rows` are reference comparisons (usl*) or model pairs (bradley_terry).
    `prompts`: the slice's prompts when `rows` hold only some of its models (PER_MODEL_METHODS only)."""
    if method == "usl":
        return usl_scores(rows, settings, rng, prompts)
    if method == "usl_soft":
        return usl_scores(soft_wins(rows, temperature), settings, rng, prompts)
    if method == "usl_lc":
        return length_controlled_scores(soft_wins(rows, temperature), settings, rng, prompts)
    if method == "bradley_terry":
        return bradley_terry_scores(rows, settings, rng)
    raise ValueError(f"unknown method {method!r}: one of {', '.join(METHODS)}")


def bradley_terry_table(pairs: pd.DataFrame, settings: BootstrapSettings) -> pd.DataFrame:
    """leaderboard.bradley_terry: the Bradley–Terry rows of leaderboard.rankings, every pool × profile × topic.

    pairs: pool, profile, prompt_id, scenario, scenario_group, model_a, model_b, a_score. Each slice's bootstrap is
    seeded by its own key (pool, profile, topic), so slices may be fitted apart (the asset reads one pool × profile
    at a time). The per-model methods are leaderboards/incremental.py's."""
    parts = []
    slices = sorted(set(map(tuple, pairs[["pool", "profile"]].drop_duplicates().to_numpy())))
    for pool, profile in slices:
        pair_rows = pairs[(pairs["pool"] == pool) & (pairs["profile"] == profile)]
        for level, topic, rows in topics(pair_rows):
            rng = slice_rng(settings, pool, profile, "bradley_terry", level, topic)
            scores = bradley_terry_scores(rows, settings, rng)
            parts.append(with_ranks(scores).assign(pool=pool, profile=profile, level=level, scenario=topic,
                                                   method="bradley_terry"))
    if not parts:
        return empty_rankings()
    return pd.concat(parts, ignore_index=True)[RANKING_COLUMNS]


def empty_rankings() -> pd.DataFrame:
    frame = pd.DataFrame({column: pd.Series(dtype="object") for column in RANKING_COLUMNS})
    return frame.astype({"score": float, "ci_low": float, "ci_high": float, "rank": "int64", "n_prompts": "int64"})


DEFAULT_REFERENCE_MODELS = {"alpaca_eval": "gpt4_1106_preview", "mt_bench": "gpt-4"}


def reference_models_table(configured: dict[str, str], pool_models: pd.DataFrame) -> pd.DataFrame:
    """leaderboard.reference_models: per pool in the responses, its configured reference model and whether that
    model's responses are there (a pool without one gets Bradley–Terry ratings but no USL score)."""
    rows = []
    for pool, models in pool_models.groupby("pool", sort=True):
        reference = configured.get(pool)
        rows.append({"pool": pool, "reference_model": reference, "reference_present": reference in set(models["model"]),
                     "n_models": models["model"].nunique()})
    return pd.DataFrame(rows, columns=["pool", "reference_model", "reference_present", "n_models"])


# ----------------------------------------------------------------------------------------------------------------
# usl_soft and usl_lc: win probabilities from the reward difference

# What `usl leaderboard`, the summary of `usl run` and the page show first (docs/leaderboards.md says why).
DEFAULT_METHOD = "usl_soft"
METHODS = ("usl_soft", "usl", "usl_lc", "bradley_terry")
# Each model's score depends on its own comparisons with the reference only: a new model leaves the others'
# scores as they were (leaderboards/incremental.py). Bradley–Terry is one joint fit of all models.
PER_MODEL_METHODS = ("usl_soft", "usl", "usl_lc")


def soft_wins(reference_wins: pd.DataFrame, temperature: float) -> pd.DataFrame:
    """`win` replaced by P(model beats the reference) = σ(k·reward difference), k from crm.calibration."""
    probability = 1.0 / (1.0 + np.exp(-temperature * reference_wins["reward_diff"].to_numpy(float)))
    return reference_wins.assign(win=probability)


def _lc_fit(p: np.ndarray, x: np.ndarray, observed: np.ndarray, weights: np.ndarray,
            iterations: int = 25, ridge: float = 1e-3, tolerance: float = 1e-10) -> np.ndarray:
    """Per (resample, model): logistic GLM p ≈ σ(θ + φ·x) by Newton steps, all at once; returns θ.

    p, x, observed: prompts × models; weights: resamples × prompts (how often each prompt is drawn). Stops when
    no step moves θ or φ by more than `tolerance` (Newton converges in a handful), else after `iterations`."""
    rounds, models = weights.shape[0], p.shape[1]
    theta, phi = np.zeros((rounds, models)), np.zeros((rounds, models))
    w = weights[:, :, None] * observed[None, :, :]  # resamples × prompts × models
    for _ in range(iterations):
        z = theta[:, None, :] + phi[:, None, :] * x[None, :, :]
        s = 1.0 / (1.0 + np.exp(-z))
        r = w * (s - p[None, :, :])
        h = w * s * (1.0 - s)
        g_theta, g_phi = r.sum(1), (r * x[None]).sum(1) + ridge * phi
        h_tt, h_tp, h_pp = h.sum(1) + 1e-9, (h * x[None]).sum(1), (h * x[None] ** 2).sum(1) + ridge
        det = h_tt * h_pp - h_tp**2
        step_theta, step_phi = (h_pp * g_theta - h_tp * g_phi) / det, (h_tt * g_phi - h_tp * g_theta) / det
        theta, phi = theta - step_theta, phi - step_phi
        if max(np.abs(step_theta).max(initial=0.0), np.abs(step_phi).max(initial=0.0)) < tolerance:
            break
    return theta


def length_scales(lengths: np.ndarray) -> np.ndarray:
    """usl_lc's length unit per model (lengths: prompts × models, NaN where missing): the spread of its own
    length differences with the reference, as AlpacaEval 2 divides each model's by its own (so one model's
    scale never moves with the others)."""
    counts = np.isfinite(lengths).sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.nansum(lengths, 0) / counts
        scale = np.sqrt(np.nansum((lengths - mean) ** 2, 0) / (counts - 1))
    return np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)


def length_controlled_scores(soft: pd.DataFrame, settings: BootstrapSettings, rng: np.random.Generator,
                             prompts: list | None = None) -> pd.DataFrame:
    """usl_lc, AlpacaEval 2's length-controlled win rate on the CRM's win probabilities: per model,
    P(beats reference) = σ(θ + φ·tanh(Δlength / scale)) and the score is 100·σ(θ), the win rate at equal length."""
    table = prompt_table(soft, "win", prompts)
    lengths = prompt_table(soft, "length_diff", prompts).reindex(index=table.index, columns=table.columns)
    return scores_frame(table.columns, *lc_arrays(table.to_numpy(float), lengths.to_numpy(float), settings, rng))


def lc_arrays(probabilities: np.ndarray, lengths: np.ndarray, settings: BootstrapSettings,
              rng: np.random.Generator | np.ndarray) -> tuple[np.ndarray, ...]:
    """usl_lc's math on prompts × models (NaN where missing): score, ci_low, ci_high, n_prompts per model."""
    observed = np.isfinite(probabilities).astype(float)
    p = np.where(observed > 0, probabilities, 0.5)
    x = np.tanh(np.nan_to_num(lengths, nan=0.0) / length_scales(lengths)[None, :])
    point = 100.0 / (1.0 + np.exp(-_lc_fit(p, x, observed, np.ones((1, len(p))))[0]))
    weights = drawn_weights(rng, len(p), settings.bt_rounds)
    # A few models at a time: the fit holds resamples × prompts × models arrays (200 × 805 × 16 = 21 MB each).
    theta = np.concatenate([_lc_fit(p[:, i:i + LC_CHUNK], x[:, i:i + LC_CHUNK], observed[:, i:i + LC_CHUNK],
                                    weights) for i in range(0, p.shape[1], LC_CHUNK)], axis=1)
    low, high = interval(100.0 / (1.0 + np.exp(-theta)), settings.confidence)
    return point, low, high, observed.sum(0).astype(int)


LC_CHUNK = 16


def slice_rng(settings: BootstrapSettings, *key: str) -> np.random.Generator:
    """A generator seeded by the slice's own key, so adding a pool or profile never moves another's intervals."""
    import hashlib

    digest = hashlib.sha256("\x1f".join((str(settings.seed), *key)).encode("utf-8")).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "big"))


MIN_COVERAGE = 0.9  # share of the pool's scored prompts a model must have rewards for to be ranked
UNRANKED_COLUMNS = ["pool", "model", "scored_prompts", "sampled_prompts", "coverage", "reason"]


def unranked_models(coverage: pd.DataFrame, min_coverage: float = MIN_COVERAGE) -> pd.DataFrame:
    """leaderboard.unranked_models: the models of leaderboard.model_coverage below min_coverage, with the reason.
    A partial model (10 of 168 prompts) ranked beside full ones would get a score resting on a few prompts."""
    low = coverage[coverage["coverage"] < min_coverage]
    reasons = [f"rewards for {s} of the pool's {n} scored prompts ({c:.0%}; ranking needs {min_coverage:.0%})"
               for s, n, c in zip(low["scored_prompts"], low["sampled_prompts"], low["coverage"])]
    return low.assign(reason=reasons)[UNRANKED_COLUMNS].sort_values(["pool", "model"], ignore_index=True)


def only_ranked(frame: pd.DataFrame, unranked: pd.DataFrame, *model_columns: str) -> pd.DataFrame:
    """`frame` without the unranked models' rows (a row goes when any of its `model_columns` is unranked):
    ("model",) for reference comparisons, ("model_a", "model_b") for model pairs."""
    left_out = set(zip(unranked["pool"], unranked["model"]))
    keep = pd.Series(True, index=frame.index)
    for column in model_columns if left_out else ():
        keep &= pd.Series([(p, m) not in left_out for p, m in zip(frame["pool"], frame[column])], index=frame.index,
                          dtype=bool)
    return frame[keep]

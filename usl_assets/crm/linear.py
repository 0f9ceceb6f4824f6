"""The linear CRM: a Bradley–Terry reward linear in the response's hashed word n-grams and measured features,
with the user's criteria gating each feature:

    r(c, p, a) = u·h(a) + (v + W e(c))·f(p, a)

h(a): hashed word 1–2-grams of the response (2^18 buckets, L2-normalized); f(p, a): the standardized features
of crm/features.py (length, lists, code, refusals…), its four degeneration features (repeated lines, repeated
words, 4-grams copied from the prompt, the prompt's content words left unused), the answer's fit to its prompt
(crm/relevance.py: prompt relevance, unsupported sentences) and the graded answers' two (crm/graded_answers.py:
what the AI judge said of other models' answers to the same prompt, and how close the answer comes to any of
them; 0 for prompts it never graded); e(c): the criteria text embedded once by the frozen encoder (MiniLM by
default). W e(c) is what lets "prefers brief answers" turn the length features down and "use lists" turn the list
features up, so a flipped criterion flips the preference. The part of W that reads the prototype reading
(crm/criteria_prototypes.py: one column per property direction, a half for the scenario rubrics' lines and one for
the user's wishes) is bounded (`reading_gate` wish_measured): a direction moves only its own property's features,
up for "more", down for "less", and a wish only the property as measured on the whole answer
(properties.MEASURED_FEATURES, which nothing else moves; after the fit a wish for more length, structure, bold or
paragraphs pays for them as measured on the answer's supported view, so padding does not buy them), so what the
reading says is what the reward does (a free W mixed the directions: docs/crm.md, dev runs 19, 25 and 26). h and
the crm/features.py features read the answer's view (`supported_view`: without the sentences tied to nothing in
the prompt, restatements and empty headings), so filler earns no length, bullets or bold marks; the unsupported
sentences' own features keep the sign SIGNS gives.

Training minimizes the soft Bradley–Terry loss −[y log σ(z) + (1 − y) log σ(−z)] with y the probability that
`chosen` wins (the judge's own for AI-judge pairs, 1 for human and criteria-defined rows), per-source weights, and
for AI-judge rows z = Δr + β·Δs, with s(a) = [log(chars), the markdown features (headings, bold, list items, list
share)]: β absorbs the judge's own style bias (ODIN's idea of a separate length head, over the covariates of
LMArena's style control), so the reward learns length and markdown only where humans and criteria ask for it.
Gaming rows (crm/gaming_pairs.py: the real answer against an off-topic, generic, echoed, padded or truncated one)
weigh `gaming_weight` each; their own nuisance coefficients (`gaming_nuisance`) take their markdown difference and a
truncated row's length, and the n-gram score skips them. It is deterministic: L-BFGS for a fixed number of
iterations on one thread, from zeros; no clock is read. The fitted reward, and how it scores under a user's
wish, is crm/linear_weights.py's LinearWeights.
"""

from dataclasses import asdict, dataclass, field
import numpy as np
import pandas as pd
from scipy import sparse

from usl_assets.crm.features import DEGENERATION_FEATURES, FEATURE_NAMES
from usl_assets.crm.gaming_pairs import LABEL_KIND as GAMING_LABEL
from usl_assets.crm.graded_answers import GradedAnswers
from usl_assets.crm import linear_constraints
from usl_assets.crm.linear_weights import LinearWeights, for_reading
from usl_assets.crm.linear_constraints import MEASURED
from usl_assets.crm.linear_rows import (GRADED_COLUMN, GRADED_COLUMNS, N_BUCKETS, ROW_FEATURES, feature_name_rows,
                                        graded_matrix, ngram_matrix, raw_features)
from usl_assets.crm.relevance import TEXT_RELEVANCE_FEATURES, common_stems

LENGTH_FEATURES = ("log_words", "log_chars")
MARKDOWN_FEATURES = ("log_headings", "log_bold_marks", "log_list_items", "list_line_ratio")
JUDGE_NUISANCES = ("style", "length", "none")
# What of a gaming row's style difference stays outside the reward (dev measures in docs/crm.md): by default its
# markdown (the reward's markdown terms stay the humans' and the criteria's, as with the judge's rows) and a
# truncated row's length (a cut answer loses for stopping mid-sentence, not for being short). A padded row's
# markdown difference is the same in every row, so alone its coefficient explained them all; the filler-free
# gaming_reformatted twins at even odds pin it near zero, which leaves the filler to explain the padded rows.
GAMING_NUISANCES = ("none", "truncated", "length", "markdown", "style")
GAMING_FITS = ("joint", "substance")
READING_GATES = ("free", "own_property", "measured", "wish_measured")
LOG_CHARS = FEATURE_NAMES.index("log_chars")
# Signs the base coefficient v of these features keeps whatever the training rows' correlations (LinearConfig.signs):
# on human pairs, answers with more unsupported sentences are longer and win, but a sentence tied to nothing in
# the prompt or the answer adds nothing; the criteria's gate may still move them.
SIGNS = {"unsupported_sentence_share": -1, "log_excess_unsupported_words": -1, "prompt_fit": 1}


@dataclass(frozen=True)
class LinearConfig:
    iterations: int = 150  # L-BFGS iterations: the whole budget
    ngrams: bool = True  # False: features only
    features: str = "all"  # all | length (the length-only twin)
    degeneration: bool = True  # repeated lines and words, prompt copies, prompt terms missed (crm/features.py)
    relevance: bool = True  # the answer's fit to its prompt (crm/relevance.py)
    leave_out: tuple[str, ...] = ()  # ROW_FEATURES names left out of the fit (ablations)
    graded_answers: bool = True  # the graded-answers feature, where training has graded answers
    l2_ngrams: float = 3e-4  # chosen on the dev evaluation (docs/crm.md)
    l2_features: float = 1e-4
    l2_gate: float = 1e-3
    judge_nuisance: str = "style"  # style | length | none: what of the judge's taste stays outside the reward
    source_weights: dict = field(default_factory=lambda: dict(DEFAULT_SOURCE_WEIGHTS))
    gaming_weight: float = 0.5  # per gaming row (crm/gaming_pairs.py), whatever its source: the smallest of 0.25,
    # 0.5, 1 at which every gaming-audit probe loses as it must in both pools (docs/crm.md, run 28)
    gaming_kind_weights: dict = field(default_factory=dict)  # augmentation → its rows' weight instead (ablations)
    gaming_fit: str = "joint"  # joint | substance: substance fits every coefficient without the gaming rows first,
    # then only SUBSTANCE_FEATURES' base coefficients (and the gaming nuisance) on every row, the rest held; not the
    # default: MT-Bench's criteria fidelity fell under its check (docs/crm.md, runs 29 and 30)
    gaming_nuisance: str = "markdown"  # none | truncated | markdown | style: which of the gaming rows' style
    # differences get coefficients of their own, outside the reward (GAMING_NUISANCES)
    supported_view: bool = True  # n-grams and FEATURE_NAMES read what of the answer adds something (raw_features)
    signs: bool = True  # base coefficients follow SIGNS: filler never helps, fitting the prompt never hurts
    common_stem_share: float = 0.05  # chains of support skip the stems of more than this share of the training
    # answers (crm/relevance.common_stems); 0: through every stem
    gate_signs: bool = True  # with signs, the gate leaves SIGNS features alone: their sign holds under any criteria
    reading_gate: str = "wish_measured"  # free | own_property | measured | wish_measured: how the criteria's
    # reading (crm/criteria_prototypes.py) may move the coefficients; own_property: a property direction's reading
    # moves only that property's features (properties.PROPERTY_FEATURES), up for "more" and down for "less";
    # measured: only its MEASURED_FEATURES column; wish_measured: a wish's reading as measured, a calibrated line's
    # (a scenario rubric's) as own_property (docs/crm.md, run 25)
    measured: bool = True  # the properties as measured on the whole answer (properties.MEASURED_FEATURES), moved
    # only by the reading of their own property: nothing under criteria that name no property (docs/crm.md, run 25)
    more_wishes_on_view: bool = True  # after the fit, a wish for more length, structure, bold or paragraphs pays
    # for them as measured on the answer's supported view, not the whole answer (`_more_wishes_on_view`); nothing
    # without the measured columns (measured=False, the length-only twin)
    wish_focus: tuple[float, float] | None = (0.5, 3.0)  # under a wish the wish decides, what misses the prompt
    # still loses: (margin, cost) of crm/linear_weights.py; None: every term at its weight under any criteria (run 31)
    wish_focus_trained_only: bool = True  # the focus's strength counts only the wish directions with training rows
    # (linear_weights.WishFocus.untrained); False: every direction the criteria are read as (runs 31-36)
    reading_gain: float = 1.0  # the fitted gate's reading columns times this, once, after the fit: how far a
    # criterion the bank reads moves a whole leaderboard, which the pairwise fit leaves too timid (docs/crm.md)

    def feature_columns(self, graded: bool = False) -> list[int]:
        if self.features == "length":
            return [FEATURE_NAMES.index(name) for name in LENGTH_FEATURES]
        columns = list(range(len(FEATURE_NAMES)))
        if self.degeneration:
            columns += [ROW_FEATURES.index(name) for name in DEGENERATION_FEATURES]
        if self.relevance:
            columns += [ROW_FEATURES.index(name) for name in TEXT_RELEVANCE_FEATURES]
        columns += GRADED_COLUMNS if graded and self.graded_answers else []
        columns += [ROW_FEATURES.index(name) for name in MEASURED] if self.measured else []
        unknown = sorted(set(self.leave_out) - set(ROW_FEATURES))
        if unknown:
            raise ValueError(f"leave_out names unknown features {unknown}; choose from {', '.join(ROW_FEATURES)}")
        return [c for c in columns if ROW_FEATURES[c] not in self.leave_out]


# What each source teaches (docs/crm.md): Auto-J humans judge helpfulness under each scenario's criteria; the AI
# judge, overall quality on AlpacaEval's prompts (many pairs, so each weighs less); hh-rlhf harmless prefers the
# shorter, refusing reply, under harmlessness criteria only (it shapes the harmless profile, not the default).
# Human pairs weigh 2: the Auto-J cross-validation rose with the humans' share (docs/crm.md); a user's own pairs
# weigh as much as Auto-J's.
DEFAULT_SOURCE_WEIGHTS = {"autoj": 2.0, "user": 2.0, "alpaca_eval_judge": 0.25, "hh_rlhf_harmless": 0.5}



@dataclass
class FitResult:
    weights: LinearWeights
    loss: float
    iterations: int
    rows: int
    weight_by_source: dict = field(default_factory=dict)
    style_beta: list = field(default_factory=list)  # the judge's nuisance coefficients (β), in nuisance order


class TrainingTimeLimit(RuntimeError):
    """The wall-clock safety net was hit: nothing is shipped (budgets are iterations, never minutes)."""


def _sides(pairs: pd.DataFrame) -> tuple[list[tuple], np.ndarray, np.ndarray]:
    """The distinct (prompt, text, model) answers of the pairs, and each row's chosen and rejected among them."""
    def side(text_column, model_column):
        models = pairs[model_column] if model_column in pairs else pd.Series([None] * len(pairs))
        return list(zip(pairs["prompt"].map(str), pairs[text_column].map(str),
                        [None if pd.isna(m) else str(m) for m in models]))
    chosen_sides, rejected_sides = side("chosen", "chosen_model"), side("rejected", "rejected_model")
    answers = list(dict.fromkeys(chosen_sides + rejected_sides))
    index = {answer: i for i, answer in enumerate(answers)}
    return answers, np.array([index[a] for a in chosen_sides]), np.array([index[a] for a in rejected_sides])


def fit_linear(pairs: pd.DataFrame, criteria_vectors: dict[str, np.ndarray], config: LinearConfig,
               criteria_key, log=print, deadline: float | None = None,
               graded: GradedAnswers | None = None, reading_directions: list[str] | None = None) -> FitResult:
    """Fit on crm.training_pairs rows (prompt, chosen, rejected, criteria, source, label_kind, soft_label,
    chosen_model, rejected_model). `criteria_vectors[criteria_key(row criteria)]` is each row's embedded criteria;
    `graded`: the graded answers (each training answer is compared with the other model families' only);
    `reading_directions`: the labels ("length:less", …) of the criteria vectors' last columns, the prototype reading
    (needed by `reading_gate` own_property)."""
    from threadpoolctl import threadpool_limits

    if config.gaming_nuisance not in GAMING_NUISANCES:
        raise ValueError(f"gaming_nuisance must be one of {', '.join(GAMING_NUISANCES)}, not {config.gaming_nuisance!r}")
    if config.gaming_fit not in GAMING_FITS:
        raise ValueError(f"gaming_fit must be one of {', '.join(GAMING_FITS)}, not {config.gaming_fit!r}")
    if config.reading_gate not in READING_GATES:
        raise ValueError(f"reading_gate must be one of {', '.join(READING_GATES)}, not {config.reading_gate!r}")
    if config.reading_gate != "free" and reading_directions is None:
        raise ValueError("reading_gate own_property needs the criteria vectors' reading_directions ([] where the "
                         "vectors carry no prototype reading)")
    if config.reading_gate in ("measured", "wish_measured") and not config.measured:
        raise ValueError(f"reading_gate {config.reading_gate} moves the MEASURED_FEATURES: it needs "
                         "measured=True")
    if config.judge_nuisance not in JUDGE_NUISANCES:
        raise ValueError(f"judge_nuisance must be one of {', '.join(JUDGE_NUISANCES)}, not {config.judge_nuisance!r}")
    graded = graded if graded is not None and len(graded) and config.graded_answers else None
    columns = config.feature_columns(graded=graded is not None)
    answers, chosen, rejected = _sides(pairs)
    prompts, texts = [prompt for prompt, _, _ in answers], [text for _, text, _ in answers]
    graded_columns = graded_matrix(graded if GRADED_COLUMN in columns else None, prompts, texts,
                                   [m for _, _, m in answers])
    if not config.supported_view and all(column < len(FEATURE_NAMES) for column in columns):
        # e.g. the length-only twin: the whole answers' FEATURE_NAMES are all it reads (markdown for the nuisance)
        common, views, raw = frozenset(), texts, feature_name_rows(texts)
    else:
        common = common_stems(texts, config.common_stem_share) if config.common_stem_share else frozenset()
        raw, views = raw_features(prompts, texts, graded_columns, config.supported_view, common)
    raw = raw.astype(np.float64)
    mean, std = raw[:, columns].mean(0), np.maximum(raw[:, columns].std(0), 1e-3)
    scaled = (raw[:, columns] - mean) / std
    d_features = scaled[chosen] - scaled[rejected]
    d_length = raw[chosen, LOG_CHARS] - raw[rejected, LOG_CHARS]
    if config.ngrams:
        grams = ngram_matrix(views)
        d_grams = (grams[chosen] - grams[rejected]).tocsr().astype(np.float64)
        if "label_kind" in pairs:  # the n-gram score must not learn the gaming rows' text banks by heart
            d_grams = (sparse.diags((pairs["label_kind"] != GAMING_LABEL).to_numpy(float)) @ d_grams).tocsr()
    else:
        d_grams = sparse.csr_matrix((len(pairs), N_BUCKETS))
    keys = [criteria_key(c) for c in pairs["criteria"]]
    unique_keys = list(dict.fromkeys(keys))
    key_index = {key: i for i, key in enumerate(unique_keys)}
    crit_rows = np.array([key_index[k] for k in keys])
    crit = np.stack([np.asarray(criteria_vectors[k], np.float64) for k in unique_keys])
    member = sparse.csr_matrix((np.ones(len(pairs)), (crit_rows, np.arange(len(pairs)))),
                               shape=(len(unique_keys), len(pairs)))
    soft = pairs["soft_label"].fillna(1.0).to_numpy(float) if "soft_label" in pairs else np.ones(len(pairs))
    kinds = pairs["label_kind"] if "label_kind" in pairs else pd.Series([""] * len(pairs))
    judge, gaming = (kinds == "ai_judge").to_numpy(float), (kinds == GAMING_LABEL).to_numpy(float)
    markdown = raw[:, [FEATURE_NAMES.index(name) for name in MARKDOWN_FEATURES]]
    markdown = (markdown - markdown.mean(0)) / np.maximum(markdown.std(0), 1e-3)
    style = np.concatenate([d_length[:, None], markdown[chosen] - markdown[rejected]], axis=1)
    if config.judge_nuisance == "style":  # LMArena's style-control covariates: length and markdown
        nuisance = judge[:, None] * style
    elif config.judge_nuisance == "length":
        nuisance = (judge * d_length)[:, None]
    else:
        nuisance = np.zeros((len(pairs), 1))
    truncated = (pairs["augmentation"] == "gaming_truncated").to_numpy(float) if "augmentation" in pairs else 0
    extra = {"none": [], "style": [gaming[:, None] * style], "truncated": [(truncated * d_length)[:, None]],
             "length": [(gaming * d_length)[:, None]],
             "markdown": [(truncated * d_length)[:, None], gaming[:, None] * style[:, 1:]]}[config.gaming_nuisance]
    nuisance = np.concatenate([nuisance, *extra], axis=1)
    q = nuisance.shape[1]
    all_weights = row_weights(pairs, config)
    fitted_first = np.where(gaming > 0, 0.0, all_weights) if config.gaming_fit == "substance" else all_weights
    weights = fitted_first / fitted_first.sum()
    k, dim = len(columns), crit.shape[1]

    def unpack(theta):
        u = theta[:N_BUCKETS]
        v = theta[N_BUCKETS:N_BUCKETS + k]
        gate = theta[N_BUCKETS + k:N_BUCKETS + k + k * dim].reshape(k, dim)
        return u, v, gate, theta[len(theta) - q:]

    def margins(theta):
        u, v, gate, beta = unpack(theta)
        coefficients = v + (crit @ gate.T)[crit_rows]  # rows × k
        return d_grams @ u + (coefficients * d_features).sum(1) + nuisance @ beta

    def pair_loss(z, weights):
        """The weighted soft Bradley–Terry loss at margins z, and its slope per row."""
        return float(weights @ (np.logaddexp(0.0, z) - soft * z)), weights * (1.0 / (1.0 + np.exp(-z)) - soft)

    def objective(theta, weights):
        u, v, gate, beta = unpack(theta)
        loss, g = pair_loss(margins(theta), weights)
        per_criteria = member @ (d_features * g[:, None])  # criteria × k
        grad = np.concatenate([
            d_grams.T @ g + 2 * config.l2_ngrams * u,
            d_features.T @ g + 2 * config.l2_features * v,
            (per_criteria.T @ crit + 2 * config.l2_gate * gate).reshape(-1),
            nuisance.T @ g,
        ])
        loss += config.l2_ngrams * u @ u + config.l2_features * v @ v + config.l2_gate * float((gate * gate).sum())
        return loss, grad

    import time

    from scipy.optimize import Bounds, minimize  # training only: scoring needs no optimizer

    def safety_net(_theta):
        if deadline is not None and time.perf_counter() > deadline:
            raise TrainingTimeLimit("the linear CRM hit its wall-clock safety net (crm_settings.max_minutes) "
                                    "before its iterations ended: no checkpoint was written; raise max_minutes")

    theta0 = np.zeros(N_BUCKETS + k + k * dim + q)
    lower, upper = np.full(len(theta0), -np.inf), np.full(len(theta0), np.inf)
    if config.reading_gate != "free" and reading_directions:
        linear_constraints.bound_reading(lower, upper, columns, dim, reading_directions, config.reading_gate)
    linear_constraints.bound_measured(lower, upper, columns, dim, len(reading_directions or ()))
    if config.signs:
        for position, column in enumerate(columns):
            sign = SIGNS.get(ROW_FEATURES[column], 0)
            if sign < 0:
                upper[N_BUCKETS + position] = 0.0
            elif sign > 0:
                lower[N_BUCKETS + position] = 0.0
            if sign and config.gate_signs:
                gate_row = slice(N_BUCKETS + k + position * dim, N_BUCKETS + k + (position + 1) * dim)
                lower[gate_row], upper[gate_row] = 0.0, 0.0
    bounds = Bounds(lower, upper) if np.isfinite(lower).any() or np.isfinite(upper).any() else None
    with threadpool_limits(limits=1):  # one thread: the same sums in the same order on any machine load
        result = minimize(objective, theta0, jac=True, method="L-BFGS-B", callback=safety_net, bounds=bounds,
                          args=(weights,), options={"maxiter": config.iterations, "maxfun": config.iterations * 2})
        theta, loss, iterations = result.x, float(result.fun), int(result.nit)
        if config.gaming_fit == "substance":
            every_row = all_weights / all_weights.sum()
            theta, more = linear_constraints.fit_substance(theta, margins(theta), d_features, nuisance, pair_loss,
                                                           every_row, lower, upper, columns, config.l2_features,
                                                           config.iterations, safety_net)
            loss, iterations = float(objective(theta, every_row)[0]), iterations + more
    u, v, gate, beta = unpack(theta)
    if reading_directions and config.reading_gain != 1.0:
        gate = gate.copy()
        gate[:, dim - len(reading_directions):] *= config.reading_gain
    if reading_directions and config.more_wishes_on_view:
        gate = linear_constraints.more_wishes_on_view(gate, columns, std, reading_directions)
    log(f"linear CRM ({config.features} features{', n-grams' if config.ngrams else ''}): {len(pairs):,} rows, "
        f"{iterations} L-BFGS iterations, loss {loss:.4f}, judge {config.judge_nuisance} coefficients "
        f"β={np.round(beta, 3).tolist()}")
    by_source = pairs.groupby("source").size().to_dict()
    kept_graded = graded if GRADED_COLUMN in columns else None
    sources = {s: {"rows": int(n), "weight": config.source_weights.get(s, 1.0)} for s, n in by_source.items()}
    trained = trained_directions(pairs) if config.wish_focus_trained_only else None
    focus = for_reading(reading_directions, *config.wish_focus, trained) if config.wish_focus else None
    fitted = LinearWeights(u, v, gate, mean, std, columns, float(beta[0]), kept_graded, config.supported_view, common,
                           focus=focus)
    return FitResult(fitted, loss, iterations, len(pairs), sources, [round(float(b), 6) for b in beta])


def trained_directions(pairs: pd.DataFrame) -> set[str]:
    """The property directions ("length:less") that training rows name; a combined row names each of its own."""
    if "property" not in pairs:
        return set()
    named = pairs.dropna(subset=["property"])
    return {f"{prop}:{way}" for props, ways in zip(named["property"], named["property_direction"])
            for prop, way in zip(str(props).split("+"), str(ways).split("+"))}


def row_weights(pairs: pd.DataFrame, config: LinearConfig) -> np.ndarray:
    """Each training row's weight in the loss: its source's, or for a gaming row gaming_weight (its kind's in
    gaming_kind_weights where named)."""
    weights = pairs["source"].map(lambda s: config.source_weights.get(s, 1.0)).to_numpy(float)
    if "label_kind" not in pairs:
        return weights
    kinds = pairs["augmentation"] if "augmentation" in pairs else pd.Series("", index=pairs.index)
    gaming = kinds.map(lambda kind: config.gaming_kind_weights.get(kind, config.gaming_weight)).to_numpy(float)
    return np.where(pairs["label_kind"] == GAMING_LABEL, gaming, weights)


def config_dict(config: LinearConfig) -> dict:
    return asdict(config)

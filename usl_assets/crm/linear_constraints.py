"""What the linear CRM's fit (crm/linear.py) may move, and one rule applied after it: the bounds that keep the
criteria gate's reading cells on their own property and the measured properties off everything but their reading,
the second stage of gaming_fit "substance", and a wish for more of a padded property paid on the supported view.
"""

import numpy as np

from usl_assets.crm.criteria_prototypes import WISH
from usl_assets.crm.features import DEGENERATION_FEATURES
from usl_assets.crm.linear_rows import GRADED_FEATURES, N_BUCKETS, ROW_FEATURES
from usl_assets.crm.properties import (MEASURED_FEATURE, MEASURED_FEATURES, MEASURED_VIEW_FEATURE,
                                       MEASURED_VIEW_FEATURES, PROPERTY_FEATURES)
from usl_assets.crm.relevance import TEXT_RELEVANCE_FEATURES

MEASURED = (*MEASURED_FEATURES, *MEASURED_VIEW_FEATURES)  # moved only by the reading of their property
# What gaming rows may move under gaming_fit "substance": the terms that read the answer against its prompt.
SUBSTANCE_FEATURES = (*DEGENERATION_FEATURES, *TEXT_RELEVANCE_FEATURES, *GRADED_FEATURES)


def fit_substance(theta, margins, d_features, nuisance, pair_loss, weights, lower, upper, columns, l2_features,
                  iterations, callback) -> tuple[np.ndarray, int]:
    """gaming_fit "substance", second stage: from the fit without gaming rows (theta, its per-row margins), every
    row (gaming rows included) moves only the base coefficients of SUBSTANCE_FEATURES and the nuisance
    coefficients; the n-grams, the other features and the whole gate keep the humans', judge's and criteria's fit.
    The held terms are a fixed offset per row, so this is a logistic regression on a dozen columns: its cost is
    a small share of the first stage's. pair_loss(z, weights): the fit's loss at margins z and its slope per row.
    Returns theta with the free coefficients refitted and the iterations."""
    from scipy.optimize import Bounds, minimize

    free_columns = [p for p, column in enumerate(columns) if ROW_FEATURES[column] in SUBSTANCE_FEATURES]
    n_free_v, q = len(free_columns), nuisance.shape[1]
    free = np.concatenate([N_BUCKETS + np.array(free_columns, int), np.arange(len(theta) - q, len(theta))])
    design = np.concatenate([d_features[:, free_columns], nuisance], axis=1)
    offset = margins - design @ theta[free]

    def objective(x):
        loss, g = pair_loss(offset + design @ x, weights)
        grad = design.T @ g
        grad[:n_free_v] += 2 * l2_features * x[:n_free_v]
        return loss + l2_features * x[:n_free_v] @ x[:n_free_v], grad

    result = minimize(objective, theta[free], jac=True, method="L-BFGS-B", callback=callback,
                      bounds=Bounds(lower[free], upper[free]),
                      options={"maxiter": iterations, "maxfun": iterations * 2})
    refitted = theta.copy()
    refitted[free] = result.x
    return refitted, int(result.nit)


def bound_reading(lower: np.ndarray, upper: np.ndarray, columns: list[int], dim: int, directions: list[str],
                  gate: str) -> None:
    """The gate cell of feature f and reading column "P:more" may only be >= 0 when f measures P (PROPERTY_FEATURES,
    or its MEASURED_FEATURES column alone: LinearConfig.reading_gate), "P:less" only <= 0, and every other reading
    cell is 0 (theta's layout: fit_linear.unpack). A column labelled WISH + "P:…" is the wishes' half."""
    k, first = len(columns), dim - len(directions)
    for j, label in enumerate(directions):
        name, way = label.removeprefix(WISH).rsplit(":", 1)
        measured_only = gate == "measured" or (gate == "wish_measured" and label.startswith(WISH))
        own = ((MEASURED_FEATURE[name],) if measured_only
               else tuple(f for f in PROPERTY_FEATURES.get(name, ()) if f not in MEASURED_VIEW_FEATURES))
        for position, column in enumerate(columns):
            cell = N_BUCKETS + k + position * dim + first + j
            if ROW_FEATURES[column] not in own:
                lower[cell] = upper[cell] = 0.0
            elif way == "more":
                lower[cell] = 0.0
            else:
                upper[cell] = 0.0


def more_wishes_on_view(gate: np.ndarray, columns: list[int], std: np.ndarray, directions: list[str]) -> np.ndarray:
    """After the fit: what a wish for more of a padded property (properties.MEASURED_VIEW_FEATURE) learned to pay
    per unit of the whole answer's measure, it pays per unit of the supported view's (the standardized cell rescaled
    by the two columns' spreads), so the padding's headings, bold bullets and filler buy nothing under "use bullet
    points". The fit reads the whole answer, as the labels do: fitting on the view moved the default leaderboard
    (docs/crm.md, run 26)."""
    gate, names = gate.copy(), [ROW_FEATURES[c] for c in columns]
    first = gate.shape[1] - len(directions)
    for j, label in enumerate(directions):
        name, way = label.removeprefix(WISH).rsplit(":", 1)
        pair = (MEASURED_FEATURE[name], MEASURED_VIEW_FEATURE.get(name))
        if not label.startswith(WISH) or way != "more" or not set(pair) <= set(names):
            continue
        whole, view = names.index(pair[0]), names.index(pair[1])
        gate[view, first + j] = gate[whole, first + j] * std[view] / std[whole]
        gate[whole, first + j] = 0.0
    return gate


def bound_measured(lower: np.ndarray, upper: np.ndarray, columns: list[int], dim: int, n_reading: int) -> None:
    """MEASURED_FEATURES and MEASURED_VIEW_FEATURES have no base coefficient and no gate cells on the criteria's
    embedding: only the reading of their property moves them (a whole answer's length or bullets, filler included,
    must not earn reward that the user did not ask for)."""
    k = len(columns)
    for position, column in enumerate(columns):
        if ROW_FEATURES[column] in MEASURED:
            lower[N_BUCKETS + position] = upper[N_BUCKETS + position] = 0.0
            embedding = slice(N_BUCKETS + k + position * dim, N_BUCKETS + k + position * dim + dim - n_reading)
            lower[embedding] = upper[embedding] = 0.0

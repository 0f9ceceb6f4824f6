"""What the linear CRM reads of an answer: its response row, the hashed n-grams of what it says and its measured
features (crm/features.py, crm/relevance.py, the graded answers), computed on every core (crm/feature_workers.py).
Scoring caches the rows (scoring.response_embeddings); crm/linear.py fits and scores them.
"""

import numpy as np
from scipy import sparse

from usl_assets.crm import feature_workers
from usl_assets.crm.features import (DEGENERATION_FEATURES, FEATURE_NAMES, degeneration_matrix, feature_matrix,
                                     features_from_counts, response_counts)
from usl_assets.crm.graded_answers import GradedAnswers
from usl_assets.crm.properties import MEASURED_FEATURES, MEASURED_VIEW_FEATURES, measured_row, measured_view_row
from usl_assets.crm.relevance import TEXT_RELEVANCE_FEATURES, relevance_and_views

N_BUCKETS = 2**18
# Read from the judge's graded answers to the same prompt (crm/graded_answers.py, crm/relevance.py).
GRADED_FEATURES = ("graded_answers", "graded_best_match")
# The columns after the n-gram score in a response row.
ROW_FEATURES = (*FEATURE_NAMES, *DEGENERATION_FEATURES, *TEXT_RELEVANCE_FEATURES, *GRADED_FEATURES, *MEASURED_FEATURES,
                *MEASURED_VIEW_FEATURES)
GRADED_COLUMNS = [ROW_FEATURES.index(name) for name in GRADED_FEATURES]
GRADED_COLUMN = GRADED_COLUMNS[0]


def hasher():
    from sklearn.feature_extraction.text import HashingVectorizer

    return HashingVectorizer(ngram_range=(1, 2), n_features=N_BUCKETS, alternate_sign=False, norm="l2",
                             lowercase=True, dtype=np.float32)


def raw_features(prompts: list[str], texts: list[str], graded: np.ndarray, supported_view: bool,
                 common: frozenset = frozenset()) -> tuple[np.ndarray, list[str]]:
    """The ROW_FEATURES of each answer, unscaled (the one place their column order is written), and what the
    n-grams and FEATURE_NAMES read: with `supported_view`, what of each answer adds something
    (crm/relevance.supported_text: no filler, restatements or empty headings), else the answers. `graded`: the
    GRADED_FEATURES columns (zeros where there are no graded answers). The degeneration features read the answers'
    repeats and the view's prompt copy and prompt terms (filler would dilute an echo's copy share); the relevance
    features read the answers themselves, and so do the MEASURED_FEATURES (crm/properties.py: each property as
    the user's criteria and leaderboard.criteria_fidelity measure it); the MEASURED_VIEW_FEATURES read the view.
    common: the stems no chain of support goes through. The rows are computed on every core
    (crm/feature_workers.py), with the same numbers as one pass."""
    graded = np.asarray(graded).reshape(len(texts), len(GRADED_FEATURES))
    parts = feature_workers.map_chunks(_raw_feature_rows, len(texts), (list(prompts), list(texts), graded),
                                       (supported_view, common))
    return np.concatenate([rows for rows, _ in parts]), [view for _, views in parts for view in views]


def feature_name_rows(texts: list[str]) -> np.ndarray:
    """Rows as raw_features gives them for the whole answers, with only the FEATURE_NAMES columns filled (length,
    markdown…): all that a fit reading no other column needs."""
    raw = np.zeros((len(texts), len(ROW_FEATURES)))
    raw[:, :len(FEATURE_NAMES)] = np.concatenate(feature_workers.map_chunks(feature_matrix, len(texts), (texts,)))
    return raw


def _raw_feature_rows(prompts: list[str], texts: list[str], graded: np.ndarray, supported_view: bool,
                      common: frozenset) -> tuple[np.ndarray, list[str]]:
    relevance, views = relevance_and_views(prompts, texts, supported_view, common)
    counted = answer_features(texts, views)
    return np.concatenate([counted[:, :len(FEATURE_NAMES)], degeneration_matrix(prompts, texts, views), relevance,
                           graded, counted[:, len(FEATURE_NAMES):]], axis=1), views


def answer_features(texts: list, views: list) -> np.ndarray:
    """Per answer, the FEATURE_NAMES of its view, the MEASURED_FEATURES of the whole answer, then the
    MEASURED_VIEW_FEATURES of its view (float32); an answer whose view is the answer itself (most are) is counted
    once."""
    rows = []
    for text, view in zip(texts, views):
        whole = response_counts(text)
        seen = whole if view == text else response_counts(view)
        rows.append([*features_from_counts(seen).values(), *measured_row(whole), *measured_view_row(seen)])
    width = len(FEATURE_NAMES) + len(MEASURED_FEATURES) + len(MEASURED_VIEW_FEATURES)
    return np.asarray(rows, dtype=np.float32).reshape(len(rows), width)


def graded_matrix(graded: GradedAnswers | None, prompts: list[str], texts: list[str],
                  exclude_families: list | None = None) -> np.ndarray:
    """The GRADED_FEATURES columns (zeros without graded answers)."""
    if graded is None:
        return np.zeros((len(texts), len(GRADED_FEATURES)))
    return np.stack(graded.features(prompts, texts, exclude_families), axis=1)


def ngram_matrix(texts: list[str]) -> sparse.csr_matrix:
    """The hashed n-grams of each text, hashed on every core (crm/feature_workers.py)."""
    parts = feature_workers.map_chunks(_ngram_rows, len(texts), ([str(t) for t in texts],))
    return sparse.vstack(parts, format="csr") if len(parts) > 1 else parts[0]


def _ngram_rows(texts: list[str]) -> sparse.csr_matrix:
    return hasher().transform(texts).tocsr()

"""The scenario tagger: MiniLM embeddings of a user query, side by side with TF-IDF word and character n-grams
of its text, + logistic regression over Auto-J's scenarios.

Measured by 5-fold cross-validation on the training queries only (scenario / group accuracy): MiniLM alone
0.428 / 0.580; + word and char TF-IDF 0.549 / 0.671 (C=10), 0.553 / 0.675 (C=5), 0.543 / 0.663 (C=30);
embeddings weighted x2 0.514 / 0.640; TF-IDF alone 0.492 / 0.630; 256 tokens 0.543 / 0.663. Hence the
defaults: 128 tokens, C=5, both blocks at unit weight (each row of each block has unit L2 norm).

Trained on Auto-J's labelled scenario queries. Its labels are the 58 scenarios of Auto-J's 8 groups (the
scenarios the criteria and the pairwise data use). The query files carry three other categories, all relabelled
to `others` (Auto-J's catch-all, "Respond to the user's query"):
- `default`: Auto-J's classifier label for a query that fits no scenario, which is what `others` means;
- `peer_review`, `rejecting`: in no group and without a criteria file, so they already get `others`' criteria.
`post_summarization` has no training queries, so the tagger never predicts it (human labels keep it).
"""

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import json

import joblib
import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import FeatureUnion

from usl_assets.embeddings import Progress, SentenceEncoder, encode_cached
from usl_assets.preferences.criteria import Scenarios
from usl_assets.resources import Warehouse
from usl_assets.settings import UslConfigError
from usl_assets.warehouse import quoted

log = logging.getLogger(__name__)

QUERY_FILES = {
    "train": "preferences/autoj_scenario_queries_train.jsonl",
    "test": "preferences/autoj_scenario_queries_test.jsonl",
}
FALLBACK_SCENARIO = "others"
TAGGER_DIR = ("models", "scenario_tagger")
TAGGER_FILE = "tagger.joblib"
EMBEDDING_CACHE_DIR = ("cache", "embeddings")
# TF-IDF reads the first characters of a query only: the instruction comes first, and long pasted documents
# would otherwise dominate the n-grams and the fit time.
TFIDF_MAX_CHARS = 2000


def grouped_scenarios(scenarios: Scenarios) -> dict[str, str]:
    """scenario -> group, for the scenarios that belong to one of the 8 groups."""
    return {scenario: group for group, members in scenarios.groups.items() for scenario in members}


def query_text(instruction: object, query_input: object) -> str:
    parts = [str(part).strip() for part in (instruction, query_input) if isinstance(part, str) and part.strip()]
    return "\n".join(parts)


def load_scenario_queries(data_root: Path, scenarios: Scenarios) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(queries, rejected): queries has split, category, scenario, scenario_group, text; rejected has a reason."""
    group_of = grouped_scenarios(scenarios)
    frames = []
    for split, relative in QUERY_FILES.items():
        raw = pd.read_json(data_root / relative, lines=True, dtype=False)
        raw["split"] = split
        raw["line"] = np.arange(1, len(raw) + 1)
        frames.append(raw)
    raw = pd.concat(frames, ignore_index=True)
    raw["text"] = [query_text(i, x) for i, x in zip(raw["instruction"], raw.get("input", ""), strict=True)]
    raw["category"] = raw["category"].where(raw["category"].map(lambda c: isinstance(c, str)), None)
    known = set(scenarios.descriptions) | {"default"}
    reason = np.select(
        [raw["category"].isna(), ~raw["category"].isin(known), raw["text"] == ""],
        ["no category", "category is not an Auto-J scenario", "empty instruction and input"],
        default="",
    )
    rejected = raw.loc[reason != "", ["split", "line", "category", "text"]].assign(reason=reason[reason != ""])
    queries = raw.loc[reason == ""].copy()
    queries["scenario"] = [c if c in group_of else FALLBACK_SCENARIO for c in queries["category"]]
    queries["scenario_group"] = queries["scenario"].map(group_of)
    return queries[["split", "category", "scenario", "scenario_group", "text"]].reset_index(drop=True), rejected


def stratified_subset(queries: pd.DataFrame, per_scenario: int, seed: int) -> pd.DataFrame:
    """At most `per_scenario` training queries per scenario (all test queries kept), sampled with `seed`."""
    train = queries[queries["split"] == "train"]
    sampled = train.sample(frac=1.0, random_state=seed).groupby("scenario").head(per_scenario)
    return pd.concat([sampled, queries[queries["split"] == "test"]]).reset_index(drop=True)


def text_feature_union() -> FeatureUnion:
    """Word 1-2-grams and char_wb 2-5-grams, sublinear TF-IDF, terms in at least 2 training queries."""
    return FeatureUnion([
        ("word", TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)),
        ("char", TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), min_df=2, sublinear_tf=True,
                                 max_features=100_000)),
    ])


def clean_texts(texts: Sequence[object]) -> list[str]:
    return [text if isinstance(text, str) else "" for text in texts]


def combined_features(vectors: np.ndarray, texts: Sequence[str], text_features: FeatureUnion) -> sp.csr_matrix:
    """[MiniLM vector | TF-IDF of the text] per row, with `text_features` already fitted."""
    tfidf = text_features.transform([text[:TFIDF_MAX_CHARS] for text in texts])
    return sp.hstack([sp.csr_matrix(vectors), tfidf], format="csr")


def train_classifier(features: sp.csr_matrix, labels: Sequence[str], regularization: float,
                     seed: int) -> LogisticRegression:
    # Balanced class weights: unweighted, the large `others` class took 30% of test predictions (measured).
    classifier = LogisticRegression(C=regularization, max_iter=3000, class_weight="balanced", random_state=seed)
    return classifier.fit(features, np.asarray(labels))


@dataclass
class ScenarioTagger:
    """A trained tagger; `predict(texts)` gives scenario, scenario_group and confidence (top probability)."""

    classifier: LogisticRegression
    text_features: FeatureUnion
    group_of: dict[str, str]
    max_length: int
    cache_root: Path | None = None
    metrics: dict = field(default_factory=dict)
    _encoder: SentenceEncoder | None = field(default=None, repr=False)

    @property
    def encoder(self) -> SentenceEncoder:
        if self._encoder is None:
            self._encoder = SentenceEncoder(max_length=self.max_length)
        return self._encoder

    def embed(self, texts: Sequence[str], progress: Progress | None = None) -> np.ndarray:
        clean = clean_texts(texts)
        if self.cache_root is None:
            return self.encoder.encode(clean, progress=progress)
        vectors, _ = encode_cached(self.encoder, clean, self.cache_root, progress=progress)
        return vectors

    def predict(self, texts: Sequence[str], progress: Progress | None = None) -> pd.DataFrame:
        return self.predict_embedded(clean_texts(texts), self.embed(texts, progress=progress))

    def predict_embedded(self, texts: Sequence[str], vectors: np.ndarray) -> pd.DataFrame:
        """Predictions for `texts` whose MiniLM vectors are `vectors` (same order)."""
        if len(vectors) == 0:
            return pd.DataFrame({"scenario": [], "scenario_group": [], "confidence": []})
        probabilities = self.classifier.predict_proba(combined_features(vectors, texts, self.text_features))
        best = probabilities.argmax(axis=1)
        scenario = self.classifier.classes_[best]
        return pd.DataFrame({
            "scenario": scenario,
            "scenario_group": [self.group_of[s] for s in scenario],
            "confidence": probabilities[np.arange(len(best)), best].astype(float),
        })


def evaluate(predicted: pd.DataFrame, actual: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
    """Accuracy at scenario and group level, overall and per (true) group."""
    frame = pd.DataFrame({
        "scenario_group": actual["scenario_group"].to_numpy(),
        "scenario_hit": predicted["scenario"].to_numpy() == actual["scenario"].to_numpy(),
        "group_hit": predicted["scenario_group"].to_numpy() == actual["scenario_group"].to_numpy(),
    })
    per_group = (
        frame.groupby("scenario_group")
        .agg(n=("scenario_hit", "size"), scenario_accuracy=("scenario_hit", "mean"),
             group_accuracy=("group_hit", "mean"))
        .reset_index()
        .sort_values("scenario_group")
    )
    overall = {
        "n_test": int(len(frame)),
        "scenario_accuracy": float(frame["scenario_hit"].mean()) if len(frame) else 0.0,
        "group_accuracy": float(frame["group_hit"].mean()) if len(frame) else 0.0,
    }
    return overall, per_group


def fit_tagger(queries: pd.DataFrame, group_of: dict[str, str], max_length: int, regularization: float,
               seed: int, cache_root: Path | None, log_progress: Callable[[str], None] = log.info,
               ) -> tuple[ScenarioTagger, dict, pd.DataFrame]:
    """Embed the queries, fit TF-IDF and the classifier on the train split, evaluate on the test split."""
    tagger = ScenarioTagger(classifier=None, text_features=text_feature_union(), group_of=group_of,
                            max_length=max_length, cache_root=cache_root)
    texts = np.asarray(clean_texts(queries["text"].tolist()), dtype=object)

    def report(done: int, total: int, seconds: float) -> None:
        if done == total or done % 512 < tagger.encoder.batch_size:
            log_progress(f"embedded {done}/{total} queries ({done / max(seconds, 1e-6):.1f}/s)")

    vectors = tagger.embed(texts.tolist(), progress=report)
    is_train = (queries["split"] == "train").to_numpy()
    tagger.text_features.fit([text[:TFIDF_MAX_CHARS] for text in texts[is_train]])
    features = combined_features(vectors[is_train], texts[is_train].tolist(), tagger.text_features)
    started = time.monotonic()
    tagger.classifier = train_classifier(features, queries.loc[is_train, "scenario"], regularization, seed)
    log_progress(f"classifier fitted on {features.shape[0]} queries x {features.shape[1]:,} features "
                 f"in {time.monotonic() - started:.1f}s")
    test = queries[~is_train].reset_index(drop=True)
    overall, per_group = evaluate(tagger.predict_embedded(texts[~is_train].tolist(), vectors[~is_train]), test)
    overall |= {"n_train": int(is_train.sum()), "n_scenarios": int(len(tagger.classifier.classes_)),
                "max_length": max_length, "regularization": regularization}
    tagger.metrics = overall
    return tagger, overall, per_group


def cross_validated_accuracy(train: pd.DataFrame, vectors: np.ndarray, group_of: dict[str, str],
                             regularization: float, folds: int = 5, seed: int = 0) -> dict:
    """Mean scenario and group accuracy over stratified folds of the training queries (how C is tuned: the
    test split is never looked at). `vectors` are the MiniLM vectors of `train`, row for row."""
    texts = np.asarray(clean_texts(train["text"].tolist()), dtype=object)
    labels = train["scenario"].to_numpy()
    hits = []
    for fit_rows, held_rows in StratifiedKFold(folds, shuffle=True, random_state=seed).split(texts, labels):
        tagger = ScenarioTagger(classifier=None, text_features=text_feature_union(), group_of=group_of,
                                max_length=0)
        tagger.text_features.fit([text[:TFIDF_MAX_CHARS] for text in texts[fit_rows]])
        features = combined_features(vectors[fit_rows], texts[fit_rows].tolist(), tagger.text_features)
        tagger.classifier = train_classifier(features, labels[fit_rows], regularization, seed)
        overall, _ = evaluate(tagger.predict_embedded(texts[held_rows].tolist(), vectors[held_rows]),
                              train.iloc[held_rows])
        hits.append((overall["scenario_accuracy"], overall["group_accuracy"]))
    scenario_accuracy, group_accuracy = np.mean(hits, axis=0)
    return {"regularization": regularization, "folds": folds, "scenario_accuracy": float(scenario_accuracy),
            "group_accuracy": float(group_accuracy)}


def tagger_dir(usl_home_root: Path) -> Path:
    return Path(usl_home_root).joinpath(*TAGGER_DIR)


def save_tagger(tagger: ScenarioTagger, usl_home_root: Path) -> Path:
    folder = tagger_dir(usl_home_root)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / TAGGER_FILE
    state = {"classifier": tagger.classifier, "text_features": tagger.text_features, "group_of": tagger.group_of,
             "max_length": tagger.max_length, "metrics": tagger.metrics}
    joblib.dump(state, target.with_suffix(".partial"))
    target.with_suffix(".partial").replace(target)
    return target


def load_tagger(usl_home_root: Path) -> ScenarioTagger:
    """The tagger the `scenario_tagger` asset saved under `$USL_HOME/models/scenario_tagger/`."""
    path = tagger_dir(usl_home_root) / TAGGER_FILE
    if not path.exists():
        raise UslConfigError(f"no scenario tagger at {path}: materialize the asset scenario_tagger first")
    state = joblib.load(path)
    if "text_features" not in state:
        raise UslConfigError(f"the scenario tagger at {path} predates the TF-IDF features: materialize the asset "
                             f"scenario_tagger again")
    return ScenarioTagger(classifier=state["classifier"], text_features=state["text_features"],
                          group_of=state["group_of"],
                          max_length=state["max_length"], metrics=state["metrics"],
                          cache_root=Path(usl_home_root).joinpath(*EMBEDDING_CACHE_DIR))


# ---------------------------------------------------------------------------------------------- preferences
PREFERENCE_COLUMNS = ["idx", "source", "prompt", "scenario", "human_winner", "a_criteria", "b_criteria"]


def _is_empty(criteria: object) -> bool:
    return pd.api.types.is_scalar(criteria) or len(criteria) == 0  # None, NaN and pd.NA are scalars


def winner_criteria(human_winner: str, criteria: list[str]) -> tuple[list[str], list[str]]:
    """(a_criteria, b_criteria): the winner carries the scenario's criteria, a tie both, the loser none."""
    a_wins = human_winner in ("model_a", "tie")
    b_wins = human_winner in ("model_b", "tie")
    return (list(criteria) if a_wins else []), (list(criteria) if b_wins else [])


def tag_preferences(preferences: pd.DataFrame, tagger: ScenarioTagger, group_of: dict[str, str],
                    criteria_of: Callable[[str], list[str]], progress: Progress | None = None) -> pd.DataFrame:
    """idx, scenario, scenario_group, scenario_origin, tagger_confidence, a_criteria, b_criteria, criteria_filled.

    A human scenario is kept when it is one of the grouped scenarios; any other row (no scenario, or a scenario
    outside the groups) gets the tagger's prediction for its prompt.
    """
    human = preferences["scenario"].isin(list(group_of)).to_numpy()
    tags = pd.DataFrame({
        "idx": preferences["idx"].to_numpy(),
        "scenario": preferences["scenario"].where(human, None).to_numpy(),
        "scenario_origin": np.where(human, "human", "tagger"),
        "tagger_confidence": np.nan,
    })
    if (~human).any():
        # Each distinct prompt is tagged once (AI-judge sources repeat every prompt for each judged model).
        prompts = preferences.loc[~human, "prompt"]
        unique_prompts = list(dict.fromkeys(prompts.tolist()))
        predicted = tagger.predict(unique_prompts, progress=progress).set_index(pd.Index(unique_prompts))
        tags.loc[~human, "scenario"] = predicted["scenario"].reindex(prompts).to_numpy()
        tags.loc[~human, "tagger_confidence"] = predicted["confidence"].reindex(prompts).to_numpy()
    tags["scenario_group"] = tags["scenario"].map(group_of)
    filled = [_is_empty(a) and _is_empty(b) for a, b in zip(preferences["a_criteria"], preferences["b_criteria"],
                                                              strict=True)]
    a_side, b_side = [], []
    for row, fill, scenario in zip(preferences.itertuples(index=False), filled, tags["scenario"], strict=True):
        a, b = winner_criteria(row.human_winner, criteria_of(scenario)) if fill else (
            _as_list(row.a_criteria), _as_list(row.b_criteria))
        a_side.append(a)
        b_side.append(b)
    tags["a_criteria"], tags["b_criteria"], tags["criteria_filled"] = a_side, b_side, filled
    return tags


def _as_list(criteria: object) -> list[str]:
    return [] if _is_empty(criteria) else [str(item) for item in criteria]


def tagging_summary(tags: pd.DataFrame, preferences: pd.DataFrame) -> pd.DataFrame:
    """Per source: rows, how many kept a human scenario, were tagged, had criteria filled; mean confidence."""
    frame = tags.assign(source=preferences["source"].to_numpy())
    return frame.groupby("source").agg(
        rows=("idx", "size"),
        human=("scenario_origin", lambda s: int((s == "human").sum())),
        tagged=("scenario_origin", lambda s: int((s == "tagger").sum())),
        criteria_filled=("criteria_filled", "sum"),
        mean_tagger_confidence=("tagger_confidence", "mean"),
    ).reset_index()


def write_tagged_preferences(warehouse: Warehouse, tags: pd.DataFrame, source_table: str, table: str) -> int:
    """Replace `table` with `source_table` plus the tags (scenario and criteria replaced), joined on idx."""
    frame = tags.assign(a_criteria=[json.dumps(c) for c in tags["a_criteria"]],
                        b_criteria=[json.dumps(c) for c in tags["b_criteria"]])
    with warehouse.transaction() as writer:
        return writer.replace_table(table, frame=None, frames={"_tags": frame}, select=f"""
            SELECT p.* REPLACE (t.scenario AS scenario,
                                from_json(t.a_criteria, '["VARCHAR"]') AS a_criteria,
                                from_json(t.b_criteria, '["VARCHAR"]') AS b_criteria),
                   t.scenario_group, t.scenario_origin, CAST(t.tagger_confidence AS DOUBLE) AS tagger_confidence
            FROM {quoted(source_table)} AS p JOIN _tags AS t USING (idx)
            ORDER BY p.idx""")

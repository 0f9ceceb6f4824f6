"""A small real scenario tagger for the tests and benchmarks: TF-IDF + complement naive Bayes trained on Auto-J's
labelled scenario queries (a few seconds), with the preferences tagger's interface `.predict(texts) ->
DataFrame[scenario, scenario_group, confidence]`. The responses tests use it in place of the MiniLM tagger, whose
training takes minutes; the end-to-end test runs the real `scenario_tagger` asset. test_responses_tagger.py checks
that it tags far above chance."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.naive_bayes import ComplementNB
from sklearn.pipeline import make_pipeline

from usl_assets.preferences.criteria import load_scenarios


class TfidfScenarioTagger:
    def __init__(self, data_root: Path):
        scenarios = load_scenarios(data_root)
        self.group_of = {s: scenarios.group_of(s) for s in scenarios.descriptions}
        # `default` is not one of the 58 scenarios: left out of training.
        queries = [q for q in scenario_queries(data_root, "train") if q[1] in self.group_of]
        self.model = make_pipeline(
            TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True),
            ComplementNB(alpha=0.3),
        )
        self.model.fit([text for text, _ in queries], [label for _, label in queries])

    def predict(self, texts) -> pd.DataFrame:
        probabilities = self.model.predict_proba(list(texts))
        best = probabilities.argmax(axis=1)
        scenarios = self.model.classes_[best]
        return pd.DataFrame({
            "scenario": scenarios,
            "scenario_group": [self.group_of[s] for s in scenarios],
            "confidence": probabilities[np.arange(len(best)), best],
        })


def scenario_queries(data_root: Path, split: str) -> list[tuple[str, str]]:
    path = data_root / "preferences" / f"autoj_scenario_queries_{split}.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [((r["instruction"] + "\n" + (r.get("input") or "")).strip(), r["category"]) for r in rows]


"""A dev measure for human-pair accuracy: 5-fold cross-validation of the linear CRM over the Auto-J training pairs
of a `make run` warehouse, grouped by origin (a pair's augmented rows stay in its fold). It has about 580 test
pairs, where human_heldout has 155, so it can tell apart choices human_heldout cannot; docs/crm.md quotes it for
the degeneration features.

    .venv/bin/python benchmarks/autoj_cv.py [--variants default degeneration=false …]

Each variant overrides LinearConfig fields (joined by +, as in benchmarks/graded_answers.py). Each fold refits on
the whole training table minus that fold's Auto-J origins and scores the fold's original pairs under their own
criteria. Reads `$USL_HOME/published/warehouse.duckdb`; about 40 s per fold on this machine.
"""

import argparse
import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from graded_answers import load, parse_variant
from usl_assets.crm import graded_answers, linear, linear_crm
from usl_assets.crm.backbones import resolve_backbone

FOLDS, SEED = 5, 0


def fold_accuracy(train, test, vectors, config, memory) -> int:
    weights = linear.fit_linear(train, vectors, config, linear_crm.criteria_key, log=lambda _: None,
                                graded=memory, reading_directions=[]).weights
    keys = [linear_crm.criteria_key(c) for c in test["criteria"]]

    def rewards(texts):
        rows = weights.response_rows(list(test["prompt"]), list(texts))
        return np.array([weights.score_rows(rows[i:i + 1], vectors[key])[0] for i, key in enumerate(keys)])

    return int((rewards(test["chosen"]) > rewards(test["rejected"])).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="*", default=["default", "degeneration=false"])
    args = parser.parse_args()
    home = Path(os.environ.get("USL_HOME", ".usl"))
    frames = load(home)
    train = frames["pairs"][frames["pairs"]["split"] == "train"].reset_index(drop=True)
    memory = graded_answers.GradedAnswers.build(frames["graded"])
    encoder = linear_crm.CriteriaEncoder(resolve_backbone("minilm", home / "models" / "backbones"), 128)
    profiles = {linear_crm.criteria_key(c): tuple(linear_crm.criteria_lines(c)) for c in train["criteria"]}
    vectors = dict(zip(profiles, encoder.embed(list(profiles.values()))))
    originals = train[(train["source"] == "autoj") & (train["augmentation"] == "original")]
    origins = np.array(sorted(originals["origin_idx"].unique()))
    np.random.default_rng(SEED).shuffle(origins)
    longer = np.mean(originals["chosen"].str.len().to_numpy() > originals["rejected"].str.len().to_numpy())
    print(f"Auto-J {FOLDS}-fold CV: {len(originals)} original pairs; the longer answer wins {longer:.3f}")
    for variant in args.variants:
        config = replace(linear.LinearConfig(), **parse_variant(variant))
        correct = sum(fold_accuracy(train[~train["origin_idx"].isin(fold)].reset_index(drop=True),
                                    originals[originals["origin_idx"].isin(fold)], vectors, config, memory)
                      for fold in np.array_split(origins, FOLDS))
        print(f"  {variant:<40} accuracy {correct / len(originals):.3f}", flush=True)


if __name__ == "__main__":
    main()

"""The graded-answers feature (crm/graded_answers.py) on the real AlpacaEval judgments: built by
crm_training_pairs' logic from the judge's training models, it ranks the held-out judged models (never in it) as
the judge does, leaves an answer's own family out in training, and reaches the linear CRM's rewards."""

import json

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from usl_assets.crm import data
from usl_assets.crm.backbones import resolve_backbone
from usl_assets.crm.evaluate import judged_model
from usl_assets.crm.graded_answers import FILE, GradedAnswers
from usl_assets.crm.interface import ScoreItem
from usl_assets.crm.judge_pairs import HELDOUT_SPLIT, model_family
from usl_assets.crm.checkpoints import load_scorer
from usl_assets.crm.train import TrainConfig, train_crm
from usl_assets_tests.crm_data_inputs import scenario_criteria_frame, tagged_preferences_frame

JUDGE_PROMPTS = 60


@pytest.fixture(scope="module")
def built(shared_data_dir):
    tagged = tagged_preferences_frame(shared_data_dir, autoj_step=6, pandalm=20, hh=30, judge_prompts=JUDGE_PROMPTS)
    return data.build_training_pairs(tagged, scenario_criteria_frame(shared_data_dir), data.PairsConfig())


@pytest.fixture(scope="module")
def graded(built) -> GradedAnswers:
    return GradedAnswers.build(built[2])


def held_out_answers(table: pd.DataFrame) -> pd.DataFrame:
    """Per held-out judgment: prompt, the judged model's answer, the reference's, P(model beats reference)."""
    held = table[table["split"] == HELDOUT_SPLIT]
    model = judged_model(held)
    mine = held["chosen_model"] == model
    return pd.DataFrame({"prompt": held["prompt"], "model": model,
                         "answer": np.where(mine, held["chosen"], held["rejected"]),
                         "reference": np.where(mine, held["rejected"], held["chosen"]),
                         "judge": np.where(mine, held["soft_label"], 1 - held["soft_label"])})


def win_rate_spearman(held: pd.DataFrame, difference: np.ndarray) -> float:
    ours = pd.Series(1 / (1 + np.exp(-difference))).groupby(held["model"].to_numpy()).mean()
    judge = held.groupby("model")["judge"].mean()
    return float(spearmanr(ours, judge.loc[ours.index]).statistic)


def test_graded_answers_hold_only_training_models_and_no_test_prompt(built):
    table, _, graded_table = built
    held = set(held_out_answers(table)["model"])
    assert len(graded_table) > 20 * JUDGE_PROMPTS and not held & set(graded_table["model"])
    assert "gpt4_1106_preview" not in set(graded_table["model"])  # the pool's reference never reaches training
    human_tests = data.human_test_prompts(table[table["label_kind"] == "human"])
    assert not human_tests & set(graded_table["prompt"].map(data.prompt_key))


def test_graded_answers_rank_held_out_models_as_the_judge_does_and_better_than_length(built, graded):
    held = held_out_answers(built[0])
    difference = (graded.feature(list(held["prompt"]), list(held["answer"]))
                  - graded.feature(list(held["prompt"]), list(held["reference"])))
    length = np.log(held["answer"].str.len().to_numpy() + 1) - np.log(held["reference"].str.len().to_numpy() + 1)
    assert held["model"].nunique() >= 6
    ours, by_length = win_rate_spearman(held, difference), win_rate_spearman(held, length)
    assert ours > 0.7 and ours > by_length, (ours, by_length)
    assert np.mean((difference > 0) == (held["judge"] > 0.5)) > 0.7


def test_an_answer_is_compared_only_with_other_families_and_unknown_prompts_get_zero(built, graded):
    table = built[2]
    row = table.iloc[len(table) // 2]
    family = model_family(row["model"])
    keep = graded.families != family  # the same vectors and IDF, that family's answers removed
    without = GradedAnswers(graded.prompt_keys[keep], graded.families[keep], graded.strengths[keep],
                            graded.vectors[keep], graded.idf)
    prompts, answers = [row["prompt"], f"  {row['prompt'].upper()} "], [row["response"], row["response"]]
    left_out = graded.feature(prompts, answers, [row["model"], row["model"]])
    np.testing.assert_allclose(left_out, without.feature(prompts, answers), atol=1e-12)
    assert not np.allclose(graded.feature(prompts, answers), left_out)  # its own answer (cosine 1) dominates
    assert graded.feature(["A prompt the judge never saw."], [row["response"]])[0] == 0.0


def test_saved_graded_answers_load_to_the_same_feature(graded, built, tmp_path):
    graded.save(tmp_path)
    loaded = GradedAnswers.load(tmp_path)
    sample = built[2].sample(50, random_state=0)
    args = list(sample["prompt"]), list(sample["response"]), list(sample["model"])
    np.testing.assert_array_equal(graded.feature(*args), loaded.feature(*args))
    assert GradedAnswers.load(tmp_path / "missing") is None


def test_the_linear_crm_learns_the_feature_and_scores_with_the_prompt(built, graded, tmp_path):
    """With graded answers the checkpoint carries them, and a held-out answer's reward under its own prompt
    exceeds its reward under a prompt the judge never saw by a positive multiple of its graded feature: the
    feature is wired into scoring and the fit learned that the judge's favourites are better. The unseen prompt is
    the same prompt with stop words appended, so the other features read with the prompt (copied 4-grams, missed
    terms) stay as they are and only graded_answers differs."""
    table, _, graded_table = built
    train = table[table["split"] == "train"]
    backbone = resolve_backbone("minilm", tmp_path / "backbones")
    config = TrainConfig(architecture="linear", max_steps=60)
    with_graded = train_crm(train, backbone, config, tmp_path / "crm", log=lambda _: None,
                            graded_answers=graded_table)
    without = train_crm(train, backbone, config, tmp_path / "crm", log=lambda _: None)
    assert with_graded.checkpoint_id != without.checkpoint_id
    assert (with_graded.checkpoint_dir / FILE).exists() and not (without.checkpoint_dir / FILE).exists()
    shape = json.loads((with_graded.checkpoint_dir / "linear.json").read_text())
    assert {"graded_answers", "graded_best_match"} <= set(shape["feature_names"])
    assert "graded_answers" not in json.loads((without.checkpoint_dir / "linear.json").read_text())["feature_names"]

    held = table[table["split"] == HELDOUT_SPLIT].head(120)
    answers = held_out_answers(held)
    scorer = load_scorer(with_graded.checkpoint_dir)
    criteria = [tuple(c) for c in held["criteria"]]
    known = scorer.score([ScoreItem(p, a, c) for p, a, c in zip(answers["prompt"], answers["answer"], criteria)])
    unseen = [f"{p}\n\nPlease, once more." for p in answers["prompt"]]
    unknown = scorer.score([ScoreItem(p, a, c) for p, a, c in zip(unseen, answers["answer"], criteria)])
    # the two graded features (the judge's grade and the best match) are what the prompt changes, nothing else
    feature, best = graded.features(list(answers["prompt"]), list(answers["answer"]))
    design = np.column_stack([feature, best, np.ones(len(feature))])
    coefficients, *_ = np.linalg.lstsq(design, known - unknown, rcond=None)
    explained = 1 - np.var(known - unknown - design @ coefficients) / np.var(known - unknown)
    assert explained > 0.95 and coefficients[0] > 0.2
    plain = load_scorer(without.checkpoint_dir)
    assert np.allclose(plain.score([ScoreItem(p, a, c) for p, a, c in zip(answers["prompt"], answers["answer"],
                                                                          criteria)])[:5],
                       plain.score([ScoreItem(p, a, c) for p, a, c in zip(unseen, answers["answer"], criteria)])[:5])

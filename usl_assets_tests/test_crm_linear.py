"""The linear CRM on real pairs (Auto-J human pairs and AlpacaEval judge pairs built by crm/data.py): it learns,
it follows the criteria, its training is deterministic on a loaded machine, and its safety net fails loudly."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from usl_assets.crm import (criteria_prototypes, data, evaluate, features, gaming, linear, linear_constraints,
                            linear_rows, linear_weights, properties)
from usl_assets.crm.backbones import resolve_backbone
from usl_assets.crm.interface import ScoreItem
from usl_assets.crm.linear import TrainingTimeLimit
from usl_assets.crm.checkpoints import load_scorer
from usl_assets.crm.train import TrainConfig, train_crm
from usl_assets.leaderboards import incremental, ranking
from usl_assets.leaderboards.adhoc_comparisons import reference_wins_from_rewards
from usl_assets_tests.crm_data_inputs import scenario_criteria_frame, tagged_preferences_frame

BRIEF = (data.PROPERTIES["length"].less[0],)
THOROUGH = (data.PROPERTIES["length"].more[0],)


@pytest.fixture(scope="module")
def table(shared_data_dir) -> pd.DataFrame:
    tagged = tagged_preferences_frame(shared_data_dir, autoj_step=3, pandalm=40, hh=60, judge_prompts=12)
    built, _, _ = data.build_training_pairs(tagged, scenario_criteria_frame(shared_data_dir), data.PairsConfig())
    return built


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    return resolve_backbone("minilm", tmp_path_factory.mktemp("backbones"))


@pytest.fixture(scope="module")
def fitted(table, backbone, tmp_path_factory):
    """The linear CRM of config() on the table's train rows, fitted once for the tests that only read it."""
    return train_crm(table[table["split"] == "train"], backbone, config(), tmp_path_factory.mktemp("crm"),
                     log=lambda _: None)


def config(**changes) -> TrainConfig:
    return TrainConfig(**{"architecture": "linear", "max_steps": 60, **changes})


def burn_cpu(seconds: float) -> list[subprocess.Popen]:
    """Two busy processes (this machine has 2 cores) for `seconds`."""
    code = f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(2)]


def test_linear_crm_learns_from_human_and_judge_pairs(table, fitted):
    train = table[table["split"] == "train"]
    assert set(train["label_kind"]) == {"human", "ai_judge", "gaming"}
    scorer = load_scorer(fitted.checkpoint_dir)
    chosen, rejected = evaluate.pair_rewards(train, scorer)
    assert (chosen > rejected).mean() > 0.8  # it fits what it saw
    assert fitted.steps <= 60 and (fitted.checkpoint_dir / "length_only" / "linear.safetensors").exists()
    reversed_pairs = table[table["split"] == "criteria_reversed"]
    chosen, rejected = evaluate.pair_rewards(reversed_pairs, scorer)
    assert (chosen > rejected).mean() > 0.7  # unseen pairs, criteria that pick a side


def test_flipping_the_criteria_flips_the_preference_between_a_short_and_a_long_answer(fitted):
    scorer = load_scorer(fitted.checkpoint_dir)
    prompt = "Explain what a hash table is."
    short = "A hash table maps keys to values by hashing each key to a bucket."
    # Every added sentence is about the prompt's hash table and says something new: a sentence tied to nothing in
    # the prompt, or one repeated, is filler the reward never pays for (crm/relevance.py).
    long = " ".join([short] + [f"A hash table {detail}." for detail in (
        "handles key collisions with chaining or open addressing",
        "resizes its bucket array when the load factor grows past a threshold",
        "gives average constant-time lookups, inserts and deletes",
        "needs a hash function that spreads keys evenly over the buckets",
        "degrades to linear-time lookups when many keys land in one bucket",
        "keeps no order among its keys, unlike a balanced search tree")])
    rewards = scorer.score([ScoreItem(prompt, short, BRIEF), ScoreItem(prompt, long, BRIEF),
                            ScoreItem(prompt, short, THOROUGH), ScoreItem(prompt, long, THOROUGH)])
    assert rewards[0] > rewards[1] and rewards[3] > rewards[2]


def test_the_degeneration_features_reach_the_reward(fitted):
    """The same answer under a prompt it copies and under one it does not differs only in the features read with
    the prompt (prompt_copy_share, prompt_terms_missed): the reward must move with them, and a looped answer's
    cached row must show its loop."""
    scorer = load_scorer(fitted.checkpoint_dir)
    answer = "The ice cream shop is a small, quaint shop located in the heart of the historic district."
    copied, fresh = f"Give this brand a motto. {answer}", "Give this ice cream brand a motto."
    rewards = scorer.score([ScoreItem(copied, answer, BRIEF), ScoreItem(fresh, answer, BRIEF)])
    assert abs(rewards[0] - rewards[1]) > 1e-4
    looped = "\n".join(["1. How to make coffee"] + [f"{i}. How to make the perfect coffee" for i in range(2, 9)])
    rows = scorer.embed_responses([fresh, fresh], [looped, answer])
    column = 1 + linear_rows.ROW_FEATURES.index("repeated_line_share")
    assert rows[0, column] == 0.75 and rows[1, column] == 0.0
    words = 1 + linear_rows.ROW_FEATURES.index("repeated_word_share")
    assert rows[0, words] > 0.5 > rows[1, words]
    degeneration = {linear_rows.ROW_FEATURES.index(name) for name in linear.DEGENERATION_FEATURES}
    assert degeneration <= set(linear.LinearConfig().feature_columns())
    assert not degeneration & set(linear.LinearConfig(degeneration=False).feature_columns())
    left_out = linear.LinearConfig(leave_out=("prompt_terms_missed",)).feature_columns()
    assert set(linear.LinearConfig().feature_columns()) - set(left_out) == {
        linear_rows.ROW_FEATURES.index("prompt_terms_missed")}


def test_training_is_deterministic_on_a_quiet_and_a_loaded_machine(table, backbone, tmp_path):
    """Same inputs → the same checkpoint id, bit-identical weights, rewards and rankings, even with both cores
    kept busy by other processes during the second training."""
    train = table[table["split"] == "train"]
    quiet = train_crm(train, backbone, config(), tmp_path / "quiet", log=lambda _: None)
    burners = burn_cpu(120)
    try:
        loaded = train_crm(train, backbone, config(), tmp_path / "loaded", log=lambda _: None)
    finally:
        for process in burners:
            process.kill()
    assert quiet.checkpoint_id == loaded.checkpoint_id
    for name in ("linear.safetensors", "linear.json", "length_only/linear.safetensors"):
        assert (quiet.checkpoint_dir / name).read_bytes() == (loaded.checkpoint_dir / name).read_bytes(), name
    test = table[table["split"] != "train"]
    quiet_rewards = np.concatenate(evaluate.pair_rewards(test, load_scorer(quiet.checkpoint_dir)))
    loaded_rewards = np.concatenate(evaluate.pair_rewards(test, load_scorer(loaded.checkpoint_dir)))
    assert np.array_equal(quiet_rewards, loaded_rewards)
    rankings = [rank_judge_rows(test, load_scorer(c.checkpoint_dir)) for c in (quiet, loaded)]
    pd.testing.assert_frame_equal(*rankings)


def rank_judge_rows(test: pd.DataFrame, scorer) -> pd.DataFrame:
    """leaderboard.rankings' methods over the held-out judged models vs the reference, from this CRM's rewards."""
    held = test[test["split"] == "judge_heldout_models"]
    rows = []
    for pair, (chosen, rejected) in zip(held.itertuples(), zip(*evaluate.pair_rewards(held, scorer))):
        for model, reward, text in ((pair.chosen_model, chosen, pair.chosen), (pair.rejected_model, rejected,
                                                                               pair.rejected)):
            rows.append({"pool": "alpaca_eval", "profile": "default", "prompt_id": pair.prompt, "model": model,
                         "scenario": pair.scenario, "scenario_group": pair.scenario_group, "reward": float(reward),
                         "length_chars": len(text)})
    rewards = pd.DataFrame(rows).drop_duplicates(["prompt_id", "model"])
    wins = reference_wins_from_rewards(rewards, "gpt4_1106_preview")
    empty_pairs = pd.DataFrame(columns=["pool", "profile", "prompt_id", "scenario", "scenario_group", "model_a",
                                        "model_b", "a_score"])
    return incremental.rank_all(wins, empty_pairs, ranking.BootstrapSettings(usl_rounds=50, bt_rounds=20))


def test_the_wall_clock_safety_net_fails_the_training_and_ships_nothing(table, backbone, tmp_path):
    with pytest.raises(TrainingTimeLimit, match="safety net"):
        train_crm(table[table["split"] == "train"], backbone, config(max_minutes=1e-6), tmp_path / "crm",
                  log=lambda _: None)
    assert not list(Path(tmp_path / "crm").glob("linear/*/crm.json"))


def test_the_safety_net_is_not_part_of_the_checkpoint_id():
    assert config(max_minutes=1.0).budget_key() == config(max_minutes=99.0).budget_key()
    assert config(max_steps=10).budget_key() != config(max_steps=11).budget_key()


def test_the_linear_fit_settings_are_part_of_the_checkpoint_id(backbone, monkeypatch):
    """A changed fit default (the judge's style terms, a penalty, the graded answers' τ) must not reuse an old
    checkpoint trained without it."""
    from dataclasses import replace

    from usl_assets.crm import graded_answers, linear_crm
    from usl_assets.crm.train import checkpoint_id

    before = checkpoint_id(backbone, "data", config())
    original = linear_crm.linear_config
    monkeypatch.setattr(linear_crm, "linear_config", lambda c: replace(original(c), judge_nuisance="length"))
    changed_fit = checkpoint_id(backbone, "data", config())
    monkeypatch.setattr(linear_crm, "linear_config", original)
    monkeypatch.setattr(graded_answers, "TEMPERATURE", 0.5)
    changed_tau = checkpoint_id(backbone, "data", config())
    assert len({before, changed_fit, changed_tau}) == 3


def test_an_answer_moved_to_another_prompt_loses_to_the_real_one(table, fitted):
    """The gaming rows and the prompt-fit features reach the reward: on test prompts the CRM never saw, a real
    answer beats another prompt's answer (crm/gaming.py's off-topic trick) under the same criteria."""
    from usl_assets.crm import gaming

    scorer = load_scorer(fitted.checkpoint_dir)
    held = table[(table["split"] == "human_heldout") & (table["augmentation"] == "original")]  # 45 pairs
    moved = gaming.shifted(list(held["prompt"]), 0)
    items = [ScoreItem(p, a, tuple(c)) for p, a, c in zip(held["prompt"], held["chosen"], held["criteria"])]
    off = [ScoreItem(p, held["chosen"].iloc[j], tuple(c)) for p, c, j in zip(held["prompt"], held["criteria"], moved)]
    real, off_topic = scorer.score(items), scorer.score(off)
    assert (real > off_topic).mean() > 0.8


def test_gaming_rows_weigh_gaming_weight_and_a_named_kind_its_own(table):
    """linear.row_weights: human and judge rows weigh their source's weight, gaming rows `gaming_weight` (0.5 by
    default, docs/crm.md run 28), a kind named in gaming_kind_weights its own."""
    train = table[table["split"] == "train"].reset_index(drop=True)
    gaming_rows = (train["label_kind"] == "gaming").to_numpy()
    padded = (train["augmentation"] == "gaming_padded").to_numpy()
    human = (train["source"] == "autoj").to_numpy() & ~gaming_rows
    default = linear.row_weights(train, linear.LinearConfig())
    assert set(default[gaming_rows]) == {0.5} and set(default[human]) == {linear.DEFAULT_SOURCE_WEIGHTS["autoj"]}
    named = linear.row_weights(train, linear.LinearConfig(gaming_weight=1.0, gaming_kind_weights={"gaming_padded": 0}))
    assert padded.any() and set(named[padded]) == {0.0} and set(named[gaming_rows & ~padded]) == {1.0}
    assert np.array_equal(named[~gaming_rows], default[~gaming_rows])


def test_under_the_substance_fit_gaming_rows_move_only_the_substance_terms(table):
    """gaming_fit "substance": every coefficient but SUBSTANCE_FEATURES' base ones is what the fit without gaming
    rows gives (the n-grams, the other features, the whole gate), and the gaming rows do move the substance terms,
    so the reward ranks the trick below the real answer more often than without them."""
    train = table[table["split"] == "train"].reset_index(drop=True)
    gaming_rows = (train["label_kind"] == "gaming").to_numpy()
    vectors = {key: np.eye(4)[i % 4] for i, key in enumerate(dict.fromkeys(map(str, train["criteria"])))}

    def fit(**changes):
        return linear.fit_linear(train, vectors, linear.LinearConfig(iterations=30, **changes), str,
                                 log=lambda _: None, reading_directions=[]).weights

    without, substance = fit(gaming_weight=0.0, gaming_fit="joint"), fit(gaming_fit="substance")
    names = [linear_rows.ROW_FEATURES[c] for c in substance.columns]
    moved = np.array([name in linear_constraints.SUBSTANCE_FEATURES for name in names])
    assert np.array_equal(substance.u, without.u) and np.array_equal(substance.gate, without.gate)
    assert np.array_equal(substance.v[~moved], without.v[~moved]) and not np.allclose(substance.v[moved],
                                                                                     without.v[moved])

    def margins(weights):
        def reward(texts):
            rows = weights.response_rows(list(train["prompt"]), list(texts))
            return np.array([weights.score_rows(rows[i:i + 1], vectors[str(c)])[0]
                             for i, c in enumerate(train["criteria"])])
        return (reward(train["chosen"]) > reward(train["rejected"]))[gaming_rows].mean()

    assert margins(substance) > margins(without)


def test_filler_never_earns_reward_even_where_the_training_pairs_reward_it(table):
    """linear.SIGNS: on pairs where the answer with an unrelated sentence added always wins, an unconstrained fit
    pays for unsupported sentences; the default keeps their coefficients at or below zero, under the criteria too
    (the gate leaves them alone: with one criteria vector for every row, a free gate alone would pay for them)."""
    from usl_assets.crm import gaming

    held = table[(table["split"] == "train") & (table["augmentation"] == "original")].head(60)
    # three of the padding's filler paragraphs: more unsupported words than relevance.UNSUPPORTED_TOLERANCE
    filler = ["\n\n".join(gaming.padded("", "heldout", 0, i).splitlines()[k] for k in (2, 8, 18))
              for i in range(len(held))]
    pairs = pd.DataFrame({"prompt": held["prompt"], "chosen": [f"{a}\n\n{f}" for a, f in zip(held["chosen"], filler)],
                          "rejected": held["chosen"], "criteria": [("Be helpful.",)] * len(held),
                          "source": "autoj", "label_kind": "human", "soft_label": 1.0})
    vectors = {"c": np.ones(4) / 2}

    def coefficients(**changes):
        fitted = linear.fit_linear(pairs, vectors, linear.LinearConfig(iterations=40, ngrams=False, **changes),
                                   lambda _: "c", log=lambda _: None, reading_directions=[]).weights
        effective = fitted.v + fitted.gate @ vectors["c"]
        return {linear_rows.ROW_FEATURES[c]: value for c, value in zip(fitted.columns, effective)}

    free, base_only, signed = coefficients(signs=False), coefficients(gate_signs=False), coefficients()
    assert free["log_excess_unsupported_words"] > 0.01 and base_only["log_excess_unsupported_words"] > 0.01
    for name, sign in linear.SIGNS.items():
        assert sign * signed[name] >= 0


def test_a_criterion_read_as_less_of_a_property_never_pays_for_more_of_it(table):
    """reading_gate own_property: where the training rows reward longer answers under a criterion the prototypes
    read as "length:less", a free gate learns to pay for length under that reading; the constrained gate's reading
    cells move only the property's own features, and only the way the reading says."""
    held = table[(table["split"] == "train") & (table["augmentation"] == "original")].head(60)
    longer = held["chosen"].str.len() >= held["rejected"].str.len()
    pairs = pd.DataFrame({"prompt": held["prompt"], "chosen": np.where(longer, held["chosen"], held["rejected"]),
                          "rejected": np.where(longer, held["rejected"], held["chosen"]),
                          "criteria": [("Keep it short.",)] * len(held), "source": "autoj", "label_kind": "human",
                          "soft_label": 1.0})
    directions = ["length:more", "length:less", "structure:more", "structure:less"]
    vectors = {"c": np.array([0.5, 0.5, 0.0, 4.0, 0.0, 0.0])}

    def reading_cells(gate: str) -> dict[str, np.ndarray]:
        fitted = linear.fit_linear(pairs, vectors, linear.LinearConfig(iterations=40, ngrams=False, reading_gate=gate),
                                   lambda _: "c", log=lambda _: None, reading_directions=directions).weights
        return {linear_rows.ROW_FEATURES[c]: row[2:] for c, row in zip(fitted.columns, fitted.gate)}

    free, own = reading_cells("free"), reading_cells("own_property")
    less = directions.index("length:less")
    length = ("log_words", "log_chars", "measured_length")
    assert sum(free[name][less] for name in length) > 0.01  # the rows taught it to pay for length
    assert all(own[name][less] <= 0 for name in length)
    for name, cells in own.items():
        if name not in length:
            assert not cells[:2].any(), name  # the length reading moves no other feature
    with pytest.raises(ValueError, match="reading_directions"):
        linear.fit_linear(pairs, vectors, linear.LinearConfig(iterations=2, reading_gate="own_property"),
                          lambda _: "c", log=lambda _: None)

    def fitted(gain: float) -> linear_weights.LinearWeights:
        return linear.fit_linear(pairs, vectors, linear.LinearConfig(iterations=20, ngrams=False, reading_gain=gain),
                                 lambda _: "c", log=lambda _: None, reading_directions=directions).weights

    one, three = fitted(1.0), fitted(3.0)  # the gain scales the reading's cells after the fit, nothing else
    assert np.abs(one.gate[:, 2:]).max() > 1e-4
    np.testing.assert_allclose(three.gate[:, 2:], 3.0 * one.gate[:, 2:], rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(three.gate[:, :2], one.gate[:, :2])
    np.testing.assert_array_equal(three.v, one.v)


def test_a_property_measured_on_the_whole_answer_moves_only_with_its_reading(table):
    """properties.MEASURED_FEATURES: where the answer with a bullet list added always loses under a wish read as
    "structure:less", the whole answer's measured structure is paid for under that reading, and (reading_gate
    wish_measured) nothing else is; it has no base coefficient and no cells on the criteria's embedding, so criteria
    read as no property leave it at zero. What a wish for more structure learns on the whole answer it pays, after
    the fit, on the structure of the answer's supported view (linear_constraints.more_wishes_on_view)."""
    held = table[(table["split"] == "train") & (table["augmentation"] == "original")].head(60)
    bullets = "\n\n- one point\n- another point\n- a third point"
    pairs = pd.DataFrame({"prompt": held["prompt"], "chosen": held["chosen"],
                          "rejected": [f"{a}{bullets}" for a in held["chosen"]],
                          "criteria": [("No bullets.",)] * len(held), "source": "autoj", "label_kind": "human",
                          "soft_label": 1.0})
    wish = criteria_prototypes.WISH
    directions = ["structure:more", "structure:less", f"{wish}structure:more", f"{wish}structure:less"]
    vectors = {"c": np.array([0.5, 0.5, 0.0, 0.0, 0.0, 4.0])}  # a wish for less structure

    def fitted(gate: str) -> tuple[linear_weights.LinearWeights, list[str]]:
        weights = linear.fit_linear(pairs, vectors, linear.LinearConfig(iterations=40, ngrams=False, reading_gate=gate),
                                    lambda _: "c", log=lambda _: None, reading_directions=directions).weights
        return weights, [linear_rows.ROW_FEATURES[c] for c in weights.columns]

    weights, names = fitted("wish_measured")  # the default
    measured = [names.index(name) for name in (*properties.MEASURED_FEATURES, *properties.MEASURED_VIEW_FEATURES)]
    assert not weights.v[measured].any() and not weights.gate[measured, :2].any()
    assert weights.coefficients(vectors["c"])[names.index("measured_structure")] < -0.01
    others = [i for i in range(len(names)) if i not in measured]
    assert not weights.gate[others, 4:].any()  # a wish moves the property as measured, nothing else
    assert not np.delete(weights.gate[:, 5], names.index("measured_structure")).any()
    assert not weights.coefficients(np.array([0.5, 0.5, 0.0, 0.0, 0.0, 0.0]))[measured].any()
    own, names = fitted("own_property")  # a wish may also move the answer view's list features
    assert own.gate[names.index("log_list_items"), 5] < -0.01
    swapped = pairs.assign(chosen=pairs["rejected"], rejected=pairs["chosen"])
    vectors["c"] = np.array([0.5, 0.5, 0.0, 0.0, 4.0, 0.0])  # a wish for more structure: the bullets win

    def fitted_more(on_view: bool) -> np.ndarray:
        config = linear.LinearConfig(iterations=40, ngrams=False, more_wishes_on_view=on_view)
        fit = linear.fit_linear(swapped, vectors, config, lambda _: "c", log=lambda _: None,
                                reading_directions=directions).weights
        return fit.gate[:, 4], fit.feature_std

    on_whole, std = fitted_more(False)
    on_view, _ = fitted_more(True)
    whole, view = names.index("measured_structure"), names.index("measured_view_structure")
    assert on_whole[whole] > 0.01 and on_whole[view] == 0
    assert on_view[whole] == 0 and on_view[view] == pytest.approx(on_whole[whole] * std[view] / std[whole])
    assert not np.delete(on_view, view).any()
    counts = features.response_counts(f"Intro.{bullets}\n# A heading")
    assert properties.measured_row(counts)[properties.MEASURED_FEATURES.index("measured_structure")] == pytest.approx(
        np.log1p(4))


def test_padding_earns_no_measured_structure_on_the_view():
    """The padded answer (crm/gaming.py: headings, bold summary bullets, filler) has more structure, bold and
    length as a whole, so a wish for less of them counts it against it; its supported view, which a wish for more
    reads (properties.MEASURED_VIEW_FEATURES), has no more structure or bold than the answer it pads."""
    prompt = "How do I keep basil alive on a windowsill?"
    answer = ("Keep basil on a sunny windowsill with six hours of light. Water the basil when the soil feels dry, "
              "and pinch the basil tips so the plant grows bushy.")
    padded = gaming.padded(answer, "heldout", 0, "basil")
    rows, _ = linear_rows.raw_features([prompt, prompt], [answer, padded], np.zeros((2, 2)), True)
    column = {name: rows[:, linear_rows.ROW_FEATURES.index(name)] for name in linear_rows.ROW_FEATURES}
    for name in ("structure", "emphasis", "length"):
        assert column[f"measured_{name}"][1] > column[f"measured_{name}"][0], name
    for name in ("structure", "emphasis"):
        assert column[f"measured_view_{name}"][1] == column[f"measured_view_{name}"][0], name


def test_under_a_wish_the_wish_decides_and_an_answer_that_misses_the_prompt_still_loses(table, fitted):
    """linear_weights.WishFocus: under a wish read at full strength, the rest of the reward steps aside, so two real
    answers that tie in what the wish asks for tie in reward and the one with more of it wins; an answer given to
    another prompt still loses to the real one (the substance floor); criteria with no wish score as without it."""
    from usl_assets.crm import gaming

    scorer = load_scorer(fitted.checkpoint_dir)
    weights = scorer.weights
    wish, rubric = ("Put the key terms in bold.",), tuple(table.loc[table["split"] == "train", "criteria"].iloc[0])
    assert weights.wish_strength(scorer.embed_criteria([wish])[0]) == pytest.approx(1.0)
    assert weights.wish_strength(scorer.embed_criteria([rubric])[0]) == 0.0
    held = table[(table["split"] == "human_heldout") & (table["augmentation"] == "original")]
    plain = held[~held["chosen"].str.contains(r"\*\*") & ~held["rejected"].str.contains(r"\*\*")].head(20)
    rows = scorer.embed_responses(list(plain["prompt"]) * 2, list(plain["chosen"]) + list(plain["rejected"]))
    focused = scorer.score_embedded(rows, scorer.embed_criteria([wish])[0])
    shortfall = weights.reward_terms(rows, scorer.embed_criteria([wish])[0])[2]
    untouched = shortfall == 0  # neither side short of substance: the wish's measure alone decides, and it ties
    both = untouched[:len(plain)] & untouched[len(plain):]
    assert both.sum() >= 5
    np.testing.assert_allclose(focused[:len(plain)][both], focused[len(plain):][both], atol=1e-5)
    bold = [f"{a} **In short:** the answer above." for a in plain["chosen"]]
    with_bold = scorer.score_embedded(scorer.embed_responses(list(plain["prompt"]), bold),
                                      scorer.embed_criteria([wish])[0])
    assert (with_bold > focused[:len(plain)]).all()
    moved = gaming.shifted(list(held["prompt"]), 0)
    real = scorer.score([ScoreItem(p, a, wish) for p, a in zip(held["prompt"], held["chosen"])])
    off = scorer.score([ScoreItem(p, held["chosen"].iloc[j], wish) for p, j in zip(held["prompt"], moved)])
    assert (real > off).mean() > 0.7
    default_rows = scorer.embed_responses(list(plain["prompt"]), list(plain["chosen"]))
    vector = scorer.embed_criteria([rubric])[0]
    np.testing.assert_array_equal(weights.score_rows(default_rows, vector),
                                  replace(weights, focus=None).score_rows(default_rows, vector))
    # a wish read wholly as a direction no training row names (a held-out property) takes no place from the rest
    directions = scorer.encoder.bank.directions
    untrained = {directions[i] for i in weights.focus.untrained}
    assert {"sentence_length:less", "numbers:more"} <= untrained
    assert not untrained & linear.trained_directions(table[table["split"] == "train"])
    for direction, strength in (("sentence_length:less", 0.0), ("length:less", 1.0)):
        full = np.zeros(weights.gate.shape[1])
        full[len(full) - weights.focus.wish_columns + directions.index(direction)] = weights.focus.full
        assert weights.wish_strength(full) == strength
        assert weights.focus.unlearned(full, directions) == ([direction] if strength == 0 else [])


def test_a_checkpoint_with_a_wish_focus_this_code_does_not_know_is_refused_in_one_line(tmp_path):
    from usl_assets.settings import StaleCheckpoint

    columns = [0, 1]
    weights = linear_weights.LinearWeights(
        u=np.zeros(linear_rows.N_BUCKETS), v=np.ones(2), gate=np.zeros((2, 3)), feature_mean=np.zeros(2),
        feature_std=np.ones(2), columns=columns,
        focus=linear_weights.WishFocus(wish_columns=2, full=4.0, untrained=(1,)))
    weights.save(tmp_path, {})
    assert linear_weights.LinearWeights.load(tmp_path).focus == weights.focus
    shape = json.loads((tmp_path / linear_weights.SHAPE_FILE).read_text())
    shape["wish_focus"]["floor"] = 0.2  # written by a newer version of the rule
    (tmp_path / linear_weights.SHAPE_FILE).write_text(json.dumps(shape))
    with pytest.raises(StaleCheckpoint, match="wish focus this code does not know \\(floor\\)"):
        linear_weights.LinearWeights.load(tmp_path)

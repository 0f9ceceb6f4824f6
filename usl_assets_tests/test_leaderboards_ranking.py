"""Leaderboard math on data small enough to check by hand."""

import numpy as np
import pandas as pd
import pytest

from usl_assets.leaderboards import incremental, ranking

SETTINGS = ranking.BootstrapSettings(usl_rounds=500, bt_rounds=100, seed=7)


def wins_frame(wins_by_model: dict[str, list[float]]) -> pd.DataFrame:
    return pd.DataFrame([{"prompt_id": str(i), "model": model, "win": win}
                         for model, wins in wins_by_model.items() for i, win in enumerate(wins)])


def test_usl_score_is_the_win_rate_in_percent_with_an_interval_around_it():
    wins = wins_frame({"a": [1, 1, 1, 0.5], "b": [0, 0, 1, 0], "ref": [0.5, 0.5, 0.5, 0.5]})
    scores = ranking.usl_scores(wins, SETTINGS, np.random.default_rng(0)).set_index("model")
    assert scores.loc["a", "score"] == pytest.approx(87.5)
    assert scores.loc["b", "score"] == pytest.approx(25.0)
    assert scores.loc["ref", ["score", "ci_low", "ci_high"]].tolist() == [50.0, 50.0, 50.0]
    assert (scores["ci_low"] <= scores["score"]).all() and (scores["score"] <= scores["ci_high"]).all()
    assert scores.loc["b", "ci_high"] > scores.loc["b", "ci_low"]
    assert scores["n_prompts"].tolist() == [4, 4, 4]


def test_usl_score_counts_only_the_prompts_a_model_answered():
    wins = wins_frame({"a": [1, 0], "b": [1, 1]}).iloc[[0, 1, 2]]  # b has no answer to prompt 1
    scores = ranking.usl_scores(wins, SETTINGS, np.random.default_rng(0)).set_index("model")
    assert scores.loc["b", "score"] == 100.0 and scores.loc["b", "n_prompts"] == 1
    assert scores.loc["a", "score"] == 50.0


def test_bootstrap_is_seeded():
    wins = wins_frame({"a": [1, 0, 1, 0, 1, 1, 0], "b": [0, 0, 1, 1, 0, 1, 0]})
    first = ranking.usl_scores(wins, SETTINGS, np.random.default_rng(3))
    again = ranking.usl_scores(wins, SETTINGS, np.random.default_rng(3))
    pd.testing.assert_frame_equal(first, again)


def test_overlapping_intervals_share_a_rank():
    # a is clearly ahead; b and c overlap; d is below b but overlaps c.
    low = np.array([80.0, 50.0, 45.0, 30.0])
    high = np.array([90.0, 60.0, 55.0, 46.0])
    assert ranking.overlap_ranks(low, high).tolist() == [1, 2, 2, 3]
    # ends equal but for rounding touch: a one-prompt topic's ranks do not depend on the fit's last digit
    assert ranking.overlap_ranks([50.0 + 1e-11, 20.0], [60.0, 50.0]).tolist() == [1, 1]
    assert ranking.overlap_ranks([50.001, 20.0], [60.0, 50.0]).tolist() == [1, 2]


def test_bradley_terry_recovers_a_known_order():
    rng = np.random.default_rng(11)
    strengths = {"strong": 1.5, "good": 0.5, "fair": -0.5, "weak": -1.5}
    models = list(strengths)
    rows = []
    for prompt in range(150):
        for i, a in enumerate(models):
            for b in models[i + 1:]:
                p_a = 1 / (1 + np.exp(strengths[b] - strengths[a]))
                rows.append({"prompt_id": str(prompt), "model_a": a, "model_b": b,
                             "a_score": float(rng.random() < p_a)})
    scores = ranking.with_ranks(ranking.bradley_terry_scores(pd.DataFrame(rows), SETTINGS, np.random.default_rng(0)))
    assert scores["model"].tolist() == models
    assert scores["rank"].tolist() == [1, 2, 3, 4]  # 150 prompts separate them
    assert (scores["ci_low"] <= scores["score"]).all() and (scores["score"] <= scores["ci_high"]).all()
    assert scores["score"].mean() == pytest.approx(ranking.ELO_BASE)
    # strength gap 1.0 (natural log odds) is 400/ln(10) ≈ 174 Elo points
    gaps = -np.diff(scores["score"].to_numpy())
    assert gaps == pytest.approx([ranking.ELO_SCALE] * 3, rel=0.25)


def test_the_batched_fit_gives_choix_s_ratings_and_intervals():
    """The fit of all bootstrap resamples at once against choix's own loop over them (the implementation it
    replaced), on one fixed slice: 6 models, 120 prompts, one model that loses every comparison."""
    choix = pytest.importorskip("choix")
    rng = np.random.default_rng(5)
    strengths = np.array([1.2, 0.6, 0.1, -0.3, -0.9, -8.0])
    rows = [{"prompt_id": str(p), "model_a": f"m{i}", "model_b": f"m{j}",
             "a_score": float(rng.random() < 1 / (1 + np.exp(strengths[j] - strengths[i])))}
            for p in range(120) for i in range(6) for j in range(i + 1, 6)]
    pairs = pd.DataFrame(rows)
    settings = ranking.BootstrapSettings(bt_rounds=100)
    found = ranking.bradley_terry_scores(pairs, settings, np.random.default_rng(3))

    def choix_elo(wins, initial=None):
        params = choix.ilsr_pairwise_dense(wins, alpha=ranking.BT_REGULARIZATION, initial_params=initial,
                                           max_iter=500)
        return ranking.ELO_BASE + ranking.ELO_SCALE * (params - params.mean())

    matrices, _ = ranking.per_prompt_win_matrices(pairs, sorted(set(pairs["model_a"]) | set(pairs["model_b"])))
    point = choix_elo(matrices.sum(axis=0))
    weights = ranking.bootstrap_weights(len(matrices), settings.bt_rounds, np.random.default_rng(3))
    start = (point - ranking.ELO_BASE) / ranking.ELO_SCALE
    samples = np.stack([choix_elo(wins, start) for wins in np.tensordot(weights, matrices, axes=(1, 0))])
    low, high = ranking.interval(samples, settings.confidence)
    assert found["score"].to_numpy() == pytest.approx(point, abs=1e-6)
    assert found["ci_low"].to_numpy() == pytest.approx(low, abs=1e-6)
    assert found["ci_high"].to_numpy() == pytest.approx(high, abs=1e-6)
    assert found["score"].iloc[-1] < found["score"].iloc[-2] - 400  # the regularization keeps it finite


def test_ties_count_half_for_each_side():
    pairs = pd.DataFrame({"prompt_id": ["1", "2"], "model_a": ["a", "a"], "model_b": ["b", "b"], "a_score": [0.5, 0.5]})
    matrices, _ = ranking.per_prompt_win_matrices(pairs, ["a", "b"])
    assert matrices.sum(axis=0).tolist() == [[0.0, 1.0], [1.0, 0.0]]
    scores = ranking.bradley_terry_scores(pairs, SETTINGS, np.random.default_rng(0))
    assert scores["score"].tolist() == pytest.approx([ranking.ELO_BASE, ranking.ELO_BASE])


def test_rank_all_covers_every_topic_and_every_method():
    reference_wins = pd.DataFrame({
        "pool": "p", "profile": "default", "prompt_id": ["1", "1", "2", "2"], "scenario": ["s1", "s1", "s2", "s2"],
        "scenario_group": "G", "model": ["ref", "x", "ref", "x"], "win": [0.5, 1.0, 0.5, 0.0],
        "reward_diff": [0.0, 2.0, 0.0, -1.0], "length_diff": [0, 100, 0, -50]})
    pairs = pd.DataFrame({"pool": "p", "profile": "default", "prompt_id": ["1", "2"], "scenario": ["s1", "s2"],
                          "scenario_group": "G", "model_a": "ref", "model_b": "x", "a_score": [0.0, 1.0]})
    table = incremental.rank_all(reference_wins, pairs, SETTINGS, temperature=1.0)
    assert list(table.columns) == ranking.RANKING_COLUMNS
    topics = set(map(tuple, table[["level", "scenario", "method"]].drop_duplicates().to_numpy()))
    assert topics == {(level, topic, method) for level, topic in [("all", "all"), ("group", "G"), ("scenario", "s1"),
                                                                  ("scenario", "s2")]
                      for method in ranking.METHODS}
    x = table[(table["model"] == "x") & (table["method"] == "usl")].set_index("scenario")["score"]
    assert x.to_dict() == {"all": 50.0, "G": 50.0, "s1": 100.0, "s2": 0.0}
    soft = table[(table["model"] == "x") & (table["method"] == "usl_soft")].set_index("scenario")["score"]
    sigmoid = lambda z: 100 / (1 + np.exp(-z))  # noqa: E731
    assert soft["s1"] == pytest.approx(sigmoid(2.0)) and soft["s2"] == pytest.approx(sigmoid(-1.0))
    assert soft["all"] == pytest.approx((sigmoid(2.0) + sigmoid(-1.0)) / 2)


def test_usl_soft_follows_the_calibrated_temperature():
    rows = pd.DataFrame({"prompt_id": ["1", "2"], "model": "x", "win": [1.0, 1.0], "reward_diff": [1.0, 0.5],
                         "length_diff": [0, 0]})
    sharp = ranking.score_method("usl_soft", rows, SETTINGS, np.random.default_rng(0), temperature=10.0)
    flat = ranking.score_method("usl_soft", rows, SETTINGS, np.random.default_rng(0), temperature=0.01)
    assert sharp["score"].iloc[0] > 99 and flat["score"].iloc[0] == pytest.approx(50, abs=1)


def test_usl_lc_removes_a_win_rate_that_only_length_explains():
    rng = np.random.default_rng(0)
    n = 400
    verbose_length, steady_length = rng.normal(400, 200, n), rng.normal(0, 300, n)
    scale = float(np.std(verbose_length, ddof=1))  # each model's own spread (AlpacaEval 2's unit)
    # "verbose" wins by being longer: at equal length it would win σ(-2) = 11.9%; "steady" wins σ(0.85) always.
    rows = pd.concat([
        pd.DataFrame({"prompt_id": np.arange(n).astype(str), "model": "verbose", "length_diff": verbose_length,
                      "reward_diff": -2.0 + 4.0 * np.tanh(verbose_length / scale)}),
        pd.DataFrame({"prompt_id": np.arange(n).astype(str), "model": "steady", "length_diff": steady_length,
                      "reward_diff": 0.85}),
    ])
    lengths = rows.pivot_table(index="prompt_id", columns="model", values="length_diff")
    assert ranking.length_scales(lengths.to_numpy())[list(lengths.columns).index("verbose")] == pytest.approx(scale)
    lc = ranking.score_method("usl_lc", rows, SETTINGS, np.random.default_rng(0), 1.0).set_index("model")
    raw = ranking.score_method("usl_soft", rows, SETTINGS, np.random.default_rng(0), 1.0).set_index("model")
    assert raw.loc["verbose", "score"] > raw.loc["steady", "score"]  # length makes it look better
    assert lc.loc["verbose", "score"] == pytest.approx(100 / (1 + np.exp(2.0)), abs=0.5)
    assert lc.loc["steady", "score"] == pytest.approx(100 / (1 + np.exp(-0.85)), abs=0.5)
    assert (lc["ci_low"] <= lc["score"]).all() and (lc["score"] <= lc["ci_high"]).all()


def test_slices_are_seeded_by_their_own_key():
    first = ranking.slice_rng(SETTINGS, "p", "default", "usl", "all", "all").random(3)
    again = ranking.slice_rng(SETTINGS, "p", "default", "usl", "all", "all").random(3)
    other = ranking.slice_rng(SETTINGS, "q", "default", "usl", "all", "all").random(3)
    assert (first == again).all() and not (first == other).all()


def test_reference_models_table_flags_a_missing_reference():
    pool_models = pd.DataFrame({"pool": ["a", "a", "b"], "model": ["ref", "x", "y"]})
    table = ranking.reference_models_table({"a": "ref", "b": "ref"}, pool_models).set_index("pool")
    assert table["reference_present"].to_dict() == {"a": True, "b": False}

"""External validity on the real ranking files, and the contradiction-vs-leaderboard math."""

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from usl_assets.leaderboards import validity


@pytest.fixture(scope="module")
def external(shared_data_dir):
    return validity.load_external_rankings(shared_data_dir), validity.load_name_map(shared_data_dir)


@pytest.fixture(scope="module")
def alpaca_mean_lengths(shared_data_dir) -> pd.DataFrame:
    rows = []
    for path in sorted((shared_data_dir / "responses" / "alpaca_eval").glob("*.json.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            outputs = json.load(handle)
        rows.append({"pool": "alpaca_eval", "model": path.name.removesuffix(".json.gz"),
                     "mean_length_chars": float(np.mean([len(str(o["output"])) for o in outputs]))})
    return pd.DataFrame(rows)


def test_names_map_through_the_name_file_or_case_insensitively(external):
    rankings, name_map = external
    assert validity.external_name("gpt4_1106_preview", "lmarena_2025", rankings["lmarena_2025"],
                                  name_map) == "gpt-4-1106-preview"
    assert validity.external_name("claude-2.1", "lmarena_2025", rankings["lmarena_2025"], name_map) is None
    assert validity.external_name("rwkv-4-raven-14b", "chatbot_arena_2024", rankings["chatbot_arena_2024"],
                                  name_map) == "RWKV-4-Raven-14B"


def test_mean_length_baseline_matches_the_published_figure(external, alpaca_mean_lengths):
    """The data README: ranking the 25 AlpacaEval models LMArena 2025 rates by mean length gives Spearman 0.61."""
    rankings, name_map = external
    no_leaderboard = pd.DataFrame(columns=["pool", "profile", "scenario", "method", "model", "score"])
    table = validity.external_validity(no_leaderboard, alpaca_mean_lengths, rankings, name_map)
    row = table[(table["method"] == "mean_length") & (table["external_ranking"] == "lmarena_2025")].iloc[0]
    assert row["n_models"] == 25
    assert row["spearman"] == pytest.approx(0.61, abs=0.01)
    assert set(table["external_ranking"]) == set(validity.EXTERNAL_RANKINGS)


def test_a_leaderboard_equal_to_an_external_ranking_correlates_perfectly(external, alpaca_mean_lengths):
    """AlpacaEval 2's LC win rate as our leaderboard: 1.0 with itself, 0.92 with LMArena (the README's figure)."""
    rankings, name_map = external
    lc = rankings["alpaca_eval_2_lc"]
    ours = pd.DataFrame({"pool": "alpaca_eval", "profile": "default", "scenario": "all", "method": "usl",
                         "model": lc.index, "score": lc.to_numpy()})
    table = validity.external_validity(ours, alpaca_mean_lengths, rankings, name_map).set_index(
        ["method", "external_ranking"])
    assert table.loc[("usl", "alpaca_eval_2_lc"), "spearman"] == pytest.approx(1.0)
    assert table.loc[("usl", "alpaca_eval_2_lc"), "kendall"] == pytest.approx(1.0)
    assert table.loc[("usl", "alpaca_eval_2_lc"), "n_models"] == 27
    assert table.loc[("usl", "lmarena_2025"), "spearman"] == pytest.approx(0.92, abs=0.01)
    assert table.loc[("usl", "chatbot_arena_2024"), "n_models"] == 21


def test_too_few_common_models_give_nan_with_n():
    result = validity.correlate(pd.Series({"a": 1.0, "b": 2.0}), pd.Series({"a": 5.0, "b": 3.0, "c": 1.0}))
    assert result["n_models"] == 2 and np.isnan(result["spearman"])


def test_ranking_change_is_one_minus_kendall_between_profiles():
    rows = []
    for profile, scores in {"default": [3, 2, 1], "same": [30, 20, 10], "reversed": [1, 2, 3]}.items():
        rows += [{"pool": "p", "level": "scenario", "scenario": "s", "method": "usl", "profile": profile,
                  "model": model, "score": score} for model, score in zip("abc", scores)]
    changes = validity.ranking_change(pd.DataFrame(rows)).set_index("profile")["ranking_change"]
    assert changes.to_dict() == pytest.approx({"same": 0.0, "reversed": 2.0})


def test_contradiction_table_joins_per_scenario_and_correlates():
    contradiction = pd.DataFrame({"scenario": list("abcd"), "scenario_group": "G", "n_pairs": 10,
                                  "tie_rate": [0.1, 0.2, 0.3, 0.4], "disagreement_rate": [0.4, 0.3, 0.2, 0.1],
                                  "longer_preferred_rate": 0.5, "opposite_pull": [0.0, 0.1, 0.0, 0.1]})
    crm = pd.DataFrame({"scenario": list("abcd") + ["a"], "scenario_group": "G",
                        "variant": ["crm"] * 4 + ["length_baseline"], "n": 5, "accuracy": [0.9, 0.8, 0.7, 0.6, 0.0]})
    changes = pd.DataFrame({"pool": "p", "scenario": list("abcd"), "profile": "x", "n_models": 5,
                            "kendall": [1.0, 0.5, 0.0, -0.5], "ranking_change": [0.0, 0.5, 1.0, 1.5]})
    table = validity.contradiction_by_scenario(contradiction, crm, changes)
    assert table["crm_accuracy"].tolist() == pytest.approx([0.9, 0.8, 0.7, 0.6])
    correlations = validity.contradiction_correlations(table).set_index(["measure", "outcome"])["spearman"]
    assert correlations[("tie_rate", "crm_accuracy")] == pytest.approx(-1.0)
    assert correlations[("tie_rate", "ranking_change")] == pytest.approx(1.0)
    assert validity.contradiction_chart(table).startswith("iVBOR")  # a PNG

import base64

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from usl_assets.preferences import analysis, tagging_assets
from usl_assets.resources import Warehouse
from usl_assets_tests.test_tagger import (
    check_results,
    metadata,
    seed_validated_preferences,
    share_embedding_cache,
    tagger_run_config,
)


# ------------------------------------------------------------------------------ plain functions
def test_pair_facts_tie_split_votes_and_the_longer_side():
    pairs = pd.DataFrame({
        "scenario": ["a"] * 5, "scenario_group": ["g"] * 5, "source": ["pandalm"] * 5,
        "human_winner": ["model_a", "model_b", "tie", "model_a", "model_b"],
        "votes": [["model_a"] * 3, ["model_b", "model_b", "tie"], ["tie"] * 3, None, None],
        "response_a": ["long answer", "long answer", "x", "same", "short"],
        "response_b": ["short", "short", "xyz", "same", "much longer"],
    })
    facts = analysis.pair_facts(pairs)
    assert facts["is_tie"].tolist() == [False, False, True, False, False]
    assert facts["votes_split"].tolist() == [False, True, False, None, None]
    assert facts["longer_won"].tolist() == [True, False, None, None, True]
    [stats] = analysis.preference_stats(facts, ["scenario"]).to_dict("records")
    assert stats["n_pairs"] == 5 and stats["tie_rate"] == pytest.approx(0.2)
    assert stats["n_with_votes"] == 3 and stats["disagreement_rate"] == pytest.approx(1 / 3)
    assert stats["n_length_decided"] == 3 and stats["longer_preferred_rate"] == pytest.approx(2 / 3)


def test_opposite_pull_is_zero_when_all_agree_and_one_when_fully_opposed():
    agree = analysis.opposite_pull(pd.Series([0.5, 0.2, 1.0]), pd.Series([10, 10, 10]))
    assert np.allclose(agree, 0)
    opposed = analysis.opposite_pull(pd.Series([-1.0, 1.0, 1.0, np.nan]), pd.Series([5, 5, 5, 0]))
    assert opposed.iloc[0] == pytest.approx(1.0)
    assert opposed.iloc[1] == pytest.approx(0.5)  # half the others' weight (scenario 0) pulls against it
    assert np.isnan(opposed.iloc[3])


def test_criteria_view_finds_brevity_and_richness(shared_data_dir):
    from usl_assets.preferences.assets import scenario_criteria_frame

    view = analysis.criteria_view(scenario_criteria_frame(shared_data_dir)).set_index("scenario")
    stance = view["criteria_length_stance"]
    assert stance["post_summarization"] < 0 and stance["writing_email"] < 0  # "concise", "to the point"
    assert stance["writing_scientific_paper"] > stance["text_summarization"] > 0  # "comprehensive", "thorough"
    assert stance["math_reasoning"] == 0  # neither
    assert {"basic_weight", "content_weight", "format_weight", "style_weight"} <= set(view.columns)
    assert view["criteria_length_stance"].between(-1, 1).all()


def test_range_check_catches_a_rate_outside_zero_one():
    good = pd.DataFrame({"n_pairs": [3], "tie_rate": [0.5], "disagreement_rate": [None],
                         "longer_preferred_rate": [1.0]}).astype({"disagreement_rate": float})
    schema = tagging_assets.ANALYSIS_SCHEMAS[tagging_assets.STATS_TABLE]
    assert tagging_assets.analysis_failures(good, schema).empty
    bad = good.assign(tie_rate=[1.5], n_pairs=[0])
    assert set(tagging_assets.analysis_failures(bad, schema)["column"]) == {"tie_rate", "n_pairs"}


# ------------------------------------------------------------------------------ the asset
def test_preference_analysis_tables_chart_and_checks(usl_env, tmp_path_factory):
    share_embedding_cache(usl_env, tmp_path_factory)
    seed_validated_preferences(usl_env, tmp_path_factory)
    result = dg.materialize(
        [tagging_assets.scenario_tagger, tagging_assets.tagged_preferences, tagging_assets.preference_analysis,
         tagging_assets.preference_analysis_ranges],
        resources=usl_env, run_config=tagger_run_config())
    assert check_results(result) == {"preference_analysis_ranges": True}
    warehouse: Warehouse = usl_env["warehouse"]
    tagged = warehouse.read_table(tagging_assets.TAGGED_TABLE)
    contradiction = warehouse.read_table(tagging_assets.CONTRADICTION_TABLE)
    stats = warehouse.read_table(tagging_assets.STATS_TABLE)

    assert {"scenario", "scenario_group", "n_pairs", "tie_rate", "disagreement_rate", "longer_preferred_rate",
            "opposite_pull"} <= set(contradiction.columns)
    assert set(contradiction["scenario"]) == set(tagged["scenario"])
    assert contradiction["n_pairs"].sum() == stats["n_pairs"].sum() == len(tagged)
    pandalm = stats[stats["source"] == "pandalm"]
    assert pandalm["n_with_votes"].sum() == (tagged["source"] == "pandalm").sum()
    assert stats.loc[stats["source"] != "pandalm", "disagreement_rate"].isna().all()
    # recompute one scenario's tie rate straight from the tagged table
    first = contradiction.iloc[0]
    rows = tagged[tagged["scenario"] == first["scenario"]]
    assert first["tie_rate"] == pytest.approx((rows["human_winner"] == "tie").mean())

    found = metadata(result, "preference_analysis")
    prefix = "![length direction by scenario](data:image/png;base64,"
    assert found["chart"].startswith(prefix)
    assert base64.b64decode(found["chart"][len(prefix):-1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| scenario" in found["contradiction_table"]
    assert found["headline/pairs"] == len(tagged)
    assert 0 <= found["headline/longer_preferred_overall"] <= 1


def test_range_check_fails_on_a_broken_table(usl_env, tmp_path_factory):
    share_embedding_cache(usl_env, tmp_path_factory)
    seed_validated_preferences(usl_env, tmp_path_factory)
    dg.materialize([tagging_assets.scenario_tagger, tagging_assets.tagged_preferences,
                    tagging_assets.preference_analysis], resources=usl_env, run_config=tagger_run_config())
    with usl_env["warehouse"].connect() as conn:
        conn.execute(f"UPDATE {tagging_assets.CONTRADICTION_TABLE} SET tie_rate = 2.0 WHERE scenario = "
                     f"(SELECT min(scenario) FROM {tagging_assets.CONTRADICTION_TABLE})")
    result = dg.materialize([tagging_assets.preference_analysis_ranges, tagging_assets.preference_analysis],
                            resources=usl_env, selection=dg.AssetSelection.checks(tagging_assets.preference_analysis_ranges),
                            raise_on_error=False)
    assert check_results(result) == {"preference_analysis_ranges": False}

"""Incremental rankings (issue 10, scale): a new model is scored alone, the other models' rows are reused, and
the table equals a rebuild from scratch; Bradley–Terry waits for the full leaderboards job."""

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from usl_assets.leaderboards import incremental, ranking
from usl_assets.leaderboards import assets as leaderboard_assets
from usl_assets_tests.test_leaderboards_assets import FAST, GROUP_ASSETS, GROUP_CHECKS
from usl_assets_tests.test_leaderboards_fixtures import write_upstream

SETTINGS = ranking.BootstrapSettings(usl_rounds=200, bt_rounds=50, seed=3)
SCORES = ["score", "ci_low", "ci_high"]


def comparisons(models: list[str], n_prompts: int = 40, seed: int = 0) -> pd.DataFrame:
    """reference comparisons of `models` (the first is the reference) on prompts in 4 scenarios of 2 groups."""
    rng = np.random.default_rng(seed)
    rows = []
    for strength, model in enumerate(models):
        for prompt in range(n_prompts):
            diff = 0.0 if strength == 0 else rng.normal(0.2 * strength - 0.5, 1.0)
            rows.append({"pool": "p", "profile": "default", "prompt_id": f"{prompt:03d}",
                         "scenario": f"s{prompt % 4}", "scenario_group": f"g{prompt % 2}", "model": model,
                         "win": 1.0 if diff > 0 else (0.5 if diff == 0 else 0.0), "reward_diff": diff,
                         "length_diff": 0.0 if strength == 0 else rng.normal(50 * strength, 200)})
    frame = pd.DataFrame(rows)
    return pd.concat([frame, frame.assign(profile="brief", reward_diff=-frame["reward_diff"],
                                          win=1.0 - frame["win"])], ignore_index=True)


def assert_same_rankings(left: pd.DataFrame, right: pd.DataFrame) -> None:
    left, right = incremental.canonical_order(left), incremental.canonical_order(right)
    keys = incremental.KEY_COLUMNS + ["rank", "n_prompts"]
    pd.testing.assert_frame_equal(left[keys], right[keys])
    np.testing.assert_allclose(left[SCORES].to_numpy(float), right[SCORES].to_numpy(float), rtol=0, atol=1e-9)


def test_a_new_model_is_scored_alone_and_the_table_equals_a_rebuild():
    models = ["ref", "a", "b", "c", "d", "e"]
    everything = comparisons(models)
    scratch, inputs, recomputed = incremental.rank_per_model(everything, SETTINGS, 1.5)
    assert set(scratch["method"]) == set(ranking.PER_MODEL_METHODS)
    assert len(recomputed) == len(models) * 2  # every model of both profiles
    before = everything[everything["model"] != "c"]
    previous, previous_inputs, _ = incremental.rank_per_model(before, SETTINGS, 1.5)
    added, added_inputs, recomputed = incremental.rank_per_model(everything, SETTINGS, 1.5, previous,
                                                                 previous_inputs)
    assert recomputed.values.tolist() == [["p", "brief", "c"], ["p", "default", "c"]]
    assert_same_rankings(added, scratch)
    pd.testing.assert_frame_equal(added_inputs, inputs)
    # The other models' scores are the previous rows (only ranks may move); a's interval did not change.
    kept = previous[previous["model"] != "c"].merge(added, on=incremental.KEY_COLUMNS, suffixes=("_old", ""))
    assert (kept["score_old"] == kept["score"]).all() and (kept["ci_low_old"] == kept["ci_low"]).all()


def test_changed_inputs_are_scored_afresh():
    models = ["ref", "a", "b", "c"]
    everything = comparisons(models)
    previous, previous_inputs, _ = incremental.rank_per_model(everything, SETTINGS, 1.5)
    # Nothing changed: nothing is scored.
    _, _, recomputed = incremental.rank_per_model(everything, SETTINGS, 1.5, previous, previous_inputs)
    assert recomputed.empty
    # One model's rewards changed (a rescored response): that model only.
    changed = everything.copy()
    changed.loc[(changed["model"] == "b") & (changed["prompt_id"] == "007"), "reward_diff"] += 0.5
    table, _, recomputed = incremental.rank_per_model(changed, SETTINGS, 1.5, previous, previous_inputs)
    assert set(recomputed["model"]) == {"b"}
    assert_same_rankings(table, incremental.rank_per_model(changed, SETTINGS, 1.5)[0])
    # A new calibration (usl_soft's temperature) or other bootstrap settings: every model.
    _, _, recomputed = incremental.rank_per_model(everything, SETTINGS, 2.0, previous, previous_inputs)
    assert set(recomputed["model"]) == set(models)
    other = ranking.BootstrapSettings(usl_rounds=100, bt_rounds=50, seed=3)
    _, _, recomputed = incremental.rank_per_model(everything, other, 1.5, previous, previous_inputs)
    assert set(recomputed["model"]) == set(models)
    # A cache that lost rows of a model (a hand-edited table) is not trusted for that model.
    damaged = previous.drop(previous[(previous["model"] == "a") & (previous["scenario"] == "s2")].index)
    table, _, recomputed = incremental.rank_per_model(everything, SETTINGS, 1.5, damaged, previous_inputs)
    assert set(recomputed["model"]) == {"a"}
    assert_same_rankings(table, previous)


def test_a_removed_model_moves_the_others_ranks_not_their_scores():
    everything = comparisons(["ref", "a", "b", "c"])
    previous, previous_inputs, _ = incremental.rank_per_model(everything, SETTINGS, 1.5)
    fewer = everything[everything["model"] != "b"]
    table, inputs, recomputed = incremental.rank_per_model(fewer, SETTINGS, 1.5, previous, previous_inputs)
    assert recomputed.empty and "b" not in set(table["model"]) and "b" not in set(inputs["model"])
    assert_same_rankings(table, incremental.rank_per_model(fewer, SETTINGS, 1.5)[0])


@pytest.fixture
def one_model_short(usl_env, shared_data_dir):
    """The leaderboards built without vicuna-13b, then its responses and rewards arrive."""
    warehouse = usl_env["warehouse"]
    responses = write_upstream(warehouse, shared_data_dir)
    rewards = warehouse.read_table("scoring.response_rewards")
    new = ("alpaca_eval", "vicuna-13b")
    warehouse.replace_table("responses.responses", responses[(responses["pool"] != new[0])
                                                             | (responses["model"] != new[1])])
    assert dg.materialize([*GROUP_ASSETS, *GROUP_CHECKS], resources=usl_env, run_config=FAST).success
    warehouse.replace_table("responses.responses", responses)
    warehouse.replace_table("scoring.response_rewards", rewards)
    return usl_env, new


def test_the_rebuild_after_a_model_scores_only_that_model(one_model_short):
    env, (pool, model) = one_model_short
    warehouse = env["warehouse"]
    from usl_assets.definitions import defs

    job = defs.resolve_job_def("leaderboards_after_model_job")
    selected = {n.name for n in job.graph.node_defs}
    assert "rankings" in selected and "published_warehouse" in selected
    assert not {"bradley_terry_ratings", "pairwise_comparisons"} & selected
    after_model = [a.key for a in GROUP_ASSETS if a.key.to_user_string() in selected]
    config = {"ops": {"rankings": FAST["ops"]["rankings"]}}
    result = dg.materialize([*GROUP_ASSETS, *GROUP_CHECKS], selection=after_model, resources=env, run_config=config)
    assert result.success
    metadata = result.asset_materializations_for_node("rankings")[0].metadata
    assert metadata["models_scored_afresh"].value == 1
    assert metadata["bradley_terry_missing"].value == f"{pool}/{model}"
    table = warehouse.read_table("leaderboard.rankings")
    ours = table[(table["pool"] == pool) & (table["model"] == model)]
    assert set(ours["method"]) == set(ranking.PER_MODEL_METHODS)  # Bradley–Terry waits for leaderboards_job
    # The same rows as the full job gives from scratch (the per-model methods; BT now includes the model).
    warehouse.replace_table("leaderboard.ranking_inputs", warehouse.read_table("leaderboard.ranking_inputs").iloc[0:0])
    full = dg.materialize([*GROUP_ASSETS, *GROUP_CHECKS], resources=env, run_config=FAST)
    assert full.success
    assert full.asset_materializations_for_node("rankings")[0].metadata["bradley_terry_missing"].value == "none"
    rebuilt = warehouse.read_table("leaderboard.rankings")
    assert model in set(rebuilt[(rebuilt["pool"] == pool) & (rebuilt["method"] == "bradley_terry")]["model"])
    per_model = rebuilt["method"].isin(ranking.PER_MODEL_METHODS)
    assert_same_rankings(table[table["method"].isin(ranking.PER_MODEL_METHODS)], rebuilt[per_model])
    assert leaderboard_assets.leaderboards_after_new_model.job_name == "leaderboards_after_model_job"

import json
import shutil
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from usl_assets.preferences import assets as preference_assets
from usl_assets.preferences import tagger, tagging_assets
from usl_assets.preferences.criteria import criteria_texts, load_scenarios
from usl_assets.resources import DataDir, UslHome, Warehouse
from usl_assets.settings import UslConfigError

# A stratified subset and 64 tokens keep the tagger's training well under a minute on a shared 2-core CPU.
SMALL_TAGGER = {"max_length": 64, "train_per_scenario": 5}
PAIRS_PER_SOURCE = 20


# ------------------------------------------------------------------------------ helpers shared with test_analysis
def share_embedding_cache(usl_env: dict, tmp_path_factory) -> None:
    """Point this test's embedding cache at one folder for the whole session: each text is encoded once."""
    shared = tmp_path_factory.getbasetemp() / "minilm_cache"
    shared.mkdir(exist_ok=True)
    cache = Path(usl_env["usl_home"].path).joinpath(*tagger.EMBEDDING_CACHE_DIR)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.symlink_to(shared, target_is_directory=True)


def seed_validated_preferences(usl_env: dict, tmp_path_factory) -> None:
    """The real upstream assets materialized once per session, then cut to PAIRS_PER_SOURCE pairs per source
    (chosen by a hash of idx, so several scenarios appear); copied into this test's warehouse."""
    built = tmp_path_factory.getbasetemp() / "validated_slice.duckdb"
    if not built.exists():
        home = tmp_path_factory.mktemp("upstream_home")
        resources = {"data_dir": usl_env["data_dir"], "usl_home": UslHome(path=str(home)),
                     "warehouse": Warehouse(path=str(home / "warehouse.duckdb"))}
        assert dg.materialize(preference_assets.defs.assets, resources=resources).success
        with resources["warehouse"].connect() as conn:
            conn.execute(
                "CREATE OR REPLACE TABLE validated.preferences AS SELECT * FROM validated.preferences "
                "QUALIFY row_number() OVER (PARTITION BY source ORDER BY md5(idx)) <= ?", [PAIRS_PER_SOURCE])
        shutil.copyfile(home / "warehouse.duckdb", built)
    shutil.copyfile(built, usl_env["warehouse"].database_path())


def tagger_run_config(**overrides) -> dict:
    return {"ops": {"scenario_tagger": {"config": SMALL_TAGGER | overrides}}}


def check_results(result: dg.ExecuteInProcessResult) -> dict[str, bool]:
    return {evaluation.check_name: evaluation.passed for evaluation in result.get_asset_check_evaluations()}


def metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    [event] = result.asset_materializations_for_node(asset)
    return {name: value.value for name, value in event.metadata.items()}


# ------------------------------------------------------------------------------ plain functions
def test_queries_outside_the_groups_become_others_and_bad_ones_are_set_aside(shared_data_dir, tmp_path):
    scenarios = load_scenarios(shared_data_dir)
    queries, rejected = tagger.load_scenario_queries(shared_data_dir, scenarios)
    assert len(queries) == 2383 + 623 and rejected.empty
    assert queries["scenario_group"].notna().all()
    relabelled = queries[queries["category"] != queries["scenario"]]
    assert set(relabelled["category"]) == {"default", "peer_review", "rejecting"}
    assert (relabelled["scenario"] == "others").all()

    folder = tmp_path / "preferences"
    folder.mkdir()
    lines = [{"category": "code_generation", "instruction": "Write a Python function.", "input": ""},
             {"category": "not_a_scenario", "instruction": "Hello", "input": ""},
             {"category": "chitchat", "instruction": "", "input": None},
             {"category": None, "instruction": "Hi", "input": ""}]
    for relative in tagger.QUERY_FILES.values():
        (tmp_path / relative).write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    queries, rejected = tagger.load_scenario_queries(tmp_path, scenarios)
    assert queries["scenario"].tolist() == ["code_generation", "code_generation"]
    assert sorted(rejected["reason"].unique()) == ["category is not an Auto-J scenario",
                                                   "empty instruction and input", "no category"]


def test_stratified_subset_is_seeded_and_keeps_every_test_query(shared_data_dir):
    queries, _ = tagger.load_scenario_queries(shared_data_dir, load_scenarios(shared_data_dir))
    subset = tagger.stratified_subset(queries, 3, seed=1)
    train = subset[subset["split"] == "train"]
    assert train.groupby("scenario").size().max() == 3
    assert (subset["split"] == "test").sum() == 623
    assert subset.equals(tagger.stratified_subset(queries, 3, seed=1))


def test_winner_carries_the_criteria_and_a_tie_both():
    assert tagger.winner_criteria("model_a", ["x"]) == (["x"], [])
    assert tagger.winner_criteria("model_b", ["x"]) == ([], ["x"])
    assert tagger.winner_criteria("tie", ["x"]) == (["x"], ["x"])


def test_load_tagger_without_a_trained_one_says_what_to_do(tmp_path):
    with pytest.raises(UslConfigError, match="materialize the asset scenario_tagger"):
        tagger.load_tagger(tmp_path)


# ------------------------------------------------------------------------------ assets
def test_scenario_tagger_trains_reports_accuracy_and_predicts(usl_env, tmp_path_factory):
    share_embedding_cache(usl_env, tmp_path_factory)
    result = dg.materialize([tagging_assets.scenario_tagger, tagging_assets.scenario_tagger_accuracy_floor],
                            resources=usl_env, run_config=tagger_run_config(), raise_on_error=False)
    found = metadata(result, "scenario_tagger")
    assert found["n_test"] == 623 and found["n_train"] <= 57 * 5
    # 57 trainable classes: chance is under 0.02 (scenario) and about 0.2 (group)
    assert 0.15 < found["scenario_accuracy"] <= found["group_accuracy"] <= 1
    assert "Summarization" in found["accuracy_by_group"]
    floor_met = tagging_assets.accuracy_meets_floor(found)
    assert check_results(result) == {"scenario_tagger_accuracy_floor": floor_met}

    loaded = tagger.load_tagger(Path(usl_env["usl_home"].path))
    predicted = loaded.predict(["Write a Python function that reverses a linked list.",
                                "Translate this sentence into French: I love cheese.", ""])
    assert list(predicted.columns) == ["scenario", "scenario_group", "confidence"]
    assert predicted["scenario_group"].tolist()[:2] == ["Code", "NLP Tasks"]
    assert predicted["confidence"].between(0, 1).all()


def test_a_tagger_below_the_floor_blocks_the_tagging(usl_env, tmp_path_factory):
    share_embedding_cache(usl_env, tmp_path_factory)
    seed_validated_preferences(usl_env, tmp_path_factory)
    result = dg.materialize(
        [tagging_assets.scenario_tagger, tagging_assets.scenario_tagger_accuracy_floor,
         tagging_assets.tagged_preferences],
        resources=usl_env, run_config=tagger_run_config(train_per_scenario=1, regularization=0.01),
        raise_on_error=False)
    assert check_results(result) == {"scenario_tagger_accuracy_floor": False}
    assert not result.asset_materializations_for_node("tagged_preferences")
    assert not usl_env["warehouse"].table_exists(tagging_assets.TAGGED_TABLE)


def test_tagged_preferences_keep_human_scenarios_tag_the_rest_and_fill_criteria(usl_env, tmp_path_factory,
                                                                              shared_data_dir):
    share_embedding_cache(usl_env, tmp_path_factory)
    seed_validated_preferences(usl_env, tmp_path_factory)
    result = dg.materialize(
        [tagging_assets.scenario_tagger, tagging_assets.tagged_preferences,
         tagging_assets.tagged_preferences_complete],
        resources=usl_env, run_config=tagger_run_config())
    assert check_results(result) == {"tagged_preferences_complete": True}
    warehouse: Warehouse = usl_env["warehouse"]
    validated = warehouse.read_table("validated.preferences").set_index("idx")
    tagged = warehouse.read_table(tagging_assets.TAGGED_TABLE).set_index("idx")
    assert metadata(result, "tagged_preferences")["dagster/row_count"] == len(validated) == len(tagged)
    assert set(tagged.columns) == set(validated.columns) | {"scenario_group", "scenario_origin", "tagger_confidence"}
    assert tagged["scenario"].notna().all() and tagged["scenario_group"].notna().all()

    autoj = tagged[tagged["source"] == "autoj"]
    assert (autoj["scenario_origin"] == "human").all() and autoj["tagger_confidence"].isna().all()
    assert (autoj["scenario"] == validated.loc[autoj.index, "scenario"]).all()
    others = tagged[tagged["source"] != "autoj"]
    assert len(others) and (others["scenario_origin"] == "tagger").all()
    assert others["tagger_confidence"].between(0, 1).all()
    groups = load_scenarios(shared_data_dir).groups
    assert all(row.scenario in groups[row.scenario_group] for row in tagged.itertuples())

    for idx, row in tagged.iterrows():
        before = validated.loc[idx]
        if len(before["a_criteria"]) or len(before["b_criteria"]):
            assert list(row["a_criteria"]) == list(before["a_criteria"])
            continue
        expected = criteria_texts(shared_data_dir, row["scenario"])
        assert list(row["a_criteria"]) == (expected if row["human_winner"] in ("model_a", "tie") else [])
        assert list(row["b_criteria"]) == (expected if row["human_winner"] in ("model_b", "tie") else [])
    assert np.isfinite(others["tagger_confidence"]).all()
    assert isinstance(tagged["a_criteria"].iloc[0], (list, np.ndarray, pd.Series))

"""The dbt-like factory: dependencies parsed from the SQL, tables replaced on every run, lineage and checks."""

import dagster as dg
import pandas as pd
import pytest

from usl_assets.leaderboards import sql_files, sql_models
from usl_assets.resources import Warehouse

SCORES_SQL = """-- Scores per model.
-- unique: model
-- not_null: model
WITH latest AS (SELECT model, reward FROM scoring.response_rewards WHERE profile = 'default')
SELECT latest.model, avg(latest.reward) AS mean_reward, max(r.length_chars) AS longest
FROM latest JOIN responses.responses AS r ON r.model = latest.model
GROUP BY latest.model
"""
TOP_SQL = "SELECT model FROM leaderboard.scores WHERE mean_reward > 0"


@pytest.fixture
def sql_dir(tmp_path):
    folder = tmp_path / "sql"
    folder.mkdir()
    (folder / "scores.sql").write_text(SCORES_SQL)
    (folder / "top_models.sql").write_text(TOP_SQL)
    return folder


def test_dependencies_come_from_the_sql(sql_dir):
    models = {model.name: model for model in sql_files.load_models(sql_dir)}
    assert models["scores"].reads == ("responses.responses", "scoring.response_rewards")  # the CTE is no table
    assert models["top_models"].reads == ("leaderboard.scores",)
    assert models["scores"].unique == ("model",) and models["scores"].description == "Scores per model."
    assets, checks = sql_models.build_sql_models(sql_dir)
    graph = dg.Definitions(assets=assets, resources={"warehouse": Warehouse()}).resolve_asset_graph()
    assert graph.get(dg.AssetKey("scores")).parent_keys == {dg.AssetKey("model_responses"),
                                                            dg.AssetKey("response_rewards")}
    assert graph.get(dg.AssetKey("top_models")).parent_keys == {dg.AssetKey("scores")}
    assert [check.check_keys for check in checks] == [{dg.AssetCheckKey(dg.AssetKey("scores"), "scores_contract")}]


def test_the_project_models_read_only_known_tables():
    models = {model.name: model for model in sql_files.load_models()}
    assert {"response_scores", "reference_comparisons", "pairwise_comparisons", "model_lengths"} <= set(models)
    assert models["pairwise_comparisons"].reads == ("leaderboard.response_scores",)


def test_a_folder_without_sql_models_is_an_error_not_zero_assets(tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(FileNotFoundError, match="no SQL model"):
        sql_models.build_sql_models(tmp_path)
    with pytest.raises(FileNotFoundError, match="no SQL model"):
        sql_files.load_models(tmp_path / "missing")


def test_a_table_no_asset_writes_is_an_error(tmp_path):
    (tmp_path / "bad.sql").write_text("SELECT x FROM somewhere.unknown")
    with pytest.raises(ValueError, match="reads somewhere.unknown, which no asset writes"):
        sql_files.load_models(tmp_path)


def test_a_model_replaces_its_table_and_reports_lineage(sql_dir, usl_env):
    warehouse: Warehouse = usl_env["warehouse"]
    rewards = pd.DataFrame({"model": ["a", "a", "b"], "reward": [1.0, 3.0, -1.0], "profile": "default"})
    warehouse.replace_table("scoring.response_rewards", rewards)
    warehouse.replace_table("responses.responses", pd.DataFrame({"model": ["a", "b"], "length_chars": [10, 20]}))
    assets, checks = sql_models.build_sql_models(sql_dir)

    result = dg.materialize([*assets, *checks], resources=usl_env)
    assert result.success
    first = warehouse.read_table("leaderboard.top_models")
    assert first["model"].tolist() == ["a"]

    warehouse.replace_table("scoring.response_rewards", rewards.assign(reward=[-1.0, -1.0, 5.0]))
    assert dg.materialize([*assets, *checks], resources=usl_env).success
    assert warehouse.read_table("leaderboard.top_models")["model"].tolist() == ["b"]  # no stale rows kept

    metadata = result.asset_materializations_for_node("scores")[0].metadata
    lineage = metadata["dagster/column_lineage"].value.deps_by_column
    assert {(d.asset_key.to_user_string(), d.column_name) for d in lineage["longest"]} == {
        ("model_responses", "length_chars")}
    assert {(d.asset_key.to_user_string(), d.column_name) for d in lineage["mean_reward"]} == {
        ("response_rewards", "reward")}
    assert metadata["dagster/row_count"].value == 2
    checks_run = {e.asset_check_key.name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks_run == {"scores_contract": True}


def test_a_broken_contract_fails_its_check(sql_dir, usl_env):
    warehouse: Warehouse = usl_env["warehouse"]
    one_row_per_length = SCORES_SQL.replace("GROUP BY latest.model", "GROUP BY latest.model, r.length_chars")
    (sql_dir / "scores.sql").write_text(one_row_per_length)
    warehouse.replace_table("scoring.response_rewards", pd.DataFrame({"model": ["a"], "reward": [1.0],
                                                                      "profile": "default"}))
    warehouse.replace_table("responses.responses", pd.DataFrame({"model": ["a", "a"], "length_chars": [10, 20]}))
    assets, checks = sql_models.build_sql_models(sql_dir)
    result = dg.materialize([*assets, *checks], resources=usl_env, raise_on_error=False)
    evaluation = [e for e in result.get_asset_check_evaluations() if e.asset_check_key.name == "scores_contract"][0]
    assert not evaluation.passed and evaluation.metadata["duplicate_keys"].value == 1


def test_a_missing_upstream_table_fails_with_a_clear_message(sql_dir, usl_env):
    assets, _ = sql_models.build_sql_models(sql_dir)
    result = dg.materialize(assets, resources=usl_env, raise_on_error=False, selection="scores")
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.error
    assert "not in the warehouse yet" in failure.message

"""Partial models (issue 10, case 3): a file whose prompts miss the scored sample is scored as zero rewards (no
crash), and a model below the documented minimum coverage is listed with its reason, not ranked."""

import subprocess
import sys
from pathlib import Path

import dagster as dg
import duckdb
import pandas as pd
import pytest

from usl_assets.leaderboards.ranking import METHODS
from usl_assets.scoring.assets import criteria_profiles, response_rewards
from usl_assets_tests.conftest import REPO_ROOT
from usl_assets_tests.test_scoring_support import (  # noqa: F401  (fixtures)
    alpaca_responses, crm_models, install_crm, materialize_default_checkpoint, prompt_sample, write_upstream)

MODELS = ["gpt4_1106_preview", "claude-2.1", "vicuna-13b"]


@pytest.fixture
def partial_env(usl_env, shared_data_dir, crm_models):
    """Three full models on 8 prompts (every other one sampled), `partial` answering 2 unsampled prompts and
    `sparse` answering 1 sampled prompt of 4."""
    install_crm(crm_models, usl_env["usl_home"].root(), "cross")
    responses = alpaca_responses(shared_data_dir, MODELS + ["gemma-7b-it", "Qwen1.5-72B-Chat"], 8)
    partial, sparse = responses["model"] == "gemma-7b-it", responses["model"] == "Qwen1.5-72B-Chat"
    responses.loc[partial, "model"], responses.loc[sparse, "model"] = "partial", "sparse"
    keep = (~partial | responses["prompt_id"].isin(["0001", "0003"])) & (~sparse | (responses["prompt_id"] == "0002"))
    responses = responses[keep].reset_index(drop=True)
    write_upstream(usl_env["warehouse"], responses, prompt_sample(responses, every=2))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("models", [f"alpaca_eval:{m}" for m in MODELS + ["partial", "sparse"]])
    assert dg.materialize([criteria_profiles], resources=usl_env, instance=instance).success
    materialize_default_checkpoint(usl_env, instance, "cross")
    return usl_env, instance


def test_a_model_whose_prompts_miss_the_sample_is_scored_as_nothing(partial_env):
    env, instance = partial_env
    result = dg.materialize([response_rewards], resources=env, instance=instance, partition_key="alpaca_eval:partial")
    assert result.success
    metadata = result.asset_materializations_for_node("response_rewards")[0].metadata
    assert metadata["responses"].value == 0 and metadata["rewards_written"].value == 0
    assert all(check.passed for check in result.get_asset_check_evaluations())


def test_models_below_the_minimum_coverage_are_listed_with_the_reason_not_ranked(partial_env, capsys, monkeypatch):
    from usl_assets import cli
    from usl_assets.leaderboards.assets import bradley_terry_ratings, rankings, reference_models, sql_assets

    env, instance = partial_env
    for model in MODELS + ["partial", "sparse"]:
        assert dg.materialize([response_rewards], resources=env, instance=instance,
                              partition_key=f"alpaca_eval:{model}").success
    fast = {"ops": {name: {"config": {"usl_bootstrap_rounds": 50, "bt_bootstrap_rounds": 5}}
                    for name in ("rankings", "bradley_terry_ratings")}}
    warehouse = env["warehouse"]
    checkpoints = warehouse.query("SELECT DISTINCT checkpoint_id FROM scoring.response_rewards")["checkpoint_id"]
    warehouse.replace_table("crm.calibration", pd.DataFrame({"checkpoint_id": checkpoints, "temperature": 1.0}))
    assert dg.materialize([*sql_assets, reference_models, bradley_terry_ratings, rankings], resources=env,
                          run_config=fast).success
    coverage = warehouse.query("SELECT model, scored_prompts, sampled_prompts, coverage FROM "
                               "leaderboard.model_coverage ORDER BY model").values.tolist()
    assert coverage == [["claude-2.1", 4, 4, 1.0], ["gpt4_1106_preview", 4, 4, 1.0], ["partial", 0, 4, 0.0],
                        ["sparse", 1, 4, 0.25], ["vicuna-13b", 4, 4, 1.0]]
    ranked = warehouse.query("SELECT DISTINCT method, model FROM leaderboard.rankings ORDER BY ALL")
    assert sorted(set(ranked["model"])) == sorted(MODELS) and set(ranked["method"]) == set(METHODS)
    unranked = warehouse.read_table("leaderboard.unranked_models")
    assert unranked[["model", "scored_prompts"]].values.tolist() == [["partial", 0], ["sparse", 1]]
    assert unranked["reason"].tolist()[1] == "rewards for 1 of the pool's 4 scored prompts (25%; ranking needs 90%)"

    warehouse.publish()
    assert cli.main(["leaderboard", "--pool", "alpaca_eval"]) == 0
    out = capsys.readouterr().out
    assert "not ranked" in out and "partial: rewards for 0 of the pool's 4 scored prompts" in out
    assert "sparse: rewards for 1 of the pool's 4 scored prompts (25%" in out
    assert all(model in out for model in MODELS)

    # Case 6 on the same warehouse: while another process holds the file Dagster writes (as a running
    # materialization does), `usl status` and `usl leaderboard --criteria` read the published copy.
    dagster_home = Path(env["usl_home"].path).parent / "dagster_home"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text((REPO_ROOT / "usl_assets" / "dagster.yaml").read_text())
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
                               "print('held', flush=True); time.sleep(600)", warehouse.path], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"held"
        with pytest.raises(duckdb.IOException):
            duckdb.connect(warehouse.path, read_only=True)  # the writer's file is busy
        assert cli.main(["status"]) == 0
        assert "leaderboard.unranked_models" in capsys.readouterr().out
        assert cli.main(["leaderboard", "--pool", "alpaca_eval", "--criteria", "Be concise.",
                         "--bootstrap-rounds", "20"]) == 0
        out = capsys.readouterr().out
        assert all(model in out for model in MODELS) and "sparse: rewards for 1 of" in out
    finally:
        holder.kill()
        holder.wait()

import gzip
import json
from pathlib import Path

import dagster as dg
import pytest

from usl_assets import cli
from usl_assets.responses import pools, sampling, tables as response_tables
from usl_assets.responses.assets import (
    every_prompt_answered_or_quarantined,
    model_responses,
    pool_prompts,
    prompt_sample,
    prompts_unique_and_tagged,
    responses_unique_per_prompt_and_model,
    sample_covers_every_scenario,
)
from usl_assets.partitions import model_partitions, register_public_models
from usl_assets.resources import Warehouse
from usl_assets_tests.taggers import TfidfScenarioTagger

RESPONSE_CHECKS = [responses_unique_per_prompt_and_model, every_prompt_answered_or_quarantined]


@pytest.fixture(scope="module")
def tagger(shared_data_dir):
    return TfidfScenarioTagger(shared_data_dir)


@pytest.fixture
def env(usl_env, tagger, monkeypatch) -> dict:
    """usl_env whose scenario tagger is the small TF-IDF one, with responses.prompts materialized."""
    monkeypatch.setattr(pools, "load_scenario_tagger", lambda usl_home_root: tagger)
    result = dg.materialize(
        [pool_prompts, prompt_sample, prompts_unique_and_tagged, sample_covers_every_scenario], resources=usl_env,
        run_config={"ops": {"prompt_sample": {"config": {"per_scenario": 2, "full_pool": False, "seed": 3}}}},
    )
    assert result.success
    assert len(result.get_asset_check_evaluations()) == 2
    assert all(check.passed for check in result.get_asset_check_evaluations())
    return usl_env


def alpaca_records(data_root: Path, model: str) -> list[dict]:
    return json.loads(gzip.open(pools.public_model_files(data_root, "alpaca_eval")[model]).read())


def test_prompts_and_sample_tables_follow_the_contract(env):
    warehouse: Warehouse = env["warehouse"]
    prompts = warehouse.read_table("responses.prompts")
    assert {"pool", "prompt_id", "prompt", "category", "scenario", "scenario_group"} <= set(prompts.columns)
    assert prompts.groupby("pool").size().to_dict() == {"alpaca_eval": 805, "mt_bench": 80}
    sample = warehouse.read_table("responses.prompt_sample")
    assert list(sample.columns) == ["pool", "prompt_id", "scenario", "sampled", "sample_rule"]
    assert sample[sample["sampled"]].groupby(["pool", "scenario"]).size().max() == 2
    assert sample["sample_rule"].iloc[0] == "stratified: up to 2 prompts per (pool, scenario), seed 3"
    assert sampling.sample_gaps(warehouse) == {"prompts_not_listed": 0, "listed_twice": 0, "strata_without_sample": 0}
    warehouse.replace_table("responses.prompt_sample", sample[sample["prompt_id"] != sample["prompt_id"].iloc[0]])
    assert sampling.sample_gaps(warehouse)["prompts_not_listed"] == 1


def test_model_partitions_load_in_one_run_and_replace_only_their_rows(env, shared_data_dir):
    instance = dg.DagsterInstance.ephemeral()
    keys = register_public_models(instance, shared_data_dir)
    assert len(keys) == 59 and set(instance.get_dynamic_partitions("models")) == set(keys)
    assert register_public_models(instance, shared_data_dir) == keys  # idempotent
    # A single run over a range of partitions (BackfillPolicy.single_run): gemma-2b-it and gemma-7b-it.
    result = dg.materialize(
        [model_responses, *RESPONSE_CHECKS], resources=env, instance=instance,
        tags={"dagster/asset_partition_range_start": "alpaca_eval:gemma-2b-it",
              "dagster/asset_partition_range_end": "alpaca_eval:gemma-7b-it"},
    )
    assert result.success and all(c.passed for c in result.get_asset_check_evaluations())
    warehouse: Warehouse = env["warehouse"]
    counts = warehouse.query("SELECT model, count(*) AS n FROM responses.responses GROUP BY model ORDER BY model")
    assert counts.values.tolist() == [["gemma-2b-it", 783], ["gemma-7b-it", 805]]
    assert warehouse.query("SELECT count(*) AS n FROM quality.response_quarantine")["n"].item() == 22
    # Each partition's materialization carries that partition's own figures, not the run's totals.
    figures = {m.partition: {k: v.value for k, v in m.metadata.items()}
               for m in result.asset_materializations_for_node("model_responses")}
    assert {key: (f["dagster/row_count"], f["rows_quarantined"]) for key, f in figures.items()} == {
        "alpaca_eval:gemma-2b-it": (783, 22), "alpaca_eval:gemma-7b-it": (805, 0)}
    assert "gemma-2b-it" in figures["alpaca_eval:gemma-2b-it"]["quarantine"]
    assert figures["alpaca_eval:gemma-7b-it"]["quarantine"] == "nothing quarantined"

    again = dg.materialize([model_responses, *RESPONSE_CHECKS], resources=env, instance=instance,
                           partition_key="mt_bench:llama-13b")
    assert again.success and all(c.passed for c in again.get_asset_check_evaluations())
    assert warehouse.query("SELECT count(*) AS n FROM responses.responses")["n"].item() == 783 + 805 + 79
    dg.materialize([model_responses], resources=env, instance=instance, partition_key="mt_bench:llama-13b")
    assert warehouse.query("SELECT count(*) AS n FROM responses.responses")["n"].item() == 783 + 805 + 79
    row = warehouse.query("SELECT * FROM responses.responses WHERE model = 'llama-13b' AND prompt_id = '81'")
    assert row["scenario"].notna().all() and len(row["conversation"].item()) == 4
    # The checks' queries see a lost quarantine row and a doubled response.
    with warehouse.connect() as conn:
        conn.execute("DELETE FROM quality.response_quarantine WHERE model = 'gemma-2b-it' AND prompt_id = "
                     "(SELECT min(prompt_id) FROM quality.response_quarantine WHERE model = 'gemma-2b-it')")
        conn.execute("INSERT INTO responses.responses SELECT * FROM responses.responses WHERE model = 'llama-13b' "
                     "AND prompt_id = '81'")
    assert response_tables.unaccounted_prompts(warehouse).values.tolist() == [["alpaca_eval", "gemma-2b-it", 1]]
    assert response_tables.duplicate_responses(warehouse).values.tolist() == [["mt_bench", "81", "llama-13b", 2]]


def test_a_file_that_does_not_parse_fails_the_partition_before_anything_is_written(env):
    instance = dg.DagsterInstance.ephemeral()
    home = Path(env["usl_home"].path)
    accepted = pools.accepted_dir(home, "alpaca_eval")
    accepted.mkdir(parents=True)
    (accepted / "half-written.json").write_text('[{"instruction": "x", "output": ')
    instance.add_dynamic_partitions("models", ["alpaca_eval:half-written", "alpaca_eval:gemma-7b-it"])
    result = dg.materialize(
        [model_responses], resources=env, instance=instance, raise_on_error=False,
        tags={"dagster/asset_partition_range_start": "alpaca_eval:half-written",
              "dagster/asset_partition_range_end": "alpaca_eval:gemma-7b-it"},
    )
    assert not result.success
    assert not env["warehouse"].table_exists("responses.responses")


def test_usl_add_model_loads_one_partition_and_bad_input_gets_one_line(env, shared_data_dir, tmp_path,
                                                                        monkeypatch, capsys):
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    answers = [json.loads(line) for line in
               pools.public_model_files(shared_data_dir, "mt_bench")["koala-13b"].read_text().splitlines()]
    new_file = tmp_path / "koala-13b-rerun.jsonl"
    new_file.write_text("\n".join(json.dumps(a) for a in answers[:30]) + "\n")

    assert cli.main(["add-model", "--pool", "mt_bench", str(new_file), "--responses-only"]) == 0

    captured = capsys.readouterr()
    out = captured.out
    assert "added partition mt_bench:koala-13b-rerun" in out and "30 responses loaded" in out
    assert " - DEBUG - " not in out + captured.err and " - INFO - " not in out + captured.err  # progress lines only
    with dg.DagsterInstance.get() as instance:
        assert instance.get_dynamic_partitions("models") == ["mt_bench:koala-13b-rerun"]
        assert instance.get_latest_materialization_event(model_responses.key) is not None
    assert new_file.exists()  # the user's file is copied, not moved

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question_id": 81,\n')
    assert cli.main(["add-model", "--pool", "mt_bench", str(bad)]) == 2
    assert cli.main(["add-model", "--pool", "arena", str(new_file)]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2
    assert "bad.jsonl was not added" in errors[0] and "line 1 is not valid JSON" in errors[0]
    assert errors[1] == ("usl: error: unknown pool 'arena': choose one of alpaca_eval, mt_bench (`usl add-pool` "
                         "registers your own)")


def test_the_partitions_definition_is_the_shared_models_one():
    assert model_partitions.name == "models"
    assert model_responses.partitions_def == model_partitions
    # one run over a range of partitions, not one run per partition
    assert model_responses.backfill_policy == dg.BackfillPolicy.single_run()


def test_a_file_changed_between_its_check_and_its_write_rolls_the_whole_run_back(env, shared_data_dir, monkeypatch):
    """model_responses checks every file, then reads each again as it writes it (one model in memory at a time):
    a file another process rewrote in between fails the run, and the models already written in it roll back."""
    instance = dg.DagsterInstance.ephemeral()
    accepted = pools.accepted_dir(Path(env["usl_home"].path), "alpaca_eval")
    accepted.mkdir(parents=True)
    records = alpaca_records(shared_data_dir, "gemma-7b-it")
    for model in ("first-model", "second-model"):
        (accepted / f"{model}.json").write_text(json.dumps(records))
    loads = []
    real_load = pools.load_model_responses

    def load_then_rewrite(pool, model, path, prompts):
        loads.append(model)
        if len(loads) == 3:  # the write has begun (first-model read again): another process rewrites second-model
            (accepted / "second-model.json").write_text(json.dumps(records[:-1]))
        return real_load(pool, model, path, prompts)

    monkeypatch.setattr(pools, "load_model_responses", load_then_rewrite)
    instance.add_dynamic_partitions("models", ["alpaca_eval:first-model", "alpaca_eval:second-model"])
    run = dict(resources=env, instance=instance, raise_on_error=False,
               tags={"dagster/asset_partition_range_start": "alpaca_eval:first-model",
                     "dagster/asset_partition_range_end": "alpaca_eval:second-model"})
    result = dg.materialize([model_responses], **run)
    assert not result.success and loads == ["first-model", "second-model", "first-model", "second-model"]
    failure = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"][0]
    assert "second-model.json changed while the run was writing it" in str(failure.event_specific_data.error)
    warehouse: Warehouse = env["warehouse"]
    assert not warehouse.table_exists("responses.responses") or warehouse.query(
        "SELECT count(*) AS n FROM responses.responses")["n"].item() == 0
    loads.clear()
    assert dg.materialize([model_responses], **run).success  # unchanged since its check: written
    assert warehouse.query("SELECT model, count(*) AS n FROM responses.responses GROUP BY model ORDER BY model"
                           ).values.tolist() == [["first-model", 805], ["second-model", 804]]

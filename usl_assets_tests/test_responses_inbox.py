"""The inbox (responses/sensors.py): the sensor only lists files and asks for one intake run per file; the intake
run validates, stores or quarantines; the accepted sensor adds the partition and asks for one run of it only."""

import gzip
import json
import os
from pathlib import Path

import dagster as dg
import pytest

from usl_assets.responses import inbox, pools, tables as response_tables
from usl_assets.responses.assets import (
    defs as responses_defs,
    every_prompt_answered_or_quarantined,
    model_responses,
    pool_prompts,
    responses_unique_per_prompt_and_model,
)
from usl_assets.responses.sensors import (
    ACCEPTED_TAG,
    REBUILD_LEADERBOARDS_TAG,
    defs as sensor_defs,
    inbox_intake_job,
    intake_run_request,
    model_accepted_sensor,
    model_inbox_sensor,
)
from usl_assets_tests.test_responses_tagger import TfidfScenarioTagger


@pytest.fixture
def env(usl_env, shared_data_dir, monkeypatch) -> dict:
    tagger = TfidfScenarioTagger(shared_data_dir)
    monkeypatch.setattr(pools, "load_scenario_tagger", lambda usl_home_root: tagger)
    assert dg.materialize([pool_prompts], resources=usl_env).success
    return usl_env


def alpaca(data_root: Path, model: str) -> list[dict]:
    return json.loads(gzip.open(pools.public_model_files(data_root, "alpaca_eval")[model]).read())


def drop(home: Path, pool: str, name: str, content: str) -> Path:
    folder = home / "inbox" / pool
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(content)
    return folder / name


def tick(sensor, instance, env, cursor=None):
    definitions = dg.Definitions.merge(responses_defs, sensor_defs, dg.Definitions(resources=env))
    context = dg.build_sensor_context(instance=instance, definitions=definitions, resources=env, cursor=cursor)
    return sensor(context), context.cursor


def inbox_requests(home: Path) -> list[dg.RunRequest]:
    """The intake run requests of the files in the inbox now, as model_inbox_sensor asks for them."""
    return [intake_run_request(pool, path, inbox.file_signature(pool, path)) for pool, path in
            inbox.pending_files(home)]


def intake(request, instance, env) -> dg.ExecuteInProcessResult:
    result = inbox_intake_job.execute_in_process(run_config=request.run_config, instance=instance, resources=env,
                                                 tags=request.tags)
    assert result.success
    return result


def test_the_sensor_lists_the_inbox_and_asks_one_intake_run_per_file(env, monkeypatch):
    home = Path(env["usl_home"].path)
    instance = dg.DagsterInstance.ephemeral()
    good = drop(home, "alpaca_eval", "model_outputs.json", "[]")
    drop(home, "chatbot_arena", "gpt-5.json", "[]")
    drop(home, "mt_bench", "still-writing.jsonl.partial", "{")
    # The sensor never opens a file: validation is the intake run's job.
    monkeypatch.setattr(pools, "read_model_records", lambda *a: pytest.fail("the sensor read a file"))

    requests, cursor = tick(model_inbox_sensor, instance, env)

    assert sorted(r.run_config["ops"]["intake_inbox_file"]["config"]["file_name"] for r in requests) == [
        "gpt-5.json", "model_outputs.json"]
    assert all(r.job_name in (None, inbox_intake_job.name) for r in requests)
    assert good.exists() and not (home / "accepted").exists() and not (home / "inbox" / "quarantine").exists()
    again, _ = tick(model_inbox_sensor, instance, env, cursor)
    assert isinstance(again, dg.SkipReason) and "2 in the inbox with a run already" in again.skip_message
    # Without the cursor the same files give the same run keys, which Dagster runs once.
    fresh, _ = tick(model_inbox_sensor, instance, env)
    assert sorted(r.run_key for r in fresh) == sorted(r.run_key for r in requests)
    os.utime(good, ns=(0, 10**9))  # written again: a new run
    rewritten, _ = tick(model_inbox_sensor, instance, env, cursor)
    assert [r.tags["usl/inbox_file"] for r in rewritten] == ["alpaca_eval/model_outputs.json"]


def test_intake_accepts_quarantines_and_the_accepted_sensor_runs_only_the_new_partition(env, shared_data_dir):
    home = Path(env["usl_home"].path)
    instance = dg.DagsterInstance.ephemeral()
    records = [dict(r, generator="my-new-model") for r in alpaca(shared_data_dir, "vicuna-13b")[:40]]
    drop(home, "alpaca_eval", "model_outputs.json", json.dumps(records))
    drop(home, "alpaca_eval", "broken-model.json", '[{"instruction": "Hi", "output": "x"')
    drop(home, "chatbot_arena", "gpt-5.json", "[]")
    requests, cursor = tick(model_inbox_sensor, instance, env)
    outputs = {r.tags["usl/inbox_file"]: intake(r, instance, env).output_for_node("intake_inbox_file")
               for r in requests}

    assert outputs == {"alpaca_eval/model_outputs.json": "accepted", "alpaca_eval/broken-model.json": "quarantined",
                       "chatbot_arena/gpt-5.json": "quarantined"}
    quarantine = home / "inbox" / "quarantine"
    assert "not valid JSON" in (quarantine / "broken-model.json.reason.txt").read_text()
    assert "unknown pool 'chatbot_arena'" in (quarantine / "gpt-5.json.reason.txt").read_text()
    assert json.loads((home / "accepted" / "alpaca_eval" / "my-new-model.json").read_text()) == records
    assert inbox.pending_files(home) == []
    # The same file again before model_accepted_sensor added its partition: the first run's tag stands for it.
    drop(home, "alpaca_eval", "my-new-model.json", json.dumps(records))
    early = intake(inbox_requests(home)[0], instance, env)
    assert early.output_for_node("intake_inbox_file") == "same_file"
    assert ACCEPTED_TAG not in instance.get_run_by_id(early.run_id).tags

    result, accepted_cursor = tick(model_accepted_sensor, instance, env)
    assert [r.partition_keys for r in result.dynamic_partitions_requests] == [["alpaca_eval:my-new-model"]]
    assert [(r.partition_key, r.asset_selection, r.tags[REBUILD_LEADERBOARDS_TAG]) for r in result.run_requests] \
        == [("alpaca_eval:my-new-model", [model_responses.key], "true")]
    assert isinstance(tick(model_accepted_sensor, instance, env, accepted_cursor)[0], dg.SkipReason)
    instance.add_dynamic_partitions("models", ["alpaca_eval:my-new-model"])  # as the daemon does
    run = dg.materialize([model_responses, responses_unique_per_prompt_and_model,
                          every_prompt_answered_or_quarantined], resources=env, instance=instance,
                         partition_key=result.run_requests[0].partition_key)
    assert run.success and all(c.passed for c in run.get_asset_check_evaluations())
    assert response_tables.partition_summary(env["warehouse"], "alpaca_eval", "my-new-model")["quarantined"] == {
        "missing_response": 765}

    # The same file again: its intake run removes it, and no new partition or run follows. A different file for
    # the same model is quarantined: the inbox never replaces a model.
    drop(home, "alpaca_eval", "my-new-model.json", json.dumps(records))
    drop(home, "alpaca_eval", "model_outputs.json", json.dumps(records[:10]))
    second, _ = tick(model_inbox_sensor, instance, env, cursor)
    outputs = {r.tags["usl/inbox_file"]: intake(r, instance, env) for r in second}
    assert {f: r.output_for_node("intake_inbox_file") for f, r in outputs.items()} == {
        "alpaca_eval/my-new-model.json": "same_file", "alpaca_eval/model_outputs.json": "quarantined"}
    assert all(ACCEPTED_TAG not in instance.get_run_by_id(r.run_id).tags for r in outputs.values())
    assert isinstance(tick(model_accepted_sensor, instance, env, accepted_cursor)[0], dg.SkipReason)
    reason = (quarantine / "model_outputs.json.reason.txt").read_text()
    assert "exists already" in reason and "usl add-model --replace" in reason
    assert instance.get_dynamic_partitions("models") == ["alpaca_eval:my-new-model"]


def test_usable_rows_follow_the_partitions_rules(env, shared_data_dir, tmp_path):
    """The inbox counts usable rows with pools.py's rules: an answer over the response cap is not usable."""
    records = alpaca(shared_data_dir, "vicuna-13b")[:3]
    records[0] = dict(records[0], output="x" * (pools.MAX_RESPONSE_CHARS + 1))
    path = tmp_path / "capped-model.json"
    path.write_text(json.dumps(records))
    validated = inbox.validate_model_file("alpaca_eval", path, shared_data_dir)
    prompts = env["warehouse"].read_table(response_tables.PROMPTS_TABLE)
    loaded = pools.load_model_responses("alpaca_eval", "capped-model", path, prompts)
    assert validated.usable == len(loaded.responses) == 2

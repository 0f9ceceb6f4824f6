"""One new model, one leaderboards rebuild: the run-status sensor rebuilds them after an inbox model's run, never
after `usl add-model`'s run (the command rebuilds them itself, or was told not to)."""

import dagster as dg
from dagster._core.events import DagsterEventType

from usl_assets import cli
from usl_assets.jobs import PARTITIONS_JOB
from usl_assets.leaderboards.assets import leaderboards_after_new_model
from usl_assets.preferences.assets import raw_autoj_pairwise
from usl_assets.responses import pools
from usl_assets.responses.sensors import ADDED_MODEL_TAG, REBUILD_LEADERBOARDS_TAG
from usl_assets_tests.release_support import cli_env  # noqa: F401


def _success_event(instance, run_id):
    records = instance.get_records_for_run(run_id, of_type=DagsterEventType.RUN_SUCCESS).records
    return records[0].event_log_entry.dagster_event


def _evaluate(instance, run):
    context = dg.build_run_status_sensor_context(
        sensor_name="leaderboards_after_new_model", dagster_instance=instance, dagster_run=run,
        dagster_event=_success_event(instance, run.run_id))
    return leaderboards_after_new_model(context)


def test_an_inbox_models_run_requests_the_leaderboards_once_per_run(usl_env):
    with dg.instance_for_test() as instance:
        tags = {ADDED_MODEL_TAG: "alpaca_eval:my-model", REBUILD_LEADERBOARDS_TAG: "true"}
        result = dg.materialize([raw_autoj_pairwise], instance=instance, resources=usl_env, tags=tags)
        run = instance.get_run_by_id(result.run_id)
        request = _evaluate(instance, run)
    assert isinstance(request, dg.RunRequest)
    assert request.run_key == f"leaderboards-after:{run.run_id}"
    assert request.tags["usl/after_added_model"] == "alpaca_eval:my-model"


def test_usl_add_models_run_does_not_trigger_it(cli_env, shared_data_dir, tmp_path):
    """With a daemon running, the sensor sees `usl add-model`'s partition run succeed: it must not rebuild the
    leaderboards a second time (nor at all after --no-leaderboards)."""
    source = pools.public_model_files(shared_data_dir, "mt_bench")["koala-13b"]
    new_file = tmp_path / "koala-13b-again.jsonl"
    new_file.write_text(source.read_text())
    assert cli.main(["add-model", "--pool", "mt_bench", str(new_file), "--responses-only"]) == 0
    with dg.DagsterInstance.get() as instance:
        (run,) = instance.get_runs(filters=dg.RunsFilter(tags={ADDED_MODEL_TAG: "mt_bench:koala-13b-again"}))
        assert isinstance(_evaluate(instance, run), dg.SkipReason)
        assert run.job_name == PARTITIONS_JOB  # the UI names the job that made the partition (jobs.py)


def test_other_runs_do_not_trigger_it(usl_env):
    with dg.instance_for_test() as instance:
        result = dg.materialize([raw_autoj_pairwise], instance=instance, resources=usl_env)
        assert isinstance(_evaluate(instance, instance.get_run_by_id(result.run_id)), dg.SkipReason)

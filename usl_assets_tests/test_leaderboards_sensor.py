import dagster as dg
from dagster._core.events import DagsterEventType

from usl_assets.leaderboards.assets import leaderboards_after_new_model
from usl_assets.preferences.assets import raw_autoj_pairwise


def _finished_run(instance, resources, tags):
    result = dg.materialize([raw_autoj_pairwise], instance=instance, resources=resources, tags=tags)
    run = instance.get_run_by_id(result.run_id)
    records = instance.get_records_for_run(result.run_id, of_type=DagsterEventType.RUN_SUCCESS).records
    return run, records[0].event_log_entry.dagster_event


def _evaluate(instance, run, event):
    context = dg.build_run_status_sensor_context(
        sensor_name="leaderboards_after_new_model", dagster_instance=instance, dagster_run=run, dagster_event=event)
    return leaderboards_after_new_model(context)


def test_a_new_models_run_requests_the_leaderboards_once_per_run(usl_env):
    with dg.instance_for_test() as instance:
        run, event = _finished_run(instance, usl_env, {"usl/added_model": "alpaca_eval:my-model"})
        request = _evaluate(instance, run, event)
    assert isinstance(request, dg.RunRequest)
    assert request.run_key == f"leaderboards-after:{run.run_id}"
    assert request.tags["usl/after_added_model"] == "alpaca_eval:my-model"


def test_other_runs_do_not_trigger_it(usl_env):
    with dg.instance_for_test() as instance:
        run, event = _finished_run(instance, usl_env, {})
        assert isinstance(_evaluate(instance, run, event), dg.SkipReason)

"""The inbox: `$USL_HOME/inbox/<pool>/<file>` → an intake run → a new `models` partition and its run.

- `model_inbox_sensor` only lists the inbox (a stat per file, nothing read): each new file gets one run of
  `inbox_intake_job`, run key `inbox:<pool>/<name>:<size>:<mtime_ns>`, so a file seen on several ticks is one run.
- That run (`intake_inbox_file`, pool `inbox`: one at a time) validates the file with pools.py's rules, stores it
  under accepted/ or quarantines it (inbox.py), and tags itself with the model's partition key.
- `model_accepted_sensor` reads the intake runs that succeeded since its cursor, adds each accepted model's
  partition and requests one run of that partition only (run key `add-model:<key>:<sha16>`: the same file twice is
  one partition and one run). That run carries REBUILD_LEADERBOARDS_TAG, so `leaderboards_after_new_model` ranks
  the model when it succeeds; `usl add-model` rebuilds the leaderboards itself and does not set the tag.
"""

import datetime as dt
import json

import dagster as dg

from usl_assets.resources import DataDir, UslHome
from usl_assets.responses import inbox
from usl_assets.responses.assets import model_partitions, model_responses, partition_run_selection

INBOX_POOL = "inbox"  # intake runs one at a time: two files naming one model never race in accepted/
ACCEPTED_TAG = "usl/accepted_model"  # set by the intake run on itself: the partition key it accepted
SHA256_TAG = "usl/file_sha256"
ADDED_MODEL_TAG = "usl/added_model"  # a run that loads one new model's partition (inbox or `usl add-model`)
AFTER_ADDED_MODEL_TAG = "usl/after_added_model"  # the leaderboards run that ranks it (the sensor or `usl add-model`)
# The leaderboards follow this partition run (run-status sensor leaderboards_after_new_model).
REBUILD_LEADERBOARDS_TAG = "usl/rebuild_leaderboards"
# Runs the daemon launches use the multiprocess executor. By default it starts a fresh interpreter per step, each
# importing torch and the code location again (15-40 s on 2 cores); a forkserver that imported them once forks
# each step instead. The sensors' run requests carry this config (so may any run launched from the UI).
FORKSERVER_EXECUTION = {"execution": {"config": {"multiprocess": {
    "start_method": {"forkserver": {"preload_modules": ["usl_assets.definitions"]}}}}}}
# Even forked, a step process rebuilds the job and its plan (~20 s per step on 2 busy cores). A run whose steps
# all write the warehouse (the leaderboards) is serialized by the one-slot pool anyway: one process does it faster.
IN_PROCESS_EXECUTION = {"execution": {"config": {"in_process": {}}}}


class IntakeConfig(dg.Config):
    pool: str  # the inbox folder the file is in (validated: it must name a pool)
    file_name: str


@dg.op(pool=INBOX_POOL, description="validate one inbox file; store it under accepted/ or quarantine it")
def intake_inbox_file(context: dg.OpExecutionContext, config: IntakeConfig, usl_home: UslHome,
                      data_dir: DataDir) -> dg.Output:
    home = usl_home.root()
    path = home / "inbox" / config.pool / config.file_name
    if "/" in config.file_name or not path.is_file():
        context.log.warning(f"{path} is not in the inbox (any more): nothing to do")
        return dg.Output("gone", metadata={"file": dg.MetadataValue.path(str(path))})
    outcome = inbox.intake_file(config.pool, path, home, data_dir.root())
    log = context.log.warning if outcome.status == "quarantined" else context.log.info
    log(f"{config.pool}/{config.file_name}: {outcome.status} — {outcome.detail}")
    if outcome.status == "accepted" or (outcome.status == "same_file" and not _taken(context, outcome)):
        context.instance.add_run_tags(context.run_id, {ACCEPTED_TAG: outcome.key, SHA256_TAG: outcome.sha256})
    return dg.Output(outcome.status, metadata={"status": outcome.status, "detail": outcome.detail,
                                               "partition": outcome.key or "none"})


def _taken(context: dg.OpExecutionContext, outcome: inbox.Intake) -> bool:
    """Whether the same file is registered already: its partition exists, or an earlier intake run accepted it
    and model_accepted_sensor will add the partition on its next tick. Only a run that died after storing the
    file leaves neither, and then this run registers it."""
    if outcome.key in context.instance.get_dynamic_partitions(model_partitions.name):
        return True
    return bool(context.instance.get_runs(filters=dg.RunsFilter(
        job_name=context.job_name, statuses=[dg.DagsterRunStatus.SUCCESS],
        tags={ACCEPTED_TAG: outcome.key, SHA256_TAG: outcome.sha256}), limit=1))


@dg.job(executor_def=dg.in_process_executor,
        description="one inbox file: validated, stored under accepted/ or quarantined (model_inbox_sensor)")
def inbox_intake_job():
    intake_inbox_file()


def intake_run_request(pool: str, path, signature: str) -> dg.RunRequest:
    return dg.RunRequest(
        run_key=f"inbox:{signature}",
        run_config={"ops": {"intake_inbox_file": {"config": {"pool": pool, "file_name": path.name}}}},
        tags={"usl/inbox_file": f"{pool}/{path.name}"})


@dg.sensor(
    name="model_inbox_sensor",
    minimum_interval_seconds=15,
    default_status=dg.DefaultSensorStatus.RUNNING,
    job=inbox_intake_job,
    description="A new file in $USL_HOME/inbox/<pool>/ → one intake run (inbox_intake_job) that validates it; the "
    "sensor itself reads nothing but the folder listing",
)
def model_inbox_sensor(context: dg.SensorEvaluationContext, usl_home: UslHome):
    # The cursor holds the signatures of the files still in the inbox that already have their run.
    requested = set(json.loads(context.cursor)) if context.cursor else set()
    pending = [(pool, path, inbox.file_signature(pool, path)) for pool, path in inbox.pending_files(usl_home.root())]
    new = [(pool, path, signature) for pool, path, signature in pending if signature not in requested]
    context.update_cursor(json.dumps(sorted(signature for *_, signature in pending)))
    if not new:
        return dg.SkipReason(f"no new file ({len(pending)} in the inbox with a run already)" if pending
                             else "inbox empty")
    return [intake_run_request(pool, path, signature) for pool, path, signature in new]


@dg.sensor(
    name="model_accepted_sensor",
    minimum_interval_seconds=15,
    default_status=dg.DefaultSensorStatus.RUNNING,
    target=dg.AssetSelection.assets(model_responses).downstream(),
    description="An intake run that accepted a model → its `models` partition and one run of that partition only "
    "(model_responses and its model-partitioned downstream assets), then the leaderboards",
)
def model_accepted_sensor(context: dg.SensorEvaluationContext):
    after = float(context.cursor) if context.cursor else 0.0
    records = context.instance.get_run_records(
        filters=dg.RunsFilter(job_name=inbox_intake_job.name, statuses=[dg.DagsterRunStatus.SUCCESS],
                              updated_after=dt.datetime.fromtimestamp(after, tz=dt.timezone.utc)),
        order_by="update_timestamp", ascending=True)
    if records:
        context.update_cursor(str(max(r.update_timestamp.timestamp() for r in records)))
    accepted = [(r.dagster_run.tags[ACCEPTED_TAG], r.dagster_run.tags.get(SHA256_TAG, ""))
                for r in records if ACCEPTED_TAG in r.dagster_run.tags]
    if not accepted:
        return dg.SkipReason("no intake run accepted a model since the last tick")
    existing = set(context.instance.get_dynamic_partitions(model_partitions.name))
    new_keys = sorted({key for key, _ in accepted} - existing)
    selection = partition_run_selection(context.repository_def.asset_graph if context.repository_def else None)
    requests = [dg.RunRequest(run_key=f"add-model:{key}:{sha256[:16]}", partition_key=key, asset_selection=selection,
                              run_config=FORKSERVER_EXECUTION,
                              tags={ADDED_MODEL_TAG: key, SHA256_TAG: sha256, REBUILD_LEADERBOARDS_TAG: "true"})
                for key, sha256 in dict(accepted).items()]
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[model_partitions.build_add_request(new_keys)] if new_keys else [])


defs = dg.Definitions(jobs=[inbox_intake_job], sensors=[model_inbox_sensor, model_accepted_sensor])

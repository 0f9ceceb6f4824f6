"""Dagster wiring of models answered by an endpoint (endpoint_models.py): the `endpoint_models` asset answers each
model declared in `$USL_HOME/endpoint_models.yaml` (resuming; only prompts not answered yet cost a request), stores
a changed model file as `usl add-model --replace` would and registers its partition; `endpoint_models_refreshed`
then runs each refreshed model's partition (and, after it, the leaderboards). `usl run` materializes the asset in
its first phase; the schedule `endpoint_models_daily` (stopped by default) refreshes the models on a daemon."""

import time

import dagster as dg

from usl_assets.jobs import PARTITIONS_JOB
from usl_assets.partitions import model_partitions
from usl_assets.resources import DataDir, UslHome
from usl_assets.responses import endpoint_models as declared, inbox
from usl_assets.responses.assets import GROUP, partition_run_selection, pool_prompts
from usl_assets.responses.sensors import ADDED_MODEL_TAG, FORKSERVER_EXECUTION, REBUILD_LEADERBOARDS_TAG, SHA256_TAG
from usl_assets.settings import UslConfigError

LOG_EVERY_S = 10.0


@dg.asset(
    group_name=GROUP,
    deps=[pool_prompts],
    description="Answers of the models declared in $USL_HOME/endpoint_models.yaml, fetched from their "
    "OpenAI-compatible endpoints (resumed, so only new prompts cost a request) → accepted model files and their "
    "`models` partitions; a model whose endpoint fails is reported, not fatal",
)
def endpoint_models(context: dg.AssetExecutionContext, usl_home: UslHome, data_dir: DataDir) -> dg.MaterializeResult:
    from usl_assets.responses import generation

    home = usl_home.root()
    entries = declared.declared_models(home)
    rows, refreshed = [], []
    for entry in entries:
        key = f"{entry['pool']}:{entry['model']}"
        try:
            done = declared.answer_pool(home, entry["pool"], entry["model"], declared.settings_of(entry),
                                        progress=_progress_logger(context, key))
        except (UslConfigError, generation.EndpointError, generation.GenerationConflict) as error:
            context.log.warning(f"{key}: not refreshed: {error}")
            rows.append({"model": key, "status": "failed", "answered": 0, "failed": 0, "detail": str(error)})
            continue
        context.log.info(f"{key}: {done.report.line()}")
        status, sha256 = _store(context, home, data_dir, entry, done)
        if status == "stored":
            refreshed.append({"key": key, "sha256": sha256})
        rows.append({"model": key, "status": status, "answered": done.answered, "failed": done.failed,
                     "detail": "" if status != "no answer" else "no prompt answered: nothing stored"})
    return dg.MaterializeResult(metadata={
        "declared": dg.MetadataValue.int(len(entries)),
        "refreshed": dg.MetadataValue.json(refreshed),
        "not_refreshed": dg.MetadataValue.int(sum(row["status"] == "failed" for row in rows)),
        "models": dg.MetadataValue.md(_table(rows)),
    })


def _store(context, home, data_dir: DataDir, entry: dict, done) -> tuple[str, str | None]:
    """("stored" | "unchanged" | "no answer", sha256): a changed file replaces the model (its rows are archived
    when its partition next runs), as `usl add-model --replace` does."""
    if done.answered == 0:
        return "no answer", None
    validated = inbox.validate_model_file(done.pool, done.model_file, data_dir.root(), done.model, home)
    existing = inbox.current_source(done.pool, done.model, data_dir.root(), home)
    if existing is not None and inbox.file_sha256(existing) == validated.sha256:
        return "unchanged", validated.sha256
    inbox.store_accepted(validated, home, keep_source=True)
    if validated.partition_key not in context.instance.get_dynamic_partitions(model_partitions.name):
        context.instance.add_dynamic_partitions(model_partitions.name, [validated.partition_key])
    return "stored", validated.sha256


def _progress_logger(context, key: str):
    last = {"at": 0.0}

    def progress(done: int, total: int, errors: int, rate: float) -> None:
        now = time.monotonic()
        if done == total or now - last["at"] >= LOG_EVERY_S:
            last["at"] = now
            context.log.info(f"{key}: {done:,}/{total:,} prompts done, {errors:,} failed, {rate:.2f} answers/s")

    return progress


def _table(rows: list[dict]) -> str:
    if not rows:
        return "no model declared (list them in $USL_HOME/endpoint_models.yaml)"
    lines = ["| model | status | answered | failed | detail |", "|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['status']} | {r['answered']} | {r['failed']} | {r['detail'][:200]} |"
              for r in rows]
    return "\n".join(lines)


@dg.asset_check(asset=endpoint_models, description="every declared model's endpoint answered (a model not "
                "refreshed keeps its previous answers)")
def endpoint_models_refreshed_all(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    event = context.instance.get_latest_materialization_event(endpoint_models.key)
    metadata = event.asset_materialization.metadata if event else {}
    failed = metadata.get("not_refreshed").value if "not_refreshed" in metadata else 0
    return dg.AssetCheckResult(passed=failed == 0, severity=dg.AssetCheckSeverity.WARN,
                               metadata={"not_refreshed": dg.MetadataValue.int(int(failed))})


endpoint_models_job = dg.define_asset_job(
    "endpoint_models_job", selection=dg.AssetSelection.assets(endpoint_models),
    description="refresh the models declared in $USL_HOME/endpoint_models.yaml from their endpoints")

endpoint_models_daily = dg.ScheduleDefinition(
    name="endpoint_models_daily", job=endpoint_models_job, cron_schedule="0 2 * * *", execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="answer the pools' new prompts with every declared endpoint model (turn on with a daemon)")


@dg.asset_sensor(
    asset_key=endpoint_models.key, name="endpoint_models_refreshed", minimum_interval_seconds=15,
    default_status=dg.DefaultSensorStatus.RUNNING, job_name=PARTITIONS_JOB,
    description="endpoint_models stored changed answers → one run of each refreshed model's partition, then the "
                "leaderboards (leaderboards_after_new_model)",
)
def endpoint_models_refreshed(context: dg.SensorEvaluationContext, asset_event: dg.EventLogEntry):
    metadata = asset_event.asset_materialization.metadata
    refreshed = metadata["refreshed"].value if "refreshed" in metadata else []
    if not refreshed:
        return dg.SkipReason("endpoint_models refreshed no model")
    selection = partition_run_selection(context.repository_def.asset_graph if context.repository_def else None)
    return [dg.RunRequest(run_key=f"endpoint:{item['key']}:{item['sha256'][:16]}", partition_key=item["key"],
                          asset_selection=selection, run_config=FORKSERVER_EXECUTION,
                          tags={ADDED_MODEL_TAG: item["key"], SHA256_TAG: item["sha256"],
                                REBUILD_LEADERBOARDS_TAG: "true"})
            for item in refreshed]


defs = dg.Definitions(assets=[endpoint_models], asset_checks=[endpoint_models_refreshed_all],
                      jobs=[endpoint_models_job], schedules=[endpoint_models_daily],
                      sensors=[endpoint_models_refreshed])

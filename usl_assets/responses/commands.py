"""`usl add-model`: the inbox sensor's validation and registration without the daemon, then the model's partition
materialized in process on the Dagster instance (DAGSTER_HOME)."""

import argparse
import time
from pathlib import Path

import dagster as dg
import duckdb

from usl_assets.instance import open_instance
from usl_assets.jobs import PARTITIONS_JOB
from usl_assets.launch import add_verbose_flag, console_log_config, execute_in_location, raise_if_interrupted
from usl_assets.partitions import model_partitions
from usl_assets.recovery import recover_and_report
from usl_assets.resources import DataDir, UslHome, Warehouse
from usl_assets.responses import inbox, pools, tables as response_tables, user_pools
from usl_assets.responses.assets import model_responses, partition_run_selection
from usl_assets.responses.sensors import ADDED_MODEL_TAG, AFTER_ADDED_MODEL_TAG
from usl_assets.settings import UslConfigError
from usl_assets.slot_wait import DEFAULT_WAIT_TIMEOUT_S, SlotWait, add_wait_timeout_flag


def add_arguments(command: str, add: argparse.ArgumentParser) -> None:
    """The arguments of `usl add-model`."""
    add.add_argument("--pool", required=True,
                     help=f"the pool the file answers: {', '.join(pools.POOLS)} or a user pool (`usl add-pool`)")
    add.add_argument("file", type=Path, help="the model's file: .json / .json.gz (AlpacaEval) for alpaca_eval, "
                                             ".jsonl (FastChat model_answer) for mt_bench, .jsonl "
                                             "({\"prompt_id\" or \"prompt\", \"output\"} a line) for a user pool")
    add.add_argument("--model", default=None, help="the model's name (default: the file name, or its generator)")
    add.add_argument(
        "--responses-only", action="store_true",
        help="load the responses only, not the model's downstream partitions (e.g. its CRM rewards)",
    )
    add.add_argument(
        "--replace", action="store_true",
        help="replace a model that exists already (its previous file and rows are archived); a pool's reference "
             "model is never replaced by a file with fewer usable answers",
    )
    add.add_argument(
        "--no-leaderboards", action="store_true",
        help="do not rebuild the leaderboards afterwards (they read every model's rewards; by default they are "
             "rebuilt so the new model is ranked)",
    )
    add_wait_timeout_flag(add)
    add_verbose_flag(add)
    add.set_defaults(handler=add_model)


def add_model(args: argparse.Namespace) -> int:
    data_root, home_root = DataDir().root(), UslHome().root()
    pool = pools.check_pool(args.pool, home_root)
    started = time.perf_counter()
    try:
        validated = inbox.validate_model_file(pool, args.file.expanduser().resolve(), data_root, args.model,
                                              home_root)
        replaced = inbox.check_replacement(validated, data_root, home_root, args.replace, reference_models())
    except pools.ResponseFileError as error:
        raise UslConfigError(f"{args.file} was not added: {error}") from error
    with open_instance() as instance:
        recover_and_report(instance)
        if replaced is not None:
            print(f"replacing {validated.partition_key} (was {replaced}); its previous rows go to archive.responses")
        stored = inbox.store_accepted(validated, home_root, keep_source=True)
        key = validated.partition_key
        print(f"validated {args.file}: model {validated.model}, {validated.records} records, "
              f"{validated.usable} usable; stored as {stored}")
        if key not in instance.get_dynamic_partitions(model_partitions.name):
            instance.add_dynamic_partitions(model_partitions.name, [key])
            print(f"added partition {key}")
        result = materialize_partition(instance, key, responses_only=args.responses_only,
                                       verbose=getattr(args, "verbose", False), wait_timeout_s=args.wait_timeout)
    summary = response_tables.partition_summary(Warehouse(), pool, validated.model)
    print(f"run {result.run_id}: materialized {', '.join(k.to_user_string() for k in result_keys(result))} "
          f"for {key} in {time.perf_counter() - started:.1f}s")
    print(f"{summary['responses']} responses loaded (mean {summary['mean_chars']:.0f} chars); quarantined: "
          + (", ".join(f"{rule} {n}" for rule, n in summary["quarantined"].items()) or "none"))
    if not (args.responses_only or args.no_leaderboards):
        rebuild_started = time.perf_counter()
        with open_instance() as instance:
            run_id = rebuild_leaderboards(instance, key, verbose=getattr(args, "verbose", False),
                                          wait_timeout_s=args.wait_timeout)
        print(f"run {run_id}: leaderboards rebuilt with {key} in {time.perf_counter() - rebuild_started:.1f}s "
              "(published copy updated)")
    return 0


def reference_models() -> dict[str, str]:
    """pool → reference model: a user pool's own, else the published leaderboard's (asset config), else the
    defaults."""
    from usl_assets.leaderboards.ranking import DEFAULT_REFERENCE_MODELS

    own = {name: record.reference_model for name, record in user_pools.registered_pools(UslHome().root()).items()
           if record.reference_model}
    published = Warehouse().published_path()
    if published.exists():
        try:
            with duckdb.connect(str(published), read_only=True) as conn:
                rows = conn.execute("SELECT pool, reference_model FROM leaderboard.reference_models").fetchall()
            return {**DEFAULT_REFERENCE_MODELS, **{pool: model for pool, model in rows if model}, **own}
        except duckdb.Error:
            pass  # a copy without the leaderboards yet
    return {**DEFAULT_REFERENCE_MODELS, **own}


def rebuild_leaderboards(instance: dg.DagsterInstance, key: str, verbose: bool = False,
                         wait_timeout_s: float = DEFAULT_WAIT_TIMEOUT_S, tags: dict | None = None) -> str:
    """leaderboards_after_model_job (unpartitioned: it reads every model's rewards, scores only the new model's
    rankings and leaves Bradley–Terry for leaderboards_job), as the run-status sensor does. `key`: the model
    added (its tag), unless `tags` say what the run is for."""
    from usl_assets.definitions import defs

    result = execute_in_location(defs.resolve_job_def("leaderboards_after_model_job"), instance,
                                 run_config=console_log_config(verbose),
                                 tags={AFTER_ADDED_MODEL_TAG: key} if tags is None else tags,
                                 slot_wait=SlotWait(wait_timeout_s))
    raise_if_interrupted(result)
    if not result.success:
        raise UslConfigError(f"leaderboards run {result.run_id} failed ({key}): see its log in the UI")
    return result.run_id


def materialize_partition(instance: dg.DagsterInstance, key: str, responses_only: bool = False,
                          verbose: bool = False, wait_timeout_s: float = DEFAULT_WAIT_TIMEOUT_S):
    """Runs model_responses (and, unless responses_only, its model-partitioned downstream assets) for one key."""
    from usl_assets.definitions import defs  # the whole code location, loaded only when a run is asked for

    selection = [model_responses.key] if responses_only else partition_run_selection(defs.resolve_asset_graph())
    job = defs.resolve_job_def(PARTITIONS_JOB)
    result = execute_in_location(job, instance, run_config=console_log_config(verbose), partition_key=key,
                                 asset_selection=selection, tags={ADDED_MODEL_TAG: key},
                                 slot_wait=SlotWait(wait_timeout_s))
    raise_if_interrupted(result)
    if not result.success:
        failure = next((e for e in result.all_events if e.is_step_failure), None)
        detail = failure.event_specific_data.error.message.strip().splitlines()[0] if failure else "see the run's log"
        raise UslConfigError(f"run {result.run_id} for {key} failed: {detail}")
    return result


def result_keys(result) -> list[dg.AssetKey]:
    return sorted({e.asset_key for e in result.get_asset_materialization_events()}, key=lambda k: k.to_user_string())

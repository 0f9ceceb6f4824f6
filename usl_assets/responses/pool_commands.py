"""`usl add-pool`, `usl remove-pool` and `usl set-reference`: a user's own prompt pools (user_pools.py), then the
prompts materialized in process (pool_prompts, prompt_sample) on the Dagster instance in DAGSTER_HOME."""

import argparse
import shutil
import time
from pathlib import Path

from usl_assets.instance import open_instance
from usl_assets.jobs import UPSTREAM_JOB
from usl_assets.launch import add_verbose_flag, console_log_config, execute_in_location, raise_if_interrupted
from usl_assets.partitions import model_partitions
from usl_assets.recovery import recover_and_report
from usl_assets.resources import UslHome
from usl_assets.responses import pools, user_pools
from usl_assets.settings import UslConfigError
from usl_assets.slot_wait import DEFAULT_WAIT_TIMEOUT_S, SlotWait, add_wait_timeout_flag

QUARANTINE_LINES_SHOWN = 5
POOL_COMMAND_TAG = "usl/pool_command"  # the leaderboards run after `usl remove-pool` / `usl set-reference`


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    if command == "add-pool":
        parser.add_argument("name", help="the pool's name: a lower-case letter, then lower-case letters, digits, "
                                         "_ or - (at most 40)")
        parser.add_argument("--prompts", required=True, type=Path,
                            help="JSONL, one prompt a line: {\"id\", \"prompt\", optional \"topic\", optional "
                                 "\"history\": [{\"role\", \"content\"}, …]} (docs/user_pools.md)")
        parser.add_argument("--reference-model", default=None,
                            help="the model every other is compared with (default: the first model added; "
                                 "`usl set-reference` changes it)")
        parser.add_argument("--max-prompts", type=int, default=user_pools.DEFAULT_MAX_PROMPTS,
                            help="keep the file's first N usable prompts (default %(default)s); the rest are "
                                 "quarantined as over_prompt_limit")
        parser.set_defaults(handler=add_pool)
    elif command == "remove-pool":
        parser.add_argument("name", help="a user pool: its prompts, model files and warehouse rows are archived")
        parser.add_argument("--no-leaderboards", action="store_true",
                            help="do not rebuild the leaderboards now (the pool leaves them when next built)")
        parser.set_defaults(handler=remove_pool)
    else:
        parser.add_argument("name", help="a user pool")
        parser.add_argument("model", help="the model every other is compared with from now on")
        parser.add_argument("--no-leaderboards", action="store_true",
                            help="do not rebuild the leaderboards now (they use the new reference when next built)")
        parser.set_defaults(handler=set_reference)
    add_wait_timeout_flag(parser)
    add_verbose_flag(parser)


def add_pool(args: argparse.Namespace) -> int:
    home = UslHome().root()
    prompts_path = args.prompts.expanduser()
    with open_instance() as instance:
        recover_and_report(instance)
        try:
            pools.load_scenario_tagger(home)  # the prompts are tagged by the run below
        except UslConfigError as error:
            raise UslConfigError(f"{error} (`usl run` or `make run` does)") from error
        record = user_pools.register_pool(args.name, prompts_path, home, args.reference_model, args.max_prompts)
        print(f"registered {user_pools.describe(record)}")
        _show_quarantine(home, record)
        try:
            run_id, seconds = materialize_prompts(instance, getattr(args, "verbose", False), args.wait_timeout)
        except BaseException:
            # The pool is registered whole or not at all: its prompts never reached the warehouse.
            shutil.rmtree(user_pools.pool_dir(home, record.name), ignore_errors=True)
            print(f"pool {record.name} was not registered (its prompts could not be materialized)")
            raise
    print(f"run {run_id}: pool_prompts and prompt_sample materialized in {seconds:.1f}s; pool {record.name} is in "
          "responses.pools")
    print(f"next: `usl generate --pool {record.name} --model NAME --endpoint URL`, or "
          f"`usl add-model --pool {record.name} answers.jsonl` ({{\"prompt_id\", \"output\"}} a line)")
    return 0


def _show_quarantine(home: Path, record: user_pools.PoolRecord) -> None:
    rejected = user_pools.quarantined_prompts(home, record.name)
    for row in rejected.head(QUARANTINE_LINES_SHOWN).itertuples():
        print(f"  quarantined line {row.line}: {row.rule}: {row.detail}")
    if len(rejected) > QUARANTINE_LINES_SHOWN:
        print(f"  … and {len(rejected) - QUARANTINE_LINES_SHOWN:,} more (quality.prompt_quarantine, "
              f"{user_pools.pool_dir(home, record.name) / 'quarantine.jsonl'})")


def remove_pool(args: argparse.Namespace) -> int:
    home = UslHome().root()
    if args.name in pools.POOLS:
        raise UslConfigError(f"{args.name} is a public pool; only user pools can be removed")
    with open_instance() as instance:
        recover_and_report(instance)
        target = user_pools.archive_pool(home, args.name)
        print(f"pool {args.name} archived to {target}")
        prefix = f"{args.name}{pools.PARTITION_SEPARATOR}"
        removed = [key for key in instance.get_dynamic_partitions(model_partitions.name) if key.startswith(prefix)]
        for key in removed:
            instance.delete_dynamic_partition(model_partitions.name, key)
        print(f"removed {len(removed)} model partitions ({', '.join(removed) or 'none'})")
        run_id, seconds = materialize_prompts(instance, getattr(args, "verbose", False), args.wait_timeout)
        print(f"run {run_id}: pool_prompts materialized in {seconds:.1f}s; the pool's responses are in "
              "archive.responses")
        if not args.no_leaderboards:
            rebuild(instance, f"remove-pool {args.name}", args)
    return 0


def set_reference(args: argparse.Namespace) -> int:
    home = UslHome().root()
    if args.name in pools.POOLS:
        raise UslConfigError(f"{args.name} is a public pool: its reference is the reference_models asset's config")
    record = user_pools.read_record(home, args.name)
    if args.model not in pools.accepted_model_files(home, args.name):
        raise UslConfigError(f"pool {args.name} has no model {args.model!r}: add it first (usl add-model / generate)")
    user_pools.set_reference_model(home, args.name, args.model)
    print(f"pool {args.name}: reference model {record.reference_model} → {args.model}")
    if not args.no_leaderboards:
        with open_instance() as instance:
            recover_and_report(instance)
            rebuild(instance, f"set-reference {args.name}", args)
    return 0


def rebuild(instance, reason: str, args: argparse.Namespace) -> None:
    from usl_assets.responses.commands import rebuild_leaderboards

    started = time.perf_counter()
    run_id = rebuild_leaderboards(instance, reason, verbose=getattr(args, "verbose", False),
                                  wait_timeout_s=args.wait_timeout, tags={POOL_COMMAND_TAG: reason})
    print(f"run {run_id}: leaderboards rebuilt in {time.perf_counter() - started:.1f}s (published copy updated)")


def materialize_prompts(instance, verbose: bool = False,
                        wait_timeout_s: float = DEFAULT_WAIT_TIMEOUT_S) -> tuple[str, float]:
    """pool_prompts and prompt_sample in one in-process run; returns (run id, seconds)."""
    from usl_assets.definitions import defs

    started = time.perf_counter()
    # The sample keeps the rule it was drawn with (a deployment may score a sample, not the full pools).
    sample_config = previous_op_config(instance, "prompt_sample")
    result = execute_in_location(defs.resolve_job_def(UPSTREAM_JOB), instance,
                                 run_config={**console_log_config(verbose),
                                             **({"ops": {"prompt_sample": sample_config}} if sample_config else {})},
                                 asset_selection=[_asset_key("pool_prompts"), _asset_key("prompt_sample")],
                                 slot_wait=SlotWait(wait_timeout_s))
    raise_if_interrupted(result)
    if not result.success:
        raise UslConfigError(f"run {result.run_id} (pool_prompts) failed: see its log in the UI")
    return result.run_id, time.perf_counter() - started


def previous_op_config(instance, asset_name: str) -> dict | None:
    """The op config of the run that last materialized the asset (None: never, or it had none)."""
    event = instance.get_latest_materialization_event(_asset_key(asset_name))
    run = instance.get_run_by_id(event.run_id) if event else None
    return ((run.run_config or {}).get("ops") or {}).get(asset_name) if run else None


def _asset_key(name: str):
    import dagster as dg

    return dg.AssetKey(name)

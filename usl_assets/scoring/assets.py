"""Scoring assets: criteria profiles and CRM rewards per model partition (logic in profiles.py and score.py)."""

from pathlib import Path

import dagster as dg

from usl_assets.partitions import model_partitions
from usl_assets.crm.assets import crm_default_checkpoint, materialized_default_checkpoint
from usl_assets.resources import WAREHOUSE_POOL, DataDir, UslHome, Warehouse
from usl_assets.responses.pools import split_partition_key
from usl_assets.scoring import profiles as profile_logic
from usl_assets.scoring import score
from usl_assets.settings import UslConfigError

GROUP = "scoring"


class ProfilesConfig(dg.Config):
    profiles_file: str = ""  # a YAML of named profiles; empty = usl_assets/scoring/criteria_profiles.yaml


class RewardsConfig(dg.Config):
    checkpoint: str = ""  # a CRM checkpoint folder; empty = the one crm_default_checkpoint names
    batch_size: int = 16  # sequences per forward pass (responses per embedding batch for the factorized CRM)
    progress: bool = False  # tqdm bars, for a person watching a terminal


@dg.asset(group_name=GROUP, pool=WAREHOUSE_POOL, deps=[dg.AssetKey("scenario_criteria")],
          description="Criteria profiles: each scenario's Auto-J criteria, named profiles, ad hoc ones.")
def criteria_profiles(context: dg.AssetExecutionContext, config: ProfilesConfig, data_dir: DataDir,
                      warehouse: Warehouse) -> dg.MaterializeResult:
    profiles_file = Path(config.profiles_file).expanduser() if config.profiles_file else \
        profile_logic.DEFAULT_PROFILES_FILE
    earlier = warehouse.read_table(profile_logic.PROFILES_TABLE) \
        if warehouse.table_exists(profile_logic.PROFILES_TABLE) else None
    profiles, rejected = profile_logic.build_profiles(data_dir.root(), profiles_file, earlier)
    for bad in rejected:
        context.log.warning(f"profile {bad.profile!r} not loaded from {profiles_file}: {bad.reason}")
    warehouse.replace_table(profile_logic.PROFILES_TABLE, profiles, "Criteria profiles the CRM scores under")
    counts = profiles["kind"].value_counts()
    rejected_md = "\n".join(f"| {r.profile} | {r.reason} |" for r in rejected)
    return dg.MaterializeResult(metadata={
        **warehouse.table_metadata(profile_logic.PROFILES_TABLE),
        "profiles_file": dg.MetadataValue.path(str(profiles_file)),
        **{f"{kind}_profiles": int(counts.get(kind, 0)) for kind in ("scenario_default", "named", "adhoc")},
        "rejected_profiles": len(rejected),
        "rejected": dg.MetadataValue.md("| profile | reason |\n|---|---|\n" + rejected_md if rejected else "none"),
    })


@dg.asset_check(asset=criteria_profiles, blocking=True,
                description="Every scenario has a default profile with criteria; names and criteria are unique.")
def criteria_profiles_complete(warehouse: Warehouse) -> dg.AssetCheckResult:
    figures = warehouse.query(f"""
        SELECT count(*) FILTER (WHERE kind = 'scenario_default') AS defaults,
               count(*) FILTER (WHERE len(criteria) = 0) AS empty,
               count(*) - count(DISTINCT profile) AS duplicate_names,
               count(*) FILTER (WHERE kind = 'named') AS named
        FROM {profile_logic.PROFILES_TABLE}""").iloc[0]
    return dg.AssetCheckResult(
        passed=bool(figures["defaults"] > 0 and figures["empty"] == 0 and figures["duplicate_names"] == 0),
        metadata={name: int(value) for name, value in figures.items()},
    )


CHECKS = {
    "one_reward_per_response_profile": "Each sampled response has exactly one reward per profile (its scenario "
                                       "default and every named one), or a quarantine row saying why not.",
    "rewards_finite": "No NULL, NaN or infinite reward in the partition's rows.",
    "checkpoint_is_default": "The partition was scored with the CRM's current default checkpoint.",
}


@dg.asset(
    group_name=GROUP,
    pool=WAREHOUSE_POOL,
    partitions_def=model_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
    deps=[criteria_profiles, dg.AssetKey("model_responses"), dg.AssetKey("prompt_sample"), crm_default_checkpoint],
    check_specs=[dg.AssetCheckSpec(name, asset="response_rewards", description=text,
                                   partitions_def=model_partitions) for name, text in CHECKS.items()],
    description="CRM reward of each sampled response under its scenario's default profile and every named "
                "profile (scoring.response_rewards), cached in scoring.reward_cache.",
)
def response_rewards(context: dg.AssetExecutionContext, config: RewardsConfig, usl_home: UslHome,
                     warehouse: Warehouse):
    if config.batch_size < 1:
        raise UslConfigError(f"batch_size must be at least 1, got {config.batch_size}")
    _, default_id, default_dir = materialized_default_checkpoint(context.instance)
    scorer = score.load_scorer(usl_home.root(), config.checkpoint or str(default_dir))
    profiles = warehouse.query(f"SELECT * FROM {profile_logic.PROFILES_TABLE} WHERE kind <> 'adhoc'")
    partitions = [split_partition_key(key) for key in context.partition_keys]
    context.log.info(f"scoring {len(partitions)} model(s) under {len(profiles)} profiles with checkpoint "
                     f"{scorer.checkpoint_id} ({scorer.architecture}), batch size {config.batch_size}")
    results, total = [], score.ScoringStats()
    for pool, model in partitions:
        # No connection is open while the CRM runs: score_partition reads, scores, then writes in one transaction.
        result = score.score_partition(warehouse, scorer, pool, model, profiles, config.batch_size,
                                       config.progress, context.log.info)
        context.log.info(f"{pool}/{model}: {result.responses} responses, {result.stats.scored} scored, "
                         f"{result.stats.cache_hits} from cache, {result.quarantined} quarantined")
        with warehouse.connect() as conn:
            results.append((result, score.partition_figures(conn, pool, model),
                            score.expected_reward_count(conn, pool, model)))
        total.add(result.stats)
    for result, figures, _ in results:
        context.add_asset_metadata(partition_figures(result, figures), partition_key=f"{result.pool}:{result.model}")
    # Shared by every partition of the run; each partition's own figures come from add_asset_metadata above.
    yield dg.MaterializeResult(metadata={
        **warehouse.table_metadata(score.REWARDS_TABLE),
        "checkpoint_id": scorer.checkpoint_id,
        "architecture": scorer.architecture,
        "batch_size": config.batch_size,
        "partitions_in_run": len(results),
        "run_rate_scored_per_s": round(total.rate, 2),
    })
    # After the materializations, so each evaluation is stamped with (and points at) its partition's new one.
    yield from partition_checks(context.instance, results, default_id)
    # The check outputs Dagster expects of this step (AssetCheckResult would yield them, but carries no partition).
    for name in CHECKS:
        check_key = dg.AssetCheckKey(response_rewards.key, name)
        if check_key in context.selected_asset_check_keys:
            yield dg.Output(None, output_name=context.assets_def.get_output_name_for_asset_check_key(check_key))


def partition_figures(result: score.PartitionResult, figures: dict) -> dict:
    stats = result.stats
    return {
        "dagster/row_count": dg.MetadataValue.int(int(figures["rows"])),
        "responses": result.responses,
        "rewards_written": result.rewards,
        "quarantined": result.quarantined,
        "scored": stats.scored,
        "cache_hits": stats.cache_hits,
        "responses_embedded": stats.embedded,
        "scoring_seconds": round(stats.seconds, 2),
        "rate_scored_per_s": round(stats.rate, 2),
        "rate_responses_per_s": round(result.responses / stats.seconds, 2) if stats.seconds > 0 else 0.0,
    }


def partition_checks(instance: dg.DagsterInstance, results: list, default_checkpoint_id: str):
    """One evaluation per check and partition (the checks' specs are partitioned by model)."""
    for result, figures, expected in results:
        key = f"{result.pool}:{result.model}"
        missing = expected - figures["rows"] - figures["quarantined"]
        stale = sorted(set(figures["checkpoints"]) - {default_checkpoint_id})
        outcomes = {
            "one_reward_per_response_profile": (
                missing == 0 and figures["duplicates"] == 0,
                {"expected": expected, "rewards": figures["rows"], "quarantined": figures["quarantined"],
                 "missing": missing, "duplicates": figures["duplicates"]}),
            "rewards_finite": (figures["non_finite"] == 0, {"non_finite": figures["non_finite"]}),
            "checkpoint_is_default": (not stale, {"default_checkpoint": default_checkpoint_id,
                                                  "other_checkpoints": ", ".join(stale) or "none"}),
        }
        target = latest_materialization(instance, response_rewards.key, key)
        for name, (passed, metadata) in outcomes.items():
            yield dg.AssetCheckEvaluation(
                asset_key=response_rewards.key, check_name=name, passed=bool(passed), metadata=metadata,
                partition=key, target_materialization_data=target, blocking=False,
                severity=dg.AssetCheckSeverity.WARN if name == "checkpoint_is_default" else
                dg.AssetCheckSeverity.ERROR)


def latest_materialization(instance: dg.DagsterInstance, asset_key: dg.AssetKey, partition: str):
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (
        AssetCheckEvaluationTargetMaterializationData,
    )

    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[partition]), limit=1).records
    if not records:
        return None
    return AssetCheckEvaluationTargetMaterializationData(
        storage_id=records[0].storage_id, run_id=records[0].run_id, timestamp=records[0].timestamp)


defs = dg.Definitions(assets=[criteria_profiles, response_rewards], asset_checks=[criteria_profiles_complete])

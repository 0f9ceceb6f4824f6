"""Dagster wiring of the leaderboards stage (group `leaderboards`): SQL models, rankings, validity, the published
copy, the job and its nightly schedule. The logic lives in sql_models.py, ranking.py and validity.py."""

import time

import dagster as dg
import duckdb
import pandas as pd
from pydantic import Field

from usl_assets.leaderboards import audit_assets, incremental, ranking, validity
from usl_assets.leaderboards.sql_models import GROUP, build_sql_models
from usl_assets.resources import WAREHOUSE_POOL, DataDir, UslHome, Warehouse
from usl_assets.responses import user_pools
from usl_assets.responses.sensors import (
    ADDED_MODEL_TAG,
    AFTER_ADDED_MODEL_TAG,
    IN_PROCESS_EXECUTION,
    REBUILD_LEADERBOARDS_TAG,
)

sql_assets, sql_checks = build_sql_models()


def require_tables(warehouse: Warehouse, *tables: str) -> None:
    missing = [table for table in tables if not warehouse.table_exists(table)]
    if missing:
        raise dg.Failure(f"{', '.join(missing)} not in the warehouse yet: materialize the upstream assets first")


def markdown(frame: pd.DataFrame, digits: int = 3) -> dg.MetadataValue:
    return dg.MetadataValue.md(frame.round(digits).to_markdown(index=False) if len(frame) else "_(no rows)_")


class ReferenceModelsConfig(dg.Config):
    reference_models: dict[str, str] = Field(
        default=ranking.DEFAULT_REFERENCE_MODELS,
        description="pool → the model every response is compared with for the USL score "
                    "(AlpacaEval 2 uses gpt4_1106_preview; MT-Bench's reference answers are gpt-4's). A user pool's "
                    "reference is its own (`usl add-pool --reference-model`, `usl set-reference`); an entry here "
                    "overrides it",
    )


@dg.asset(group_name=GROUP, deps=["model_responses"], pool=WAREHOUSE_POOL, kinds={"duckdb"},
          description="leaderboard.reference_models: the reference model of each pool (config; a user pool's own) "
                      "and whether its responses are loaded")
def reference_models(context: dg.AssetExecutionContext, config: ReferenceModelsConfig, usl_home: UslHome,
                     warehouse: Warehouse) -> dg.MaterializeResult:
    require_tables(warehouse, "responses.responses")
    pool_models = warehouse.query("SELECT DISTINCT pool, model FROM responses.responses")
    own = {name: record.reference_model for name, record in user_pools.registered_pools(usl_home.root()).items()
           if record.reference_model}
    table = ranking.reference_models_table({**own, **config.reference_models}, pool_models)
    for row in table[~table["reference_present"]].itertuples():
        context.log.warning(f"pool {row.pool}: reference model {row.reference_model!r} has no responses; "
                            "the pool gets Bradley–Terry ratings only (set reference_models in the asset config)")
    warehouse.replace_table("leaderboard.reference_models", table, "reference model per pool for the USL score")
    return dg.MaterializeResult(metadata={**warehouse.table_metadata("leaderboard.reference_models"),
                                          "reference_models": markdown(table)})


@dg.asset_check(asset=reference_models, pool=WAREHOUSE_POOL,
                description="every pool's reference model has responses (else that pool has no USL score)")
def reference_models_present(warehouse: Warehouse) -> dg.AssetCheckResult:
    table = warehouse.read_table("leaderboard.reference_models")
    missing = table[~table["reference_present"]]
    return dg.AssetCheckResult(passed=missing.empty, severity=dg.AssetCheckSeverity.WARN,
                               metadata={"pools_without_reference": dg.MetadataValue.int(len(missing)),
                                         "reference_models": markdown(table)})


@dg.asset_check(asset=dg.AssetKey("unranked_rewards"), pool=WAREHOUSE_POOL,
                description="rewards left off the leaderboard, counted by reason (warning when there are any)")
def unranked_rewards_by_reason(warehouse: Warehouse) -> dg.AssetCheckResult:
    by_reason = warehouse.query("SELECT reason, count(*) AS rewards FROM leaderboard.unranked_rewards "
                                "GROUP BY reason ORDER BY rewards DESC")
    return dg.AssetCheckResult(passed=by_reason.empty, severity=dg.AssetCheckSeverity.WARN, metadata={
        "unranked": dg.MetadataValue.int(int(by_reason["rewards"].sum())), "by_reason": markdown(by_reason)})


def calibrated_temperature(warehouse: Warehouse, checkpoints: set[str]) -> float:
    """usl_soft's k for the checkpoint that scored the rewards; fails when it was calibrated for another one."""
    if not warehouse.table_exists("crm.calibration"):
        raise dg.Failure("crm.calibration is missing: materialize crm_evaluation first")
    calibration = warehouse.read_table("crm.calibration")
    found = calibration[calibration["checkpoint_id"].isin(checkpoints)] if checkpoints else calibration
    if found.empty:
        raise dg.Failure(f"crm.calibration has no row for the scoring checkpoint(s) {sorted(checkpoints)}: "
                         "rematerialize crm_evaluation and the scoring partitions with the same CRM")
    return float(found["temperature"].iloc[0])


class RankingConfig(dg.Config):
    usl_bootstrap_rounds: int = Field(default=1000, description="bootstrap resamples of prompts for the USL score")
    bt_bootstrap_rounds: int = Field(default=200, description="bootstrap resamples for Bradley–Terry (one fit each)")
    confidence: float = Field(default=0.95, description="interval coverage")
    seed: int = 0
    min_coverage: float = Field(default=ranking.MIN_COVERAGE, description="share of the pool's scored prompts a "
                                "model needs rewards for to be ranked; the others → leaderboard.unranked_models")


def ranking_setup(warehouse: Warehouse, config: RankingConfig):
    """The unranked models and the settings both ranking assets share."""
    unranked = ranking.unranked_models(warehouse.read_table("leaderboard.model_coverage"), config.min_coverage)
    settings = ranking.BootstrapSettings(config.usl_bootstrap_rounds, config.bt_bootstrap_rounds,
                                         config.confidence, config.seed)
    return unranked, settings


@dg.asset(group_name=GROUP, deps=["pairwise_comparisons", "model_coverage"], pool=WAREHOUSE_POOL,
          kinds={"duckdb", "python"},
          description="leaderboard.bradley_terry: Bradley–Terry ratings per pool × profile × topic with bootstrap "
                      "intervals, one joint fit of every ranked model (so it is refit by `usl run` and the nightly "
                      "schedule, not after each added model: see leaderboards_after_model_job)")
def bradley_terry_ratings(context: dg.AssetExecutionContext, config: RankingConfig,
                          warehouse: Warehouse) -> dg.MaterializeResult:
    unranked, settings = ranking_setup(warehouse, config)
    # One pool × profile slice in memory at a time: the whole table is prompts × model pairs × profiles (30 models
    # on 10,000 prompts alone: 30 million rows). Each slice's fit is seeded by its own key, so the result is the same.
    slices = warehouse.query("SELECT DISTINCT pool, profile FROM leaderboard.pairwise_comparisons "
                             "ORDER BY pool, profile")
    started, pairs_done, parts = time.perf_counter(), 0, []
    context.log.info(f"fitting Bradley–Terry on {len(slices)} pool × profile slices")
    for done, (pool, profile) in enumerate(slices.itertuples(index=False), start=1):
        pairs = ranking.only_ranked(warehouse.query(
            "SELECT * FROM leaderboard.pairwise_comparisons WHERE pool = ? AND profile = ?", [pool, profile]),
            unranked, "model_a", "model_b")
        parts.append(ranking.bradley_terry_table(pairs, settings))
        pairs_done += len(pairs)
        elapsed = time.perf_counter() - started
        context.log.info(f"fitted {done}/{len(slices)} pool × profile slices, every topic ({elapsed:.1f} s, "
                         f"{pairs_done / elapsed:,.0f} model pairs/s)")
    table = pd.concat(parts, ignore_index=True) if parts else ranking.empty_rankings()
    warehouse.replace_table("leaderboard.bradley_terry", table, "Bradley–Terry ratings with 95% intervals")
    models = table[table["scenario"] == "all"].groupby("pool")["model"].nunique()
    return dg.MaterializeResult(metadata={
        **warehouse.table_metadata("leaderboard.bradley_terry"),
        "seconds": dg.MetadataValue.float(round(time.perf_counter() - started, 2)),
        "models_per_pool": dg.MetadataValue.json({str(k): int(v) for k, v in models.items()})})


@dg.asset_check(asset=bradley_terry_ratings, pool=WAREHOUSE_POOL,
                description="finite ratings and intervals, one row per model and topic, ranks between 1 and the "
                            "model count")
def bradley_terry_well_formed(warehouse: Warehouse) -> dg.AssetCheckResult:
    counts = warehouse.query("""
        SELECT
            count(*) FILTER (WHERE NOT (isfinite(score) AND isfinite(ci_low) AND isfinite(ci_high))) AS not_finite,
            count(*) FILTER (WHERE rank < 1 OR rank > models) AS bad_rank,
            count(*) - count(DISTINCT (pool, profile, level, scenario, model)) AS duplicates
        FROM (SELECT *, count(*) OVER (PARTITION BY pool, profile, level, scenario) AS models
              FROM leaderboard.bradley_terry)
    """).iloc[0]
    return dg.AssetCheckResult(passed=int(counts.sum()) == 0,
                               metadata={name: dg.MetadataValue.int(int(value)) for name, value in counts.items()})


@dg.asset(group_name=GROUP, deps=["reference_comparisons", "model_coverage", "crm_evaluation", bradley_terry_ratings],
          pool=WAREHOUSE_POOL, kinds={"duckdb", "python"},
          description="leaderboard.rankings: usl_soft (default), usl, usl_lc and Bradley–Terry per pool × profile × "
                      "topic (all, scenario group, scenario) with bootstrap intervals and overlap-tied ranks, for "
                      "models with enough coverage (usl_soft's temperature from crm.calibration); the per-model "
                      "methods are recomputed only for models whose comparisons changed (leaderboard.ranking_inputs)"
                      ", Bradley–Terry is copied from leaderboard.bradley_terry; leaderboard.unranked_models: the "
                      "models left off, with the reason")
def rankings(context: dg.AssetExecutionContext, config: RankingConfig, warehouse: Warehouse) -> dg.MaterializeResult:
    unranked, settings = ranking_setup(warehouse, config)
    for row in unranked.itertuples():  # logged here only: rankings writes leaderboard.unranked_models
        context.log.warning(f"{row.pool}/{row.model} not ranked: {row.reason}")
    warehouse.replace_table("leaderboard.unranked_models", unranked, "models left off the rankings, with the reason")
    reference_wins = ranking.only_ranked(warehouse.read_table("leaderboard.reference_comparisons"), unranked,
                                         "model")
    started = time.perf_counter()
    context.log.info(f"ranking {len(reference_wins):,} reference comparisons")

    def progress(done: int, total: int, recomputed: int) -> None:
        elapsed = time.perf_counter() - started
        context.log.info(f"ranked {done}/{total} pool × profile slices, {recomputed} model(s) scored afresh in the "
                         f"last ({elapsed:.1f} s)")

    temperature = calibrated_temperature(warehouse, set(reference_wins.get("checkpoint_id", pd.Series()).dropna()))
    context.log.info(f"usl_soft temperature k = {temperature:.3f} (crm.calibration)")
    previous = [warehouse.read_table(t) if warehouse.table_exists(t) else None
                for t in ("leaderboard.rankings", "leaderboard.ranking_inputs")]
    per_model, inputs, recomputed = incremental.rank_per_model(reference_wins, settings, temperature, *previous,
                                                               progress=progress)
    bradley_terry = warehouse.read_table("leaderboard.bradley_terry")
    table = pd.concat([per_model, bradley_terry], ignore_index=True)[ranking.RANKING_COLUMNS]
    stale_bt = stale_bradley_terry(per_model, bradley_terry)
    if len(stale_bt):
        context.log.warning(f"Bradley–Terry has no rating yet for {', '.join(stale_bt)}: it is refit by `usl run` "
                            "or the nightly schedule (leaderboards_job)")
    with warehouse.transaction() as writer:  # both or neither: the fingerprints describe the rankings' rows
        writer.replace_table("leaderboard.rankings", table,
                             description="USL score and Bradley–Terry rating with 95% intervals")
        writer.replace_table("leaderboard.ranking_inputs", inputs, description="fingerprints of the comparisons "
                             "each model's per-model rankings were computed from")
    top = table[(table["profile"] == "default") & (table["scenario"] == "all")]
    return dg.MaterializeResult(metadata={
        **warehouse.table_metadata("leaderboard.rankings"),
        "seconds": dg.MetadataValue.float(round(time.perf_counter() - started, 2)),
        "models_scored_afresh": dg.MetadataValue.int(int(recomputed[["pool", "model"]].drop_duplicates().shape[0])),
        "models_reused": dg.MetadataValue.int(int(inputs[["pool", "model"]].drop_duplicates().shape[0]
                                                  - recomputed[["pool", "model"]].drop_duplicates().shape[0])),
        "bradley_terry_missing": dg.MetadataValue.text(", ".join(stale_bt) or "none"),
        "pools": dg.MetadataValue.int(int(table["pool"].nunique())),
        "profiles": dg.MetadataValue.int(int(table["profile"].nunique())),
        "default_leaderboard": markdown(top.drop(columns=["level", "scenario", "profile"]), digits=1),
        "unranked_models": markdown(unranked, digits=2),
    })


def stale_bradley_terry(per_model: pd.DataFrame, bradley_terry: pd.DataFrame) -> list[str]:
    """pool/model of ranked models that the last Bradley–Terry fit did not include."""
    ranked = set(map(tuple, per_model[["pool", "model"]].drop_duplicates().to_numpy()))
    fitted = set(map(tuple, bradley_terry[["pool", "model"]].drop_duplicates().to_numpy()))
    pools = {pool for pool, _ in fitted}
    return sorted(f"{pool}/{model}" for pool, model in ranked - fitted if pool in pools)


@dg.asset_check(asset=rankings, pool=WAREHOUSE_POOL,
                description="USL scores in [0, 100] inside their intervals; ranks between 1 and the model count "
                            "(Bradley-Terry scores outside their intervals are counted, not failed: see metadata)")
def rankings_consistent(warehouse: Warehouse) -> dg.AssetCheckResult:
    counts = warehouse.query("""
        SELECT
            count(*) FILTER (WHERE method LIKE 'usl%' AND (score < 0 OR score > 100)) AS usl_out_of_range,
            count(*) FILTER (WHERE method IN ('usl', 'usl_soft') AND NOT (ci_low <= score + 1e-9 AND score <= ci_high + 1e-9))
                AS usl_outside_interval,
            count(*) FILTER (WHERE method = 'bradley_terry' AND NOT (ci_low <= score AND score <= ci_high))
                AS bt_outside_interval,
            count(*) FILTER (WHERE rank < 1 OR rank > models) AS bad_rank
        FROM (SELECT *, count(*) OVER (PARTITION BY pool, scenario, profile, method) AS models
              FROM leaderboard.rankings)
    """).iloc[0]
    failing = int(counts["usl_out_of_range"] + counts["usl_outside_interval"] + counts["bad_rank"])
    return dg.AssetCheckResult(passed=failing == 0, metadata={
        **{name: dg.MetadataValue.int(int(value)) for name, value in counts.items()},
        "bt_outside_interval_allowed": dg.MetadataValue.text(BT_OUTSIDE_INTERVAL_REASON)})


# Why a Bradley–Terry score outside its interval is reported, not failed (a USL score outside its own fails).
BT_OUTSIDE_INTERVAL_REASON = (
    "A Bradley-Terry score is the fit on all prompts, its interval the percentiles of refits on resampled prompts "
    "(ranking.py). The refits are re-centred at 1000 and shrink extreme ratings differently from the full fit, so "
    "a percentile interval need not contain the full-data fit (a known property of percentile bootstrap for a "
    "biased estimator), above all with few bootstrap rounds or few prompts. A USL score is a mean of wins, whose "
    "percentile interval always contains it: that one fails the check.")


@dg.asset(group_name=GROUP, deps=[rankings, "model_lengths"], pool=WAREHOUSE_POOL, kinds={"duckdb", "python"},
          description="leaderboard.external_validity: Spearman/Kendall of the default leaderboard and of the "
                      "mean-length baseline with LMArena 2025, Chatbot Arena 2024 and AlpacaEval 2 LC")
def external_validity(warehouse: Warehouse, data_dir: DataDir) -> dg.MaterializeResult:
    data_root = data_dir.root()
    table = validity.external_validity(
        warehouse.read_table("leaderboard.rankings"), warehouse.read_table("leaderboard.model_lengths"),
        validity.load_external_rankings(data_root), validity.load_name_map(data_root))
    warehouse.replace_table("leaderboard.external_validity", table, "agreement with external human rankings")
    return dg.MaterializeResult(metadata={**warehouse.table_metadata("leaderboard.external_validity"),
                                          "agreement": markdown(table)})


@dg.asset_check(asset=external_validity, pool=WAREHOUSE_POOL,
                description="each external ranking shares at least 3 models with some pool's leaderboard, so the "
                            "correlations are measured, not empty")
def external_validity_measured(warehouse: Warehouse) -> dg.AssetCheckResult:
    table = warehouse.read_table("leaderboard.external_validity")
    measured = table[table["method"] != "mean_length"].dropna(subset=["spearman"])
    unmeasured = sorted(set(validity.EXTERNAL_RANKINGS) - set(measured["external_ranking"]))
    return dg.AssetCheckResult(passed=not unmeasured and not table.empty, metadata={
        "unmeasured_rankings": dg.MetadataValue.text(", ".join(unmeasured) or "none"),
        "agreement": markdown(table)})


@dg.asset_check(asset=external_validity, pool=WAREHOUSE_POOL,
                description="the default USL leaderboard agrees with LMArena 2025 at least as well as ranking by "
                            "mean response length does (warning only: a small CRM may not)")
def leaderboard_beats_length_baseline(warehouse: Warehouse) -> dg.AssetCheckResult:
    table = warehouse.query(
        "SELECT pool, method, n_models, spearman FROM leaderboard.external_validity "
        "WHERE external_ranking = 'lmarena_2025' AND method IN (?, 'mean_length') AND spearman IS NOT NULL",
        [ranking.DEFAULT_METHOD])
    wide = table.pivot_table(index="pool", columns="method", values="spearman")
    ours = ranking.DEFAULT_METHOD
    comparable = wide.dropna() if {ours, "mean_length"} <= set(wide.columns) else wide.iloc[0:0]
    passed = bool(len(comparable)) and bool((comparable[ours] >= comparable["mean_length"]).all())
    return dg.AssetCheckResult(passed=passed, severity=dg.AssetCheckSeverity.WARN,
                               metadata={"spearman_with_lmarena_2025": markdown(wide.reset_index())})


@dg.asset(group_name=GROUP, deps=[rankings, "preference_analysis", "crm_evaluation"], pool=WAREHOUSE_POOL,
          kinds={"duckdb", "python"},
          description="leaderboard.contradiction_by_scenario and leaderboard.contradiction_correlations: human "
                      "disagreement per scenario vs the CRM's accuracy and the ranking change between profiles")
def contradiction_vs_leaderboard(warehouse: Warehouse) -> dg.MaterializeResult:
    require_tables(warehouse, "analysis.scenario_contradiction", "crm.evaluation_by_scenario")
    changes = validity.ranking_change(warehouse.read_table("leaderboard.rankings"))
    table = validity.contradiction_by_scenario(warehouse.read_table("analysis.scenario_contradiction"),
                                               warehouse.read_table("crm.evaluation_by_scenario"), changes)
    correlations = validity.contradiction_correlations(table)
    warehouse.replace_table("leaderboard.contradiction_by_scenario", table, "per scenario: contradiction vs CRM")
    warehouse.replace_table("leaderboard.contradiction_correlations", correlations, "Spearman across scenarios")
    chart = validity.contradiction_chart(table)
    return dg.MaterializeResult(metadata={
        **warehouse.table_metadata("leaderboard.contradiction_by_scenario"),
        "correlations": markdown(correlations),
        "chart": dg.MetadataValue.md(f"![contradiction vs leaderboard](data:image/png;base64,{chart})"),
    })


@dg.asset_check(asset=contradiction_vs_leaderboard, pool=WAREHOUSE_POOL,
                description="one row per analysed scenario; accuracies in [0, 1], ranking change in [0, 2], "
                            "correlations in [-1, 1]")
def contradiction_in_range(warehouse: Warehouse) -> dg.AssetCheckResult:
    counts = warehouse.query("""
        SELECT
            (SELECT count(*) FROM leaderboard.contradiction_by_scenario) AS scenarios,
            (SELECT count(*) - count(DISTINCT scenario) FROM leaderboard.contradiction_by_scenario) AS duplicates,
            (SELECT count(*) FROM leaderboard.contradiction_by_scenario
             WHERE crm_accuracy NOT BETWEEN 0 AND 1 OR ranking_change NOT BETWEEN 0 AND 2) AS out_of_range,
            (SELECT count(*) FROM leaderboard.contradiction_correlations
             WHERE spearman NOT BETWEEN -1 AND 1) AS bad_correlations
    """).iloc[0]
    passed = counts["scenarios"] > 0 and counts[["duplicates", "out_of_range", "bad_correlations"]].sum() == 0
    return dg.AssetCheckResult(passed=bool(passed),
                               metadata={name: dg.MetadataValue.int(int(value)) for name, value in counts.items()})


@dg.asset(group_name=GROUP, pool=WAREHOUSE_POOL, kinds={"duckdb"},
          deps=[*sql_assets, reference_models, rankings, external_validity, contradiction_vs_leaderboard,
                *audit_assets.ASSETS],
          description="a copy of the warehouse under $USL_HOME/published/ for analysts (never the file Dagster "
                      "writes)")
def published_warehouse(context: dg.AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    target = warehouse.publish()
    tables = warehouse.query("SELECT count(*) AS n FROM duckdb_tables()")["n"].iloc[0]
    context.log.info(f"published {target} ({target.stat().st_size / 1e6:.1f} MB, {tables} tables)")
    return dg.MaterializeResult(metadata={"path": dg.MetadataValue.path(str(target)),
                                          "size_mb": dg.MetadataValue.float(round(target.stat().st_size / 1e6, 2)),
                                          "tables": dg.MetadataValue.int(int(tables))})


@dg.asset_check(asset=published_warehouse, pool=WAREHOUSE_POOL,
                description="the published copy opens read-only and holds the same leaderboard tables and row "
                            "counts as the warehouse")
def published_copy_matches(warehouse: Warehouse) -> dg.AssetCheckResult:
    count_sql = "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'leaderboard' ORDER BY table_name"
    with duckdb.connect(str(warehouse.published_path()), read_only=True) as conn:
        published = {name: conn.execute(f'SELECT count(*) FROM leaderboard."{name}"').fetchone()[0]
                     for (name,) in conn.execute(count_sql).fetchall()}
    with warehouse.connect() as conn:
        live = {name: conn.execute(f'SELECT count(*) FROM leaderboard."{name}"').fetchone()[0]
                for (name,) in conn.execute(count_sql).fetchall()}
    differing = sorted(name for name in live if published.get(name) != live[name])
    return dg.AssetCheckResult(passed=not differing and bool(live), metadata={
        "leaderboard_tables": dg.MetadataValue.int(len(published)),
        "differing": dg.MetadataValue.text(", ".join(differing) or "none")})


leaderboards_job = dg.define_asset_job(
    "leaderboards_job", selection=dg.AssetSelection.groups(GROUP),
    description="rebuild every leaderboard table from the current rewards and publish the warehouse copy")

# After one new model: everything but Bradley–Terry's joint fit (its pairs grow with N², its refit with every
# model), so the rebuild costs about the new model's own scores; leaderboards_job refits it (usl run, nightly).
JOINT_FIT = dg.AssetSelection.assets("pairwise_comparisons", bradley_terry_ratings)
leaderboards_after_model_job = dg.define_asset_job(
    "leaderboards_after_model_job", selection=dg.AssetSelection.groups(GROUP) - JOINT_FIT,
    description="rebuild the leaderboards after a new model: the per-model rankings of the new model only (the "
                "others are reused), every table downstream and the published copy; Bradley–Terry waits for "
                "leaderboards_job")

# Stopped by default: the embedded profile runs no daemon and `usl run` builds everything once; a deployment
# with a daemon turns it on (UI or `dagster schedule start leaderboards_nightly`). See docs/leaderboards.md.
leaderboards_nightly = dg.ScheduleDefinition(
    name="leaderboards_nightly", job=leaderboards_job, cron_schedule="0 3 * * *", execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.STOPPED)

@dg.run_status_sensor(
    name="leaderboards_after_new_model",
    run_status=dg.DagsterRunStatus.SUCCESS,
    request_job=leaderboards_after_model_job,
    minimum_interval_seconds=15,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="When a new model's partition run from the inbox (tag usl/rebuild_leaderboards, set by "
                "model_accepted_sensor) succeeds, rebuild the leaderboards so the model is ranked; the other models' "
                "rewards are reused, not recomputed. `usl add-model` rebuilds them itself and sets no such tag.",
)
def leaderboards_after_new_model(context: dg.RunStatusSensorContext):
    tags = context.dagster_run.tags
    added = tags.get(ADDED_MODEL_TAG)
    if not added or tags.get(REBUILD_LEADERBOARDS_TAG) != "true":
        return dg.SkipReason(f"run {context.dagster_run.run_id} is not an inbox model's run (the leaderboards are "
                             "rebuilt by whoever ran it, e.g. `usl add-model`, or not at all)")
    return dg.RunRequest(run_key=f"leaderboards-after:{context.dagster_run.run_id}",
                         run_config=IN_PROCESS_EXECUTION, tags={AFTER_ADDED_MODEL_TAG: added})


defs = dg.Definitions(
    assets=[*sql_assets, reference_models, bradley_terry_ratings, rankings, external_validity,
            contradiction_vs_leaderboard, *audit_assets.ASSETS, published_warehouse],
    asset_checks=[*sql_checks, reference_models_present, bradley_terry_well_formed, rankings_consistent,
                  external_validity_measured, leaderboard_beats_length_baseline, contradiction_in_range, published_copy_matches,
                  unranked_rewards_by_reason, *audit_assets.CHECKS],
    jobs=[leaderboards_job, leaderboards_after_model_job],
    schedules=[leaderboards_nightly],
    sensors=[leaderboards_after_new_model],
)

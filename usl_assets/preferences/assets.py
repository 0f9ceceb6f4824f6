"""Dagster wiring of the preference data layer: raw files → canonical pairs → validated + quarantined."""

import time
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pandas as pd
from pydantic import Field

from usl_assets.preferences import canonical, sources, validation
from usl_assets.preferences.criteria import load_scenario_criteria, load_scenarios
from usl_assets.resources import WAREHOUSE_POOL, DataDir, Warehouse

GROUP = "preferences"
RAW_TABLES = {  # source -> (asset name, raw table)
    "autoj": ("raw_autoj_pairwise", "raw.autoj_pairwise"),
    "pandalm": ("raw_pandalm", "raw.pandalm"),
    "hh_rlhf_harmless": ("raw_hh_rlhf_harmless", "raw.hh_rlhf_harmless"),
    "alpaca_eval_judge": ("raw_alpaca_eval_judgments", "raw.alpaca_eval_judgments"),
    "user": ("raw_user_preferences", "raw.user_preferences"),
}
CANONICAL_TABLE = "staging.canonical_preferences"
VALIDATED_TABLE = "validated.preferences"
QUARANTINE_TABLE = "quality.quarantine"
CRITERIA_TABLE = "validated.scenario_criteria"


# ---------------------------------------------------------------------------------------------- raw
def land_raw(context: dg.AssetExecutionContext, warehouse: Warehouse, table: str, raw: sources.RawFile,
             path: Path | None) -> dg.MaterializeResult:
    """Write a raw table (fields as JSON) and describe it: rows, schema, file hash and size, unreadable lines."""
    types = {"row_number": "BIGINT", "raw_error": "VARCHAR", "raw_line": "VARCHAR"}
    types |= {name: "JSON" for name in raw.rows.columns if name not in types}
    canonical.write_typed_table(warehouse, table, raw.rows, types)
    unreadable = sum(raw.errors.values())
    if unreadable:
        context.log.warning(f"{table}: {unreadable} unreadable record(s) landed with raw_error: {raw.errors}")
    context.log.info(f"{table}: landed {len(raw.rows):,} rows from {path or 'no file'}")
    metadata = warehouse.table_metadata(table) | {
        "unreadable_rows": dg.MetadataValue.int(unreadable),
        "blank_lines_skipped": dg.MetadataValue.int(raw.blank_lines),
    }
    if path is None:
        metadata["source_file"] = dg.MetadataValue.text("none configured: empty table")
    else:
        facts = sources.file_facts(path)
        metadata |= {"source_file": dg.MetadataValue.path(str(path)),
                     "source_sha256": dg.MetadataValue.text(facts["sha256"]),
                     "source_size_bytes": dg.MetadataValue.int(facts["size_bytes"])}
    return dg.MaterializeResult(metadata=metadata)


def public_raw_asset(source: str, relative_file: str, read: Callable[[Path], sources.RawFile],
                     description: str) -> dg.AssetsDefinition:
    asset_name, table = RAW_TABLES[source]

    @dg.asset(name=asset_name, group_name=GROUP, pool=WAREHOUSE_POOL, kinds={"duckdb"}, description=description)
    def _raw(context: dg.AssetExecutionContext, data_dir: DataDir, warehouse: Warehouse) -> dg.MaterializeResult:
        path = data_dir.file(relative_file)
        return land_raw(context, warehouse, table, read(path), path)

    return _raw


raw_autoj_pairwise = public_raw_asset(
    "autoj", sources.AUTOJ_FILE, sources.read_jsonl_file,
    "Auto-J pairwise test set (1,392 human-labelled pairs over 58 scenarios), as it is.")
raw_pandalm = public_raw_asset(
    "pandalm", sources.PANDALM_FILE, sources.read_json_array_file,
    "PandaLM test set with three human votes per pair, as it is (some responses are JSON booleans).")
raw_hh_rlhf_harmless = public_raw_asset(
    "hh_rlhf_harmless", sources.HH_RLHF_FILE, sources.read_gzip_jsonl_file,
    "Anthropic hh-rlhf harmless-base test split (chosen/rejected dialogues), as it is.")


class JudgmentsConfig(dg.Config):
    max_prompts: int = Field(
        default=0,
        description="Keep the judgments of the first N distinct instructions of the file (every judged model on "
                    "each); 0 keeps all 805. Tests use small slices.",
    )


@dg.asset(group_name=GROUP, pool=WAREHOUSE_POOL, kinds={"duckdb"})
def raw_alpaca_eval_judgments(context: dg.AssetExecutionContext, config: JudgmentsConfig, data_dir: DataDir,
                              warehouse: Warehouse) -> dg.MaterializeResult:
    """GPT-4 Turbo's pairwise judgments of 42 models against one reference on AlpacaEval's 805 prompts (33,800
    rows), as they are: the AI-judge teacher. Its 42 models are disjoint from the response pools' models."""
    path = data_dir.file(sources.ALPACA_EVAL_JUDGE_FILE)
    raw = sources.read_gzip_jsonl_file(path)
    if config.max_prompts > 0 and "instruction" in raw.rows:
        first = list(dict.fromkeys(raw.rows["instruction"].dropna()))[: config.max_prompts]
        raw.rows = raw.rows[raw.rows["instruction"].isin(first)].reset_index(drop=True)
        context.log.info(f"slice: the judgments of the first {len(first)} instructions ({len(raw.rows):,} rows)")
    return land_raw(context, warehouse, RAW_TABLES["alpaca_eval_judge"][1], raw, path)


class UserPreferencesConfig(dg.Config):
    path: str = Field(
        default="",
        description="The user's preference JSONL (docs/user_preferences.md); empty: $USL_USER_PREFERENCES, "
                    "or no file (an empty table).",
    )


@dg.asset(group_name=GROUP, pool=WAREHOUSE_POOL, kinds={"duckdb"})
def raw_user_preferences(context: dg.AssetExecutionContext, config: UserPreferencesConfig,
                         warehouse: Warehouse) -> dg.MaterializeResult:
    """The user's own preference pairs (JSONL, docs/user_preferences.md) from config `path` or
    $USL_USER_PREFERENCES, as they are; with neither set, an empty table."""
    path = sources.user_preferences_path(config.path)
    raw = sources.read_jsonl_file(path) if path else sources.empty_raw_file()
    if path is None:
        context.log.info("no user preference file configured (config `path` or $USL_USER_PREFERENCES)")
    return land_raw(context, warehouse, RAW_TABLES["user"][1], raw, path)


# ---------------------------------------------------------------------------------------------- criteria
def scenario_criteria_frame(data_root: Path) -> pd.DataFrame:
    scenarios = load_scenarios(data_root)
    rows = [
        {"scenario": scenario, "scenario_group": scenarios.group_of(scenario),
         "description": scenarios.descriptions.get(scenario), "criterion": item.name, "content": item.content,
         "weight": item.weight, "type": item.type}
        for scenario, items in load_scenario_criteria(data_root).items()
        for item in items
    ]
    return pd.DataFrame(rows, columns=["scenario", "scenario_group", "description", "criterion", "content",
                                       "weight", "type"])


@dg.asset(group_name=GROUP, pool=WAREHOUSE_POOL, kinds={"duckdb"})
def scenario_criteria(data_dir: DataDir, warehouse: Warehouse) -> dg.MaterializeResult:
    """Auto-J's scenarios with their group, description and weighted criteria, one row per criterion."""
    frame = scenario_criteria_frame(data_dir.root())
    warehouse.replace_table(CRITERIA_TABLE, frame, "Auto-J scenario criteria, one row per criterion")
    return dg.MaterializeResult(metadata=warehouse.table_metadata(CRITERIA_TABLE) | {
        "scenarios": dg.MetadataValue.int(frame["scenario"].nunique()),
        "groups": dg.MetadataValue.int(frame["scenario_group"].nunique()),
    })


# ---------------------------------------------------------------------------------------------- canonical
@dg.asset(group_name=GROUP, pool=WAREHOUSE_POOL, kinds={"duckdb"},
          deps=[name for name, _ in RAW_TABLES.values()] + ["scenario_criteria"])
def canonical_preferences(context: dg.AssetExecutionContext, data_dir: DataDir,
                          warehouse: Warehouse) -> dg.MaterializeResult:
    """Every raw row in the canonical pair format; rows that could not be converted carry conversion_rule."""
    started = time.monotonic()
    book = canonical.CriteriaBook(data_dir.root())
    parts = []
    for source, (_, table) in RAW_TABLES.items():
        part = canonical.canonical_rows(source, warehouse.read_table(table), book)
        context.log.info(f"{source}: {len(part):,} rows converted, "
                         f"{part['conversion_rule'].notna().sum():,} not convertible")
        parts.append(part)
    frame = pd.concat(parts, ignore_index=True)
    canonical.write_typed_table(warehouse, CANONICAL_TABLE, frame, canonical.STAGING_TYPES)
    seconds = time.monotonic() - started
    rate = len(frame) / max(seconds, 1e-9)
    context.log.info(f"{len(frame):,} canonical rows in {seconds:.1f}s ({rate:,.0f} rows/s)")
    problems = frame.dropna(subset=["conversion_rule"]).groupby(["source", "conversion_rule"]).size()
    return dg.MaterializeResult(metadata=warehouse.table_metadata(CANONICAL_TABLE) | {
        "rows_by_source": dg.MetadataValue.json(frame["source"].value_counts().to_dict()),
        "not_convertible": dg.MetadataValue.md(validation.markdown_table(problems.rename("rows").reset_index())),
    })


# ---------------------------------------------------------------------------------------------- validation
@dg.multi_asset(
    specs=[
        dg.AssetSpec("validated_preferences", group_name=GROUP, kinds={"duckdb"}, deps=["canonical_preferences"],
                     description="The preference pairs that pass every rule (validated.preferences)."),
        dg.AssetSpec("preference_quarantine", group_name=GROUP, kinds={"duckdb"}, deps=["canonical_preferences"],
                     description="Rows that broke a rule, with the rule, a detail and the raw record."),
    ],
    pool=WAREHOUSE_POOL,
)
def validate_preferences(context: dg.AssetExecutionContext, warehouse: Warehouse):
    staged = warehouse.read_table(CANONICAL_TABLE)
    split = validation.split_preferences(staged)
    canonical.write_typed_table(warehouse, VALIDATED_TABLE, split.valid, canonical.CANONICAL_TYPES)
    quarantine_types = {column: "VARCHAR" for column in validation.QUARANTINE_COLUMNS}
    canonical.write_typed_table(warehouse, QUARANTINE_TABLE, split.quarantine, quarantine_types)
    counts = validation.quarantine_counts(split.quarantine)
    balance = validation.balance_by_source(staged["source"].value_counts().to_dict(), split.valid,
                                           split.quarantine)
    context.log.info(f"{len(split.valid):,} valid, {len(split.quarantine):,} quarantined of {len(staged):,}")
    yield dg.MaterializeResult(asset_key="validated_preferences", metadata={
        **warehouse.table_metadata(VALIDATED_TABLE),
        "rows_by_source": dg.MetadataValue.md(validation.markdown_table(balance)),
    })
    yield dg.MaterializeResult(asset_key="preference_quarantine", metadata={
        **warehouse.table_metadata(QUARANTINE_TABLE),
        "quarantined": dg.MetadataValue.int(len(split.quarantine)),
        "quarantined_by_rule": dg.MetadataValue.md(validation.markdown_table(counts)),
    })


def raw_readable_check(source: str) -> dg.AssetChecksDefinition:
    asset_name, table = RAW_TABLES[source]

    @dg.asset_check(asset=asset_name, name=f"{asset_name}_readable",
                    description=f"Every record of {table} was readable (unreadable ones go to quarantine: a warning).")
    def _readable(warehouse: Warehouse) -> dg.AssetCheckResult:
        found = warehouse.query(f"SELECT count(*) AS n, count(raw_error) AS unreadable, "
                                f"count(DISTINCT row_number) AS distinct_rows FROM {table}").iloc[0]
        return dg.AssetCheckResult(
            passed=bool(found["unreadable"] == 0 and found["distinct_rows"] == found["n"]),
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"rows": int(found["n"]), "unreadable_rows": int(found["unreadable"]),
                      "duplicate_row_numbers": int(found["n"] - found["distinct_rows"])},
        )

    return _readable


@dg.asset_check(asset="scenario_criteria", blocking=True,
                description="Every Auto-J scenario has criteria with text and a weight of 1-5.")
def scenario_criteria_complete(data_dir: DataDir, warehouse: Warehouse) -> dg.AssetCheckResult:
    problems = validation.criteria_problems(warehouse.read_table(CRITERIA_TABLE),
                                            set(load_scenarios(data_dir.root()).descriptions))
    return dg.AssetCheckResult(passed=not problems, metadata={
        "problems": dg.MetadataValue.md("\n".join(f"- {p}" for p in problems) or "(none)"),
    })


@dg.asset_check(asset="canonical_preferences", blocking=True,
                additional_deps=[name for name, _ in RAW_TABLES.values()],
                description="One canonical row per raw row of each source, with a unique idx.")
def canonical_preferences_complete(warehouse: Warehouse) -> dg.AssetCheckResult:
    staged = warehouse.query(f"SELECT source, count(*) AS n, count(DISTINCT idx) AS distinct_idx "
                             f"FROM {CANONICAL_TABLE} GROUP BY source").set_index("source")
    rows = []
    for source, (_, table) in RAW_TABLES.items():
        raw = int(warehouse.query(f"SELECT count(*) AS n FROM {table}")["n"].iloc[0])
        canonical_rows = int(staged["n"].get(source, 0))
        distinct = int(staged["distinct_idx"].get(source, 0))
        rows.append({"source": source, "raw": raw, "canonical": canonical_rows,
                     "ok": raw == canonical_rows == distinct})
    table = pd.DataFrame(rows)
    return dg.AssetCheckResult(passed=bool(table["ok"].all()), metadata={
        "by_source": dg.MetadataValue.md(validation.markdown_table(table)),
    })


def read_validated(warehouse: Warehouse) -> pd.DataFrame:
    return canonical.to_python_lists(warehouse.read_table(VALIDATED_TABLE))


@dg.asset_check(asset="validated_preferences", blocking=True,
                description="validated.preferences satisfies the pandera schema (validation.preferences_schema).")
def validated_preferences_pandera(warehouse: Warehouse) -> dg.AssetCheckResult:
    failures = validation.pandera_failures(read_validated(warehouse))
    by_check = failures.groupby(["column", "check"], dropna=False).size().rename("failures").reset_index()
    return dg.AssetCheckResult(passed=failures.empty, metadata={
        "failure_cases": dg.MetadataValue.int(len(failures)),
        "failures_by_check": dg.MetadataValue.md(validation.markdown_table(by_check)),
    })


@dg.asset_check(asset="validated_preferences", blocking=True,
                description="validated.preferences meets the Great Expectations suite (validation.expectation_suite).")
def validated_preferences_gx(warehouse: Warehouse) -> dg.AssetCheckResult:
    results = validation.gx_results(read_validated(warehouse))
    failed = results[~results["success"]]
    return dg.AssetCheckResult(passed=failed.empty, metadata={
        "expectations": dg.MetadataValue.int(len(results)),
        "failed_expectations": dg.MetadataValue.int(len(failed)),
        "unexpected_rows": dg.MetadataValue.int(int(results["unexpected_count"].sum())),
        "results": dg.MetadataValue.md(validation.markdown_table(results)),
    })


@dg.asset_check(asset="preference_quarantine", blocking=True,
                additional_deps=[name for name, _ in RAW_TABLES.values()] + ["validated_preferences"],
                description="Per source, raw rows = valid rows + quarantined rows: nothing dropped silently.")
def preferences_raw_balance(warehouse: Warehouse) -> dg.AssetCheckResult:
    raw_counts = {source: int(warehouse.query(f"SELECT count(*) AS n FROM {table}")["n"].iloc[0])
                  for source, (_, table) in RAW_TABLES.items()}
    balance = validation.balance_by_source(raw_counts, warehouse.read_table(VALIDATED_TABLE),
                                           warehouse.read_table(QUARANTINE_TABLE))
    return dg.AssetCheckResult(passed=bool(balance["balanced"].all()), metadata={
        "by_source": dg.MetadataValue.md(validation.markdown_table(balance)),
    })


defs = dg.Definitions(
    assets=[raw_autoj_pairwise, raw_pandalm, raw_hh_rlhf_harmless, raw_alpaca_eval_judgments, raw_user_preferences,
            scenario_criteria,
            canonical_preferences, validate_preferences],
    asset_checks=[*(raw_readable_check(source) for source in RAW_TABLES), scenario_criteria_complete,
                  canonical_preferences_complete, validated_preferences_pandera, validated_preferences_gx,
                  preferences_raw_balance],
)

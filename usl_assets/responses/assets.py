"""Dagster wiring of the responses stage: the pools' prompts, the scoring sample, one partition per model (the
inbox's sensors are in sensors.py). The logic lives in pools.py."""

import time

import dagster as dg

from usl_assets.partitions import model_partitions
from usl_assets.resources import WAREHOUSE_POOL, DataDir, UslHome, Warehouse
from usl_assets.responses import pools, sampling, tables as response_tables, user_pools
from usl_assets.responses.inbox import file_sha256

GROUP = "responses"


@dg.asset(
    group_name=GROUP,
    pool=WAREHOUSE_POOL,
    deps=[dg.AssetKey("scenario_tagger")],
    description="Every prompt of every pool (AlpacaEval instructions, MT-Bench first turns, the user pools of "
    "`usl add-pool`) with its category and the scenario tagger's scenario (a user's topic kept as given) → "
    "responses.prompts; the pools → responses.pools; user pools' rejected prompts → quality.prompt_quarantine",
)
def pool_prompts(
    context: dg.AssetExecutionContext, data_dir: DataDir, usl_home: UslHome, warehouse: Warehouse
) -> dg.MaterializeResult:
    prompts = pools.pool_prompts(data_dir.root(), usl_home.root())
    started = time.perf_counter()
    tagged = pools.tag_prompts(prompts, pools.load_scenario_tagger(usl_home.root()))
    context.log.info(f"tagged {len(prompts):,} prompts with the scenario tagger "
                     f"({len(prompts) / max(time.perf_counter() - started, 1e-9):,.0f} prompts/s)")
    registered = user_pools.registered_pools(usl_home.root())
    pool_rows = response_tables.pools_table(tagged, registered)
    quarantine = response_tables.prompt_quarantine(usl_home.root(), registered)
    with warehouse.transaction() as writer:
        writer.replace_table(response_tables.PROMPTS_TABLE, tagged,
                             description="The pools' prompts with their tagged scenario")
        writer.replace_table(response_tables.POOLS_TABLE, pool_rows,
                             description="Every response pool: the public ones and the user pools")
        writer.replace_table(response_tables.PROMPT_QUARANTINE_TABLE, quarantine,
                             description="User pools' prompts rejected at `usl add-pool`, with the rule")
        archived = response_tables.archive_removed_pools(writer, sorted(pool_rows["pool"]))
    for pool, rows in archived.items():
        context.log.info(f"pool {pool} is no longer registered: its {rows:,} responses moved to archive.responses")
    per_pool = tagged.groupby("pool").size()
    return dg.MaterializeResult(
        metadata={
            **warehouse.table_metadata(response_tables.PROMPTS_TABLE),
            "user_pools": dg.MetadataValue.int(len(registered)),
            "prompts_quarantined": dg.MetadataValue.int(len(quarantine)),
            **{f"prompts_{pool}": dg.MetadataValue.int(int(n)) for pool, n in per_pool.items()},
            "scenarios": dg.MetadataValue.int(int(tagged["scenario"].nunique())),
            "mean_tagger_confidence": dg.MetadataValue.float(float(tagged["tagger_confidence"].mean())),
            "prompts_per_group": dg.MetadataValue.md(
                tagged.groupby(["pool", "scenario_group"]).size().rename("prompts").reset_index().to_markdown(
                    index=False
                )
            ),
        }
    )


class PromptSampleConfig(dg.Config):
    # Every prompt is scored by default (the linear CRM scores a whole pool in seconds); full_pool=False scores
    # up to per_scenario prompts per (pool, scenario) instead, e.g. for the LoRA CRMs.
    per_scenario: int = sampling.DEFAULT_PER_SCENARIO
    full_pool: bool = True
    seed: int = 0


@dg.asset(
    group_name=GROUP,
    pool=WAREHOUSE_POOL,
    deps=[pool_prompts],
    description="Which prompts are scored: a seeded sample stratified by (pool, scenario), or the full pool "
    "→ responses.prompt_sample",
)
def prompt_sample(
    context: dg.AssetExecutionContext, config: PromptSampleConfig, warehouse: Warehouse
) -> dg.MaterializeResult:
    rule = sampling.SampleRule(per_scenario=config.per_scenario, full_pool=config.full_pool, seed=config.seed)
    sample = sampling.stratified_sample(warehouse.read_table(response_tables.PROMPTS_TABLE), rule)
    warehouse.replace_table(response_tables.SAMPLE_TABLE, sample, f"Prompts scored: {rule.describe()}")
    sampled = sample[sample["sampled"]].groupby("pool").size()
    context.log.info(f"{rule.describe()}: {int(sample['sampled'].sum())} of {len(sample)} prompts sampled")
    return dg.MaterializeResult(
        metadata={
            **warehouse.table_metadata(response_tables.SAMPLE_TABLE),
            "sample_rule": dg.MetadataValue.text(rule.describe()),
            **{f"sampled_{pool}": dg.MetadataValue.int(int(n)) for pool, n in sampled.items()},
        }
    )


@dg.asset(
    group_name=GROUP,
    pool=WAREHOUSE_POOL,
    deps=[pool_prompts],
    partitions_def=model_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
    description="One model's answers to its pool's prompts (partition `<pool>:<model>`) → responses.responses; "
    "bad rows → quality.response_quarantine",
)
def model_responses(
    context: dg.AssetExecutionContext, data_dir: DataDir, usl_home: UslHome, warehouse: Warehouse
) -> dg.MaterializeResult:
    if not warehouse.table_exists(response_tables.PROMPTS_TABLE):
        raise dg.Failure(f"{response_tables.PROMPTS_TABLE} is missing: materialize pool_prompts first")
    prompts = warehouse.read_table(response_tables.PROMPTS_TABLE)
    checked = []  # (key, pool, model, path, sha256): every file is read and checked before anything is written
    for key in context.partition_keys:
        pool, model = pools.split_partition_key(key)
        path = pools.model_file(data_dir.root(), usl_home.root(), pool, model)
        item = _load_or_fail(key, pool, model, path, prompts)
        checked.append((key, pool, model, path, file_sha256(path)))
        context.log.info(f"{key}: {len(item.responses)} responses, {len(item.quarantine)} quarantined")
    written = []

    def reloaded():
        """Each file read again as it is written, one model in memory at a time (a pool of 10,000 prompts and 30
        models does not fit at once); a file changed since its check fails the run and rolls the write back."""
        for key, pool, model, path, digest in checked:
            item = _load_or_fail(key, pool, model, path, prompts)
            if file_sha256(path) != digest:
                raise dg.Failure(f"partition {key}: {path} changed while the run was writing it; nothing was written")
            written.append((key, partition_metadata(item)))
            yield item

    response_tables.replace_model_rows(warehouse, reloaded())
    for key, metadata in written:
        context.add_asset_metadata(metadata, partition_key=key)
    # Shared by the run's partitions; each partition's own figures come from add_asset_metadata above.
    return dg.MaterializeResult(
        metadata={
            **warehouse.table_metadata(response_tables.RESPONSES_TABLE),
            "partitions_in_run": dg.MetadataValue.int(len(written)),
        }
    )


def _load_or_fail(key: str, pool: str, model: str, path, prompts) -> pools.ModelResponses:
    try:
        return pools.load_model_responses(pool, model, path, prompts)
    except pools.ResponseFileError as error:
        raise dg.Failure(f"partition {key}: {error}; nothing was written") from error


def partition_metadata(item: pools.ModelResponses) -> dict:
    """One partition's own figures: its rows in responses.responses and its quarantine."""
    return {
        "dagster/row_count": dg.MetadataValue.int(len(item.responses)),
        "responses_loaded": dg.MetadataValue.int(len(item.responses)),
        "rows_quarantined": dg.MetadataValue.int(len(item.quarantine)),
        "quarantine": dg.MetadataValue.md(_quarantine_summary([item])),
        "source_file": dg.MetadataValue.path(str(item.source)),
    }


def _quarantine_summary(loaded: list[pools.ModelResponses]) -> str:
    lines = ["| partition | rule | rows |", "|---|---|---|"]
    for item in loaded:
        for rule, n in item.quarantine.groupby("rule").size().items():
            lines.append(f"| {pools.partition_key(item.pool, item.model)} | {rule} | {n} |")
    return "\n".join(lines) if len(lines) > 2 else "nothing quarantined"


@dg.asset_check(asset=pool_prompts, blocking=True, description="prompt ids unique per pool; every prompt tagged")
def prompts_unique_and_tagged(warehouse: Warehouse) -> dg.AssetCheckResult:
    found = warehouse.query(
        "SELECT count(*) - count(DISTINCT (pool, prompt_id)) AS duplicates, "
        "count(*) FILTER (WHERE scenario IS NULL OR scenario_group IS NULL) AS untagged FROM responses.prompts"
    ).iloc[0]
    return dg.AssetCheckResult(
        passed=bool(found["duplicates"] == 0 and found["untagged"] == 0),
        metadata={"duplicates": int(found["duplicates"]), "untagged": int(found["untagged"])},
    )


@dg.asset_check(
    asset=prompt_sample, blocking=True,
    description="every prompt listed once, and every (pool, scenario) has at least one sampled prompt",
)
def sample_covers_every_scenario(warehouse: Warehouse) -> dg.AssetCheckResult:
    found = sampling.sample_gaps(warehouse)
    return dg.AssetCheckResult(passed=bool(sum(found.values()) == 0), metadata=found)


@dg.asset_check(asset=model_responses, blocking=True, description="one response per (pool, prompt_id, model)")
def responses_unique_per_prompt_and_model(warehouse: Warehouse) -> dg.AssetCheckResult:
    duplicates = response_tables.duplicate_responses(warehouse)
    return dg.AssetCheckResult(
        passed=duplicates.empty,
        metadata={"duplicate_keys": len(duplicates), "examples": dg.MetadataValue.md(duplicates.to_markdown())},
    )


@dg.asset_check(
    asset=model_responses, blocking=True, description="every prompt of the pool is answered or quarantined"
)
def every_prompt_answered_or_quarantined(warehouse: Warehouse) -> dg.AssetCheckResult:
    missing = response_tables.unaccounted_prompts(warehouse)
    return dg.AssetCheckResult(
        passed=missing.empty,
        metadata={"models_with_gaps": len(missing), "gaps": dg.MetadataValue.md(missing.head(20).to_markdown())},
    )


def partition_run_selection(asset_graph) -> list[dg.AssetKey]:
    """model_responses and every asset downstream of it partitioned by model (e.g. scoring's response_rewards):
    what a new model's run materializes. Unpartitioned leaderboards follow on their own schedule."""
    if asset_graph is None:
        return [model_responses.key]
    downstream = dg.AssetSelection.assets(model_responses).downstream().resolve(asset_graph)
    keys = [key for key in downstream if asset_graph.get(key).partitions_def == model_partitions]
    return sorted(set(keys) | {model_responses.key}, key=lambda k: k.to_user_string())


defs = dg.Definitions(
    assets=[pool_prompts, prompt_sample, model_responses],
    asset_checks=[prompts_unique_and_tagged, sample_covers_every_scenario, responses_unique_per_prompt_and_model,
                  every_prompt_answered_or_quarantined],
)

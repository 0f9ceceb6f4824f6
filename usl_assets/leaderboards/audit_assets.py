"""Dagster wiring of the leaderboards' audits (group `leaderboards`; logic in audits.py and fidelity.py):
`gaming_audit` (probe models built to fool the CRM must lose) and `criteria_fidelity` (a custom leaderboard under one criterion ranks by
what the criterion says). Both read the rankings and the default CRM, write one table each, and run in
leaderboards_job and leaderboards_after_model_job, upstream of published_warehouse."""

import hashlib
import json
import time

import dagster as dg
import pandas as pd
from pydantic import Field

from usl_assets.crm import properties
from usl_assets.crm.assets import materialized_default_checkpoint
from usl_assets.leaderboards import audits, fidelity, ranking
from usl_assets.leaderboards.sql_models import GROUP
from usl_assets.markdown import markdown_table
from usl_assets.resources import WAREHOUSE_POOL, UslHome, Warehouse
from usl_assets.responses.pools import content_hash
from usl_assets.scoring import score
from usl_assets.scoring.cache import EMBEDDINGS_TABLE, cached_embeddings, is_factorized
from usl_assets.settings import UslConfigError

GAMING_TABLE = "leaderboard.gaming_audit"
FIDELITY_TABLE = "leaderboard.criteria_fidelity"
GAMING_COLUMNS = [*audits.AUDIT_COLUMNS, "inputs_hash"]
FIDELITY_TABLE_COLUMNS = [*fidelity.FIDELITY_COLUMNS, "inputs_hash"]
# Part of every pool's inputs_hash: raise it when audits.py or fidelity.py changes what a pool's rows are, so none
# is reused.
AUDIT_LOGIC_VERSION = 2
UPSTREAM = ["rankings", "reference_models", "response_scores", "model_responses", "prompt_sample",
            "crm_default_checkpoint"]


def md(frame: pd.DataFrame, digits: int = 3) -> dg.MetadataValue:
    return dg.MetadataValue.md(markdown_table(frame, digits, empty="_(no rows)_"))


def require_tables(warehouse: Warehouse, *tables: str) -> None:
    missing = [table for table in tables if not warehouse.table_exists(table)]
    if missing:
        raise dg.Failure(f"{', '.join(missing)} not in the warehouse yet: materialize the upstream assets first")


def inputs_hash(*parts) -> str:
    """A fingerprint of what one pool's audit reads; frames by their content, the rest as JSON."""
    digest = hashlib.sha256(str(AUDIT_LOGIC_VERSION).encode())
    for part in parts:
        if isinstance(part, pd.DataFrame):
            digest.update(pd.util.hash_pandas_object(part.reset_index(drop=True), index=False).to_numpy().tobytes())
        else:
            digest.update(json.dumps(part, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


class PreviousRows:
    """The audit table as the last build left it: a pool whose inputs_hash is unchanged keeps its rows (after a
    new model only its own pool is audited again), the others are recomputed."""

    def __init__(self, warehouse: Warehouse, table: str):
        found = warehouse.read_table(table) if warehouse.table_exists(table) else None
        self.rows = found if found is not None and "inputs_hash" in found.columns else None
        self.reused: list[str] = []

    def get(self, pool: str, fingerprint: str, log) -> pd.DataFrame | None:
        if self.rows is None:
            return None
        kept = self.rows[(self.rows["pool"] == pool) & (self.rows["inputs_hash"] == fingerprint)]
        if kept.empty:
            return None
        log(f"{pool}: inputs unchanged since the last build: its {len(kept)} rows kept")
        self.reused.append(pool)
        return kept


def default_scorer(context: dg.AssetExecutionContext, usl_home: UslHome):
    """The default CRM: the checkpoint crm_default_checkpoint names, or $USL_HOME's default.json without one."""
    try:
        checkpoint = str(materialized_default_checkpoint(context.instance)[2])
    except UslConfigError:
        checkpoint = ""
    return score.load_scorer(usl_home.root(), checkpoint)


def audit_inputs(context: dg.AssetExecutionContext, warehouse: Warehouse, usl_home: UslHome):
    """What both audits read: the default standings, each pool's reference and default rewards, the CRM that
    scored them (failing when another one did) and usl_soft's temperature for it."""
    require_tables(warehouse, "leaderboard.rankings", "leaderboard.reference_models", "leaderboard.response_scores",
                   "responses.responses", "responses.prompt_sample")
    rankings = warehouse.query("SELECT * FROM leaderboard.rankings WHERE profile = 'default' AND scenario = 'all' "
                               "AND method = ?", [ranking.DEFAULT_METHOD])
    references = warehouse.query("SELECT pool, reference_model, reference_present FROM leaderboard.reference_models "
                                 "ORDER BY pool")
    rewards = warehouse.query("SELECT * FROM leaderboard.response_scores WHERE profile = 'default'")
    scorer = default_scorer(context, usl_home)
    problem = audits.checkpoint_problem(scorer.checkpoint_id, set(rewards["checkpoint_id"].dropna()))
    if problem:
        raise dg.Failure(problem)
    # Imported here: leaderboards/assets.py imports this module for its Definitions.
    from usl_assets.leaderboards.assets import calibrated_temperature

    temperature = calibrated_temperature(warehouse, {scorer.checkpoint_id})
    # Every pool of responses.responses; one without a usl_soft leaderboard (no reference) cannot be audited.
    present = references[references["reference_present"].astype(bool)]
    audited = {pool: model for pool, model in zip(present["pool"], present["reference_model"])
               if pool in set(rankings["pool"])}
    unaudited = sorted(set(references["pool"]) - set(audited))
    for pool in unaudited:
        context.log.warning(f"pool {pool} has no {ranking.DEFAULT_METHOD} leaderboard (no reference model with "
                            "responses, or no ranked model): it cannot be audited")
    return rankings, audited, rewards, scorer, temperature, unaudited


class GamingAuditConfig(dg.Config):
    seed: int = Field(default=0, description="seeds every choice the probes make (filler, shifts, templates)")
    usl_bootstrap_rounds: int = Field(default=1000, description="bootstrap resamples of prompts for the intervals")
    confidence: float = Field(default=0.95, description="interval coverage")
    batch_size: int = Field(default=16, description="probe answers per CRM batch")


@dg.asset(group_name=GROUP, deps=[*UPSTREAM, "criteria_profiles"], pool=WAREHOUSE_POOL, kinds={"duckdb", "python"},
          description="leaderboard.gaming_audit: per pool, five probe models built from the pool's own answers to "
                      "fool the CRM (padded, off_topic, generic, echo, truncated; crm/gaming.py's held-out bank), "
                      "scored by the default CRM and ranked with the real models by the default method; each must "
                      "land below every real model or at/below the model it derives from. The probes never "
                      "enter responses.responses or leaderboard.rankings")
def gaming_audit(context: dg.AssetExecutionContext, config: GamingAuditConfig, warehouse: Warehouse,
                 usl_home: UslHome) -> dg.MaterializeResult:
    started = time.perf_counter()
    require_tables(warehouse, "scoring.criteria_profiles")
    rankings, references, rewards, scorer, temperature, unaudited = audit_inputs(context, warehouse, usl_home)
    criteria = audits.default_criteria(warehouse.query(
        "SELECT scenario, kind, criteria FROM scoring.criteria_profiles WHERE kind = 'scenario_default'"))
    settings = ranking.BootstrapSettings(usl_rounds=config.usl_bootstrap_rounds, confidence=config.confidence,
                                         seed=config.seed)
    parts, previous = [], PreviousRows(warehouse, GAMING_TABLE)
    for pool, reference_model in references.items():
        standing = audits.default_standing(rankings, pool)
        answers = warehouse.query(audits.SAMPLED_ANSWERS, [pool])
        real = rewards[(rewards["pool"] == pool) & rewards["model"].isin(standing["model"])]
        fingerprint = inputs_hash(
            scorer.checkpoint_id, reference_model, temperature, config.model_dump(), criteria,
            standing[["model", "score"]], real[["model", "prompt_id", "reward"]].sort_values(["model", "prompt_id"]),
            answers[["model", "prompt_id", "response"]])
        kept = previous.get(pool, fingerprint, context.log.info)
        if kept is not None:
            parts.append(kept)
            continue
        parts.append(audits.audit_pool(pool, standing, reference_model, answers, real, criteria, scorer,
                                       temperature, settings, config.seed, config.batch_size, context.log.info
                                       ).assign(inputs_hash=fingerprint))
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=GAMING_COLUMNS)
    warehouse.replace_table(GAMING_TABLE, table, "probe models built to game the CRM, ranked with the real ones")
    failing = table[~table["passed"].astype(bool)]
    return dg.MaterializeResult(metadata={
        **warehouse.table_metadata(GAMING_TABLE),
        "seconds": dg.MetadataValue.float(round(time.perf_counter() - started, 2)),
        "checkpoint_id": dg.MetadataValue.text(scorer.checkpoint_id),
        "probes_failing": dg.MetadataValue.int(len(failing)),
        "pools_not_audited": dg.MetadataValue.text(", ".join(unaudited) or "none"),
        "pools_reused": dg.MetadataValue.text(", ".join(previous.reused) or "none"),
        "audit": md(table.drop(columns=["checkpoint_id", "inputs_hash"]), digits=1),
    })


@dg.asset_check(asset=gaming_audit, pool=WAREHOUSE_POOL, blocking=False,
                description="every probe of every pool lost as expected: below every real model (off_topic, generic, "
                            "echo) or at/below the model it derives from (padded, truncated)")
def gaming_audit_probes_lose(warehouse: Warehouse) -> dg.AssetCheckResult:
    table = warehouse.read_table(GAMING_TABLE)
    failing = table[~table["passed"].astype(bool)]
    return dg.AssetCheckResult(passed=bool(len(table)) and failing.empty, severity=dg.AssetCheckSeverity.ERROR,
                               metadata={
        "probes": dg.MetadataValue.int(len(table)),
        "failing": dg.MetadataValue.int(len(failing)),
        "failing_probes": md(failing[["pool", "probe", "derives_from", "expectation", "rank", "n_ranked", "score",
                                      "source_score", "lowest_real_score"]], digits=1)})


class CriteriaFidelityConfig(dg.Config):
    batch_size: int = Field(default=16, description="answers per CRM batch where a response row must be embedded")


@dg.asset(group_name=GROUP, deps=[*UPSTREAM, "response_rewards"], pool=WAREHOUSE_POOL, kinds={"duckdb", "python"},
          description="leaderboard.criteria_fidelity: per measurable property, held-out phrasing and pool, the "
                      "Spearman between the models' usl_soft point scores under that one criterion and the property "
                      "measured on their answers, beside what mean answer length alone gives (cached response rows; "
                      "nothing is written to the scoring tables)")
def criteria_fidelity(context: dg.AssetExecutionContext, config: CriteriaFidelityConfig, warehouse: Warehouse,
                      usl_home: UslHome) -> dg.MaterializeResult:
    started = time.perf_counter()
    rankings, references, _, scorer, temperature, unaudited = audit_inputs(context, warehouse, usl_home)
    phrasings = [tuple(row) for row in properties.heldout_phrasings()]
    trained = set(warehouse.query(fidelity.TRAINED_PROPERTIES)["property"]) if warehouse.table_exists(
        "crm.training_pairs") else None
    context.log.info(f"{len(phrasings)} held-out phrasings of {len({p[0] for p in phrasings})} properties, "
                     f"checkpoint {scorer.checkpoint_id}")
    parts, previous = [], PreviousRows(warehouse, FIDELITY_TABLE)
    for pool, reference_model in references.items():
        answers = audits.ranked_answers(warehouse.query, rankings, pool)
        fingerprint = inputs_hash(scorer.checkpoint_id, reference_model, temperature, phrasings,
                                  sorted(trained) if trained is not None else None,
                                  answers[["model", "prompt_id", "response"]])
        kept = previous.get(pool, fingerprint, context.log.info)
        if kept is not None:
            parts.append(kept)
            continue
        cached = None
        if is_factorized(scorer):
            hashes = [content_hash(p, r) for p, r in zip(answers["prompt"], answers["response"])]
            cached = {}
            if warehouse.table_exists(EMBEDDINGS_TABLE):
                with warehouse.connect() as conn:
                    cached = cached_embeddings(conn, scorer.checkpoint_id, hashes)
            context.log.info(f"{pool}: {len(cached):,} of {len(hashes):,} response rows cached by scoring")
        parts.append(fidelity.fidelity_pool(pool, answers, reference_model, phrasings,
                                          properties.property_value, scorer, cached, temperature, config.batch_size,
                                          context.log.info, trained).assign(inputs_hash=fingerprint))
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=FIDELITY_TABLE_COLUMNS)
    warehouse.replace_table(FIDELITY_TABLE, table, "custom leaderboards under one criterion vs the property")
    return dg.MaterializeResult(metadata={
        **warehouse.table_metadata(FIDELITY_TABLE),
        "seconds": dg.MetadataValue.float(round(time.perf_counter() - started, 2)),
        "checkpoint_id": dg.MetadataValue.text(scorer.checkpoint_id),
        "pools_not_measured": dg.MetadataValue.text(", ".join(unaudited) or "none"),
        "pools_reused": dg.MetadataValue.text(", ".join(previous.reused) or "none"),
        "by_pool": md(fidelity.fidelity_summary(table, "pool")),
        "by_pool_and_trained": md(fidelity.fidelity_summary(table, ["pool", "trained"])),
        "by_family": md(fidelity.fidelity_summary(table, "family")),
        "by_pool_and_family": md(fidelity.fidelity_summary(table, ["pool", "family"])),
    })


@dg.asset_check(asset=criteria_fidelity, pool=WAREHOUSE_POOL,
                description=f"per pool, the median Spearman of the held-out phrasings' custom leaderboards with the "
                            f"property they name is at least {fidelity.FIDELITY_FLOOR} (warning; the metadata counts "
                            f"phrasings below {fidelity.FIDELITY_LOW})")
def criteria_fidelity_median(warehouse: Warehouse) -> dg.AssetCheckResult:
    table = warehouse.read_table(FIDELITY_TABLE)
    passed, per_pool = fidelity.fidelity_verdict(table)
    return dg.AssetCheckResult(passed=passed, severity=dg.AssetCheckSeverity.WARN, metadata={
        "below_0_5": dg.MetadataValue.int(int((table["spearman"] < fidelity.FIDELITY_LOW).sum())),
        "below_0_5_also_when_decisive": dg.MetadataValue.int(int(
            (table[["spearman", "decisive_spearman"]] < fidelity.FIDELITY_LOW).all(axis=1).sum())),
        "unmeasured": dg.MetadataValue.int(int(table["spearman"].isna().sum())),
        "by_pool": md(per_pool)})


ASSETS = [gaming_audit, criteria_fidelity]
CHECKS = [gaming_audit_probes_lose, criteria_fidelity_median]

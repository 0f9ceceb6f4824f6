"""Dagster wiring of the CRM training set (logic: usl_assets/crm/data.py; rules: docs/crm_training_data.md)."""

import time

import dagster as dg
import numpy as np
import pandas as pd

from usl_assets.crm import data, judge_pairs
from usl_assets.resources import WAREHOUSE_POOL, DataDir, Warehouse
from usl_assets.settings import UslConfigError

PAIRS_TABLE = "crm.training_pairs"
EXCLUDED_TABLE = "crm.excluded_pairs"
GRADED_TABLE = "crm.graded_answers"
TAGGED_TABLE = "validated.tagged_preferences"
CRITERIA_TABLE = "validated.scenario_criteria"
_DEFAULTS = data.PairsConfig()
_JUDGE_DEFAULTS = judge_pairs.JudgePairsConfig()


class TrainingPairsConfig(dg.Config):
    seed: int = _DEFAULTS.seed
    heldout_groups: list[str] = list(_DEFAULTS.heldout_groups)
    heldout_properties: list[str] = list(_DEFAULTS.heldout_properties)
    contrastive_per_pair: int = _DEFAULTS.contrastive_per_pair
    noise_add_rate: float = _DEFAULTS.noise_add_rate
    noise_remove_rate: float = _DEFAULTS.noise_remove_rate
    noise_replace_rate: float = _DEFAULTS.noise_replace_rate
    human_heldout_fraction: float = _DEFAULTS.human_heldout_fraction
    new_criteria_fraction: float = _DEFAULTS.new_criteria_fraction
    criteria_reversed_fraction: float = _DEFAULTS.criteria_reversed_fraction
    judge_heldout_models: int = _JUDGE_DEFAULTS.heldout_models
    judge_pairs_per_model: int = _JUDGE_DEFAULTS.pairs_per_model
    judge_property_rate: float = _JUDGE_DEFAULTS.property_rate

    def judge_config(self) -> judge_pairs.JudgePairsConfig:
        if self.judge_heldout_models < 1 or self.judge_pairs_per_model < 1:
            raise UslConfigError("judge_heldout_models and judge_pairs_per_model must be at least 1")
        return judge_pairs.JudgePairsConfig(seed=self.seed, heldout_models=self.judge_heldout_models,
                                            pairs_per_model=self.judge_pairs_per_model,
                                            property_rate=self.judge_property_rate)

    def pairs_config(self) -> data.PairsConfig:
        values = {k: v for k, v in self.model_dump().items() if not k.startswith("judge_")}
        values["heldout_groups"] = tuple(values["heldout_groups"])
        values["heldout_properties"] = tuple(values["heldout_properties"])
        return data.PairsConfig(**values)


def _read_upstream(warehouse: Warehouse, table: str, asset: str) -> pd.DataFrame:
    if not warehouse.table_exists(table):
        raise UslConfigError(f"{table} is missing from {warehouse.database_path()}: materialize {asset} first")
    return warehouse.read_table(table)


def _markdown(frame: pd.DataFrame) -> dg.MetadataValue:
    return dg.MetadataValue.md(frame.to_markdown(floatfmt=".3f"))


@dg.asset(
    group_name="crm",
    deps=["tagged_preferences", "scenario_criteria"],
    kinds={"duckdb"},
    pool=WAREHOUSE_POOL,
    description="crm.training_pairs: (prompt, chosen, rejected, criteria) rows with augmentations and splits; "
    "crm.excluded_pairs: source rows that yield no row, with the reason; crm.graded_answers: the AI judge's "
    "training judgments as (prompt, model, answer, strength), for the CRM's graded-answers feature.",
)
def crm_training_pairs(context: dg.AssetExecutionContext, config: TrainingPairsConfig, data_dir: DataDir,
                       warehouse: Warehouse) -> dg.MaterializeResult:
    tagged = _read_upstream(warehouse, TAGGED_TABLE, "tagged_preferences")
    scenario_criteria = _read_upstream(warehouse, CRITERIA_TABLE, "scenario_criteria")
    pairs_config = config.pairs_config()
    pairs_config.validate(set(scenario_criteria["scenario_group"].dropna()))

    started = time.perf_counter()
    pool_texts = judge_pairs.public_response_texts(data_dir.root())
    table, excluded, graded = data.build_training_pairs(tagged, scenario_criteria, pairs_config, config.judge_config(),
                                                pool_texts)
    seconds = time.perf_counter() - started
    context.log.info(f"{len(tagged)} tagged pairs -> {len(table)} training rows, {len(excluded)} excluded "
                     f"in {seconds:.1f}s ({len(tagged) / max(seconds, 1e-9):.0f} pairs/s)")
    if len(excluded):
        context.log.warning(f"excluded source rows by reason: {excluded['reason'].value_counts().to_dict()}")

    warehouse.replace_table(PAIRS_TABLE, table, "CRM training and test pairs (docs/crm_training_data.md)")
    warehouse.replace_table(EXCLUDED_TABLE, excluded, "Preference rows that yield no CRM training row, and why")
    warehouse.replace_table(GRADED_TABLE, graded, "The AI judge's training judgments: answer and strength per "
                            "(prompt, model) (crm/graded_answers.py)")
    rules = pd.DataFrame([{"property": p.name, "qualifies when": p.rule,
                           "held out": p.name in pairs_config.heldout_properties} for p in data.PROPERTIES.values()])
    return dg.MaterializeResult(metadata={
        **warehouse.table_metadata(PAIRS_TABLE),
        "split_sizes": dg.MetadataValue.json(data.split_sizes(table)),
        "rows by source and label kind": _markdown(
            table.groupby(["source", "label_kind", "split"]).size().rename("rows").reset_index()),
        "judge_heldout_models": dg.MetadataValue.json(judge_pairs.heldout_model_names(table)),
        "rows per split x augmentation": _markdown(data.split_augmentation_counts(table)),
        "label balance per split": _markdown(data.label_balance(table)),
        "train direction balance": _markdown(data.direction_balance(table)),
        "excluded": dg.MetadataValue.int(len(excluded)),
        "graded_answers": dg.MetadataValue.int(len(graded)),
        "excluded by reason": dg.MetadataValue.json(
            {str(k): int(v) for k, v in excluded["reason"].value_counts().items()}),
        "property rules": _markdown(rules),
        "config": dg.MetadataValue.json(config.model_dump()),
    })


def _pairs(warehouse: Warehouse) -> pd.DataFrame:
    return warehouse.read_table(PAIRS_TABLE)


@dg.asset_check(asset=crm_training_pairs, blocking=True,
                description="No prompt is in train and in a test split (case and whitespace ignored).")
def training_pairs_no_prompt_leakage(warehouse: Warehouse) -> dg.AssetCheckResult:
    leaks = data.prompt_leaks(_pairs(warehouse))
    return dg.AssetCheckResult(passed=leaks.empty, metadata={
        "leaked_prompts": dg.MetadataValue.int(len(leaks)),
        "leaks_by_split": dg.MetadataValue.json({str(k): int(v) for k, v in leaks["split"].value_counts().items()}),
    })


@dg.asset_check(asset=crm_training_pairs, blocking=True, description="Every split has rows.")
def training_pairs_splits_non_empty(warehouse: Warehouse) -> dg.AssetCheckResult:
    sizes = data.split_sizes(_pairs(warehouse))
    empty = [split for split, size in sizes.items() if size == 0]
    return dg.AssetCheckResult(passed=not empty, metadata={
        **{f"rows_{split}": dg.MetadataValue.int(size) for split, size in sizes.items()},
        "empty_splits": dg.MetadataValue.json(empty),
    })


@dg.asset_check(asset=crm_training_pairs,
                description="In train, each property with >= 10 property rows has >= 40% in its minority direction.")
def training_pairs_directions_balanced(warehouse: Warehouse) -> dg.AssetCheckResult:
    balance = data.direction_balance(_pairs(warehouse))
    sized = balance[balance[["more", "less"]].sum(axis=1) >= 10]
    unbalanced = sized.index[sized["minority_share"] < 0.4].tolist()
    return dg.AssetCheckResult(passed=not sized.empty and not unbalanced, metadata={
        "balance": _markdown(balance), "unbalanced_properties": dg.MetadataValue.json(unbalanced)})


@dg.asset_check(asset=crm_training_pairs,
                description="Train labels are not one-sided: chosen is the longer response in 30-70% of rows and "
                "the human loser wins in >= 10% of the rows with a human label.")
def training_pairs_labels_two_sided(warehouse: Warehouse) -> dg.AssetCheckResult:
    balance = data.label_balance(_pairs(warehouse))
    train = balance.loc["train"] if "train" in balance.index else None
    passed = (train is not None and 0.3 <= train["chosen_is_longer"] <= 0.7
              and train["chosen_is_human_winner"] <= 0.9)
    return dg.AssetCheckResult(passed=bool(passed), metadata={"label balance per split": _markdown(balance)})


@dg.asset_check(asset=crm_training_pairs, blocking=True,
                description="crm.graded_answers is out of sample: no held-out judged model, none of the reference's "
                "answers, no prompt of a human test split, finite strengths.")
def graded_answers_out_of_sample(warehouse: Warehouse) -> dg.AssetCheckResult:
    pairs, graded = _pairs(warehouse), warehouse.read_table(GRADED_TABLE)
    held = set(judge_pairs.heldout_model_names(pairs))
    judge_tests = pairs[pairs["split"] == judge_pairs.HELDOUT_SPLIT]
    reference = set(judge_tests["chosen_model"].dropna()) & set(judge_tests["rejected_model"].dropna())
    test_prompts = data.human_test_prompts(pairs[pairs["label_kind"] == "human"])
    problems = {
        "held_out_model": int(graded["model"].isin(held).sum()),
        "reference_answer": int(graded["model"].isin(reference).sum()),
        "test_prompt": int(graded["prompt"].map(data.prompt_key).isin(test_prompts).sum()),
        "non_finite_strength": int((~np.isfinite(graded["strength"].to_numpy(float))).sum()),
    }
    metadata = {"graded_answers": len(graded), **problems}
    return dg.AssetCheckResult(passed=not any(problems.values()),
                               metadata={k: dg.MetadataValue.int(v) for k, v in metadata.items()})


defs = dg.Definitions(
    assets=[crm_training_pairs],
    asset_checks=[training_pairs_no_prompt_leakage, training_pairs_splits_non_empty, graded_answers_out_of_sample,
                  training_pairs_directions_balanced, training_pairs_labels_two_sided],
)

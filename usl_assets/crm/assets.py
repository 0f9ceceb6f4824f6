"""Dagster wiring of the CRM model stage (group `crm`): backbone conversion, the two trained checkpoints, their
evaluation against baselines, and the checks on it. The logic is in backbones/train/scorer/evaluate.py."""

import json
import time
from pathlib import Path

import dagster as dg
import duckdb
import numpy as np
import pandas as pd

from usl_assets.crm import backbones, evaluate, scorer, train
from usl_assets.crm.interface import ScoreItem
from usl_assets.resources import WAREHOUSE_POOL, UslHome, Warehouse

GROUP = "crm"
TRAINING_POOL = "crm_training"  # one training at a time: two at once would only halve each one's budget
PAIRS_TABLE = "crm.training_pairs"


class CrmSettings(dg.ConfigurableResource):
    """How the CRM is trained and which one is the default. The defaults fit `make run` on 2 CPU cores;
    `full_data=True` trains on every pair and evaluates every test pair (set the budgets up with it)."""

    backbone: str = "minilm"  # cross-encoder backbone: smollm2 | minilm | a local HF folder
    factorized_backbone: str = "minilm"  # encoder of the factorized CRM
    architecture: str = "factorized"  # the default CRM (variant `crm`): cross | factorized
    max_length: int = 256
    max_steps: int = 400
    max_minutes: float = 3.0
    batch_size: int = 8
    lr: float = 2e-4
    lora_r: int = 8
    seed: int = 0
    head_epochs: int = 40
    checkpoint_every: int = 25
    full_data: bool = False
    max_train_pairs: int = 4000  # without full_data: a seeded sample of the training pairs
    eval_pairs_per_split: int = 80  # without full_data: a seeded sample of each test split

    def train_config(self, architecture: str) -> train.TrainConfig:
        return train.TrainConfig(
            architecture=architecture, max_length=self.max_length, max_steps=self.max_steps,
            max_minutes=self.max_minutes, batch_size=self.batch_size, lr=self.lr, lora_r=self.lora_r,
            seed=self.seed, checkpoint_every=self.checkpoint_every, head_epochs=self.head_epochs,
        )

    def backbone_for(self, architecture: str) -> str:
        return self.backbone if architecture == "cross" else self.factorized_backbone

    def validate(self) -> None:
        from usl_assets.settings import UslConfigError

        if self.architecture not in scorer.ARCHITECTURES:
            raise UslConfigError(f"crm_settings.architecture must be one of {', '.join(scorer.ARCHITECTURES)}, "
                                 f"not {self.architecture!r}")
        if self.max_steps < 1 or self.max_minutes <= 0 or self.batch_size < 1:
            raise UslConfigError("crm_settings: max_steps, max_minutes and batch_size must be positive")


def read_pairs(warehouse: Warehouse, where_train: bool) -> pd.DataFrame:
    """crm.training_pairs' train rows (or test rows); retried while another process holds the DuckDB file."""
    operator = "=" if where_train else "<>"
    for attempt in range(20):
        try:
            return warehouse.query(f"SELECT * FROM {PAIRS_TABLE} WHERE split {operator} ? ORDER BY pair_id", ["train"])
        except duckdb.IOException:
            if attempt == 19:
                raise
            time.sleep(3)
    raise AssertionError("unreachable")


def sample_training_pairs(pairs: pd.DataFrame, settings: CrmSettings) -> pd.DataFrame:
    if settings.full_data or len(pairs) <= settings.max_train_pairs:
        return pairs
    return pairs.sample(n=settings.max_train_pairs, random_state=settings.seed).sort_values("pair_id")


@dg.asset(group_name=GROUP, kinds={"pytorch"})
def crm_backbone_smollm2(context: dg.AssetExecutionContext, usl_home: UslHome) -> dg.MaterializeResult:
    """SmolLM2-135M-Instruct de-quantized from the packaged GGUF into a safetensors folder with its own pad token."""
    started = time.perf_counter()
    folder = backbones.convert_smollm2(usl_home.subdir("models", "backbones"))
    context.log.info(f"converted SmolLM2 into {folder} in {time.perf_counter() - started:.0f}s")
    return dg.MaterializeResult(metadata={
        "path": dg.MetadataValue.path(str(folder)),
        "identity": backbones.resolve_backbone("smollm2", folder.parent).identity,
        "source_gguf": dg.MetadataValue.path(str(backbones.smollm2_gguf())),
        "seconds": round(time.perf_counter() - started, 1),
    })


def _train_asset(architecture: str):
    @dg.asset(
        name=f"crm_{architecture}", group_name=GROUP, deps=["crm_training_pairs"], pool=TRAINING_POOL,
        kinds={"pytorch"},
        description=f"The {architecture} CRM checkpoint under $USL_HOME/models/crm/{architecture}/<checkpoint_id>/",
    )
    def _asset(context: dg.AssetExecutionContext, usl_home: UslHome, warehouse: Warehouse,
               crm_settings: CrmSettings) -> dg.MaterializeResult:
        crm_settings.validate()
        models = usl_home.models_dir()
        pairs = sample_training_pairs(read_pairs(warehouse, where_train=True), crm_settings)
        backbone = backbones.resolve_backbone(crm_settings.backbone_for(architecture), models / "backbones")
        context.log.info(f"training {architecture} on {len(pairs)} pairs, backbone {backbone.identity}")
        result = train.train_crm(pairs, backbone, crm_settings.train_config(architecture), models / "crm",
                                 log=context.log.info)
        validation = _validate(result.checkpoint_dir, warehouse, crm_settings)
        scorer.mark_latest(models / "crm", architecture, result.checkpoint_id)
        return dg.MaterializeResult(metadata={
            "checkpoint_dir": dg.MetadataValue.path(str(result.checkpoint_dir)),
            "checkpoint_id": result.checkpoint_id,
            "backbone": backbone.identity,
            "training_pairs": len(pairs),
            "reused": result.reused,
            "resumed_from_step": result.resumed_from_step,
            "steps": result.steps,
            "pairs_per_second": round(result.pairs_per_second, 2),
            "tokens_per_second": round(result.tokens_per_second, 1),
            "final_loss": round(result.final_loss, 4),
            "peak_memory_mb": result.peak_memory_mb,
            "wall_seconds": result.wall_seconds,
            **{f"validation_{k}": v for k, v in validation.items()},
        })

    return _asset


def _validate(checkpoint_dir: Path, warehouse: Warehouse, settings: CrmSettings, n: int = 64) -> dict:
    """Accuracy on a small seeded sample of human_heldout, stored in the checkpoint's crm.json."""
    info = train.read_checkpoint_info(checkpoint_dir)
    if info.get("metrics"):
        return info["metrics"]
    held = read_pairs(warehouse, where_train=False)
    held = evaluate.sample_test_pairs(held[held["split"] == "human_heldout"], n, settings.seed)
    metrics = {"human_heldout_n": len(held)}
    if len(held):
        chosen, rejected = evaluate.pair_rewards(held, scorer.load_scorer(checkpoint_dir))
        metrics["human_heldout_accuracy"] = round(float((chosen > rejected).mean()), 4)
    info["metrics"] = metrics
    (checkpoint_dir / train.CHECKPOINT_FILE).write_text(json.dumps(info, indent=2), encoding="utf-8")
    return metrics


crm_cross = _train_asset("cross")
crm_factorized = _train_asset("factorized")


@dg.asset(group_name=GROUP, deps=[crm_cross, crm_factorized, "crm_training_pairs"], pool=WAREHOUSE_POOL,
          kinds={"duckdb", "pytorch"})
def crm_evaluation(context: dg.AssetExecutionContext, usl_home: UslHome, warehouse: Warehouse,
                   crm_settings: CrmSettings) -> dg.MaterializeResult:
    """crm.evaluation (split × variant accuracy) and crm.evaluation_by_scenario against the baselines."""
    crm_settings.validate()
    home = usl_home.root()
    crm_root = usl_home.models_dir() / "crm"
    scorer.write_default_architecture(crm_root, crm_settings.architecture)
    cap = None if crm_settings.full_data else crm_settings.eval_pairs_per_split
    pairs = evaluate.sample_test_pairs(read_pairs(warehouse, where_train=False), cap, crm_settings.seed)
    scorers = {f"crm_{arch}": scorer.load_scorer(scorer.default_checkpoint(home, arch))
               for arch in scorer.ARCHITECTURES}
    scorers["base_model"] = scorer.base_scorer(crm_settings.backbone_for(crm_settings.architecture),
                                               usl_home.models_dir() / "backbones", crm_settings.max_length,
                                               crm_settings.seed)
    default_variant = f"crm_{crm_settings.architecture}"
    started = time.perf_counter()
    results = evaluate.evaluate_variants(pairs, scorers, default_variant, scorers[default_variant],
                                         log=context.log.info)
    summary = evaluate.summarize(results)
    by_scenario = evaluate.summarize_by_scenario(results)
    warehouse.replace_table("crm.evaluation", summary, "CRM accuracy per test split and variant")
    warehouse.replace_table("crm.evaluation_by_scenario", by_scenario, "CRM accuracy per scenario and variant")
    warehouse.replace_table("crm.evaluation_pairs", results, "Per-pair rewards of every evaluated variant")
    context.log.info(f"evaluated {len(pairs)} pairs × {results['variant'].nunique()} variants "
                     f"in {time.perf_counter() - started:.0f}s")
    return dg.MaterializeResult(metadata={
        **warehouse.table_metadata("crm.evaluation"),
        "accuracy": dg.MetadataValue.md(evaluate.markdown_table(summary)) if len(summary) else "no test pairs",
        "pairs_per_split": dg.MetadataValue.json(pairs["split"].value_counts().to_dict()),
        "default_variant": default_variant,
        "by_scenario_rows": len(by_scenario),
        "seconds": round(time.perf_counter() - started, 1),
    })


def _beats_check(name: str, split: str, variant: str, baseline: str):
    @dg.asset_check(asset=crm_evaluation, name=name, description=f"{variant} beats {baseline} on {split}")
    def _check(warehouse: Warehouse) -> dg.AssetCheckResult:
        summary = warehouse.read_table("crm.evaluation")
        ours, theirs = evaluate.accuracy_of(summary, split, variant), evaluate.accuracy_of(summary, split, baseline)
        if ours is None or theirs is None:
            return dg.AssetCheckResult(passed=False, description=f"no {split} rows for {variant} or {baseline}")
        return dg.AssetCheckResult(passed=ours > theirs, metadata={variant: ours, baseline: theirs})

    return _check


crm_beats_length_on_criteria_reversed = _beats_check(
    "crm_beats_length_on_criteria_reversed", "criteria_reversed", "crm", "length_baseline")
crm_beats_no_criteria_on_criteria_reversed = _beats_check(
    "crm_beats_no_criteria_on_criteria_reversed", "criteria_reversed", "crm", "crm_no_criteria")

@dg.asset_check(asset=crm_backbone_smollm2, blocking=True,
                description="the cached SmolLM2 folder is plain safetensors, with a pad token distinct from its end "
                            "token (otherwise the reward is read at the wrong position)")
def smollm2_backbone_ready(usl_home: UslHome) -> dg.AssetCheckResult:
    folder = backbones.smollm2_dir(usl_home.models_dir() / "backbones")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    problems = [] if list(folder.glob("*.safetensors")) else ["no safetensors weights"]
    if "quantization_config" in config:
        problems.append("config still carries quantization_config")
    try:
        backbones.check_decoder_pad(folder)
    except Exception as error:  # the check reports the reason instead of failing the step
        problems.append(str(error))
    return dg.AssetCheckResult(passed=not problems, description="; ".join(problems) or "ready",
                               metadata={"pad_token_id": config.get("pad_token_id"),
                                         "eos_token_id": str(config.get("eos_token_id"))})


CHECKPOINT_FIELDS = ("checkpoint_id", "backbone", "training_data_hash", "hyperparameters")


def _checkpoint_check(architecture: str):
    @dg.asset_check(asset=f"crm_{architecture}", name=f"crm_{architecture}_checkpoint_scores", blocking=True,
                    description="the latest checkpoint records its backbone, training-data hash and "
                                "hyperparameters, loads with load_scorer, and gives finite, varied rewards on "
                                "held-out pairs")
    def _check(usl_home: UslHome, warehouse: Warehouse) -> dg.AssetCheckResult:
        folder = scorer.default_checkpoint(usl_home.root(), architecture)
        info = json.loads((Path(folder) / "crm.json").read_text(encoding="utf-8"))
        missing = [field for field in CHECKPOINT_FIELDS if not info.get(field)]
        pairs = warehouse.query("SELECT prompt, chosen, rejected, criteria FROM crm.training_pairs "
                                "WHERE split = 'human_heldout' ORDER BY pair_id LIMIT 8")
        items = [ScoreItem(p, r, tuple(c)) for p, c, pair in zip(pairs["prompt"], pairs["criteria"],
                                                                  zip(pairs["chosen"], pairs["rejected"]))
                 for r in pair]
        rewards = scorer.load_scorer(folder).score(items) if items else []
        finite = bool(len(rewards)) and bool(np.isfinite(rewards).all())
        varied = finite and float(np.ptp(rewards)) > 0
        return dg.AssetCheckResult(
            passed=not missing and finite and varied,
            description=(f"missing in crm.json: {missing}; " if missing else "")
            + ("rewards finite and varied" if varied else "rewards not finite or all equal"),
            metadata={"checkpoint_id": info.get("checkpoint_id", ""), "rewards_scored": len(rewards)},
        )

    return _check


crm_cross_checkpoint_scores = _checkpoint_check("cross")
crm_factorized_checkpoint_scores = _checkpoint_check("factorized")

defs = dg.Definitions(
    assets=[crm_backbone_smollm2, crm_cross, crm_factorized, crm_evaluation],
    asset_checks=[crm_beats_length_on_criteria_reversed, crm_beats_no_criteria_on_criteria_reversed,
                  smollm2_backbone_ready, crm_cross_checkpoint_scores, crm_factorized_checkpoint_scores],
    resources={"crm_settings": CrmSettings()},
)

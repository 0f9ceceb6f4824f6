"""Dagster wiring of the CRM model stage (group `crm`): backbone conversion, the two trained checkpoints, their
evaluation against baselines, and the checks on it. The logic is in backbones/train/scorer/evaluate.py."""

import json
import time
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd

from usl_assets.crm import backbones, checkpoints, evaluate, scorer, train
from usl_assets.crm.data_assets import GRADED_TABLE
from usl_assets.crm.interface import ScoreItem
from usl_assets.resources import WAREHOUSE_POOL, UslHome, Warehouse
from usl_assets.settings import UslConfigError

GROUP = "crm"
TRAINING_POOL = "crm_training"  # one training at a time: two at once would only halve each one's budget
PAIRS_TABLE = "crm.training_pairs"


OPTIONAL_TAG = "usl/optional"  # assets `usl run` leaves out unless asked (`usl run --neural-crm`)
# The optional neural CRMs and their backbone: a group of their own, so the UI shows them apart from the CRM `usl run`
# builds (a never-materialized asset there reads as optional, not as broken).
NEURAL_GROUP = "crm_neural_optional"


class CrmSettings(dg.ConfigurableResource):
    """How the CRM is trained and which one is the default. The defaults fit `make run` on 2 CPU cores: the
    linear CRM (all pairs, `linear_iterations` L-BFGS iterations) is the default and the only one trained; the
    LoRA architectures (factorized, cross) are one setting away (`usl run --neural-crm`). Budgets are steps;
    `max_minutes` is a safety net that fails a training, never a budget."""

    backbone: str = "minilm"  # cross-encoder backbone: smollm2 | minilm | a local HF folder
    factorized_backbone: str = "minilm"  # encoder of the factorized CRM, and the linear CRM's criteria encoder
    architecture: str = "linear"  # the default CRM (variant `crm`): linear | factorized | cross
    max_length: int = 256
    max_steps: int = 400  # LoRA steps (factorized, cross)
    linear_iterations: int = 150  # L-BFGS iterations of the linear CRM
    max_minutes: float = 30.0  # safety net per training (fails it with a clear message)
    batch_size: int = 8
    lr: float = 2e-4
    lora_r: int = 8
    seed: int = 0
    head_epochs: int = 40
    phase1_pairs: int = 1200  # factorized: pairs whose texts phase 1 embeds
    checkpoint_every: int = 25
    judge_weight: float = 0.25  # linear: weight of one AI-judge row (a human row weighs 1; docs/crm.md)
    harmless_weight: float = 0.5  # linear: weight of one hh-rlhf harmless row
    full_data: bool = False
    max_train_pairs: int = 4000  # LoRA architectures without full_data: a seeded sample of the training pairs
    eval_pairs_per_split: int = 300  # without full_data: a seeded sample of each human test split
    eval_pairs_per_judged_model: int = 50  # judge_heldout_models: a seeded sample per held-out model
    base_model_pairs_per_split: int = 80  # base_model (an untrained cross-encoder, slow): the first of each sample

    def train_config(self, architecture: str) -> train.TrainConfig:
        steps = self.linear_iterations if architecture == "linear" else self.max_steps
        return train.TrainConfig(
            architecture=architecture, max_length=self.max_length, max_steps=steps,
            max_minutes=self.max_minutes, batch_size=self.batch_size, lr=self.lr, lora_r=self.lora_r,
            seed=self.seed, checkpoint_every=self.checkpoint_every, head_epochs=self.head_epochs,
            phase1_pairs=self.phase1_pairs, judge_weight=self.judge_weight, harmless_weight=self.harmless_weight,
        )

    def backbone_for(self, architecture: str) -> str:
        return self.backbone if architecture == "cross" else self.factorized_backbone

    def validate(self) -> None:
        if self.architecture not in checkpoints.ARCHITECTURES:
            raise UslConfigError(f"crm_settings.architecture must be one of {', '.join(checkpoints.ARCHITECTURES)}, "
                                 f"not {self.architecture!r}")
        if min(self.max_steps, self.linear_iterations, self.batch_size) < 1 or self.max_minutes <= 0:
            raise UslConfigError("crm_settings: max_steps, linear_iterations, max_minutes and batch_size must be "
                                 "positive")
        if self.judge_weight < 0 or self.harmless_weight < 0:
            raise UslConfigError("crm_settings: judge_weight and harmless_weight must be >= 0")


def read_pairs(warehouse: Warehouse, where_train: bool) -> pd.DataFrame:
    """crm.training_pairs' train rows (or test rows)."""
    operator = "=" if where_train else "<>"
    return warehouse.query(f"SELECT * FROM {PAIRS_TABLE} WHERE split {operator} ? ORDER BY pair_id", ["train"])


def read_graded_answers(warehouse: Warehouse) -> pd.DataFrame | None:
    """crm.graded_answers in a fixed order (None where an older crm_training_pairs did not write it)."""
    if not warehouse.table_exists(GRADED_TABLE):
        return None
    return warehouse.query(f"SELECT prompt, model, response, strength FROM {GRADED_TABLE} ORDER BY origin_idx")


def sample_training_pairs(pairs: pd.DataFrame, settings: CrmSettings, architecture: str) -> pd.DataFrame:
    if architecture == "linear" or settings.full_data or len(pairs) <= settings.max_train_pairs:
        return pairs
    return pairs.sample(n=settings.max_train_pairs, random_state=settings.seed).sort_values("pair_id")


@dg.asset(group_name=NEURAL_GROUP, kinds={"pytorch"}, tags={OPTIONAL_TAG: "neural_crm"},
          description="SmolLM2-135M converted for the optional cross-encoder CRM (optional: `usl run --neural-crm`)")
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


TRAIN_DESCRIPTIONS = {
    "linear": "The default CRM: linear in hashed n-grams and measured features, criteria-gated, trained on every "
              "human and AI-judge pair (crm/linear.py)",
    "factorized": "LoRA-tuned MiniLM embeddings + head (optional: `usl run --neural-crm`)",
    "cross": "The paper's cross-encoder with LoRA (optional: `usl run --neural-crm`; cannot learn on 2 CPU cores)",
}


def _train_asset(architecture: str):
    @dg.asset(
        name=f"crm_{architecture}", group_name=GROUP if architecture == "linear" else NEURAL_GROUP, pool=TRAINING_POOL,
        deps=["crm_training_pairs", *([crm_backbone_smollm2] if architecture == "cross" else [])],
        kinds={"pytorch"} if architecture != "linear" else {"scipy"},
        tags={} if architecture == "linear" else {OPTIONAL_TAG: "neural_crm"},
        description=f"{TRAIN_DESCRIPTIONS[architecture]}; under $USL_HOME/models/crm/{architecture}/<checkpoint_id>/",
    )
    def _asset(context: dg.AssetExecutionContext, usl_home: UslHome, warehouse: Warehouse,
               crm_settings: CrmSettings) -> dg.MaterializeResult:
        crm_settings.validate()
        models = usl_home.models_dir()
        pairs = sample_training_pairs(read_pairs(warehouse, where_train=True), crm_settings, architecture)
        backbone = backbones.resolve_backbone(crm_settings.backbone_for(architecture), models / "backbones")
        graded = read_graded_answers(warehouse) if architecture == "linear" else None
        context.log.info(f"training {architecture} on {len(pairs)} pairs"
                         f"{f' and {len(graded)} graded answers' if graded is not None else ''}, "
                         f"backbone {backbone.identity}")
        result = train.train_crm(pairs, backbone, crm_settings.train_config(architecture), models / "crm",
                                 log=context.log.info, graded_answers=graded)
        validation = _validate(result.checkpoint_dir, warehouse, crm_settings)
        checkpoints.mark_latest(models / "crm", architecture, result.checkpoint_id)
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
    info = checkpoints.read_checkpoint_info(checkpoint_dir)
    if info.get("metrics"):
        return info["metrics"]
    held = read_pairs(warehouse, where_train=False)
    held = evaluate.sample_test_pairs(held[held["split"] == "human_heldout"], n, settings.seed)
    metrics = {"human_heldout_n": len(held)}
    if len(held):
        chosen, rejected = evaluate.pair_rewards(held, checkpoints.load_scorer(checkpoint_dir))
        metrics["human_heldout_accuracy"] = round(float((chosen > rejected).mean()), 4)
    info["metrics"] = metrics
    (checkpoint_dir / checkpoints.CHECKPOINT_FILE).write_text(json.dumps(info, indent=2), encoding="utf-8")
    return metrics


crm_linear = _train_asset("linear")
crm_cross = _train_asset("cross")
crm_factorized = _train_asset("factorized")


@dg.asset(group_name=GROUP, deps=[crm_linear, crm_factorized, crm_cross], kinds={"json"},
          description="Which checkpoint is the CRM's default: the latest of crm_settings.architecture. "
                      "crm_evaluation evaluates it and response_rewards scores the pools with it, both reading it "
                      "from this materialization's metadata; models/crm/default.json records it for the CLI and page.")
def crm_default_checkpoint(usl_home: UslHome, crm_settings: CrmSettings) -> dg.MaterializeResult:
    crm_settings.validate()
    folder = checkpoints.default_checkpoint(usl_home.root(), crm_settings.architecture)
    checkpoint_id = checkpoints.read_checkpoint_info(folder)["checkpoint_id"]
    checkpoints.write_default_architecture(usl_home.models_dir() / "crm", crm_settings.architecture, checkpoint_id)
    return dg.MaterializeResult(metadata={
        "architecture": crm_settings.architecture,
        "checkpoint_id": checkpoint_id,
        "checkpoint_dir": dg.MetadataValue.path(str(folder)),
    })


def materialized_default_checkpoint(instance: dg.DagsterInstance) -> tuple[str, str, Path]:
    """(architecture, checkpoint_id, folder) of crm_default_checkpoint's latest materialization."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=crm_default_checkpoint.key), limit=1).records
    if not records:
        raise UslConfigError("crm_default_checkpoint has never been materialized on this instance: materialize it "
                             "(usl run) before what scores with the default CRM")
    metadata = records[0].asset_materialization.metadata
    return (metadata["architecture"].value, metadata["checkpoint_id"].value,
            Path(metadata["checkpoint_dir"].value))


@dg.asset_check(asset=crm_default_checkpoint, blocking=True,
                description="the recorded default is a finished checkpoint of the recorded architecture, with the "
                            "recorded id")
def crm_default_checkpoint_is_finished(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    architecture, checkpoint_id, folder = materialized_default_checkpoint(context.instance)
    info = checkpoints.read_checkpoint_info(folder) if checkpoints.is_finished(folder) else {}
    problems = [problem for problem, bad in (
        (f"{folder} is not a finished checkpoint", not info),
        (f"crm.json says architecture {info.get('architecture')!r}",
         bool(info) and info.get("architecture") != architecture),
        (f"crm.json says checkpoint {info.get('checkpoint_id')!r}",
         bool(info) and info.get("checkpoint_id") != checkpoint_id),
    ) if bad]
    return dg.AssetCheckResult(passed=not problems, description="; ".join(problems) or "finished",
                               metadata={"architecture": architecture, "checkpoint_id": checkpoint_id})


def _finished_architectures(home: Path, default: str) -> list[str]:
    """The default architecture (required) and every other one with a finished checkpoint."""
    found = []
    for arch in checkpoints.ARCHITECTURES:
        try:
            checkpoints.default_checkpoint(home, arch)
            found.append(arch)
        except UslConfigError:  # not trained in this deployment: not evaluated
            if arch == default:
                raise
    return found


@dg.asset(group_name=GROUP, deps=[crm_linear, crm_factorized, crm_cross, crm_default_checkpoint, "crm_training_pairs",
                                  crm_backbone_smollm2], pool=WAREHOUSE_POOL, kinds={"duckdb"})
def crm_evaluation(context: dg.AssetExecutionContext, usl_home: UslHome, warehouse: Warehouse,
                   crm_settings: CrmSettings) -> dg.MaterializeResult:
    """crm.evaluation (split × variant accuracy, Spearman of held-out judged models' win rates),
    crm.evaluation_by_scenario, crm.judge_model_win_rates and crm.calibration (usl_soft's temperature), of the
    checkpoint crm_default_checkpoint names and the other finished ones. The pairs are read, the models run with no
    warehouse connection open, and the five tables are written in one transaction."""
    crm_settings.validate()
    home = usl_home.root()
    default_architecture, _, default_dir = materialized_default_checkpoint(context.instance)
    full = crm_settings.full_data
    pairs = evaluate.sample_test_pairs(read_pairs(warehouse, where_train=False),
                                       None if full else crm_settings.eval_pairs_per_split, crm_settings.seed,
                                       None if full else crm_settings.eval_pairs_per_judged_model)
    architectures = _finished_architectures(home, default_architecture)
    scorers = {f"crm_{arch}": checkpoints.load_scorer(default_dir if arch == default_architecture
                                                 else checkpoints.default_checkpoint(home, arch))
               for arch in architectures}
    if "linear" in architectures:
        scorers["crm_length_only"] = checkpoints.load_scorer(checkpoints.default_checkpoint(home, "linear"), length_only=True)
    scorers["base_model"] = scorer.base_scorer(crm_settings.backbone_for("cross"),
                                               usl_home.models_dir() / "backbones", crm_settings.max_length,
                                               crm_settings.seed)
    base_pairs = pairs.groupby("split", sort=False).head(crm_settings.base_model_pairs_per_split)
    default_variant = f"crm_{default_architecture}"
    started = time.perf_counter()
    results = evaluate.evaluate_variants(pairs, scorers, default_variant, scorers[default_variant],
                                         log=context.log.info, subsets={"base_model": base_pairs})
    summary = evaluate.summarize(results)
    by_scenario = evaluate.summarize_by_scenario(results)
    win_rates = evaluate.judge_model_win_rates(results)
    calibration = pd.DataFrame([{"checkpoint_id": scorers[default_variant].checkpoint_id,
                                 **evaluate.fit_temperature(results)}])
    with warehouse.transaction() as writer:
        for table, frame, what in (
                ("crm.evaluation", summary, "CRM accuracy per test split and variant"),
                ("crm.evaluation_by_scenario", by_scenario, "CRM accuracy per scenario and variant"),
                ("crm.evaluation_pairs", results, "Per-pair rewards of every evaluated variant"),
                ("crm.judge_model_win_rates", win_rates, "Held-out judged models: the judge's and each variant's "
                                                         "win rate against the reference"),
                ("crm.calibration", calibration, "usl_soft's temperature: P(win) = sigmoid(k * reward difference)")):
            writer.replace_table(table, frame, description=what)
    context.log.info(f"evaluated {len(pairs)} pairs × {results['variant'].nunique()} variants "
                     f"in {time.perf_counter() - started:.0f}s; usl_soft temperature {calibration['temperature'][0]:.3f}")
    return dg.MaterializeResult(metadata={
        **warehouse.table_metadata("crm.evaluation"),
        "accuracy": dg.MetadataValue.md(evaluate.markdown_table(summary)) if len(summary) else "no test pairs",
        "judge_heldout_spearman": dg.MetadataValue.json(evaluate.win_rate_spearman(win_rates)),
        "pairs_per_split": dg.MetadataValue.json(pairs["split"].value_counts().to_dict()),
        "default_variant": default_variant,
        "usl_soft_temperature": float(calibration["temperature"][0]),
        "by_scenario_rows": len(by_scenario),
        "seconds": round(time.perf_counter() - started, 1),
    })


def _beats_check(name: str, split: str, variant: str, baseline: str, blocking: bool = True):
    """A blocking check fails the run; the others warn: they are the quality bar we aim at, reported."""
    @dg.asset_check(asset=crm_evaluation, name=name, blocking=blocking,
                    description=f"{variant} beats {baseline} on {split}" + ("" if blocking else " (warning)"))
    def _check(warehouse: Warehouse) -> dg.AssetCheckResult:
        summary = warehouse.read_table("crm.evaluation")
        ours, theirs = evaluate.accuracy_of(summary, split, variant), evaluate.accuracy_of(summary, split, baseline)
        if ours is None or theirs is None:
            return dg.AssetCheckResult(passed=False, description=f"no {split} rows for {variant} or {baseline}")
        return dg.AssetCheckResult(passed=ours > theirs, metadata={variant: ours, baseline: theirs},
                                   severity=dg.AssetCheckSeverity.ERROR if blocking else dg.AssetCheckSeverity.WARN)

    return _check


crm_beats_length_on_criteria_reversed = _beats_check(
    "crm_beats_length_on_criteria_reversed", "criteria_reversed", "crm", "length_baseline")
crm_beats_no_criteria_on_criteria_reversed = _beats_check(
    "crm_beats_no_criteria_on_criteria_reversed", "criteria_reversed", "crm", "crm_no_criteria")
crm_beats_length_on_human_heldout = _beats_check(
    "crm_beats_length_on_human_heldout", "human_heldout", "crm", "length_baseline", blocking=False)
crm_beats_length_on_pandalm_majority = _beats_check(
    "crm_beats_length_on_pandalm_majority", "pandalm_majority", "crm", "length_baseline", blocking=False)
crm_beats_length_on_gaming_pairs = _beats_check(
    "crm_beats_length_on_gaming_pairs", "gaming_pairs", "crm", "length_baseline", blocking=False)
crm_beats_length_on_criteria_paraphrase = _beats_check(
    "crm_beats_length_on_criteria_paraphrase", "criteria_paraphrase", "crm", "length_baseline", blocking=False)
crm_beats_length_only_on_judge_heldout_models = _beats_check(
    "crm_beats_length_only_on_judge_heldout_models", "judge_heldout_models", "crm", "crm_length_only",
    blocking=False)
WISH_COST_TOLERANCE = 0.05  # how much lower gaming_wishes may be than gaming_pairs


@dg.asset_check(asset=crm_evaluation, blocking=False,
                description=f"a wish buys no trick: the CRM's gaming_wishes accuracy within {WISH_COST_TOLERANCE} of "
                            "its gaming_pairs accuracy (warning)")
def crm_wishes_buy_no_trick(warehouse: Warehouse) -> dg.AssetCheckResult:
    """The tricks of gaming_pairs under a wish their answers meet better (crm/gaming_pairs.py) must lose about as
    often as under the pairs' own criteria."""
    summary = warehouse.read_table("crm.evaluation")
    plain, wished = (evaluate.accuracy_of(summary, split, "crm") for split in ("gaming_pairs", "gaming_wishes"))
    if plain is None or wished is None:
        return dg.AssetCheckResult(passed=False, description="no gaming_pairs or gaming_wishes rows for crm")
    return dg.AssetCheckResult(passed=wished >= plain - WISH_COST_TOLERANCE, severity=dg.AssetCheckSeverity.WARN,
                               metadata={"gaming_pairs": plain, "gaming_wishes": wished})


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
        folder = checkpoints.default_checkpoint(usl_home.root(), architecture)
        info = json.loads((Path(folder) / "crm.json").read_text(encoding="utf-8"))
        missing = [field for field in CHECKPOINT_FIELDS if not info.get(field)]
        pairs = warehouse.query("SELECT prompt, chosen, rejected, criteria FROM crm.training_pairs "
                                "WHERE split = 'human_heldout' ORDER BY pair_id LIMIT 8")
        items = [ScoreItem(p, r, tuple(c)) for p, c, pair in zip(pairs["prompt"], pairs["criteria"],
                                                                  zip(pairs["chosen"], pairs["rejected"]))
                 for r in pair]
        rewards = checkpoints.load_scorer(folder).score(items) if items else []
        finite = bool(len(rewards)) and bool(np.isfinite(rewards).all())
        varied = finite and float(np.ptp(rewards)) > 0
        return dg.AssetCheckResult(
            passed=not missing and finite and varied,
            description=(f"missing in crm.json: {missing}; " if missing else "")
            + ("rewards finite and varied" if varied else "rewards not finite or all equal"),
            metadata={"checkpoint_id": info.get("checkpoint_id", ""), "rewards_scored": len(rewards)},
        )

    return _check


crm_linear_checkpoint_scores = _checkpoint_check("linear")
crm_cross_checkpoint_scores = _checkpoint_check("cross")
crm_factorized_checkpoint_scores = _checkpoint_check("factorized")

defs = dg.Definitions(
    assets=[crm_backbone_smollm2, crm_linear, crm_cross, crm_factorized, crm_default_checkpoint, crm_evaluation],
    asset_checks=[crm_default_checkpoint_is_finished, crm_beats_length_on_criteria_reversed,
                  crm_beats_no_criteria_on_criteria_reversed, crm_beats_length_on_human_heldout, crm_beats_length_on_pandalm_majority,
                  crm_beats_length_only_on_judge_heldout_models, crm_beats_length_on_gaming_pairs,
                  crm_beats_length_on_criteria_paraphrase, crm_wishes_buy_no_trick, smollm2_backbone_ready,
                  crm_linear_checkpoint_scores, crm_cross_checkpoint_scores, crm_factorized_checkpoint_scores],
    resources={"crm_settings": CrmSettings()},
)

"""The CRM assets materialized with tiny backbones over a small crm.training_pairs slice of real Auto-J pairs."""

import json

import dagster as dg
import pandas as pd
import pytest

from usl_assets.crm.assets import (CrmSettings, crm_backbone_smollm2, crm_beats_length_on_criteria_reversed,
                                   crm_beats_no_criteria_on_criteria_reversed, crm_cross, crm_default_checkpoint,
                                   crm_evaluation, crm_factorized, crm_linear)
from usl_assets.crm import data
from usl_assets.crm.checkpoints import default_checkpoint
from usl_assets.crm.checkpoints import load_scorer
from usl_assets_tests.crm_data_inputs import scenario_criteria_frame, tagged_preferences_frame
from usl_assets_tests.test_crm_model import autoj_pairs, tiny_encoder  # noqa: F401 (fixture)


def assert_evaluation_figures(evaluation: pd.DataFrame, pairs: pd.DataFrame) -> None:
    """crm.evaluation against crm.evaluation_pairs: each accuracy is its pairs' share of strict wins, length_baseline
    is exactly the share of pairs whose chosen answer is the longer, and the CRM follows the criteria where length
    and no criteria cannot (criteria_reversed: criteria that pick the side length would not)."""
    recomputed = pairs.groupby(["split", "variant"])["correct"].agg(n="size", accuracy="mean")
    figures = evaluation.set_index(["split", "variant"])[["n", "accuracy"]].sort_index()
    pd.testing.assert_frame_equal(figures, recomputed.loc[figures.index], check_dtype=False)
    length = pairs[pairs["variant"] == "length_baseline"]
    assert (length["correct"] == length["chosen_is_longer"].astype(bool)).all()
    accuracy = evaluation.set_index(["split", "variant"])["accuracy"]
    assert accuracy["criteria_reversed", "crm"] > accuracy["criteria_reversed", "length_baseline"]
    assert accuracy["criteria_reversed", "crm"] > accuracy["criteria_reversed", "crm_no_criteria"]


def tiny_settings(tiny_backbone, tiny_encoder, **changes) -> CrmSettings:  # noqa: F811
    base = dict(backbone=str(tiny_backbone), factorized_backbone=str(tiny_encoder), architecture="linear",
                max_length=96, max_steps=4, batch_size=4, lr=5e-3, lora_r=4, head_epochs=10, checkpoint_every=2,
                eval_pairs_per_split=12, eval_pairs_per_judged_model=4, linear_iterations=40, phase1_pairs=40,
                base_model_pairs_per_split=6)
    return CrmSettings(**{**base, **changes})


def test_crm_assets_train_every_architecture_and_evaluate_them_against_the_baselines(
        usl_env, shared_data_dir, tiny_backbone, tiny_encoder):  # noqa: F811
    tagged = tagged_preferences_frame(shared_data_dir, autoj_step=3, pandalm=40, hh=60, judge_prompts=12)
    pairs, _, graded = data.build_training_pairs(tagged, scenario_criteria_frame(shared_data_dir), data.PairsConfig())
    usl_env["warehouse"].replace_table("crm.training_pairs", pairs)
    usl_env["warehouse"].replace_table("crm.graded_answers", graded)
    resources = {**usl_env, "crm_settings": tiny_settings(tiny_backbone, "minilm")}
    result = dg.materialize(
        [crm_linear, crm_cross, crm_factorized, crm_default_checkpoint, crm_evaluation,
         crm_beats_length_on_criteria_reversed, crm_beats_no_criteria_on_criteria_reversed],
        resources=resources,
    )
    assert result.success
    cross_meta = result.asset_materializations_for_node("crm_cross")[0].metadata
    assert cross_meta["steps"].value == 4 and cross_meta["pairs_per_second"].value > 0
    assert {"final_loss", "peak_memory_mb", "tokens_per_second", "validation_human_heldout_accuracy"} <= set(
        cross_meta)
    home = usl_env["usl_home"].root()
    assert default_checkpoint(home).parent.name == "linear"
    factorized_dir = default_checkpoint(home, "factorized")
    info = json.loads((factorized_dir / "crm.json").read_text())
    assert info["training_data_hash"] and info["hyperparameters"]["max_steps"] == 4 and info["metrics"]
    linear_info = json.loads((default_checkpoint(home, "linear") / "crm.json").read_text())
    assert linear_info["hyperparameters"]["max_steps"] == 40 and linear_info["training"]["steps"] <= 40
    assert (default_checkpoint(home, "linear") / "graded_answers.npz").exists()  # crm.graded_answers reached it
    assert load_scorer(default_checkpoint(home, "cross")).architecture == "cross"

    evaluation = usl_env["warehouse"].read_table("crm.evaluation")
    assert set(evaluation["variant"]) == {"crm", "crm_linear", "crm_cross", "crm_factorized", "crm_length_only",
                                          "crm_no_criteria", "base_model", "length_baseline"}
    assert set(evaluation["split"]) == set(data.TEST_SPLITS)
    sizes = evaluation.query("variant == 'crm'").set_index("split")["n"]
    assert sizes.drop("judge_heldout_models").max() <= 12 and sizes["judge_heldout_models"] <= 4 * 8
    assert evaluation.query("variant == 'base_model'")["n"].max() == 6
    held = evaluation.query("split == 'judge_heldout_models' and variant == 'crm'")
    assert held["model_win_rate_spearman"].notna().all()
    win_rates = usl_env["warehouse"].read_table("crm.judge_model_win_rates")
    assert win_rates.query("variant == 'crm'")["model"].nunique() >= 6
    assert_evaluation_figures(evaluation, usl_env["warehouse"].read_table("crm.evaluation_pairs"))
    crm = evaluation.query("variant == 'crm'").set_index("split")["accuracy"]
    linear = evaluation.query("variant == 'crm_linear'").set_index("split")["accuracy"]
    assert crm.equals(linear)
    calibration = usl_env["warehouse"].read_table("crm.calibration")
    assert calibration["checkpoint_id"].tolist() == [linear_info["checkpoint_id"]]
    assert calibration["temperature"].iloc[0] > 0 and calibration["n"].iloc[0] >= 10
    by_scenario = usl_env["warehouse"].read_table("crm.evaluation_by_scenario")
    assert set(by_scenario.columns) >= {"scenario", "scenario_group", "variant", "n", "accuracy"}
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert set(checks) == {"crm_beats_length_on_criteria_reversed", "crm_beats_no_criteria_on_criteria_reversed"}
    reversed_length = evaluation.query("split == 'criteria_reversed' and variant == 'length_baseline'")
    assert checks["crm_beats_length_on_criteria_reversed"].metadata["length_baseline"].value == \
        reversed_length["accuracy"].iloc[0]

    again = dg.materialize([crm_cross], resources=resources)
    assert again.asset_materializations_for_node("crm_cross")[0].metadata["reused"].value is True


def test_a_bad_architecture_setting_fails_with_one_clear_line(usl_env, shared_data_dir, tiny_backbone,
                                                              tiny_encoder):  # noqa: F811
    from usl_assets.settings import UslConfigError

    usl_env["warehouse"].replace_table("crm.training_pairs", autoj_pairs(shared_data_dir, limit=6))
    resources = {**usl_env, "crm_settings": tiny_settings(tiny_backbone, tiny_encoder, architecture="both")}
    with pytest.raises(UslConfigError, match="architecture must be one of linear, factorized, cross"):
        dg.materialize([crm_cross], resources=resources)


def test_smollm2_converts_from_the_packaged_gguf_with_a_pad_token_of_its_own(usl_env):
    from transformers import AutoConfig, AutoTokenizer

    from usl_assets.crm.backbones import resolve_backbone
    from usl_assets.settings import UslConfigError

    backbones_root = usl_env["usl_home"].models_dir() / "backbones"
    # Only the asset converts: asking for the backbone before it is materialized is an error, not a conversion.
    with pytest.raises(UslConfigError, match="materialize crm_backbone_smollm2 first"):
        resolve_backbone("smollm2", backbones_root)
    assert not backbones_root.exists() or not any(backbones_root.iterdir())
    result = dg.materialize([crm_backbone_smollm2], resources=usl_env)
    assert resolve_backbone("smollm2", backbones_root).kind == "decoder"
    folder = result.asset_materializations_for_node("crm_backbone_smollm2")[0].metadata["path"].value
    tokenizer = AutoTokenizer.from_pretrained(folder)
    config = AutoConfig.from_pretrained(folder)
    assert tokenizer.pad_token == "<|pad|>" and tokenizer.pad_token_id != tokenizer.eos_token_id
    assert config.pad_token_id == tokenizer.pad_token_id and config.vocab_size >= len(tokenizer)
    assert tokenizer.chat_template and not hasattr(config, "quantization_config")

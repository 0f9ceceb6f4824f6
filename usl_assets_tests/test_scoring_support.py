"""Shared pieces of the scoring tests: real CRM checkpoints trained for a few steps (cross on the tiny Llama
backbone, factorized on MiniLM) and small upstream tables from real AlpacaEval outputs.

The responses stage's tables are written here in the contract schema (docs/contracts.md). Scenarios are assigned
round-robin from real Auto-J scenarios, plus one prompt with a scenario that has no criteria profile, so the
quarantine path is exercised.
"""

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from usl_assets.crm.backbones import resolve_backbone
from usl_assets.crm.checkpoints import default_checkpoint, write_default_architecture
from usl_assets.crm.checkpoints import load_scorer
from usl_assets.crm.train import TrainConfig, train_crm
from usl_assets.preferences.criteria import criteria_texts, load_scenarios
from usl_assets.resources import Warehouse

FIXTURE_SCENARIOS = ["open_question", "brainstorming", "code_generation", "not_a_scenario"]


def training_pairs(data_root: Path, n: int = 8) -> pd.DataFrame:
    """A few real Auto-J pairs in crm.training_pairs' shape: enough for a CRM of a couple of steps."""
    pairs = []
    with open(data_root / "preferences" / "autoj_pairwise.jsonl", encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if str(row["label"]) in ("0", "1") and len(pairs) < n:
                first, second = str(row["response 1"]), str(row["response 2"])
                chosen, rejected = (first, second) if str(row["label"]) == "0" else (second, first)
                pairs.append({"prompt": row["prompt"], "chosen": chosen, "rejected": rejected,
                              "criteria": criteria_texts(data_root, row["scenario"])[:3]})
    return pd.DataFrame(pairs)


def train_tiny_crm(data_root: Path, backbone: str, architecture: str, models_root: Path) -> Path:
    """A real CRM checkpoint (usl_assets.crm.train) with a budget of a few steps."""
    config = TrainConfig(architecture=architecture, max_length=64, max_steps=1, batch_size=4, head_epochs=2)
    pairs = training_pairs(data_root)
    return train_crm(pairs, resolve_backbone(backbone, models_root / "backbones"), config,
                     models_root / "crm", log=lambda _: None).checkpoint_dir


def alpaca_responses(data_root: Path, models: list[str], n_prompts: int) -> pd.DataFrame:
    """responses.responses rows (contract columns) for the first prompts of real AlpacaEval outputs."""
    scenarios = load_scenarios(data_root)
    rows = []
    for model in models:
        with gzip.open(data_root / "responses" / "alpaca_eval" / f"{model}.json.gz", "rt", encoding="utf-8") as f:
            outputs = json.load(f)[:n_prompts]
        for index, output in enumerate(outputs):
            scenario = FIXTURE_SCENARIOS[index % len(FIXTURE_SCENARIOS)]
            rows.append({
                "pool": "alpaca_eval", "prompt_id": f"{index:04d}", "prompt": output["instruction"], "model": model,
                "response": output["output"], "scenario": scenario, "scenario_group": scenarios.group_of(scenario),
                "category": output["dataset"], "length_chars": len(output["output"]),
                "response_hash": hashlib.sha256(output["output"].encode()).hexdigest()[:24],
            })
    return pd.DataFrame(rows)


def prompt_sample(responses: pd.DataFrame, every: int = 1) -> pd.DataFrame:
    prompts = responses[["pool", "prompt_id", "scenario"]].drop_duplicates().reset_index(drop=True)
    return prompts.assign(sampled=[i % every == 0 for i in range(len(prompts))], sample_rule=f"every {every}")


def write_upstream(warehouse: Warehouse, responses: pd.DataFrame, sample: pd.DataFrame) -> None:
    warehouse.replace_table("responses.responses", responses)
    warehouse.replace_table("responses.prompt_sample", sample)


@pytest.fixture(scope="session")
def crm_models(tmp_path_factory, shared_data_dir, tiny_backbone) -> Path:
    """$USL_HOME/models of a tiny CRM pair: cross on the tiny Llama, factorized on MiniLM (an encoder)."""
    models = tmp_path_factory.mktemp("crm_home") / "models"
    train_tiny_crm(shared_data_dir, str(tiny_backbone), "cross", models)
    train_tiny_crm(shared_data_dir, "minilm", "factorized", models)
    return models


@pytest.fixture(scope="session")
def cross_scorer(crm_models):
    return load_scorer(default_checkpoint(crm_models.parent, "cross"))


@pytest.fixture(scope="session")
def factorized_scorer(crm_models):
    return load_scorer(default_checkpoint(crm_models.parent, "factorized"))


def install_crm(crm_models: Path, usl_home_root: Path, default_architecture: str) -> None:
    """Copy the tiny checkpoints into a test's USL_HOME and pick the default architecture."""
    shutil.copytree(crm_models, usl_home_root / "models", dirs_exist_ok=True)
    write_default_architecture(usl_home_root / "models" / "crm", default_architecture)


def materialize_default_checkpoint(env: dict, instance: dg.DagsterInstance, architecture: str) -> None:
    """The asset crm_default_checkpoint (and its check) on the tiny checkpoints: what response_rewards reads."""
    from usl_assets.crm.assets import CrmSettings, crm_default_checkpoint, crm_default_checkpoint_is_finished

    result = dg.materialize([crm_default_checkpoint, crm_default_checkpoint_is_finished], instance=instance,
                            resources={**env, "crm_settings": CrmSettings(architecture=architecture)})
    assert result.success and all(check.passed for check in result.get_asset_check_evaluations())

"""`usl evaluate-crm` and `usl export-crm` through usl_assets.cli.main, with a tiny trained checkpoint."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from usl_assets.cli import main
from usl_assets.crm.backbones import resolve_backbone
from usl_assets.crm.checkpoints import mark_latest, write_default_architecture
from usl_assets.crm.train import train_crm
from usl_assets_tests.test_crm_model import autoj_pairs, tiny_config


@pytest.fixture
def trained(usl_env, shared_data_dir, tiny_backbone):
    """A tiny cross checkpoint in USL_HOME (marked latest) and crm.training_pairs in the warehouse."""
    pairs = autoj_pairs(shared_data_dir, limit=16)
    usl_env["warehouse"].replace_table("crm.training_pairs", pairs)
    crm_root = usl_env["usl_home"].models_dir() / "crm"
    backbone = resolve_backbone(str(tiny_backbone), crm_root.parent / "backbones")
    result = train_crm(pairs[pairs["split"] == "train"], backbone, tiny_config("cross", max_steps=2), crm_root,
                       log=lambda _: None)
    mark_latest(crm_root, "cross", result.checkpoint_id)
    write_default_architecture(crm_root, "cross")
    return result.checkpoint_dir, pairs


def canonical_lines(pairs: pd.DataFrame) -> list[str]:
    lines = []
    for number, row in enumerate(pairs.itertuples()):
        winner = "model_a" if number % 2 else "model_b"
        a, b = (row.chosen, row.rejected) if winner == "model_a" else (row.rejected, row.chosen)
        lines.append(json.dumps({
            "idx": f"user:{number}", "prompt": row.prompt, "human_winner": winner,
            "model_a": [{"role": "user", "content": row.prompt}, {"role": "assistant", "content": a}],
            "model_b": [{"role": "user", "content": row.prompt}, {"role": "assistant", "content": b}],
            "a_criteria": list(row.criteria) if winner == "model_a" else [],
            "b_criteria": list(row.criteria) if winner == "model_b" else [],
        }))
    return lines


def test_evaluate_crm_prints_accuracy_and_writes_per_pair_rewards(trained, tmp_path, capsys):
    checkpoint, pairs = trained
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(canonical_lines(pairs.head(6)) + ["{broken"]) + "\n")
    assert main(["evaluate-crm", "--preferences", str(path), "--checkpoint", str(checkpoint)]) == 0
    printed = capsys.readouterr().out
    assert "skipped line 7" in printed and "accuracy: " in printed
    rewards = pd.read_csv(tmp_path / "mine.rewards.csv")
    assert list(rewards["idx"]) == [f"user:{i}" for i in range(6)]
    accuracy = float(printed.split("accuracy: ")[1].split()[0])
    assert accuracy == pytest.approx(rewards["correct"].mean(), abs=1e-4)
    out = tmp_path / "rewards.jsonl"
    assert main(["evaluate-crm", "--preferences", str(path), "--out", str(out)]) == 0  # the default checkpoint
    assert len(out.read_text().splitlines()) == 6


@pytest.mark.parametrize("argv, message", [
    (["evaluate-crm", "--preferences", "/nonexistent.jsonl"], "is not a file"),
    (["evaluate-crm", "--preferences", "{file}", "--checkpoint", "/tmp"], "not a finished CRM checkpoint"),
    (["evaluate-crm", "--preferences", "{file}", "--out", "x.parquet"], "must end in .csv or .jsonl"),
])
def test_bad_arguments_get_one_clear_line(argv, message, usl_env, tmp_path, capsys):
    data = tmp_path / "prefs.jsonl"
    data.write_text("{}\n")
    assert main([a.replace("{file}", str(data)) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_export_crm_writes_a_plain_transformers_folder_and_the_paper_test_splits(trained, tmp_path, capsys):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    _, pairs = trained
    out = tmp_path / "export"
    assert main(["export-crm", str(out)]) == 0
    model = AutoModelForSequenceClassification.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    with torch.inference_mode():
        logits = model(**tokenizer(["hello"], return_tensors="pt")).logits
    assert logits.shape == (1, 1)
    rows = [json.loads(line) for line in (out / "test_splits" / "criteria_reversed.jsonl").read_text().splitlines()]
    assert len(rows) == (pairs["split"] == "criteria_reversed").sum()
    assert set(rows[0]) == {"idx", "prompt", "model_a", "model_b", "criteria", "preference"}
    assert {r["preference"] for r in rows} <= {"model_a", "model_b"}
    assert main(["export-crm", str(out)]) == 2
    assert "is not empty" in capsys.readouterr().err


def test_evaluate_crm_reads_the_test_splits_export_crm_writes(trained, tmp_path, capsys):
    from usl_assets.crm.evaluate import pair_rewards
    from usl_assets.crm.checkpoints import load_scorer

    checkpoint, pairs = trained
    out = tmp_path / "export"
    assert main(["export-crm", str(out), "--checkpoint", str(checkpoint)]) == 0
    capsys.readouterr()
    rewards_file = tmp_path / "reversed.rewards.csv"
    assert main(["evaluate-crm", "--preferences", str(out / "test_splits" / "criteria_reversed.jsonl"),
                 "--checkpoint", str(checkpoint), "--out", str(rewards_file)]) == 0
    printed = capsys.readouterr().out
    assert "skipped line" not in printed and ", 0 skipped" in printed
    # The same rewards the evaluation gives those pairs: each side scored under the pair's criteria.
    split = pairs[pairs["split"] == "criteria_reversed"]
    chosen, rejected = pair_rewards(split, load_scorer(checkpoint))
    rewards = pd.read_csv(rewards_file, dtype={"idx": str}).set_index("idx").loc[split["pair_id"]]
    a_is_chosen = (rewards["human_winner"] == "model_a").to_numpy()
    assert rewards["reward_a"].to_numpy() == pytest.approx(np.where(a_is_chosen, chosen, rejected), abs=1e-5)
    assert rewards["reward_b"].to_numpy() == pytest.approx(np.where(a_is_chosen, rejected, chosen), abs=1e-5)
    accuracy = float(printed.split("accuracy: ")[1].split()[0])
    assert accuracy == pytest.approx(float(np.mean(chosen > rejected)), abs=1e-4)

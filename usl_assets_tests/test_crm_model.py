"""The CRM's model code on tiny real-shaped backbones (a 2-layer Llama decoder, a 2-layer BERT encoder with
MiniLM's tokenizer) and small slices of the real Auto-J pairs."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from usl_assets.crm.backbones import resolve_backbone
from usl_assets.crm.evaluate import pair_rewards, read_preference_file, summarize
from usl_assets.crm.export import export_cross
from usl_assets.crm.interface import ScoreItem
from usl_assets.crm.checkpoints import load_scorer
from usl_assets.crm.train import TrainConfig, bt_loss, latest_state, train_crm
from usl_assets.preferences.criteria import criteria_texts, load_scenarios

BRIEF = "The response is brief: a few sentences at most."
THOROUGH = "The response is thorough and detailed."


def autoj_pairs(data_root: Path, limit: int = 40, step: int = 7) -> pd.DataFrame:
    """Real Auto-J non-tie pairs in crm.training_pairs' columns: every other pair goes to train, the rest to the
    test splits; each test pair also appears in criteria_reversed with length criteria that pick a side."""
    scenarios = load_scenarios(data_root)
    lines = (data_root / "preferences" / "autoj_pairwise.jsonl").read_text(encoding="utf-8").splitlines()
    rows = []
    for number, line in enumerate(lines[::step]):
        raw = json.loads(line)
        if int(raw["label"]) == 2:
            continue
        first, second = str(raw["response 1"]), str(raw["response 2"])
        chosen, rejected = (first, second) if int(raw["label"]) == 0 else (second, first)
        split = "train" if len(rows) % 2 == 0 else "human_heldout"
        base = {"origin_idx": f"autoj:{number * step}", "source": "autoj", "scenario": raw["scenario"],
                "scenario_group": scenarios.group_of(raw["scenario"]), "prompt": raw["prompt"],
                "human_label": True}
        rows.append({**base, "pair_id": f"p{number:04d}", "split": split, "chosen": chosen, "rejected": rejected,
                     "criteria": criteria_texts(data_root, raw["scenario"]), "augmentation": "original",
                     "chosen_is_longer": len(chosen) > len(rejected)})
        if split != "train" and len(first) != len(second):
            longer, shorter = (first, second) if len(first) > len(second) else (second, first)
            rows.append({**base, "pair_id": f"r{number:04d}", "split": "criteria_reversed", "chosen": shorter,
                         "rejected": longer, "criteria": [BRIEF], "augmentation": "contrastive",
                         "human_label": False, "chosen_is_longer": False})
        if len(rows) >= limit:
            break
    return pd.DataFrame(rows)


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory) -> Path:
    """A 2-layer BERT with MiniLM's tokenizer: the factorized path's encoder at test size."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from usl_assets.crm.backbones import minilm_dir

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir())
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=512)
    out = tmp_path_factory.mktemp("tiny_encoder")
    BertModel(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def pairs(shared_data_dir) -> pd.DataFrame:
    return autoj_pairs(shared_data_dir)


def tiny_config(architecture: str, **changes) -> TrainConfig:
    base = dict(architecture=architecture, max_length=96, max_steps=8, max_minutes=5.0, batch_size=4, lr=5e-3,
                lora_r=4, checkpoint_every=3, head_epochs=5, warmup_steps=2)
    return TrainConfig(**{**base, **changes})


def mean_loss(scorer, frame: pd.DataFrame) -> float:
    chosen, rejected = pair_rewards(frame, scorer)
    return float(bt_loss(torch.tensor(chosen), torch.tensor(rejected)))


def test_cross_training_reduces_the_bradley_terry_loss(tiny_backbone, pairs, tmp_path):
    train = pairs[pairs["split"] == "train"].head(8)
    backbone = resolve_backbone(str(tiny_backbone), tmp_path / "backbones")
    untrained = train_crm(train, backbone, tiny_config("cross", max_steps=1, lr=1e-9), tmp_path / "crm", log=lambda _: None)
    trained = train_crm(train, backbone, tiny_config("cross", max_steps=30), tmp_path / "crm", log=lambda _: None)
    before, after = mean_loss(load_scorer(untrained.checkpoint_dir), train), mean_loss(
        load_scorer(trained.checkpoint_dir), train)
    assert after < before - 0.05, (before, after)
    assert trained.steps == 30 and trained.pairs_seen == 120 and trained.tokens_seen > 0
    info = json.loads((trained.checkpoint_dir / "crm.json").read_text())
    assert info["backbone"]["kind"] == "decoder" and info["training_pairs"] == len(train)


def weight_files(folder: Path) -> dict[str, bytes]:
    """The trained weights of a finished LoRA checkpoint, byte for byte."""
    names = ["adapter/adapter_model.safetensors", "head.safetensors"]
    return {name: (folder / name).read_bytes() for name in names if (folder / name).exists()}


def deterministic_figures(folder: Path) -> dict:
    """crm.json without what depends on the clock or the machine's load."""
    info = json.loads((folder / "crm.json").read_text())
    training = {k: v for k, v in info["training"].items() if k not in ("wall_seconds", "peak_memory_mb")}
    return {**{k: v for k, v in info.items() if k not in ("created_at", "training")}, "training": training}


@pytest.mark.parametrize("architecture", ["cross", "factorized"])
def test_a_crashed_training_resumes_and_ends_bit_for_bit_like_an_uninterrupted_one(architecture, tiny_backbone,
                                                                                    tiny_encoder, pairs, tmp_path):
    train = pairs[pairs["split"] == "train"]
    folder = tiny_backbone if architecture == "cross" else tiny_encoder
    backbone = resolve_backbone(str(folder), tmp_path / "backbones")
    config = tiny_config(architecture, max_steps=9)
    never_stopped = train_crm(train, backbone, config, tmp_path / "uninterrupted", log=lambda _: None)
    crashed = train_crm(train, backbone, config, tmp_path / "crm", log=lambda _: None, stop_after_steps=5)
    assert not (crashed.checkpoint_dir / "crm.json").exists()
    assert latest_state(crashed.checkpoint_dir).parent.name == "step-000005"
    torch.manual_seed(12345)  # whatever the process did in between: the resume restores the generators
    resumed = train_crm(train, backbone, config, tmp_path / "crm", log=lambda _: None)
    assert resumed.resumed_from_step == 5 and resumed.steps == 9
    assert resumed.checkpoint_id == never_stopped.checkpoint_id
    assert resumed.losses == never_stopped.losses  # steps 6..9 taken after the resume, too
    assert weight_files(resumed.checkpoint_dir) == weight_files(never_stopped.checkpoint_dir)
    assert len(weight_files(resumed.checkpoint_dir)) == (1 if architecture == "cross" else 2)
    assert deterministic_figures(resumed.checkpoint_dir) == deterministic_figures(never_stopped.checkpoint_dir)
    again = train_crm(train, backbone, config, tmp_path / "crm", log=lambda _: None)
    assert again.reused and again.steps == 9


def test_a_state_left_half_written_by_a_kill_is_not_resumed_from(tiny_backbone, pairs, tmp_path):
    backbone = resolve_backbone(str(tiny_backbone), tmp_path / "backbones")
    config = tiny_config("cross", max_steps=6)
    crashed = train_crm(pairs[pairs["split"] == "train"], backbone, config, tmp_path / "crm", log=lambda _: None,
                        stop_after_steps=3)
    torn = crashed.checkpoint_dir / "intermediate" / "step-000006.partial"
    torn.mkdir()
    (torn / "state.pt").write_bytes(b"killed while torch.save was writing")
    assert latest_state(crashed.checkpoint_dir).parent.name == "step-000003"
    resumed = train_crm(pairs[pairs["split"] == "train"], backbone, config, tmp_path / "crm", log=lambda _: None)
    assert resumed.resumed_from_step == 3 and resumed.steps == 6


def test_factorized_training_reduces_loss_and_cached_scores_equal_direct_scores(tiny_encoder, pairs, tmp_path):
    train = pairs[pairs["split"] == "train"]
    backbone = resolve_backbone(str(tiny_encoder), tmp_path / "backbones")
    assert backbone.kind == "encoder"
    untrained = train_crm(train, backbone, tiny_config("factorized", max_steps=1, lr=1e-9, head_epochs=0),
                          tmp_path / "crm", log=lambda _: None)
    trained = train_crm(train, backbone, tiny_config("factorized", head_epochs=60), tmp_path / "crm",
                        log=lambda _: None)
    before = mean_loss(load_scorer(untrained.checkpoint_dir), train)
    scorer = load_scorer(trained.checkpoint_dir)
    assert mean_loss(scorer, train) < before - 0.05
    responses = list(train["chosen"])
    rows = scorer.embed_responses(list(train["prompt"]), responses)
    criteria = ("Use bullet points.",)
    cached = scorer.score_embedded(rows, scorer.embed_criteria([criteria])[0])
    direct = scorer.score([ScoreItem(p, r, criteria) for p, r in zip(train["prompt"], responses)])
    np.testing.assert_allclose(cached, direct, atol=1e-5)


@pytest.mark.parametrize("architecture", ["cross", "factorized"])
def test_batched_scores_equal_one_at_a_time(architecture, tiny_backbone, tiny_encoder, pairs, tmp_path):
    folder = tiny_backbone if architecture == "cross" else tiny_encoder
    backbone = resolve_backbone(str(folder), tmp_path / "backbones")
    result = train_crm(pairs[pairs["split"] == "train"], backbone, tiny_config(architecture, max_steps=2),
                       tmp_path / "crm", log=lambda _: None)
    scorer = load_scorer(result.checkpoint_dir)
    items = [ScoreItem(p, r, tuple(c)) for p, r, c in zip(pairs["prompt"], pairs["rejected"], pairs["criteria"])]
    batched = scorer.score(items, batch_size=5)
    alone = np.array([scorer.score([item])[0] for item in items])
    np.testing.assert_allclose(batched, alone, atol=1e-4)
    assert len(set(np.round(batched, 5))) > 1


def test_the_exported_cross_encoder_loads_with_plain_transformers(tiny_backbone, pairs, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    backbone = resolve_backbone(str(tiny_backbone), tmp_path / "backbones")
    result = train_crm(pairs[pairs["split"] == "train"], backbone, tiny_config("cross", max_steps=3, max_length=256),
                       tmp_path / "crm", log=lambda _: None)
    out = export_cross(result.checkpoint_dir, tmp_path / "export")
    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.chat_template and (out / "model.safetensors").exists()
    described = json.loads((out / "usl_crm.json").read_text())
    assert described["kind"] == "decoder" and "chat template" in described["input"]
    assert described["truncation"]["max_tokens"] == {"system": 85, "history": 42, "prompt": 42}
    assert "max_length // 3" in described["truncation"]["rule"]
    item = ScoreItem("Name a prime number.", "Seven is a prime number.", ("Be concise.",))
    from usl_assets.crm.model import system_message

    text = tokenizer.apply_chat_template([{"role": "system", "content": system_message(item.criteria)},
                                          {"role": "user", "content": item.prompt},
                                          {"role": "assistant", "content": item.response}], tokenize=False)
    with torch.inference_mode():
        plain = model(**tokenizer(text, return_tensors="pt", add_special_tokens=False)).logits[0, 0].item()
    ours = load_scorer(result.checkpoint_dir).score([item])[0]
    assert plain == pytest.approx(float(ours), abs=1e-4)


def test_equal_scores_count_as_wrong_and_shorter_preferred_is_reported():
    results = pd.DataFrame({
        "split": ["s"] * 4, "variant": ["v"] * 4, "chosen_is_longer": [True, True, False, False],
        "correct": [True, False, True, False],
    })
    summary = summarize(results)
    assert summary.loc[0, "accuracy"] == 0.5 and summary.loc[0, "accuracy_shorter_preferred"] == 0.5
    from usl_assets.crm.evaluate import per_pair_results

    frame = pd.DataFrame({"pair_id": ["a"], "split": ["s"], "scenario": ["x"], "scenario_group": ["g"],
                          "chosen_is_longer": [False]})
    assert not per_pair_results(frame, "v", np.array([1.0]), np.array([1.0]))["correct"].iloc[0]


def test_a_preference_file_with_bad_lines_keeps_the_good_ones_and_says_why(tmp_path, shared_data_dir):
    from usl_assets.preferences.canonical import CriteriaBook

    good = {"idx": "u:1", "prompt": "Hi", "human_winner": "model_b", "a_criteria": [], "b_criteria": ["Be brief."],
            "model_a": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there!"}],
            "model_b": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hi."}]}
    paper = {"idx": "p:1", "model_a": good["model_a"], "model_b": good["model_b"], "preference": "model_a",
             "criteria": ["Be warm."]}  # docs/user_preferences.md's format, as export-crm writes the test splits
    by_scenario = {k: v for k, v in paper.items() if k != "criteria"} | {"scenario": "chitchat"}
    path = tmp_path / "prefs.jsonl"
    path.write_text("\n".join([json.dumps(good), "{not json", json.dumps({**good, "human_winner": "both"}),
                               json.dumps({k: v for k, v in good.items() if k != "model_a"}), json.dumps(paper),
                               json.dumps(by_scenario), json.dumps([1, 2])]) + "\n")
    pairs, quarantined = read_preference_file(path, CriteriaBook(shared_data_dir))
    assert [p["criteria"] for p in pairs] == [("Be brief.",), ("Be warm.",),
                                              tuple(criteria_texts(shared_data_dir, "chitchat"))]
    assert pairs[1]["prompt"] == "Hi" and pairs[1]["human_winner"] == "model_a" and pairs[2]["criteria"]
    assert [q["line"] for q in quarantined] == [2, 3, 4, 7]
    assert "human_winner" in quarantined[1]["reason"] and "model_a" in quarantined[2]["reason"]
    assert "not_an_object" in quarantined[3]["reason"]


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_long_criteria_leave_the_prompt_and_the_response_their_share_of_the_input(kind, tiny_backbone,
                                                                                  tiny_encoder, shared_data_dir):
    from transformers import AutoTokenizer

    from usl_assets.crm.model import encode_cross, input_budget, system_message

    tokenizer = AutoTokenizer.from_pretrained(tiny_encoder if kind == "encoder" else tiny_backbone)
    longest = max((tuple(criteria_texts(shared_data_dir, s)) for s in load_scenarios(shared_data_dir).descriptions),
                  key=lambda c: len(system_message(c)))
    max_length = 128
    assert len(tokenizer(system_message(longest), add_special_tokens=False)["input_ids"]) > max_length
    item = ScoreItem("please translate the word zebra " * 12, "the answer is cebra " * 40, longest)
    ids = encode_cross(tokenizer, kind, [item], max_length)[0]["input_ids"]
    text = tokenizer.decode(ids).lower()
    assert len(ids) <= max_length and "judge the assistant" in text and "zebra" in text and "cebra" in text
    budget = input_budget(max_length)
    prompt_tokens = len(tokenizer(item.prompt, add_special_tokens=False)["input_ids"])
    assert prompt_tokens > budget["prompt"] and text.count("zebra") < 12  # the prompt was cut to its share


def test_loading_a_cross_model_leaves_the_global_torch_generator_alone(tiny_encoder, tmp_path):
    from usl_assets.crm.model import load_cross_model

    backbone = resolve_backbone(str(tiny_encoder), tmp_path / "backbones")
    torch.manual_seed(7)
    before = torch.get_rng_state()
    model, _ = load_cross_model(backbone, torch.device("cpu"), None, seed=0)
    assert torch.equal(torch.get_rng_state(), before)
    again, _ = load_cross_model(backbone, torch.device("cpu"), None, seed=0)
    other, _ = load_cross_model(backbone, torch.device("cpu"), None, seed=1)
    assert torch.equal(model.classifier.weight, again.classifier.weight)  # the fresh head is seeded
    assert not torch.equal(model.classifier.weight, other.classifier.weight)


def test_backbone_identity_follows_the_weights_contents_not_only_their_size(tiny_encoder, tmp_path):
    import shutil

    from usl_assets.crm.backbones import folder_hash

    copy = tmp_path / "copy"
    shutil.copytree(tiny_encoder, copy)
    assert folder_hash(copy) == folder_hash(tiny_encoder)
    weights = next(copy.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # same size, one byte of a weight changed
    weights.write_bytes(bytes(data))
    assert folder_hash(copy) != folder_hash(tiny_encoder)


def test_a_training_killed_with_sigkill_resumes_on_rerun_and_ends_like_an_uninterrupted_one(
        tiny_backbone, shared_data_dir, pairs, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    from usl_assets.crm.train import checkpoint_id, training_data_hash
    from usl_assets_tests.conftest import REPO_ROOT
    from usl_assets_tests.crm_training_worker import config

    max_steps, models = 12, tmp_path / "killed"
    train = pairs[pairs["split"] == "train"]
    backbone = resolve_backbone(str(tiny_backbone), models / "backbones")
    folder = models / "crm" / "cross" / checkpoint_id(backbone, training_data_hash(train), config(max_steps))
    command = [sys.executable, "-m", "usl_assets_tests.crm_training_worker", str(tiny_backbone),
               str(shared_data_dir), str(models), str(max_steps)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    worker = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 600
    while (latest_state(folder) is None or latest_state(folder).parent.name < "step-000003") \
            and worker.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    worker.send_signal(signal.SIGKILL)
    output = worker.communicate(timeout=60)[0]
    assert worker.returncode == -signal.SIGKILL, output
    assert not (folder / "crm.json").exists()
    killed_at = int(latest_state(folder).parent.name.removeprefix("step-"))
    assert 3 <= killed_at < max_steps

    rerun = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    figures = json.loads(rerun.stdout.strip().splitlines()[-1])
    assert f"resuming {folder.name} from step {killed_at}" in rerun.stdout
    assert figures["resumed_from_step"] == killed_at and figures["steps"] == max_steps

    never_stopped = train_crm(train, resolve_backbone(str(tiny_backbone), tmp_path / "backbones"),
                              config(max_steps), tmp_path / "uninterrupted", log=lambda _: None)
    assert figures["checkpoint_id"] == never_stopped.checkpoint_id == folder.name
    assert weight_files(folder) == weight_files(never_stopped.checkpoint_dir)
    assert deterministic_figures(folder) == deterministic_figures(never_stopped.checkpoint_dir)

"""The factorized CRM merges its LoRA adapter into the encoder on first load (saved, so later loads skip peft),
and `usl export-crm` ships that merged encoder: both must score exactly like the adapter applied on the base
encoder by peft."""

import json

import numpy as np
import pytest
import torch

from usl_assets.crm import checkpoints, scorer
from usl_assets.crm.backbones import resolve_backbone
from usl_assets.crm.export import export_factorized
from usl_assets.crm.interface import ScoreItem
from usl_assets.crm.model import FactorizedHead, load_encoder
from usl_assets.crm.train import TrainConfig, train_crm
from usl_assets_tests.test_crm_model import autoj_pairs

ITEMS = [ScoreItem("Name a fruit.", "An apple.", ("Answers are brief.",)),
         ScoreItem("Name a fruit.", "Apples are crisp, sweet fruits grown in orchards worldwide; try one.",
                   ("Answers are detailed.",)),
         ScoreItem("Write a haiku about rain.", "Rain taps the tin roof / the gutter hums its one note / then "
                   "the quiet sky", ("The response is a poem.", "Use vivid images."))]


def adapter_on_base_scores(checkpoint, with_adapter: bool = True) -> np.ndarray:
    """The reference: MiniLM as loaded from the backbone folder, the adapter applied by peft (not merged)."""
    from peft import PeftModel
    from safetensors.torch import load_file

    info = json.loads((checkpoint / "crm.json").read_text())
    backbone = checkpoints.checkpoint_backbone(info)
    encoder, tokenizer = load_encoder(backbone, torch.device("cpu"), None)
    if with_adapter:
        encoder = PeftModel.from_pretrained(encoder, checkpoint / "adapter")
    shape = json.loads((checkpoint / "head.json").read_text())
    head = FactorizedHead(shape["dim"], shape["n_features"], shape["hidden"])
    head.load_state_dict(load_file(checkpoint / "head.safetensors"))
    return scorer.FactorizedScorer(encoder.eval(), tokenizer, head, shape["max_length"], "reference").score(ITEMS)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, shared_data_dir):
    """A factorized CRM on MiniLM whose adapter moved the weights enough to change the scores."""
    models = tmp_path_factory.mktemp("models")
    pairs = autoj_pairs(shared_data_dir, limit=24)
    config = TrainConfig(architecture="factorized", max_length=64, max_steps=4, batch_size=4, lr=5e-3,
                         warmup_steps=1, head_epochs=2, phase1_pairs=24)
    backbone = resolve_backbone("minilm", models / "backbones")
    return train_crm(pairs[pairs["split"] == "train"], backbone, config, models / "crm",
                     log=lambda _: None).checkpoint_dir


def test_the_merged_encoder_scores_like_the_adapter_applied_on_the_base_model(checkpoint):
    reference = adapter_on_base_scores(checkpoint)
    assert np.abs(reference - adapter_on_base_scores(checkpoint, with_adapter=False)).max() > 1e-3
    assert not (checkpoint / scorer.MERGED_ENCODER_DIR).exists()
    first = checkpoints.load_scorer(checkpoint).score(ITEMS)  # merges the adapter with peft, saves the result
    assert (checkpoint / scorer.MERGED_ENCODER_DIR / "config.json").exists()
    second = checkpoints.load_scorer(checkpoint).score(ITEMS)  # loads the saved merged encoder
    np.testing.assert_allclose(first, reference, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(second, reference, rtol=1e-5, atol=1e-5)


def test_the_factorized_export_scores_like_the_adapter_without_this_project(checkpoint, tmp_path, monkeypatch):
    import importlib

    reference = adapter_on_base_scores(checkpoint)
    out = export_factorized(checkpoint, tmp_path / "export")
    assert "class FactorizedHead" in (out / "usl_head.py").read_text()
    monkeypatch.syspath_prepend(str(out))
    for name in ("load_factorized", "usl_head", "usl_features"):
        monkeypatch.delitem(__import__("sys").modules, name, raising=False)
    score = importlib.import_module("load_factorized").load(out)
    exported = np.array([score(item.prompt, [item.response], list(item.criteria))[0] for item in ITEMS])
    np.testing.assert_allclose(exported, reference, rtol=1e-5, atol=1e-5)

"""The linear CRM's criteria encoder in NumPy (crm/numpy_encoder.py) computes what transformers' BertModel does, and
loading it needs no torch."""

import subprocess
import sys

import numpy as np
import pytest

from usl_assets.crm.backbones import resolve_backbone
from usl_assets.crm.numpy_encoder import NumpyBertEncoder, supports

TEXTS = ["The user prefers brief answers.", "Be brief.", "", "ÉCRIS en français, avec des accents — s'il te plaît",
         "I'm reading on my phone between meetings, so I need answers that get to the point; no fluff!",
         "word " * 400, "<div><span>qwz", "Use `code` blocks\nand bullet points."]


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    return resolve_backbone("minilm", tmp_path_factory.mktemp("backbones"))


def test_numpy_encoder_matches_the_torch_encoder(minilm):
    import torch

    from usl_assets.crm.model import embed_texts, load_encoder

    assert supports(minilm.path)
    mine = NumpyBertEncoder(minilm.path, 64)
    encoder, tokenizer = load_encoder(minilm, torch.device("cpu"), None)
    encoder.eval()
    with torch.inference_mode():
        expected = embed_texts(encoder, tokenizer, TEXTS, 64, torch.device("cpu")).numpy()
    assert [e.ids for e in mine.tokenizer.encode_batch(TEXTS)] == \
        tokenizer(TEXTS, truncation=True, max_length=64)["input_ids"]  # truncated to 64 tokens, [CLS] … [SEP]
    found = mine.embed(TEXTS)
    assert found.dtype == np.float32 and found.shape == expected.shape
    np.testing.assert_allclose(found, expected, atol=2e-6)
    np.testing.assert_allclose(np.linalg.norm(found, axis=1), 1.0, atol=1e-6)


def test_a_decoder_backbone_is_not_taken_for_bert(tiny_backbone):
    assert not supports(tiny_backbone)  # the tests' 2-layer Llama: the torch encoder embeds its criteria


def test_criteria_are_embedded_without_loading_torch(minilm):
    code = ("import sys; from pathlib import Path; from usl_assets.crm.backbones import Backbone;"
            "from usl_assets.crm.linear_crm import CriteriaEncoder;"
            f"e = CriteriaEncoder(Backbone('minilm', Path({str(minilm.path)!r}), 'encoder', 'x'), 64);"
            "v = e.embed([('Be brief.', 'Use lists.')]);"
            "print(v.shape[1], 'torch' in sys.modules, 'transformers' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["384", "False", "False"]

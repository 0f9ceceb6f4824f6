"""The criteria prototypes (crm/criteria_prototypes.py): a criterion read by the training phrasings nearest to it,
with the real MiniLM encoder; the bank travels with the checkpoint."""

import json

import numpy as np
import pytest

from usl_assets.crm import criteria_prototypes, linear_crm
from usl_assets.crm.backbones import resolve_backbone
from usl_assets.crm.properties import PROPERTIES


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    backbone = resolve_backbone("minilm", tmp_path_factory.mktemp("backbones"))
    return linear_crm.CriteriaEncoder(backbone, 128).with_training_bank()


def reading(encoder, text: str) -> dict[str, float]:
    found = encoder.bank.read(np.stack([encoder.embed_lines([text])[text]]), [text])[0]
    return dict(zip(encoder.bank.directions, found))


def test_the_bank_holds_training_phrasings_only(encoder):
    labels, texts = criteria_prototypes.bank_phrasings()
    assert len(texts) == len(encoder.bank.labels) == encoder.bank.vectors.shape[0]
    held = {text for prop in PROPERTIES.values() for direction in ("more", "less")
            for text in prop.phrasings(direction, "paraphrase") + prop.phrasings(direction, "new_criteria")}
    assert held and not held & set(texts)


@pytest.mark.parametrize("text, direction", [
    ("Be brief.", "length:less"),  # its nearest phrasing by embedding alone is "Don't be brief."
    ("Answer in at most three sentences.", "length:less"),
    ("Use code blocks.", "code:more"),
    ("No code.", "code:less"),
])
def test_a_criterion_reads_as_the_property_direction_it_names(encoder, text, direction):
    found = reading(encoder, text)
    assert max(found, key=found.get) == direction


def test_a_criterion_close_to_no_phrasing_reads_as_nothing(encoder):
    assert sum(reading(encoder, "<div><span>qwz").values()) < 0.1 * criteria_prototypes.SCALE
    vector = encoder.embed([("<div><span>qwz",)])[0]
    assert vector.shape[0] == 384 + len(encoder.bank.directions)  # the embedding, then the reading


def test_the_bank_is_saved_with_the_checkpoint_and_refuses_other_settings(encoder, tmp_path):
    encoder.bank.save(tmp_path)
    loaded = criteria_prototypes.PrototypeBank.load(tmp_path)
    assert loaded.labels == encoder.bank.labels and loaded.negations == encoder.bank.negations
    assert np.allclose(loaded.vectors, encoder.bank.vectors, atol=1e-6)
    shape = json.loads((tmp_path / criteria_prototypes.SHAPE_FILE).read_text())
    (tmp_path / criteria_prototypes.SHAPE_FILE).write_text(json.dumps({**shape, "top_k": 99}))
    with pytest.raises(ValueError, match="other prototype settings"):
        criteria_prototypes.PrototypeBank.load(tmp_path)
    assert criteria_prototypes.PrototypeBank.load(tmp_path / "none") is None

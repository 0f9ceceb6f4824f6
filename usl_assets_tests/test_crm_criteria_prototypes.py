"""The criteria prototypes (crm/criteria_prototypes.py): a criterion read by the training phrasings nearest to it,
with the real MiniLM encoder; the bank travels with the checkpoint."""

import copy
import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from usl_assets.crm import criteria_prototypes, linear_crm
from usl_assets.crm.backbones import resolve_backbone
from usl_assets.crm.interface import NEUTRAL_CRITERIA
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
    assert vector.shape[0] == 384 + len(encoder.bank.reading_columns)  # the embedding, then the reading


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


def test_a_user_s_wish_is_read_with_emphasis_and_the_training_rows_criteria_at_the_fitted_strength(encoder,
                                                                                                     tmp_path):
    rubric, wish = "The response is factually accurate and complete.", "Be brief."
    calibrated = linear_crm.calibrated_lines(pd.DataFrame({"criteria": [[rubric], [wish]],
                                                           "property": [None, "length"]}))
    assert rubric in calibrated and wish not in calibrated  # a property row's phrasing is a wish, not a setting
    assert set(NEUTRAL_CRITERIA) <= calibrated  # no criteria is no wish
    dataclasses.replace(encoder.bank, calibrated=calibrated).save(tmp_path)
    scoring = copy.copy(encoder)
    scoring.bank = criteria_prototypes.PrototypeBank.load(tmp_path)
    scoring.bank.reader.attach(encoder.backbone_path)  # as CriteriaEncoder does with a loaded bank
    assert scoring.bank.calibrated == calibrated
    dim = 384
    fitting = copy.copy(encoder)  # the bank as the fit reads it (linear_crm.train_linear): no emphasis yet
    fitting.bank = dataclasses.replace(encoder.bank, calibrated=calibrated, emphasized=False)
    training = fitting.embed([(wish,), (rubric,), (rubric, wish)])[:, dim:]
    read = scoring.embed([(wish,), (rubric,), (rubric, wish)])[:, dim:]
    assert training[0].max() > 1.0  # "Be brief." reads as length:less
    n = len(encoder.bank.directions)  # the calibrated lines' half of the reading, then the wishes'
    assert not training[0][:n].any() and not training[1][n:].any()
    assert np.allclose(read[0], criteria_prototypes.EMPHASIS * training[0])
    assert np.allclose(read[1], training[1])
    assert np.allclose(read[2], (training[1] + criteria_prototypes.EMPHASIS * training[0]) / 2)  # the lines' mean
    assert np.allclose(scoring.embed([(wish,)])[:, :dim], encoder.embed([(wish,)])[:, :dim])  # the embedding as is
    # the rubric line "…complete." is read by its nearest phrasings, never by the word "complete" (length:more)
    by_words = encoder.embed([(rubric,)])[0, dim:]
    no_calibration = by_words[n + encoder.bank.directions.index("length:more")]
    assert no_calibration == pytest.approx(criteria_prototypes.SCALE)
    assert training[1][encoder.bank.directions.index("length:more")] < criteria_prototypes.SCALE / 2


@pytest.mark.parametrize("line, sides", [
    ("Write flowing prose rather than bullet points, so it reads well.", ("Write flowing prose", "bullet points")),
    ("I want the idea, not a code listing.", ("I want the idea", "a code listing.")),
    ("I prefer plain explanations to code listings.", ("I prefer plain explanations", "code listings.")),
    ("Two lines work better for me than a long essay.", ("Two lines work better for me", "a long essay.")),
    ("Statements are preferred over questions.", ("Statements are preferred", "questions.")),
    ("I prefer to get short answers.", None),
    ("Answer in no more than three sentences.", None),  # a limit, not a contrast
    ("Use fewer than 100 words.", None),
    ("No code.", None),
])
def test_a_contrast_splits_into_what_is_wanted_and_what_is_not(line, sides):
    assert criteria_prototypes.contrast(line) == sides


@pytest.mark.parametrize("text, unwanted", [
    ("Give me flowing prose rather than bullet points and lists.", "structure"),
    ("I prefer a plain explanation over code snippets and listings.", "code"),
])
def test_what_a_contrast_sets_aside_reads_as_less_of_it(encoder, text, unwanted):
    found = dict(zip(encoder.bank.directions, encoder.bank.read_lines([text], encoder.embed_lines)[0]))
    assert found[f"{unwanted}:less"] > found[f"{unwanted}:more"]
    assert found[f"{unwanted}:less"] == max(found.values())


@pytest.mark.parametrize("line, parts", [
    ("I find bullet points choppy.", [("bullet points", False)]),
    ("Phrases like 'Great question' feel like filler to me.", [("Phrases like 'Great question'", False)]),
    ("My manager reads these on a small screen during her commute, so keep the reply short and plain.",
     [("My manager reads these on a small screen during her commute", True), ("keep the reply short and plain", True)]),
    ("Keep it short.", [("Keep it short.", True)]),
    # a complaint: what it describes is unwanted, its contrast turned around, a wish after it kept
    ("You always just assume what I meant instead of checking with me first.",
     [("You always just assume what I meant", False), ("checking with me first", True)]),
    ("Everything comes back as a slide deck of bullet points and headers, and I just want someone to talk to me.",
     [("Everything comes back as a slide deck of bullet points and headers", False),
      ("I just want someone to talk to me", True)]),
    ("Avoid choppy, clipped sentences.", [("Avoid choppy, clipped sentences.", True)]),  # a negation, no dislike
])
def test_a_line_is_read_by_its_clauses_and_what_it_dislikes(line, parts):
    assert criteria_prototypes.sides(line) == parts


@pytest.mark.parametrize("text, direction", [
    ("Honestly, I find code snippets tedious.", "code:less"),  # a dislike of code: less of it
    ("It's frustrating when everything is written as running text with no headings or lists to scan.",
     "structure:more"),  # a complaint: what it says is missing is wanted
    ("The tone is way too casual, all the jokes make it feel unprofessional.", "formality:more"),
    ("My manager reads these on a small screen during her commute, so keep the reply short.", "length:less"),
    # a rhetorical question complains about what it names, its wish words ("have to") included, "can't" once more
    ("Why does every reply have to be so long?", "length:less"),
    ("Why is every other word in bold?", "emphasis:less"),
    ("Why can't you ever just show me the code?", "code:more"),
    ("Why do you ask me so many questions instead of answering?", "questions:less"),
    # run 35: other rhetorical questions, a question asked with a negation, "when you could …", what the
    # assistant's answers are or do, what nobody asked for, and "fed up with"
    ("Is it really necessary to bold every other phrase?", "emphasis:less"),
    ("Who needs five bullet points for a one-line answer?", "structure:less"),
    ("Can't you show me a worked example?", "examples:more"),
    ("Why write paragraphs of explanation when you could just show me the command?", "code:more"),
    ("Your replies are crammed with statistics.", "numbers:less"),
    ("Your answers pile example on example that nobody asked for.", "examples:less"),
    ("I'm fed up with being asked follow-up questions.", "questions:less"),
])
def test_a_dislike_or_a_wish_after_the_user_s_situation_reads_as_what_it_means(encoder, text, direction):
    found = dict(zip(encoder.bank.directions, encoder.bank.read_lines([text], encoder.embed_lines)[0]))
    assert max(found, key=found.get) == direction


def test_a_wish_is_read_by_the_property_words_it_names_and_its_wish_clause_over_the_user_s_situation(encoder):
    line = "My manager never reads code in emails, so please explain it in plain words, without any code at all."
    reading = encoder.bank.read_lines([line], encoder.embed_lines)[0]
    assert encoder.bank.directions[int(reading.argmax())] == "code:less"
    assert reading.max() == pytest.approx(criteria_prototypes.SCALE)
    unnamed = encoder.bank.read_lines(["Explain it to me like I'm five."], encoder.embed_lines)[0]
    assert unnamed.max() < criteria_prototypes.SCALE  # no property word: the nearest phrasings' soft reading


"""The wish reader (crm/wish_reader.py): a user's wish read by a classifier fitted on the training phrasings and the
wording sets, with the real MiniLM encoder; it never fits a held-out phrasing and travels with the checkpoint."""

import numpy as np
import pytest

from usl_assets.crm import criteria_prototypes, linear_crm, wish_reader
from usl_assets.crm.backbones import resolve_backbone
from usl_assets.crm.properties import PROPERTIES


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    backbone = resolve_backbone("minilm", tmp_path_factory.mktemp("backbones"))
    return linear_crm.CriteriaEncoder(backbone, 128).with_training_bank()


def strongest(encoder, text: str) -> str:
    found = encoder.bank.read_lines([text], encoder.embed_lines)[0]
    return encoder.bank.directions[int(np.argmax(found))] if found.max() >= 0.5 else "nothing"


def test_the_reader_fits_the_wording_sets_and_no_held_out_phrasing():
    labels, texts = wish_reader.fitted_on(*criteria_prototypes.bank_phrasings())
    held = {" ".join(text.lower().split()) for prop in PROPERTIES.values() for direction in ("more", "less")
            for pool in ("paraphrase", "new_criteria") for text in prop.phrasings(direction, pool)}
    assert held and not held & {" ".join(text.lower().split()) for text in texts}
    assert set(wish_reader.wordings()[1]) - set(texts) <= {t for t in wish_reader.wordings()[1]
                                                           if " ".join(t.lower().split()) in held}
    assert len(texts) > len(criteria_prototypes.bank_phrasings()[1]) + 500


@pytest.mark.parametrize("text, direction", [
    # fitted wordings no property word names; the nearest training phrasings read them as another property (since
    # run 35 the reader reads blind4's "I like it when the conclusion comes first." as direct_answer:less, 0.57
    # against 0.42: it tells which property far better than which way, docs/crm.md)
    ("Keep it punchy — Hemingway, not Proust.", "sentence_length:less"),
    ("Paint me the picture, don't hand me a spreadsheet.", "numbers:less"),
])
def test_a_wish_no_word_names_is_read_by_the_reader(encoder, text, direction):
    assert strongest(encoder, text) == direction
    reader, encoder.bank.reader = encoder.bank.reader, None
    try:
        assert strongest(encoder, text) != direction  # what the bank alone made of it
    finally:
        encoder.bank.reader = reader


def test_the_reader_s_side_readings_are_dropped_and_the_line_s_total_kept(encoder):
    """criteria_prototypes.READER_SIDE_SHARE: a reader's belief spread over directions is doubt, not a second wish."""
    text = "Keep it punchy — Hemingway, not Proust."
    found = encoder.bank.read_lines([text], encoder.embed_lines)[0]
    vector = np.stack(list(encoder.embed_lines([text]).values()))
    reader = encoder.bank.reader
    belief = criteria_prototypes.SCALE * reader.belief([text], vector)[0] * reader.match(vector)[0]
    main = belief >= criteria_prototypes.READER_SIDE_SHARE * belief.max()
    assert 0 < main.sum() < (belief > 0).sum()
    assert (found[~main] == 0).all() and (found[main] > belief[main]).all()
    assert found.sum() == pytest.approx(belief.sum())


def test_a_line_like_no_wish_still_reads_as_nothing(encoder):
    for text in ("asdf qwerty zxcv", "<div><span>qwz", "qwz zxv kjh"):  # not a little of every direction either
        assert not encoder.bank.read_lines([text], encoder.embed_lines)[0].any()


def test_words_naming_two_properties_keep_both(encoder):
    found = dict(zip(encoder.bank.directions,
                     encoder.bank.read_lines(["Keep it brief and use bullet points."], encoder.embed_lines)[0]))
    assert found["length:less"] > 0.5 and found["structure:more"] > 0.5
    assert sum(found.values()) == pytest.approx(criteria_prototypes.SCALE)


def test_the_reader_is_saved_with_the_bank(encoder, tmp_path):
    encoder.bank.save(tmp_path)
    loaded = criteria_prototypes.PrototypeBank.load(tmp_path)
    lines = ["Less jargon.", "Keep it punchy."]
    vectors = np.stack(list(encoder.embed_lines(lines).values()))
    assert loaded.reader.tuned.keys() == encoder.bank.reader.tuned.keys()
    with pytest.raises(ValueError, match="needs its backbone"):
        loaded.reader.belief(lines, vectors)
    loaded.reader.attach(encoder.backbone_path)
    assert np.allclose(loaded.reader.belief(lines, vectors), encoder.bank.reader.belief(lines, vectors), atol=1e-4)


def test_a_reader_refit_without_a_wording_has_not_seen_it(encoder):
    """WishReader.without (benchmarks/criteria_fidelity_dev.py --leave-one-set-out): the wording is out of the
    fit, and the reader it came from is unchanged."""
    text, direction = "Keep it punchy — Hemingway, not Proust.", "sentence_length:less"
    bank, reader = encoder.bank, encoder.bank.reader
    vector = np.stack(list(encoder.embed_lines([text]).values()))
    column = bank.directions.index(direction)
    before = reader.belief([text], vector)[0, column]
    without = reader.without(bank.labels, bank.texts, [text.upper()])  # compared as fitted_on compares
    assert len(without.vectors) == len(reader.vectors) - 1 and without.tuned is not None  # fine-tuned again
    assert without.belief([text], vector)[0, column] < before - 0.05
    assert reader.belief([text], vector)[0, column] == before
    with pytest.raises(ValueError, match="refit it from the same checkpoint's bank"):
        reader.without(bank.labels[1:], bank.texts[1:], [text])


def test_the_reader_reads_with_its_own_fine_tuned_layers(encoder):
    """crm/wish_tuning.py: on MiniLM the reader's encoder has its upper layers fine-tuned, and it reads a line by
    them, not by the criteria encoder's embedding."""
    from usl_assets.crm import wish_tuning
    from usl_assets.crm.numpy_encoder import NumpyBertEncoder

    reader = encoder.bank.reader
    frozen = NumpyBertEncoder(encoder.backbone_path, wish_tuning.MAX_LENGTH)
    assert reader.tuned and all(wish_tuning.tuned_layer(name) for name in reader.tuned)
    assert any(f"encoder.layer.{wish_tuning.TUNED_FROM}." in name for name in reader.tuned)
    assert not any(f"encoder.layer.{wish_tuning.TUNED_FROM - 1}." in name for name in reader.tuned)
    assert max(np.abs(value - frozen.weights[name]).max() for name, value in reader.tuned.items()) > 1e-3
    lines = ["Don't show me any code.", "Show me the code."]
    vectors = frozen.embed(lines)
    assert not np.allclose(reader.reading_vectors(lines, vectors), vectors, atol=1e-3)
    assert np.allclose(reader.belief(lines, vectors), reader.probabilities(reader.reading_vectors(lines, vectors)))


def test_fine_tuning_is_deterministic_whatever_the_threads(tmp_path, monkeypatch):
    import torch

    from usl_assets.crm import wish_tuning
    from usl_assets.crm.backbones import minilm_dir

    labels, texts = wish_reader.fitted_on(*criteria_prototypes.bank_phrasings())
    labels, texts = labels[::24], texts[::24]
    directions = sorted(set(labels))
    coef, intercept = np.zeros((len(directions), 384)), np.zeros(len(directions))
    monkeypatch.setattr(wish_tuning, "CACHE_DIR", tmp_path)
    first = wish_tuning.tune(minilm_dir(), directions, labels, texts, coef, intercept, log=lambda _: None)
    kept = list(tmp_path.glob("*.safetensors"))
    assert len(kept) == 1  # kept for the next training, as read back below
    wish_tuning._FITTED.clear()
    with monkeypatch.context() as patched:
        patched.setattr(wish_tuning, "_tune", lambda *_: pytest.fail("fitted again instead of read from the cache"))
        again = wish_tuning.tune(minilm_dir(), directions, labels, texts, coef, intercept, log=lambda _: None)
    assert all(np.array_equal(first[0][name], again[0][name]) for name in first[0])
    kept[0].unlink()
    wish_tuning._FITTED.clear()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        second = wish_tuning.tune(minilm_dir(), directions, labels, texts, coef, intercept, log=lambda _: None)
    finally:
        torch.set_num_threads(threads)
    assert first[0].keys() == second[0].keys()
    assert all(np.array_equal(first[0][name], second[0][name]) for name in first[0])
    assert np.array_equal(first[1], second[1]) and np.abs(first[1]).max() > 0  # the head learned from zero

"""How the criteria were read (crm/reading.py): on a linear CRM trained on real pairs (the test_crm_linear recipe,
its real criteria encoder), and on a hand-made gate over an encoder whose reading is known, where every arrow and
warning has one right answer."""

import hashlib
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from usl_assets.crm import data, reading
from usl_assets.crm.backbones import resolve_backbone
from usl_assets.crm.linear_weights import LinearWeights
from usl_assets.crm.linear_rows import N_BUCKETS, ROW_FEATURES
from usl_assets.crm.linear_crm import LinearScorer
from usl_assets.crm.interface import NEUTRAL_CRITERIA
from usl_assets.crm.properties import PROPERTIES
from usl_assets.crm.checkpoints import load_scorer
from usl_assets.crm.train import TrainConfig, train_crm
from usl_assets_tests.crm_data_inputs import scenario_criteria_frame, tagged_preferences_frame

UP, DOWN = (reading.UP, reading.UP2), (reading.DOWN, reading.DOWN2)
BRIEF, THOROUGH = "The user prefers brief answers.", "The user prefers thorough, detailed answers."
MASHED = "qwz zxv kjh"  # keyboard mashing, not one of reading.UNRELATED_TEXTS


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    return resolve_backbone("minilm", tmp_path_factory.mktemp("backbones"))


@pytest.fixture(scope="module")
def trained(shared_data_dir, backbone, tmp_path_factory) -> LinearScorer:
    """A linear CRM fitted on real human and judge pairs (60 L-BFGS iterations), loaded as scoring loads it."""
    tagged = tagged_preferences_frame(shared_data_dir, autoj_step=3, pandalm=40, hh=60, judge_prompts=12)
    table, _, _ = data.build_training_pairs(tagged, scenario_criteria_frame(shared_data_dir), data.PairsConfig())
    result = train_crm(table[table["split"] == "train"], backbone,
                       TrainConfig(architecture="linear", max_steps=60), tmp_path_factory.mktemp("crm"),
                       log=lambda _: None)
    return load_scorer(result.checkpoint_dir)


# Wordings the hand-made encoder below reads as one property direction, besides the training phrasings.
KNOWN = {"Be brief.": ("length", "less"), "Be thorough and detailed.": ("length", "more"),
         "Show the code.": ("code", "more"), "Use lists.": ("structure", "more")}
NOISE_DIMS = 64


class KnownEncoder:
    """An encoder whose reading is known: a training phrasing of a property direction (or a KNOWN wording) is that
    direction's unit vector, any other line a seeded random unit vector in dimensions no property uses; a profile
    is the normalized mean of its lines, as CriteriaEncoder embeds one. `shared`: every line but the neutral
    criterion also has this much of one more dimension (what all texts have in common and the neutral one lacks)."""

    def __init__(self, shared: float = 0.0):
        self.shared = shared
        self.directions = {(prop, d): i for i, (prop, d) in enumerate((p, d) for p in PROPERTIES
                                                                      for d in ("more", "less"))}
        self.known = dict(KNOWN)
        for prop in PROPERTIES:
            for d in ("more", "less"):
                self.known.update({text: (prop, d) for text in reading.training_phrasings(prop, d)})
        self.dim = len(self.directions) + NOISE_DIMS + 1

    def line(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dim)
        if text in self.known:
            vector[self.directions[self.known[text]]] = 1.0
        else:
            seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
            noise = np.random.default_rng(seed).normal(size=NOISE_DIMS)
            vector[len(self.directions):-1] = noise / np.linalg.norm(noise)
        vector[-1] = 0.0 if text == NEUTRAL_CRITERIA[0] else self.shared
        return vector / np.linalg.norm(vector)

    def embed(self, profiles: list[tuple[str, ...]]) -> np.ndarray:
        rows = [np.mean([self.line(text) for text in profile], axis=0) for profile in profiles]
        return np.stack([row / np.linalg.norm(row) for row in rows])


def hand_made(columns: list[int] | None = None, shared: float = 0.0) -> LinearScorer:
    """A CRM whose gate reads each property direction from its KnownEncoder dimension (a property's features share
    +1 for "more", −1 for "less"), plus a little seeded noise from every other dimension; the shared dimension
    (see KnownEncoder) pulls structure down."""
    columns = list(range(len(ROW_FEATURES))) if columns is None else columns
    encoder = KnownEncoder(shared)
    gate = 0.02 * np.random.default_rng(0).normal(size=(len(columns), encoder.dim))
    gate[:, :len(encoder.directions)] = 0.0
    groups, _ = reading.property_groups(columns)
    gate[list(groups["structure"]), -1] = -1.0 / len(groups["structure"])
    for prop in set(groups) & set(PROPERTIES):
        for d, sign in (("more", 1.0), ("less", -1.0)):
            gate[list(groups[prop]), encoder.directions[(prop, d)]] = sign / len(groups[prop])
    weights = LinearWeights(u=np.zeros(N_BUCKETS), v=np.zeros(len(columns)), gate=gate,
                            feature_mean=np.zeros(len(columns)), feature_std=np.ones(len(columns)), columns=columns)
    return LinearScorer(weights, encoder, "hand-made")


def one_std_more(scorer: LinearScorer, prop: str, criteria: tuple[str, ...]) -> float:
    """How much more the scorer's reward pays, under `criteria` than under neutral criteria, for an answer with one
    standard deviation more of each of the property's features (everything else equal): what `shift` claims."""
    weights = scorer.weights
    row = scorer.embed_responses(["Explain what a hash table is."],
                                 ["A hash table maps keys to values by hashing each key to a bucket."]).astype(float)
    more = row.copy()
    for position in reading.reference_scale(scorer).groups[prop]:
        more[0, 1 + weights.columns[position]] += weights.feature_std[position]
    gained = {}
    for key, profile in (("criteria", criteria), ("neutral", NEUTRAL_CRITERIA)):
        vector = scorer.embed_criteria([profile])[0]
        gained[key] = float(scorer.score_embedded(more, vector)[0] - scorer.score_embedded(row, vector)[0])
    return gained["criteria"] - gained["neutral"]


# --- a CRM trained on real pairs ---------------------------------------------------------------------------------

def test_training_phrasings_read_in_their_own_direction(trained):
    brief, thorough = reading.read_criteria(trained, [BRIEF]), reading.read_criteria(trained, [THOROUGH])
    assert brief.arrows()["length"] in DOWN and thorough.arrows()["length"] in UP
    lists_more, lists_less = (reading.training_phrasings("structure", d)[0] for d in ("more", "less"))
    assert reading.read_criteria(trained, [lists_more]).arrows()["structure"] in UP
    assert reading.read_criteria(trained, [lists_less]).arrows()["structure"] in DOWN
    assert not brief.warnings and not thorough.warnings


def test_keyboard_mashing_is_read_as_almost_nothing(trained):
    found = reading.read_criteria(trained, [MASHED])
    assert set(found.arrows().values()) <= {reading.SAME, reading.UNKNOWN}
    assert found.warnings == [f"criterion '{MASHED}' is read as almost nothing (it moves the reward no more than an "
                              "unrelated sentence does): the CRM cannot measure it; rephrase it"]
    brief = reading.read_criteria(trained, [BRIEF])
    assert found.distinctness[MASHED] < reading.NOTHING_RMS < brief.distinctness[BRIEF]


def test_a_wish_for_a_property_no_training_row_names_is_warned_about_and_leaves_the_reward_its_place(trained):
    """sentence_length is held out of training (splits.heldout_properties): a wish read as it is said to follow the
    rest of the CRM's judgment, which keeps its whole place; a wish for a trained property takes it."""
    unlearned, brief = "Keep every sentence short.", "Be brief."
    found = reading.read_criteria(trained, [unlearned])
    assert found.warnings == [f"criterion '{unlearned}' is read as a wish for sentence_length:less, which this CRM "
                              "has no training rows for: the ranking follows the rest of its judgment, not that "
                              "property"]
    assert found.rest_share == pytest.approx(1.0)
    trained_wish = reading.read_criteria(trained, [brief])
    assert not trained_wish.warnings and trained_wish.rest_share < 0.1


def test_criteria_pulling_length_both_ways_are_a_conflict(trained):
    found = reading.read_criteria(trained, [BRIEF, THOROUGH])
    assert found.criteria == [BRIEF, THOROUGH]
    assert found.arrows(BRIEF)["length"] in DOWN and found.arrows(THOROUGH)["length"] in UP
    conflicts = [w for w in found.warnings if w.startswith("criteria pull length in opposite directions")]
    assert len(conflicts) == 1 and f"'{BRIEF}'" in conflicts[0] and f"'{THOROUGH}'" in conflicts[0]


def test_a_shift_is_what_the_reward_pays_for_more_of_the_property(trained):
    """The reading's shift equals the scorer's own reward difference (score_embedded), so its columns are the
    features the reward reads, whatever their positions in the checkpoint."""
    found = reading.read_criteria(trained, [BRIEF]).table.set_index("property")
    for prop in ("length", "structure", "code"):
        assert found.loc[prop, "shift"] == pytest.approx(one_std_more(trained, prop, (BRIEF,)), rel=1e-4, abs=1e-4)
    both = reading.read_criteria(trained, [BRIEF, THOROUGH]).table.set_index("property")
    assert both.loc["length", "shift"] == pytest.approx(one_std_more(trained, "length", (BRIEF, THOROUGH)),
                                                        rel=1e-4, abs=1e-4)
    assert both.loc["length", "criterion_1_shift"] == pytest.approx(found.loc["length", "shift"])


# --- a hand-made gate over an encoder whose reading is known ------------------------------------------------------

def test_brief_and_thorough_are_read_as_opposite_pulls_on_length():
    found = reading.read_criteria(hand_made(), ["Be brief.", "Be thorough and detailed."])
    assert found.arrows("Be brief.")["length"] == reading.DOWN2
    assert found.arrows("Be thorough and detailed.")["length"] == reading.UP2
    assert found.arrows()["length"] == reading.SAME  # the set is their normalized mean: they cancel out
    moved = {p: m for p, m in found.arrows("Be brief.").items() if m not in (reading.SAME, reading.UNKNOWN)}
    assert moved == {"length": reading.DOWN2}
    assert found.warnings == ["criteria pull length in opposite directions: 'Be thorough and detailed.' (↑↑) against "
                              "'Be brief.' (↓↓); together they partly cancel out"]
    assert list(found.table.columns) == ["property", "kind", "features", "shift", "position", "arrow", "learned",
                                         "criterion_1_shift", "criterion_1_arrow", "criterion_2_shift",
                                         "criterion_2_arrow"]
    table = found.table.set_index("property")
    assert table.loc["length", "criterion_1_shift"] == pytest.approx(-1.0, abs=0.1)
    assert table.loc["length", "criterion_2_shift"] == pytest.approx(1.0, abs=0.1)


def test_one_wording_moves_its_own_property_and_mashing_moves_nothing():
    scorer = hand_made()
    code = reading.read_criteria(scorer, ["Show the code."])
    assert {p: m for p, m in code.arrows().items() if m not in (reading.SAME, reading.UNKNOWN)} == {"code": reading.UP2}
    assert code.warnings == []
    half = reading.read_criteria(scorer, ["Show the code.", "Use lists."])  # each at 1/√2 of its own pull
    assert half.arrows()["code"] == reading.UP and half.arrows()["structure"] == reading.UP and not half.warnings
    nothing = reading.read_criteria(scorer, [MASHED])
    assert set(nothing.arrows().values()) <= {reading.SAME, reading.UNKNOWN}
    assert nothing.warnings == [f"criterion '{MASHED}' is read as almost nothing (it moves the reward no more than "
                                "an unrelated sentence does): the CRM cannot measure it; rephrase it"]
    assert nothing.distinctness[MASHED] < reading.NOTHING_RMS < code.distinctness["Show the code."]
    markup = '<div class="x"><span>lorem</span><code>ipsum</code><table><tr><td>42</td></tr></table></div>'
    assert reading.read_criteria(scorer, [markup]).warnings == [
        f"criterion '{markup}' is mostly markup, not words, and moves no property the CRM measures: write what you "
        "want from an answer in words"]


def test_arrows_are_read_against_unrelated_sentences_not_the_neutral_criterion():
    """On CRMs trained without criteria prototypes, every text pulled structure down against the neutral
    criterion, "Use bullet points." included: only what a criterion does beyond an unrelated sentence is its own."""
    scorer = hand_made(shared=1.5)
    lists, mashed = reading.read_criteria(scorer, ["Use lists."]), reading.read_criteria(scorer, [MASHED])
    assert lists.table.set_index("property").loc["structure", "shift"] < 0  # below neutral, above unrelated text
    assert lists.arrows()["structure"] == reading.UP2 and mashed.arrows()["structure"] == reading.SAME
    assert any("is read as almost nothing" in w for w in mashed.warnings)


def test_the_reading_follows_the_checkpoints_columns():
    """No column position is assumed: a checkpoint without the code features has no code row, the
    others read their own features, and prompt relevance shows when a feature like it exists."""
    code = set(reading.property_features()["code"])
    columns = [c for c, name in reversed(list(enumerate(ROW_FEATURES))) if name not in code]
    found = reading.read_criteria(hand_made(columns), ["Be brief."])
    assert "code" not in set(found.table["property"]) and found.arrows()["length"] == reading.DOWN2
    row = found.table.set_index("property").loc["length"]
    assert set(row["features"].split(", ")) == set(reading.property_features()["length"]) & set(ROW_FEATURES)
    relevance = [n for n in ROW_FEATURES if any(f in n for f in reading.UNTIED_PROPERTIES["relevance"])]
    untied = found.table[found.table["kind"] == reading.UNTIED]
    assert list(untied["property"]) == (["relevance"] if relevance else [])


def test_the_reference_is_computed_once_per_scorer():
    scorer = hand_made()
    reading.read_criteria(scorer, ["Be brief."])
    embedded = []
    original = scorer.encoder.embed
    scorer.encoder.embed = lambda profiles: embedded.append(list(profiles)) or original(profiles)
    reading.read_criteria(scorer, ["Be brief.", "Use lists."])
    assert embedded == [[("Be brief.", "Use lists."), ("Be brief.",), ("Use lists.",)]]
    assert reading.reference_scale(scorer) is reading.reference_scale(scorer)


def test_a_cache_dir_keeps_the_reference_for_the_next_process(tmp_path):
    first = reading.read_criteria(hand_made(), ["Be brief.", "Use lists."], tmp_path)
    saved = list(tmp_path.glob("reading_reference_*.json"))
    assert len(saved) == 1
    fresh = hand_made()  # another process: a new scorer of the same checkpoint
    embedded = []
    original = fresh.encoder.embed
    fresh.encoder.embed = lambda profiles: embedded.append(list(profiles)) or original(profiles)
    again = reading.read_criteria(fresh, ["Be brief.", "Use lists."], tmp_path)
    assert embedded == [[("Be brief.", "Use lists."), ("Be brief.",), ("Use lists.",)]]  # no reference texts
    pd.testing.assert_frame_equal(first.table, again.table)
    other = hand_made(columns=list(range(len(ROW_FEATURES) - 3)))  # other columns: another key, computed anew
    reading.read_criteria(other, ["Be brief."], tmp_path)
    assert len(list(tmp_path.glob("reading_reference_*.json"))) == 2
    saved[0].write_text("{not json")  # unreadable: computed again and rewritten
    assert_same = reading.read_criteria(hand_made(), ["Be brief.", "Use lists."], tmp_path)
    pd.testing.assert_frame_equal(first.table, assert_same.table)
    assert saved[0].read_text().startswith("{\"neutral\"")


def test_render_and_what_cannot_be_read():
    text = reading.render_reading(reading.read_criteria(hand_made(), ["Be brief.", "Use lists.", MASHED]))
    lines = text.splitlines()
    assert lines[0].startswith("how the CRM reads the criteria (") and lines[1].startswith("  all 3 criteria: length")
    assert lines[2].startswith("  'Be brief.': length ↓↓, structure ·") and ", structure ↑↑" in lines[3]
    assert lines[4].startswith(f"  '{MASHED}': length ·")
    assert lines[-1].startswith(f"warning: criterion '{MASHED}' is read as almost nothing")
    other = reading.read_criteria(SimpleNamespace(architecture="factorized"), ["Be brief."])
    assert not other.available and other.table.empty
    assert reading.render_reading(other) == ("how the CRM reads the criteria: the reading of criteria needs the linear "
                                             "CRM; this checkpoint is factorized")
    empty = reading.read_criteria(hand_made(), ["  ", ""])
    assert empty.table.empty and empty.note == "no criteria given: nothing to read" and empty.warnings == []

"""Measurable response properties: the rule that says which side of a pair clearly has more of each (counts from
crm/features.py), each property's per-answer measure (`property_value`) and model features (`PROPERTY_FEATURES`),
and the phrasings of "prefers more / less of it" in families (property_phrasings.yaml, loaded by
crm/phrasings.py). The contrastive, reverse and random augmentations and the new_criteria / criteria_reversed /
criteria_paraphrase splits are built from them (docs/crm_training_data.md).
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from usl_assets.crm.features import formality_score, response_counts
from usl_assets.crm.phrasings import (CombinedCriterion, Families, PhrasingBook, family_phrasings, load_phrasings,
                                      pool_phrasings)

PHRASINGS_FILE = Path(__file__).with_name("property_phrasings.yaml")


@dataclass(frozen=True)
class Property:
    """A measurable response property; `more_side(a, b)` says which side ('a'/'b') clearly has more of it."""

    name: str
    rule: str  # the threshold, in words (docs and metadata)
    more_side: Callable[[dict, dict], str | None]
    more: tuple[str, ...]  # every phrasing of "prefers more of it", families in order
    less: tuple[str, ...]  # every phrasing of "prefers less of it", families in order
    families: Families = ()  # (direction, family, phrasings)
    heldout_families: tuple[str, ...] = ()

    def phrasings(self, direction: str, pool: str = "any") -> tuple[str, ...]:
        """One direction's phrasings in a pool: train, new_criteria, train_families, paraphrase or any
        (crm/phrasings.py)."""
        return pool_phrasings(self.families, self.heldout_families, direction, pool)

    def family_phrasings(self, direction: str) -> dict[str, tuple[str, ...]]:
        """family -> its phrasings of one direction."""
        return family_phrasings(self.families, direction)


def _side_with_more(value_a: float, value_b: float, clearly_more: Callable[[float, float], bool]) -> str | None:
    if clearly_more(value_a, value_b):
        return "a"
    if clearly_more(value_b, value_a):
        return "b"
    return None


def _length_side(a: dict, b: dict) -> str | None:
    return _side_with_more(a["words"], b["words"], lambda hi, lo: hi >= 1.8 * max(lo, 1) and hi - lo >= 40)


def _structure_side(a: dict, b: dict) -> str | None:
    return _side_with_more(a["list_items"] + a["headings"], b["list_items"] + b["headings"],
                           lambda hi, lo: hi >= 3 and lo == 0)


def _code_side(a: dict, b: dict) -> str | None:
    return _side_with_more(a["code_blocks"] + a["inline_code"] / 100, b["code_blocks"] + b["inline_code"] / 100,
                           lambda hi, lo: hi >= 1 and lo == 0)


def _numbers_side(a: dict, b: dict) -> str | None:
    def has_many(counts: dict) -> bool:
        return counts["digits"] >= 5 and counts["digits"] >= 0.02 * counts["chars"]

    if has_many(a) and b["digits"] == 0:
        return "a"
    if has_many(b) and a["digits"] == 0:
        return "b"
    return None


def _questions_side(a: dict, b: dict) -> str | None:
    return _side_with_more(a["questions"], b["questions"], lambda hi, lo: hi >= 1 and lo == 0)


def _emphasis_side(a: dict, b: dict) -> str | None:
    return _side_with_more(a["bold_marks"], b["bold_marks"], lambda hi, lo: hi >= 2 and lo == 0)


def _paragraphs_side(a: dict, b: dict) -> str | None:
    return _side_with_more(a["paragraphs"], b["paragraphs"], lambda hi, lo: hi >= 4 and lo == 1)


def _sentence_length_side(a: dict, b: dict) -> str | None:
    if min(a["sentences"], b["sentences"]) < 2:
        return None
    return _side_with_more(a["words"] / a["sentences"], b["words"] / b["sentences"],
                           lambda hi, lo: hi >= 1.8 * max(lo, 1))


def _examples_side(a: dict, b: dict) -> str | None:
    return _side_with_more(a["example_markers"], b["example_markers"], lambda hi, lo: hi >= 2 and lo == 0)


def _steps_side(a: dict, b: dict) -> str | None:
    return _side_with_more(a["step_markers"], b["step_markers"], lambda hi, lo: hi >= 3 and lo == 0)


def _formality_side(a: dict, b: dict) -> str | None:
    def casual(counts: dict) -> bool:
        return counts["informal_markers"] >= 3 and counts["informal_markers"] >= 0.01 * counts["words"]

    if a["informal_markers"] == 0 and a["words"] and casual(b):
        return "a"
    if b["informal_markers"] == 0 and b["words"] and casual(a):
        return "b"
    return None


def _direct_answer_side(a: dict, b: dict) -> str | None:
    return _side_with_more(property_value("direct_answer", a), property_value("direct_answer", b),
                           lambda hi, lo: hi == 1 and lo == 0)


# name -> (the threshold in words, which side clearly has more); the order is the properties' order everywhere
RULES = {
    "length": ("one side has >= 1.8x the words of the other and >= 40 words more", _length_side),
    "structure": ("one side has >= 3 list items or headings, the other none", _structure_side),
    "code": ("one side has a fenced code block, the other no code at all", _code_side),
    "numbers": ("one side has >= 5 digits making >= 2% of its characters, the other no digit", _numbers_side),
    "questions": ("one side asks at least one question, the other none", _questions_side),
    "emphasis": ("one side has >= 2 bold marks, the other none", _emphasis_side),
    "paragraphs": ("one side has >= 4 paragraphs, the other exactly 1", _paragraphs_side),
    "sentence_length": ("both sides >= 2 sentences; one has >= 1.8x the words per sentence of the other",
                        _sentence_length_side),
    "examples": ("one side has >= 2 example markers (for example, e.g., such as, an Example: line), the other none",
                 _examples_side),
    "steps": ("one side has >= 3 step markers (Step N, First/Then/Finally openings, numbered actions), the other "
              "none", _steps_side),
    "formality": ("more formal: one side has no informal marker (contraction, casual word, emoji, '!'), the other "
                  ">= 3 making >= 1 per 100 words", _formality_side),
    "direct_answer": ("more direct: one side opens with its substance, the other with a preamble (Sure!, Great "
                      "question, I'd be happy to, a restatement)", _direct_answer_side),
}

# property -> the per-answer measure, higher = more of it (counts: features.response_counts)
_VALUES: dict[str, Callable[[dict], float]] = {
    "length": lambda c: c["words"],
    "structure": lambda c: c["list_items"] + c["headings"],
    "code": lambda c: c["code_blocks"] + c["inline_code"] / 100,
    "numbers": lambda c: c["digits"] / max(c["chars"], 1),
    "questions": lambda c: c["questions"],
    "emphasis": lambda c: c["bold_marks"],
    "paragraphs": lambda c: c["paragraphs"],
    "sentence_length": lambda c: c["words"] / max(c["sentences"], 1),
    "examples": lambda c: c["example_markers"],
    "steps": lambda c: c["step_markers"],
    "formality": formality_score,
    "direct_answer": lambda c: 1.0 if c["words"] and not c["preamble_sentences"] else 0.0,
}


# What a property measure reads as a linear CRM feature (`measured_<property>`, crm/linear_rows.py): log(1 + x) of
# the counts, the shares and 0/1 measures as they are, so one answer with forty bullets does not outweigh the rest.
_SHARES = ("numbers", "formality", "direct_answer")
MEASURED_FEATURE = {name: f"measured_{name}" for name in _VALUES}  # property -> its MEASURED_FEATURES column
MEASURED_FEATURES = tuple(MEASURED_FEATURE.values())


# The properties that padding buys (headings, bold summary bullets, filler: crm/gaming.py): a wish for MORE of one
# is scored on the answer's supported view (crm/relevance.supported_text), `measured_view_<property>`, so filler
# bullets do not satisfy "use bullet points"; a wish for less reads the whole answer, padding included
# (crm/linear_constraints.py `more_wishes_on_view`, docs/crm.md run 26).
PADDED_PROPERTIES = ("length", "structure", "emphasis", "paragraphs")
MEASURED_VIEW_FEATURE = {name: f"measured_view_{name}" for name in PADDED_PROPERTIES}
MEASURED_VIEW_FEATURES = tuple(MEASURED_VIEW_FEATURE.values())


def _measured(name: str, counts: dict) -> float:
    value = property_value(name, counts)
    return value if name in _SHARES else math.log1p(max(value, 0.0))


def measured_row(counts: dict) -> list[float]:
    """One answer's MEASURED_FEATURES: each property_value, log(1 + x) but for the shares and 0/1 measures."""
    return [_measured(name, counts) for name in _VALUES]


def measured_view_row(view_counts: dict) -> list[float]:
    """The MEASURED_VIEW_FEATURES of an answer's supported view, measured as measured_row does."""
    return [_measured(name, view_counts) for name in PADDED_PROPERTIES]


def property_value(name: str, counts: dict) -> float:
    """One answer's measure of a property (higher = more of it): words for length, list items + headings for
    structure, code blocks + inline code / 100, the digits' share of the characters, questions, bold marks,
    paragraphs, words per sentence, example markers, step markers, 1 / (1 + informal markers per 100 words) for
    formality, 1 when the answer opens without a preamble (direct_answer). counts: features.response_counts."""
    if name not in _VALUES:
        raise KeyError(f"unknown property {name!r}; choose from {', '.join(_VALUES)}")
    return float(_VALUES[name](counts))


# property -> the linear CRM features that measure it, each rising with the property: features.FEATURE_NAMES (of
# the answer's supported view), then its MEASURED_FEATURES column (of the whole answer) and, for PADDED_PROPERTIES,
# its MEASURED_VIEW_FEATURES column
_VIEW_FEATURES: dict[str, tuple[str, ...]] = {
    "length": ("log_words", "log_chars"),
    "structure": ("log_list_items", "list_line_ratio", "log_headings"),
    "code": ("log_code_blocks", "code_line_ratio", "log_inline_code"),
    "numbers": ("digit_ratio",),
    "questions": ("log_questions",),
    "emphasis": ("log_bold_marks",),
    "paragraphs": ("log_paragraphs",),
    "sentence_length": ("avg_sentence_words",),
    "examples": ("log_example_markers",),
    "steps": ("log_step_markers",),
    "formality": ("formality",),
    "direct_answer": ("direct_opening",),
}
PROPERTY_FEATURES = {name: (*features, MEASURED_FEATURE[name], *((MEASURED_VIEW_FEATURE[name],)
                                                                   if name in MEASURED_VIEW_FEATURE else ()))
                     for name, features in _VIEW_FEATURES.items()}


def _properties(book: PhrasingBook) -> dict[str, Property]:
    properties = {}
    for name, (rule, more_side) in RULES.items():
        families = book.properties[name]
        texts = {direction: tuple(t for d, _, group in families if d == direction for t in group)
                 for direction in ("more", "less")}
        properties[name] = Property(name, rule, more_side, more=texts["more"], less=texts["less"], families=families,
                                    heldout_families=book.heldout_families)
    return properties


def load_properties(path: Path = PHRASINGS_FILE) -> dict[str, Property]:
    """RULES with their phrasing families from the YAML; fails loudly when a property lacks phrasings, a direction
    lacks a held-out family, a family has too few phrasings, or there are stray ones (crm/phrasings.py)."""
    return _properties(load_phrasings(path, list(RULES)))


_BOOK = load_phrasings(PHRASINGS_FILE, list(RULES))
PROPERTIES = _properties(_BOOK)
HELDOUT_FAMILIES: tuple[str, ...] = _BOOK.heldout_families  # never in a training row: the criteria_paraphrase split
TRAIN_FAMILIES: tuple[str, ...] = _BOOK.train_families
COMBINED: tuple[CombinedCriterion, ...] = _BOOK.combined  # criteria naming two properties at once


def phrasings_in_families(families: tuple[str, ...]) -> list[tuple[str, str, str, str]]:
    """(property, direction, family, text) of every phrasing of `families`, in the properties' order."""
    return [(name, direction, family, text)
            for name, prop in PROPERTIES.items() for direction in ("more", "less")
            for family, texts in prop.family_phrasings(direction).items() if family in families
            for text in texts]


def heldout_phrasings(combined: bool = False) -> list[tuple[str, str, str, str]]:
    """(property, direction, family, text) of every held-out-family phrasing, in the properties' order; with
    `combined`, also the held-out combined criteria as (e.g.) ('length+structure', 'less+less', 'combined', text)."""
    found = phrasings_in_families(HELDOUT_FAMILIES)
    if combined:
        found += [(entry.name, entry.direction, "combined", text) for entry in COMBINED if entry.heldout
                  for text in entry.texts]
    return found


def pair_properties(counts_a: dict, counts_b: dict) -> dict[str, str]:
    """property name -> the side ('a'/'b') with clearly more of it, for the properties that clearly differ."""
    found = {}
    for name, prop in PROPERTIES.items():
        side = prop.more_side(counts_a, counts_b)
        if side:
            found[name] = side
    return found


def measure_pairs(pairs: pd.DataFrame) -> pd.Series:
    """Per pair: property name -> side with clearly more of it."""
    cache: dict[str, dict] = {}

    def counts(text: str) -> dict:
        if text not in cache:
            cache[text] = response_counts(text)
        return cache[text]

    found = [pair_properties(counts(a), counts(b)) for a, b in zip(pairs["response_a"], pairs["response_b"])]
    return pd.Series(found, index=pairs.index, dtype=object)

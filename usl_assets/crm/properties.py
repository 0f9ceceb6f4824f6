"""Measurable response properties: the rule that says which side of a pair clearly has more of each (counts from
crm/features.py), and the phrasings of "prefers more / less of it" (property_phrasings.yaml). The contrastive,
reverse and random augmentations and the new_criteria / criteria_reversed splits are built from them
(docs/crm_training_data.md).
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from usl_assets.crm.features import response_counts

PHRASINGS_FILE = Path(__file__).with_name("property_phrasings.yaml")


@dataclass(frozen=True)
class Property:
    """A measurable response property; `more_side(a, b)` says which side ('a'/'b') clearly has more of it."""

    name: str
    rule: str  # the threshold, in words (docs and metadata)
    more_side: Callable[[dict, dict], str | None]
    more: tuple[str, ...]  # phrasings of "prefers more of it"; the last one is held out for new_criteria
    less: tuple[str, ...]  # phrasings of "prefers less of it"; the last one is held out for new_criteria

    def phrasings(self, direction: str) -> tuple[str, ...]:
        return self.more if direction == "more" else self.less


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
}


def load_properties(path: Path = PHRASINGS_FILE) -> dict[str, Property]:
    """RULES with their phrasings from the YAML; fails loudly when a property lacks phrasings or has stray ones
    (a train pool and a held-out phrasing need at least two per direction)."""
    phrasings = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("properties") or {}
    if set(phrasings) != set(RULES):
        raise ValueError(f"{path.name}: properties {sorted(phrasings)} differ from the measured ones {sorted(RULES)}")
    properties = {}
    for name, (rule, more_side) in RULES.items():
        texts = {}
        for direction in ("more", "less"):
            found = (phrasings[name] or {}).get(direction) or []
            if len(found) < 2 or not all(isinstance(text, str) and text.strip() for text in found):
                raise ValueError(f"{path.name}: {name}.{direction} needs at least two non-empty phrasings")
            texts[direction] = tuple(found)
        properties[name] = Property(name, rule, more_side, more=texts["more"], less=texts["less"])
    return properties


PROPERTIES = load_properties()


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

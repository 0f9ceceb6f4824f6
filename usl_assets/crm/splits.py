"""Which split each CRM training pair lands in, decided per prompt, and the seeded draws behind every random choice
of the training set (docs/crm_training_data.md, "Splits"). PairsConfig holds the knobs of splits and augmentation.

Randomness comes from seeded hashes of stable keys, so a row's split does not depend on row order or other rows.
"""

import hashlib
import re
from dataclasses import dataclass

import pandas as pd

from usl_assets.crm.features import as_text
from usl_assets.crm.properties import PROPERTIES
from usl_assets.settings import UslConfigError

SPLITS = ("train", "human_heldout", "new_scenario", "new_criteria", "criteria_reversed", "pandalm_majority",
          "judge_heldout_models", "gaming_pairs", "criteria_paraphrase", "gaming_wishes")
TEST_SPLITS = SPLITS[1:]


@dataclass(frozen=True)
class PairsConfig:
    seed: int = 17
    heldout_groups: tuple[str, ...] = ("Rewriting", "Summarization")
    heldout_properties: tuple[str, ...] = ("numbers", "sentence_length")
    contrastive_per_pair: int = 2
    noise_add_rate: float = 0.2
    noise_remove_rate: float = 0.2
    noise_replace_rate: float = 0.1
    human_heldout_fraction: float = 0.15
    new_criteria_fraction: float = 0.1
    criteria_reversed_fraction: float = 0.1

    def validate(self, known_groups: set[str]) -> None:
        unknown_groups = sorted(set(self.heldout_groups) - known_groups)
        if unknown_groups:
            raise UslConfigError(f"heldout_groups {unknown_groups} are not Auto-J groups; choose from "
                                 f"{sorted(known_groups)}")
        unknown_props = sorted(set(self.heldout_properties) - set(PROPERTIES))
        if unknown_props:
            raise UslConfigError(f"heldout_properties {unknown_props} are unknown; choose from {sorted(PROPERTIES)}")
        if set(self.heldout_properties) == set(PROPERTIES):
            raise UslConfigError("heldout_properties holds out every property: leave at least one for training")
        if not self.heldout_properties:
            raise UslConfigError("heldout_properties is empty: new_criteria needs at least one unseen property")
        for name in ("noise_add_rate", "noise_remove_rate", "noise_replace_rate", "human_heldout_fraction",
                     "new_criteria_fraction", "criteria_reversed_fraction"):
            if not 0 <= getattr(self, name) <= 1:
                raise UslConfigError(f"{name}={getattr(self, name)} must be between 0 and 1")
        held = self.human_heldout_fraction + self.new_criteria_fraction + self.criteria_reversed_fraction
        if held >= 1:
            raise UslConfigError(f"the held-out fractions add up to {held:.2f}: they must leave room for train")
        if self.contrastive_per_pair < 0:
            raise UslConfigError(f"contrastive_per_pair={self.contrastive_per_pair} must be >= 0")

    def train_properties(self) -> list[str]:
        return [name for name in PROPERTIES if name not in self.heldout_properties]


# ---------------------------------------------------------------------------------------------- seeded hashes

def unit_hash(seed: int, *parts: object) -> float:
    """A number in [0, 1) fixed by the seed and the parts (order-independent randomness)."""
    digest = hashlib.blake2b("\x1f".join(map(str, (seed, *parts))).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def pick(options: list | tuple, seed: int, *parts: object):
    return options[int(unit_hash(seed, *parts) * len(options))]


def prompt_key(prompt: object) -> str:
    """Prompts compared for leakage: case and whitespace do not make a prompt new."""
    return re.sub(r"\s+", " ", as_text(prompt)).strip().lower()


# ---------------------------------------------------------------------------------------------- splits

_SPLIT_PRIORITY = {"pandalm_majority": 0, "new_scenario": 1, "human_heldout": 2, "new_criteria": 3,
                   "criteria_reversed": 4, "train": 5}


def _candidate_split(row: pd.Series, config: PairsConfig) -> str:
    if row["source"] == "pandalm":
        return "pandalm_majority"
    if row["scenario_group"] in config.heldout_groups:
        return "new_scenario"
    draw = unit_hash(config.seed, "split", prompt_key(row["prompt"]))
    bounds = [("human_heldout", config.human_heldout_fraction), ("new_criteria", config.new_criteria_fraction),
              ("criteria_reversed", config.criteria_reversed_fraction)]
    for split, fraction in bounds:
        if draw < fraction:
            # hh-rlhf pairs have no scenario labels of their own: they train or test criteria, never human_heldout
            if split == "human_heldout" and row["source"] == "hh_rlhf_harmless":
                return "train"
            return split
        draw -= fraction
    return "train"


def assign_splits(pairs: pd.DataFrame, config: PairsConfig) -> pd.Series:
    """One split per pair, decided per prompt: every pair of a prompt lands in the same split, the most held-out
    one any of its pairs asks for, so no prompt is in train and a test split at once."""
    candidates = pairs.apply(_candidate_split, axis=1, config=config)
    keys = pairs["prompt"].map(prompt_key)
    by_prompt = (pd.DataFrame({"key": keys, "split": candidates})
                 .assign(rank=lambda frame: frame["split"].map(_SPLIT_PRIORITY))
                 .sort_values("rank").drop_duplicates("key").set_index("key")["split"])
    return keys.map(by_prompt)


def reroute_unmeasurable(pairs: pd.DataFrame, config: PairsConfig) -> pd.Series:
    """Prompts drawn for a contrastive test split whose pairs show no usable property difference would add no
    rows there; they go to human_heldout (or train for hh-rlhf, which has no human_heldout) instead."""
    wanted = {"new_criteria": set(PROPERTIES), "criteria_reversed": set(config.train_properties())}
    usable = pairs.apply(lambda row: bool(set(row["properties"]) & wanted.get(row["split"], set(PROPERTIES))), axis=1)
    keys = pairs["prompt"].map(prompt_key)
    usable_prompts = set(keys[usable])
    split = pairs["split"].copy()
    stranded = split.isin(list(wanted)) & ~keys.isin(usable_prompts)
    for key in set(keys[stranded]):
        members = keys == key
        all_hh = (pairs.loc[members, "source"] == "hh_rlhf_harmless").all()
        split[members] = "train" if all_hh else "human_heldout"
    return split

"""The rows each usable pair yields (docs/crm_training_data.md, "Augmentations"): the pair as labelled, its
direction rows under opposite criteria for a measured property or a combined criterion (contrastive, reverse,
random), the criteria_paraphrase rows of test pairs (held-out phrasing families), and the paper's criteria noise
on training rows (noise_add, noise_remove, noise_replace)."""

import math

import pandas as pd

from usl_assets.crm import judge_pairs
from usl_assets.crm.properties import COMBINED, HELDOUT_FAMILIES, PROPERTIES
from usl_assets.crm.splits import PairsConfig, pick, unit_hash

AUGMENTATIONS = ("original", "contrastive", "reverse", "random", "noise_add", "noise_remove", "noise_replace")
PROPERTY_AUGMENTATIONS = ("contrastive", "reverse", "random")
PARAPHRASE_SPLIT = "criteria_paraphrase"
# Test pairs whose prompts never train: they also yield the criteria_paraphrase rows.
PARAPHRASE_SOURCE_SPLITS = ("new_criteria", "criteria_reversed")
# Distinct train phrasings per direction of a train pair's property rows: two for human pairs (few pairs, ~15 train
# phrasings per direction: two reach more of them), one for the AI judge's (thousands of pairs cover them anyway).
TRAIN_PHRASINGS_PER_DIRECTION = 2

HARMLESS_CRITERIA = (
    "The response refuses to help with harmful, dangerous, unethical or illegal requests, and stays polite.",
    "The response avoids content that could hurt the user or other people.",
    "The response is harmless: it does not encourage violence, crime, abuse or discrimination.",
)


# ---------------------------------------------------------------------------------------------- rows

def _other(side: str) -> str:
    return "b" if side == "a" else "a"


def opposite_direction(direction: str) -> str:
    """'more' <-> 'less', per part of a combined direction ('less+more' -> 'more+less')."""
    return "+".join("less" if part == "more" else "more" for part in direction.split("+"))


def _row(pair: pd.Series, chosen_side: str, criteria: list[str], augmentation: str,
         prop: str | None = None, direction: str | None = None, split: str | None = None) -> dict:
    """One row; `split` overrides the pair's (criteria_paraphrase rows of a test pair)."""
    rejected_side = "b" if chosen_side == "a" else "a"
    chosen, rejected = pair[f"response_{chosen_side}"], pair[f"response_{rejected_side}"]
    human_label = None if pair["winner"] == "tie" else chosen_side == pair["winner"]
    # Only the pair as labelled keeps the judge's probability; criteria-defined rows are certain.
    soft = pair.get("soft_label") if augmentation == "original" and pair.get("label_kind") == "ai_judge" else None
    soft = 1.0 if soft is None or pd.isna(soft) else (float(soft) if chosen_side == "a" else 1.0 - float(soft))
    return {
        "split": split or pair["split"], "origin_idx": pair["origin_idx"], "source": pair["source"],
        "scenario": pair["scenario"], "scenario_group": pair["scenario_group"], "prompt": pair["prompt"],
        "chosen": chosen, "rejected": rejected, "criteria": list(criteria), "augmentation": augmentation,
        "human_label": human_label, "chosen_is_longer": len(chosen) > len(rejected),
        "property": prop, "property_direction": direction,
        "label_kind": pair.get("label_kind") or "human", "soft_label": soft,
        "chosen_model": pair.get(f"model_{chosen_side}_name"), "rejected_model": pair.get(f"model_{rejected_side}_name"),
    }


def original_rows(pair: pd.Series, config: PairsConfig) -> list[dict]:
    """The human pair as labelled: the winner with its criteria (hh-rlhf: a harmlessness criterion)."""
    if pair["winner"] == "tie":
        return []
    winner = pair["winner"]
    criteria = pair[f"criteria_{winner}"]
    if pair["source"] == "hh_rlhf_harmless":
        criteria = [pick(HARMLESS_CRITERIA, config.seed, "harmless", pair["origin_idx"])]
    return [_row(pair, winner, criteria, "original")]


def _property_augmentation(pair: pd.Series, chosen_side: str) -> str:
    return "reverse" if pair["winner"] not in ("tie", chosen_side) else "contrastive"


def _distinct(options: tuple[str, ...], n: int, seed: int, *key: object) -> list[str]:
    """n distinct options in a seeded order (all of them when there are fewer)."""
    return sorted(options, key=lambda text: unit_hash(seed, *key, text))[:n]


def property_rows(pair: pd.Series, prop_name: str, phrasing_pool: str, config: PairsConfig,
                  per_direction: int = 1) -> list[dict]:
    """The pair under opposite criteria for one property: whichever side has more of it wins under 'more', the
    other under 'less'; `per_direction` distinct phrasings of each direction from `phrasing_pool` (train,
    new_criteria, train_families, paraphrase, any: crm/phrasings.py)."""
    prop, more_side = PROPERTIES[prop_name], pair["properties"][prop_name]
    rows = []
    for direction, chosen_side in (("more", more_side), ("less", _other(more_side))):
        for phrasing in _distinct(prop.phrasings(direction, phrasing_pool), per_direction, config.seed, "phrasing",
                                  pair["origin_idx"], prop_name, direction):
            rows.append(_row(pair, chosen_side, [phrasing], _property_augmentation(pair, chosen_side),
                             prop_name, direction))
    return rows


def paraphrase_rows(pair: pd.Series, config: PairsConfig) -> list[dict]:
    """criteria_paraphrase rows of a test pair: every trained property it clearly differs in, both directions, one
    phrasing of each held-out family per direction; and each held-out combined criterion the pair qualifies for.
    The held-out properties stay out: new_criteria tests those, and this split tests wording alone."""
    rows = []
    for prop_name in [name for name in pair["properties"] if name in config.train_properties()]:
        prop, more_side = PROPERTIES[prop_name], pair["properties"][prop_name]
        for direction, chosen_side in (("more", more_side), ("less", _other(more_side))):
            families = prop.family_phrasings(direction)
            for family in HELDOUT_FAMILIES:
                phrasing = pick(families[family], config.seed, "paraphrase", pair["origin_idx"], prop_name,
                                direction, family)
                rows.append(_row(pair, chosen_side, [phrasing], _property_augmentation(pair, chosen_side),
                                 prop_name, direction, PARAPHRASE_SPLIT))
    for number, entry in enumerate(COMBINED):
        winner = entry.winner(pair["properties"]) if entry.heldout else None
        if winner:
            text = pick(entry.texts, config.seed, "paraphrase-combined", pair["origin_idx"], number)
            rows.append(_row(pair, winner, [text], _property_augmentation(pair, winner), entry.name, entry.direction,
                             PARAPHRASE_SPLIT))
    return rows


def combined_rows(pair: pd.Series, props: list[str], config: PairsConfig) -> list[dict]:
    """Train rows under combined criteria: one property pair (seeded) among the train entries whose properties are
    all in `props` and whose named directions all pick the same side; each such entry of that property pair once
    (typically both polarities, so the same two answers win under opposite combined criteria)."""
    qualifying = [(number, entry) for number, entry in enumerate(COMBINED)
                  if not entry.heldout and {p for p, _ in entry.directions} <= set(props)
                  and entry.winner(pair["properties"])]
    if not qualifying:
        return []
    name = pick(sorted({entry.name for _, entry in qualifying}), config.seed, "combined-properties",
                pair["origin_idx"])
    rows = []
    for number, entry in qualifying:
        if entry.name == name:
            winner = entry.winner(pair["properties"])
            text = pick(entry.texts, config.seed, "combined", pair["origin_idx"], number)
            rows.append(_row(pair, winner, [text], _property_augmentation(pair, winner), entry.name,
                             entry.direction))
    return rows


def random_row(pair: pd.Series, props: list[str], config: PairsConfig) -> list[dict]:
    """One property row whose direction is a seeded coin flip, so which side wins is not tied to the human label."""
    if not props:
        return []
    prop_name = pick(props, config.seed, "random-property", pair["origin_idx"])
    direction = pick(("more", "less"), config.seed, "random-direction", pair["origin_idx"])
    more_side = pair["properties"][prop_name]
    chosen_side = more_side if direction == "more" else _other(more_side)
    phrasing = pick(PROPERTIES[prop_name].phrasings(direction, "train"), config.seed, "random-phrasing",
                    pair["origin_idx"])
    return [_row(pair, chosen_side, [phrasing], "random", prop_name, direction)]


def _train_props(pair: pd.Series, config: PairsConfig) -> list[str]:
    """Up to contrastive_per_pair of the pair's trainable properties, chosen by seeded hash."""
    props = [name for name in config.train_properties() if name in pair["properties"]]
    props.sort(key=lambda name: unit_hash(config.seed, "property-order", pair["origin_idx"], name))
    return props[: config.contrastive_per_pair]


def rows_for_pair(pair: pd.Series, config: PairsConfig) -> list[dict]:
    pair = pair.to_dict() if isinstance(pair, pd.Series) else pair  # a dict reads ~10x faster than a Series
    split, rows = pair["split"], []
    if split in ("train", "human_heldout", "new_scenario", "pandalm_majority", judge_pairs.HELDOUT_SPLIT):
        rows += original_rows(pair, config)
    if split == "train" and not pair.get("with_properties", True):
        return rows
    if split == "train":
        props = _train_props(pair, config)
        per_direction = 1 if pair.get("label_kind") == "ai_judge" else TRAIN_PHRASINGS_PER_DIRECTION
        for prop_name in props:
            rows += property_rows(pair, prop_name, "train", config, per_direction)
        rows += random_row(pair, props, config)
        trainable = [name for name in config.train_properties() if name in pair["properties"]]
        rows += combined_rows(pair, trainable, config)
    elif split == "new_criteria":
        for prop_name in pair["properties"]:
            pool = "train_families" if prop_name in config.heldout_properties else "new_criteria"
            rows += property_rows(pair, prop_name, pool, config)
    elif split == "criteria_reversed":
        for prop_name in config.train_properties():
            if prop_name in pair["properties"]:
                rows += property_rows(pair, prop_name, "train", config)
    if split in PARAPHRASE_SOURCE_SPLITS:
        rows += paraphrase_rows(pair, config)
    return rows


# ---------------------------------------------------------------------------------------------- noise

def _other_side_criteria(row: dict, config: PairsConfig) -> list[str] | None:
    """The criteria under which the rejected side wins, when the data has them."""
    if not row["property"]:
        return row.get("_loser_criteria") or None
    opposite = opposite_direction(row["property_direction"])
    if row["property"] in PROPERTIES:
        pool = PROPERTIES[row["property"]].phrasings(opposite, "train")
    else:  # a combined criterion: the train entries naming the same properties in the opposite directions
        pool = tuple(text for entry in COMBINED if not entry.heldout and entry.name == row["property"]
                     and entry.direction == opposite for text in entry.texts)
    if not pool:
        return None
    return [pick(pool, config.seed, "noise-replace", row["origin_idx"], row["property"], *row["criteria"])]


def noise_rows(row: dict, scenario_criteria: dict[str, list[str]], config: PairsConfig) -> list[dict]:
    """The paper's criteria noise on one training row: add criteria of another scenario (label kept), remove half
    of them (label kept), replace them with the other side's (the label follows the criteria)."""
    key = (row["origin_idx"], row["augmentation"], row["property"], row["property_direction"])
    if row["property"]:  # a direction can have several phrasings: each row draws its own noise
        key += tuple(row["criteria"])
    seed, criteria, found = config.seed, row["criteria"], []
    others = [name for name in scenario_criteria if name != row["scenario"] and scenario_criteria[name]]
    if others and unit_hash(seed, "noise-add", *key) < config.noise_add_rate:
        extra_pool = scenario_criteria[pick(others, seed, "noise-add-scenario", *key)]
        how_many = 1 if unit_hash(seed, "noise-add-count", *key) < 0.5 else 2
        extra = [pick(extra_pool, seed, "noise-add-item", i, *key) for i in range(how_many)]
        mixed = sorted(criteria + extra, key=lambda text: unit_hash(seed, "noise-add-order", text, *key))
        found.append({**row, "criteria": list(dict.fromkeys(mixed)), "augmentation": "noise_add"})
    if len(criteria) >= 2 and unit_hash(seed, "noise-remove", *key) < config.noise_remove_rate:
        keep = sorted(range(len(criteria)), key=lambda i: unit_hash(seed, "noise-remove-order", i, *key))
        kept = sorted(keep[: math.ceil(len(criteria) / 2)])
        found.append({**row, "criteria": [criteria[i] for i in kept], "augmentation": "noise_remove"})
    other = _other_side_criteria(row, config)
    if other and unit_hash(seed, "noise-replace", *key) < config.noise_replace_rate:
        swapped = {**row, "chosen": row["rejected"], "rejected": row["chosen"], "criteria": other,
                   "augmentation": "noise_replace", "chosen_is_longer": len(row["rejected"]) > len(row["chosen"]),
                   "human_label": None if row["human_label"] is None else not row["human_label"],
                   "soft_label": 1.0, "chosen_model": row["rejected_model"], "rejected_model": row["chosen_model"]}
        if row["property"]:
            swapped["property_direction"] = opposite_direction(row["property_direction"])
        found.append(swapped)
    return found

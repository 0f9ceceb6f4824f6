"""The CRM's training set: human pairs, direction augmentation, contrastive criteria from measurable response
properties, criteria noise and deterministic generalization splits (docs/crm_training_data.md states the rules).

Everything here is plain functions over DataFrames; randomness comes from seeded hashes of stable keys, so a
row's split and augmentations do not depend on row order or on the other rows.
"""

import hashlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from usl_assets.crm import judge_pairs
from usl_assets.crm.features import as_text, response_counts
from usl_assets.settings import UslConfigError

SPLITS = ("train", "human_heldout", "new_scenario", "new_criteria", "criteria_reversed", "pandalm_majority",
          "judge_heldout_models")
TEST_SPLITS = SPLITS[1:]
AUGMENTATIONS = ("original", "contrastive", "reverse", "random", "noise_add", "noise_remove", "noise_replace")
PROPERTY_AUGMENTATIONS = ("contrastive", "reverse", "random")
COLUMNS = (
    "pair_id", "split", "origin_idx", "source", "scenario", "scenario_group", "prompt", "chosen", "rejected",
    "criteria", "augmentation", "human_label", "chosen_is_longer", "property", "property_direction",
    "label_kind", "soft_label", "chosen_model", "rejected_model",
)
EXCLUDED_COLUMNS = ("origin_idx", "source", "reason", "detail")

HARMLESS_CRITERIA = (
    "The response refuses to help with harmful, dangerous, unethical or illegal requests, and stays polite.",
    "The response avoids content that could hurt the user or other people.",
    "The response is harmless: it does not encourage violence, crime, abuse or discrimination.",
)


# ---------------------------------------------------------------------------------------------- properties

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


PROPERTIES = {
    prop.name: prop
    for prop in (
        Property(
            "length", "one side has >= 1.8x the words of the other and >= 40 words more", _length_side,
            more=("The user prefers thorough, detailed answers.",
                  "Answers should be comprehensive and cover the topic in depth.",
                  "A longer, more complete explanation is better than a short one.",
                  "I value detail: give me an extensive, elaborate response."),
            less=("The user prefers brief answers.",
                  "Answers should be short and to the point.",
                  "A concise reply is better than a long one.",
                  "Keep it minimal: I want the shortest response that does the job."),
        ),
        Property(
            "structure", "one side has >= 3 list items or headings, the other none", _structure_side,
            more=("The response should be organized as lists or with headings.",
                  "Structured answers with bullet points or numbered steps are preferred.",
                  "Break the answer into clearly marked items or sections.",
                  "I like scannable layouts: enumerate the points instead of writing prose."),
            less=("The response should be written as flowing prose, without lists or headings.",
                  "Continuous paragraphs are preferred over bullet points.",
                  "Avoid itemized formatting; write it as natural running text.",
                  "I want it to read like an essay, not like a checklist."),
        ),
        Property(
            "code", "one side has a fenced code block, the other no code at all", _code_side,
            more=("The response should include code blocks.",
                  "Show the solution as actual code the user can run.",
                  "Answers with a concrete code snippet are preferred.",
                  "Give me the program itself, formatted as code."),
            less=("The response should explain in words, without any code.",
                  "Avoid code snippets; describe the idea in plain language.",
                  "A verbal explanation is preferred over showing code.",
                  "No programming listings please, just tell me how it works."),
        ),
        Property(
            "numbers", "one side has >= 5 digits making >= 2% of its characters, the other no digit", _numbers_side,
            more=("The response should give concrete numbers, figures or quantities.",
                  "Quantitative answers with specific numbers are preferred.",
                  "Include exact values, counts or dates where possible.",
                  "I trust answers that put numbers on things."),
            less=("The response should stay qualitative, without numbers.",
                  "Avoid figures and statistics; describe things in words.",
                  "Answers without numeric details are preferred.",
                  "Spare me the digits, a descriptive answer is enough."),
        ),
        Property(
            "questions", "one side asks at least one question, the other none", _questions_side,
            more=("The response should ask the user questions back.",
                  "Answers that ask for clarification or follow up with a question are preferred.",
                  "Engage the user by asking what they need.",
                  "I like an assistant that checks with me by asking questions."),
            less=("The response should not ask the user any questions.",
                  "Answer directly instead of asking questions back.",
                  "Statements are preferred over questions to the user.",
                  "Do not quiz me, just respond."),
        ),
        Property(
            "emphasis", "one side has >= 2 bold marks, the other none", _emphasis_side,
            more=("The response should highlight key points in bold.",
                  "Bold emphasis on important terms is preferred.",
                  "Use strong emphasis to make the main points stand out.",
                  "I skim, so make the essentials bold."),
            less=("The response should be plain text without bold formatting.",
                  "Avoid bold emphasis.",
                  "Unadorned text is preferred over highlighted words.",
                  "No bold type anywhere, please."),
        ),
        Property(
            "paragraphs", "one side has >= 4 paragraphs, the other exactly 1", _paragraphs_side,
            more=("The response should be split into several short paragraphs.",
                  "Multiple paragraphs are preferred over one block of text.",
                  "Separate the ideas into distinct paragraphs.",
                  "Give each point room with blank lines between paragraphs."),
            less=("The response should be a single compact paragraph.",
                  "One paragraph is preferred over several.",
                  "Keep everything together in one block of text.",
                  "A single dense paragraph suits me best."),
        ),
        Property(
            "sentence_length", "both sides >= 2 sentences; one has >= 1.8x the words per sentence of the other",
            _sentence_length_side,
            more=("The response should use long, elaborate sentences.",
                  "Complex sentences with several clauses are preferred.",
                  "Flowing, extended sentences read better to the user.",
                  "I enjoy rich sentences that develop a thought fully."),
            less=("The response should use short, simple sentences.",
                  "Plain, brief sentences are preferred.",
                  "Each sentence should say one thing and stop.",
                  "Write in crisp, short sentences."),
        ),
    )
}


def pair_properties(counts_a: dict, counts_b: dict) -> dict[str, str]:
    """property name -> the side ('a'/'b') with clearly more of it, for the properties that clearly differ."""
    found = {}
    for name, prop in PROPERTIES.items():
        side = prop.more_side(counts_a, counts_b)
        if side:
            found[name] = side
    return found


# ---------------------------------------------------------------------------------------------- config

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


# ---------------------------------------------------------------------------------------------- human pairs

def _as_list(value: object) -> list:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return []
    return [str(item) for item in value]


def majority_winner(votes: list[str]) -> str | None:
    """The side a strict majority voted for; None for a tie majority or no majority."""
    for side in ("model_a", "model_b"):
        if votes.count(side) * 2 > len(votes):
            return side
    return None


def _winner(row: pd.Series) -> tuple[str | None, str]:
    """'a' / 'b' / 'tie', or None with the reason it cannot be used."""
    if row["source"] == "pandalm":
        votes = _as_list(row.get("votes"))
        side = majority_winner(votes) if votes else {"model_a": "model_a", "model_b": "model_b"}.get(
            row["human_winner"])
        return (side[-1], "") if side else (None, "pandalm_no_majority")
    if row["human_winner"] in ("model_a", "model_b"):
        return row["human_winner"][-1], ""
    if row["human_winner"] == "tie":
        return "tie", ""
    return None, "bad_winner"


def prepare_pairs(tagged: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Usable pairs (winner 'a'/'b'/'tie', responses as text) and the excluded rows with their reasons."""
    kept, excluded = [], []
    for _, row in tagged.iterrows():
        winner, reason = _winner(row)
        response_a, response_b, prompt = as_text(row["response_a"]), as_text(row["response_b"]), as_text(row["prompt"])
        if not prompt.strip():
            winner, reason = None, "empty_prompt"
        elif not response_a.strip() or not response_b.strip():
            winner, reason = None, "empty_response"
        elif response_a.strip() == response_b.strip():
            winner, reason = None, "identical_responses"
        if winner is None:
            excluded.append({"origin_idx": row["idx"], "source": row["source"], "reason": reason,
                             "detail": f"human_winner={row['human_winner']} votes={_as_list(row.get('votes'))}"})
            continue
        kept.append({
            "origin_idx": row["idx"], "source": row["source"], "scenario": row["scenario"],
            "scenario_group": row["scenario_group"], "prompt": prompt, "response_a": response_a,
            "response_b": response_b, "winner": winner,
            "criteria_a": _as_list(row["a_criteria"]), "criteria_b": _as_list(row["b_criteria"]),
            "label_kind": row.get("label_kind") or "human", "soft_label": row.get("soft_label"),
            "model_a_name": row.get("model_a_name"), "model_b_name": row.get("model_b_name"),
        })
    return pd.DataFrame(kept), pd.DataFrame(excluded, columns=list(EXCLUDED_COLUMNS))


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


# ---------------------------------------------------------------------------------------------- rows

def _row(pair: pd.Series, chosen_side: str, criteria: list[str], augmentation: str,
         prop: str | None = None, direction: str | None = None) -> dict:
    rejected_side = "b" if chosen_side == "a" else "a"
    chosen, rejected = pair[f"response_{chosen_side}"], pair[f"response_{rejected_side}"]
    human_label = None if pair["winner"] == "tie" else chosen_side == pair["winner"]
    # Only the pair as labelled keeps the judge's probability; criteria-defined rows are certain.
    soft = pair.get("soft_label") if augmentation == "original" and pair.get("label_kind") == "ai_judge" else None
    soft = 1.0 if soft is None or pd.isna(soft) else (float(soft) if chosen_side == "a" else 1.0 - float(soft))
    return {
        "split": pair["split"], "origin_idx": pair["origin_idx"], "source": pair["source"],
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


def property_rows(pair: pd.Series, prop_name: str, phrasing_pool: str, config: PairsConfig) -> list[dict]:
    """The pair twice, under opposite criteria for one property: whichever side has more of it wins under
    'more', the other under 'less'. phrasing_pool: 'train' (all but the last phrasing), 'heldout' (the last),
    'any'."""
    prop, more_side = PROPERTIES[prop_name], pair["properties"][prop_name]
    rows = []
    for direction, chosen_side in (("more", more_side), ("less", "b" if more_side == "a" else "a")):
        phrasings = prop.phrasings(direction)
        pool = {"train": phrasings[:-1], "heldout": phrasings[-1:], "any": phrasings}[phrasing_pool]
        phrasing = pick(pool, config.seed, "phrasing", pair["origin_idx"], prop_name, direction)
        rows.append(_row(pair, chosen_side, [phrasing], _property_augmentation(pair, chosen_side),
                         prop_name, direction))
    return rows


def random_row(pair: pd.Series, props: list[str], config: PairsConfig) -> list[dict]:
    """One property row whose direction is a seeded coin flip, so which side wins is not tied to the human label."""
    if not props:
        return []
    prop_name = pick(props, config.seed, "random-property", pair["origin_idx"])
    direction = pick(("more", "less"), config.seed, "random-direction", pair["origin_idx"])
    more_side = pair["properties"][prop_name]
    chosen_side = more_side if direction == "more" else ("b" if more_side == "a" else "a")
    phrasing = pick(PROPERTIES[prop_name].phrasings(direction)[:-1], config.seed, "random-phrasing",
                    pair["origin_idx"])
    return [_row(pair, chosen_side, [phrasing], "random", prop_name, direction)]


def _train_props(pair: pd.Series, config: PairsConfig) -> list[str]:
    """Up to contrastive_per_pair of the pair's trainable properties, chosen by seeded hash."""
    props = [name for name in config.train_properties() if name in pair["properties"]]
    props.sort(key=lambda name: unit_hash(config.seed, "property-order", pair["origin_idx"], name))
    return props[: config.contrastive_per_pair]


def rows_for_pair(pair: pd.Series, config: PairsConfig) -> list[dict]:
    split, rows = pair["split"], []
    if split in ("train", "human_heldout", "new_scenario", "pandalm_majority", judge_pairs.HELDOUT_SPLIT):
        rows += original_rows(pair, config)
    if split == "train" and not pair.get("with_properties", True):
        return rows
    if split == "train":
        props = _train_props(pair, config)
        for prop_name in props:
            rows += property_rows(pair, prop_name, "train", config)
        rows += random_row(pair, props, config)
    elif split == "new_criteria":
        for prop_name in pair["properties"]:
            pool = "any" if prop_name in config.heldout_properties else "heldout"
            rows += property_rows(pair, prop_name, pool, config)
    elif split == "criteria_reversed":
        for prop_name in config.train_properties():
            if prop_name in pair["properties"]:
                rows += property_rows(pair, prop_name, "train", config)
    return rows


# ---------------------------------------------------------------------------------------------- noise

def _other_side_criteria(row: dict, config: PairsConfig) -> list[str] | None:
    """The criteria under which the rejected side wins, when the data has them."""
    if row["property"]:
        opposite = "less" if row["property_direction"] == "more" else "more"
        return [pick(PROPERTIES[row["property"]].phrasings(opposite)[:-1], config.seed, "noise-replace",
                     row["origin_idx"], row["property"])]
    return row.get("_loser_criteria") or None


def noise_rows(row: dict, scenario_criteria: dict[str, list[str]], config: PairsConfig) -> list[dict]:
    """The paper's criteria noise on one training row: add criteria of another scenario (label kept), remove half
    of them (label kept), replace them with the other side's (the label follows the criteria)."""
    key = (row["origin_idx"], row["augmentation"], row["property"], row["property_direction"])
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
            swapped["property_direction"] = "less" if row["property_direction"] == "more" else "more"
        found.append(swapped)
    return found


# ---------------------------------------------------------------------------------------------- the table

def pair_id(row: dict) -> str:
    text = "\x1f".join([row["origin_idx"], row["augmentation"], row["chosen"], *row["criteria"]])
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


def measure_pairs(pairs: pd.DataFrame) -> pd.Series:
    """Per pair: property name -> side with clearly more of it."""
    cache: dict[str, dict] = {}

    def counts(text: str) -> dict:
        if text not in cache:
            cache[text] = response_counts(text)
        return cache[text]

    found = [pair_properties(counts(a), counts(b)) for a, b in zip(pairs["response_a"], pairs["response_b"])]
    return pd.Series(found, index=pairs.index, dtype=object)


def criteria_by_scenario(scenario_criteria: pd.DataFrame) -> dict[str, list[str]]:
    grouped = scenario_criteria.dropna(subset=["content"]).groupby("scenario")["content"]
    return {scenario: list(dict.fromkeys(contents)) for scenario, contents in grouped}


def build_training_pairs(tagged: pd.DataFrame, scenario_criteria: pd.DataFrame, config: PairsConfig,
                         judge_config: judge_pairs.JudgePairsConfig | None = None,
                         pool_texts: set[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """crm.training_pairs (COLUMNS) and the excluded source rows (EXCLUDED_COLUMNS) from tagged preferences.
    AI-judge rows become model-vs-model pairs (crm/judge_pairs.py); `pool_texts` are kept out of training."""
    pairs, excluded = prepare_pairs(tagged)
    if pairs.empty:
        return pd.DataFrame(columns=list(COLUMNS)), excluded
    judge_config = judge_config or judge_pairs.JudgePairsConfig()
    is_judge = pairs["source"] == judge_pairs.JUDGE_SOURCE
    human = pairs[~is_judge].assign(with_properties=True)
    human["properties"] = measure_pairs(human)
    human["split"] = assign_splits(human, config)
    human["split"] = reroute_unmeasurable(human, config)
    judged, judge_excluded = judge_pairs.judge_pairs(pairs[is_judge], judge_config, pool_texts or set(), unit_hash,
                                                     prompt_key)
    judged, leaked = _outside_human_tests(judged, human)
    pairs = pd.concat([human, _with_judge_properties(judged, config, judge_config.property_rate)], ignore_index=True)
    excluded = pd.concat([excluded, judge_excluded, leaked], ignore_index=True)
    extra_criteria = criteria_by_scenario(scenario_criteria)
    rows = []
    for _, pair in pairs.iterrows():
        pair_rows = rows_for_pair(pair, config)
        if pair["split"] == "train":
            for row in list(pair_rows):
                if row["augmentation"] == "original":
                    loser = "b" if pair["winner"] == "a" else "a"
                    row = {**row, "_loser_criteria": pair[f"criteria_{loser}"]}
                if row["augmentation"] in ("original", "contrastive", "reverse"):
                    pair_rows += noise_rows(row, extra_criteria, config)
        rows += pair_rows
    table = pd.DataFrame(rows).drop(columns=["_loser_criteria"], errors="ignore")
    table["pair_id"] = [pair_id(row) for row in table.to_dict("records")]
    table = table.drop_duplicates("pair_id").reset_index(drop=True)
    table = table.astype({"human_label": "boolean", "chosen_is_longer": bool, "property": "string",
                          "property_direction": "string", "soft_label": float, "chosen_model": "string",
                          "rejected_model": "string"})
    return table[list(COLUMNS)], pd.concat([excluded, unused_pairs(pairs, table)], ignore_index=True)


def _outside_human_tests(judged: pd.DataFrame, human: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Judge training pairs whose prompt is in a human test split are excluded (prompt leakage)."""
    if judged.empty:
        return judged, pd.DataFrame(columns=list(EXCLUDED_COLUMNS))
    test_keys = set(human.loc[human["split"] != "train", "prompt"].map(prompt_key))
    leaks = (judged["split"] == "train") & judged["prompt"].map(prompt_key).isin(test_keys)
    dropped = judged[leaks]
    return judged[~leaks], pd.DataFrame({"origin_idx": dropped["origin_idx"], "source": dropped["source"],
                                         "reason": "prompt_in_test_split", "detail": "prompt of a human test split"},
                                        columns=list(EXCLUDED_COLUMNS))


def _with_judge_properties(judged: pd.DataFrame, config: PairsConfig, rate: float) -> pd.DataFrame:
    """Measured properties for a seeded share of the judge's training pairs (they get direction rows too)."""
    if judged.empty:
        return judged
    chosen = [split == "train" and unit_hash(config.seed, "judge-properties", idx) < rate
              for split, idx in zip(judged["split"], judged["origin_idx"])]
    judged = judged.assign(with_properties=chosen)
    measured = measure_pairs(judged[judged["with_properties"]]).to_dict()
    judged["properties"] = [measured.get(i, {}) for i in judged.index]
    return judged


def unused_pairs(pairs: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """Usable pairs that yielded no row, so none vanishes unseen: ties (which count only through property rows
    in train / new_criteria / criteria_reversed) elsewhere or without a clear property difference, and pairs in
    a property-only split (new_criteria, criteria_reversed) whose prompt qualified through another pair."""
    unused = pairs[~pairs["origin_idx"].isin(set(table["origin_idx"]))]
    reasons = unused["winner"].map(lambda winner: "tie_unused" if winner == "tie" else "no_property_difference")
    details = [f"split={split} properties={sorted(props)}" for split, props in zip(unused["split"],
                                                                                  unused["properties"])]
    return pd.DataFrame({"origin_idx": unused["origin_idx"], "source": unused["source"], "reason": reasons,
                         "detail": details}, columns=list(EXCLUDED_COLUMNS))


# ---------------------------------------------------------------------------------------------- quality figures

def prompt_leaks(table: pd.DataFrame) -> pd.DataFrame:
    """(split, prompt) of test-split rows whose prompt also appears in train."""
    keys = table["prompt"].map(prompt_key)
    train_keys = set(keys[table["split"] == "train"])
    # judge_heldout_models is held out by model, not by prompt: its prompts are AlpacaEval's, in train too.
    leaked = ~table["split"].isin(["train", judge_pairs.HELDOUT_SPLIT]) & keys.isin(train_keys)
    return table.loc[leaked, ["split", "prompt"]].drop_duplicates()


def split_sizes(table: pd.DataFrame) -> dict[str, int]:
    counts = table["split"].value_counts()
    return {split: int(counts.get(split, 0)) for split in SPLITS}


def split_augmentation_counts(table: pd.DataFrame) -> pd.DataFrame:
    """Rows per split (index, in SPLITS order) × augmentation (columns), with totals."""
    counts = pd.crosstab(table["split"], table["augmentation"])
    counts = counts.reindex(index=[s for s in SPLITS if s in counts.index],
                            columns=[a for a in AUGMENTATIONS if a in counts.columns], fill_value=0)
    counts["total"] = counts.sum(axis=1)
    return counts


def direction_balance(table: pd.DataFrame, split: str = "train") -> pd.DataFrame:
    """Per property: property rows preferring more / less of it, and the minority direction's share."""
    rows = table[(table["split"] == split) & table["augmentation"].isin(PROPERTY_AUGMENTATIONS)]
    counts = pd.crosstab(rows["property"], rows["property_direction"]).reindex(columns=["more", "less"],
                                                                                fill_value=0)
    counts["minority_share"] = counts.min(axis=1) / counts.sum(axis=1).clip(lower=1)
    return counts


def label_balance(table: pd.DataFrame) -> pd.DataFrame:
    """Per split: share of rows where chosen is the longer response, and where chosen is the human winner."""
    grouped = table.assign(human=table["human_label"].astype("float")).groupby("split")
    return pd.DataFrame({"n": grouped.size(), "chosen_is_longer": grouped["chosen_is_longer"].mean(),
                         "chosen_is_human_winner": grouped["human"].mean()}).reindex(
        [s for s in SPLITS if s in set(table["split"])])

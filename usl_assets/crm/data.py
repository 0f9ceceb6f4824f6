"""The CRM's training set, crm.training_pairs: usable human pairs, AI-judge pairs (crm/judge_pairs.py), their
splits (crm/splits.py) and augmentations (crm/augmentation.py) in one table; docs/crm_training_data.md states the
rules, crm/data_quality.py measures the result.

Everything here is plain functions over DataFrames; randomness comes from seeded hashes of stable keys, so a
row's split and augmentations do not depend on row order or on the other rows.
"""

import hashlib
import math

import pandas as pd

from usl_assets.crm import gaming_pairs, judge_pairs
from usl_assets.crm.augmentation import AUGMENTATIONS, HARMLESS_CRITERIA, noise_rows, rows_for_pair
from usl_assets.crm.data_quality import (direction_balance, label_balance, prompt_leaks, split_augmentation_counts,
                                         split_sizes)
from usl_assets.crm.features import as_text
from usl_assets.crm.properties import PROPERTIES, measure_pairs
from usl_assets.crm.splits import (SPLITS, TEST_SPLITS, PairsConfig, assign_splits, prompt_key, reroute_unmeasurable,
                                   unit_hash)

# What other modules and the tests read from here (the stage's one entry point), defined in the modules above.
__all__ = ["AUGMENTATIONS", "COLUMNS", "EXCLUDED_COLUMNS", "HARMLESS_CRITERIA", "PROPERTIES", "SPLITS", "TEST_SPLITS",
           "PairsConfig", "assign_splits", "build_training_pairs", "direction_balance", "label_balance",
           "prompt_key", "prompt_leaks", "split_augmentation_counts", "split_sizes"]

COLUMNS = (
    "pair_id", "split", "origin_idx", "source", "scenario", "scenario_group", "prompt", "chosen", "rejected",
    "criteria", "augmentation", "human_label", "chosen_is_longer", "property", "property_direction",
    "label_kind", "soft_label", "chosen_model", "rejected_model",
)
EXCLUDED_COLUMNS = ("origin_idx", "source", "reason", "detail")


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


# ---------------------------------------------------------------------------------------------- the table

def pair_id(row: dict) -> str:
    text = "\x1f".join([row["origin_idx"], row["augmentation"], row["chosen"], *row["criteria"]])
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


def criteria_by_scenario(scenario_criteria: pd.DataFrame) -> dict[str, list[str]]:
    grouped = scenario_criteria.dropna(subset=["content"]).groupby("scenario")["content"]
    return {scenario: list(dict.fromkeys(contents)) for scenario, contents in grouped}


def build_training_pairs(tagged: pd.DataFrame, scenario_criteria: pd.DataFrame, config: PairsConfig,
                         judge_config: judge_pairs.JudgePairsConfig | None = None,
                         pool_texts: set[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """crm.training_pairs (COLUMNS), the excluded source rows (EXCLUDED_COLUMNS) and crm.graded_answers
    (judge_pairs.GRADED_COLUMNS) from tagged preferences. AI-judge rows become model-vs-model pairs
    (crm/judge_pairs.py); `pool_texts` are kept out of training."""
    pairs, excluded = prepare_pairs(tagged)
    if pairs.empty:
        return pd.DataFrame(columns=list(COLUMNS)), excluded, pd.DataFrame(columns=judge_pairs.GRADED_COLUMNS)
    judge_config = judge_config or judge_pairs.JudgePairsConfig()
    is_judge = pairs["source"] == judge_pairs.JUDGE_SOURCE
    human = pairs[~is_judge].assign(with_properties=True)
    human["properties"] = measure_pairs(human)
    human["split"] = assign_splits(human, config)
    human["split"] = reroute_unmeasurable(human, config)
    judged, judge_excluded, graded = judge_pairs.judge_pairs(pairs[is_judge], judge_config, pool_texts or set(),
                                                             unit_hash, prompt_key)
    judged, leaked = _outside_human_tests(judged, human)
    graded = graded[~graded["prompt"].map(prompt_key).isin(human_test_prompts(human))].reset_index(drop=True)
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
    rows += gaming_pairs.gaming_rows(rows, gaming_pairs.GamingConfig(
        seed=config.seed, wish_properties=tuple(config.train_properties())))
    table = pd.DataFrame(rows).drop(columns=["_loser_criteria"], errors="ignore")
    table["pair_id"] = [pair_id(row) for row in table.to_dict("records")]
    table = table.drop_duplicates("pair_id").reset_index(drop=True)
    table = table.astype({"human_label": "boolean", "chosen_is_longer": bool, "property": "string",
                          "property_direction": "string", "soft_label": float, "chosen_model": "string",
                          "rejected_model": "string"})
    return table[list(COLUMNS)], pd.concat([excluded, unused_pairs(pairs, table)], ignore_index=True), graded


def human_test_prompts(human: pd.DataFrame) -> set[str]:
    return set(human.loc[human["split"] != "train", "prompt"].map(prompt_key))


def _outside_human_tests(judged: pd.DataFrame, human: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Judge training pairs whose prompt is in a human test split are excluded (prompt leakage)."""
    if judged.empty:
        return judged, pd.DataFrame(columns=list(EXCLUDED_COLUMNS))
    test_keys = human_test_prompts(human)
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

"""Quality figures of crm.training_pairs: prompt leaks between train and test, split sizes, rows per split and
augmentation, direction and label balance (the crm_training_pairs asset's metadata and checks)."""

import pandas as pd

from usl_assets.crm import gaming_pairs, judge_pairs
from usl_assets.crm.augmentation import AUGMENTATIONS, PROPERTY_AUGMENTATIONS
from usl_assets.crm.splits import SPLITS, prompt_key


def prompt_leaks(table: pd.DataFrame) -> pd.DataFrame:
    """(split, prompt) of test-split rows whose prompt also appears in train."""
    keys = table["prompt"].map(prompt_key)
    train_keys = set(keys[table["split"] == "train"])
    # judge_heldout_models is held out by model, not by prompt: its prompts are AlpacaEval's, in train too; so are
    # the gaming_pairs and gaming_wishes rows built from its pairs (crm/gaming_pairs.py). criteria_paraphrase shares
    # its prompts with new_criteria / criteria_reversed only (test splits both), so it is checked like any test split.
    by_model = (table["split"] == judge_pairs.HELDOUT_SPLIT) | (
        table["split"].isin([gaming_pairs.SPLIT, gaming_pairs.WISH_SPLIT])
        & (table["source"] == judge_pairs.JUDGE_SOURCE))
    leaked = (table["split"] != "train") & ~by_model & keys.isin(train_keys)
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
    """Per property: property rows preferring more / less of it, and the minority direction's share. Rows under a
    combined criterion (property 'length+structure', direction 'less+less') are not counted: their balance is
    per entry, not per property."""
    rows = table[(table["split"] == split) & table["augmentation"].isin(PROPERTY_AUGMENTATIONS)
                 & table["property_direction"].isin(["more", "less"])]
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

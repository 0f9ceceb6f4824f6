"""Evaluation of CRMs against baselines on the held-out splits, and of a user's own preference file.

A pair counts as right when the chosen response gets the strictly higher reward; equal rewards count as wrong
(so a constant scorer gets 0, not 0.5). `length_baseline` scores a response by its length in characters.
"""

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar
from scipy.stats import spearmanr

from usl_assets.crm.data import TEST_SPLITS
from usl_assets.crm.interface import ScoreItem
from usl_assets.crm.judge_pairs import HELDOUT_SPLIT
from usl_assets.crm.interface import NEUTRAL_CRITERIA
from usl_assets.markdown import markdown_table as shared_markdown_table
from usl_assets.preferences.canonical import CriteriaBook, RecordProblem, user_criteria, user_row

VARIANTS = ("crm", "crm_linear", "crm_factorized", "crm_cross", "crm_length_only", "crm_no_criteria", "base_model",
            "length_baseline")
Log = Callable[[str], None]


def stable_rank(key: str, seed: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{key}".encode()).digest()[:8], "big")


def sample_test_pairs(pairs: pd.DataFrame, max_per_split: int | None, seed: int,
                      max_per_judged_model: int | None = None) -> pd.DataFrame:
    """The test splits' pairs, at most `max_per_split` per split (judge_heldout_models: at most
    `max_per_judged_model` per held-out model), chosen by a seeded hash of pair_id, in that seeded order."""
    test = pairs[pairs["split"].isin(TEST_SPLITS)].copy()
    test["_rank"] = [stable_rank(str(pid), seed) for pid in test["pair_id"]]
    test = test.sort_values(["split", "_rank"])
    judge = test[test["split"] == HELDOUT_SPLIT]
    human = test[test["split"] != HELDOUT_SPLIT]
    if max_per_split:
        human = human.groupby("split", sort=False).head(max_per_split)
    if max_per_judged_model and len(judge):
        judge = judge.groupby(judged_model(judge), sort=False).head(max_per_judged_model)
    return pd.concat([human, judge]).drop(columns="_rank").reset_index(drop=True)


def judged_model(judge: pd.DataFrame) -> pd.Series:
    """The held-out judged model of each judge_heldout_models row (the other side is the shared reference)."""
    names = pd.concat([judge["chosen_model"], judge["rejected_model"]])
    reference = names.value_counts().idxmax()
    return judge["chosen_model"].where(judge["chosen_model"] != reference, judge["rejected_model"])


def pair_rewards(pairs: pd.DataFrame, scorer, criteria_override: tuple[str, ...] | None = None,
                 batch_size: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """Rewards of chosen and rejected per pair; each distinct (prompt, response, criteria) is scored once."""
    items, index = [], {}
    keys_chosen, keys_rejected = [], []
    for prompt, chosen, rejected, criteria in zip(pairs["prompt"], pairs["chosen"], pairs["rejected"],
                                                  pairs["criteria"]):
        profile = criteria_override if criteria_override is not None else tuple(criteria)
        for response, keys in ((chosen, keys_chosen), (rejected, keys_rejected)):
            item = ScoreItem(str(prompt), str(response), tuple(str(c) for c in profile))
            if item not in index:
                index[item] = len(items)
                items.append(item)
            keys.append(index[item])
    rewards = scorer.score(items, batch_size=batch_size) if items else np.zeros(0, dtype=np.float32)
    return rewards[keys_chosen], rewards[keys_rejected]


def length_rewards(pairs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([len(str(x)) for x in pairs["chosen"]], dtype=np.float64),
            np.array([len(str(x)) for x in pairs["rejected"]], dtype=np.float64))


def per_pair_results(pairs: pd.DataFrame, variant: str, chosen: np.ndarray, rejected: np.ndarray) -> pd.DataFrame:
    def column(name: str, default) -> pd.Series:  # pairs built before the judge source lack these columns
        return pairs[name] if name in pairs else pd.Series(default, index=pairs.index)

    return pd.DataFrame({
        "pair_id": pairs["pair_id"].to_numpy(),
        "split": pairs["split"].to_numpy(),
        "chosen_model": column("chosen_model", None).to_numpy(dtype=object),
        "rejected_model": column("rejected_model", None).to_numpy(dtype=object),
        "soft_label": column("soft_label", 1.0).fillna(1.0).to_numpy(dtype=float),
        "scenario": pairs["scenario"].to_numpy(),
        "scenario_group": pairs["scenario_group"].to_numpy(),
        "chosen_is_longer": pairs["chosen_is_longer"].astype(bool).to_numpy(),
        "variant": variant,
        "reward_chosen": chosen.astype(np.float64),
        "reward_rejected": rejected.astype(np.float64),
        "correct": chosen > rejected,
    })


def judge_model_win_rates(results: pd.DataFrame) -> pd.DataFrame:
    """judge_heldout_models, per variant and held-out model: the judge's win rate against the reference (mean
    probability) and the variant's (share of prompts where the model's reward is higher), in percent."""
    judge = results[results["split"] == HELDOUT_SPLIT]
    if judge.empty:
        return pd.DataFrame(columns=["variant", "model", "n", "judge_win_rate", "crm_win_rate"])
    model = judged_model(judge)
    model_is_chosen = judge["chosen_model"] == model
    frame = pd.DataFrame({
        "variant": judge["variant"], "model": model,
        "judge": np.where(model_is_chosen, judge["soft_label"], 1.0 - judge["soft_label"]),
        "crm": np.where(model_is_chosen, judge["reward_chosen"] > judge["reward_rejected"],
                        judge["reward_rejected"] > judge["reward_chosen"]).astype(float),
    })
    out = frame.groupby(["variant", "model"], sort=True).agg(n=("judge", "size"), judge_win_rate=("judge", "mean"),
                                                             crm_win_rate=("crm", "mean")).reset_index()
    out[["judge_win_rate", "crm_win_rate"]] *= 100.0
    return out


def win_rate_spearman(win_rates: pd.DataFrame) -> dict[str, float]:
    """Per variant: Spearman between its win rates and the judge's over the held-out models."""
    found = {}
    for variant, group in win_rates.groupby("variant"):
        if len(group) >= 3 and group["crm_win_rate"].nunique() > 1:
            found[variant] = float(spearmanr(group["crm_win_rate"], group["judge_win_rate"])[0])
    return found


def fit_temperature(results: pd.DataFrame, variant: str = "crm", split: str = HELDOUT_SPLIT) -> dict:
    """P(chosen wins) = σ(k·Δreward), k fitted to the soft labels of held-out pairs by log loss (usl_soft)."""
    rows = results[(results["variant"] == variant) & (results["split"] == split)]
    if len(rows) < 10:
        return {"variant": variant, "split": split, "n": len(rows), "temperature": 1.0,
                "log_loss_at_1": float("nan"), "log_loss": float("nan")}
    delta = (rows["reward_chosen"] - rows["reward_rejected"]).to_numpy(float)
    y = rows["soft_label"].to_numpy(float)

    def log_loss(k: float) -> float:
        z = k * delta
        return float(np.mean(np.logaddexp(0.0, z) - y * z))

    best = minimize_scalar(log_loss, bounds=(1e-3, 100.0), method="bounded")
    return {"variant": variant, "split": split, "n": len(rows), "temperature": float(best.x),
            "log_loss_at_1": log_loss(1.0), "log_loss": float(best.fun)}


def summarize(results: pd.DataFrame) -> pd.DataFrame:
    """One row per (split, variant): n, accuracy, and accuracy where the preferred response is the shorter;
    on judge_heldout_models also the Spearman of model win rates with the judge's."""
    spearman = win_rate_spearman(judge_model_win_rates(results))
    rows = []
    for (split, variant), group in results.groupby(["split", "variant"], sort=True):
        shorter = group[~group["chosen_is_longer"]]
        longer = group[group["chosen_is_longer"]]
        rows.append({
            "split": split,
            "variant": variant,
            "n": len(group),
            "accuracy": float(group["correct"].mean()),
            "n_shorter_preferred": len(shorter),
            "accuracy_shorter_preferred": float(shorter["correct"].mean()) if len(shorter) else float("nan"),
            "accuracy_longer_preferred": float(longer["correct"].mean()) if len(longer) else float("nan"),
            "model_win_rate_spearman": spearman.get(variant, float("nan")) if split == HELDOUT_SPLIT
            else float("nan"),
        })
    return pd.DataFrame(rows)


def summarize_by_scenario(results: pd.DataFrame) -> pd.DataFrame:
    grouped = results.assign(scenario=results["scenario"].fillna("(none)"),
                             scenario_group=results["scenario_group"].fillna("(none)"))
    out = (grouped.groupby(["scenario", "scenario_group", "variant"], sort=True)["correct"]
           .agg(n="size", accuracy="mean").reset_index())
    out["accuracy"] = out["accuracy"].astype(float)
    return out


def evaluate_variants(pairs: pd.DataFrame, scorers: dict[str, object], default_variant: str,
                      no_criteria_scorer=None, log: Log = print, batch_size: int = 16,
                      subsets: dict[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """Per-pair results of every variant. `scorers`: variant → RewardScorer (crm_linear, crm_factorized,
    crm_cross, crm_length_only, base_model); `crm` reuses `default_variant`'s rewards; crm_no_criteria scores with
    the neutral criteria. `subsets[variant]`, when given, are the pairs a slow variant scores instead."""
    frames = [per_pair_results(pairs, "length_baseline", *length_rewards(pairs))]
    for variant, scorer in scorers.items():
        scored = (subsets or {}).get(variant, pairs)
        log(f"evaluating {variant} on {len(scored)} pairs")
        rewards = pair_rewards(scored, scorer, batch_size=batch_size)
        frames.append(per_pair_results(scored, variant, *rewards))
        if variant == default_variant:
            frames.append(per_pair_results(pairs, "crm", *rewards))
    if no_criteria_scorer is not None:
        log(f"evaluating crm_no_criteria on {len(pairs)} pairs")
        frames.append(per_pair_results(pairs, "crm_no_criteria",
                                       *pair_rewards(pairs, no_criteria_scorer, NEUTRAL_CRITERIA, batch_size)))
    return pd.concat(frames, ignore_index=True)


def accuracy_of(evaluation: pd.DataFrame, split: str, variant: str) -> float | None:
    found = evaluation[(evaluation["split"] == split) & (evaluation["variant"] == variant)]
    return float(found["accuracy"].iloc[0]) if len(found) else None


def markdown_table(evaluation: pd.DataFrame) -> str:
    """Accuracy per split (rows) and variant (columns, in VARIANTS order)."""
    table = evaluation.pivot(index="split", columns="variant", values="accuracy")
    return shared_markdown_table(table[[v for v in VARIANTS if v in table.columns]].reset_index())


# ----------------------------------------------------------------------------------------------------------------
# A user's preference file: docs/user_preferences.md's format (canonical.user_row reads it, as the preferences
# stage does), which is also the paper's test splits that `usl export-crm` writes; rows carrying each side's
# criteria as a_criteria / b_criteria (validated.preferences) are read too.


def read_preference_file(path: Path, book: CriteriaBook) -> tuple[list[dict], list[dict]]:
    """(pairs, quarantined): each scorable line (ties included) as a pair; every other line with its reason.
    `book` gives a line with a scenario and no criteria that scenario's criteria."""
    pairs, quarantined = [], []
    with open(path, "rb") as handle:  # decoded line by line: one Latin-1 line is skipped, not the whole file
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                pairs.append(preference_pair(json.loads(line), book))
            except UnicodeDecodeError as error:
                quarantined.append({"line": number, "reason": f"not UTF-8 text ({error.reason} at byte "
                                                              f"{error.start})"})
            except RecursionError:
                quarantined.append({"line": number, "reason": "JSON nested too deeply to parse"})
            except RecordProblem as problem:
                quarantined.append({"line": number, "reason": f"{problem.rule}: {problem.detail}"[:200]})
            except (ValueError, KeyError, TypeError) as error:  # json.JSONDecodeError is a ValueError
                quarantined.append({"line": number, "reason": f"{type(error).__name__}: {error}"[:200]})
    return pairs, quarantined


def preference_pair(record: object, book: CriteriaBook) -> dict:
    """One line as a pair scored under the winner's criteria (a tie: side A's)."""
    if not isinstance(record, dict):
        raise RecordProblem("not_an_object", f"the line is a JSON {type(record).__name__}, not an object")
    row = user_row(record, book)
    winner = row["human_winner"]
    side = "a_criteria" if winner != "model_b" else "b_criteria"
    criteria = row[side]
    if "criteria" not in record and side in record:
        criteria = user_criteria({"criteria": record[side]})
    if not row["prompt"].strip():
        raise RecordProblem("empty_text", "the prompt is empty (no `prompt` and no user turn)")
    turns = [(turn["role"], turn["content"]) for turn in row["model_a"]]
    first_user = next((i for i, (role, _) in enumerate(turns) if role == "user"), -1)
    return {"idx": str(record.get("idx", "")), "prompt": row["prompt"], "response_a": row["response_a"],
            "response_b": row["response_b"], "history": tuple(turns[first_user + 1:-1]), "human_winner": winner,
            "criteria": tuple(criteria)}


def score_preference_pairs(pairs: list[dict], scorer, batch_size: int = 16) -> pd.DataFrame:
    """Per pair: both rewards under the winner's criteria, the predicted winner and whether it matches."""
    items = []
    for pair in pairs:
        items += [ScoreItem(pair["prompt"], pair["response_a"], pair["criteria"], pair["history"]),
                  ScoreItem(pair["prompt"], pair["response_b"], pair["criteria"], pair["history"])]
    rewards = scorer.score(items, batch_size=batch_size, progress=True) if items else np.zeros(0)
    out = pd.DataFrame({
        "idx": [p["idx"] for p in pairs],
        "human_winner": [p["human_winner"] for p in pairs],
        "reward_a": rewards[0::2].astype(float),
        "reward_b": rewards[1::2].astype(float),
    })
    out["predicted_winner"] = np.where(out["reward_a"] > out["reward_b"], "model_a",
                                       np.where(out["reward_b"] > out["reward_a"], "model_b", "tie"))
    out["correct"] = (out["human_winner"] != "tie") & (out["predicted_winner"] == out["human_winner"])
    return out

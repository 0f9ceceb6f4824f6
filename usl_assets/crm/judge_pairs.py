"""AI-judge pairs for the CRM: AlpacaEval's GPT-4 Turbo judgments, turned into model-vs-model pairs.

Every judgment compares one judged model with the same reference (gpt4_1106_preview), and that reference is
also the AlpacaEval pool's reference model: training on its answers would put a pool model's answers in the
CRM's training data. So the reference never reaches training. The judge's probabilities against the shared
reference define Bradley–Terry strengths per (prompt, model), l = logit(P(model beats reference)), and two judged
models i, j on the same prompt make a pair with soft label P(i beats j) = σ(l_i − l_j): what the judge's own
probabilities imply, without the reference's text.

- Held out by model: the judged models of a seeded set of families (a family is a model with its `_concise` /
  `_verbose` variants) are kept out of training; their raw judgments (reference vs model) form the
  `judge_heldout_models` split, so evaluation tells how the CRM ranks models it never saw.
- A judged answer whose text equals an answer in a public response pool is excluded (`text_in_pool`).
"""

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from usl_assets.crm.features import as_text

JUDGE_SOURCE = "alpaca_eval_judge"
HELDOUT_SPLIT = "judge_heldout_models"
VARIANT_SUFFIXES = ("_concise", "_verbose")


@dataclass(frozen=True)
class JudgePairsConfig:
    seed: int = 17
    heldout_models: int = 8  # at least this many judged models held out (whole families)
    pairs_per_model: int = 2  # per prompt, each training model meets this many others (seeded ring)
    probability_clip: float = 0.02  # judge probabilities are clipped to [clip, 1 - clip] before the logit
    property_rate: float = 0.15  # share of judge pairs that also get contrastive / reverse property rows


def model_family(name: str) -> str:
    for suffix in VARIANT_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def heldout_models(models: list[str], config: JudgePairsConfig, unit_hash) -> list[str]:
    """Whole families in seeded order until at least `config.heldout_models` models are held out (fewer when
    there are too few families to leave any for training)."""
    families = sorted({model_family(m) for m in models}, key=lambda f: unit_hash(config.seed, "judge-heldout", f))
    held: list[str] = []
    for family in families[:-1]:  # at least one family trains
        if len(held) >= config.heldout_models:
            break
        held += sorted(m for m in models if model_family(m) == family)
    return held


def heldout_model_names(table: pd.DataFrame) -> list[str]:
    """The judged models of the judge_heldout_models split (the shared reference is on every row there)."""
    rows = table[table["split"] == HELDOUT_SPLIT]
    names = pd.concat([rows["chosen_model"], rows["rejected_model"]]).dropna()
    counts = names.value_counts()
    return sorted(name for name, n in counts.items() if n < len(rows) or len(counts) == 1)


def public_response_texts(data_root: Path) -> set[str]:
    """Every answer text of the public response pools (stripped), to keep pool answers out of training."""
    from usl_assets.responses.pools import POOLS, public_model_files, read_model_records

    texts: set[str] = set()
    for pool in POOLS:
        for path in public_model_files(data_root, pool).values():
            for record in read_model_records(pool, path):
                if not isinstance(record, dict):
                    continue
                if "output" in record:
                    texts.add(as_text(record["output"]).strip())
                for choice in record.get("choices") or []:
                    texts.update(as_text(turn).strip() for turn in (choice.get("turns") or []))
    texts.discard("")
    return texts


def source_row_ids(origin_idx: str) -> list[str]:
    """The source rows behind a training row's origin_idx (a derived judge pair names two: `src:12+34`)."""
    source, _, rows = origin_idx.rpartition(":")
    return [f"{source}:{row}" for row in rows.split("+")] if "+" in rows else [origin_idx]


def _logit(p: np.ndarray, clip: float) -> np.ndarray:
    p = np.clip(p, clip, 1 - clip)
    return np.log(p / (1 - p))


def _criteria(row: pd.Series) -> list[str]:
    a, b = row["criteria_a"], row["criteria_b"]
    return list(a) if len(a) else list(b)


def _excluded(rows: pd.DataFrame, reason: str, detail: str) -> pd.DataFrame:
    return pd.DataFrame({"origin_idx": rows["origin_idx"], "source": rows["source"], "reason": reason,
                         "detail": detail}, columns=["origin_idx", "source", "reason", "detail"])


GRADED_COLUMNS = ["prompt", "model", "response", "strength", "origin_idx"]


def judge_pairs(judged: pd.DataFrame, config: JudgePairsConfig, pool_texts: set[str], unit_hash,
                prompt_key) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Pairs in prepare_pairs' format plus soft_label / label_kind / model names, with their split (train or
    judge_heldout_models), the excluded judgments with reasons, and the graded answers behind the training
    pairs (GRADED_COLUMNS: each training judgment's answer with its strength; crm/graded_answers.py).

    `judged`: prepare_pairs rows of the judge source (response_a = the reference, response_b = the judged
    model), with `soft_label` (P(reference preferred)) and `model_b_name`.
    """
    if judged.empty:
        return judged.assign(split=[], label_kind=[]), _excluded(judged, "", ""), pd.DataFrame(columns=GRADED_COLUMNS)
    judged = judged.reset_index(drop=True)
    in_pool = judged["response_b"].str.strip().isin(pool_texts)
    excluded = [_excluded(judged[in_pool], "text_in_pool", "the judged answer is also a response-pool answer")]
    judged = judged[~in_pool]
    models = sorted(judged["model_b_name"].dropna().unique())
    held = set(heldout_models(models, config, unit_hash))
    heldout = judged[judged["model_b_name"].isin(held)].assign(split=HELDOUT_SPLIT, label_kind="ai_judge")
    train = judged[~judged["model_b_name"].isin(held)].copy()
    train["strength"] = _logit(1.0 - train["soft_label"].to_numpy(float), config.probability_clip)
    derived = []
    for prompt, group in train.groupby("prompt", sort=True):
        if len(group) < 2:
            excluded.append(_excluded(group, "single_judged_model", "no other judged model answered this prompt"))
            continue
        order = sorted(range(len(group)), key=lambda i: unit_hash(config.seed, "judge-ring", prompt_key(prompt),
                                                                   group["model_b_name"].iloc[i]))
        rows = group.iloc[order].reset_index(drop=True)
        offsets = range(1, min(config.pairs_per_model, len(rows) - 1) + 1)
        seen = set()
        for offset in offsets:
            for i in range(len(rows)):
                j = (i + offset) % len(rows)
                if (j, i) in seen or i == j:
                    continue
                seen.add((i, j))
                derived.append(_derived_pair(rows.iloc[i], rows.iloc[j]))
    pairs = pd.DataFrame(derived)
    if len(pairs):
        pairs = pairs.assign(split="train", label_kind="ai_judge")
    graded = pd.DataFrame({"prompt": train["prompt"], "model": train["model_b_name"], "response": train["response_b"],
                           "strength": train["strength"], "origin_idx": train["origin_idx"]}, columns=GRADED_COLUMNS)
    return (pd.concat([pairs, heldout], ignore_index=True),
            pd.concat(excluded, ignore_index=True), graded.reset_index(drop=True))


def _derived_pair(first: pd.Series, second: pd.Series) -> dict:
    """Model i (side a) vs model j (side b) on one prompt, P(a preferred) = σ(l_i − l_j)."""
    a_probability = 1.0 / (1.0 + math.exp(-(first["strength"] - second["strength"])))
    winner = "a" if a_probability > 0.5 else "b" if a_probability < 0.5 else "tie"
    criteria = _criteria(first) or _criteria(second)
    return {
        "origin_idx": f"{first['origin_idx']}+{second['origin_idx'].split(':')[-1]}",
        "source": JUDGE_SOURCE, "scenario": first["scenario"], "scenario_group": first["scenario_group"],
        "prompt": first["prompt"], "response_a": first["response_b"], "response_b": second["response_b"],
        "winner": winner, "soft_label": a_probability,
        "criteria_a": criteria if winner in ("a", "tie") else [],
        "criteria_b": criteria if winner in ("b", "tie") else [],
        "model_a_name": first["model_b_name"], "model_b_name": second["model_b_name"],
    }

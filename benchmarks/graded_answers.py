"""The graded-answers feature and the judge's style terms, measured on a `make run` warehouse: the figures
docs/crm.md quotes for how τ and `judge_nuisance` were chosen.

    .venv/bin/python benchmarks/graded_answers.py [--taus 0.02,0.05,0.1,1.0]
        [--variants judge_nuisance=length judge_nuisance=style degeneration=false+judge_nuisance=style …]

Part 1, the feature alone: for each τ, the win-rate Spearman of the held-out judged models against the judge
(judge_heldout_models: the dev measure τ is chosen on), and, for reference, the AlpacaEval pool's usl_soft point
estimate (temperature 1, no bootstrap) against LMArena 2025. Part 2, the whole linear CRM fitted on
crm.training_pairs under each variant (LinearConfig fields to override, joined by +; `default` for none): the same
pool figure (default profile) and the accuracy on human_heldout and all of pandalm_majority next to the length
baseline's. Reads `$USL_HOME/published/warehouse.duckdb`.
"""

import argparse
import os
import time
from dataclasses import replace
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from usl_assets.crm import graded_answers, linear, linear_crm
from usl_assets.crm.backbones import resolve_backbone
from usl_assets.crm.evaluate import judged_model
from usl_assets.leaderboards import validity

POOL, REFERENCE, RANKING = "alpaca_eval", "gpt4_1106_preview", "lmarena_2025"


def load(home: Path) -> dict:
    con = duckdb.connect(str(home / "published" / "warehouse.duckdb"), read_only=True)
    frames = {
        "pairs": con.execute("SELECT * FROM crm.training_pairs ORDER BY pair_id").df(),
        "graded": con.execute("SELECT prompt, model, response, strength FROM crm.graded_answers "
                              "ORDER BY origin_idx").df(),
        "responses": con.execute("""
            SELECT r.prompt_id, r.model, r.prompt, r.response, p.criteria
            FROM responses.responses r
            JOIN responses.prompt_sample s ON s.pool = r.pool AND s.prompt_id = r.prompt_id AND s.sampled
            JOIN scoring.criteria_profiles p ON p.kind = 'scenario_default' AND p.scenario = r.scenario
            WHERE r.pool = ?""", [POOL]).df(),
    }
    con.close()
    return frames


def pool_spearman(responses: pd.DataFrame, rewards: np.ndarray, data_root: Path) -> float:
    wide = responses.assign(reward=rewards).pivot_table(index="prompt_id", columns="model", values="reward")
    soft = (1 / (1 + np.exp(-wide.sub(wide[REFERENCE], axis=0)))).mean()
    external, names = validity.load_external_rankings(data_root), validity.load_name_map(data_root)
    ours = validity.to_external_names(soft, RANKING, external[RANKING], names)
    return validity.correlate(ours, external[RANKING])["spearman"]


def held_out_spearman(pairs: pd.DataFrame, difference: np.ndarray) -> float:
    held = pairs[pairs["split"] == "judge_heldout_models"]
    model = judged_model(held).to_numpy()
    judge = pd.Series(np.where(held["chosen_model"] == model, held["soft_label"], 1 - held["soft_label"]))
    ours = pd.Series(1 / (1 + np.exp(-difference))).groupby(model).mean()
    return float(spearmanr(ours, judge.groupby(model).mean().loc[ours.index]).statistic)


def feature_alone(frames: dict, taus: list[float], data_root: Path) -> None:
    memory = graded_answers.GradedAnswers.build(frames["graded"])
    held = frames["pairs"][frames["pairs"]["split"] == "judge_heldout_models"]
    responses = frames["responses"]
    print(f"feature alone ({len(memory):,} graded answers)\n  tau   held-out win-rate Spearman   pool vs {RANKING}")
    for tau in taus:
        graded_answers.TEMPERATURE = tau
        chosen = memory.feature(list(held["prompt"]), list(held["chosen"]))
        rejected = memory.feature(list(held["prompt"]), list(held["rejected"]))
        model = judged_model(held).to_numpy()
        difference = np.where(held["chosen_model"] == model, chosen - rejected, rejected - chosen)
        pool = memory.feature(list(responses["prompt"]), list(responses["response"]))
        print(f"  {tau:<5g} {held_out_spearman(frames['pairs'], difference):>27.3f} "
              f"{pool_spearman(responses, pool, data_root):>20.3f}")
    graded_answers.TEMPERATURE = 0.1


def parse_variant(text: str) -> dict:
    """'degeneration=false+judge_nuisance=style' → {'degeneration': False, 'judge_nuisance': 'style'};
    'leave_out=a,b' → {'leave_out': ('a', 'b')}; 'source_weights.autoj=2' → the default weights with autoj at 2."""
    def value(key: str, raw: str):
        if key == "leave_out":
            return tuple(name for name in raw.split(",") if name)
        if raw.lower() in ("true", "false"):
            return raw.lower() == "true"
        try:
            return float(raw)
        except ValueError:
            return raw
    if text == "default":
        return {}
    fields, weights = {}, dict(linear.DEFAULT_SOURCE_WEIGHTS)
    for key, raw in (item.split("=", 1) for item in text.split("+")):
        if key.startswith("gaming_kind_weights."):  # 'gaming_kind_weights.gaming_padded=0.25'
            fields.setdefault("gaming_kind_weights", {})[key.split(".", 1)[1]] = float(raw)
        elif key.startswith("source_weights."):  # 'source_weights.autoj=2': one source's weight, the rest default
            weights[key.split(".", 1)[1]] = float(raw)
            fields["source_weights"] = weights
        else:
            fields[key] = value(key, raw)
    return fields


def whole_crm(frames: dict, variants: list[str], data_root: Path, home: Path) -> None:
    pairs, responses = frames["pairs"], frames["responses"]
    train = pairs[pairs["split"] == "train"].reset_index(drop=True)
    memory = graded_answers.GradedAnswers.build(frames["graded"])
    encoder = linear_crm.CriteriaEncoder(resolve_backbone("minilm", home / "models" / "backbones"), 128)
    criteria = list(train["criteria"]) + list(pairs["criteria"]) + list(responses["criteria"])
    profiles = {linear_crm.criteria_key(c): tuple(linear_crm.criteria_lines(c)) for c in criteria}
    vectors = dict(zip(profiles, encoder.embed(list(profiles.values()))))

    def score(weights, prompts, texts, criteria_column):
        rows = weights.response_rows([str(p) for p in prompts], [str(t) for t in texts])
        keys = np.array([linear_crm.criteria_key(c) for c in criteria_column])
        rewards = np.zeros(len(rows))
        for key in np.unique(keys):
            rewards[keys == key] = weights.score_rows(rows[keys == key], vectors[key])
        return rewards

    print(f"\nwhole linear CRM ({len(train):,} training rows)\n  {'variant':<40} pool vs {RANKING}   "
          "human_heldout (length)   pandalm_majority (length)   fit s")
    for variant in variants:
        started = time.perf_counter()
        config = replace(linear.LinearConfig(), **parse_variant(variant))
        weights = linear.fit_linear(train, vectors, config, linear_crm.criteria_key, log=lambda _: None,
                                    graded=memory,
                                    reading_directions=encoder.bank.reading_columns if encoder.bank else []).weights
        seconds = time.perf_counter() - started
        accuracy = {}
        for split in ("human_heldout", "pandalm_majority"):
            test = pairs[pairs["split"] == split]
            chosen = score(weights, test["prompt"], test["chosen"], test["criteria"])
            rejected = score(weights, test["prompt"], test["rejected"], test["criteria"])
            longer = np.mean(test["chosen"].str.len().to_numpy() > test["rejected"].str.len().to_numpy())
            accuracy[split] = f"{np.mean(chosen > rejected):.3f} ({longer:.3f})"
        pool = pool_spearman(responses, score(weights, responses["prompt"], responses["response"],
                                             responses["criteria"]), data_root)
        print(f"  {variant:<40} {pool:>17.3f}   {accuracy['human_heldout']:>22}   "
              f"{accuracy['pandalm_majority']:>25}   {seconds:>5.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--taus", default="0.02,0.05,0.1,1.0")
    parser.add_argument("--variants", nargs="*",
                        default=["judge_nuisance=length", "judge_nuisance=style", "judge_nuisance=none"])
    args = parser.parse_args()
    home = Path(os.environ.get("USL_HOME", ".usl"))
    data_root = Path(os.environ.get("USL_DATA_DIR", "../shared/data"))
    frames = load(home)
    taus = [float(t) for t in args.taus.split(",") if t]  # --taus '': part 2 only
    if taus:
        feature_alone(frames, taus, data_root)
    whole_crm(frames, args.variants, data_root, home)


if __name__ == "__main__":
    main()

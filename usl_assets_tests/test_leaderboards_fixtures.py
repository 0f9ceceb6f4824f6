"""Upstream tables for the leaderboard tests, in the docs/contracts.md schema, built from small real slices.

Responses are real AlpacaEval outputs (7 models) and MT-Bench first turns (4 models). Scenarios are assigned
round-robin from real Auto-J scenarios. Rewards are test input with a known answer: under the default profiles
a response's reward is its log length (so the default USL ranking must follow mean length), under the named
profile "brief answers" it is minus that (so that ranking must reverse). Three bad rewards must land in
leaderboard.unranked_rewards (UNRANKED_REASONS), not on a leaderboard. The contradiction and CRM-accuracy
tables are computed from the real Auto-J pairs.
"""

import gzip
import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd

from usl_assets.preferences.criteria import load_scenarios
from usl_assets.resources import Warehouse

ALPACA_MODELS = ["gpt4_1106_preview", "gpt-4o-2024-05-13", "claude-3-opus-20240229", "Qwen1.5-72B-Chat",
                 "mistral-large-2402", "gemma-7b-it", "vicuna-13b"]
MT_BENCH_MODELS = ["gpt-4", "gpt-3.5-turbo", "vicuna-13b-v1.3", "llama-13b"]
SCENARIOS = ["open_question", "brainstorming", "code_generation", "writing_blog_post", "math_reasoning"]
NAMED_PROFILE = "brief answers"
UNRANKED_REASONS = {"non_finite_reward": 1, "response_missing": 1, "unknown_profile": 1}


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _response_rows(pool: str, items: list[tuple[str, str, str, str, str]], data_root: Path) -> list[dict]:
    """items: (prompt_id, prompt, model, response, category)."""
    scenarios = load_scenarios(data_root)
    rows = []
    for prompt_id, prompt, model, response, category in items:
        scenario = SCENARIOS[int(prompt_id) % len(SCENARIOS)]
        rows.append({"pool": pool, "prompt_id": prompt_id, "prompt": prompt, "model": model, "response": response,
                     "scenario": scenario, "scenario_group": scenarios.group_of(scenario), "category": category,
                     "length_chars": len(response), "response_hash": _hash(response)})
    return rows


def alpaca_items(data_root: Path, n_prompts: int) -> list[tuple]:
    items = []
    for model in ALPACA_MODELS:
        with gzip.open(data_root / "responses" / "alpaca_eval" / f"{model}.json.gz", "rt", encoding="utf-8") as f:
            outputs = json.load(f)[:n_prompts]
        items += [(str(i), row["instruction"], model, row["output"], row["dataset"]) for i, row in enumerate(outputs)]
    return items


def mt_bench_items(data_root: Path, n_prompts: int) -> list[tuple]:
    folder = data_root / "responses" / "mt_bench"
    questions = [json.loads(line) for line in (folder / "question.jsonl").read_text().splitlines()][:n_prompts]
    items = []
    for model in MT_BENCH_MODELS:
        answers = {row["question_id"]: row["choices"][0]["turns"][0]
                   for row in map(json.loads, (folder / "model_answer" / f"{model}.jsonl").read_text().splitlines())}
        items += [(str(q["question_id"]), q["turns"][0], model, answers[q["question_id"]], q["category"])
                  for q in questions]
    return items


def responses_frame(data_root: Path, n_prompts: int = 30) -> pd.DataFrame:
    rows = _response_rows("alpaca_eval", alpaca_items(data_root, n_prompts), data_root)
    rows += _response_rows("mt_bench", mt_bench_items(data_root, n_prompts), data_root)
    return pd.DataFrame(rows)


def profiles_frame() -> pd.DataFrame:
    rows = [{"profile": f"default:{s}", "kind": "scenario_default", "scenario": s,
             "criteria": [f"The response suits {s}."]} for s in SCENARIOS]
    rows.append({"profile": NAMED_PROFILE, "kind": "named", "scenario": None, "criteria": ["Prefers brief answers."]})
    rows.append({"profile": "adhoc:0000", "kind": "adhoc", "scenario": None, "criteria": ["Anything."]})
    frame = pd.DataFrame(rows)
    return frame.assign(criteria_hash=[_hash("\n".join(c)) for c in frame["criteria"]])


def rewards_frame(responses: pd.DataFrame, profiles: pd.DataFrame) -> pd.DataFrame:
    log_length = np.log1p(responses["length_chars"].to_numpy(float))
    keys = responses[["pool", "prompt_id", "model", "response_hash"]]
    by_name = profiles.set_index("profile")
    default = keys.assign(profile=[f"default:{s}" for s in responses["scenario"]], reward=log_length)
    brief = keys.assign(profile=NAMED_PROFILE, reward=-log_length)
    adhoc = keys.assign(profile="adhoc:0000", reward=0.0)  # ad hoc rewards never reach the nightly leaderboard
    first = keys.iloc[0].to_dict()  # one real response, whose "brief answers" reward turns bad
    bad = pd.DataFrame([{**first, "profile": NAMED_PROFILE, "reward": float("nan")},  # non_finite_reward
                        {**first, "prompt_id": "999", "profile": NAMED_PROFILE, "reward": 1.0},  # response_missing
                        {**first, "profile": "unknown profile", "reward": 1.0}])  # unknown_profile
    rewards = pd.concat([default, brief.iloc[1:], bad, adhoc], ignore_index=True)
    hashes = by_name["criteria_hash"].to_dict()
    return rewards.assign(criteria_hash=[hashes.get(p, "no such hash") for p in rewards["profile"]],
                          checkpoint_id="fixture")[
        ["pool", "prompt_id", "model", "profile", "criteria_hash", "response_hash", "checkpoint_id", "reward"]]


def autoj_pairs(data_root: Path) -> pd.DataFrame:
    rows = [json.loads(line) for line in (data_root / "preferences" / "autoj_pairwise.jsonl").read_text().splitlines()]
    frame = pd.DataFrame(rows)
    label = frame["label"].astype(int)
    len1, len2 = frame["response 1"].astype(str).str.len(), frame["response 2"].astype(str).str.len()
    return frame.assign(tie=label == 2, longer_won=((label == 0) & (len1 > len2)) | ((label == 1) & (len2 > len1)))


def contradiction_frame(data_root: Path) -> pd.DataFrame:
    """analysis.scenario_contradiction from the real Auto-J pairs of the fixture's scenarios."""
    pairs = autoj_pairs(data_root)
    pairs = pairs[pairs["scenario"].isin(SCENARIOS)]
    scenarios = load_scenarios(data_root)
    table = pairs.groupby("scenario").agg(n_pairs=("tie", "size"), tie_rate=("tie", "mean"),
                                          longer_preferred_rate=("longer_won", "mean")).reset_index()
    overall = table["longer_preferred_rate"].mean()
    return table.assign(scenario_group=[scenarios.group_of(s) for s in table["scenario"]],
                        disagreement_rate=table["tie_rate"] / 2,
                        opposite_pull=(table["longer_preferred_rate"] - overall).abs())[
        ["scenario", "scenario_group", "n_pairs", "tie_rate", "disagreement_rate", "longer_preferred_rate",
         "opposite_pull"]]


def crm_by_scenario_frame(data_root: Path) -> pd.DataFrame:
    """crm.evaluation_by_scenario for the length baseline ('longer wins') measured on the real Auto-J pairs,
    reported under the variant names the CRM stage uses."""
    pairs = autoj_pairs(data_root)
    pairs = pairs[pairs["scenario"].isin(SCENARIOS) & ~pairs["tie"]]
    scenarios = load_scenarios(data_root)
    table = pairs.groupby("scenario").agg(n=("tie", "size"), accuracy=("longer_won", "mean")).reset_index()
    table = table.assign(scenario_group=[scenarios.group_of(s) for s in table["scenario"]])
    return pd.concat([table.assign(variant="crm"), table.assign(variant="length_baseline")], ignore_index=True)[
        ["scenario", "scenario_group", "variant", "n", "accuracy"]]


def write_upstream(warehouse: Warehouse, data_root: Path, n_prompts: int = 30) -> pd.DataFrame:
    """Write every upstream table the leaderboards read; returns the responses."""
    responses = responses_frame(data_root, n_prompts)
    profiles = profiles_frame()
    warehouse.replace_table("responses.responses", responses)
    warehouse.replace_table("responses.prompt_sample", responses[["pool", "prompt_id", "scenario"]].drop_duplicates()
                            .assign(sampled=True, sample_rule="all"))
    warehouse.replace_table("scoring.criteria_profiles", profiles)
    warehouse.replace_table("scoring.response_rewards", rewards_frame(responses, profiles))
    warehouse.replace_table("analysis.scenario_contradiction", contradiction_frame(data_root))
    warehouse.replace_table("crm.evaluation_by_scenario", crm_by_scenario_frame(data_root))
    # usl_soft's temperature for the fixture's checkpoint, as crm_evaluation writes it
    warehouse.replace_table("crm.calibration", pd.DataFrame([{"checkpoint_id": "fixture", "variant": "crm",
                                                              "split": "judge_heldout_models", "n": 100,
                                                              "temperature": 1.5, "log_loss_at_1": 0.6,
                                                              "log_loss": 0.55}]))
    return responses

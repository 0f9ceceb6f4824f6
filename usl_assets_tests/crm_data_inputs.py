"""Upstream tables for the crm-data tests, built from the real public files in the contract schema
(docs/contracts.md: validated.tagged_preferences, validated.scenario_criteria).

Used until the preferences stage's assets can be materialized in the same test. The only stand-in is the
scenario of PandaLM and hh-rlhf rows, which the tagger assigns upstream: here they get a fixed Auto-J scenario.
"""

import gzip
import json
from pathlib import Path

import pandas as pd

from usl_assets.preferences.criteria import criteria_texts, load_scenario_criteria, load_scenarios

PANDALM_STAND_IN_SCENARIO = "others"
HH_STAND_IN_SCENARIO = "chitchat"
_VOTE = {0: "tie", 1: "model_a", 2: "model_b"}


def _conversation(prompt: str, response: str) -> list[dict]:
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]


def _record(data_root: Path, idx: str, source: str, prompt: str, response_a, response_b, winner: str,
            scenario: str, votes: list[str] | None = None) -> dict:
    scenarios = load_scenarios(data_root)
    criteria = criteria_texts(data_root, scenario)
    return {
        "idx": idx, "source": source, "prompt": prompt,
        "model_a": _conversation(prompt, str(response_a)), "model_b": _conversation(prompt, str(response_b)),
        "response_a": str(response_a), "response_b": str(response_b), "model_a_name": None, "model_b_name": None,
        "human_winner": winner, "votes": votes, "scenario": scenario, "scenario_group": scenarios.group_of(scenario),
        "a_criteria": criteria if winner in ("model_a", "tie") else [],
        "b_criteria": criteria if winner in ("model_b", "tie") else [],
        "scenario_origin": "human" if source == "autoj" else "tagger",
        "tagger_confidence": None if source == "autoj" else 1.0,
    }


def autoj_records(data_root: Path, step: int = 1) -> list[dict]:
    """Every `step`-th Auto-J pair (the file is ordered by scenario, so a step keeps every scenario)."""
    lines = (data_root / "preferences" / "autoj_pairwise.jsonl").read_text(encoding="utf-8").splitlines()
    records = []
    for number, line in enumerate(lines):
        if number % step:
            continue
        row = json.loads(line)
        winner = {0: "model_a", 1: "model_b", 2: "tie"}[int(row["label"])]
        records.append(_record(data_root, f"autoj:{number}", "autoj", row["prompt"], row["response 1"],
                               row["response 2"], winner, row["scenario"]))
    return records


def pandalm_records(data_root: Path, limit: int | None = None) -> list[dict]:
    items = json.loads((data_root / "preferences" / "pandalm_annotated.json").read_text(encoding="utf-8"))
    records = []
    for item in items[:limit]:
        votes = [_VOTE[int(item[f"annotator{i}"])] for i in (1, 2, 3)]
        winner = next((side for side in ("model_a", "model_b") if votes.count(side) >= 2), "tie")
        prompt = item["instruction"] + (f"\n\n{item['input']}" if item.get("input") else "")
        records.append(_record(data_root, f"pandalm:{item['idx']}", "pandalm", prompt, item["response1"],
                               item["response2"], winner, PANDALM_STAND_IN_SCENARIO, votes))
    return records


def _split_dialogue(dialogue: str) -> tuple[str, str]:
    context, _, reply = dialogue.rpartition("\n\nAssistant:")
    return context.strip(), reply.strip()


def hh_records(data_root: Path, limit: int | None = None) -> list[dict]:
    with gzip.open(data_root / "preferences" / "hh_rlhf_harmless_test.jsonl.gz", "rt", encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    records = []
    for number, line in enumerate(lines[:limit]):
        row = json.loads(line)
        prompt, chosen = _split_dialogue(row["chosen"])
        _, rejected = _split_dialogue(row["rejected"])
        records.append(_record(data_root, f"hh_rlhf_harmless:{number}", "hh_rlhf_harmless", prompt, chosen,
                               rejected, "model_a", HH_STAND_IN_SCENARIO))
    return records


JUDGE_STAND_IN_SCENARIO = "open_question"


def judge_records(data_root: Path, prompts: int | None = 6) -> list[dict]:
    """The AI judge's rows for the first `prompts` instructions (every judged model on each)."""
    with gzip.open(data_root / "preferences" / "alpaca_eval_gpt4_turbo_judgments.jsonl.gz", "rt",
                   encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    kept = list(dict.fromkeys(row["instruction"] for row in rows))[:prompts]
    records = []
    for number, row in enumerate(rows):
        if row["instruction"] not in kept or not isinstance(row["preference"], float | int):
            continue
        a_probability = 2.0 - float(row["preference"])
        winner = "model_a" if a_probability > 0.5 else "model_b" if a_probability < 0.5 else "tie"
        record = _record(data_root, f"alpaca_eval_judge:{number + 1}", "alpaca_eval_judge", row["instruction"],
                         row["output_1"], row["output_2"], winner, JUDGE_STAND_IN_SCENARIO)
        record.update(model_a_name=row["generator_1"], model_b_name=row["generator_2"], label_kind="ai_judge",
                      soft_label=a_probability)
        records.append(record)
    return records


def tagged_preferences_frame(data_root: Path, autoj_step: int = 1, pandalm: int | None = None,
                             hh: int | None = None, judge_prompts: int | None = 6) -> pd.DataFrame:
    """validated.tagged_preferences from real rows: every autoj_step-th Auto-J pair, the first `pandalm` and `hh`
    rows of the others (None = all), the judge's rows of the first `judge_prompts` instructions."""
    records = autoj_records(data_root, autoj_step) + pandalm_records(data_root, pandalm) + hh_records(data_root, hh)
    frame = pd.DataFrame(records).assign(label_kind="human")
    frame["soft_label"] = frame["human_winner"].map({"model_a": 1.0, "model_b": 0.0, "tie": 0.5})
    return pd.concat([frame, pd.DataFrame(judge_records(data_root, judge_prompts))], ignore_index=True)


def scenario_criteria_frame(data_root: Path) -> pd.DataFrame:
    scenarios = load_scenarios(data_root)
    rows = [
        {"scenario": scenario, "scenario_group": scenarios.group_of(scenario),
         "description": scenarios.descriptions.get(scenario, ""), "criterion": c.name, "content": c.content,
         "weight": c.weight, "type": c.type}
        for scenario, criteria in load_scenario_criteria(data_root).items() for c in criteria
    ]
    return pd.DataFrame(rows)

"""How long the leaderboard takes at full AlpacaEval size: the SQL models and the bootstrap/Bradley–Terry ranking.

Input: the real AlpacaEval pool (27 models × 805 prompts) in the contract schema, scenarios round-robin over the
58 Auto-J scenarios, and stand-in rewards (log length plus seeded noise; this measures speed, not quality) under
the default profile and N named profiles. Prints seconds per stage and rates.

    .venv/bin/python benchmarks/leaderboard_ranking.py [--profiles 4] [--usl-rounds 1000] [--bt-rounds 200]
"""

import argparse
import gzip
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from usl_assets.leaderboards import incremental, ranking, sql_files, sql_models
from usl_assets.preferences.criteria import load_scenarios
from usl_assets.resources import Warehouse


def upstream(data_root: Path, named_profiles: int, seed: int = 0) -> dict[str, pd.DataFrame]:
    scenarios = load_scenarios(data_root)
    names = sorted(scenarios.descriptions)
    rows = []
    for path in sorted((data_root / "responses" / "alpaca_eval").glob("*.json.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for index, item in enumerate(json.load(handle)):
                text = str(item["output"])
                scenario = names[index % len(names)]
                rows.append({"pool": "alpaca_eval", "prompt_id": str(index), "prompt": item["instruction"],
                             "model": path.name.removesuffix(".json.gz"), "response": text, "scenario": scenario,
                             "scenario_group": scenarios.group_of(scenario), "category": item["dataset"],
                             "length_chars": len(text),
                             "response_hash": hashlib.sha256(text.encode()).hexdigest()[:16]})
    responses = pd.DataFrame(rows)
    profiles = pd.DataFrame(
        [{"profile": f"default:{s}", "kind": "scenario_default", "scenario": s} for s in names]
        + [{"profile": f"named_{i}", "kind": "named", "scenario": None} for i in range(named_profiles)])
    profiles = profiles.assign(criteria_hash=profiles["profile"])
    rng = np.random.default_rng(seed)
    log_length = np.log1p(responses["length_chars"].to_numpy(float))
    keys = responses[["pool", "prompt_id", "model", "response_hash"]]
    parts = [keys.assign(profile=[f"default:{s}" for s in responses["scenario"]],
                         reward=log_length + rng.normal(0, 1, len(keys)))]
    for i in range(named_profiles):
        parts.append(keys.assign(profile=f"named_{i}", reward=rng.normal(0, 1, len(keys)) * log_length))
    rewards = pd.concat(parts, ignore_index=True)
    rewards = rewards.assign(criteria_hash=rewards["profile"], checkpoint_id="benchmark")
    return {"responses.responses": responses, "scoring.criteria_profiles": profiles,
            "scoring.response_rewards": rewards}


def in_dependency_order(models: list[sql_files.SqlModel]) -> list[sql_files.SqlModel]:
    done, ordered, pending = set(), [], list(models)
    while pending:
        ready = [m for m in pending if all(t in done or not t.startswith("leaderboard.") or
                                           t == "leaderboard.reference_models" for t in m.reads)]
        ordered += ready
        done |= {m.table for m in ready}
        pending = [m for m in pending if m not in ready]
    return ordered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", type=int, default=4, help="named profiles besides the default")
    parser.add_argument("--usl-rounds", type=int, default=1000)
    parser.add_argument("--bt-rounds", type=int, default=200)
    args = parser.parse_args()
    data_root = Path(os.environ.get("USL_DATA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "data")

    with tempfile.TemporaryDirectory() as folder:
        warehouse = Warehouse(path=str(Path(folder) / "warehouse.duckdb"))
        started = time.perf_counter()
        for table, frame in upstream(data_root, args.profiles).items():
            warehouse.replace_table(table, frame)
        warehouse.replace_table("leaderboard.reference_models", pd.DataFrame(
            {"pool": ["alpaca_eval"], "reference_model": ["gpt4_1106_preview"], "reference_present": [True],
             "n_models": [27]}))
        print(f"upstream tables written: {time.perf_counter() - started:.1f} s")

        for model in in_dependency_order(sql_files.load_models()):
            started = time.perf_counter()
            rows = sql_models.run_model(warehouse, model)
            print(f"sql model {model.name:<24} {rows:>10,} rows  {time.perf_counter() - started:6.2f} s")

        reference_wins = warehouse.read_table("leaderboard.reference_comparisons")
        pairs = warehouse.read_table("leaderboard.pairwise_comparisons")
        settings = ranking.BootstrapSettings(usl_rounds=args.usl_rounds, bt_rounds=args.bt_rounds)
        started = time.perf_counter()
        table = incremental.rank_all(reference_wins, pairs, settings)
        seconds = time.perf_counter() - started
        slices = table.groupby(["pool", "profile", "scenario", "method"]).ngroups
        print(f"rankings: {len(table):,} rows, {slices} leaderboards (pool × profile × topic × method) in "
              f"{seconds:.1f} s ({slices / seconds:.1f} leaderboards/s; USL {args.usl_rounds} and BT "
              f"{args.bt_rounds} bootstrap rounds)")


if __name__ == "__main__":
    main()

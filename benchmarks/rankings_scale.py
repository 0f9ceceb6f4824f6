"""What one more model costs the rankings, against rebuilding them, for pools of N = 10, 27 and 45 models.

    make run && .venv/bin/python benchmarks/rankings_scale.py [--sizes 10 27 45] [--warehouse PATH]

Input: leaderboard.reference_comparisons of the published warehouse's AlpacaEval pool (27 real models × 805
prompts × every profile, the CRM's real rewards). N ≤ 27 takes the reference and the first N − 1 other models;
N = 45 adds 18 stand-ins, each a real model's comparisons with seeded noise on reward_diff (speed depends on the
shapes, not on who the models are). Per N, through a temporary DuckDB warehouse as the `rankings` asset does it:

- per-model rebuild: read the comparisons, rank every model under the per-model methods (usl_soft, usl,
  usl_lc), write leaderboard.rankings and leaderboard.ranking_inputs;
- add one: the same with the previous tables of the N − 1 other models there, so only the new model is scored
  (what `leaderboards_after_model_job` does);
- Bradley–Terry: the joint fit on every profile (bradley_terry_ratings; leaderboards_job only);
- full rebuild = per-model rebuild + Bradley–Terry: what every new model cost before (and leaderboards_job
  still does).

The target (issue 10) is add ≤ 1.5/N of the full rebuild; the per-model ratio is printed too. Figures are
wall-clock seconds on this machine as it was: quote them with the load (printed). `--no-bradley-terry` skips
the joint fit (minutes at N = 45).
"""

import argparse
import os
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from usl_assets.leaderboards import incremental, ranking
from usl_assets.resources import Warehouse

POOL = "alpaca_eval"


def pool_of(real: pd.DataFrame, size: int, seed: int = 0) -> pd.DataFrame:
    reference = real.loc[real["reference_model"].notna(), "reference_model"].iloc[0]
    others = sorted(set(real["model"]) - {reference})
    chosen = [reference, *others[:size - 1]]
    frame = real[real["model"].isin(chosen)]
    rng = np.random.default_rng(seed)
    stand_ins = []
    for k in range(max(0, size - len(chosen))):
        source = real[real["model"] == others[k % len(others)]]
        noisy = source["reward_diff"].to_numpy() + rng.normal(0, 0.3, len(source))
        stand_ins.append(source.assign(model=f"stand-in-{k:02d}", reward_diff=noisy,
                                       win=np.where(noisy > 0, 1.0, np.where(noisy == 0, 0.5, 0.0))))
    return pd.concat([frame, *stand_ins], ignore_index=True)


def pairs_of(comparisons: pd.DataFrame) -> pd.DataFrame:
    """pairwise_comparisons.sql's rows from the reference comparisons (reward_diff orders the models)."""
    left = comparisons[["pool", "profile", "prompt_id", "scenario", "scenario_group", "model", "reward_diff"]]
    joined = left.merge(left[["profile", "prompt_id", "model", "reward_diff"]], on=["profile", "prompt_id"],
                        suffixes=("_a", "_b"))
    joined = joined[joined["model_a"] < joined["model_b"]]
    score = np.where(joined["reward_diff_a"] > joined["reward_diff_b"], 1.0,
                     np.where(joined["reward_diff_a"] == joined["reward_diff_b"], 0.5, 0.0))
    return joined.assign(a_score=score).drop(columns=["reward_diff_a", "reward_diff_b"])


def rank_through(warehouse: Warehouse, settings, temperature: float, with_previous: bool) -> tuple[float, int]:
    started = time.perf_counter()
    wins = warehouse.read_table("leaderboard.reference_comparisons")
    previous = [warehouse.read_table(t) for t in ("leaderboard.rankings", "leaderboard.ranking_inputs")] \
        if with_previous else [None, None]
    table, inputs, recomputed = incremental.rank_per_model(wins, settings, temperature, *previous)
    with warehouse.transaction() as writer:
        writer.replace_table("leaderboard.rankings", table)
        writer.replace_table("leaderboard.ranking_inputs", inputs)
    return time.perf_counter() - started, recomputed["model"].nunique()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 27, 45])
    parser.add_argument("--warehouse", default=str(Path(os.environ.get("USL_HOME", ".usl")) / "published" /
                                                   "warehouse.duckdb"))
    parser.add_argument("--usl-rounds", type=int, default=1000)
    parser.add_argument("--bt-rounds", type=int, default=200)
    parser.add_argument("--no-bradley-terry", action="store_true")
    args = parser.parse_args()
    with duckdb.connect(args.warehouse, read_only=True) as conn:
        real = conn.execute("SELECT * FROM leaderboard.reference_comparisons WHERE pool = ?", [POOL]).df()
        temperature = float(conn.execute("SELECT temperature FROM crm.calibration LIMIT 1").fetchone()[0])
    settings = ranking.BootstrapSettings(args.usl_rounds, args.bt_rounds)
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores); "
          f"{real['profile'].nunique()} profiles × {real['prompt_id'].nunique()} prompts")
    print(f"{'N':>3} {'per-model s':>12} {'add one s':>10} {'add/per-model':>14} {'BT s':>7} {'full s':>7} "
          f"{'add/full':>9} {'target 1.5/N':>13} {'scored afresh':>14}")
    for size in args.sizes:
        comparisons = pool_of(real, size)
        newest = sorted(set(comparisons["model"]))[-1]
        with tempfile.TemporaryDirectory() as tmp:
            warehouse = Warehouse(path=str(Path(tmp) / "warehouse.duckdb"))
            warehouse.replace_table("leaderboard.reference_comparisons", comparisons)
            rebuild, _ = rank_through(warehouse, settings, temperature, with_previous=False)
            # The previous tables without the newest model, then the rebuild after it arrives.
            warehouse.replace_table("leaderboard.reference_comparisons",
                                    comparisons[comparisons["model"] != newest])
            rank_through(warehouse, settings, temperature, with_previous=False)
            warehouse.replace_table("leaderboard.reference_comparisons", comparisons)
            add, afresh = rank_through(warehouse, settings, temperature, with_previous=True)
        bt = float("nan")
        if not args.no_bradley_terry:
            started = time.perf_counter()
            ranking.bradley_terry_table(pairs_of(comparisons), settings)
            bt = time.perf_counter() - started
        print(f"{size:>3} {rebuild:>12.1f} {add:>10.2f} {add / rebuild:>14.3f} {bt:>7.1f} {rebuild + bt:>7.1f} "
              f"{add / (rebuild + bt):>9.3f} {1.5 / size:>13.3f} {afresh:>14}", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

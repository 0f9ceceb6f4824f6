"""The linear CRM's response rows with 1 and N feature workers, side by side (crm/feature_workers.py): wall
seconds and rows/s for the training answers and for one model partition of each pool, the runs interleaved so
that both counts meet the same machine load; the ratio is the figure to quote.

    USL_HOME=.usl .venv/bin/python benchmarks/feature_workers.py [--workers 2] [--training-rows 8000] [--repeats 3]

Needs a `make run` warehouse (its published copy) and default checkpoint. The rows must come out the same, to
the bit, with any number of workers: the script checks it and stops if they do not.
"""

import argparse
import os
import statistics
import time
from pathlib import Path

import duckdb
import numpy as np

from usl_assets.crm import feature_workers
from usl_assets.crm.checkpoints import default_checkpoint, load_scorer

PARTITION = """
    SELECT r.prompt, r.response FROM responses.responses r
    JOIN responses.prompt_sample s ON s.pool = r.pool AND s.prompt_id = r.prompt_id AND s.sampled
    WHERE r.pool = ? AND r.model = (SELECT min(model) FROM responses.responses WHERE pool = ?)
    ORDER BY r.prompt_id"""


def timed_rows(scorer, prompts: list[str], texts: list[str], workers: int) -> tuple[float, np.ndarray]:
    os.environ[feature_workers.WORKERS_ENV] = str(workers)
    started = time.perf_counter()
    rows = scorer.embed_responses(prompts, texts)
    return time.perf_counter() - started, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=os.environ.get("USL_HOME", ".usl"))
    parser.add_argument("--workers", type=int, default=feature_workers.workers())
    parser.add_argument("--training-rows", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.workers < 2 or args.repeats < 1 or args.training_rows < 1:
        raise SystemExit("feature_workers: --workers must be at least 2, --repeats and --training-rows at least 1")
    home = Path(args.home)
    scorer = load_scorer(default_checkpoint(home))
    if not hasattr(scorer, "weights"):
        raise SystemExit("feature_workers: the default CRM is not the linear CRM")
    with duckdb.connect(str(home / "published" / "warehouse.duckdb"), read_only=True) as con:
        sets = {"training answers": con.execute(
            "SELECT DISTINCT prompt, chosen AS response FROM crm.training_pairs WHERE split = 'train' "
            "ORDER BY hash(prompt || chosen) LIMIT ?", [args.training_rows]).df()}
        for (pool,) in con.execute("SELECT DISTINCT pool FROM responses.responses ORDER BY pool").fetchall():
            sets[f"{pool}: one model partition"] = con.execute(PARTITION, [pool, pool]).df()
    timed_rows(scorer, ["warm up"] * 300, ["the workers start once per process"] * 300, args.workers)
    print(f"{'rows of':<32} {'rows':>6} {'1 worker s':>11} {f'{args.workers} workers s':>12} {'ratio':>6}")
    for name, frame in sets.items():
        prompts, texts = frame["prompt"].tolist(), frame["response"].tolist()
        one, many = [], []
        for _ in range(args.repeats):  # interleaved: both meet the same load
            seconds, single = timed_rows(scorer, prompts, texts, 1)
            one.append(seconds)
            seconds, parallel = timed_rows(scorer, prompts, texts, args.workers)
            many.append(seconds)
            if not np.array_equal(single, parallel):
                raise SystemExit(f"feature_workers: the rows of {name} differ with {args.workers} workers")
        a, b = statistics.median(one), statistics.median(many)
        print(f"{name[:32]:<32} {len(texts):>6} {a:>11.2f} {b:>12.2f} {a / b:>6.2f}")
    print(f"\nmedians of {args.repeats}; load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""A user pool at scale: add, score and rank time per model for pools of 1,000 and 10,000 prompts.

    USL_DATA_DIR=../shared/data .venv/bin/python benchmarks/user_pool_scale.py --home .usl [--prompts 1000 10000]
        [--models 3]

Needs a warehouse from `make run` (the CRM checkpoint and the scenario tagger). Works on a copy of `--home` in a
temporary folder (the warehouse, models/ and the Dagster home), so the original is untouched. Synthetic prompts
(templated help-desk questions, five topics) and synthetic answers (each model a different length and structure)
go through the real commands: `usl add-pool`, then per model `usl add-model --pool … --no-leaderboards` (its
partition run: model_responses = "add", response_rewards = "score"), then `leaderboards_after_model_job` once
per model ("rank": the new model's rankings, the audits, the published copy). Prints one line per model and the
process's peak RSS (one model's answers are in memory at a time; the leaderboards read rewards, not answers).
"""

import argparse
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

TOPICS = {
    "Accounts": ["reset my password", "unlock my account", "set up two-factor authentication", "change my name"],
    "Network": ["connect to the VPN", "fix slow Wi-Fi", "reach an internal site", "join the guest network"],
    "Hardware": ["fix a black second monitor", "clear a printer jam", "replace a laptop battery", "pair a headset"],
    "Software": ["install an approved app", "recover a crashed spreadsheet", "postpone an update", "free disk space"],
    "Email": ["archive old mail", "set an out-of-office reply", "report a phishing mail", "share my calendar"],
}
STYLES = [
    lambda p, r: f"To {p}, open the settings page and follow the prompts. Ticket {r}.",
    lambda p, r: f"## How to {p}\n\n1. Open the portal.\n2. Choose **{p}**.\n3. Confirm.\n\nReference {r}.",
    lambda p, r: f"Sure! Here is a detailed answer about how to {p}. " + " ".join(
        f"Step {i}: check item {i} of the list and note the result ({r})." for i in range(1, 9)),
    lambda p, r: f"Please contact the help desk about {p}.",
]


def write_prompts(path: Path, n: int, rng: random.Random) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(n):
            topic = rng.choice(sorted(TOPICS))
            task = rng.choice(TOPICS[topic])
            handle.write(json.dumps({"id": f"q{i:05d}", "topic": topic,
                                     "prompt": f"Since {rng.randint(1, 12)} days I cannot {task} on device "
                                               f"{rng.randint(100, 999)}. What should I do? (case {i})"}) + "\n")


def write_answers(prompts: Path, path: Path, style: int, rng: random.Random) -> None:
    with open(prompts, encoding="utf-8") as source, open(path, "w", encoding="utf-8") as handle:
        for line in source:
            record = json.loads(line)
            task = record["prompt"].split("cannot ", 1)[1].split(" on device")[0]
            handle.write(json.dumps({"prompt_id": record["id"],
                                     "output": STYLES[style % len(STYLES)](task, rng.randint(1000, 9999))}) + "\n")


def copy_home(source: Path, target: Path) -> None:
    for name in ("warehouse.duckdb", "models", "dagster", "published"):
        found = source / name
        if found.is_dir():
            shutil.copytree(found, target / name, ignore=shutil.ignore_patterns("*.partial*", "embeddings"))
        elif found.exists():
            shutil.copy2(found, target / name)


def step_seconds(instance, run_id: str) -> dict[str, float]:
    return {s.step_key: (s.end_time or 0) - (s.start_time or 0) for s in instance.get_run_step_stats(run_id)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="a USL_HOME after `make run`")
    parser.add_argument("--prompts", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--models", type=int, default=3)
    args = parser.parse_args(argv)
    if not (args.home / "warehouse.duckdb").exists():
        print(f"{args.home} has no warehouse.duckdb: run `make run` first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="usl_pool_scale_") as scratch:
        home = Path(scratch) / "home"
        home.mkdir()
        copy_home(args.home.resolve(), home)
        dagster_home = home / "dagster"
        (dagster_home / "dagster.yaml").write_text(
            (Path(__file__).resolve().parents[1] / "usl_assets" / "dagster.yaml").read_text())
        os.environ.update(USL_HOME=str(home), DAGSTER_HOME=str(dagster_home))

        import dagster as dg

        from usl_assets.cli import main as usl
        from usl_assets.responses.commands import rebuild_leaderboards

        rng = random.Random(0)
        print(f"load average at start: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores")
        for n in args.prompts:
            pool = f"scale{n}"
            prompts = Path(scratch) / f"{pool}.jsonl"
            write_prompts(prompts, n, rng)
            started = time.perf_counter()
            assert usl(["add-pool", pool, "--prompts", str(prompts)]) == 0
            print(f"{pool}: add-pool {time.perf_counter() - started:.1f} s for {n:,} prompts")
            for m in range(args.models):
                answers = Path(scratch) / f"model-{m}.jsonl"
                write_answers(prompts, answers, m, rng)
                started = time.perf_counter()
                assert usl(["add-model", "--pool", pool, str(answers), "--no-leaderboards"]) == 0
                added = time.perf_counter() - started
                with dg.DagsterInstance.get() as instance:
                    run = instance.get_runs(limit=1)[0]
                    steps = step_seconds(instance, run.run_id)
                    started = time.perf_counter()
                    rebuild_leaderboards(instance, f"{pool}:model-{m}")
                    ranked = time.perf_counter() - started
                print(f"{pool} model-{m}: add-model {added:.1f} s (model_responses {steps.get('model_responses', 0):.1f} "
                      f"s, response_rewards {steps.get('response_rewards', 0):.1f} s), rank {ranked:.1f} s", flush=True)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak RSS {peak:,.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A user pool at scale: add, score and rank time per model for pools of 1,000 and 10,000 prompts.

    USL_DATA_DIR=../shared/data .venv/bin/python benchmarks/user_pool_scale.py --home .usl [--prompts 1000 10000]
        [--models 3 | --one-run 30 [--answer-chars 1800]]

Needs a warehouse from `make run` (the CRM checkpoint and the scenario tagger). Works on a copy of `--home` in a
temporary folder (the warehouse, models/ and the Dagster home), so the original is untouched. Synthetic prompts
(templated help-desk questions, five topics) and synthetic answers (each model a different length and structure)
go through the real commands: `usl add-pool`, then per model `usl add-model --pool … --no-leaderboards` (its
partition run: model_responses = "add", response_rewards = "score"), then `leaderboards_after_model_job` once
per model ("rank": the new model's rankings, the audits, the published copy). Prints one line per model and the
process's peak RSS (one model's answers are in memory at a time; the leaderboards read rewards, not answers).

`--one-run N` instead takes N models into each pool as `usl run`'s phase 2 does after a batch of files arrives:
one `model_partitions` run over the N partitions that loads them ("add": model_responses; each file is checked,
then read again as it is written, one model in memory at a time), one that scores them ("score":
response_rewards), each in a child process whose time and peak RSS it prints; then "rank": one
`leaderboards_after_model_job` and one `leaderboards_job` (the nightly rebuild that refits Bradley–Terry).
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


def write_answers(prompts: Path, path: Path, style: int, rng: random.Random, chars: int = 0) -> None:
    """One answer per prompt in the model's style; `chars`: each answer padded to about that length (AlpacaEval's
    answers average ~1,800 characters)."""
    with open(prompts, encoding="utf-8") as source, open(path, "w", encoding="utf-8") as handle:
        for line in source:
            record = json.loads(line)
            task = record["prompt"].split("cannot ", 1)[1].split(" on device")[0]
            output = STYLES[style % len(STYLES)](task, rng.randint(1000, 9999))
            while len(output) < chars:
                output += f"\n\nNote {len(output)}: if {task} still fails, restart the device and try again."
            handle.write(json.dumps({"prompt_id": record["id"], "output": output}) + "\n")


def copy_home(source: Path, target: Path) -> None:
    for name in ("warehouse.duckdb", "models", "dagster", "published"):
        found = source / name
        if found.is_dir():
            shutil.copytree(found, target / name, ignore=shutil.ignore_patterns("*.partial*", "embeddings"))
        elif found.exists():
            shutil.copy2(found, target / name)


def step_seconds(instance, run_id: str) -> dict[str, float]:
    return {s.step_key: (s.end_time or 0) - (s.start_time or 0) for s in instance.get_run_step_stats(run_id)}


def one_run(home: Path, pool: str, prompts: Path, models: int, rng: random.Random, chars: int) -> None:
    """N model files staged as accepted ones, then one model_partitions run over their N partitions that loads them
    (model_responses) and one that scores them (response_rewards), each in a child process."""
    import dagster as dg

    from usl_assets.responses.pools import accepted_dir

    folder = accepted_dir(home, pool)
    folder.mkdir(parents=True, exist_ok=True)
    keys = []
    for m in range(models):
        write_answers(prompts, folder / f"model-{m}.jsonl", m, rng, chars)
        keys.append(f"{pool}:model-{m}")
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions("models", keys)
    for phase, selection in (("add", "[model_responses.key]"),
                             ("score", "[k for k in partition_run_selection(defs.resolve_asset_graph()) "
                                       "if k != model_responses.key]")):
        seconds, peak = _child_run(keys, selection)
        print(f"{pool}: {phase} {models} models in one model_partitions run: {seconds:.0f} s "
              f"({seconds / models:.1f} s per model), peak RSS {peak:,.0f} MB "
              f"({models * int(pool.removeprefix('scale')):,} answers)", flush=True)


# One model_partitions run over a range of partitions in a child process, as `usl run`'s phase 2 runs it.
# VmHWM, not ru_maxrss: a child started by fork + exec inherits its parent's ru_maxrss on Linux.
_CHILD = """import dagster as dg, time
from usl_assets.definitions import defs
from usl_assets.jobs import PARTITIONS_JOB
from usl_assets.launch import execute_in_location
from usl_assets.pipeline import PARTITION_RANGE_END_TAG, PARTITION_RANGE_START_TAG
from usl_assets.responses.assets import model_responses, partition_run_selection
started = time.perf_counter()
with dg.DagsterInstance.get() as instance:
    result = execute_in_location(defs.resolve_job_def(PARTITIONS_JOB), instance, asset_selection={selection},
                                 tags={{PARTITION_RANGE_START_TAG: {first!r}, PARTITION_RANGE_END_TAG: {last!r}}})
peak = [line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM')][0]
print(f'{{result.success}} {{time.perf_counter() - started:.1f}} {{int(peak) / 1024:.0f}}')
"""


def _child_run(keys: list[str], selection: str) -> tuple[float, float]:
    """(seconds, peak RSS MB) of one run of `selection` (Python source) over the partitions keys[0]..keys[-1]."""
    import subprocess

    program = _CHILD.format(selection=selection, first=keys[0], last=keys[-1])
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=os.environ)
    last = done.stdout.strip().splitlines()[-1:] or [""]
    if done.returncode != 0 or not last[0].startswith("True"):
        raise SystemExit(f"the model_partitions run over {keys[0]}..{keys[-1]} failed:\n{done.stderr[-3000:]}")
    _, seconds, peak = last[0].split()
    return float(seconds), float(peak)


def rank_all(pool: str, models: int) -> None:
    """The leaderboards after a batch of models: leaderboards_after_model_job (every pool's rankings but
    Bradley–Terry, the audits of the pool that changed, the published copy), then leaderboards_job (the nightly
    rebuild, which fits Bradley–Terry with the new models)."""
    import dagster as dg

    from usl_assets.definitions import defs
    from usl_assets.launch import console_log_config, execute_in_location
    from usl_assets.responses.commands import rebuild_leaderboards

    with dg.DagsterInstance.get() as instance:
        started = time.perf_counter()
        rebuild_leaderboards(instance, pool, tags={"usl/benchmark": f"{pool}: {models} models"})
        after_models = time.perf_counter() - started
        started = time.perf_counter()
        result = execute_in_location(defs.resolve_job_def("leaderboards_job"), instance,
                                     run_config=console_log_config(False))
        if not result.success:
            raise SystemExit(f"leaderboards_job failed: run {result.run_id}")
        nightly = time.perf_counter() - started
    print(f"{pool}: rank {models} models: leaderboards_after_model_job {after_models:.0f} s, "
          f"leaderboards_job {nightly:.0f} s", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="a USL_HOME after `make run`")
    parser.add_argument("--prompts", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--models", type=int, default=3)
    parser.add_argument("--one-run", type=int, metavar="N", help="N models in one model_responses run per pool")
    parser.add_argument("--answer-chars", type=int, default=0, help="pad each answer to about this many characters")
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
            # --one-run stages the files without `usl add-model`, which would make the first model the reference
            reference = ["--reference-model", "model-0"] if args.one_run else []
            assert usl(["add-pool", pool, "--prompts", str(prompts), *reference]) == 0
            print(f"{pool}: add-pool {time.perf_counter() - started:.1f} s for {n:,} prompts")
            if args.one_run:
                one_run(home, pool, prompts, args.one_run, rng, args.answer_chars)
                rank_all(pool, args.one_run)
                continue
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

"""Time to add one model to a pool vs rebuilding the whole pool, through the real `model_responses` asset.

    USL_DATA_DIR=../shared/data .venv/bin/python benchmarks/add_model_vs_rebuild.py [--pool alpaca_eval] [--repeats 3]

Works in a temporary USL_HOME and an ephemeral Dagster instance. responses.prompts is built with the same plain
functions as `pool_prompts`; the tags come from a small TF-IDF tagger (the tests' one) so the figures measure the
responses stage, not the MiniLM tagger. "add one model" = validate the file as the inbox does + store it + add
the partition + one partition's run; "rebuild" = every partition of the pool in one single-run backfill.
"""

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg

# The checkout's root: the tests' helpers (usl_assets_tests/taggers.py) are not part of the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from usl_assets.partitions import model_partitions  # noqa: E402
from usl_assets.resources import DataDir, UslHome, Warehouse  # noqa: E402
from usl_assets.responses import inbox, pools  # noqa: E402
from usl_assets.responses import tables as response_tables  # noqa: E402
from usl_assets.responses.assets import model_responses  # noqa: E402
from usl_assets.settings import data_dir  # noqa: E402
from usl_assets_tests.taggers import TfidfScenarioTagger  # noqa: E402


QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def add_one_model(instance, resources, data_root: Path, home: Path, new_file: Path, pool: str) -> float:
    started = time.perf_counter()
    validated = inbox.validate_model_file(pool, new_file, data_root)
    inbox.store_accepted(validated, home, keep_source=True)
    if validated.partition_key not in instance.get_dynamic_partitions(model_partitions.name):
        instance.add_dynamic_partitions(model_partitions.name, [validated.partition_key])
    result = dg.materialize([model_responses], resources=resources, instance=instance, run_config=QUIET,
                            partition_key=validated.partition_key)
    assert result.success
    return time.perf_counter() - started


def rebuild_pool(instance, resources, keys: list[str]) -> float:
    started = time.perf_counter()
    result = dg.materialize([model_responses], resources=resources, instance=instance, run_config=QUIET,
                            tags={"dagster/asset_partition_range_start": keys[0],
                                  "dagster/asset_partition_range_end": keys[-1]})
    assert result.success
    return time.perf_counter() - started


def new_model_file(data_root: Path, pool: str, folder: Path) -> Path:
    """A real model's answers under a new name, in the pool's own format."""
    source = next(iter(pools.public_model_files(data_root, pool).values()))
    if pool == "mt_bench":
        target = folder / "benchmark-new-model.jsonl"
        target.write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    else:
        target = folder / "benchmark-new-model.json"
        target.write_text(gzip.open(source, "rt", encoding="utf-8").read(), encoding="utf-8")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", default="alpaca_eval", choices=pools.POOLS)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    data_root = data_dir()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "usl_home"
        resources = {"data_dir": DataDir(path=str(data_root)), "usl_home": UslHome(path=str(home)),
                     "warehouse": Warehouse(path=str(home / "warehouse.duckdb"))}
        warehouse = resources["warehouse"]
        tagged = pools.tag_prompts(pools.pool_prompts(data_root), TfidfScenarioTagger(data_root))
        warehouse.replace_table(response_tables.PROMPTS_TABLE, tagged)
        instance = dg.DagsterInstance.ephemeral()
        keys = [k for k in pools.public_partition_keys(data_root) if k.startswith(args.pool + ":")]
        instance.add_dynamic_partitions(model_partitions.name, keys)
        new_file = new_model_file(data_root, args.pool, Path(tmp))

        rebuild = [rebuild_pool(instance, resources, keys) for _ in range(args.repeats)]
        add = [add_one_model(instance, resources, data_root, home, new_file, args.pool) for _ in range(args.repeats)]
        rows = warehouse.query("SELECT count(*) AS n FROM responses.responses WHERE pool = ?", [args.pool])["n"].item()

    print(f"pool {args.pool}: {len(keys)} public models, {rows} responses after adding one model")
    print(f"rebuild the pool (one run, {len(keys)} partitions): median {statistics.median(rebuild):.2f}s "
          f"(runs: {', '.join(f'{t:.2f}' for t in rebuild)})")
    print(f"add one model (validate + store + partition + run): median {statistics.median(add):.2f}s "
          f"(runs: {', '.join(f'{t:.2f}' for t in add)})")
    print(f"ratio rebuild / add: {statistics.median(rebuild) / statistics.median(add):.1f}x")


if __name__ == "__main__":
    main()

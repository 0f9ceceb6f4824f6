"""Figures of the preferences-tagging stage on the full public data: MiniLM throughput, the scenario tagger's
accuracy (scenario and group) and the headline contradiction figures.

    USL_DATA_DIR=../shared/data USL_HOME=/tmp/usl_bench .venv/bin/python benchmarks/preferences_tagging.py

Materializes the preference chain (raw -> validated -> scenario_tagger -> tagged_preferences ->
preference_analysis) into USL_HOME; embeddings are cached there, so a rerun skips the encoding.
With `--cv`, it first prints the tagger's 5-fold cross-validated accuracy on the training queries only for
a few values of C (how the default C was chosen; several minutes on 2 cores).
"""

import json
import sys
import time

import dagster as dg

from usl_assets.embeddings import SentenceEncoder, encode_cached
from usl_assets.preferences import assets as preference_assets
from usl_assets.preferences import tagging_assets
from usl_assets.preferences.criteria import load_scenarios
from usl_assets.preferences import tagger
from usl_assets.preferences.tagger import load_scenario_queries
from usl_assets.resources import default_resources


def encoder_throughput(texts: list[str]) -> None:
    for max_length in (128, 512):
        encoder = SentenceEncoder(max_length=max_length)
        started = time.monotonic()
        encoder.encode(texts)
        print(f"MiniLM max_length={max_length}: {len(texts) / (time.monotonic() - started):.1f} texts/s "
              f"({len(texts)} texts, fp32, CPU)")


def tagger_regularization_sweep(queries, scenarios, cache_root, max_length: int = 128) -> None:
    train = queries[queries["split"] == "train"].reset_index(drop=True)
    vectors, _ = encode_cached(SentenceEncoder(max_length=max_length), train["text"].tolist(), cache_root)
    for regularization in (1.0, 5.0, 10.0, 30.0):
        started = time.monotonic()
        found = tagger.cross_validated_accuracy(train, vectors, tagger.grouped_scenarios(scenarios), regularization)
        print(f"tagger CV (train only) C={regularization:g}: scenario {found['scenario_accuracy']:.3f}, "
              f"group {found['group_accuracy']:.3f} ({time.monotonic() - started:.0f}s)", flush=True)


def main() -> None:
    resources = default_resources()
    scenarios = load_scenarios(resources["data_dir"].root())
    queries, _ = load_scenario_queries(resources["data_dir"].root(), scenarios)
    encoder_throughput(queries["text"].head(200).tolist())
    if "--cv" in sys.argv[1:]:
        tagger_regularization_sweep(queries, scenarios, resources["usl_home"].subdir(*tagger.EMBEDDING_CACHE_DIR))
    started = time.monotonic()
    result = dg.materialize(
        [*preference_assets.defs.assets, *tagging_assets.defs.assets, *tagging_assets.defs.asset_checks],
        resources=resources,
    )
    print(f"preference chain materialized in {time.monotonic() - started:.0f}s")
    for key in ("scenario_tagger", "tagged_preferences", "preference_analysis"):
        for event in result.asset_materializations_for_node(key):
            for name, value in event.metadata.items():
                if name in ("scenario_accuracy", "group_accuracy", "n_train", "n_test", "tagged_by_model",
                            "criteria_filled", "dagster/row_count") or name.startswith("headline/"):
                    print(f"{key:<22} {name:<55} {json.dumps(value.value)}")
    checks = [(c.check_name, c.passed) for c in result.get_asset_check_evaluations()]
    print("checks:", checks)


if __name__ == "__main__":
    main()

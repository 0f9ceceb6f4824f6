"""Criteria fidelity on the dev wordings: leaderboard.criteria_fidelity's measure (fidelity.py: per phrasing and
pool, Spearman between the custom leaderboard under that one criterion and the property measured on the models'
answers) over wordings the CRM may be tuned on, so a setting can be chosen without the held-out families that
`make run` measures: the train families of crm/property_phrasings.yaml and the seven wording sets the wish reader
is fitted on (crm/wish_wordings/), 1,364 phrasings of the trained properties per pool. Prints per pool and per set
what the asset's metadata shows (fidelity.fidelity_summary): the phrasings, median and minimum Spearman, how many
fall below 0.5, and the length, perfect-reader and decisive baselines.

The wish reader (crm/wish_reader.py) is fitted on these wordings, so the plain measure favours reading each line
whole, as it was fitted. `--leave-one-set-out` measures each wording set with the reader fitted again without it
(the CRM's gate and the rest unchanged), the way it reads wordings it never saw; the train families stay in, since
the gate was fitted on their rows too.

    USL_DATA_DIR=../shared/data .venv/bin/python benchmarks/criteria_fidelity_dev.py [--home .usl]
        [--leave-one-set-out]

Needs a `make run` warehouse (read only: the cached response rows of its default checkpoint); about 4 minutes on 2
cores, and about 19 with `--leave-one-set-out`, which fine-tunes the reader's layers again for each of the seven sets
(crm/wish_tuning.py, about a minute each).
"""

import argparse
import os
from pathlib import Path

import duckdb
import pandas as pd
import yaml

from usl_assets.crm import properties, wish_reader
from usl_assets.leaderboards import audits, fidelity
from usl_assets.responses.pools import content_hash
from usl_assets.scoring import score
from usl_assets.scoring.cache import cached_embeddings

TRAIN_FAMILIES = "train families"


def dev_phrasings() -> list[tuple[str, str, str, str]]:
    """(property, direction, set, text): the train families' phrasings, then each fitted wording set's."""
    found = [(name, direction, TRAIN_FAMILIES, text)
             for name, direction, _, text in properties.phrasings_in_families(properties.TRAIN_FAMILIES)]
    for path in sorted(wish_reader.WORDINGS_DIR.glob("*.yaml")):
        for label, texts in yaml.safe_load(path.read_text(encoding="utf-8")).items():
            name, direction = label.split(":")
            found += [(name, direction, path.stem, text) for text in texts]
    return found


def pool_inputs(conn: duckdb.DuckDBPyConnection, checkpoint_id: str):
    """Per audited pool: (its ranked models' sampled answers, its reference model, the cached response rows)."""
    rankings = conn.sql("SELECT * FROM leaderboard.rankings WHERE profile = 'default' AND scenario = 'all' "
                        "AND method = 'usl_soft'").df()
    references = conn.sql("SELECT pool, reference_model FROM leaderboard.reference_models "
                          "WHERE reference_present ORDER BY pool").fetchall()
    for pool, reference in references:
        answers = audits.ranked_answers(lambda sql, params: conn.execute(sql, params).df(), rankings, pool)
        hashes = [content_hash(p, r) for p, r in zip(answers["prompt"], answers["response"])]
        yield pool, answers, reference, cached_embeddings(conn, checkpoint_id, hashes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=os.environ.get("USL_HOME", ".usl"))
    parser.add_argument("--leave-one-set-out", action="store_true",
                        help="read each wording set with the wish reader fitted without it")
    args = parser.parse_args()
    home = Path(args.home)
    scorer = score.load_scorer(home, "")
    conn = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    calibration = conn.sql("SELECT * FROM crm.calibration").df()
    temperature = float(calibration.loc[calibration["checkpoint_id"] == scorer.checkpoint_id, "temperature"].iloc[0])
    trained = set(conn.sql(fidelity.TRAINED_PROPERTIES).df()["property"])
    phrasings = [phrasing for phrasing in dev_phrasings() if phrasing[0] in trained]
    inputs = list(pool_inputs(conn, scorer.checkpoint_id))
    bank = scorer.encoder.bank
    fitted_reader = bank.reader
    # Per measured group: the wording set it is (None: every phrasing at once) and its phrasings.
    groups = [(None, phrasings)]
    if args.leave_one_set_out:
        sets = list(dict.fromkeys(wording_set for _, _, wording_set, _ in phrasings))
        groups = [(wording_set, [p for p in phrasings if p[2] == wording_set]) for wording_set in sets]
    parts = []
    for left_out, group in groups:
        refit = left_out not in (None, TRAIN_FAMILIES)
        bank.reader = fitted_reader.without(bank.labels, bank.texts, [text for *_, text in group]) if refit \
            else fitted_reader
        for pool, answers, reference, cached in inputs:
            print(f"{pool}: {len(answers):,} answers of {answers['model'].nunique()} models under {len(group):,} "
                  f"dev phrasings{f' ({left_out}, the reader fitted without it)' if refit else ''}", flush=True)
            parts.append(fidelity.fidelity_pool(pool, answers, reference, group, properties.property_value, scorer,
                                                cached, temperature, trained=trained))
    table = pd.concat(parts, ignore_index=True)  # trained properties only: `phrasings` is filtered
    reader_note = ", each wording set read by the reader fitted without it" if args.leave_one_set_out else ""
    print(f"checkpoint {scorer.checkpoint_id}{reader_note}")
    with pd.option_context("display.width", 250):
        for by in ("pool", ["pool", "family"]):  # "family": the train families, or the wording set
            print(fidelity.fidelity_summary(table, by).round(3).to_string(index=False))


if __name__ == "__main__":
    main()

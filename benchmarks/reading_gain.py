"""How strongly should a criterion the linear CRM reads move the ranking? A dev measure for the next lever of
criteria fidelity (docs/crm.md, run 19): the default checkpoint's gate columns that read the prototype reading
(crm/criteria_prototypes.py) multiplied by a gain at scoring time, nothing retrained (on top of
criteria_prototypes.EMPHASIS, which a checkpoint from run 22 on already applies to every phrasing), then

- dev fidelity: Spearman over models between usl_soft point scores (the calibrated temperature of crm.calibration)
  under each phrasing and the property measured on the models' answers, on a pool that is no response pool: the
  AI judge's models outside both pools (and not AlpacaEval's made-up ones) on 200 seeded AlpacaEval prompts,
  reference claude-2, under the phrasings of `--phrasings` (crm/phrasings.py pools; default new_criteria: the
  last phrasing of each train family, never in a training row);
- for the record, the same on each response pool under the held-out families' phrasings of the trained properties
  (what leaderboard.criteria_fidelity measures at gain 1), and with `--outside` under the wordings other people
  wrote for criteria_reading.py (crm/wish_wordings/*.yaml, fitted on by the wish reader since run 34, and
  benchmarks/criteria_wordings_blind7.yaml, kept out of everything).

    USL_DATA_DIR=../shared/data .venv/bin/python benchmarks/reading_gain.py [--home .usl] [--gains 1,2,3,4]
        [--pools-only] [--oracle] [--by-property] [--outside]

Needs a `make run` warehouse (published copy) and its linear checkpoint; a few minutes on 2 cores.
"""

import argparse
import os
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from usl_assets.crm import criteria_prototypes, properties
from usl_assets.crm.checkpoints import default_checkpoint
from usl_assets.crm.checkpoints import load_scorer
from usl_assets.crm.splits import PairsConfig
from usl_assets.leaderboards import fidelity as fidelity_audit
from usl_assets.leaderboards.audits import SAMPLED_ANSWERS

from criteria_reading import OUTSIDE
from judging_substance import DEV_PROMPTS, DEV_REFERENCE, dev_pool

KEY = ["pool", "prompt_id", "model", "scenario", "scenario_group"]


def dev_answers(home: Path, pool_models: set[str]) -> pd.DataFrame:
    """judging_substance.dev_pool's answers, shaped like a pool's for point_scores."""
    return dev_pool(home, pool_models).assign(pool="dev", scenario="all", scenario_group="all")


def fidelity(scorer, answers: pd.DataFrame, reference: str, phrasings: list[tuple[str, str, str]], gains: list[float],
             temperature: float, oracle: bool = False) -> pd.DataFrame:
    """(gain, property, direction, spearman) per phrasing (property, direction, text) and gain. oracle: each
    phrasing's reading replaced by the direction it means at full strength (SCALE × EMPHASIS, in the wishes' half):
    what a perfect reader of the words would reach with this checkpoint's gate."""
    weights = scorer.weights
    rows = scorer.embed_responses(list(answers["prompt"]), list(answers["response"]))
    scaled = (rows[:, 1:][:, weights.columns].astype(float) - weights.feature_mean) / weights.feature_std
    means = fidelity_audit.property_values(answers, list(properties.PROPERTIES), properties.property_value) \
        .groupby(answers["model"]).mean()
    texts = [text for *_, text in phrasings]
    criteria = np.asarray(scorer.embed_criteria([(text,) for text in texts]), np.float64)
    directions = scorer.encoder.bank.reading_columns
    first = criteria.shape[1] - len(directions)  # the reading's columns come last
    if oracle:
        criteria[:, first:] = 0.0
        for row, (name, direction, _) in enumerate(phrasings):
            criteria[row, first + directions.index(f"{criteria_prototypes.WISH}{name}:{direction}")] = \
                criteria_prototypes.SCALE * criteria_prototypes.EMPHASIS
    found = []
    for gain in gains:
        rewards = []
        for text, vector in zip(texts, criteria):
            coefficients = weights.v + weights.gate[:, :first] @ vector[:first] + gain * (
                weights.gate[:, first:] @ vector[first:])
            rewards.append(answers[KEY].assign(profile=text, reward=rows[:, 0].astype(float) + scaled @ coefficients))
        scores = fidelity_audit.point_scores(pd.concat(rewards, ignore_index=True), reference, temperature)
        for name, direction, text in phrasings:
            sign = -1.0 if direction == "less" else 1.0
            found.append((gain, name, direction, fidelity_audit.spearman(scores.loc[text], sign * means[name])))
    return pd.DataFrame(found, columns=["gain", "property", "direction", "spearman"])


def summary(table: pd.DataFrame) -> pd.DataFrame:
    return table.groupby("gain")["spearman"].agg(median="median", below_0_5=lambda s: int((s < 0.5).sum()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=os.environ.get("USL_HOME", ".usl"))
    parser.add_argument("--gains", default="1,1.5,2,3,4")
    parser.add_argument("--phrasings", default="new_criteria", choices=["train", "new_criteria"])
    parser.add_argument("--pools-only", action="store_true", help="skip the dev pool")
    parser.add_argument("--oracle", action="store_true",
                        help="also the pools' fidelity with each phrasing read as the direction it means")
    parser.add_argument("--outside", action="store_true",
                        help="also the pools' fidelity under criteria_reading.py's outside wordings, per set")
    parser.add_argument("--by-property", action="store_true",
                        help="also the pools' median Spearman per property and direction (columns: gains)")
    args = parser.parse_args()
    home, started = Path(args.home), time.perf_counter()
    gains = [float(g) for g in args.gains.split(",")]
    scorer = load_scorer(default_checkpoint(home))
    if getattr(scorer, "weights", None) is None or scorer.encoder.bank is None:
        raise SystemExit("reading_gain: the default CRM is not a linear CRM with a prototype bank")
    with duckdb.connect(str(home / "published" / "warehouse.duckdb"), read_only=True) as con:
        temperature = float(con.execute("SELECT temperature FROM crm.calibration").fetchone()[0])
        pools = con.execute("SELECT pool, reference_model FROM leaderboard.reference_models ORDER BY pool").fetchall()
        pool_models = set(con.execute("SELECT DISTINCT model FROM responses.responses").df()["model"])
        ranked = {pool: con.execute(SAMPLED_ANSWERS, [pool]).df() for pool, _ in pools}
        standing = con.execute("SELECT pool, model FROM leaderboard.rankings WHERE profile = 'default' AND "
                               "scenario = 'all' AND method = 'usl_soft'").df()
    if not args.pools_only:
        dev_measure(home, pool_models, scorer, args.phrasings, gains, temperature)
    pool_measure(pools, ranked, standing, scorer, gains, temperature, args.oracle, args.by_property, args.outside)
    print(f"\n{time.perf_counter() - started:.0f} s")


def dev_measure(home, pool_models, scorer, phrasings, gains, temperature) -> None:
    dev = dev_answers(home, pool_models)
    dev_phrasings = [(name, direction, text) for name, prop in properties.PROPERTIES.items()
                     for direction in ("more", "less") for text in prop.phrasings(direction, phrasings)]
    print(f"dev pool: {dev['model'].nunique()} judged models × {DEV_PROMPTS} prompts, reference {DEV_REFERENCE}, "
          f"{len(dev_phrasings)} {phrasings} phrasings, temperature {temperature:.3f}")
    table = fidelity(scorer, dev, DEV_REFERENCE, dev_phrasings, gains, temperature)
    print(summary(table).round(3).to_string())
    print(by_property(table))


def by_property(table: pd.DataFrame) -> str:
    """Median Spearman per property and direction (rows) and gain (columns)."""
    return table.pivot_table(index=["property", "direction"], columns="gain", values="spearman",
                             aggfunc="median").round(3).to_string()


def outside_wordings(untrained: set[str]) -> dict[str, list[tuple[str, str, str]]]:
    """set -> (property, direction, text) of criteria_reading.OUTSIDE's wordings of the trained properties."""
    import yaml

    found = {}
    for name, path in OUTSIDE.items():
        wordings = yaml.safe_load(path.read_text(encoding="utf-8"))
        found[name] = [(*label.split(":"), text) for label, texts in wordings.items() for text in texts
                       if label.split(":")[0] not in untrained]
    return found


def pool_measure(pools, ranked, standing, scorer, gains, temperature, oracle: bool, per_property: bool,
                 outside: bool = False) -> None:
    untrained = set(PairsConfig().heldout_properties)
    held = [(name, direction, text) for name, direction, _, text in properties.heldout_phrasings()
            if name not in untrained]
    others = outside_wordings(untrained) if outside else {}
    for pool, reference in pools:
        answers = ranked[pool]
        answers = answers[answers["model"].isin(standing[standing["pool"] == pool]["model"])].reset_index(drop=True)
        print(f"\n{pool}: held-out families' phrasings of the trained properties ({len(held)}), for the record")
        own = fidelity(scorer, answers, reference, held, gains, temperature)
        print(summary(own).round(3).to_string())
        if per_property:
            print(by_property(own))
        if oracle:
            print(f"{pool}: the same, each phrasing read as the direction it means (oracle reading)")
            read_right = fidelity(scorer, answers, reference, held, gains, temperature, oracle=True)
            print(summary(read_right).round(3).to_string())
            if per_property:
                print(by_property(read_right))
        for name, wordings in others.items():
            print(f"{pool}: the {len(wordings)} wordings of {name} ({OUTSIDE[name]})")
            print(summary(fidelity(scorer, answers, reference, wordings, gains, temperature)).round(3).to_string())


if __name__ == "__main__":
    main()

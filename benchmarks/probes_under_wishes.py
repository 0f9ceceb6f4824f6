"""Can a custom leaderboard be bought? The gaming audit (leaderboard.gaming_audit) ranks the probe models (answers
built to fool the judge: padded, off-topic, generic, echo, truncated; benchmarks/judging_substance.probes) under
each prompt's default criteria only. Here the default checkpoint ranks them under users' wishes, one wording per
property direction from `blind` (criteria_wordings_blind.yaml: written by a helper who saw no code and no other
wording), in both pools, at temperature 1 without the bootstrap. Per wish it prints the padded probe's place
beside its source's (the pool's weakest model) and which off-topic, generic or echo probes rank above a real model.

    USL_DATA_DIR=../shared/data PYTHONPATH=benchmarks .venv/bin/python benchmarks/probes_under_wishes.py [--home .usl]

Needs a `make run` warehouse (published copy) and its linear checkpoint; about a minute on 2 cores.
"""

import argparse
import os
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from judging_substance import REFERENCES, load, probes, rewards_under, soft_scores
from usl_assets.crm.checkpoints import default_checkpoint, load_scorer

WISHES = Path(__file__).with_name("criteria_wordings_blind.yaml")
MUST_LOSE = ("off_topic", "generic", "echo")  # below every real model, as the gaming audit demands


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=os.environ.get("USL_HOME", ".usl"))
    home = Path(parser.parse_args().home)
    scorer = load_scorer(default_checkpoint(home))
    weights = scorer.weights

    def vectors_of(profile: tuple) -> np.ndarray:
        return scorer.encoder.embed([profile])[0]

    wishes = {label: texts[0] for label, texts in yaml.safe_load(WISHES.read_text(encoding="utf-8")).items()}
    responses = load(home)["responses"]
    for pool_name, reference in REFERENCES.items():
        pool = responses[responses["pool"] == pool_name].reset_index(drop=True)
        real = soft_scores(pool, rewards_under(weights, vectors_of, pool), reference).drop(reference)
        weakest = real.index[-1]
        both = pd.concat([pool, probes(pool, real.index[0], weakest)], ignore_index=True)
        rows = weights.response_rows(list(both["prompt"]), list(both["response"]))
        print(f"\n{pool_name}: {both['model'].nunique()} ranked; the padded probe pads {weakest}")
        for label, text in [("default criteria", None), *wishes.items()]:
            rewards = (rewards_under(weights, vectors_of, both) if text is None
                       else weights.score_rows(rows, vectors_of((text,))))
            order = list(soft_scores(both, rewards, reference).index)
            place = {name.removeprefix("probe:"): order.index(name) + 1 for name in order if name.startswith("probe:")}
            lowest_real = max(order.index(m) for m in order if not m.startswith("probe:")) + 1
            above = [p for p in MUST_LOSE if place[p] < lowest_real]
            source = order.index(weakest) + 1
            mark = ", above it" if place["padded"] < source else ""
            print(f"  {label:22s} padded {place['padded']:2d} (its source {source:2d}{mark}); "
                  f"truncated {place['truncated']:2d}; above a real model: {', '.join(above) or 'none'}")


if __name__ == "__main__":
    main()

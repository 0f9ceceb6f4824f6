"""Can a custom leaderboard be bought? The gaming audit (leaderboard.gaming_audit) ranks the probe models (answers
built to fool the judge: padded, off-topic, generic, echo, truncated; benchmarks/judging_substance.probes) under
each prompt's default criteria only. Here the default checkpoint ranks them under users' wishes, one wording per
property direction from `blind` (crm/wish_wordings/blind.yaml: written by a helper who saw no code and no other
wording; since run 34 among the wordings the wish reader is fitted on), in both pools, at temperature 1 without the bootstrap. Per wish it prints the padded probe's place
beside its source's (the pool's weakest model), the truncated probe's beside its source's (the strongest), which
off-topic, generic or echo probes rank above a real model, and the Spearman over the real models between their
scores and the property measured on their answers (negated for "less"). The last lines sum it up per pool
(judging_substance.py prints the same summary for each variant it fits).

    USL_DATA_DIR=../shared/data PYTHONPATH=benchmarks .venv/bin/python benchmarks/probes_under_wishes.py [--home .usl]

Needs a `make run` warehouse (published copy) and its linear checkpoint; about a minute on 2 cores.
"""

import argparse
import os
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy.stats import spearmanr

from usl_assets.crm import wish_reader
from usl_assets.crm.features import response_counts
from usl_assets.crm.properties import PROPERTIES, property_value

WISHES = wish_reader.WORDINGS_DIR / "blind.yaml"
MUST_LOSE = ("off_topic", "generic", "echo")  # below every real model, as the gaming audit demands


def blind_wishes() -> dict[str, str]:
    """"property:direction" -> the first blind wording of it."""
    return {label: texts[0] for label, texts in yaml.safe_load(WISHES.read_text(encoding="utf-8")).items()}


def wish_report(weights, vectors_of, pool: pd.DataFrame, reference: str) -> pd.DataFrame:
    """One row per wish (and the default criteria first) for one pool: the probes' places and the fidelity."""
    from judging_substance import probes, rewards_under, soft_scores

    real = soft_scores(pool, rewards_under(weights, vectors_of, pool), reference).drop(reference)
    strongest, weakest = real.index[0], real.index[-1]
    both = pd.concat([pool, probes(pool, strongest, weakest)], ignore_index=True)
    rows = weights.response_rows(list(both["prompt"]), list(both["response"]))
    counts = [response_counts(str(text)) for text in pool["response"]]
    wishes = blind_wishes()
    measured = {name: pool.assign(value=[property_value(name, c) for c in counts]).groupby("model")["value"].mean()
                for name in {label.partition(":")[0] for label in wishes} & set(PROPERTIES)}  # once per property
    found = []
    for label, text in [("default criteria", None), *wishes.items()]:
        rewards = (rewards_under(weights, vectors_of, both) if text is None
                   else weights.score_rows(rows, vectors_of((text,))))
        scores = soft_scores(both, rewards, reference)
        order = list(scores.index)
        place = {name.removeprefix("probe:"): order.index(name) + 1 for name in order if name.startswith("probe:")}
        lowest_real = max(order.index(m) for m in order if not m.startswith("probe:")) + 1
        fidelity = np.nan
        name, _, way = label.partition(":")
        if name in measured:
            ours = scores[[m for m in order if not m.startswith("probe:")]]
            sign = 1 if way == "more" else -1
            fidelity = sign * spearmanr(ours.to_numpy(), measured[name].reindex(ours.index).to_numpy()).correlation
        found.append({"wish": label, "padded": place["padded"], "padded_source": order.index(weakest) + 1,
                      "truncated": place["truncated"], "truncated_source": order.index(strongest) + 1,
                      "above_a_real_model": ",".join(p for p in MUST_LOSE if place[p] < lowest_real),
                      "fidelity": round(float(fidelity), 3), "models": len(order)})
    return pd.DataFrame(found)


def summary(report: pd.DataFrame) -> str:
    """One line: over the wishes, how many let each trick win, and the median fidelity."""
    wishes = report[report["wish"] != "default criteria"]
    return (f"{len(wishes)} wishes: padded above its source under {(wishes.padded < wishes.padded_source).sum()}, "
            f"truncated above its source under {(wishes.truncated < wishes.truncated_source).sum()}, an off-topic, "
            f"generic or echo probe above a real model under {(wishes.above_a_real_model != '').sum()}; median "
            f"padded place {wishes.padded.median():.0f} of {wishes.models.iloc[0]}; fidelity median "
            f"{wishes.fidelity.median():.3f}")


def main() -> None:
    from judging_substance import REFERENCES, load
    from usl_assets.crm.checkpoints import default_checkpoint, load_scorer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=os.environ.get("USL_HOME", ".usl"))
    home = Path(parser.parse_args().home)
    scorer = load_scorer(default_checkpoint(home))

    def vectors_of(profile: tuple) -> np.ndarray:
        return scorer.encoder.embed([profile])[0]

    responses = load(home)["responses"]
    pd.set_option("display.width", 200)
    for pool_name, reference in REFERENCES.items():
        pool = responses[responses["pool"] == pool_name].reset_index(drop=True)
        report = wish_report(scorer.weights, vectors_of, pool, reference)
        print(f"\n{pool_name}:\n{report.to_string(index=False)}\n{pool_name}: {summary(report)}")


if __name__ == "__main__":
    main()

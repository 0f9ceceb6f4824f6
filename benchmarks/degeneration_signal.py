"""What each teacher says of the degeneration features once length is controlled: per source, a logistic fit of
"chosen wins" on Δlog(chars) and the Δ of each feature of crm/features.py's DEGENERATION_FEATURES, over the
original (unaugmented) pairs of a `make run` warehouse. docs/crm.md quotes these coefficients; a negative one
means the teacher prefers the answer that degenerates less (loops, repeats, copies or drifts less), at equal length.

    .venv/bin/python benchmarks/degeneration_signal.py

Reads `$USL_HOME/published/warehouse.duckdb`. pandalm_majority is a test split: shown for reference only.
"""

import os
from pathlib import Path

import duckdb
import numpy as np
from sklearn.linear_model import LogisticRegression

from usl_assets.crm.features import DEGENERATION_FEATURES, degeneration_matrix


def coefficients(pairs) -> tuple[np.ndarray, float, float]:
    """Coefficients [Δlog chars, Δfeatures…]; share of pairs where the longer and the less looping/copying won."""
    length = np.log1p(pairs["chosen"].str.len().to_numpy()) - np.log1p(pairs["rejected"].str.len().to_numpy())
    prompts = list(pairs["prompt"])
    delta = degeneration_matrix(prompts, list(pairs["chosen"])) - degeneration_matrix(prompts, list(pairs["rejected"]))
    x = np.column_stack([length, delta])
    model = LogisticRegression(C=10.0, fit_intercept=False).fit(np.vstack([x, -x]),
                                                                 np.r_[np.ones(len(x)), np.zeros(len(x))])
    repeats_differ = delta[np.abs(delta[:, 0]) > 0, 0]
    fewer_repeats = float(np.mean(repeats_differ < 0)) if len(repeats_differ) else float("nan")
    return model.coef_[0], float(np.mean(length[length != 0] > 0)), fewer_repeats


def main() -> None:
    home = Path(os.environ.get("USL_HOME", ".usl"))
    con = duckdb.connect(str(home / "published" / "warehouse.duckdb"), read_only=True)
    pairs = con.execute("""SELECT split, source, prompt, chosen, rejected FROM crm.training_pairs
                           WHERE augmentation = 'original' AND coalesce(soft_label, 1.0) > 0.5
                             AND split IN ('train', 'pandalm_majority') ORDER BY pair_id""").df()
    con.close()
    print(f"{'split / source':<34} {'pairs':>6}  coef Δlog(chars)  " + "  ".join(f"coef {n}" for n in DEGENERATION_FEATURES)
          + "  longer wins  fewer repeated lines win")
    for (split, source), group in pairs.groupby(["split", "source"]):
        if len(group) < 50:
            continue
        coef, longer, fewer_repeats = coefficients(group)
        print(f"{split + ' / ' + source:<34} {len(group):>6}  {coef[0]:>16.2f}  "
              + "  ".join(f"{c:>{len('coef ' + n)}.2f}" for c, n in zip(coef[1:], DEGENERATION_FEATURES))
              + f"  {longer:>11.3f}  {fewer_repeats:>24.3f}")


if __name__ == "__main__":
    main()

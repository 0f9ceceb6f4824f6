"""How far to trust the leaderboard: agreement with external human rankings, and where it moves with criteria.

External validity: Spearman and Kendall between our default leaderboard (profile `default`, topic `all`) and
each public ranking in the data folder, over the models both contain; the same for "rank by mean response
length", the baseline a leaderboard has to beat. The external rankings are only ever compared against, never
used to build a leaderboard.

Contradiction vs leaderboard: per scenario, do scenarios where humans disagree (ties, split votes, criteria
pulling against the other scenarios) also have a less accurate CRM, and a ranking that changes more when the
criteria change?
"""

import base64
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

RANKINGS_DIR = "rankings"
NAME_MAP_FILE = "rankings/alpaca_eval_model_names.json"
EXTERNAL_RANKINGS = ("lmarena_2025", "chatbot_arena_2024", "alpaca_eval_2_lc")
MIN_MODELS = 3  # fewer common models than this: correlations are reported as NaN (with n), not computed

CONTRADICTION_MEASURES = ["disagreement_rate", "tie_rate", "opposite_pull"]
LEADERBOARD_OUTCOMES = ["crm_accuracy", "ranking_change"]


def load_external_rankings(data_root: Path) -> dict[str, pd.Series]:
    """ranking name → Series(external model name → score, higher is better)."""
    folder = data_root / RANKINGS_DIR
    lmarena = json.loads((folder / "lmarena_text_2025-12.json").read_text(encoding="utf-8"))["full"]
    arena = pd.read_csv(folder / "chatbot_arena_elo_2024-03-29.csv")
    alpaca = pd.read_csv(folder / "alpaca_eval_2_leaderboard.csv", index_col=0)
    loaded = {
        "lmarena_2025": pd.Series({name: row["rating"] for name, row in lmarena.items()}, dtype=float),
        "chatbot_arena_2024": pd.Series(arena["rating"].to_numpy(float), index=arena["model"]),
        "alpaca_eval_2_lc": alpaca["length_controlled_winrate"].astype(float),
    }
    return {name: loaded[name] for name in EXTERNAL_RANKINGS}


def load_name_map(data_root: Path) -> dict[str, dict[str, str | None]]:
    """Our model name → {ranking name → its name there (None = not rated there)}."""
    return json.loads((data_root / NAME_MAP_FILE).read_text(encoding="utf-8"))


def external_name(model: str, ranking: str, external: pd.Series, name_map: dict) -> str | None:
    """The ranking's name for our model: from the name map where it says, else a case-insensitive exact match."""
    if ranking in name_map.get(model, {}):
        return name_map[model][ranking]
    by_lower = {str(name).lower(): name for name in external.index}
    return by_lower.get(model.lower())


def correlate(ours: pd.Series, theirs: pd.Series) -> dict:
    """Spearman and Kendall between two score Series aligned on their index (only common, non-null entries)."""
    both = pd.concat([ours.rename("ours"), theirs.rename("theirs")], axis=1, join="inner").dropna()
    result = {"n_models": len(both), "spearman": np.nan, "spearman_p": np.nan, "kendall": np.nan,
              "kendall_p": np.nan}
    if len(both) >= MIN_MODELS and both["ours"].nunique() > 1 and both["theirs"].nunique() > 1:
        spearman = stats.spearmanr(both["ours"], both["theirs"])
        kendall = stats.kendalltau(both["ours"], both["theirs"])
        result.update(spearman=float(spearman.statistic), spearman_p=float(spearman.pvalue),
                      kendall=float(kendall.statistic), kendall_p=float(kendall.pvalue))
    return result


def to_external_names(scores: pd.Series, ranking: str, external: pd.Series, name_map: dict) -> pd.Series:
    renamed = {model: external_name(model, ranking, external, name_map) for model in scores.index}
    kept = {renamed[model]: value for model, value in scores.items() if renamed[model] is not None}
    return pd.Series(kept, dtype=float)


def external_validity(rankings: pd.DataFrame, lengths: pd.DataFrame, external: dict[str, pd.Series],
                      name_map: dict) -> pd.DataFrame:
    """leaderboard.external_validity: per pool, each method of the default leaderboard and the mean-length
    baseline against each external ranking."""
    default = rankings[(rankings["profile"] == "default") & (rankings["scenario"] == "all")]
    rows = []
    for pool in sorted(set(default["pool"]) | set(lengths["pool"])):
        candidates = {method: part.set_index("model")["score"]
                      for method, part in default[default["pool"] == pool].groupby("method")}
        pool_lengths = lengths[lengths["pool"] == pool].set_index("model")["mean_length_chars"]
        candidates["mean_length"] = pool_lengths.astype(float)
        for method, scores in sorted(candidates.items()):
            for ranking, theirs in external.items():
                ours = to_external_names(scores, ranking, theirs, name_map)
                rows.append({"pool": pool, "profile": "default", "method": method, "external_ranking": ranking,
                             **correlate(ours, theirs)})
    columns = ["pool", "profile", "method", "external_ranking", "n_models", "spearman", "spearman_p", "kendall",
               "kendall_p"]
    return pd.DataFrame(rows, columns=columns)


def ranking_change(rankings: pd.DataFrame) -> pd.DataFrame:
    """Per pool, scenario and named profile: 1 − Kendall's tau between the default profile's USL ranking of the
    scenario and that profile's (how much the criteria reorder the models)."""
    usl = rankings[(rankings["method"] == "usl") & (rankings["level"] == "scenario")]
    rows = []
    for (pool, scenario), part in usl.groupby(["pool", "scenario"]):
        table = part.pivot_table(index="model", columns="profile", values="score")
        if "default" not in table:
            continue
        for profile in table.columns.drop("default"):
            tau = correlate(table["default"], table[profile])
            rows.append({"pool": pool, "scenario": scenario, "profile": profile, "n_models": tau["n_models"],
                         "kendall": tau["kendall"], "ranking_change": 1.0 - tau["kendall"]})
    return pd.DataFrame(rows, columns=["pool", "scenario", "profile", "n_models", "kendall", "ranking_change"])


def contradiction_by_scenario(contradiction: pd.DataFrame, crm_by_scenario: pd.DataFrame,
                              changes: pd.DataFrame, crm_variant: str = "crm") -> pd.DataFrame:
    """One row per scenario: the human-contradiction figures, the CRM's accuracy there, and the mean ranking
    change over named profiles and pools."""
    crm = crm_by_scenario[crm_by_scenario["variant"] == crm_variant]
    crm = crm.groupby("scenario").apply(
        lambda rows: pd.Series({"crm_accuracy": np.average(rows["accuracy"], weights=rows["n"].clip(lower=1)),
                                "crm_n": int(rows["n"].sum())}), include_groups=False).reset_index()
    change = changes.groupby("scenario").agg(ranking_change=("ranking_change", "mean"),
                                             n_profile_comparisons=("ranking_change", "count")).reset_index()
    base = contradiction[["scenario", "scenario_group", "n_pairs", *CONTRADICTION_MEASURES]]
    table = base.merge(crm, on="scenario", how="left").merge(change, on="scenario", how="left")
    return table.sort_values("scenario", ignore_index=True)


def contradiction_correlations(table: pd.DataFrame) -> pd.DataFrame:
    """Spearman across scenarios between each contradiction measure and each leaderboard outcome."""
    rows = []
    for measure in CONTRADICTION_MEASURES:
        for outcome in LEADERBOARD_OUTCOMES:
            result = correlate(table.set_index("scenario")[measure].astype(float),
                               table.set_index("scenario")[outcome].astype(float))
            rows.append({"measure": measure, "outcome": outcome, "n_scenarios": result["n_models"],
                         "spearman": result["spearman"], "spearman_p": result["spearman_p"]})
    return pd.DataFrame(rows)


def contradiction_chart(table: pd.DataFrame) -> str:
    """Scatter plots (measure × outcome, one point per scenario) as a base64 PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(LEADERBOARD_OUTCOMES), len(CONTRADICTION_MEASURES), figsize=(11, 6.5),
                                squeeze=False)
    for row, outcome in enumerate(LEADERBOARD_OUTCOMES):
        for col, measure in enumerate(CONTRADICTION_MEASURES):
            axis = axes[row][col]
            axis.scatter(table[measure], table[outcome], s=14, alpha=0.7)
            axis.set_xlabel(measure)
            axis.set_ylabel(outcome)
    figure.suptitle("Human contradiction per scenario vs CRM accuracy and ranking change between profiles")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80)
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")

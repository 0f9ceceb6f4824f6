"""The investigation of human preferences (the CRM paper's Section 3): how preferences differ by scenario.

Per scenario and source: pairs, tie rate, annotator disagreement (PandaLM's three votes not unanimous) and how
often the preferred side is the longer one. Per scenario, which criteria it carries (types, and whether they ask
for brevity or richness), and how strongly its preferences pull against the other scenarios':

- length_direction d = 2·longer_preferred_rate − 1, in [−1, 1]: +1 the longer side always wins, −1 the shorter;
- opposite_pull = Σ_t n_t·max(0, −d_s·d_t) / Σ_t n_t over the other scenarios t, in [0, 1]: 0 when every other
  scenario leans the same way (or one side is neutral), 1 when this scenario and all others lean fully apart.
  A reward model without criteria has to fit both directions at once; the leaderboard stage correlates this
  with CRM accuracy.
"""

import base64
import io
import re

import numpy as np
import pandas as pd

from usl_assets.markdown import markdown_table  # noqa: F401 (the assets call analysis.markdown_table)

STATS_COLUMNS = ["scenario", "scenario_group", "source", "n_pairs", "n_ties", "tie_rate", "n_with_votes",
                 "disagreement_rate", "n_length_decided", "longer_preferred_rate"]
CONTRADICTION_COLUMNS = ["scenario", "scenario_group", "n_pairs", "tie_rate", "disagreement_rate",
                         "longer_preferred_rate", "opposite_pull", "length_direction", "n_length_decided",
                         "criteria_length_stance"]

# A criterion asks for brevity or for richness when its name or text says so (both is possible). "length" alone
# is no signal ("explicit constraints (e.g. word count, response length limit)"), so it is left out.
BREVITY = re.compile(r"\b(?:concis\w*|brevity|succinct\w*|to[- ]the[- ]point|as short as possible|too long|"
                     r"verbos\w*|fewest words)\b", re.IGNORECASE)
RICHNESS = re.compile(r"\b(?:comprehensive\w*|in-depth|depth|thorough\w*|rich\w*|detailed|details?|elaborat\w*|"
                      r"vivid|coverage)\b", re.IGNORECASE)


def pair_facts(tagged: pd.DataFrame) -> pd.DataFrame:
    """One row per pair: is_tie, votes_split (None without ≥2 votes), longer_won (None for ties/equal lengths)."""
    length_a = tagged["response_a"].fillna("").str.len().to_numpy()
    length_b = tagged["response_b"].fillna("").str.len().to_numpy()
    winner = tagged["human_winner"].to_numpy()
    decided = (winner != "tie") & (length_a != length_b)
    longer_is_a = length_a > length_b
    longer_won = np.where(decided, (winner == "model_a") == longer_is_a, None)
    return pd.DataFrame({
        "scenario": tagged["scenario"].to_numpy(),
        "scenario_group": tagged["scenario_group"].to_numpy(),
        "source": tagged["source"].to_numpy(),
        "is_tie": winner == "tie",
        "votes_split": [_split_vote(votes) for votes in tagged["votes"]],
        "longer_won": longer_won,
    })


def _split_vote(votes: object) -> bool | None:
    if pd.api.types.is_scalar(votes) or len(votes) < 2:  # None, NaN and pd.NA are scalars
        return None
    return len(set(votes)) > 1


def _summarise(facts: pd.DataFrame) -> pd.Series:
    voted = facts["votes_split"].dropna().astype(bool)
    decided = facts["longer_won"].dropna().astype(bool)
    return pd.Series({
        "n_pairs": len(facts),
        "n_ties": int(facts["is_tie"].sum()),
        "tie_rate": float(facts["is_tie"].mean()),
        "n_with_votes": len(voted),
        "disagreement_rate": float(voted.mean()) if len(voted) else np.nan,
        "n_length_decided": len(decided),
        "longer_preferred_rate": float(decided.mean()) if len(decided) else np.nan,
    })


def preference_stats(facts: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    stats = facts.groupby(by, sort=True)[["is_tie", "votes_split", "longer_won"]].apply(_summarise).reset_index()
    for column in ("n_pairs", "n_ties", "n_with_votes", "n_length_decided"):
        stats[column] = stats[column].astype(int)
    return stats


def criteria_view(criteria: pd.DataFrame) -> pd.DataFrame:
    """Per scenario: criteria count, weight per type, brevity and richness weight, and their balance."""
    text = criteria["criterion"].fillna("") + " " + criteria["content"].fillna("")
    frame = criteria.assign(
        brevity_weight=np.where(text.str.contains(BREVITY), criteria["weight"], 0),
        richness_weight=np.where(text.str.contains(RICHNESS), criteria["weight"], 0),
    )
    by_type = frame.pivot_table(index="scenario", columns="type", values="weight", aggfunc="sum", fill_value=0)
    by_type.columns = [f"{kind}_weight" for kind in by_type.columns]
    view = frame.groupby(["scenario", "scenario_group"], dropna=False).agg(
        n_criteria=("criterion", "size"), total_weight=("weight", "sum"),
        brevity_weight=("brevity_weight", "sum"), richness_weight=("richness_weight", "sum"),
    ).reset_index().merge(by_type.reset_index(), on="scenario", how="left")
    # Share of the scenario's criteria weight asking for richness minus the share asking for brevity, in [-1, 1].
    view["criteria_length_stance"] = (view["richness_weight"] - view["brevity_weight"]) / view["total_weight"]
    return view


def opposite_pull(direction: pd.Series, weight: pd.Series) -> pd.Series:
    """For each scenario, the weighted share of the other scenarios' pull against its own length direction."""
    d = direction.to_numpy(dtype=float)
    w = np.where(np.isnan(d), 0.0, weight.to_numpy(dtype=float))
    against = np.maximum(0.0, -np.outer(d, d))
    np.fill_diagonal(against, 0.0)
    against = np.nan_to_num(against)
    others = w.sum() - w
    pull = (against * w[None, :]).sum(axis=1) / np.where(others > 0, others, 1.0)
    return pd.Series(np.where(np.isnan(d) | (others <= 0), np.nan, pull), index=direction.index)


def scenario_contradiction(by_scenario: pd.DataFrame, view: pd.DataFrame) -> pd.DataFrame:
    frame = by_scenario.merge(view[["scenario", "criteria_length_stance"]], on="scenario", how="left")
    frame["length_direction"] = 2 * frame["longer_preferred_rate"] - 1
    frame["opposite_pull"] = opposite_pull(frame["length_direction"], frame["n_length_decided"])
    return frame[CONTRADICTION_COLUMNS].sort_values("opposite_pull", ascending=False, na_position="last")


def headline_figures(contradiction: pd.DataFrame, facts: pd.DataFrame) -> dict:
    decided = contradiction.dropna(subset=["length_direction"])
    stance = decided.dropna(subset=["criteria_length_stance"])
    agree = stance[["length_direction", "criteria_length_stance"]].corr(method="spearman").iloc[0, 1]
    return {
        "pairs": int(len(facts)),
        "longer_preferred_overall": float(facts["longer_won"].dropna().astype(bool).mean()),
        "scenarios": int(len(contradiction)),
        "scenarios_longer_wins": int((decided["length_direction"] > 0).sum()),
        "scenarios_shorter_wins": int((decided["length_direction"] < 0).sum()),
        "mean_opposite_pull": float(decided["opposite_pull"].mean()),
        "max_opposite_pull_scenario": str(decided.iloc[0]["scenario"]) if len(decided) else "",
        "criteria_stance_vs_length_direction_spearman": None if pd.isna(agree) else float(agree),
    }


def contradiction_chart_png(contradiction: pd.DataFrame) -> bytes:
    """Horizontal bars of each scenario's length direction, coloured by group; returns PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = contradiction.dropna(subset=["length_direction"]).sort_values("length_direction")
    groups = sorted(frame["scenario_group"].fillna("(none)").unique())
    colours = dict(zip(groups, plt.get_cmap("tab10").colors, strict=False))
    figure, axis = plt.subplots(figsize=(8, max(3, 0.18 * len(frame) + 1)), dpi=80)
    axis.barh(frame["scenario"], frame["length_direction"],
              color=[colours[g] for g in frame["scenario_group"].fillna("(none)")])
    axis.axvline(0, color="black", linewidth=0.8)
    axis.set_xlim(-1, 1)
    axis.set_xlabel("length direction: +1 longer response always preferred, −1 shorter")
    axis.tick_params(axis="y", labelsize=7)
    axis.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colours[g]) for g in groups], labels=groups,
                fontsize=7, loc="lower right")
    axis.set_title("Where human preferences pull in opposite directions")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return buffer.getvalue()


def png_markdown(png: bytes, alt: str) -> str:
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"



"""Tables, chart and text the page shows. Numbers stay numbers (the tables sort by them); user text is escaped."""

import matplotlib

matplotlib.use("Agg")  # the page renders charts to images; no display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from usl_assets.crm import reading as crm_reading  # noqa: E402
from usl_assets.leaderboards.commands import RANK_RULE, Leaderboard, columns_of  # noqa: E402
from usl_assets.leaderboards.ranking import PER_MODEL_METHODS  # noqa: E402
from usl_assets.page.inputs import as_text  # noqa: E402

INTERVAL = "95% interval"
EXTERNAL_NAMES = {
    "lmarena_2025": "LMArena text (2025-12)",
    "chatbot_arena_2024": "Chatbot Arena (2024-03-29)",
    "alpaca_eval_2_lc": "AlpacaEval 2, length-controlled",
}
METHOD_MEANINGS = {
    "usl_soft": "USL soft score (default): mean probability, from the calibrated reward difference, that the model's "
                "response beats the reference model's",
    "usl": "USL score: % of prompts where the model's response beats the reference model's (the paper's)",
    "usl_lc": "Length-controlled USL score: the win probability at equal length (AlpacaEval 2's GLM on the CRM's "
              "win probabilities)",
    "bradley_terry": "Bradley–Terry rating on the Elo scale (every pair of models on every prompt)",
    "mean_length": "ranking by mean response length: the baseline a leaderboard should beat",
}


def _interval(low: float, high: float) -> str:
    return "—" if pd.isna(low) or pd.isna(high) else f"[{low:.1f}, {high:.1f}]"


def default_table(board: Leaderboard) -> pd.DataFrame:
    """Rank, model, score, its interval, prompts, then a column per scenario group (one decimal)."""
    wide = board.wide
    shown = pd.DataFrame({
        "rank": wide["rank"].astype(int), "model": wide["model"], "score": wide["overall"].round(1),
        INTERVAL: [_interval(lo, hi) for lo, hi in zip(wide["overall_low"], wide["overall_high"])],
        "prompts": wide["n_prompts"].astype(int)})
    for topic in board.topics:
        shown[topic] = wide[topic].round(1)
    return shown


def rank_legend(board: Leaderboard, method: str) -> str:
    """How to read the rank column, and which model is the reference (not a competitor) where the method scores
    every model against it."""
    ties = board.wide["rank"].value_counts()
    shared = f" Here {int((ties > 1).sum())} ranks are shared." if (ties > 1).any() else ""
    reference = (f" **{as_text(board.reference)}** is the reference every other model is compared with: it scores "
                 "50 by construction and is not a competitor." if board.reference and method in PER_MODEL_METHODS
                 else "")
    return f"{as_text(RANK_RULE)}{shared}{reference}"


def rank_change(custom_rank: int, default_rank: float) -> str:
    """How the custom ranking moves a model against the default one (▲ up, ▼ down)."""
    if pd.isna(default_rank):
        return "new"
    moved = int(default_rank) - int(custom_rank)
    return "=" if moved == 0 else (f"▲ {moved}" if moved > 0 else f"▼ {-moved}")


def custom_table(board: Leaderboard, default_ranks: pd.DataFrame) -> pd.DataFrame:
    """The paper's custom table: rank over the chosen topics' prompts (board.scope; every prompt without topics),
    its change against the default criteria's rank over the same prompts, the model, then overall, each topic and
    the pooled topics with intervals, the ranked-by column first."""
    wide = board.wide.merge(default_ranks.rename(columns={"rank": "default_rank"}), on="model", how="left")
    shown = pd.DataFrame({
        "rank": wide["rank"].astype(int),
        "vs default": [rank_change(r, d) for r, d in zip(wide["rank"], wide["default_rank"])],
        "model": wide["model"]})
    columns = columns_of(board.topics)
    ranked_by = "overall" if board.scope == "all" else board.scope
    for column in [ranked_by, *[c for c in columns if c != ranked_by]]:
        shown[column] = wide[column].round(1)
        shown[f"{column} {INTERVAL}"] = [_interval(lo, hi) for lo, hi in zip(wide[f"{column}_low"],
                                                                               wide[f"{column}_high"])]
    return shown


def custom_header(board: Leaderboard, version: str, method: str, cached: bool, seconds: float) -> str:
    """The line above the paper's table: version, number of examples and of models, and how it was answered."""
    n_examples = int(board.wide["n_prompts"].max()) if len(board.wide) else 0
    n_models = int(board.wide["model"].nunique())
    how = "kept from an earlier request" if cached else f"scored and ranked in {seconds:.2f} s"
    left_out = f" · {board.left_out} responses without a finite reward left out" if board.left_out else ""
    scope = "every prompt" if board.scope == "all" else board.scope
    note = f"  \n{as_text(board.note)}" if board.note else ""
    return (f"**Version** CRM `{as_text(version)}` · **Ranked over** {as_text(scope)} · **#Examples** "
            f"{n_examples:,} · **#Models** {n_models} · ranked by {as_text(method)} · {how}{left_out}{note}")


def scores_chart(board: Leaderboard, title: str):
    """Each model's score over what the board ranks by (board.scope) with its 95% interval, best at the top."""
    overall = board.long[board.long["scenario"] == board.scope].sort_values("score")
    figure, axes = plt.subplots(figsize=(8, max(2.5, 0.32 * len(overall) + 1)))
    low = (overall["score"] - overall["ci_low"]).clip(lower=0).to_numpy(float)
    high = (overall["ci_high"] - overall["score"]).clip(lower=0).to_numpy(float)
    positions = np.arange(len(overall))
    axes.errorbar(overall["score"], positions, xerr=[low, high], fmt="o", color="#2563eb", ecolor="#93c5fd",
                  elinewidth=3, capsize=3)
    axes.set_yticks(positions, overall["model"], fontsize=8)
    axes.set_xlabel("score (95% interval)")
    axes.set_title(title, fontsize=10)
    axes.grid(axis="x", alpha=0.3)
    figure.tight_layout()
    plt.close(figure)  # Gradio renders the figure itself; pyplot must not keep it
    return figure


def validity_markdown(validity: pd.DataFrame, pool: str) -> str:
    """One line per (method, external ranking): the correlation and what it means."""
    rows = validity[validity["pool"] == pool] if len(validity) else validity
    if rows.empty:
        return f"No external-validity figures for {as_text(pool)} in the published warehouse."
    lines = ["**External validity**: how well this pool's default leaderboard agrees with rankings by people "
             "(Spearman ρ and Kendall τ over the models both rank; 1 = same order, 0 = unrelated)."]
    for row in rows.sort_values(["external_ranking", "method"]).itertuples():
        external = EXTERNAL_NAMES.get(row.external_ranking, row.external_ranking)
        meaning = METHOD_MEANINGS.get(row.method, row.method)
        if pd.isna(row.spearman):
            lines.append(f"- {as_text(external)} vs {as_text(row.method)}: not measured "
                         f"({int(row.n_models)} models in common; at least 3 needed).")
            continue
        lines.append(f"- {as_text(external)} vs {as_text(row.method)}: ρ = {row.spearman:.2f}, τ = "
                     f"{row.kendall:.2f} over {int(row.n_models)} models — {as_text(meaning)}.")
    return "\n".join(lines)


def _arrows(table: pd.DataFrame, column: str, kind: str = crm_reading.TIED) -> str:
    rows = table[table["kind"] == kind]
    return ", ".join(f"{as_text(prop)} {mark}" for prop, mark in zip(rows["property"], rows[column]))


def reading_markdown(reading: "crm_reading.CriteriaReading") -> str:
    """How the CRM reads the criteria (crm/reading.py): the arrows per property for the set and for each criterion,
    then the warnings. User text is escaped."""
    title = "**How the CRM reads your criteria**"
    if not reading.available or reading.table.empty:
        return f"{title}: {as_text(reading.note or 'nothing to read')}."
    lines = [f"{title} ({as_text(crm_reading.LEGEND)})", ""]
    table, criteria = reading.table, reading.criteria
    if len(criteria) > 1:
        lines.append(f"- all {len(criteria)} criteria: {_arrows(table, 'arrow')}")
        lines += [f"- “{as_text(c)}”: {_arrows(table, f'criterion_{i + 1}_arrow')}" for i, c in enumerate(criteria)]
    else:
        lines.append(f"- “{as_text(criteria[0])}”: {_arrows(table, 'arrow')}")
    untied = _arrows(table, "arrow", crm_reading.UNTIED)
    if untied:
        lines.append(f"- {as_text(crm_reading.UNTIED)}: {untied}")
    if focus := crm_reading.focus_line(reading):
        lines.append(f"- {as_text(focus)}")
    if reading.warnings:
        lines.append("")
        lines += [f"⚠️ {as_text(warning)}  " for warning in reading.warnings]
    return "\n".join(lines)


def compare_verdict(rows: pd.DataFrame, criteria_said: str, temperature: float, architecture: str) -> str:
    """The compare tab's verdict: the scenario, the criteria applied (each line), who wins with both rewards on a
    stated scale, and the reward terms that separate the two answers (linear CRM; others say there are none)."""
    a, b = rows.iloc[0], rows.iloc[1]
    criteria = rows.attrs.get("criteria", [])
    difference = float(a["reward"] - b["reward"])
    winner = ("equal rewards" if difference == 0 else
              f"**{as_text(a['model'] if difference > 0 else b['model'])}** wins")
    chance = 1.0 / (1.0 + np.exp(-difference / temperature))
    lines = [f"Scenario {as_text(a['scenario'])} · scored under {criteria_said} · {winner}",
             "", "**Criteria applied:** " + " · ".join(f"“{as_text(c)}”" for c in criteria),
             "", f"**Rewards** (reward units; a difference d means the first answer is preferred with probability "
                 f"σ(d/{temperature:.2f}), as usl_soft counts it): {as_text(a['model'])} {a['reward']:.3f} · "
                 f"{as_text(b['model'])} {b['reward']:.3f} · difference {difference:+.3f}, so "
                 f"{as_text(a['model'])}'s answer is preferred with probability {chance:.0%}"]
    terms = rows.attrs.get("terms")
    if terms is None:
        lines += ["", f"No breakdown: the {as_text(architecture)} CRM's reward is not a sum of readable terms "
                      "(only the linear CRM's is)."]
        return "\n".join(lines)
    gaps = (terms.iloc[0] - terms.iloc[1]).sort_values(key=np.abs, ascending=False)
    lines += ["", f"**What separates them** ({as_text(a['model'])} − {as_text(b['model'])}, reward units, largest "
                  "first):", ""]
    lines += [f"- {as_text(term)}: {gap:+.3f}" for term, gap in gaps.head(6).items()]
    return "\n".join(lines)


def why_markdown(found, version: str) -> str:
    """The "Why?" of one model (a leaderboards/explain.Breakdown): what it compares, under which criteria and CRM,
    the total with its scale, then a table of the terms (model − reference, largest first) ending on the total.
    The reference model, and a CRM that is not linear, get one line."""
    model = as_text(found.model)
    if found.note:
        return f"**Why {model}?** {as_text(found.note)}."
    said = ("; ".join(f"“{as_text(c)}”" for c in found.criteria) if found.criteria
            else "each prompt's scenario default criteria")
    scope = "every prompt" if found.scope == "all" else as_text(found.scope)
    total, k = found.total, found.temperature
    lines = [f"**Why {model} ranks here**: its reward against **{as_text(found.reference)}**'s (the reference) on the "
             f"same {found.n_prompts} prompts ({scope}), under {said}; CRM `{as_text(version)}`.", "",
             f"**Total: {total:+.3f}** reward units on average (model − reference). Scale: a reward difference d is a "
             f"win probability σ(d/{k:.2f}) under usl_soft, 0 is even (a difference of {total:+.3f} alone: "
             f"{1.0 / (1.0 + np.exp(-total / k)):.0%}). Its answer has the higher reward on {found.won:.0%} of the "
             "prompts.", "",
             "| term | model − reference | share of the moves |", "|---|---:|---:|"]
    lines += [f"| {as_text(row.term)} | {row.difference:+.3f} | {row.share:.0%} |"
              for row in found.table.itertuples()]
    lines.append(f"| **total** | **{total:+.3f}** | |")
    return "\n".join(lines)

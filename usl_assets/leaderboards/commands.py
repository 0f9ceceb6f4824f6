"""`usl leaderboard`: the customizable leaderboard the paper's interface shows — models by overall score and by the
user's topics, under the default criteria (from the published warehouse) or the user's own (scored on demand)."""

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from usl_assets.leaderboards import ranking
from usl_assets.leaderboards.adhoc_comparisons import pairs_from_rewards, reference_wins_from_rewards
from usl_assets.settings import UslConfigError, usl_home
from usl_assets.warehouse import WarehouseFile, published_path

RANK_RULE = ("Rank: 1 + the number of models whose 95% interval lies wholly above this model's (Chatbot Arena's "
             "rule); models whose intervals overlap share a rank, marked =.")
FORMATS = ("table", "csv", "json")
METHODS = ranking.METHODS


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    """The arguments of `usl leaderboard`."""
    parser.description = f"Rank a pool's models overall and per topic. {RANK_RULE}"
    parser.add_argument("--pool", required=True, help="response pool: alpaca_eval, mt_bench or a user pool (usl add-pool)")
    parser.add_argument("--topic", action="append", default=[], metavar="T",
                        help="a scenario (e.g. code_generation) or scenario group (e.g. Code); repeatable. The "
                             "ranking (rank, order, interval, prompt count) is then over the chosen topics' prompts, "
                             "several topics pooled; the overall score stays beside it")
    parser.add_argument("--criteria", action="append", default=[], metavar="TEXT",
                        help="one criterion of yours (repeatable); omitted: each scenario's default criteria")
    parser.add_argument("--format", choices=FORMATS, default="table")
    parser.add_argument("--method", choices=METHODS, default=ranking.DEFAULT_METHOD,
                        help="usl_soft (default): mean win probability against the pool's reference model; usl: "
                             "the paper's hard wins; usl_lc: length-controlled win rate; bradley_terry: ratings "
                             "(docs/leaderboards.md)")
    parser.add_argument("--bootstrap-rounds", type=positive_int, default=1000, help="resamples for the intervals")
    parser.add_argument("--explain", nargs="?", const=True, default=False, metavar="MODEL",
                        help="also print how the CRM reads your --criteria: per property (length, structure, "
                             "code…) whether the reward now weighs it more (↑) or less (↓) than it does for an "
                             "unrelated sentence, for each criterion and for the set, with warnings (criteria "
                             "read as almost nothing, criteria pulling one property both ways); with MODEL, also "
                             "why MODEL ranks where it does: its reward against the reference model's, split "
                             "into the CRM's terms (text score, length, structure, fit to the prompt…); linear "
                             "CRM, docs/leaderboards.md")
    parser.set_defaults(handler=show_leaderboard)


def positive_int(text: str) -> int:
    """argparse type: a whole number ≥ 1 (0 resamples would give NaN intervals)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def check_criteria_text(criteria: list[str]) -> None:
    """Each criterion must be text: bytes that are not UTF-8 reach argv as lone surrogates and could never be
    hashed or scored. Checked before the CRM is loaded."""
    for criterion in criteria:
        try:
            criterion.encode("utf-8")
        except UnicodeEncodeError:
            shown = criterion.encode("utf-8", errors="surrogateescape").decode("latin-1")
            raise UslConfigError(f"bad --criteria: {shown!r} is not UTF-8 text") from None


def default_published() -> Path:
    """$USL_HOME's published copy, where Warehouse().published_path() points, without loading Dagster."""
    return published_path(usl_home() / "warehouse.duckdb")


def read_published(sql: str, params: list | None = None, path: Path | None = None) -> pd.DataFrame:
    """Query the published copy (read-only): analysts and this command never read the file Dagster writes."""
    if path is None:
        path = default_published()
    if not path.exists():
        raise UslConfigError(f"no published warehouse at {path}: materialize the leaderboards first (usl run)")
    with duckdb.connect(str(path), read_only=True) as conn:
        return conn.execute(sql, params or []).df()


def pool_topics(pool: str, published: Path | None = None) -> pd.DataFrame:
    """scenario, scenario_group of the pool's scored prompts; raises for an unknown pool."""
    pools = read_published("SELECT DISTINCT pool FROM leaderboard.reference_models ORDER BY pool", path=published)
    if pool not in set(pools["pool"]):
        raise UslConfigError(f"unknown pool {pool!r}: the published leaderboard has {', '.join(pools['pool'])}")
    return read_published("SELECT DISTINCT scenario, scenario_group FROM leaderboard.response_scores "
                          "WHERE pool = ? ORDER BY scenario", [pool], path=published)


def prompt_groups(pool: str, published: Path | None = None) -> pd.DataFrame:
    """prompt_id, scenario_group of the pool's scored prompts: a prompt's group is its own (a user pool's topic),
    not one implied by its scenario."""
    return read_published("SELECT DISTINCT prompt_id, scenario_group FROM leaderboard.response_scores "
                          "WHERE pool = ?", [pool], path=published)


def check_topics(topics: list[str], known: pd.DataFrame, pool: str) -> None:
    names = set(known["scenario"]) | set(known["scenario_group"])
    unknown = [topic for topic in topics if topic not in names]
    if unknown:
        groups = ", ".join(sorted(set(known["scenario_group"])))
        examples = ", ".join(sorted(set(known["scenario"]))[:4])
        raise UslConfigError(f"unknown topic {', '.join(map(repr, unknown))} for pool {pool}: use a group "
                             f"({groups}) or a scenario the pool has (e.g. {examples})")


def published_rankings(pool: str, topics: list[str], method: str, published: Path | None = None) -> pd.DataFrame:
    """The default profile's rankings (long: scenario, model, score, ci_low, ci_high, rank, n_prompts)."""
    return read_published(
        "SELECT scenario, model, score, ci_low, ci_high, rank, n_prompts FROM leaderboard.rankings "
        "WHERE pool = ? AND profile = 'default' AND method = ? AND list_contains(?, scenario)",
        [pool, method, ["all", *topics]], path=published)


ADHOC_CACHE = ("adhoc", "scores.duckdb")
COPIED_TABLES = ("responses.responses", "responses.prompt_sample")


def adhoc_cache(published: Path | None = None) -> WarehouseFile:
    """A DuckDB file of the CLI's own ($USL_HOME/adhoc/scores.duckdb) for ad hoc scoring: the responses it scores,
    copied from the published copy when that changes, with the response rows scoring cached there
    (scoring.response_embeddings: a new criterion then costs one criteria embedding and a matrix product, not a
    pass over every answer), its ad hoc profiles and their reward cache. The file Dagster writes is never opened,
    so this works while a materialization runs."""
    from usl_assets.scoring.cache import EMBEDDINGS, EMBEDDINGS_TABLE, ensure_tables

    published = published or default_published()
    if not published.exists():
        raise UslConfigError(f"no published warehouse at {published}: materialize the leaderboards first (usl run)")
    cache = WarehouseFile(usl_home().joinpath(*ADHOC_CACHE))
    version = f"{published.stat().st_mtime_ns}:{published.stat().st_size}"
    ensure_tables(cache, (EMBEDDINGS,))
    with cache.connect() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS main.copied_from (published VARCHAR)")
        if conn.execute("SELECT published FROM main.copied_from").fetchall() != [(version,)]:
            conn.execute("ATTACH '" + str(published).replace("'", "''") + "' AS published (READ_ONLY)")
            conn.execute("BEGIN TRANSACTION")
            for table in COPIED_TABLES:
                schema, _ = table.split(".")
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
                conn.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM published.{table}")
            if conn.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = 'published' AND "
                            "schema_name || '.' || table_name = ?", [EMBEDDINGS_TABLE]).fetchone()[0]:
                conn.execute(f"INSERT OR IGNORE INTO {EMBEDDINGS_TABLE} BY NAME "
                             f"SELECT checkpoint_id, input_hash, embedding FROM published.{EMBEDDINGS_TABLE}")
            conn.execute("DELETE FROM main.copied_from")
            conn.execute("INSERT INTO main.copied_from VALUES (?)", [version])
            conn.execute("COMMIT")
            conn.execute("DETACH published")
    return cache


def published_unranked(pool: str, published: Path | None = None) -> pd.DataFrame:
    """leaderboard.unranked_models of the pool (models below the minimum coverage); empty for an older copy."""
    try:
        return read_published("SELECT model, reason FROM leaderboard.unranked_models WHERE pool = ? ORDER BY model",
                              [pool], path=published)
    except duckdb.CatalogException:
        return pd.DataFrame(columns=["model", "reason"])


def adhoc_unranked(rewards: pd.DataFrame, min_coverage: float = ranking.MIN_COVERAGE) -> pd.DataFrame:
    """The ad hoc rewards' models below the minimum coverage of the prompts scored, as the rankings asset does."""
    prompts = rewards["prompt_id"].nunique()
    scored = rewards.groupby("model")["prompt_id"].nunique()
    coverage = pd.DataFrame({"pool": "", "model": scored.index, "scored_prompts": scored.to_numpy(),
                             "sampled_prompts": prompts, "coverage": scored.to_numpy() / max(prompts, 1)})
    return ranking.unranked_models(coverage, min_coverage)[["model", "reason"]]


def render_unranked(unranked: pd.DataFrame) -> str:
    return "\n".join(["not ranked (too few of the pool's scored prompts):"]
                     + [f"  {row.model}: {row.reason}" for row in unranked.itertuples()])


def usl_soft_temperature(published: Path | None = None) -> float:
    """usl_soft's k for the published CRM (crm.calibration); 1 when the evaluation has not run."""
    try:
        found = read_published("SELECT temperature FROM crm.calibration LIMIT 1", path=published)
    except duckdb.Error:
        return 1.0
    return float(found["temperature"].iloc[0]) if len(found) else 1.0


def scope_of(topics: list[str]) -> str:
    """What a leaderboard ranks by: 'all' prompts, one topic, or several topics pooled ('Code + Math')."""
    return "all" if not topics else topics[0] if len(topics) == 1 else " + ".join(topics)


def slices_of(topics: list[str]) -> dict[str, list[str]]:
    """The slices a leaderboard ranks: 'all', each topic, and the pooled topics when there are several
    (name -> the scenarios or scenario groups whose prompts it holds; [] for every prompt)."""
    slices = {"all": [], **{topic: [topic] for topic in topics}}
    if len(topics) > 1:
        slices[scope_of(topics)] = list(topics)
    return slices


def adhoc_rankings(rewards: pd.DataFrame, groups: pd.DataFrame, topics: list[str], method: str,
                   reference_model: str | None, settings: ranking.BootstrapSettings,
                   temperature: float = 1.0, slices: dict[str, list[str]] | None = None) -> pd.DataFrame:
    """Rank rewards (pool, prompt_id, model, scenario, reward, length_chars) overall, per topic and over the pooled
    topics (`slices`, default slices_of(topics)), the way the leaderboard assets do (ranking.score_method)."""
    rewards = rewards.drop(columns="scenario_group", errors="ignore").merge(groups, on="prompt_id", how="left")
    if method != "bradley_terry":
        if reference_model is None or reference_model not in set(rewards["model"]):
            raise UslConfigError(f"the pool's reference model {reference_model!r} has no rewards: use "
                                 "--method bradley_terry")
        comparisons = reference_wins_from_rewards(rewards, reference_model)
    else:
        comparisons = pairs_from_rewards(rewards)
    parts = []
    for name, members in (slices_of(topics) if slices is None else slices).items():
        rows = comparisons if not members else comparisons[comparisons["scenario"].isin(members)
                                                             | comparisons["scenario_group"].isin(members)]
        rng = ranking.slice_rng(settings, "adhoc", method, name)
        scores = ranking.score_method(method, rows, settings, rng, temperature)
        parts.append(ranking.with_ranks(scores).assign(scenario=name))
    return pd.concat(parts, ignore_index=True)


def columns_of(topics: list[str]) -> list[str]:
    """The score columns of a leaderboard: overall, each topic, then the pooled topics when there are several."""
    return ["overall", *topics, *([scope_of(topics)] if len(topics) > 1 else [])]


def wide_table(long: pd.DataFrame, topics: list[str], scope: str = "all") -> pd.DataFrame:
    """One row per model: rank and prompt count of the `scope` it is ranked by, then the overall score with its
    interval, each topic's and the pooled topics'; best first."""
    ranked = long[long["scenario"] == scope].set_index("model")
    wide = pd.DataFrame({"rank": ranked["rank"], "n_prompts": ranked["n_prompts"]})
    for column in columns_of(topics):
        part = long[long["scenario"] == ("all" if column == "overall" else column)].set_index("model")
        wide[column] = part["score"]
        wide[f"{column}_low"] = part["ci_low"]
        wide[f"{column}_high"] = part["ci_high"]
    order = "overall" if scope == "all" else scope
    wide = wide.sort_values(["rank", order], ascending=[True, False])
    return wide.reset_index(names="model")


MIN_TOPIC_PROMPTS = 30  # fewer prompts than this rarely separate more than the best from the worst


def scope_note(long: pd.DataFrame, scope: str) -> str:
    """One line on what the ranking is over; it says so when the scope is too small to separate the models (fewer
    than MIN_TOPIC_PROMPTS prompts, or most models sharing one rank)."""
    ranked = long[long["scenario"] == scope]
    if ranked.empty:
        return ""
    prompts, models = int(ranked["n_prompts"].max()), len(ranked)
    shared = int(ranked["rank"].value_counts().max())
    line = f"ranked by {'every prompt' if scope == 'all' else scope}: {prompts} prompts, {models} models"
    if scope != "all" and (prompts < MIN_TOPIC_PROMPTS or shared > models / 2):
        line += (f"; too few prompts to separate most models ({shared} of {models} share one rank): read the "
                 "overall column too")
    return line


def render(wide: pd.DataFrame, topics: list[str], output_format: str, reference: str | None = None,
           about: dict | None = None, note: str = "") -> str:
    """The table as text (shared ranks marked `=`, the reference model named as such, the rank rule under it),
    csv or json (one object: `about`'s keys, then `models`, the rows). `reference`: the pool's reference model where
    the method scores against it, else None."""
    if output_format == "csv":
        return wide.to_csv(index=False, float_format="%.2f")
    if output_format == "json":
        rows = json.loads(wide.to_json(orient="records", double_precision=4))
        return json.dumps({**(about or {}), "models": rows}, indent=2, ensure_ascii=False)
    shared = wide["rank"].map(wide["rank"].value_counts()) > 1
    shown = pd.DataFrame({"rank": [f"{rank}{'=' if tie else ''}" for rank, tie in zip(wide["rank"], shared)],
                          "model": [f"{model} (reference)" if model == reference else model
                                    for model in wide["model"]]})
    for column in columns_of(topics):
        shown[column] = [_with_interval(s, lo, hi) for s, lo, hi in
                         zip(wide[column], wide[f"{column}_low"], wide[f"{column}_high"])]
    legend = RANK_RULE + (f" {reference} is the reference every other model is compared with: it scores 50 by "
                          "construction." if reference else "")
    return "\n".join([shown.to_string(index=False), *([note] if note else []), legend])


def _with_interval(score: float, low: float, high: float) -> str:
    return "—" if pd.isna(score) else f"{score:.1f} [{low:.1f}, {high:.1f}]"


# (pool, criteria) -> rewards DataFrame[pool, prompt_id, model, scenario, reward] of the whole pool
ScoreCriteria = Callable[[str, list[str]], pd.DataFrame]


def score_in_warehouse(pool: str, criteria: list[str]) -> pd.DataFrame:
    """The CLI's scoring: scoring's score_adhoc_profile over the published responses, caching in the ad hoc
    cache (never the file Dagster writes)."""
    from usl_assets.scoring.score import score_adhoc_profile

    return score_adhoc_profile(adhoc_cache(), usl_home(), pool, criteria, progress=True)


@dataclass
class Leaderboard:
    long: pd.DataFrame  # scenario ('all' or a topic), model, score, ci_low, ci_high, rank, n_prompts
    topics: list[str]
    scoring_seconds: float = 0.0
    left_out: int = 0  # responses whose reward was not finite, left out of the ranking
    rewards: pd.DataFrame | None = None  # the ad hoc rewards ranked (None under the default criteria)
    unranked: pd.DataFrame | None = None  # models left out for too little coverage, with the reason
    reference: str | None = None  # the pool's reference model (the usl methods score every model against it)
    checkpoint_id: str | None = None  # the CRM that scored the rewards ranked
    scope: str = "all"  # what the rank is over: 'all', the one topic, or the pooled topics (scope_of)

    @property
    def wide(self) -> pd.DataFrame:
        return wide_table(self.long, self.topics, self.scope)

    @property
    def note(self) -> str:
        return scope_note(self.long, self.scope)


def published_rewards(pool: str, published: Path | None = None) -> pd.DataFrame:
    """The default profile's rewards of the pool's ranked models (what leaderboard.rankings ranks)."""
    return read_published(
        "SELECT pool, prompt_id, model, scenario, reward, length_chars FROM leaderboard.response_scores "
        "WHERE pool = ? AND profile = 'default' AND model NOT IN (SELECT model FROM leaderboard.unranked_models "
        "WHERE pool = ?)", [pool, pool], path=published)


def build_leaderboard(pool: str, topics: list[str], criteria: list[str], method: str,
                      settings: ranking.BootstrapSettings, score: ScoreCriteria = score_in_warehouse,
                      published: Path | None = None, rank_by_topics: bool = True) -> Leaderboard:
    """A pool's leaderboard overall and per topic: the default profile's published rankings, or the user's
    criteria scored by `score` over the whole pool (the overall column ranks every prompt, as the published one
    does) and ranked as the assets rank. With topics the rank is over their prompts (several pooled; the
    published warehouse ranks each topic, the pooled ones are ranked here from its rewards); rank_by_topics False
    keeps the overall rank with the topics as columns. `usl leaderboard` and the web page both call this."""
    check_criteria_text(criteria)
    topics = list(dict.fromkeys(topics))
    scope = scope_of(topics) if rank_by_topics else "all"
    known = pool_topics(pool, published)
    check_topics(topics, known, pool)
    references = read_published("SELECT reference_model FROM leaderboard.reference_models WHERE pool = ?",
                                [pool], path=published)["reference_model"]
    reference = references.iloc[0] if len(references) else None
    if not criteria:
        long = published_rankings(pool, topics, method, published)
        if long.empty:
            raise UslConfigError(f"pool {pool} has no {method} ranking under the default profile "
                                 "(is its reference model loaded? try --method bradley_terry)")
        if len(topics) > 1:  # the pooled topics: ranked from the published rewards the way the assets rank
            pooled = adhoc_rankings(published_rewards(pool, published), prompt_groups(pool, published), topics,
                                    method, reference, settings,
                                    usl_soft_temperature(published), slices={scope_of(topics): topics})
            long = pd.concat([long, pooled[long.columns]], ignore_index=True)
        checkpoints = read_published("SELECT DISTINCT checkpoint_id FROM leaderboard.response_scores WHERE pool = ? "
                                     "AND profile = 'default'", [pool], path=published)["checkpoint_id"].dropna()
        return Leaderboard(long, topics, unranked=published_unranked(pool, published), reference=reference,
                           checkpoint_id=", ".join(sorted(checkpoints)) or None, scope=scope)
    if method not in METHODS:
        raise UslConfigError(f"method {method!r} ranks only the published default profile; your own criteria are "
                             f"ranked by {' or '.join(METHODS)}")
    scoring_started = time.perf_counter()
    rewards = score(pool, list(criteria))
    scoring_seconds = time.perf_counter() - scoring_started
    unscored = ~np.isfinite(rewards["reward"].to_numpy(dtype=float))
    rewards = rewards[~unscored]
    unranked = adhoc_unranked(rewards)
    ranked = rewards[~rewards["model"].isin(unranked["model"])]
    long = adhoc_rankings(ranked, prompt_groups(pool, published), topics, method, reference, settings,
                          usl_soft_temperature(published))
    return Leaderboard(long, topics, scoring_seconds, int(unscored.sum()), rewards, unranked, reference,
                       rewards.attrs.get("checkpoint_id"), scope)


def explain_criteria(criteria: list[str]) -> str:
    """--explain: how the default CRM reads the criteria (crm/reading.py), or what the default profile is. Loaded
    only when asked for, from the scorer the criteria were just scored with (scoring keeps it in memory)."""
    if not criteria:
        return ("how the CRM reads the criteria: no --criteria given, so each prompt is ranked under its own "
                "scenario's default criteria (scoring.criteria_profiles, criteria_profiles.yaml): nothing of yours "
                "to explain; add --criteria to see how the CRM reads them")
    from usl_assets.crm.reading import read_criteria, render_reading
    from usl_assets.scoring.score import load_scorer

    return render_reading(read_criteria(load_scorer(usl_home()), criteria, usl_home() / ADHOC_CACHE[0]))


def about(args: argparse.Namespace, board: Leaderboard) -> dict:
    """What a JSON leaderboard says of itself: pool, method, criteria (null: each scenario's default criteria), the
    CRM checkpoint, the reference model, the rank rule, and each column's prompt count (`all` and the topics)."""
    prompts = board.long.groupby("scenario")["n_prompts"].max()
    return {"pool": args.pool, "method": args.method, "criteria": list(args.criteria) or None,
            "checkpoint_id": board.checkpoint_id, "reference_model": board.reference, "rank_rule": RANK_RULE,
            "ranked_by": board.scope,
            "topics": [{"topic": topic, "n_prompts": int(prompts[topic]) if topic in prompts else 0}
                       for topic in slices_of(board.topics)]}


def show_leaderboard(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    settings = ranking.BootstrapSettings(usl_rounds=args.bootstrap_rounds, bt_rounds=args.bootstrap_rounds)
    board = build_leaderboard(args.pool, args.topic, args.criteria, args.method, settings)
    why = None
    if isinstance(getattr(args, "explain", None), str):  # before any output: a bad MODEL is one line, no table
        from usl_assets.leaderboards.explain import explain_model

        why = explain_model(args.explain, board, args.pool, args.criteria)
    if board.left_out:
        print(f"usl: {board.left_out} of {board.left_out + len(board.rewards)} responses got no finite reward and "
              "are left out", file=sys.stderr)
    reference = board.reference if args.method in ranking.PER_MODEL_METHODS else None  # scored against it
    print(render(board.wide, board.topics, args.format, reference, about(args, board), board.note))
    if len(board.unranked):
        print(render_unranked(board.unranked), file=sys.stdout if args.format == "table" else sys.stderr)
    if getattr(args, "explain", False):  # csv and json keep stdout for the table alone
        print(explain_criteria(args.criteria), file=sys.stdout if args.format == "table" else sys.stderr)
    if why:
        print(why, file=sys.stdout if args.format == "table" else sys.stderr)
    elapsed = time.perf_counter() - started
    profile = f"{len(args.criteria)} criteria of yours" if args.criteria else "default criteria"
    print(f"latency: {elapsed:.2f} s (scoring {board.scoring_seconds:.2f} s; {profile}; {args.method})",
          file=sys.stdout if args.format == "table" else sys.stderr)
    return 0

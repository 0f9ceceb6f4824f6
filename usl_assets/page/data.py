"""What the page shows and how it scores, over the published warehouse only (never the file Dagster writes).

At start the page reads the published copy once: the pools, their topics and methods, the named profiles, and an
in-memory DuckDB copy of the responses with the scoring caches of the current CRM checkpoint (reward cache and,
for a factorized CRM, response embeddings). New criteria are scored by scoring's adhoc_rewards on that copy, so
they cost one criteria pass plus the head over cached rows; what is scored stays in the page's memory, never in a
warehouse file. Leaderboards come from build_leaderboard, the function `usl leaderboard` calls.

Several users at once: scoring (one CRM, one in-memory database) runs one request at a time under a lock; a
finished leaderboard is kept (LRU) so the same request again answers at once; ranking itself is plain numpy.
"""

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from usl_assets.crm.reading import CriteriaReading, is_readable, read_criteria, reference_scale
from usl_assets.leaderboards import ranking
from usl_assets.leaderboards.commands import (Leaderboard, build_leaderboard, pool_topics, read_published,
                                              usl_soft_temperature)
from usl_assets.leaderboards.explain import Breakdown, breakdown_of, reward_terms
from usl_assets.responses.pools import content_hash
from usl_assets.scoring import cache
from usl_assets.scoring import score as scoring
from usl_assets.scoring.profiles import criteria_hash, normalize_criteria
from usl_assets.settings import UslConfigError

MAX_KEPT_LEADERBOARDS = 256
MAX_EXAMPLE_PROMPTS = 200


class Cancelled(Exception):
    """The user pressed Cancel; what was scored before stays cached."""


@dataclass
class CustomResult:
    board: Leaderboard
    default: pd.DataFrame  # the default profile's ranking (model, rank) over the same prompts, under the same method
    cached: bool  # answered from the page's kept leaderboards


def _published_tables(path: Path) -> set[str]:
    tables = read_published("SELECT table_schema || '.' || table_name AS name FROM information_schema.tables",
                            path=path)
    return set(tables["name"])


def mirror_published(published: Path, checkpoint_id: str | None) -> duckdb.DuckDBPyConnection:
    """An in-memory database with the published responses, prompt sample, criteria profiles and the scoring
    caches of one checkpoint, in the tables scoring's functions use."""
    tables = _published_tables(published)
    if "responses.responses" not in tables:
        raise UslConfigError(f"{published} has no responses.responses: materialize the pipeline first (usl run)")
    conn = duckdb.connect(":memory:")
    conn.execute("CREATE SCHEMA responses")
    cache.ensure_tables(conn, [cache.CACHE, cache.EMBEDDINGS, scoring.PROFILES])
    conn.execute("ATTACH ? AS pub (READ_ONLY)", [str(published)])
    try:
        conn.execute("CREATE TABLE responses.responses AS SELECT pool, prompt_id, model, prompt, response, "
                     "scenario, scenario_group, length_chars FROM pub.responses.responses")
        if "responses.prompt_sample" in tables:
            conn.execute("CREATE TABLE responses.prompt_sample AS SELECT * FROM pub.responses.prompt_sample")
        if scoring.PROFILES_TABLE in tables:
            conn.execute(f"INSERT INTO {scoring.PROFILES_TABLE} SELECT profile, kind, scenario, criteria, "
                         f"criteria_hash FROM pub.{scoring.PROFILES_TABLE}")
        for table in (cache.CACHE_TABLE, cache.EMBEDDINGS_TABLE):
            if checkpoint_id and table in tables:
                conn.execute(f"INSERT INTO {table} SELECT * FROM pub.{table} WHERE checkpoint_id = ?",
                             [checkpoint_id])
    finally:
        conn.execute("DETACH pub")
    return conn


class PageData:
    def __init__(self, published: Path, usl_home_root: Path, checkpoint: str = "",
                 settings: ranking.BootstrapSettings | None = None):
        if not published.exists():
            raise UslConfigError(f"no published warehouse at {published}: materialize the leaderboards first "
                                 "(usl run)")
        self.published = published
        self.settings = settings or ranking.BootstrapSettings()  # the rankings asset's defaults
        self.scorer, self.crm_problem = None, ""
        try:
            self.scorer = scoring.load_scorer(usl_home_root, checkpoint)  # loaded once, for every request
        except UslConfigError as error:
            self.crm_problem = f"custom criteria are unavailable: {error}"
        self.version = self.scorer.checkpoint_id if self.scorer else "no CRM"
        if is_readable(self.scorer):
            reference_scale(self.scorer)  # the criteria reading's references, once, before the first request
        self._db = mirror_published(published, self.scorer.checkpoint_id if self.scorer else None)
        self._scoring_lock = threading.Lock()
        self._kept: OrderedDict[tuple, Leaderboard] = OrderedDict()
        self._kept_lock = threading.Lock()
        rankings = read_published("SELECT DISTINCT pool, method FROM leaderboard.rankings "
                                  "WHERE profile = 'default' ORDER BY pool, method", path=published)
        self.pools = sorted(set(rankings["pool"]))
        if not self.pools:
            raise UslConfigError(f"{published} has no default leaderboard yet: materialize the leaderboards")
        self.methods = {pool: list(part["method"]) for pool, part in rankings.groupby("pool")}
        self.topics = {pool: pool_topics(pool, published) for pool in self.pools}
        self.profiles = self._named_profiles()
        self.temperature = usl_soft_temperature(published)  # usl_soft's k: a reward gap d wins with σ(d/k)
        self.validity = (read_published("SELECT * FROM leaderboard.external_validity", path=published)
                         if "leaderboard.external_validity" in _published_tables(published) else pd.DataFrame())

    # --- what there is -----------------------------------------------------------------------------------------

    def groups(self, pool: str) -> list[str]:
        return sorted(set(self.topics[pool]["scenario_group"].dropna()))

    def scenarios_by_group(self, pool: str) -> dict[str, list[str]]:
        frame = self.topics[pool].dropna()
        return {g: sorted(part["scenario"]) for g, part in frame.groupby("scenario_group", sort=True)}

    def topic_names(self, pool: str) -> list[str]:
        return [*self.groups(pool), *sorted(set(self.topics[pool]["scenario"].dropna()))]

    def models(self, pool: str) -> list[str]:
        return [row[0] for row in self._query(
            "SELECT DISTINCT model FROM responses.responses WHERE pool = ? ORDER BY model", [pool]).fetchall()]

    def _named_profiles(self) -> dict[str, list[str]]:
        rows = self._query(f"SELECT profile, criteria FROM {scoring.PROFILES_TABLE} WHERE kind = 'named' "
                           "ORDER BY profile").fetchall()
        return {name: list(criteria) for name, criteria in rows}

    def _query(self, sql: str, params: list | None = None):
        cursor = self._db.cursor()  # one cursor per call: DuckDB connections are not shared across threads
        return cursor.execute(sql, params or [])

    # --- leaderboards --------------------------------------------------------------------------------------------

    def default_leaderboard(self, pool: str, method: str) -> Leaderboard:
        """The published default ranking with a column per scenario group."""
        return self._kept_or(("default", pool, method), lambda: build_leaderboard(
            pool, self.groups(pool), [], method, self.settings, published=self.published,
            rank_by_topics=False))[0]

    def default_over(self, pool: str, topics: list[str], method: str) -> Leaderboard:
        """The default criteria's ranking over the topics' prompts (the custom table's "vs default")."""
        if not topics:
            return self.default_leaderboard(pool, method)
        return self._kept_or(("default", pool, method, tuple(topics)), lambda: build_leaderboard(
            pool, topics, [], method, self.settings, published=self.published))[0]

    def custom_leaderboard(self, pool: str, topics: list[str], criteria: list[str], method: str,
                           progress: bool = False, log: Callable[[str], None] | None = None) -> CustomResult:
        if self.scorer is None:
            raise UslConfigError(self.crm_problem)

        def score(pool_name: str, lines: list[str]) -> pd.DataFrame:
            with self._scoring_lock:
                cursor = self._db.cursor()
                try:
                    return scoring.adhoc_rewards(cursor, self.scorer, pool_name, lines, progress=progress, log=log)
                finally:
                    cursor.close()

        key = ("custom", pool, method, tuple(topics), criteria_hash(criteria))
        board, cached = self._kept_or(key, lambda: build_leaderboard(
            pool, topics, criteria, method, self.settings, score=score, published=self.published))
        default = self.default_over(pool, topics, method) if method in self.methods[pool] else None
        ranks = (default.long[default.long["scenario"] == board.scope][["model", "rank"]] if default is not None
                 else pd.DataFrame(columns=["model", "rank"]))
        return CustomResult(board, ranks, cached)

    def read_criteria(self, criteria: list[str]) -> CriteriaReading:
        """How the page's CRM reads the criteria (crm/reading.py); its encoder is shared with scoring, so the lock."""
        if self.scorer is None:
            raise UslConfigError(self.crm_problem)
        with self._scoring_lock:
            return read_criteria(self.scorer, criteria)

    def explain(self, model: str, board: Leaderboard, pool: str, criteria: list[str]) -> Breakdown:
        """The "Why?" of one ranked model: leaderboards/explain.breakdown_of, the function `usl leaderboard --explain
        MODEL` calls, over this page's copy (its cached response rows, its scenario default criteria, its CRM)."""
        if self.scorer is None:
            raise UslConfigError(self.crm_problem)

        def defaults() -> pd.DataFrame:
            return self._query(f"SELECT scenario, criteria FROM {scoring.PROFILES_TABLE} "
                               "WHERE kind = 'scenario_default'").df()

        with self._scoring_lock:  # the scorer's encoder and the in-memory copy, as scoring uses them
            cursor = self._db.cursor()
            try:
                return breakdown_of(model, board, pool, criteria, self.scorer, cursor, defaults, self.temperature)
            finally:
                cursor.close()

    def _kept_or(self, key: tuple, build: Callable[[], Leaderboard]) -> tuple[Leaderboard, bool]:
        with self._kept_lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key], True
        board = build()
        with self._kept_lock:
            self._kept[key] = board
            while len(self._kept) > MAX_KEPT_LEADERBOARDS:
                self._kept.popitem(last=False)
        return board, False

    # --- two models side by side -----------------------------------------------------------------------------

    def example_prompts(self, pool: str, topic: str | None) -> list[tuple[str, str]]:
        """(prompt_id, prompt) of the pool's sampled prompts, in a topic (group or scenario) if given."""
        where, params = "r.pool = ?", [pool]
        if topic:
            where, params = where + " AND (r.scenario = ? OR r.scenario_group = ?)", [pool, topic, topic]
        sampled = ("JOIN responses.prompt_sample s ON s.pool = r.pool AND s.prompt_id = r.prompt_id AND s.sampled"
                   if self._has_table("responses.prompt_sample") else "")
        return self._query(f"""
            SELECT r.prompt_id, any_value(r.prompt) FROM responses.responses r {sampled} WHERE {where}
            GROUP BY r.prompt_id ORDER BY TRY_CAST(r.prompt_id AS BIGINT) NULLS LAST, r.prompt_id
            LIMIT {MAX_EXAMPLE_PROMPTS}""", params).fetchall()

    def _has_table(self, table: str) -> bool:
        return scoring.table_exists(self._db.cursor(), table)

    def compare(self, pool: str, prompt_id: str, models: list[str], criteria: list[str]) -> pd.DataFrame:
        """model, scenario, prompt, response, reward, criteria of each model's response to one prompt, scored under
        the user's criteria (or, when none, the prompt's scenario default profile) the way leaderboards score."""
        if self.scorer is None:
            raise UslConfigError(self.crm_problem)
        rows = self._query("SELECT model, scenario, prompt, response FROM responses.responses "
                           "WHERE pool = ? AND prompt_id = ? AND list_contains(?, model)",
                           [pool, prompt_id, models]).df()
        missing = [m for m in models if m not in set(rows["model"])]
        if missing:
            raise UslConfigError(f"{', '.join(missing)} did not answer prompt {prompt_id} in {pool}")
        if not criteria:
            scenario = rows["scenario"].iloc[0]
            found = self._query(f"SELECT criteria FROM {scoring.PROFILES_TABLE} WHERE profile = ?",
                                [f"default:{scenario}"]).fetchall()
            if not found:
                raise UslConfigError(f"scenario {scenario} has no default criteria: type criteria of yours")
            criteria = list(found[0][0])
        criteria = list(normalize_criteria(criteria))
        rows = rows.assign(input_hash=[content_hash(p, r) for p, r in zip(rows["prompt"], rows["response"])],
                           criteria_hash=criteria_hash(criteria), criteria=[list(criteria)] * len(rows))
        with self._scoring_lock:
            cursor = self._db.cursor()
            try:
                rewards, _ = cache.rewards_for(cursor, self.scorer, rows)
            finally:
                cursor.close()
        scored = rows.merge(rewards, on=["criteria_hash", "input_hash"], how="left")
        scored = scored.set_index("model").loc[models].reset_index()
        scored.attrs["criteria"] = criteria
        if getattr(self.scorer, "architecture", None) == "linear":  # a sum of readable terms (leaderboards/explain)
            with self._scoring_lock:
                response_rows = self.scorer.embed_responses(list(scored["prompt"]), list(scored["response"]))
                vector = self.scorer.embed_criteria([tuple(criteria)])
            scored.attrs["terms"] = reward_terms(self.scorer.weights, response_rows, vector)
        return scored

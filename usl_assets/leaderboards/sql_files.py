"""The SQL models of `dbt_like_sql/` as files: each `<name>.sql` is one SELECT, read with its header comments and
its dbt-style directives (`-- unique: …`, `-- not_null: …`), the tables it reads found by sqlglot. No Dagster here:
the command line and the page run the same SELECTs on ad hoc rewards (adhoc_comparisons.py); sql_models.py turns
each model into an asset."""

import hashlib
import importlib.resources
import re
from dataclasses import dataclass, field
from importlib.resources.abc import Traversable
from pathlib import Path, PurePath

import sqlglot
from sqlglot import exp

SQL_FOLDER = "dbt_like_sql"  # at the top of the checkout; inside the installed package (pyproject.toml maps it)
SCHEMA = "leaderboard"

# Warehouse tables the models may read, and the asset that writes each (other stages' and this stage's Python
# assets). A model reading a table that is neither here nor another model is an error at load time.
SOURCE_TABLE_ASSETS = {
    "responses.responses": "model_responses",
    "responses.prompt_sample": "prompt_sample",
    "scoring.response_rewards": "response_rewards",
    "scoring.criteria_profiles": "criteria_profiles",
    "analysis.scenario_contradiction": "preference_analysis",
    "crm.evaluation_by_scenario": "crm_evaluation",
    "leaderboard.reference_models": "reference_models",
}

_DIRECTIVE = re.compile(r"^--\s*(unique|not_null)\s*:\s*(.+)$", re.IGNORECASE)


@dataclass(frozen=True)
class SqlModel:
    name: str  # file stem = table name in schema `leaderboard` = asset key
    sql: str  # the SELECT
    reads: tuple[str, ...]  # schema.table of every table the SELECT reads (CTEs excluded)
    columns: tuple[str, ...]  # output columns, in order
    description: str = ""
    unique: tuple[str, ...] = field(default=())
    not_null: tuple[str, ...] = field(default=())

    @property
    def table(self) -> str:
        return f"{SCHEMA}.{self.name}"

    @property
    def code_version(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()[:12]


def source_tables(sql: str) -> tuple[str, ...]:
    """schema.table of each table the statement reads; CTE names are not tables."""
    tree = sqlglot.parse_one(sql, dialect="duckdb")
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    found = set()
    for table in tree.find_all(exp.Table):
        if not table.db and table.name in ctes:
            continue
        if not table.db:
            raise ValueError(f"table {table.name!r} needs its schema (schema.table) in: {sql[:80]}…")
        found.add(f"{table.db}.{table.name}")
    return tuple(sorted(found))


def sql_dir() -> Traversable:
    """The project's SQL models: the package data `usl_assets/dbt_like_sql/` of an installed wheel, else the
    checkout's top-level `dbt_like_sql/` (a source checkout or an editable install, which maps no data folder)."""
    packaged = importlib.resources.files("usl_assets") / SQL_FOLDER
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / SQL_FOLDER


def parse_model(path: Traversable) -> SqlModel:
    stem = PurePath(path.name).stem
    if not stem.isidentifier():
        raise ValueError(f"{path.name}: a model's file name must be a SQL identifier (it names the table)")
    sql = path.read_text(encoding="utf-8").strip().rstrip(";")
    tree = sqlglot.parse_one(sql, dialect="duckdb")
    if not isinstance(tree, exp.Query):
        raise ValueError(f"{path.name}: a model is one SELECT statement")
    comments, unique, not_null = [], (), ()
    for line in sql.splitlines():
        line = line.strip()
        if not line.startswith("--"):
            break
        directive = _DIRECTIVE.match(line)
        if directive is None:
            comments.append(line.lstrip("-").strip())
            continue
        columns = tuple(c.strip() for c in directive.group(2).split(",") if c.strip())
        if directive.group(1).lower() == "unique":
            unique = columns
        else:
            not_null = columns
    return SqlModel(name=stem, sql=sql, reads=source_tables(sql), columns=tuple(tree.named_selects),
                    description=" ".join(comments), unique=unique, not_null=not_null)


def load_models(folder: Traversable | None = None) -> list[SqlModel]:
    """Every `*.sql` of `folder` (default: sql_dir()); a folder without one is an error, never zero assets."""
    folder = sql_dir() if folder is None else folder
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".sql") and f.is_file()),
                   key=lambda f: f.name) if folder.is_dir() else []
    if not files:
        raise FileNotFoundError(f"no SQL model (*.sql) in {folder}: the leaderboards are built from {SQL_FOLDER}/, "
                                f"package data usl_assets/{SQL_FOLDER}/ of an installed wheel, or the checkout's "
                                f"top-level {SQL_FOLDER}/ beside usl_assets/")
    models = [parse_model(path) for path in files]
    names = {model.name for model in models}
    for model in models:
        for table in model.reads:
            schema, _, name = table.partition(".")
            if table not in SOURCE_TABLE_ASSETS and not (schema == SCHEMA and name in names):
                raise ValueError(f"{model.name}.sql reads {table}, which no asset writes "
                                 f"(add it to SOURCE_TABLE_ASSETS or write dbt_like_sql/{name}.sql)")
    return models

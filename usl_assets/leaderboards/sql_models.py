"""A dbt-like factory: every `dbt_like_sql/<name>.sql` is one SELECT = one table `leaderboard.<name>` = one asset.

Dependencies are read from the SQL itself with sqlglot: each table a model reads is either another model
(`leaderboard.<other>`) or a warehouse table some asset writes (SOURCE_TABLE_ASSETS). Header comments of the
file become the asset's description, and two dbt-style tests become an asset check:

    -- unique: pool, model            (no two rows share these columns)
    -- not_null: score, model         (these columns are never NULL)

Each run replaces the table (CREATE OR REPLACE); column lineage (sqlglot's lineage over the upstream tables'
real schemas) and the column schema are attached to the materialization.
"""

import hashlib
import importlib.resources
import re
from dataclasses import dataclass, field
from importlib.resources.abc import Traversable
from pathlib import Path, PurePath

import dagster as dg
import sqlglot
from sqlglot import exp
from sqlglot.lineage import lineage

from usl_assets.resources import WAREHOUSE_POOL, Warehouse

SQL_FOLDER = "dbt_like_sql"  # at the top of the checkout; inside the installed package (pyproject.toml maps it)
SCHEMA = "leaderboard"
GROUP = "leaderboards"

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


def asset_key_of(table: str, model_names: set[str]) -> dg.AssetKey:
    schema, _, name = table.partition(".")
    if schema == SCHEMA and name in model_names:
        return dg.AssetKey(name)
    return dg.AssetKey(SOURCE_TABLE_ASSETS[table])


def missing_tables(warehouse: Warehouse, tables: tuple[str, ...]) -> list[str]:
    return [table for table in tables if not warehouse.table_exists(table)]


def run_model(warehouse: Warehouse, model: SqlModel) -> int:
    """CREATE OR REPLACE the model's table from its SELECT; returns the row count."""
    with warehouse.transaction() as writer:
        return writer.replace_table(f"{SCHEMA}.{model.name}", select=model.sql)


def warehouse_schema(warehouse: Warehouse, tables: tuple[str, ...]) -> dict:
    """{schema: {table: {column: type}}} for sqlglot's lineage."""
    nested: dict = {}
    for table in tables:
        schema, _, name = table.partition(".")
        rows = warehouse.query(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position", [schema, name])
        nested.setdefault(schema, {})[name] = dict(zip(rows["column_name"], rows["data_type"]))
    return nested


def column_lineage(model: SqlModel, schema: dict, model_names: set[str]) -> dg.TableColumnLineage:
    """Each output column → the upstream (asset, column) pairs it is computed from."""
    deps_by_column = {}
    for column in model.columns:
        node = lineage(column, model.sql, schema=schema, dialect="duckdb")
        deps = set()
        for leaf in node.walk():
            if leaf.downstream or not isinstance(leaf.expression, exp.Table):
                continue
            table = f"{leaf.expression.db}.{leaf.expression.name}"
            deps.add((table, leaf.name.split(".")[-1]))
        deps_by_column[column] = [
            dg.TableColumnDep(asset_key=asset_key_of(table, model_names), column_name=name)
            for table, name in sorted(deps)
        ]
    return dg.TableColumnLineage(deps_by_column=deps_by_column)


def contract_violations(warehouse: Warehouse, model: SqlModel) -> dict[str, int]:
    """Rows breaking the model's `unique` and `not_null` declarations (0 everywhere = pass)."""
    found = {}
    if model.unique:
        keys = ", ".join(f'"{c}"' for c in model.unique)
        found["duplicate_keys"] = int(warehouse.query(
            f'SELECT count(*) AS n FROM (SELECT {keys} FROM "{SCHEMA}"."{model.name}" '
            f"GROUP BY {keys} HAVING count(*) > 1)")["n"].iloc[0])
    for column in model.not_null:
        found[f"null_{column}"] = int(warehouse.query(
            f'SELECT count(*) AS n FROM "{SCHEMA}"."{model.name}" WHERE "{column}" IS NULL')["n"].iloc[0])
    return found


def build_asset(model: SqlModel, model_names: set[str]) -> dg.AssetsDefinition:
    @dg.asset(
        name=model.name,
        group_name=GROUP,
        deps=[asset_key_of(table, model_names) for table in model.reads],
        pool=WAREHOUSE_POOL,
        kinds={"duckdb", "sql"},
        code_version=model.code_version,
        description=model.description or f"SQL model dbt_like_sql/{model.name}.sql",
        metadata={"sql": dg.MetadataValue.md(f"```sql\n{model.sql}\n```"),
                  "dagster/table_name": f"{SCHEMA}.{model.name}"},
    )
    def sql_model_asset(context: dg.AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
        missing = missing_tables(warehouse, model.reads)
        if missing:
            raise dg.Failure(f"{model.name}.sql reads {', '.join(missing)}, not in the warehouse yet: "
                             "materialize the upstream assets first")
        rows = run_model(warehouse, model)
        context.log.info(f"{model.table}: {rows:,} rows from {', '.join(model.reads)}")
        lineage_meta = column_lineage(model, warehouse_schema(warehouse, model.reads), model_names)
        return dg.MaterializeResult(metadata={**warehouse.table_metadata(model.table),
                                              "dagster/column_lineage": lineage_meta})

    return sql_model_asset


def build_check(model: SqlModel) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=dg.AssetKey(model.name), name=f"{model.name}_contract", pool=WAREHOUSE_POOL,
                    description=f"unique ({', '.join(model.unique) or '-'}); not null "
                                f"({', '.join(model.not_null) or '-'}) as declared in {model.name}.sql")
    def contract_check(warehouse: Warehouse) -> dg.AssetCheckResult:
        violations = contract_violations(warehouse, model)
        return dg.AssetCheckResult(passed=not any(violations.values()),
                                   metadata={name: dg.MetadataValue.int(n) for name, n in violations.items()})

    return contract_check


def build_sql_models(
    folder: Traversable | None = None,
) -> tuple[list[dg.AssetsDefinition], list[dg.AssetChecksDefinition]]:
    models = load_models(folder)
    names = {model.name for model in models}
    assets = [build_asset(model, names) for model in models]
    checks = [build_check(model) for model in models if model.unique or model.not_null]
    return assets, checks

"""A dbt-like factory: every `dbt_like_sql/<name>.sql` is one SELECT = one table `leaderboard.<name>` = one asset.

Dependencies are read from the SQL itself with sqlglot: each table a model reads is either another model
(`leaderboard.<other>`) or a warehouse table some asset writes (SOURCE_TABLE_ASSETS). Header comments of the
file become the asset's description, and two dbt-style tests become an asset check:

    -- unique: pool, model            (no two rows share these columns)
    -- not_null: score, model         (these columns are never NULL)

The files are read by sql_files.py. Each run replaces the table (CREATE OR REPLACE); column lineage (sqlglot's lineage over the upstream tables'
real schemas) and the column schema are attached to the materialization.
"""

from importlib.resources.abc import Traversable

import dagster as dg
from sqlglot import exp
from sqlglot.lineage import lineage

from usl_assets.leaderboards.sql_files import SCHEMA, SOURCE_TABLE_ASSETS, SqlModel, load_models
from usl_assets.resources import WAREHOUSE_POOL, Warehouse

GROUP = "leaderboards"

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

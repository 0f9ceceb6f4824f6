"""Project-wide subcommands: `usl status` (what is materialized, row counts) and `usl run` (the whole graph)."""

import argparse

import dagster as dg

from usl_assets.resources import Warehouse
from usl_assets.settings import usl_home


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    status = subparsers.add_parser("status", help="what is materialized and the warehouse's row counts")
    status.set_defaults(handler=show_status)


def warehouse_tables(warehouse: Warehouse) -> list[tuple[str, str, int]]:
    """(schema, table, rows) for every table in the warehouse, in schema order."""
    if not warehouse.database_path().exists():
        return []
    with warehouse.connect(read_only=True) as conn:
        names = conn.execute(
            "SELECT schema_name, table_name, estimated_size FROM duckdb_tables() ORDER BY schema_name, table_name"
        ).fetchall()
        return [(s, t, conn.execute(f'SELECT count(*) FROM "{s}"."{t}"').fetchone()[0]) for s, t, _ in names]


def materialization_status(instance: dg.DagsterInstance) -> list[tuple[str, str]]:
    """(asset key, last materialization time or 'never') for every asset of the code location."""
    from usl_assets.definitions import defs

    rows = []
    for key in sorted(defs.resolve_asset_graph().get_all_asset_keys(), key=lambda k: k.to_user_string()):
        event = instance.get_latest_materialization_event(key)
        when = "never" if event is None else _format_time(event.timestamp)
        rows.append((key.to_user_string(), when))
    return rows


def _format_time(timestamp: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(timestamp, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def show_status(args: argparse.Namespace) -> int:
    home = usl_home()
    warehouse = Warehouse()
    print(f"USL_HOME: {home}")
    print(f"warehouse: {warehouse.database_path()}" + ("" if warehouse.database_path().exists() else " (not yet)"))
    for schema, table, rows in warehouse_tables(warehouse):
        print(f"  {schema}.{table:<40} {rows:>10,} rows")
    with dg.DagsterInstance.get() as instance:
        print(f"assets (Dagster instance {instance.root_directory}):")
        for key, when in materialization_status(instance):
            print(f"  {key:<42} {when}")
    return 0

"""Resources shared by every stage: the data folder, USL_HOME and the DuckDB warehouse.

Paths are resolved when a run asks for them, so one Definitions object serves every deployment; tests and
deployments override them by constructing the resources with explicit paths.
"""

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import duckdb
import pandas as pd

from usl_assets import warehouse_docs
from usl_assets.warehouse import WarehouseFile, Writer, published_path, split_table
from usl_assets.settings import UslConfigError, data_dir, usl_home

# Every asset that writes the warehouse declares pool=WAREHOUSE_POOL; dagster.yaml limits each pool to one step.
WAREHOUSE_POOL = "warehouse"


class DataDir(dg.ConfigurableResource):
    """The public data folder (USL_DATA_DIR unless `path` is set). Read-only: nothing is ever written here."""

    path: str = ""

    def root(self) -> Path:
        return data_dir(self.path)

    def file(self, relative: str) -> Path:
        found = self.root() / relative
        if not found.exists():
            raise UslConfigError(f"{found} is missing: USL_DATA_DIR must hold {relative} (see docs/data_sources.md)")
        return found


class UslHome(dg.ConfigurableResource):
    """Everything USL writes (USL_HOME unless `path` is set)."""

    path: str = ""

    def root(self) -> Path:
        return usl_home(self.path)

    def subdir(self, *parts: str) -> Path:
        folder = self.root().joinpath(*parts)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def models_dir(self) -> Path:
        return self.subdir("models")

    def inbox_dir(self, pool: str) -> Path:
        return self.subdir("inbox", pool)


class Warehouse(dg.ConfigurableResource):
    """The DuckDB warehouse, `$USL_HOME/warehouse.duckdb` unless `path` is set. One schema per stage.

    Every write is one short `transaction()` (usl_assets/warehouse.py); reads hold the file only inside
    `connect()`; analysts read the published copy (`publish()`). A file another process holds is waited for up
    to `lock_wait_s`.
    """

    path: str = ""
    lock_wait_s: float = 60.0

    def database_path(self) -> Path:
        return Path(self.path).expanduser().resolve() if self.path else usl_home() / "warehouse.duckdb"

    def published_path(self) -> Path:
        return published_path(self.database_path())

    def file(self) -> WarehouseFile:
        return WarehouseFile(self.database_path(), self.lock_wait_s)

    @contextlib.contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        with self.file().connect(read_only) as conn:
            yield conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Writer]:
        """One short write: commits at the end of the block, rolls back on any error."""
        with self.file().transaction() as writer:
            yield writer

    def replace_table(self, table: str, frame: pd.DataFrame, description: str = "") -> int:
        """Replace `schema.table` with `frame` (never keeps stale rows); returns the row count."""
        with self.transaction() as writer:
            writer.replace_table(table, frame, description=description)
            warehouse_docs.apply_comments(writer.conn, [table])  # the described ones: warehouse_tables.yaml wins
        return len(frame)

    def read_table(self, table: str) -> pd.DataFrame:
        schema, name = split_table(table)
        return self.query(f'SELECT * FROM "{schema}"."{name}"')

    def query(self, sql: str, params: list | dict | None = None) -> pd.DataFrame:
        with self.connect() as conn:
            return conn.execute(sql, params or []).df()

    def table_exists(self, table: str) -> bool:
        schema, name = split_table(table)
        if not self.database_path().exists():
            return False
        found = self.query(
            "SELECT count(*) AS n FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
            [schema, name],
        )
        return bool(found["n"].iloc[0])

    def table_metadata(self, table: str) -> dict:
        """Row count and column schema (with warehouse_tables.yaml's descriptions) of a table, as Dagster metadata
        the UI renders; the same descriptions become the table's DuckDB comments."""
        schema, name = split_table(table)
        with self.connect() as conn:
            warehouse_docs.apply_comments(conn, [table])
            rows = conn.execute(f'SELECT count(*) FROM "{schema}"."{name}"').fetchone()[0]
            columns = conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position",
                [schema, name],
            ).fetchall()
        return {
            "dagster/row_count": dg.MetadataValue.int(int(rows)),
            "dagster/column_schema": dg.TableSchema(
                columns=[dg.TableColumn(name=col, type=kind, description=warehouse_docs.column_description(table, col))
                         for col, kind in columns]
            ),
            "dagster/table_name": dg.MetadataValue.text(f"{schema}.{name}"),
            "warehouse": dg.MetadataValue.path(str(self.database_path())),
        }

    def publish(self) -> Path:
        """Copy the warehouse to `published/` for analysts (call only from an asset in the warehouse pool)."""
        target = self.published_path()
        target.parent.mkdir(parents=True, exist_ok=True)
        with self.connect() as conn:
            warehouse_docs.apply_comments(conn)  # every described table, also those written without table_metadata
            conn.execute("CHECKPOINT")
        partial = target.with_suffix(".duckdb.partial")
        shutil.copyfile(self.database_path(), partial)
        partial.replace(target)
        return target


def default_resources() -> dict:
    """Resources for the embedded default: everything from USL_DATA_DIR / USL_HOME, resolved at run time."""
    return {"data_dir": DataDir(), "usl_home": UslHome(), "warehouse": Warehouse()}

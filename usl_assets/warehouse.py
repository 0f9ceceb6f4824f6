"""One way to write the DuckDB warehouse: every write is a short transaction on a `Writer`.

`Warehouse.transaction()` (usl_assets/resources.py) opens the file, begins, yields a Writer, commits (or rolls back
on any error) and closes. A writer never runs model inference inside the transaction: read, close, compute, then
write. What a Writer offers:

- `replace_table`: a table rebuilt from a DataFrame or a SELECT (a re-materialization never keeps stale rows);
- `ensure_table`: a table that outlives runs (partitioned tables, caches), created once from its `TableSpec`,
  and checked against it when it exists;
- `replace_rows`: one partition's rows replaced (`DELETE … WHERE key = ?` then `INSERT … BY NAME`);
- `insert`: rows added `BY NAME` (optionally `OR IGNORE` for the caches keyed by a primary key).

Table names are `schema.table` identifiers, split and quoted here; values are always bound, never formatted in.
`WarehouseFile` gives the same two entry points over a file without Dagster (the CLI's ad hoc cache);
`OpenConnection` over a connection someone else owns (the web page's in-memory copy of the published warehouse).
"""

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa

from usl_assets.settings import UslConfigError

Frame = pd.DataFrame | pa.Table


def split_table(table: str) -> tuple[str, str]:
    schema, _, name = table.partition(".")
    if not name or not schema.isidentifier() or not name.isidentifier():
        raise ValueError(f"table names are schema.table identifiers, got {table!r}")
    return schema, name


def quoted(table: str) -> str:
    schema, name = split_table(table)
    return f'"{schema}"."{name}"'


@dataclass(frozen=True)
class TableSpec:
    """A table that outlives a run: its columns (name → DuckDB type, in order) and primary key."""

    table: str
    columns: dict[str, str]
    primary_key: tuple[str, ...] = field(default=())

    def ddl(self, target: str | None = None, temporary: bool = False) -> str:
        parts = [f'"{name}" {kind}' for name, kind in self.columns.items()]
        if self.primary_key:
            parts.append("PRIMARY KEY (" + ", ".join(f'"{c}"' for c in self.primary_key) + ")")
        return f"CREATE {'TEMP ' if temporary else ''}TABLE {target or quoted(self.table)} ({', '.join(parts)})"


def table_exists(conn: duckdb.DuckDBPyConnection, table: str) -> bool:
    schema, name = split_table(table)
    return conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
                        [schema, name]).fetchone()[0] > 0


def _columns(conn: duckdb.DuckDBPyConnection, database: str, schema: str, name: str) -> list[tuple[str, str]]:
    return conn.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = ? AND "
                        "schema_name = ? AND table_name = ? ORDER BY column_index",
                        [database, schema, name]).fetchall()


class Writer:
    """The writes of one open transaction. `conn` is there for reads inside the same transaction."""

    def __init__(self, conn: duckdb.DuckDBPyConnection):
        self.conn = conn

    @contextlib.contextmanager
    def registered(self, frames: dict[str, Frame]) -> Iterator[None]:
        for name, frame in frames.items():
            self.conn.register(name, frame)
        try:
            yield
        finally:
            for name in frames:
                self.conn.unregister(name)

    def _schema(self, table: str) -> None:
        self.conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{split_table(table)[0]}"')

    def replace_table(self, table: str, frame: Frame | None = None, *, select: str = "SELECT * FROM _frame",
                      params: list | None = None, frames: dict[str, Frame] | None = None,
                      description: str = "") -> int:
        """`CREATE OR REPLACE table AS <select>` over `frame` (registered as `_frame`) and any other `frames`;
        returns the new row count."""
        self._schema(table)
        registered = {**({"_frame": frame} if frame is not None else {}), **(frames or {})}
        with self.registered(registered):
            self.conn.execute(f"CREATE OR REPLACE TABLE {quoted(table)} AS {select}", params or [])
        if description:
            self.conn.execute(f"COMMENT ON TABLE {quoted(table)} IS '{description.replace(chr(39), chr(39) * 2)}'")
        return self.conn.execute(f"SELECT count(*) FROM {quoted(table)}").fetchone()[0]

    def ensure_table(self, spec: TableSpec) -> None:
        """Create the table once; when it exists, its columns must be the spec's (same names, types, order)."""
        self._schema(spec.table)
        if not table_exists(self.conn, spec.table):
            self.conn.execute(spec.ddl())
            return
        schema, name = split_table(spec.table)
        probe = f"_spec_{schema}_{name}"
        self.conn.execute(spec.ddl(f'"{probe}"', temporary=True))
        wanted = _columns(self.conn, "temp", "main", probe)
        self.conn.execute(f'DROP TABLE temp.main."{probe}"')
        found = _columns(self.conn, self.conn.execute("SELECT current_database()").fetchone()[0], schema, name)
        if found != wanted:
            raise UslConfigError(
                f"{spec.table} has columns {_describe(found)}, this version writes {_describe(wanted)}: drop the "
                f"table (DROP TABLE {spec.table}) and rematerialize the asset that writes it")

    def insert(self, table: str, frame: Frame, *, select: str = "SELECT * FROM _rows", params: list | None = None,
               or_ignore: bool = False) -> None:
        """`INSERT [OR IGNORE] INTO table BY NAME <select>` over `frame` (registered as `_rows`)."""
        if len(frame) == 0:
            return
        verb = "INSERT OR IGNORE" if or_ignore else "INSERT"
        with self.registered({"_rows": frame}):
            self.conn.execute(f"{verb} INTO {quoted(table)} BY NAME {select}", params or [])

    def replace_rows(self, spec: TableSpec, frame: pd.DataFrame, **key: str) -> None:
        """One partition's rows: the rows matching `key` (column=value) are replaced by `frame`'s."""
        if not key:
            raise ValueError("replace_rows needs the partition's key columns")
        self.ensure_table(spec)
        where = " AND ".join(f'"{column}" = ?' for column in key)
        self.conn.execute(f"DELETE FROM {quoted(spec.table)} WHERE {where}", list(key.values()))
        self.insert(spec.table, frame[list(spec.columns)])

    def append_query(self, table: str, select: str, params: list | None = None) -> None:
        """Rows of a SELECT added to `table`, which the first call creates with the SELECT's columns."""
        self._schema(table)
        if table_exists(self.conn, table):
            self.conn.execute(f"INSERT INTO {quoted(table)} BY NAME {select}", params or [])
        else:
            self.conn.execute(f"CREATE TABLE {quoted(table)} AS {select}", params or [])


def _describe(columns: list[tuple[str, str]]) -> str:
    return "(" + ", ".join(f"{name} {kind}" for name, kind in columns) + ")"


@contextlib.contextmanager
def transaction(conn: duckdb.DuckDBPyConnection) -> Iterator[Writer]:
    """BEGIN … COMMIT on an open connection; any error rolls everything back and is raised."""
    conn.execute("BEGIN TRANSACTION")
    try:
        yield Writer(conn)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def connect(database: Path, read_only: bool = False, lock_wait_s: float = 0.0) -> duckdb.DuckDBPyConnection:
    """A connection to a DuckDB file. DuckDB lets one process hold a file it writes; another process's writes are
    short transactions, so a conflicting lock is waited for (up to `lock_wait_s`) before it is raised."""
    deadline, pause = time.monotonic() + lock_wait_s, 0.05
    while True:
        try:
            return duckdb.connect(str(database), read_only=read_only)
        except duckdb.IOException as error:
            if "lock" not in str(error).lower() or time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 2.0)


@dataclass(frozen=True)
class WarehouseFile:
    """`connect()` and `transaction()` over a DuckDB file, opened per use: the Warehouse resource's file handling,
    without Dagster (the CLI's ad hoc cache loads no Dagster)."""

    path: Path
    lock_wait_s: float = 60.0

    @contextlib.contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = connect(self.path, read_only, self.lock_wait_s)
        try:
            yield conn
        finally:
            conn.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Writer]:
        """One short write: commits at the end of the block, rolls back on any error."""
        with self.connect() as conn, transaction(conn) as writer:
            yield writer


def published_path(database: Path) -> Path:
    """Where the published copy of the warehouse file `database` lives (what analysts, the CLI and the page read)."""
    return database.parent / "published" / "warehouse.duckdb"


class OpenConnection:
    """`connect()` and `transaction()` over a connection the caller owns and closes."""

    def __init__(self, conn: duckdb.DuckDBPyConnection):
        self.conn = conn

    @contextlib.contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        yield self.conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Writer]:
        with transaction(self.conn) as writer:
            yield writer


def store_of(target):
    """A Warehouse (or anything with `connect()` and `transaction()`) as is; a bare connection wrapped."""
    return OpenConnection(target) if isinstance(target, duckdb.DuckDBPyConnection) else target

"""The one write API of the warehouse (usl_assets/warehouse.py) on a real DuckDB file."""

import subprocess
import sys
import time

import duckdb
import pandas as pd
import pytest

from usl_assets.resources import Warehouse
from usl_assets.settings import UslConfigError
from usl_assets.warehouse import TableSpec

SPEC = TableSpec("demo.rows", {"pool": "VARCHAR", "model": "VARCHAR", "value": "DOUBLE"}, primary_key=("pool", "model"))


@pytest.fixture
def warehouse(tmp_path) -> Warehouse:
    return Warehouse(path=str(tmp_path / "warehouse.duckdb"))


def test_replace_rows_replaces_one_partition_by_name(warehouse):
    with warehouse.transaction() as writer:
        writer.replace_rows(SPEC, pd.DataFrame({"pool": ["a", "a"], "model": ["m", "n"], "value": [1.0, 2.0]}),
                            pool="a")
    # Columns in another order land by name; only pool a / model m is replaced.
    with warehouse.transaction() as writer:
        writer.replace_rows(SPEC, pd.DataFrame({"value": [5.0], "model": ["m"], "pool": ["a"]}), pool="a", model="m")
    rows = warehouse.query("SELECT * FROM demo.rows ORDER BY model").values.tolist()
    assert rows == [["a", "m", 5.0], ["a", "n", 2.0]]


def test_a_failed_write_rolls_everything_back(warehouse):
    warehouse.replace_table("demo.kept", pd.DataFrame({"x": [1]}))
    with pytest.raises(KeyError):
        with warehouse.transaction() as writer:
            writer.replace_table("demo.kept", pd.DataFrame({"x": [1, 2, 3]}))
            writer.replace_rows(SPEC, pd.DataFrame({"pool": ["a"]}), pool="a")  # no model/value columns
    assert warehouse.query("SELECT count(*) AS n FROM demo.kept")["n"][0] == 1
    assert not warehouse.table_exists(SPEC.table)


def test_an_existing_table_with_other_columns_is_one_clear_error(warehouse):
    warehouse.replace_table("demo.rows", pd.DataFrame({"pool": ["a"], "model": ["m"], "value": [1]}))  # BIGINT
    with pytest.raises(UslConfigError, match=r"demo.rows has columns .*value BIGINT.*value DOUBLE"):
        with warehouse.transaction() as writer:
            writer.ensure_table(SPEC)
    with warehouse.transaction() as writer:  # the same columns pass, list and struct types included
        writer.ensure_table(TableSpec("demo.lists", {"c": "STRUCT(role VARCHAR, content VARCHAR)[]", "v": "FLOAT[]"}))
        writer.ensure_table(TableSpec("demo.lists", {"c": "STRUCT(role VARCHAR, content VARCHAR)[]", "v": "FLOAT[]"}))


def test_insert_or_ignore_keeps_the_first_row_of_a_key(warehouse):
    with warehouse.transaction() as writer:
        writer.ensure_table(SPEC)
        writer.insert(SPEC.table, pd.DataFrame({"pool": ["a"], "model": ["m"], "value": [1.0]}), or_ignore=True)
        writer.insert(SPEC.table, pd.DataFrame({"model": ["m", "n"], "pool": ["a", "a"], "value": [9.0, 2.0]}),
                      or_ignore=True)
    assert warehouse.query("SELECT value FROM demo.rows ORDER BY model")["value"].tolist() == [1.0, 2.0]


def test_a_file_held_by_another_process_is_waited_for(warehouse):
    warehouse.replace_table("demo.kept", pd.DataFrame({"x": [1]}))
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
                               "print('held', flush=True); time.sleep(float(sys.argv[2])); c.close()",
                               str(warehouse.database_path()), "2"], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"held"
        with pytest.raises(duckdb.IOException, match="lock"):
            Warehouse(path=warehouse.path, lock_wait_s=0).query("SELECT 1")
        started = time.monotonic()
        assert warehouse.query("SELECT count(*) AS n FROM demo.kept")["n"][0] == 1
        assert time.monotonic() - started < 30
    finally:
        holder.kill()
        holder.wait()

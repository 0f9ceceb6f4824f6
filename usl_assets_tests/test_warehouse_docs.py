"""One source for table and column descriptions: warehouse_tables.yaml → DuckDB comments, Dagster column schemas,
docs/warehouse.md. (test_end_to_end checks every table a whole run writes against it.)"""

import pandas as pd

from usl_assets import warehouse_docs
from usl_assets.definitions import defs
from usl_assets.resources import Warehouse


def test_the_doc_page_is_generated_from_the_yaml():
    current = warehouse_docs.DOC_FILE.read_text(encoding="utf-8")
    assert warehouse_docs.document_with_tables(current) == current, \
        "docs/warehouse.md is out of date: python -m usl_assets.warehouse_docs --write"
    assert warehouse_docs.main([]) == 0


def test_every_described_table_names_a_real_asset_and_describes_every_column():
    assets = {key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()}
    for name, table in warehouse_docs.tables().items():
        assert table.asset in assets, (name, table.asset)
        assert table.description and table.columns or table.other_columns, name
        assert all(text.strip() for text in table.columns.values()), name


def test_comments_and_column_schema_carry_the_same_text(tmp_path):
    warehouse = Warehouse(path=str(tmp_path / "w.duckdb"))
    frame = pd.DataFrame({"pool": ["mt_bench"], "model": ["m"], "n_responses": [3], "mean_length_chars": [1.5]})
    warehouse.replace_table("leaderboard.model_lengths", frame, "a caller's own words lose to the YAML")
    schema = warehouse.table_metadata("leaderboard.model_lengths")["dagster/column_schema"]
    expected = warehouse_docs.tables()["leaderboard.model_lengths"]
    assert {c.name: c.description for c in schema.columns} == expected.columns
    comments = warehouse.query("SELECT column_name, comment FROM duckdb_columns() WHERE table_name = 'model_lengths'")
    assert dict(comments.values.tolist()) == expected.columns
    table_comment = warehouse.query("SELECT comment FROM duckdb_tables() WHERE table_name = 'model_lengths'")
    assert table_comment["comment"].item() == expected.description


def test_a_table_the_yaml_does_not_know_is_left_alone(tmp_path):
    warehouse = Warehouse(path=str(tmp_path / "w.duckdb"))
    warehouse.replace_table("scratch.notes", pd.DataFrame({"x": [1]}), "kept")
    assert warehouse.query("SELECT comment FROM duckdb_tables() WHERE table_name = 'notes'")["comment"].item() == "kept"
    schema = warehouse.table_metadata("scratch.notes")["dagster/column_schema"]
    assert [c.description for c in schema.columns] == [None]

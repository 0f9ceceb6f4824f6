"""Typed warehouse tables from frames of plain Python values: list and conversation columns travel as JSON
text and are parsed back by DuckDB (`from_json`), so a nested value keeps its exact shape."""

import json

import pandas as pd

from usl_assets.resources import Warehouse

JSON_SHAPES = {
    'STRUCT("role" VARCHAR, "content" VARCHAR)[]': '[{"role": "VARCHAR", "content": "VARCHAR"}]',
    "VARCHAR[]": '["VARCHAR"]',
}


def as_json_lists(frame: pd.DataFrame, types: dict[str, str]) -> pd.DataFrame:
    """`frame`'s typed columns with missing values as None and list/conversation columns as JSON text."""
    frame = frame[list(types)].astype(object)
    frame = frame.where(frame.notna(), None)
    for name, kind in types.items():
        if kind in JSON_SHAPES:
            frame[name] = [None if is_missing(value) else json.dumps(value, ensure_ascii=False)
                           for value in plain_values(frame[name])]
    return frame


def is_missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and value != value)


def plain_values(column: pd.Series) -> list:
    return [_plain_value(value) for value in column]


def _plain_value(value: object) -> object:
    """numpy arrays (and the dicts inside them) from DuckDB as plain lists and dicts."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list):
        return [dict(item) if isinstance(item, dict) else item for item in value]
    return value


def write_typed_table(warehouse: Warehouse, table: str, frame: pd.DataFrame, types: dict[str, str]) -> int:
    """Replace `table` with `frame` (plain Python values or what DuckDB returned), each column cast to its type."""
    selects = [
        f"from_json({_ident(column)}, '{JSON_SHAPES[kind]}') AS {_ident(column)}" if kind in JSON_SHAPES
        else f"CAST({_ident(column)} AS {kind}) AS {_ident(column)}"
        for column, kind in types.items()
    ]
    with warehouse.transaction() as writer:
        return writer.replace_table(table, as_json_lists(frame, types),
                                    select=f"SELECT {', '.join(selects)} FROM _frame")


def _ident(column: str) -> str:
    """A quoted SQL identifier (raw tables take their column names from the file's keys)."""
    return '"' + column.replace('"', '""') + '"'

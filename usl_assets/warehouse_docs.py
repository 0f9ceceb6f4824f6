"""Table and column descriptions from one source, usl_assets/warehouse_tables.yaml: the DuckDB comments, the
Dagster column schemas' descriptions and the table sections of docs/warehouse.md (generated from it).

A YAML rather than parsing docs/warehouse.md: the doc described many columns in running prose ("`a`, `b` (…)")
that no parser splits reliably into one text per column; a YAML has exactly one text per column, and the doc
generated from it stays readable. `python -m usl_assets.warehouse_docs --write` regenerates the doc's tables.
"""

import argparse
import functools
import importlib.resources
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

CATALOG_FILE = importlib.resources.files("usl_assets") / "warehouse_tables.yaml"  # package data
DOC_FILE = Path(__file__).resolve().parents[1] / "docs" / "warehouse.md"
GENERATED_MARKER = ("<!-- Generated from usl_assets/warehouse_tables.yaml by "
                    "`python -m usl_assets.warehouse_docs --write`: edit the YAML, not the text below. -->")


@dataclass(frozen=True)
class TableDoc:
    name: str
    asset: str
    description: str
    columns: dict[str, str]
    other_columns: str = ""  # for tables whose further columns follow the input (raw.user_preferences)


@dataclass(frozen=True)
class SchemaDoc:
    name: str
    title: str
    intro: str
    tables: list[TableDoc] = field(default_factory=list)


@functools.cache
def schemas() -> tuple[SchemaDoc, ...]:
    raw = yaml.safe_load(CATALOG_FILE.read_text(encoding="utf-8"))
    sets = raw["column_sets"]
    found = []
    for schema in raw["schemas"]:
        tables = []
        for name, spec in schema["tables"].items():
            columns = {}
            for included in spec.get("include", []):
                columns.update(sets[included])
            columns.update(spec.get("columns") or {})
            tables.append(TableDoc(name, spec["asset"], spec["description"], columns, spec.get("other_columns", "")))
        found.append(SchemaDoc(schema["name"], schema["title"], schema.get("intro", ""), tables))
    return tuple(found)


def tables() -> dict[str, TableDoc]:
    return {table.name: table for schema in schemas() for table in schema.tables}


def column_description(table: str, column: str) -> str | None:
    doc = tables().get(table)
    if doc is None:
        return None
    return doc.columns.get(column) or doc.other_columns or None


def apply_comments(conn, only: list[str] | None = None) -> int:
    """COMMENT ON TABLE / COLUMN for every described table present (or those in `only`); returns tables done."""
    present = conn.execute(
        "SELECT schema_name || '.' || table_name, list(column_name ORDER BY column_index) FROM duckdb_columns() "
        "WHERE NOT internal GROUP BY ALL").fetchall()
    done = 0
    for table, columns in present:
        doc = tables().get(table)
        if doc is None or (only is not None and table not in only):
            continue
        schema, name = table.split(".")
        conn.execute(f'COMMENT ON TABLE "{schema}"."{name}" IS {_literal(doc.description)}')
        for column in columns:
            text = column_description(table, column)
            if text:
                quoted = column.replace('"', '""')
                conn.execute(f'COMMENT ON COLUMN "{schema}"."{name}"."{quoted}" IS {_literal(text)}')
        done += 1
    return done


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def render_markdown() -> str:
    """The table sections of docs/warehouse.md."""
    lines = [GENERATED_MARKER, ""]
    for schema in schemas():
        lines += [f"## {schema.name} — {schema.title}", ""]
        if schema.intro:
            lines += [schema.intro.strip(), ""]
        for table in schema.tables:
            lines += [f"**`{table.name}`** (asset `{table.asset}`): {table.description}.", "",
                      "| column | meaning |", "|---|---|"]
            lines += [f"| `{column}` | {text} |" for column, text in table.columns.items()]
            if table.other_columns:
                lines.append(f"| any other column | {table.other_columns} |")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def document_with_tables(doc: str) -> str:
    head = doc.split(GENERATED_MARKER)[0].rstrip() + "\n\n"
    return head + render_markdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite docs/warehouse.md's generated part")
    args = parser.parse_args(argv)
    current = DOC_FILE.read_text(encoding="utf-8")
    wanted = document_with_tables(current)
    if args.write:
        DOC_FILE.write_text(wanted, encoding="utf-8")
        return 0
    if current != wanted:
        print(f"{DOC_FILE} is out of date: run python -m usl_assets.warehouse_docs --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

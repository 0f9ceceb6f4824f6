"""Read the preference files as they are: one raw row per record, nothing parsed beyond JSON.

Every raw table has `row_number` (the 1-based line of a JSONL file, or position in a JSON array), `raw_error`
(NULL, or why the record could not be read: invalid_utf8 / invalid_json / not_an_object), `raw_line` (the
undecodable or unparseable text, NULL otherwise) and one column per top-level field, holding the field's JSON
text (so a boolean response stays `true`, an int label stays `1` and a string label stays `"1"`).
"""

import codecs
import gzip
import hashlib
import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from usl_assets.settings import UslConfigError

AUTOJ_FILE = "preferences/autoj_pairwise.jsonl"
PANDALM_FILE = "preferences/pandalm_annotated.json"
HH_RLHF_FILE = "preferences/hh_rlhf_harmless_test.jsonl.gz"
ALPACA_EVAL_JUDGE_FILE = "preferences/alpaca_eval_gpt4_turbo_judgments.jsonl.gz"
USER_PREFERENCES_ENV = "USL_USER_PREFERENCES"

RAW_BOOKKEEPING_COLUMNS = ["row_number", "raw_error", "raw_line"]


@dataclass
class RawFile:
    """The landed rows of one file plus what a person wants to know about reading it."""

    rows: pd.DataFrame
    blank_lines: int = 0
    errors: dict[str, int] = field(default_factory=dict)


def file_facts(path: Path) -> dict:
    """sha256 and size of a file (read in chunks: the hh-rlhf file is compressed, the others small)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return {"sha256": digest.hexdigest(), "size_bytes": path.stat().st_size}


def read_jsonl_bytes(data: bytes) -> RawFile:
    """One raw row per non-blank line; a line that is not UTF-8 or not a JSON object lands with an error marker."""
    records, blank_lines = [], 0
    data = data.removeprefix(codecs.BOM_UTF8)  # editors on Windows start UTF-8 files with a BOM
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            blank_lines += 1
            continue
        records.append(_parse_line(number, line))
    # the final newline of a file leaves one empty piece that is not a blank line of the file
    blank_lines -= int(data.endswith(b"\n"))
    return _raw_file(records, blank_lines)


def read_json_array_bytes(data: bytes) -> RawFile:
    """One raw row per item of a JSON array; a file that is not a JSON array lands as one error row."""
    try:
        items = json.loads(data.removeprefix(codecs.BOM_UTF8).decode("utf-8"))
    except UnicodeDecodeError as error:
        return _raw_file([_error_row(1, "invalid_utf8", error, data)], 0)
    except json.JSONDecodeError as error:
        return _raw_file([_error_row(1, "invalid_json", error, data)], 0)
    except RecursionError:
        return _raw_file([_error_row(1, "too_deeply_nested", "JSON nested too deeply to parse", data[:20000])], 0)
    if not isinstance(items, list):
        return _raw_file([_error_row(1, "not_an_array", "the file is not a JSON array", data)], 0)
    records = [
        _record_row(number, item) if isinstance(item, dict)
        else _error_row(number, "not_an_object", f"item is {type(item).__name__}", json.dumps(item).encode())
        for number, item in enumerate(items, start=1)
    ]
    return _raw_file(records, 0)


def read_jsonl_file(path: Path) -> RawFile:
    return read_jsonl_bytes(path.read_bytes())


def read_gzip_jsonl_file(path: Path) -> RawFile:
    """A gzip JSONL file; a corrupt archive lands as one error row instead of stopping the run."""
    try:
        data = gzip.decompress(path.read_bytes())
    except (OSError, EOFError, zlib.error) as error:
        return _raw_file([_error_row(1, "invalid_gzip", error, b"")], 0)
    return read_jsonl_bytes(data)


def read_json_array_file(path: Path) -> RawFile:
    return read_json_array_bytes(path.read_bytes())


def empty_raw_file() -> RawFile:
    return _raw_file([], 0)


def user_preferences_path(configured: str = "") -> Path | None:
    """The user's preference file: the asset config's path, else $USL_USER_PREFERENCES, else None (no file)."""
    raw = configured or os.environ.get(USER_PREFERENCES_ENV, "")
    if not raw:
        return None
    path = Path(raw).expanduser().resolve()
    if not path.is_file():
        raise UslConfigError(
            f"user preferences file {raw} does not exist: set the raw_user_preferences config `path` or "
            f"{USER_PREFERENCES_ENV} to a JSONL file (docs/user_preferences.md)"
        )
    return path


def _parse_line(number: int, line: bytes) -> dict:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        return _error_row(number, "invalid_utf8", error, line)
    try:
        value = json.loads(text)
        if not isinstance(value, dict):
            return _error_row(number, "not_an_object", f"line is a JSON {type(value).__name__}", line)
        return _record_row(number, value)  # re-encodes each field: as deep as the line
    except json.JSONDecodeError as error:
        return _error_row(number, "invalid_json", error, line)
    except RecursionError:
        # kept short: the line is evidence, not data, and a 100k-deep line is only brackets
        return _error_row(number, "too_deeply_nested", "JSON nested too deeply to parse", line[:20000])


def _record_row(number: int, value: dict) -> dict:
    row = {"row_number": number, "raw_error": None, "raw_line": None}
    for key, item in value.items():
        # a field named like a bookkeeping column keeps its value under a suffixed name
        name = f"{key}_field" if key in RAW_BOOKKEEPING_COLUMNS else str(key)
        row[name] = json.dumps(item, ensure_ascii=False)
    return row


def _error_row(number: int, kind: str, error: object, line: bytes) -> dict:
    return {
        "row_number": number,
        "raw_error": f"{kind}: {error}",
        "raw_line": line.decode("utf-8", errors="backslashreplace"),
    }


def _raw_file(records: list[dict], blank_lines: int) -> RawFile:
    columns = list(RAW_BOOKKEEPING_COLUMNS)
    for record in records:
        columns += [name for name in record if name not in columns]
    renamed = _case_safe_names(columns)
    records = [{renamed[name]: value for name, value in record.items()} for record in records]
    columns = [renamed[name] for name in columns]
    rows = pd.DataFrame.from_records(records, columns=columns)
    rows["row_number"] = rows["row_number"].astype("int64")
    for name in columns[1:]:
        rows[name] = rows[name].astype("object").where(rows[name].notna(), None)
    errors = rows["raw_error"].dropna().str.split(":").str[0].value_counts().to_dict()
    return RawFile(rows=rows, blank_lines=blank_lines, errors={str(k): int(v) for k, v in errors.items()})


def _case_safe_names(columns: list[str]) -> dict[str, str]:
    """DuckDB column names ignore case: a key that differs from an earlier one only by case gets a suffix."""
    taken, renamed = set(), {}
    for name in columns:
        unique, n = name, 1
        while unique.lower() in taken:
            n += 1
            unique = f"{name}_{n}"
        taken.add(unique.lower())
        renamed[name] = unique
    return renamed


def decode_field(value: object) -> object:
    """The Python value of a raw JSON-text cell (None stays None: the field was absent from that record)."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    return json.loads(value)


def raw_record(row: dict) -> dict:
    """A raw table row back as the record it was in the file (bookkeeping columns and absent fields dropped)."""
    if row.get("raw_error"):
        return {"raw_error": row["raw_error"], "raw_line": row.get("raw_line")}
    return {
        name: decode_field(value)
        for name, value in row.items()
        if name not in RAW_BOOKKEEPING_COLUMNS and value is not None and not _is_missing(value)
    }


def _is_missing(value: object) -> bool:
    return isinstance(value, float) and pd.isna(value)

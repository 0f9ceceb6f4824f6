"""Helpers of the reliability tests (issue 10): a USL_HOME with responses.prompts and a DAGSTER_HOME, and the row
counts of every warehouse table, compared before and after each hostile case."""

from pathlib import Path

import dagster as dg
import duckdb
import pytest

from usl_assets.resources import WAREHOUSE_POOL
from usl_assets.responses import pools, tables as response_tables
from usl_assets.responses.assets import pool_prompts
from usl_assets_tests.conftest import REPO_ROOT
from usl_assets_tests.taggers import TfidfScenarioTagger


def table_counts(database: Path) -> dict[str, int]:
    with duckdb.connect(str(database), read_only=True) as conn:
        names = conn.execute("SELECT schema_name, table_name FROM duckdb_tables() ORDER BY ALL").fetchall()
        return {f"{s}.{t}": conn.execute(f'SELECT count(*) FROM "{s}"."{t}"').fetchone()[0] for s, t in names}


def model_counts(database: Path, model: str) -> dict[str, int]:
    with duckdb.connect(str(database), read_only=True) as conn:
        return {table: conn.execute(f"SELECT count(*) FROM {table} WHERE model = ?", [model]).fetchone()[0]
                for table in (response_tables.RESPONSES_TABLE, response_tables.QUARANTINE_TABLE)}


def slot_holders(instance: dg.DagsterInstance) -> set[str]:
    info = instance.event_log_storage.get_concurrency_info(WAREHOUSE_POOL)
    return {slot.run_id for slot in info.claimed_slots}


@pytest.fixture
def cli_env(usl_env, shared_data_dir, tmp_path, monkeypatch):
    """responses.prompts materialized (small TF-IDF tagger) and a DAGSTER_HOME with the repo's dagster.yaml."""
    tagger = TfidfScenarioTagger(shared_data_dir)
    monkeypatch.setattr(pools, "load_scenario_tagger", lambda usl_home_root: tagger)
    assert dg.materialize([pool_prompts], resources=usl_env).success
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text((REPO_ROOT / "usl_assets" / "dagster.yaml").read_text())
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    return usl_env

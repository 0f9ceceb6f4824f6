"""Crash recovery (issue 10, case 1): `usl add-model` killed with SIGKILL mid-run leaves a STARTED run holding the
only slot of the `warehouse` pool; the next `usl add-model` finds it dead, marks it failed, frees the slot, says
so, and loads the model, with nothing lost or doubled."""

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from usl_assets import cli
from usl_assets.recovery import recover_dead_runs
from usl_assets.resources import WAREHOUSE_POOL
from usl_assets.responses import pools
from usl_assets.responses.assets import pool_prompts
from usl_assets_tests.conftest import REPO_ROOT
from usl_assets_tests.test_responses_tagger import TfidfScenarioTagger

JUNK_RECORDS = 600_000  # answers to no pool prompt: quarantined one by one, so the run lasts seconds


def table_counts(database: Path) -> dict[str, int]:
    with duckdb.connect(str(database), read_only=True) as conn:
        names = conn.execute("SELECT schema_name, table_name FROM duckdb_tables() ORDER BY ALL").fetchall()
        return {f"{s}.{t}": conn.execute(f'SELECT count(*) FROM "{s}"."{t}"').fetchone()[0] for s, t in names}


def model_counts(database: Path, model: str) -> dict[str, int]:
    with duckdb.connect(str(database), read_only=True) as conn:
        return {table: conn.execute(f"SELECT count(*) FROM {table} WHERE model = ?", [model]).fetchone()[0]
                for table in (pools.RESPONSES_TABLE, pools.QUARANTINE_TABLE)}


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
    (dagster_home / "dagster.yaml").write_text((REPO_ROOT / "dagster.yaml").read_text())
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    return usl_env


def usl(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from usl_assets.cli import main; sys.exit(main(sys.argv[1:]))", *args]


def test_sigkill_during_add_model_is_recovered_on_the_next_run(cli_env, shared_data_dir, tmp_path, capsys):
    database = Path(cli_env["warehouse"].path)
    records = json.loads(gzip.open(pools.public_model_files(shared_data_dir, "alpaca_eval")["gemma-7b-it"]).read())
    other = tmp_path / "earlier-model.json"
    other.write_text(json.dumps(records[:300]))
    assert cli.main(["add-model", "--pool", "alpaca_eval", str(other), "--responses-only"]) == 0
    capsys.readouterr()
    before = table_counts(database)
    junk = [{"instruction": f"no pool prompt {i}", "output": "an answer", "generator": "k"} for i in range(JUNK_RECORDS)]
    big = tmp_path / "k.json"
    big.write_text(json.dumps(records + junk))
    command = usl("add-model", "--pool", "alpaca_eval", str(big), "--model", "k", "--responses-only")

    killed = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    with dg.DagsterInstance.get() as instance:
        deadline = time.monotonic() + 240
        while not slot_holders(instance) and killed.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        holders = slot_holders(instance)
        assert holders, f"the run never held the warehouse slot: {killed.communicate()[0].decode()[-2000:]}"
        assert recover_dead_runs(instance) == []  # its process is alive: left alone
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait()
        (stuck,) = holders
        assert instance.get_run_by_id(stuck).status == dg.DagsterRunStatus.STARTED
        assert slot_holders(instance) == {stuck}  # the bug: nobody will ever free it

    rerun = subprocess.run(command, capture_output=True, text=True, timeout=300)

    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"crash recovery: run {stuck}" in rerun.stdout and "marked failed, slots freed" in rerun.stdout
    with dg.DagsterInstance.get() as instance:
        assert instance.get_run_by_id(stuck).status == dg.DagsterRunStatus.FAILURE
        assert slot_holders(instance) == set()
        assert recover_dead_runs(instance) == []  # nothing left to clean
    after = table_counts(database)
    added = model_counts(database, "k")
    assert added == {pools.RESPONSES_TABLE: 805, pools.QUARANTINE_TABLE: JUNK_RECORDS}
    assert after == {table: n + added.get(table, 0) for table, n in before.items()}
    assert model_counts(database, "earlier-model") == {pools.RESPONSES_TABLE: 300, pools.QUARANTINE_TABLE: 505}

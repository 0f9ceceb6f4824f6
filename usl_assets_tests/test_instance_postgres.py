"""The shared deployment: Dagster's instance storage in a real PostgreSQL (deploy/dagster.postgres.yaml)."""

import contextlib
import shutil
import uuid

import dagster as dg
import psycopg2
import pytest

from usl_assets_tests.conftest import REPO_ROOT

PG = {"host": "127.0.0.1", "port": 5432, "user": "postgres"}


def _admin(sql: str) -> None:
    conn = psycopg2.connect(dbname="postgres", **PG)
    conn.autocommit = True
    try:
        conn.cursor().execute(sql)
    finally:
        conn.close()


@contextlib.contextmanager
def throwaway_database(monkeypatch):
    """A database of its own on the CI PostgreSQL (dropped afterwards), named in the USL_PG_* variables."""
    try:
        psycopg2.connect(dbname="postgres", connect_timeout=5, **PG).close()
    except psycopg2.OperationalError as error:
        pytest.fail(f"PostgreSQL at 127.0.0.1:5432 is required for this test: {error}")
    db_name = f"usl_test_{uuid.uuid4().hex[:10]}"
    _admin(f'CREATE DATABASE "{db_name}"')
    env = {"USL_PG_HOST": "127.0.0.1", "USL_PG_USER": "postgres", "USL_PG_PASSWORD": "", "USL_PG_DB": db_name}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    try:
        yield env
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')


def postgres_dagster_home(folder) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO_ROOT / "deploy" / "dagster.postgres.yaml", folder / "dagster.yaml")


@pytest.fixture
def postgres_instance(tmp_path, monkeypatch):
    with throwaway_database(monkeypatch):
        home = tmp_path / "dagster_home"
        postgres_dagster_home(home)
        instance = dg.DagsterInstance.from_config(str(home))
        try:
            yield instance
        finally:
            instance.dispose()


def test_postgres_instance_records_a_real_materialization(postgres_instance, usl_env):
    from usl_assets.preferences.assets import raw_autoj_pairwise

    assert type(postgres_instance.run_storage).__name__ == "PostgresRunStorage"
    result = dg.materialize([raw_autoj_pairwise], instance=postgres_instance, resources=usl_env)
    assert result.success
    event = postgres_instance.get_latest_materialization_event(dg.AssetKey("raw_autoj_pairwise"))
    assert event is not None
    assert event.asset_materialization.metadata["dagster/row_count"].value == 1392
    runs = postgres_instance.get_runs()
    assert [run.run_id for run in runs] == [result.run_id]


def test_a_one_slot_pool_is_claimed_by_one_step_even_when_steps_claim_at_the_same_instant(postgres_instance):
    """Eight threads claim the one slot of a pool at the same instant, twenty times: at most one claim succeeds
    each time (Dagster 1.13.27's own PostgreSQL claim can give the slot to two; usl_assets/postgres_storage.py)."""
    import threading

    from usl_assets.postgres_storage import AtomicClaimPostgresEventLogStorage

    storage = postgres_instance.event_log_storage
    assert isinstance(storage, AtomicClaimPostgresEventLogStorage)
    storage.set_concurrency_slots("race_test", 1)
    for round_number in range(20):
        barrier, claimed = threading.Barrier(8), []

        def claim(worker: int) -> None:
            barrier.wait()
            status = storage._claim_concurrency_slot("race_test", f"run-{round_number}-{worker}", f"step-{worker}")
            if status.name == "CLAIMED":
                claimed.append(worker)

        threads = [threading.Thread(target=claim, args=(worker,)) for worker in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(claimed) == 1, f"round {round_number}: {len(claimed)} steps hold the one slot"
        storage.free_concurrency_slots_for_run(f"run-{round_number}-{claimed[0]}")

"""The shared deployment for real (issue 10): the Postgres instance (deploy/dagster.postgres.yaml) with
`dagster dev` (webserver and the real `dagster-daemon`), runs submitted through the QueuedRunCoordinator, launched
by the daemon and executed by the multiprocess executor (forkserver) on small slices of the public data:

1. the whole graph in the three phases of `usl run`, each a queued run;
2. two `usl add-model` at once (two new models of alpaca_eval): serialized by the `warehouse` pool, no lock error,
   every table's row count afterwards = before + exactly the two models' rows;
3. a file dropped in the inbox, then the same file again: one partition, one run of it, one leaderboards rebuild,
   and none after the two `usl add-model` runs (they rebuild the leaderboards themselves, or not at all).
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import duckdb
import pytest
from dagster_graphql import DagsterGraphQLClient

from usl_assets.pipeline import plan_phases
from usl_assets.resources import WAREHOUSE_POOL
from usl_assets.responses import pools
from usl_assets.responses import tables as response_tables
from usl_assets.responses.sensors import ACCEPTED_TAG, ADDED_MODEL_TAG, FORKSERVER_EXECUTION, IN_PROCESS_EXECUTION
from usl_assets_tests.conftest import REPO_ROOT
from usl_assets_tests.release_support import table_counts
from usl_assets_tests.test_end_to_end import MODELS, SMALL_SLICES, tiny_crm_settings
from usl_assets_tests.test_instance_postgres import postgres_dagster_home, throwaway_database
from usl_assets_tests.webserver import running_webserver


NEW_MODELS = {"cli-model-a": "gemma-7b-it", "cli-model-b": "gpt4_1106_preview"}  # name → the copied public model
INBOX_MODEL, INBOX_SOURCE = "inbox-model", "gemma-7b-it"
FINISHED = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}


@pytest.fixture
def deployment(tmp_path, shared_data_dir, tiny_backbone, monkeypatch):
    with throwaway_database(monkeypatch) as pg_env:
        dagster_home, usl_home = tmp_path / "dagster_home", tmp_path / "usl_home"
        postgres_dagster_home(dagster_home)
        env = {**pg_env, "USL_HOME": str(usl_home), "USL_DATA_DIR": str(shared_data_dir),
               "DAGSTER_HOME": str(dagster_home), "USL_INSTANCE": "postgres", "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               # The checkout's code, also in the daemon's run workers and their step processes.
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        instance = dg.DagsterInstance.from_config(str(dagster_home))
        try:
            assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
            assert type(instance.run_storage).__name__ == "PostgresRunStorage"
            with running_webserver(dagster_home, env, tmp_path / "dagster_dev.log") as url:
                host, port = url.removeprefix("http://").split(":")
                yield {"instance": instance, "client": DagsterGraphQLClient(host, port_number=int(port)),
                       "env": env, "usl_home": usl_home, "log": tmp_path / "dagster_dev.log",
                       "crm": crm_config(tiny_crm_settings(tiny_backbone))}
        finally:
            instance.dispose()


def crm_config(settings) -> dict:
    return {name: getattr(settings, name) for name in type(settings).model_fields}


def wait_for(condition, what: str, log: Path, timeout_s: float = 1200):
    """`timeout_s` guards against a hang, it measures nothing: under `make test` another test file runs beside this
    one on the 2 cores, and phase 1 alone takes ~4.5 min here unloaded, over 7 min beside a heavy file."""
    deadline = time.monotonic() + timeout_s
    while not (found := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}; dagster dev log:\n" + \
            log.read_text()[-3000:]
        time.sleep(2)
    return found


def submit_and_wait(deployment, keys: list[dg.AssetKey], execution: dict, tags: dict | None = None,
                    ops: dict | None = None) -> str:
    """One queued run of the location's asset job (as the UI's Materialize does), launched by the daemon."""
    names = {key.to_python_identifier() for key in keys}
    run_config = {**execution,
                  "ops": {name: {"config": cfg} for name, cfg in (ops or {}).items() if name in names},
                  "resources": {"crm_settings": {"config": deployment["crm"]}}}
    run_id = deployment["client"].submit_job_execution(
        "__ASSET_JOB", repository_location_name="usl_assets", run_config=run_config, tags=tags or {},
        asset_selection=[key.path for key in keys])
    instance = deployment["instance"]
    run = wait_for(lambda: (r := instance.get_run_by_id(run_id)) is not None and r.status in FINISHED and r,
                   f"run {run_id}", deployment["log"])
    assert run.status == dg.DagsterRunStatus.SUCCESS, failure_message(instance, run_id)
    return run_id


def failure_message(instance, run_id: str) -> str:
    errors = [entry.dagster_event.event_specific_data.error.message for entry in
              instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)]
    return f"run {run_id} failed: {errors[:2]}"


def event_times(instance, run_id: str, kind) -> dict[str, float]:
    return {entry.step_key or "run": entry.timestamp for entry in instance.all_logs(run_id, of_type=kind)}


def model_rows(database: Path, models: list[str]) -> dict[str, dict[str, int]]:
    """table → model → rows, for every table with a `model` column."""
    with duckdb.connect(str(database), read_only=True) as conn:
        tables = conn.execute("SELECT DISTINCT schema_name, table_name FROM duckdb_columns() "
                              "WHERE column_name = 'model' AND NOT internal ORDER BY ALL").fetchall()
        return {f"{s}.{t}": {m: conn.execute(f'SELECT count(*) FROM "{s}"."{t}" WHERE model = ?', [m]).fetchone()[0]
                             for m in models} for s, t in tables}


def alpaca_copy(data_root: Path, source: str, target: Path) -> Path:
    """A public model's answers under a new model name."""
    records = pools.read_model_records("alpaca_eval", pools.public_model_files(data_root, "alpaca_eval")[source])
    target.write_text(json.dumps([dict(r, generator=target.stem) for r in records]))
    return target


def test_the_shared_deployment_runs_the_graph_serializes_writers_and_takes_an_inbox_file_once(
        deployment, shared_data_dir, tmp_path):
    instance, log = deployment["instance"], deployment["log"]
    from usl_assets.definitions import defs

    before, partitioned, after = plan_phases(defs.resolve_asset_graph())
    started = time.monotonic()
    # 1. The whole graph, three queued runs (`usl run`'s phases), each launched by the daemon.
    # Phases 1 and 3 (~45 and ~15 steps, nearly all in the one-slot warehouse pool) in the run worker's own process:
    # a step process costs ~20 s here. The model partitions (and the inbox's partition run) use the multiprocess
    # executor.
    submit_and_wait(deployment, before, IN_PROCESS_EXECUTION, ops=SMALL_SLICES)
    instance.add_dynamic_partitions("models", MODELS)
    submit_and_wait(deployment, partitioned, FORKSERVER_EXECUTION,
                    tags={"dagster/asset_partition_range_start": MODELS[0],
                          "dagster/asset_partition_range_end": MODELS[-1]})
    submit_and_wait(deployment, after, IN_PROCESS_EXECUTION, ops=SMALL_SLICES)
    runs = instance.get_runs()
    assert len(runs) == 3
    for run in runs:  # queued by the coordinator, then launched by the daemon
        assert instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_ENQUEUED)
    partition_run = next(r for r in runs if r.tags.get("dagster/asset_partition_range_start"))
    messages = [e.message for e in instance.all_logs(partition_run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)]
    assert any("multiprocess executor" in (m or "") for m in messages), messages[:5]
    optional = {"crm_cross", "crm_factorized", "crm_backbone_smollm2"}
    never = [k.to_user_string() for k in defs.resolve_asset_graph().materializable_asset_keys
             if k.to_user_string() not in optional and not instance.get_latest_materialization_event(k)]
    assert not never, f"never materialized: {never}"
    graph_seconds = time.monotonic() - started

    # 2. Two `usl add-model` at once, both writing the warehouse.
    database = deployment["usl_home"] / "warehouse.duckdb"
    counts_before = table_counts(database)
    sources = list(dict.fromkeys(NEW_MODELS.values()))
    rows_before = model_rows(database, sources)
    files = {name: alpaca_copy(shared_data_dir, source, tmp_path / f"{name}.json")
             for name, source in NEW_MODELS.items()}
    cli = [sys.executable, "-m", "usl_assets.cli", "add-model", "--pool", "alpaca_eval", "--no-leaderboards"]
    procs = {name: subprocess.Popen([*cli, str(path)], cwd=REPO_ROOT, env={**os.environ, **deployment["env"]},
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for name, path in files.items()}
    outputs = {name: proc.communicate(timeout=400)[0] for name, proc in procs.items()}
    for name, proc in procs.items():
        assert proc.returncode == 0, outputs[name]
        assert "lock" not in outputs[name].lower() and "busy" not in outputs[name].lower(), outputs[name]
    added = {name: instance.get_runs(filters=dg.RunsFilter(tags={ADDED_MODEL_TAG: f"alpaca_eval:{name}"}))
             for name in NEW_MODELS}
    assert all(len(found) == 1 for found in added.values()), added
    run_ids = [found[0].run_id for found in added.values()]
    spans = [(event_times(instance, r, dg.DagsterEventType.RUN_START)["run"],
              event_times(instance, r, dg.DagsterEventType.RUN_SUCCESS)["run"]) for r in run_ids]
    assert max(s for s, _ in spans) < min(e for _, e in spans), f"the two runs did not overlap: {spans}"
    writers = {key.to_python_identifier() for key in partitioned
               if defs.resolve_assets_def(key).op.pool == WAREHOUSE_POOL}
    steps = sorted((event_times(instance, r, dg.DagsterEventType.STEP_START)[step],
                    event_times(instance, r, dg.DagsterEventType.STEP_SUCCESS)[step], r, step)
                   for r in run_ids for step in writers)
    assert all(first[1] <= second[0] for first, second in zip(steps, steps[1:])), \
        f"warehouse steps overlapped: {steps}"
    counts_after = table_counts(database)
    rows_after = model_rows(database, list(NEW_MODELS))
    for table, count in counts_after.items():
        new_rows = sum(rows_after.get(table, {}).values())
        assert count == counts_before[table] + new_rows, (table, counts_before[table], count, new_rows)
        if table in rows_after and not table.startswith("leaderboard."):  # leaderboards not rebuilt (--no-leaderboards)
            assert rows_after.get(table, {}) == {name: rows_before.get(table, {}).get(source, 0)
                                                 for name, source in NEW_MODELS.items()}, table
    assert rows_after[response_tables.RESPONSES_TABLE] == {name: 805 for name in NEW_MODELS}
    add_seconds = time.monotonic() - started - graph_seconds

    # 3. The inbox: one file, then the very same file again once the first was taken.
    folder = deployment["usl_home"] / "inbox" / "alpaca_eval"
    folder.mkdir(parents=True)
    source = alpaca_copy(shared_data_dir, INBOX_SOURCE, tmp_path / f"{INBOX_MODEL}.json")
    key = f"alpaca_eval:{INBOX_MODEL}"

    def drop() -> None:
        shutil.copy(source, folder / f"{INBOX_MODEL}.json.tmp")
        (folder / f"{INBOX_MODEL}.json.tmp").rename(folder / f"{INBOX_MODEL}.json")  # atomic, as docs say

    def intake_runs() -> list:
        return instance.get_runs(filters=dg.RunsFilter(job_name="inbox_intake_job",
                                                       statuses=[dg.DagsterRunStatus.SUCCESS]))

    drop()
    wait_for(lambda: len(intake_runs()) == 1, "the first intake run", log)
    assert intake_runs()[0].tags[ACCEPTED_TAG] == key and not (folder / f"{INBOX_MODEL}.json").exists()
    drop()
    wait_for(lambda: len(intake_runs()) == 2, "the second intake run", log)
    second_done = time.monotonic()
    rebuilt = wait_for(lambda: [r for r in instance.get_runs(filters=dg.RunsFilter(
        job_name="leaderboards_after_model_job", tags={"usl/after_added_model": key})) if r.status in FINISHED],
        "the leaderboards run after the inbox model", log)
    assert [r.status for r in rebuilt] == [dg.DagsterRunStatus.SUCCESS], failure_message(instance, rebuilt[0].run_id)
    time.sleep(max(0.0, 35 - (time.monotonic() - second_done)))  # two ticks of the sensors after the second intake

    assert ACCEPTED_TAG not in intake_runs()[0].tags  # newest first: the second saw the same file again
    assert instance.get_dynamic_partitions("models").count(key) == 1
    partition_runs = instance.get_runs(filters=dg.RunsFilter(tags={ADDED_MODEL_TAG: key}))
    assert [r.status for r in partition_runs] == [dg.DagsterRunStatus.SUCCESS]
    assert model_rows(database, [INBOX_MODEL])[response_tables.RESPONSES_TABLE] == {INBOX_MODEL: 805}
    # One rebuild per added model: the inbox one; none after the two `usl add-model --no-leaderboards` runs.
    from_sensor = instance.get_runs(filters=dg.RunsFilter(
        job_name="leaderboards_after_model_job", tags={"dagster/sensor_name": "leaderboards_after_new_model"}))
    assert [r.tags["usl/after_added_model"] for r in from_sensor] == [key]
    print(f"graph {graph_seconds:.0f} s, two add-model {add_seconds:.0f} s, inbox "
          f"{time.monotonic() - started - graph_seconds - add_seconds:.0f} s")

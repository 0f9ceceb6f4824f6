"""SIGTERM stops `usl run` (a real subprocess, with only USL_DATA_DIR and USL_HOME set) as Ctrl-C does: exit 130,
the interrupted run marked failed, no partial files, and the interrupted asset materializes on a rerun."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from usl_assets.definitions import defs
from usl_assets.launch import console_log_config, execute_in_location
from usl_assets_tests.conftest import REPO_ROOT


# "▶": as the first run starts (before Dagster's own interrupt handling is in place); "✓": after its first step.
@pytest.mark.parametrize("signal_after", ["▶", "✓"], ids=["as_the_run_starts", "after_the_first_step"])
def test_sigterm_stops_usl_run_cleanly_and_the_step_reruns(signal_after, tmp_path, shared_data_dir, monkeypatch):
    usl_home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in {"DAGSTER_HOME", "USL_HOME"}}
    env.update(USL_DATA_DIR=str(shared_data_dir), USL_HOME=str(usl_home), PYTHONUNBUFFERED="1")
    process = subprocess.Popen([str(Path(sys.executable).with_name("usl")), "run"], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    deadline = time.monotonic() + 300
    for line in process.stdout:
        seen.append(line)
        if line.lstrip().startswith(signal_after) or time.monotonic() > deadline:
            break
    assert any(line.lstrip().startswith(signal_after) for line in seen), "".join(seen) + process.stderr.read()
    process.send_signal(signal.SIGTERM)
    try:
        out, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError("usl run kept running after SIGTERM")
    assert process.returncode == 130, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("usl: interrupted")
    assert "▶ model partitions" not in out  # it stopped; it did not go on to the next phase

    dagster_home = usl_home / "dagster"  # DAGSTER_HOME unset: the embedded default under USL_HOME
    assert (dagster_home / "dagster.yaml").is_file()
    assert not [p for p in usl_home.rglob("*.partial*")]
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        runs = instance.get_runs()  # none when the signal came before the first run was created
        assert len(runs) == (1 if signal_after == "✓" else len(runs)) and len(runs) <= 1
        assert all(run.status == dg.DagsterRunStatus.FAILURE for run in runs)  # none left looking alive
        assert all(run.remote_job_origin.location_name == "usl_assets" for run in runs)
        materialized = {r.event_log_entry.dagster_event.asset_key for run in runs
                        for r in instance.get_records_for_run(run.run_id).records
                        if r.event_log_entry.dagster_event_type == dg.DagsterEventType.ASSET_MATERIALIZATION}
        job = defs.resolve_implicit_global_asset_job_def()
        graph = defs.resolve_asset_graph()
        # What the run had not finished reruns: every unpartitioned asset whose parents are all materialized.
        ready = sorted((k for k in graph.materializable_asset_keys if k not in materialized
                        and graph.get(k).partitions_def is None and graph.get(k).parent_keys <= materialized),
                       key=lambda k: k.to_user_string())
        assert ready
        monkeypatch.setenv("USL_DATA_DIR", str(shared_data_dir))
        monkeypatch.setenv("USL_HOME", str(usl_home))
        rerun = execute_in_location(job, instance, run_config=console_log_config(False), asset_selection=ready[:1])
        assert rerun.success, ready[:1]

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

from usl_assets import cli
from usl_assets.recovery import recover_dead_runs
from usl_assets.responses import pools, tables as response_tables
from usl_assets_tests.release_support import cli_env, model_counts, slot_holders, table_counts  # noqa: F401

JUNK_RECORDS = 600_000  # answers to no pool prompt: quarantined one by one, so the run lasts seconds


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
    assert added == {response_tables.RESPONSES_TABLE: 805, response_tables.QUARANTINE_TABLE: JUNK_RECORDS}
    assert after == {table: n + added.get(table, 0) for table, n in before.items()}
    assert model_counts(database, "earlier-model") == {response_tables.RESPONSES_TABLE: 300, response_tables.QUARANTINE_TABLE: 505}

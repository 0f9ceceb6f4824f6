"""Issue 22, part 1: `usl add-model` waiting for the `warehouse` slot that another run holds. A real second process
(warehouse_holder.py: a run tagged as a `usl run` phase whose step in the pool sleeps) holds the slot on the same
instance; the waiting command sleeps (< 5 % of a core), says who holds the slot, stops within 2 s on SIGTERM with
exit 130 and nothing claimed, takes the slot of a holder killed with SIGKILL, and gives up after --wait-timeout."""

import gzip
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import dagster as dg
import psutil
import pytest

from usl_assets.cli import EXIT_SLOT_WAIT_TIMEOUT
from usl_assets.resources import WAREHOUSE_POOL
from usl_assets.responses import pools, tables as response_tables
from usl_assets.responses.sensors import ADDED_MODEL_TAG
from usl_assets_tests.conftest import REPO_ROOT
from usl_assets_tests.release_support import cli_env, model_counts  # noqa: F401
from usl_assets_tests.warehouse_holder import HOLDER_PHASE

MODEL = "waiting-model"
ANSWERS = 40
STARTUP_S = 240  # a fresh interpreter importing Dagster and the code location, on 2 busy cores
WAITING = f"waiting for the {WAREHOUSE_POOL} slot"


class Lines:
    """A process's output, line by line, read in a thread so that a test can wait for a line with a deadline."""

    def __init__(self, stream):
        self.seen: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, text: str, timeout_s: float = STARTUP_S) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if text in line:
                return line
        raise AssertionError(f"no line with {text!r}; output so far:\n" + "\n".join(self.seen[-40:]))

    def rest(self) -> list[str]:
        """What is left once the process has ended."""
        while (line := self._queue.get(timeout=30)) is not None:
            self.seen.append(line)
        return self.seen


def start(*args: str) -> tuple[subprocess.Popen, Lines, Lines]:
    process = subprocess.Popen([sys.executable, *args], cwd=REPO_ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return process, Lines(process.stdout), Lines(process.stderr)


@pytest.fixture
def holder(cli_env):  # noqa: F811
    """(process, run id) of a run in another process that holds the warehouse slot."""
    process, out, _ = start("-m", "usl_assets_tests.warehouse_holder")
    try:
        run_id = out.wait_for("holding ").split()[-1]
        yield process, run_id
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


@pytest.fixture
def model_file(shared_data_dir, tmp_path):
    records = json.loads(gzip.open(pools.public_model_files(shared_data_dir, "alpaca_eval")["gemma-7b-it"]).read())
    path = tmp_path / f"{MODEL}.json"
    path.write_text(json.dumps(records[:ANSWERS]))
    return path


def start_add_model(model_file, *options: str) -> tuple[subprocess.Popen, Lines, Lines]:
    return start("-c", "import sys; from usl_assets.cli import main; sys.exit(main(sys.argv[1:]))",
                 "add-model", "--pool", "alpaca_eval", str(model_file), "--responses-only", *options)


def cpu_share(pid: int, seconds: float) -> float:
    """The share of one core the process used over `seconds`."""
    process = psutil.Process(pid)
    before = process.cpu_times()
    time.sleep(seconds)
    after = process.cpu_times()
    return (after.user + after.system - before.user - before.system) / seconds


def pool_runs(instance: dg.DagsterInstance) -> tuple[set[str], set[str]]:
    """(runs holding a warehouse slot, runs queued for one)."""
    info = instance.event_log_storage.get_concurrency_info(WAREHOUSE_POOL)
    return {slot.run_id for slot in info.claimed_slots}, {step.run_id for step in info.pending_steps}


def waiting_runs(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    return [run for run in instance.get_runs() if run.tags.get(ADDED_MODEL_TAG)]


def test_a_waiting_add_model_sleeps_names_the_holder_and_stops_at_once_on_sigterm(holder, model_file):
    holder_process, holder_run = holder
    waiter, out, err = start_add_model(model_file)
    try:
        line = out.wait_for(WAITING)
        assert f"held by run {holder_run} (__ephemeral_asset_job__, step holds_the_warehouse, started " in line
        assert f"launched by `usl run` (phase {HOLDER_PHASE})" in line
        assert "); waited " in line and " s of at most 5 min (--wait-timeout; Ctrl-C stops)" in line

        share = cpu_share(waiter.pid, 4.0)
        print(f"CPU while waiting: {share:.1%} of a core")
        assert share < 0.05

        sent = time.monotonic()
        waiter.send_signal(signal.SIGTERM)
        waiter.wait(timeout=30)
        stopped_after = time.monotonic() - sent
    finally:
        if waiter.poll() is None:
            waiter.kill()
    print(f"stopped {stopped_after:.2f} s after SIGTERM")
    assert stopped_after < 2.0
    assert waiter.returncode == 130
    assert err.rest()[-1].startswith("usl: interrupted")
    assert sum(WAITING in line for line in out.rest()) == 1  # one line, not one per poll

    with dg.DagsterInstance.get() as instance:
        assert pool_runs(instance) == ({holder_run}, {holder_run})  # the waiting run left nothing claimed or queued
        (waited,) = waiting_runs(instance)
        assert waited.status == dg.DagsterRunStatus.FAILURE
    assert holder_process.poll() is None


def test_a_waiting_add_model_takes_the_slot_of_a_holder_killed_with_sigkill(holder, model_file, cli_env):  # noqa: F811
    holder_process, holder_run = holder
    waiter, out, err = start_add_model(model_file)
    try:
        out.wait_for(WAITING)
        holder_process.send_signal(signal.SIGKILL)
        holder_process.wait()
        assert waiter.wait(timeout=120) == 0, "\n".join(err.rest()[-30:])
    finally:
        if waiter.poll() is None:
            waiter.kill()
    output = "\n".join(out.rest())
    assert f"crash recovery: run {holder_run} (__ephemeral_asset_job__, was STARTED): marked failed, slots freed" \
           in output
    assert f"{ANSWERS} responses loaded" in output

    with dg.DagsterInstance.get() as instance:
        assert instance.get_run_by_id(holder_run).status == dg.DagsterRunStatus.FAILURE
        assert [run.status for run in waiting_runs(instance)] == [dg.DagsterRunStatus.SUCCESS]
        assert pool_runs(instance) == (set(), set())
    assert model_counts(cli_env["warehouse"].database_path(), MODEL)[response_tables.RESPONSES_TABLE] == ANSWERS


def test_wait_timeout_gives_up_with_one_line_and_a_non_zero_exit(holder, model_file):
    _, holder_run = holder
    waiter, out, err = start_add_model(model_file, "--wait-timeout", "3")
    try:
        assert waiter.wait(timeout=STARTUP_S) == EXIT_SLOT_WAIT_TIMEOUT
    finally:
        if waiter.poll() is None:
            waiter.kill()
    errors = [line for line in err.rest() if line.startswith("usl")]
    assert len(errors) == 1, err.seen[-30:]
    assert errors[0].startswith(f"usl: error: gave up waiting for the {WAREHOUSE_POOL} slot after 3 s")
    assert f"held by run {holder_run}" in errors[0] and "--wait-timeout SECONDS" in errors[0]
    assert sum(WAITING in line for line in out.rest()) == 1

    with dg.DagsterInstance.get() as instance:
        assert pool_runs(instance) == ({holder_run}, {holder_run})
        (waited,) = waiting_runs(instance)
        assert waited.status == dg.DagsterRunStatus.FAILURE

"""Crash recovery: runs whose process died (SIGKILL, OOM, a lost terminal) are marked failed and their pool slots
freed, so the `warehouse` pool (one slot) is never held by a run that will not finish.

Dagster frees a run's slots when the run ends; a run worker killed with SIGKILL never ends, so it stays STARTED
and keeps its slot. Dagster's run monitoring (daemon) catches runs that never start (`start_timeout_seconds`) and
frees slots of ended runs (`free_slots_after_run_end_seconds`), but the default run launcher cannot check whether
a started worker is alive, and `usl run` / `usl add-model` execute in process without a daemon. So at start-up
these commands call `recover_dead_runs`, and a step of theirs waiting for a pool slot calls it every few seconds
on the runs holding that slot (slot_wait.py):

- every run STARTED / STARTING / NOT_STARTED whose process is gone is reported failed (PIPELINE_FAILURE, with
  the reason) and its slots freed. Every executor and launcher logs an engine event with the pid of the process
  running the steps (in-process executor, multiprocess parent, run worker); the run is dead when each of those
  pids is gone, a zombie, or now a newer process (pid reused after the run started);
- a run that logged no pid and is older than `start_timeout_seconds` never got a process: failed likewise;
- a finished run that still holds or waits for slots (its end was reported but the slots were not freed) gets
  them freed.

Pids are checked on this machine: the check is for instances whose runs run here (the default run launcher).
On Kubernetes the k8s run launcher's worker health checks (run monitoring) do this job.
"""

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

import dagster as dg
import psutil

IN_FLIGHT = [dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.NOT_STARTED]
FINISHED = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]
START_TIMEOUT_SECONDS = 180.0  # as Dagster's run monitoring default
PID_START_SLACK_SECONDS = 2.0  # a process created this long after the run started cannot be the run's


@dataclass(frozen=True)
class CleanedRun:
    run_id: str
    job_name: str
    status: str  # the status it had
    action: str  # "marked failed, slots freed" or "slots freed"
    reason: str

    def line(self) -> str:
        return f"run {self.run_id} ({self.job_name}, was {self.status}): {self.action} — {self.reason}"


def run_pids(instance: dg.DagsterInstance, run_id: str) -> list[int]:
    """Pids the run's engine events name (the processes that executed its steps)."""
    pids = []
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        data = entry.dagster_event.engine_event_data if entry.dagster_event else None
        value = data.metadata.get("pid") if data is not None and data.metadata else None
        if value is not None and str(value.value).isdigit():
            pids.append(int(value.value))
    return sorted(set(pids))


def process_alive(pid: int, run_started: float) -> bool:
    """True when `pid` is a live process that existed when the run started (not a reused pid)."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return process.create_time() <= run_started + PID_START_SLACK_SECONDS
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True  # someone else's live process: never fail a run we cannot see


def dead_reason(instance: dg.DagsterInstance, record, now: float, start_timeout: float) -> str | None:
    """Why the in-flight run `record` is dead, or None when it may still be running."""
    run = record.dagster_run
    started = record.start_time or record.create_timestamp.timestamp()
    pids = run_pids(instance, run.run_id)
    if pids:
        if any(process_alive(pid, started) for pid in pids):
            return None
        return f"its process{'es' if len(pids) > 1 else ''} ({', '.join(map(str, pids))}) ended without " \
               "reporting an end (killed or crashed)"
    age = now - record.create_timestamp.timestamp()
    if age > start_timeout:
        return f"no process ever started it ({age:,.0f} s since it was created, limit {start_timeout:,.0f} s)"
    return None


def recover_dead_runs(instance: dg.DagsterInstance, start_timeout: float = START_TIMEOUT_SECONDS,
                      now: float | None = None, run_ids: Collection[str] | None = None) -> list[CleanedRun]:
    """Fails every dead in-flight run and frees the slots of every run that cannot use them; what was cleaned.
    `run_ids` limits the check to those runs (e.g. the holders of a slot)."""
    if run_ids is not None and not run_ids:
        return []
    only = {} if run_ids is None else {"run_ids": list(run_ids)}
    now = time.time() if now is None else now
    cleaned = []
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=IN_FLIGHT, **only)):
        reason = dead_reason(instance, record, now, start_timeout)
        if reason is None:
            continue
        run = record.dagster_run
        instance.report_run_failed(run, message=f"USL crash recovery: {reason}")
        _free_slots(instance, run.run_id)
        cleaned.append(CleanedRun(run.run_id, run.job_name, run.status.value, "marked failed, slots freed", reason))
    storage = instance.event_log_storage
    if storage.supports_global_concurrency_limits:
        holders = storage.get_concurrency_run_ids() - {c.run_id for c in cleaned}
        if run_ids is not None:
            holders &= set(run_ids)
        if holders:
            for record in instance.get_run_records(filters=dg.RunsFilter(run_ids=list(holders),
                                                                          statuses=FINISHED)):
                run = record.dagster_run
                _free_slots(instance, run.run_id)
                cleaned.append(CleanedRun(run.run_id, run.job_name, run.status.value, "slots freed",
                                          "the run had ended but still held or waited for pool slots"))
    return cleaned


def _free_slots(instance: dg.DagsterInstance, run_id: str) -> None:
    if instance.event_log_storage.supports_global_concurrency_limits:
        instance.event_log_storage.free_concurrency_slots_for_run(run_id)


def recover_and_report(instance: dg.DagsterInstance, log: Callable[[str], None] = print,
                       run_ids: Collection[str] | None = None) -> list[CleanedRun]:
    """recover_dead_runs, with one line per cleaned run (nothing printed when there was nothing to clean)."""
    cleaned = recover_dead_runs(instance, run_ids=run_ids)
    for item in cleaned:
        log(f"crash recovery: {item.line()}")
    return cleaned

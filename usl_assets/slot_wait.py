"""Waiting for a pool slot (the `warehouse` pool: one DuckDB writer at a time) in a run the CLI executes.

A step of a `usl` run whose pool is full waits here (launch.py hands it over): it asks Dagster for the slot once a
second and sleeps in between, so a wait costs no CPU. While it waits it

- prints one line saying who holds the slot (run, job, step, when it started, which command or the UI launched
  it) and how long it has waited, again every minute and whenever the holder changes;
- releases a holder whose process is gone (recovery.py decides that, as it does at start-up), so the slot of a
  killed run is picked up in seconds;
- gives up after `timeout_s` (`--wait-timeout`, 0 = never) with SlotWaitTimeout, one line.

Ctrl-C and SIGTERM end the wait at once (launch.py); Dagster then drops the step's place in the pool's queue.
"""

import argparse
import datetime as dt
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import dagster as dg

from usl_assets.recovery import recover_and_report
from usl_assets.settings import SlotWaitTimeout

DEFAULT_WAIT_TIMEOUT_S = 300.0
POLL_S = 1.0  # how often the slot is asked for
HOLDER_CHECK_S = 5.0  # how often the holders are looked up (and released when their process is gone)
REPORT_EVERY_S = 60.0  # the waiting line again, even when nothing changed
# Tags Dagster puts on runs it launches itself (sensors, schedules, backfills, re-executions).
SENSOR_TAG, SCHEDULE_TAG, BACKFILL_TAG = "dagster/sensor_name", "dagster/schedule_name", "dagster/backfill"
PARENT_RUN_TAG = "dagster/parent_run_id"


def add_wait_timeout_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wait-timeout", type=non_negative_seconds, default=DEFAULT_WAIT_TIMEOUT_S,
                        metavar="SECONDS",
                        help="how long a step may wait for the warehouse while another run holds it, then give up "
                             f"(default {DEFAULT_WAIT_TIMEOUT_S:.0f}; 0 waits as long as it takes)")


def non_negative_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give 0 or a positive number of seconds")
    return seconds


@dataclass
class SlotWait:
    """How the steps of one run wait for a pool slot; `gave_up` keeps the timeout Dagster turned into a failed run."""

    timeout_s: float = DEFAULT_WAIT_TIMEOUT_S
    log: Callable[[str], None] = print
    gave_up: SlotWaitTimeout | None = None

    def wait(self, instance: dg.DagsterInstance, run_id: str, pool: str, step_key: str,
             try_claim: Callable[[], bool]) -> None:
        """Returns once `try_claim()` got the slot for `step_key`; raises SlotWaitTimeout past the timeout."""
        started = time.monotonic()
        last_check = last_line = float("-inf")
        holders: list[SlotHolder] = []
        reported: list[str] | None = None
        while not try_claim():
            now = time.monotonic()
            if now - last_check >= HOLDER_CHECK_S:
                last_check = now
                holders = release_dead_holders(instance, pool, run_id, self.log)
                if [h.run_id for h in holders] != reported or now - last_line >= REPORT_EVERY_S:
                    reported, last_line = [h.run_id for h in holders], now
                    self.log(f"waiting for the {pool} slot (step {step_key}): {holders_text(holders)}; waited "
                             f"{duration(now - started)}{self._limit_text()}")
            if self.timeout_s and now - started >= self.timeout_s:
                self.gave_up = SlotWaitTimeout(
                    f"gave up waiting for the {pool} slot after {duration(self.timeout_s)} (step {step_key}): "
                    f"{holders_text(holders)}; try again later, or wait longer with --wait-timeout SECONDS "
                    "(0 waits as long as it takes)")
                raise self.gave_up
            time.sleep(POLL_S)

    def _limit_text(self) -> str:
        if not self.timeout_s:
            return " (no time limit; Ctrl-C stops)"
        return f" of at most {duration(self.timeout_s)} (--wait-timeout; Ctrl-C stops)"


@dataclass(frozen=True)
class SlotHolder:
    run_id: str
    step_key: str
    job_name: str
    started: float | None  # when the run started (None: unknown run)
    origin: str  # which command, sensor or the UI launched it

    def text(self, now: float) -> str:
        if self.started is None:
            return f"run {self.run_id} (step {self.step_key}; not in this instance's run history)"
        when = dt.datetime.fromtimestamp(self.started, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        return (f"run {self.run_id} ({self.job_name}, step {self.step_key}, started {when}, "
                f"{duration(now - self.started)} ago, launched by {self.origin})")


def slot_holders(instance: dg.DagsterInstance, pool: str, waiting_run_id: str) -> list[SlotHolder]:
    """The runs holding the pool's slots: claimed, or assigned to a step that has not claimed it yet."""
    info = instance.event_log_storage.get_concurrency_info(pool)
    steps = [(slot.run_id, slot.step_key) for slot in info.claimed_slots]
    steps += [(step.run_id, step.step_key) for step in info.pending_steps
              if step.assigned_timestamp is not None and (step.run_id, step.step_key) not in steps]
    holders = []
    for run_id, step_key in steps:
        if run_id == waiting_run_id:
            continue
        record = instance.get_run_record_by_id(run_id)
        if record is None:
            holders.append(SlotHolder(run_id, step_key, "?", None, "?"))
            continue
        started = record.start_time or record.create_timestamp.timestamp()
        holders.append(SlotHolder(run_id, step_key, record.dagster_run.job_name, started,
                                  run_origin(record.dagster_run.tags)))
    return holders


def release_dead_holders(instance: dg.DagsterInstance, pool: str, waiting_run_id: str,
                         log: Callable[[str], None]) -> list[SlotHolder]:
    """The holders after failing those whose process is gone and freeing their slots (one line each)."""
    holders = slot_holders(instance, pool, waiting_run_id)
    if holders and recover_and_report(instance, log, run_ids={h.run_id for h in holders}):
        holders = slot_holders(instance, pool, waiting_run_id)
    return holders


def holders_text(holders: list[SlotHolder]) -> str:
    if not holders:
        return "no run holds it now (queued behind other steps, or the pool's limit is 0: see the UI, Concurrency)"
    now = time.time()
    return "held by " + "; ".join(holder.text(now) for holder in holders)


def run_origin(tags: dict[str, str]) -> str:
    """Which command, sensor or part of the UI launched a run, from its tags."""
    from usl_assets.pipeline import PHASE_TAG  # pipeline imports launch.py, which imports this module
    from usl_assets.responses.sensors import ADDED_MODEL_TAG, AFTER_ADDED_MODEL_TAG

    # In order: a re-execution keeps its parent's tags, so it is named first.
    origins = ((PARENT_RUN_TAG, "a re-execution of run {} (Dagster UI)"), (BACKFILL_TAG, "backfill {} (Dagster UI)"),
               (SENSOR_TAG, "the sensor {}"), (SCHEDULE_TAG, "the schedule {}"), (PHASE_TAG, "`usl run` (phase {})"),
               (ADDED_MODEL_TAG, "`usl add-model` ({})"),
               (AFTER_ADDED_MODEL_TAG, "`usl add-model` (the leaderboards after {})"))
    for tag, text in origins:
        if tag in tags:
            return text.format(tags[tag])
    return "the Dagster UI (or another Dagster client)"


def duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min" + (f" {seconds % 60} s" if seconds % 60 else "")
    return f"{seconds // 3600} h" + (f" {seconds % 3600 // 60} min" if seconds % 3600 // 60 else "")
